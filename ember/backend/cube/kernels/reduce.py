"""Reductions along one dim: ``lane`` kernels (a thread per output, for many short
rows) and ``tree`` kernels (a workgroup per output, reducing in workgroup memory).
A long reduction with few outputs is split over several workgroups per output and
finished by a second pass. Also argmax/argmin and the fused softmax/log_softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, coalesce, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import rows
from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, ReduceOp
from ember.errors import ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_WG = wgsl.WORKGROUP
_MR = wgsl.MAX_RANK
_OFF = 2 + _MR  # info: n_out, rank, outer shape, [offset, strides] per operand
_COMBINE = {
    ReduceOp.SUM: {"f32": "({a} + {b})", "i32": "({a} + {b})", "i64": "add_l({a}, {b})"},
    ReduceOp.PROD: {"f32": "({a} * {b})", "i32": "({a} * {b})", "i64": "mul_l({a}, {b})"},
    ReduceOp.MAX: {"f32": "max_f({a}, {b})", "i32": "max({a}, {b})", "i64": "max_l({a}, {b})"},
    ReduceOp.MIN: {"f32": "min_f({a}, {b})", "i32": "min({a}, {b})", "i64": "min_l({a}, {b})"},
    ReduceOp.ANY: {"bool": "({a} || {b})"},
    ReduceOp.ALL: {"bool": "({a} && {b})"},
}
_COMBINE[ReduceOp.MEAN] = _COMBINE[ReduceOp.SUM]
_INIT = {
    ReduceOp.SUM: {"f32": "0.0", "i32": "0", "i64": wgsl.ZERO["i64"]},
    ReduceOp.PROD: {"f32": "1.0", "i32": "1", "i64": "i64(1u, 0u)"},
    ReduceOp.MAX: {"f32": "-inf_f()", **wgsl.INT_MIN},
    ReduceOp.MIN: {"f32": "inf_f()", **wgsl.INT_MAX},
    ReduceOp.ANY: {"bool": "false"},
    ReduceOp.ALL: {"bool": "true"},
}
_INIT[ReduceOp.MEAN] = _INIT[ReduceOp.SUM]


def _geometry(
    x: CubeTensor, dim: int, extra: Sequence[tuple[int, ...]] = ()
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The outer shape (every dim but ``dim``) with x's and ``extra`` strides, coalesced."""
    shape = x.shape[:dim] + x.shape[dim + 1 :]
    strides = [x.strides[:dim] + x.strides[dim + 1 :]] + [s[:dim] + s[dim + 1 :] for s in extra]
    cshape, cstrides = coalesce(shape, *strides)
    if len(cshape) > _MR:
        raise ShapeError(
            f"ember: cube: a reduction over shape {list(x.shape)} needs {len(cshape)} strided dims; the GPU "
            f"kernels take at most {_MR}; make the tensor contiguous or merge dims with reshape first"
        )
    return cshape, cstrides


def _info_head(n_out: int, cshape: tuple[int, ...], blocks: list[tuple[int, tuple[int, ...]]]) -> list[int]:
    rank = len(cshape)
    info = [n_out, rank, *cshape] + [0] * (_MR - rank)
    for offset, strides in blocks:
        info.append(offset & 0xFFFF_FFFF)
        info.extend(s & 0xFFFF_FFFF for s in strides)
        info.extend([0] * (_MR - rank))
    return info


def _tail_at(n_blocks: int) -> int:
    return _OFF + n_blocks * (1 + _MR)


def _reduce_source(op: ReduceOp, mode: str, src: Storage, dst: Storage, ctype: str) -> KernelSource:
    p = _tail_at(1)  # n, rstride, count, chunk, groups per output
    combine = _COMBINE[op][ctype]
    init = _INIT[op][ctype]
    value = wgsl.load(src, "in0", "u32(o0 + i32(r) * rs)")
    if op == ReduceOp.MEAN:
        final = f"select(acc / f32(info[{p + 2}u]), nan_f(), info[{p + 2}u] == 0u)"
    else:
        final = "acc"
    head = [f"    let n = info[{p}u];", f"    let rs = bitcast<i32>(info[{p + 1}u]);"]
    if mode == "lane":
        body = "\n".join(
            [
                "    if (gi >= info[0]) { return; }",
                wgsl.strided_offsets("gi", "info[1]", 2, [("o0", _OFF)]),
                *head,
                f"    var acc: {ctype} = {init};",
                f"    for (var r = 0u; r < n; r++) {{ acc = {combine.format(a='acc', b=value)}; }}",
                f"    out0[gi] = {wgsl.store(dst, wgsl.convert(final, ctype, dst.compute))};",
            ]
        )
        main = wgsl.main_linear(body)
        decl = ""
    else:
        body = "\n".join(
            [
                f"    let groups = info[{p + 4}u];",
                "    if (wid >= info[0] * groups) { return; }",
                "    let o = wid / groups;",
                "    let g = wid % groups;",
                wgsl.strided_offsets("o", "info[1]", 2, [("o0", _OFF)]),
                *head,
                f"    let chunk = info[{p + 3}u];",
                "    let end = min(n, (g + 1u) * chunk);",
                f"    var acc: {ctype} = {init};",
                f"    for (var r = g * chunk + lid; r < end; r += {_WG}u) {{ acc = {combine.format(a='acc', b=value)}; }}",
                "    sh[lid] = acc;",
                "    workgroupBarrier();",
                f"    for (var s = {_WG // 2}u; s > 0u; s = s >> 1u) {{",
                f"        if (lid < s) {{ sh[lid] = {combine.format(a='sh[lid]', b='sh[lid + s]')}; }}",
                "        workgroupBarrier();",
                "    }",
                "    if (lid == 0u) {",
                "        let acc = sh[0];",
                f"        out0[wid] = {wgsl.store(dst, wgsl.convert(final, ctype, dst.compute))};",
                "    }",
            ]
        )
        main = wgsl.main_groups(body)
        decl = f"var<workgroup> sh: array<{ctype}, {_WG}>;"
    code = "\n".join([decl, main])
    source = "\n".join([wgsl.bindings([src], [dst]), wgsl.helpers_for(code + dst.store), code])
    return KernelSource(f"reduce_{op}_{mode}", source, 1, 1)


def _launch_reduce(backend, op, x, dim, out_storage, count, out_shape) -> CubeTensor:
    n = x.shape[dim]
    n_out = _numel(out_shape)
    if n_out == 0:
        return backend.empty(out_shape, out_storage)
    cshape, (strides,) = _geometry(x, dim)
    ctype = "bool" if op in (ReduceOp.ANY, ReduceOp.ALL) else x.storage.compute
    groups, chunk, mode = 1, n, "lane"
    # A workgroup per output when rows are long and either few or contiguous (its
    # threads then read neighbours); a thread per output when many outputs each walk
    # a strided column (neighbouring threads then read neighbours).
    if n > 64 and (n_out < 8192 or abs(x.strides[dim]) == 1):
        mode = "tree"
        if n_out < 128 and n > 8192:
            groups = min(-(-n // 4096), 256)
            per_group = -(-n // groups)
            chunk = -(-per_group // _WG) * _WG
            groups = -(-n // chunk)
        elif x.strides[dim] == 1:
            return _launch_rows(backend, op, x, dim, cshape, strides, ctype, out_storage, out_shape, count)
    if groups == 1:
        return _launch_one(backend, op, x, dim, cshape, strides, ctype, out_storage, out_shape, count, chunk, 1, mode)
    # Split: each of `groups` workgroups reduces one chunk; a second pass reduces the partials.
    partial_dtype = {"f32": DType.FLOAT32, "i32": DType.INT32, "i64": DType.INT64, "bool": DType.BOOL}[ctype]
    first = ReduceOp.SUM if op == ReduceOp.MEAN else op
    partial = _launch_one(
        backend,
        first,
        x,
        dim,
        cshape,
        strides,
        ctype,
        backend.storage(partial_dtype),
        (n_out, groups),
        n,
        chunk,
        groups,
        "tree",
    )
    final = _launch_reduce(backend, op, partial, 1, out_storage, count, (n_out, 1))
    return final.view(out_shape, contiguous_strides(out_shape), 0)


def _launch_one(backend, op, x, dim, cshape, strides, ctype, out_storage, out_shape, count, chunk, groups, mode):
    n = x.shape[dim]
    n_out = _numel(cshape)
    key = ("reduce", op, mode, x.storage, out_storage)
    kernel = backend.cache.get(key, lambda: _reduce_source(op, mode, x.storage, out_storage, ctype))
    out = backend.empty(tuple(out_shape), out_storage)
    info = _info_head(n_out, cshape, [(x.offset, strides)])
    info += [n, x.strides[dim] & 0xFFFF_FFFF, count, chunk, groups]
    blocks = -(-n_out // _WG) if mode == "lane" else n_out * groups
    backend.runtime.launch(kernel, [x.buffer, out.buffer], info, blocks)
    return out


def _aligned(x: CubeTensor, n: int, outer_strides) -> bool:
    """Whether every row of ``x`` (``n`` long, stride 1) is whole, 16-byte aligned quads."""
    return rows.vectorisable(x.storage) and n % 4 == 0 and x.offset % 4 == 0 and all(s % 4 == 0 for s in outer_strides)


def _launch_rows(backend, op, x, dim, cshape, strides, ctype, out_storage, out_shape, count):
    """One workgroup per output over contiguous rows (:mod:`.rows`)."""
    n = x.shape[dim]
    n_out = _numel(cshape)
    wg = rows.workgroup_size(n, backend.runtime.cpu)
    vec = _aligned(x, n, strides)
    subgroups = backend.runtime.subgroups
    key = ("reduce_rows", op, x.storage, out_storage, wg, vec, subgroups)
    p = _tail_at(1)

    def build() -> KernelSource:
        final = "acc"
        if op == ReduceOp.MEAN:
            final = f"select(acc / f32(info[{p + 2}u]), nan_f(), info[{p + 2}u] == 0u)"
        return rows.reduce_source(
            op,
            x.storage,
            out_storage,
            ctype,
            _COMBINE[op][ctype],
            _INIT[op][ctype],
            final,
            [f"    let n = info[{p}u];"],
            wgsl.strided_offsets("wid", "info[1]", 2, [("o0", _OFF)]),
            wg,
            vec,
            subgroups,
        )

    kernel = backend.cache.get(key, build)
    out = backend.empty(tuple(out_shape), out_storage)
    info = _info_head(n_out, cshape, [(x.offset, strides)]) + [n, 1, count]
    backend.runtime.launch(kernel, [x.buffer, out.buffer], info, n_out)
    return out


def _numel(shape) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


def reduce(backend: KernelContext, op: ReduceOp, x: CubeTensor, dim: int) -> CubeTensor:
    out_shape = x.shape[:dim] + (1,) + x.shape[dim + 1 :]
    out_storage = backend.storage(DType.BOOL) if op in (ReduceOp.ANY, ReduceOp.ALL) else x.storage
    return _launch_reduce(backend, op, x, dim, out_storage, x.shape[dim], out_shape)


# ---------------------------------------------------------------------- arg reductions
def _arg_source(op: ArgReduceOp, mode: str, src: Storage, dst: Storage) -> KernelSource:
    ctype = src.compute
    p = _tail_at(1)
    cmp = wgsl.BINARY[BinaryOp.GT if op == ArgReduceOp.ARGMAX else BinaryOp.LT][ctype].format(a="va", b="vb")
    equal = wgsl.BINARY[BinaryOp.EQ][ctype].format(a="va", b="vb")
    nan_rule = (
        "    let na = is_nan_f(va); let nb = is_nan_f(vb);\n    if (na || nb) { if (na && nb) { return ia < ib; } return na; }\n"
        if ctype == "f32"
        else ""
    )
    better = (
        f"fn better_i(va: {ctype}, ia: i32, vb: {ctype}, ib: i32) -> bool {{\n"
        "    if (ib < 0) { return true; }\n    if (ia < 0) { return false; }\n"
        f"{nan_rule}"
        f"    if ({equal}) {{ return ia < ib; }}\n    return {cmp};\n}}"
    )
    value = wgsl.load(src, "in0", "u32(o0 + i32(r) * rs)")
    head = [f"    let n = info[{p}u];", f"    let rs = bitcast<i32>(info[{p + 1}u]);"]
    step = f"let v = {value}; if (better_i(v, i32(r), best, bi)) {{ best = v; bi = i32(r); }}"
    if mode == "lane":
        body = "\n".join(
            [
                "    if (gi >= info[0]) { return; }",
                wgsl.strided_offsets("gi", "info[1]", 2, [("o0", _OFF)]),
                *head,
                f"    var best: {ctype} = {wgsl.ZERO[ctype]};",
                "    var bi: i32 = -1;",
                f"    for (var r = 0u; r < n; r++) {{ {step} }}",
                f"    out0[gi] = {wgsl.store(dst, wgsl.convert('bi', 'i32', dst.compute))};",
            ]
        )
        main, decl = wgsl.main_linear(body), ""
    else:
        body = "\n".join(
            [
                "    if (wid >= info[0]) { return; }",
                wgsl.strided_offsets("wid", "info[1]", 2, [("o0", _OFF)]),
                *head,
                f"    var best: {ctype} = {wgsl.ZERO[ctype]};",
                "    var bi: i32 = -1;",
                f"    for (var r = lid; r < n; r += {_WG}u) {{ {step} }}",
                "    shv[lid] = best;",
                "    shi[lid] = bi;",
                "    workgroupBarrier();",
                f"    for (var s = {_WG // 2}u; s > 0u; s = s >> 1u) {{",
                "        if (lid < s && better_i(shv[lid + s], shi[lid + s], shv[lid], shi[lid])) {",
                "            shv[lid] = shv[lid + s];",
                "            shi[lid] = shi[lid + s];",
                "        }",
                "        workgroupBarrier();",
                "    }",
                f"    if (lid == 0u) {{ out0[wid] = {wgsl.store(dst, wgsl.convert('shi[0]', 'i32', dst.compute))}; }}",
            ]
        )
        main = wgsl.main_groups(body)
        decl = f"var<workgroup> shv: array<{ctype}, {_WG}>;\nvar<workgroup> shi: array<i32, {_WG}>;"
    code = "\n".join([decl, better, main])
    source = "\n".join([wgsl.bindings([src], [dst]), wgsl.helpers_for(code), code])
    return KernelSource(f"{op}_{mode}", source, 1, 1)


def arg_reduce(backend: KernelContext, op: ArgReduceOp, x: CubeTensor, dim: int) -> CubeTensor:
    n = x.shape[dim]
    out_shape = x.shape[:dim] + (1,) + x.shape[dim + 1 :]
    out_storage = backend.storage(DType.INT64)
    out = backend.empty(out_shape, out_storage)
    n_out = x.size // n if n else 0
    out.bounds = (0, max(n - 1, 0))
    if n_out == 0:
        return out
    cshape, (strides,) = _geometry(x, dim)
    mode = "tree" if n > 64 and n_out < 8192 else "lane"
    key = ("arg", op, mode, x.storage)
    kernel = backend.cache.get(key, lambda: _arg_source(op, mode, x.storage, out_storage))
    info = _info_head(n_out, cshape, [(x.offset, strides)]) + [n, x.strides[dim] & 0xFFFF_FFFF]
    backend.runtime.launch(kernel, [x.buffer, out.buffer], info, -(-n_out // _WG) if mode == "lane" else n_out)
    return out


# ---------------------------------------------------------------------- softmax
def _softmax_source(log: bool, mode: str, src: Storage) -> KernelSource:
    p = _tail_at(2)
    value = wgsl.load(src, "in0", "u32(o0 + i32(r) * rs)")
    if log:
        result = "v - m - log(total)"
    else:
        result = "exp(v - m) / total"
    write = f"out0[u32(o1 + i32(r) * ws)] = {wgsl.store(src, result)};"
    head = [
        f"    let n = info[{p}u];",
        f"    let rs = bitcast<i32>(info[{p + 1}u]);",
        f"    let ws = bitcast<i32>(info[{p + 2}u]);",
    ]
    if mode == "lane":
        body = "\n".join(
            [
                "    if (gi >= info[0]) { return; }",
                wgsl.strided_offsets("gi", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)]),
                *head,
                "    var m = -inf_f();",
                f"    for (var r = 0u; r < n; r++) {{ m = max_f(m, {value}); }}",
                "    var total = 0.0;",
                f"    for (var r = 0u; r < n; r++) {{ total += exp({value} - m); }}",
                f"    for (var r = 0u; r < n; r++) {{ let v = {value}; {write} }}",
            ]
        )
        main, decl = wgsl.main_linear(body), ""
    else:

        def tree(combine: str) -> str:
            return (
                f"    for (var s = {_WG // 2}u; s > 0u; s = s >> 1u) {{\n"
                f"        if (lid < s) {{ sh[lid] = {combine}; }}\n"
                "        workgroupBarrier();\n"
                "    }"
            )

        body = "\n".join(
            [
                "    if (wid >= info[0]) { return; }",
                wgsl.strided_offsets("wid", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)]),
                *head,
                "    var acc = -inf_f();",
                f"    for (var r = lid; r < n; r += {_WG}u) {{ acc = max_f(acc, {value}); }}",
                "    sh[lid] = acc;",
                "    workgroupBarrier();",
                tree("max_f(sh[lid], sh[lid + s])"),
                "    let m = sh[0];",
                "    workgroupBarrier();",
                "    acc = 0.0;",
                f"    for (var r = lid; r < n; r += {_WG}u) {{ acc += exp({value} - m); }}",
                "    sh[lid] = acc;",
                "    workgroupBarrier();",
                tree("sh[lid] + sh[lid + s]"),
                "    let total = sh[0];",
                f"    for (var r = lid; r < n; r += {_WG}u) {{ let v = {value}; {write} }}",
            ]
        )
        main = wgsl.main_groups(body)
        decl = f"var<workgroup> sh: array<f32, {_WG}>;"
    code = "\n".join([decl, main])
    source = "\n".join([wgsl.bindings([src], [src]), wgsl.helpers_for(code + src.store), code])
    return KernelSource(f"{'log_' if log else ''}softmax_{mode}", source, 1, 1)


def softmax(backend: KernelContext, x: CubeTensor, dim: int, log: bool) -> CubeTensor:
    if x.storage.compute != "f32":
        return NotImplemented
    out = backend.empty(x.shape, x.storage)
    n = x.shape[dim]
    if x.size == 0:
        return out
    out_strides = contiguous_strides(x.shape)
    cshape, (strides, ostrides) = _geometry(x, dim, [out_strides])
    n_out = x.size // n
    if n > 64 and x.strides[dim] == 1 and out_strides[dim] == 1:
        wg = rows.workgroup_size(n, backend.runtime.cpu)
        vec = _aligned(x, n, strides)
        cache = rows.cache_slots(n, wg) if vec else 0
        subgroups = backend.runtime.subgroups
        p = _tail_at(2)
        head = [f"    let n = info[{p}u];"]
        offsets = wgsl.strided_offsets("wid", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)])
        kernel = backend.cache.get(
            ("softmax_rows", log, x.storage, wg, vec, subgroups, cache),
            lambda: rows.softmax_source(log, x.storage, head, offsets, wg, vec, subgroups, cache),
        )
        info = _info_head(n_out, cshape, [(x.offset, strides), (0, ostrides)]) + [n]
        backend.runtime.launch(kernel, [x.buffer, out.buffer], info, n_out)
        return out
    mode = "tree" if n > 64 and n_out < 8192 else "lane"
    key = ("softmax", log, mode, x.storage)
    kernel = backend.cache.get(key, lambda: _softmax_source(log, mode, x.storage))
    info = _info_head(n_out, cshape, [(x.offset, strides), (0, ostrides)])
    info += [n, x.strides[dim] & 0xFFFF_FFFF, out_strides[dim]]
    backend.runtime.launch(kernel, [x.buffer, out.buffer], info, -(-n_out // _WG) if mode == "lane" else n_out)
    return out

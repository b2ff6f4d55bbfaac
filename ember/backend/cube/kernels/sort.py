"""Stable argsort along one dim (NaN sorts as the largest value).

Short lines: each element counts the elements that sort before it (its rank) and
writes its index there, one launch. Long lines: a bitonic network over (key, index)
pairs padded to a power of two; comparing the index on ties makes it stable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels.reduce import _geometry, _info_head, _tail_at
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_WG = wgsl.WORKGROUP
_MR = wgsl.MAX_RANK
_OFF = 2 + _MR
_RANK_MAX = 2048  # longest line sorted by counting ranks


def _order_fn(ct: str) -> str:
    """``before(a, ia, b, ib, desc)``: whether (a, ia) sorts before (b, ib)."""
    if ct == "f32":
        less = (
            "let na = is_nan_f(a); let nb = is_nan_f(b);\n"
            "    if (na || nb) { if (na && nb) { return ia < ib; } return select(nb, na, desc); }\n"
        )
    else:
        less = ""
    equal = wgsl.BINARY[BinaryOp.EQ][ct].format(a="a", b="b")
    lt = wgsl.BINARY[BinaryOp.LT][ct].format(a="a", b="b")
    gt = wgsl.BINARY[BinaryOp.GT][ct].format(a="a", b="b")
    return (
        f"fn before_i(a: {ct}, ia: i32, b: {ct}, ib: i32, desc: bool) -> bool {{\n"
        f"    {less}"
        f"    if ({equal}) {{ return ia < ib; }}\n"
        f"    return select({lt}, {gt}, desc);\n"
        "}"
    )


def _rank_source(st: Storage, out: Storage) -> KernelSource:
    ct = st.compute
    p = _tail_at(2)
    body = "\n".join(
        [
            f"    let n = info[{p}u];",
            "    if (gi >= info[0] * n) { return; }",
            "    let line = gi / n;",
            "    let i = gi % n;",
            wgsl.strided_offsets("line", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)]),
            f"    let rs = bitcast<i32>(info[{p + 1}u]);",
            f"    let ws = bitcast<i32>(info[{p + 2}u]);",
            f"    let desc = info[{p + 3}u] != 0u;",
            f"    let key = {wgsl.load(st, 'in0', 'u32(o0 + i32(i) * rs)')};",
            "    var rank = 0;",
            "    for (var j = 0u; j < n; j++) {",
            f"        if (before_i({wgsl.load(st, 'in0', 'u32(o0 + i32(j) * rs)')}, i32(j), key, i32(i), desc)) {{ rank += 1; }}",
            "    }",
            f"    out0[u32(o1 + rank * ws)] = {wgsl.store(out, wgsl.convert('i32(i)', 'i32', out.compute))};",
        ]
    )
    code = _order_fn(ct) + "\n" + wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([st], [out]), wgsl.helpers_for(code), code])
    return KernelSource("argsort_rank", source, 1, 1)


def _bitonic_init_source(st: Storage) -> KernelSource:
    ct = st.compute
    p = _tail_at(1)
    body = "\n".join(
        [
            f"    let n = info[{p}u]; let size = info[{p + 1}u];",
            "    if (gi >= info[0] * size) { return; }",
            "    let line = gi / size;",
            "    let i = gi % size;",
            wgsl.strided_offsets("line", "info[1]", 2, [("o0", _OFF)]),
            f"    let rs = bitcast<i32>(info[{p + 2}u]);",
            f"    var key: {ct} = {wgsl.ZERO[ct]};",
            f"    if (i < n) {{ key = {wgsl.load(st, 'in0', 'u32(o0 + i32(i) * rs)')}; }}",
            "    out0[gi] = key;",
            "    out1[gi] = i32(i);",
        ]
    )
    code = wgsl.main_linear(body)
    return KernelSource("argsort_init", "\n".join([wgsl.bindings([st], [ct, "i32"]), code]), 1, 2)


def _bitonic_step_source(ct: str) -> KernelSource:
    body = "\n".join(
        [
            "    let size = info[1]; let j = info[2]; let k = info[3]; let n = i32(info[4]);",
            "    let desc = info[5] != 0u;",
            "    if (gi >= info[0] * size) { return; }",
            "    let i = gi % size;",
            "    let l = i ^ j;",
            "    if (l <= i) { return; }",
            "    let base = gi - i;",
            "    let a = out0[base + i]; let ia = out1[base + i];",
            "    let b = out0[base + l]; let ib = out1[base + l];",
            "    var b_first: bool;",
            "    if (ia >= n || ib >= n) { b_first = ia >= n && (ib < n || ib < ia); }",
            "    else { b_first = before_i(b, ib, a, ia, desc); }",
            "    let up = (i & k) == 0u;",
            "    if (b_first == up) {",
            "        out0[base + i] = b; out1[base + i] = ib;",
            "        out0[base + l] = a; out1[base + l] = ia;",
            "    }",
        ]
    )
    code = _order_fn(ct) + "\n" + wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([], [ct, "i32"]), wgsl.helpers_for(code), code])
    return KernelSource("argsort_bitonic", source, 0, 2)


def _bitonic_out_source(out: Storage) -> KernelSource:
    p = _tail_at(1)
    body = "\n".join(
        [
            f"    let n = info[{p}u]; let size = info[{p + 1}u];",
            "    if (gi >= info[0] * n) { return; }",
            "    let line = gi / n;",
            "    let i = gi % n;",
            wgsl.strided_offsets("line", "info[1]", 2, [("o1", _OFF)]),
            f"    let ws = bitcast<i32>(info[{p + 2}u]);",
            f"    out0[u32(o1 + i32(i) * ws)] = {wgsl.store(out, wgsl.convert('in0[line * size + i]', 'i32', out.compute))};",
        ]
    )
    code = wgsl.main_linear(body)
    return KernelSource("argsort_out", "\n".join([wgsl.bindings(["i32"], [out]), wgsl.helpers_for(code), code]), 1, 1)


def argsort(backend: KernelContext, x: CubeTensor, dim: int, descending: bool) -> CubeTensor:
    out_storage = backend.storage(DType.INT64)
    out = backend.empty(x.shape, out_storage)
    n = x.shape[dim]
    out.bounds = (0, max(n - 1, 0))
    if x.size == 0:
        return out
    lines = x.size // n
    st = x.storage
    out_strides = contiguous_strides(x.shape)
    cshape, (strides, ostrides) = _geometry(x, dim, [out_strides])
    run = backend.runtime
    if n <= _RANK_MAX and lines * n * n <= 1 << 28:
        kernel = backend.cache.get(("argsort_rank", st), lambda: _rank_source(st, out_storage))
        info = _info_head(lines, cshape, [(x.offset, strides), (0, ostrides)])
        info += [n, x.strides[dim] & 0xFFFF_FFFF, out_strides[dim], int(descending)]
        run.launch(kernel, [x.buffer, out.buffer], info, -(-lines * n // _WG))
        return out
    size = 1 << (n - 1).bit_length()
    keys = run.alloc(lines * size * (8 if st.compute == "i64" else 4), "argsort keys")
    idx = run.alloc(lines * size * 4, "argsort indices")
    init = backend.cache.get(("argsort_init", st), lambda: _bitonic_init_source(st))
    info = _info_head(lines, cshape, [(x.offset, strides)]) + [n, size, x.strides[dim] & 0xFFFF_FFFF]
    groups = -(-lines * size // _WG)
    run.launch(init, [x.buffer, keys, idx], info, groups)
    step = backend.cache.get(("argsort_bitonic", st.compute), lambda: _bitonic_step_source(st.compute))
    k = 2
    while k <= size:
        j = k // 2
        while j:
            run.launch(step, [keys, idx], [lines, size, j, k, n, int(descending)], groups)
            j //= 2
        k *= 2
    final = backend.cache.get(("argsort_out", out_storage), lambda: _bitonic_out_source(out_storage))
    info = _info_head(lines, cshape, [(0, ostrides)]) + [n, size, out_strides[dim]]
    run.launch(final, [idx, out.buffer], info, -(-lines * n // _WG))
    return out

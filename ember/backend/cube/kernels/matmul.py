"""Tiled matrix multiply: each workgroup computes a 64x64 tile of the output from
16-deep slices of A and B staged in workgroup memory; each of its 256 threads
accumulates a 4x4 block in registers. Operands are read through their strides
(a transposed or broadcast operand needs no copy); batch dims broadcast. An
optional bias row is added in the epilogue (the fused ``linear``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, broadcast_strides, coalesce
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.backend import CubeBackend

_T = 64   # output tile edge
_K = 16   # depth of a staged slice
_MR = wgsl.MAX_RANK
_MAX_BATCH = 65535

# info: M, N, K, batch count, batch base, batch rank, batch shape[MR],
#       A [offset, row stride, col stride, batch strides[MR]], B [same], bias [offset, stride]
_A = 6 + _MR
_B = _A + 3 + _MR
_BIAS = _B + 3 + _MR


def _source(a: Storage, b: Storage, out: Storage, bias: Storage | None) -> KernelSource:
    t = a.compute
    zero = wgsl.ZERO[t]
    la = wgsl.load(a, "in0", "u32(ia)")
    lb = wgsl.load(b, "in1", "u32(ib)")
    bias_load = wgsl.load(bias, "in2", "u32(bias_off + i32(c) * bias_stride)") if bias is not None else None
    lines = [
        "    let m = info[0]; let n = info[1]; let kdim = info[2];",
        "    let batch = wg.z + info[4];",
        "    if (wg.z >= info[3]) { return; }",
        "    var rem = batch;",
        f"    var oa: i32 = bitcast<i32>(info[{_A}u]);",
        f"    var ob: i32 = bitcast<i32>(info[{_B}u]);",
        "    for (var k = info[5]; k > 0u; k--) {",
        "        let d = k - 1u;",
        "        let sz = info[6u + d];",
        "        let c = i32(rem % sz);",
        "        rem = rem / sz;",
        f"        oa += c * bitcast<i32>(info[{_A + 3}u + d]);",
        f"        ob += c * bitcast<i32>(info[{_B + 3}u + d]);",
        "    }",
        f"    let ars = bitcast<i32>(info[{_A + 1}u]); let acs = bitcast<i32>(info[{_A + 2}u]);",
        f"    let brs = bitcast<i32>(info[{_B + 1}u]); let bcs = bitcast<i32>(info[{_B + 2}u]);",
        f"    let row0 = wg.y * {_T}u; let col0 = wg.x * {_T}u;",
        "    let tx = lid % 16u; let ty = lid / 16u;",
        f"    var acc: array<{t}, 16>;",
        f"    for (var i = 0u; i < 16u; i++) {{ acc[i] = {zero}; }}",
        f"    for (var k0 = 0u; k0 < kdim; k0 += {_K}u) {{",
        "        for (var l = 0u; l < 4u; l++) {",
        "            let e = lid + l * 256u;",
        f"            let r = e / {_K}u; let kk = e % {_K}u;",
        "            let gr = row0 + r; let gk = k0 + kk;",
        f"            var va: {t} = {zero};",
        f"            if (gr < m && gk < kdim) {{ let ia = oa + i32(gr) * ars + i32(gk) * acs; va = {la}; }}",
        f"            sa[kk * {_T}u + r] = va;",
        f"            let kb = e / {_T}u; let cb = e % {_T}u;",
        "            let gkb = k0 + kb; let gc = col0 + cb;",
        f"            var vb: {t} = {zero};",
        f"            if (gkb < kdim && gc < n) {{ let ib = ob + i32(gkb) * brs + i32(gc) * bcs; vb = {lb}; }}",
        f"            sb[kb * {_T}u + cb] = vb;",
        "        }",
        "        workgroupBarrier();",
        f"        for (var kk = 0u; kk < {_K}u; kk++) {{",
        f"            let ra = kk * {_T}u + ty * 4u;",
        f"            let rb = kk * {_T}u + tx * 4u;",
        f"            let a4 = vec4<{t}>(sa[ra], sa[ra + 1u], sa[ra + 2u], sa[ra + 3u]);",
        f"            let b4 = vec4<{t}>(sb[rb], sb[rb + 1u], sb[rb + 2u], sb[rb + 3u]);",
        "            for (var i = 0u; i < 4u; i++) {",
        "                let ai = a4[i];",
        "                acc[i * 4u] += ai * b4.x; acc[i * 4u + 1u] += ai * b4.y;",
        "                acc[i * 4u + 2u] += ai * b4.z; acc[i * 4u + 3u] += ai * b4.w;",
        "            }",
        "        }",
        "        workgroupBarrier();",
        "    }",
    ]
    if bias is not None:
        lines.append(f"    let bias_off = bitcast<i32>(info[{_BIAS}u]); let bias_stride = bitcast<i32>(info[{_BIAS + 1}u]);")
    lines += [
        "    for (var i = 0u; i < 4u; i++) {",
        "        let r = row0 + ty * 4u + i;",
        "        if (r >= m) { break; }",
        "        for (var j = 0u; j < 4u; j++) {",
        "            let c = col0 + tx * 4u + j;",
        "            if (c >= n) { break; }",
        "            var v = acc[i * 4u + j];",
    ]
    if bias is not None:
        lines.append(f"            v += {bias_load};")
    lines += [
        f"            out0[(batch * m + r) * n + c] = {wgsl.store(out, 'v')};",
        "        }",
        "    }",
    ]
    body = "\n".join(lines)
    main = (
        "@compute @workgroup_size(256)\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        f"{body}\n}}\n"
    )
    decl = f"var<workgroup> sa: array<{t}, {_T * _K}>;\nvar<workgroup> sb: array<{t}, {_T * _K}>;"
    ins = [a, b] + ([bias] if bias is not None else [])
    code = decl + "\n" + main
    source = "\n".join([wgsl.bindings(ins, [out]), wgsl.helpers_for(code + out.store), code])
    return KernelSource("matmul" + ("_bias" if bias is not None else ""), source, len(ins), 1)


def _source_i64(st: Storage, bias: Storage | None) -> KernelSource:
    """int64 matmul: one thread per output over ``_S x _S`` tiles, accumulating with
    the 64-bit helpers (WGSL has no ``vec4`` of them for the tiled kernel)."""
    lines = [
        "    let m = info[0]; let n = info[1]; let kdim = info[2];",
        "    let batch = wg.z + info[4];",
        "    if (wg.z >= info[3]) { return; }",
        f"    let r = wg.y * {_S}u + lid / {_S}u; let c = wg.x * {_S}u + lid % {_S}u;",
        "    if (r >= m || c >= n) { return; }",
        "    var rem = batch;",
        f"    var oa: i32 = bitcast<i32>(info[{_A}u]);",
        f"    var ob: i32 = bitcast<i32>(info[{_B}u]);",
        "    for (var k = info[5]; k > 0u; k--) {",
        "        let d = k - 1u;",
        "        let sz = info[6u + d];",
        "        let q = i32(rem % sz);",
        "        rem = rem / sz;",
        f"        oa += q * bitcast<i32>(info[{_A + 3}u + d]);",
        f"        ob += q * bitcast<i32>(info[{_B + 3}u + d]);",
        "    }",
        f"    let ars = bitcast<i32>(info[{_A + 1}u]); let acs = bitcast<i32>(info[{_A + 2}u]);",
        f"    let brs = bitcast<i32>(info[{_B + 1}u]); let bcs = bitcast<i32>(info[{_B + 2}u]);",
        f"    var acc = {wgsl.ZERO['i64']};",
        "    for (var k = 0u; k < kdim; k++) {",
        "        let va = in0[u32(oa + i32(r) * ars + i32(k) * acs)];",
        "        let vb = in1[u32(ob + i32(k) * brs + i32(c) * bcs)];",
        "        acc = add_l(acc, mul_l(va, vb));",
        "    }",
    ]
    if bias is not None:
        lines.append(f"    let bias_off = bitcast<i32>(info[{_BIAS}u]); let bias_stride = bitcast<i32>(info[{_BIAS + 1}u]);")
        lines.append("    acc = add_l(acc, in2[u32(bias_off + i32(c) * bias_stride)]);")
    lines.append("    out0[(batch * m + r) * n + c] = acc;")
    main = (
        f"@compute @workgroup_size({_S * _S})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        + "\n".join(lines) + "\n}\n"
    )
    ins = [st, st] + ([bias] if bias is not None else [])
    source = "\n".join([wgsl.bindings(ins, [st]), wgsl.helpers_for(main), main])
    return KernelSource("matmul_i64", source, len(ins), 1)


_S = 16  # tile edge of the int64 kernel


def matmul(backend: CubeBackend, a: CubeTensor, b: CubeTensor, bias: CubeTensor | None = None) -> CubeTensor:
    """``a @ b`` (+ ``bias`` along the last dim) for rank >= 2 operands."""
    if a.storage.compute == "bool":
        raise DTypeError("ember: matmul: not defined on bool tensors; cast to float first")
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = tuple(int(d) for d in _broadcast(a.shape[:-2], b.shape[:-2]))
    out_shape = batch_shape + (m, n)
    out = backend.empty(out_shape, a.storage)
    count = 1
    for d in batch_shape:
        count *= d
    if count == 0 or m == 0 or n == 0:
        return out
    a_b = broadcast_strides(a.view(a.shape[:-2], a.strides[:-2], 0), batch_shape) if batch_shape else ()
    b_b = broadcast_strides(b.view(b.shape[:-2], b.strides[:-2], 0), batch_shape) if batch_shape else ()
    cshape, (ca, cb) = coalesce(batch_shape, a_b, b_b) if batch_shape else ((), [(), ()])
    if len(cshape) > _MR:
        raise ShapeError(f"ember: cube: matmul batch shape {list(batch_shape)} has more than {_MR} strided dims")
    key = ("matmul", a.storage, b.storage, None if bias is None else bias.storage)
    wide = a.storage.compute == "i64"
    build = (lambda: _source_i64(a.storage, None if bias is None else bias.storage)) if wide else (
        lambda: _source(a.storage, b.storage, a.storage, None if bias is None else bias.storage))
    kernel = backend.cache.get(key, build)
    rank = len(cshape)
    pad = [0] * (_MR - rank)
    head = [m, n, k, 0, 0, rank, *cshape, *pad]
    words = lambda xs: [x & 0xFFFF_FFFF for x in xs]  # noqa: E731
    info_a = words([a.offset, a.strides[-2], a.strides[-1], *ca]) + pad
    info_b = words([b.offset, b.strides[-2], b.strides[-1], *cb]) + pad
    info_bias = words([bias.offset, bias.strides[-1]]) if bias is not None else []
    buffers = [a.buffer, b.buffer] + ([bias.buffer] if bias is not None else []) + [out.buffer]
    tile = _S if wide else _T
    groups = (-(-n // tile), -(-m // tile))
    for base in range(0, count, _MAX_BATCH):
        head[3], head[4] = min(_MAX_BATCH, count - base), base
        backend.runtime.launch3(kernel, buffers, head + info_a + info_b + info_bias, (groups[0], groups[1], head[3]))
    return out


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    import numpy as np

    return tuple(np.broadcast_shapes(a, b))

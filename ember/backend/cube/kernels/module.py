"""Module-op kernels: convolution by a matmul whose loads gather im2col's columns
(:mod:`.conv_gemm`), or where that does not apply by im2col (one gather launch) and a
matmul with the bias in its epilogue; its transpose by a col2im gather, and pooling in one launch each, forward and
backward. Every kernel is written output-centric (each thread computes one output
from the inputs it needs), so sums are deterministic without atomics.

A window geometry is passed in the parameter block as six arrays of
:data:`MAX_SPATIAL` entries: input size, output size, kernel, stride, leading
padding and dilation per spatial dim.
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

from ember.backend.cube import ir, wgsl
from ember.backend.cube.buffer import CubeTensor, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import layout
from ember.backend.dtype import DType
from ember.backend.module_ops import pool_output_size
from ember.backend.ops import BinaryOp, ReduceOp
from ember.errors import ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

MAX_SPATIAL = 6
_WG = wgsl.WORKGROUP
_G = 8  # info: total, spatial rank, N, C, K, P, in offset, (spare); then the geometry
_IN, _OUT, _KER, _STR, _PAD, _DIL, _XS = (_G + i * MAX_SPATIAL for i in range(7))
_TAIL = _G + 7 * MAX_SPATIAL  # x stride of n, x stride of c, then kernel-specific words

# The geometry accessors and the window loop shared by the kernels.
_PRELUDE = f"""
fn geo(table: u32, d: u32) -> i32 {{ return bitcast<i32>(info[{_G}u + table * {MAX_SPATIAL}u + d]); }}
"""


def _geometry(spatial, out, kernel, stride, pad_lo, dilation, x_strides) -> list[int]:
    if len(spatial) > MAX_SPATIAL:
        raise ShapeError(f"ember: cube: module ops take at most {MAX_SPATIAL} spatial dims, got {len(spatial)}")
    words = []
    for values in (spatial, out, kernel, stride, pad_lo, dilation, x_strides):
        values = [int(v) & 0xFFFF_FFFF for v in values]
        words += values + [0] * (MAX_SPATIAL - len(values))
    return words


def _source(name: str, ins: list, outs: list, body: str, storages: tuple[Storage, ...] = ()) -> KernelSource:
    code = _PRELUDE + wgsl.main_linear(body)
    extra = "".join(s.store for s in storages)
    return KernelSource(
        name, "\n".join([wgsl.bindings(ins, outs), wgsl.helpers_for(code + extra), code]), len(ins), len(outs)
    )


def _spatial_offsets(var: str, count: str, table: int) -> str:
    """Decompose ``var`` (u32) over the sizes in geometry ``table`` into ``c_<var>[d]``."""
    return "\n".join(
        [
            f"    var c_{var}: array<i32, {MAX_SPATIAL}>;",
            f"    var r_{var} = {var};",
            f"    for (var t_{var} = {count}; t_{var} > 0u; t_{var}--) {{",
            f"        let d_{var} = t_{var} - 1u;",
            f"        let n_{var} = u32(geo({table}u, d_{var}));",
            f"        c_{var}[d_{var}] = i32(r_{var} % n_{var});",
            f"        r_{var} = r_{var} / n_{var};",
            "    }",
        ]
    )


# ---------------------------------------------------------------------- im2col / col2im
def _im2col_source(st: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let s = info[1]; let kk = info[4]; let pp = info[5];",
            "    let p = gi % pp; let k = (gi / pp) % kk; let nc = gi / (pp * kk);",
            "    let c = nc % info[3]; let n = nc / info[3];",
            _spatial_offsets("p", "s", 1),
            _spatial_offsets("k", "s", 2),
            f"    var at: i32 = bitcast<i32>(info[6]) + i32(n) * bitcast<i32>(info[{_TAIL}u]) + i32(c) * bitcast<i32>(info[{_TAIL + 1}u]);",
            "    var inside = true;",
            "    for (var d = 0u; d < s; d++) {",
            "        let i = c_p[d] * geo(3u, d) + c_k[d] * geo(5u, d) - geo(4u, d);",
            "        if (i < 0 || i >= geo(0u, d)) { inside = false; }",
            "        at += i * geo(6u, d);",
            "    }",
            f"    var v: {st.wgsl} = in0[0];",
            "    if (inside) { v = in0[u32(at)]; } else { v = " + _zero_word(st) + "; }",
            "    out0[gi] = v;",
        ]
    )
    return _source("im2col", [st], [st], body)


def _zero_word(st: Storage) -> str:
    return {"f32": "0.0", "f16": "f16(0.0)", "i32": "0", "u32": "0u", "vec2<u32>": "vec2<u32>(0u, 0u)"}[st.wgsl]


def im2col(backend: KernelContext, x: CubeTensor, kernel, stride, padding, dilation, out) -> CubeTensor:
    """``[N, C, K, P]`` columns of ``x`` ``[N, C, *spatial]`` (zeros where windows hang
    over the padding)."""
    n, c = x.shape[:2]
    k_total, p_total = math.prod(kernel), math.prod(out)
    cols = backend.empty((n, c, k_total, p_total), x.storage)
    if cols.size == 0:
        return cols
    kernel_ = backend.cache.get(("im2col", x.storage), lambda: _im2col_source(x.storage))
    info = [cols.size, len(kernel), n, c, k_total, p_total, x.offset, 0]
    info += _geometry(x.shape[2:], out, kernel, stride, [p[0] for p in padding], dilation, x.strides[2:])
    info += [x.strides[0] & 0xFFFF_FFFF, x.strides[1] & 0xFFFF_FFFF]
    backend.runtime.launch(kernel_, [x.buffer, cols.buffer], info, -(-cols.size // _WG))
    return cols


def _col2im_source(st: Storage, bias: Storage | None) -> KernelSource:
    """``out[n, c, y]`` = sum over kernel positions whose window covers ``y + shift``
    of ``cols[n, c, k, o]`` (+ ``bias[c]``); cols contiguous ``[N, C, K, *out]``."""
    ct = st.compute
    body = [
        "    if (gi >= info[0]) { return; }",
        "    let s = info[1]; let kk = info[4]; let pp = info[5];",
        f"    let ysize = info[{_TAIL}u];",
        "    let y = gi % ysize; let nc = gi / ysize;",
        _spatial_offsets("y", "s", 0),
        f"    var acc: {ct} = {wgsl.ZERO[ct]};",
        "    for (var k = 0u; k < kk; k++) {",
        "        var rk = k; var o: i32 = 0; var ok = true;",
        "        for (var j = s; j > 0u; j--) {",
        "            let d = j - 1u;",
        "            let kd = i32(rk % u32(geo(2u, d))); rk = rk / u32(geo(2u, d));",
        "            let q = c_y[d] + geo(4u, d) - kd * geo(5u, d);",
        "            let step = geo(3u, d);",
        "            if (q < 0 || q % step != 0 || q / step >= geo(1u, d)) { ok = false; }",
        "            o += (q / step) * geo(6u, d);",
        "        }",
        f"        if (ok) {{ acc += {wgsl.load(st, 'in0', '(nc * kk + k) * pp + u32(o)')}; }}",
        "    }",
    ]
    if bias is not None:
        body.append(
            f"    acc += {wgsl.load(bias, 'in1', f'(nc % info[3]) * info[{_TAIL + 1}u] + info[{_TAIL + 2}u]')};"
        )
    body.append(f"    out0[gi] = {wgsl.store(st, 'acc')};")
    ins = [st] + ([bias] if bias is not None else [])
    return _source("col2im", ins, [st], "\n".join(body), (st,))


def col2im(backend, cols, n, c, out_spatial, grid, kernel, stride, shift, dilation, bias=None) -> CubeTensor:
    """Sum the ``[N, C, K, *grid]`` columns back into ``[N, C, *out_spatial]`` whose
    element ``y`` sits at ``y + shift`` of the windows' coordinate system."""
    cols = layout.contiguous(backend, cols)
    out = backend.empty((n, c) + tuple(out_spatial), cols.storage)
    if out.size == 0:
        return out
    key = ("col2im", cols.storage, None if bias is None else bias.storage)
    kernel_ = backend.cache.get(key, lambda: _col2im_source(cols.storage, None if bias is None else bias.storage))
    k_total, p_total = math.prod(kernel), math.prod(grid)
    info = [out.size, len(kernel), n, c, k_total, p_total, 0, 0]
    info += _geometry(out_spatial, grid, kernel, stride, shift, dilation, contiguous_strides(tuple(grid)))
    info += [math.prod(out_spatial)]
    buffers = [cols.buffer]
    if bias is not None:
        info += [bias.strides[0] & 0xFFFF_FFFF, bias.offset]
        buffers.append(bias.buffer)
    backend.runtime.launch(kernel_, buffers + [out.buffer], info, -(-out.size // _WG))
    return out


# ---------------------------------------------------------------------- convolution
def conv(backend, x, weight, bias, stride, padding, dilation, groups):
    from ember.backend.cube.kernels import conv_gemm, matmul

    fused = conv_gemm.conv(backend, x, weight, bias, stride, padding, dilation, groups)
    if fused is not None:
        return fused
    n = x.shape[0]
    c_out, cg = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    out = tuple(
        (s + lo + hi - d * (k - 1) - 1) // st + 1
        for s, k, st, (lo, hi), d in zip(x.shape[2:], kernel, stride, padding, dilation)
    )
    k_total, p_total = math.prod(kernel), math.prod(out)
    cols = im2col(backend, x, kernel, stride, padding, dilation, out)
    cols = layout.reshape(backend, cols, (n, groups, cg * k_total, p_total))
    w = layout.reshape(backend, weight, (1, groups, c_out // groups, cg * k_total))
    epilogue = None
    if bias is not None:  # added as the product is stored: bias[c] along the rows
        ctype = x.storage.compute
        row_bias = layout.reshape(backend, bias, (1, groups, c_out // groups, 1))
        expr = ir.binary(BinaryOp.ADD, ir.load(0, ctype), ir.load(1, bias.storage.compute))
        epilogue = matmul.Epilogue(expr, (row_bias,))
    return layout.reshape(backend, matmul.matmul(backend, w, cols, epilogue=epilogue), (n, c_out) + out)


def conv_weight_grad(backend, x, grad, weight_shape, stride, padding, dilation, groups):
    n = x.shape[0]
    c_out, cg = weight_shape[:2]
    kernel = tuple(weight_shape[2:])
    out = tuple(grad.shape[2:])
    k_total, p_total = math.prod(kernel), math.prod(out)
    cols = layout.reshape(
        backend, im2col(backend, x, kernel, stride, padding, dilation, out), (n, groups, cg * k_total, p_total)
    )
    g = layout.reshape(backend, grad, (n, groups, c_out // groups, p_total))
    gw = backend.matmul(g, layout.permute(cols, (0, 1, 3, 2)))
    if n > 1:
        gw = backend.reduce(ReduceOp.SUM, gw, 0)
    return layout.reshape(backend, gw, tuple(weight_shape))


def conv_transpose(backend, x, weight, bias, stride, padding, output_padding, dilation, groups):
    n, c_in = x.shape[:2]
    og = weight.shape[1]
    kernel = tuple(weight.shape[2:])
    spatial = tuple(x.shape[2:])
    k_total = math.prod(kernel)
    ig = c_in // groups
    w = layout.reshape(backend, weight, (groups, ig, og * k_total))
    w = layout.permute(w, (0, 2, 1))
    xs = layout.reshape(backend, x, (n, groups, ig, math.prod(spatial)))
    cols = backend.matmul(layout.reshape(backend, w, (1, groups, og * k_total, ig)), xs)  # [N, G, Og*K, P]
    out = tuple(
        (m - 1) * s - lo - hi + d * (k - 1) + 1 + op
        for m, s, (lo, hi), d, k, op in zip(spatial, stride, padding, dilation, kernel, output_padding)
    )
    return col2im(backend, cols, n, groups * og, out, spatial, kernel, stride, [p[0] for p in padding], dilation, bias)


# ---------------------------------------------------------------------- max pooling
def _max_pool_source(st: Storage, idx: Storage) -> KernelSource:
    ct = st.compute
    greater = wgsl.BINARY[BinaryOp.GT][ct].format(a="v", b="best")
    nan_rule = f"(is_nan_f(v) && !is_nan_f(best)) || (!is_nan_f(best) && {greater})" if ct == "f32" else greater
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let s = info[1]; let kk = info[4]; let pp = info[5];",
            "    let p = gi % pp; let nc = gi / pp;",
            "    let c = nc % info[3]; let n = nc / info[3];",
            _spatial_offsets("p", "s", 1),
            f"    let base: i32 = bitcast<i32>(info[6]) + i32(n) * bitcast<i32>(info[{_TAIL}u]) + i32(c) * bitcast<i32>(info[{_TAIL + 1}u]);",
            f"    var best: {ct} = {wgsl.ZERO[ct]};",
            "    var best_i: i32 = 0;",
            "    for (var k = 0u; k < kk; k++) {",
            "        var rk = k; var at = base; var flat: i32 = 0; var step: i32 = 1; var inside = true;",
            "        for (var j = s; j > 0u; j--) {",
            "            let d = j - 1u;",
            "            let kd = i32(rk % u32(geo(2u, d))); rk = rk / u32(geo(2u, d));",
            "            let i = c_p[d] * geo(3u, d) + kd * geo(5u, d) - geo(4u, d);",
            "            let size = geo(0u, d);",
            "            if (i < 0 || i >= size) { inside = false; }",
            "            flat += clamp(i, 0, size - 1) * step;",
            "            step *= size;",
            "            at += i * geo(6u, d);",
            "        }",
            f"        var v: {ct} = {'-inf_f()' if ct == 'f32' else wgsl.INT_MIN[ct]};",
            f"        if (inside) {{ v = {wgsl.load(st, 'in0', 'u32(at)')}; }}",
            f"        if (k == 0u || {nan_rule}) {{ best = v; best_i = flat; }}",
            "    }",
            f"    out0[gi] = {wgsl.store(st, 'best')};",
            f"    out1[gi] = {wgsl.store(idx, wgsl.convert('best_i', 'i32', idx.compute))};",
        ]
    )
    return _source("max_pool", [st], [st, idx], body, (st,))


def max_pool_with_indices(backend, x, kernel, stride, padding, dilation, ceil_mode):
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    out = tuple(pool_output_size(*a, ceil_mode) for a in zip(spatial, kernel, stride, padding, dilation))
    idx_storage = backend.storage(DType.INT64)
    values = backend.empty((n, c) + out, x.storage)
    indices = backend.empty((n, c) + out, idx_storage)
    indices.bounds = (0, max(math.prod(spatial) - 1, 0))
    if values.size:
        kernel_ = backend.cache.get(("max_pool", x.storage), lambda: _max_pool_source(x.storage, idx_storage))
        info = [values.size, len(kernel), n, c, math.prod(kernel), math.prod(out), x.offset, 0]
        info += _geometry(spatial, out, kernel, stride, [p[0] for p in padding], dilation, x.strides[2:])
        info += [x.strides[0] & 0xFFFF_FFFF, x.strides[1] & 0xFFFF_FFFF]
        backend.runtime.launch(kernel_, [x.buffer, values.buffer, indices.buffer], info, -(-values.size // _WG))
    _POOLED[indices] = (tuple(kernel), tuple(stride), tuple(p[0] for p in padding), tuple(dilation), spatial)
    return values, indices


# Geometry of the index tensors made above, so that the backward pass (which gets only
# the indices) can gather over the few windows that may hold each input position.
_POOLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _max_pool_backward_source(st: Storage, idx: Storage) -> KernelSource:
    ct = st.compute
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let s = info[1]; let kk = info[4]; let pp = info[5];",
            f"    let ysize = info[{_TAIL}u];",
            "    let y = gi % ysize; let nc = gi / ysize;",
            _spatial_offsets("y", "s", 0),
            f"    var acc: {ct} = {wgsl.ZERO[ct]};",
            "    for (var k = 0u; k < kk; k++) {",
            "        var rk = k; var o: u32 = 0u; var ok = true;",
            "        for (var j = s; j > 0u; j--) {",
            "            let d = j - 1u;",
            "            let kd = i32(rk % u32(geo(2u, d))); rk = rk / u32(geo(2u, d));",
            "            let q = c_y[d] + geo(4u, d) - kd * geo(5u, d);",
            "            let step = geo(3u, d);",
            "            if (q < 0 || q % step != 0 || q / step >= geo(1u, d)) { ok = false; }",
            "            o += u32(q / step) * u32(geo(6u, d));",
            "        }",
            "        if (ok) {",
            "            let w = nc * pp + o;",
            f"            if ({wgsl.index_value(idx, 'in1', 'w')} == i32(y)) {{ acc += {wgsl.load(st, 'in0', 'w')}; }}",
            "        }",
            "    }",
            f"    out0[gi] = {wgsl.store(st, 'acc')};",
        ]
    )
    return _source("max_pool_backward", [st, idx], [st], body, (st,))


def max_pool_backward(backend, grad, indices, input_shape):
    geometry = _POOLED.get(indices)
    if geometry is None:
        return NotImplemented
    kernel, stride, pad_lo, dilation, spatial = geometry
    n, c = input_shape[:2]
    out = tuple(grad.shape[2:])
    grad = layout.contiguous(backend, grad)
    indices = layout.contiguous(backend, indices)
    result = backend.empty(tuple(input_shape), grad.storage)
    if result.size == 0:
        return result
    kernel_ = backend.cache.get(
        ("max_pool_backward", grad.storage, indices.storage),
        lambda: _max_pool_backward_source(grad.storage, indices.storage),
    )
    info = [result.size, len(kernel), n, c, math.prod(kernel), math.prod(out), 0, 0]
    info += _geometry(spatial, out, kernel, stride, pad_lo, dilation, contiguous_strides(out))
    info += [math.prod(spatial)]
    backend.runtime.launch(kernel_, [grad.buffer, indices.buffer, result.buffer], info, -(-result.size // _WG))
    return result


# ---------------------------------------------------------------------- average pooling
_DIVISOR = """
fn divisor(o: ptr<function, array<i32, 6>>, s: u32, include_pad: bool) -> f32 {
    var count = 1.0;
    for (var d = 0u; d < s; d++) {
        let start = (*o)[d] * geo(3u, d);
        let size = geo(0u, d);
        var lo = geo(4u, d);
        var hi = lo + size;
        if (include_pad) { lo = 0; hi = size + geo(4u, d) + geo(5u, d); }
        count *= f32(max(min(start + geo(2u, d), hi) - max(start, lo), 1));
    }
    return count;
}
"""


def _avg_pool_source(st: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let s = info[1]; let kk = info[4]; let pp = info[5];",
            "    let p = gi % pp; let nc = gi / pp;",
            "    let c = nc % info[3]; let n = nc / info[3];",
            _spatial_offsets("p", "s", 1),
            f"    let base: i32 = bitcast<i32>(info[6]) + i32(n) * bitcast<i32>(info[{_TAIL}u]) + i32(c) * bitcast<i32>(info[{_TAIL + 1}u]);",
            "    var acc = 0.0;",
            "    for (var k = 0u; k < kk; k++) {",
            "        var rk = k; var at = base; var inside = true;",
            "        for (var j = s; j > 0u; j--) {",
            "            let d = j - 1u;",
            "            let kd = i32(rk % u32(geo(2u, d))); rk = rk / u32(geo(2u, d));",
            "            let i = c_p[d] * geo(3u, d) + kd - geo(4u, d);",
            "            if (i < 0 || i >= geo(0u, d)) { inside = false; }",
            f"            at += i * bitcast<i32>(info[{_TAIL + 3}u + d]);",
            "        }",
            f"        if (inside) {{ acc += {wgsl.load(st, 'in0', 'u32(at)')}; }}",
            "    }",
            f"    out0[gi] = {wgsl.store(st, f'acc / divisor(&c_p, s, info[{_TAIL + 2}u] != 0u)')};",
        ]
    )
    src = _source("avg_pool", [st], [st], body, (st,))
    return KernelSource(src.name, src.source.replace("@compute", _DIVISOR + "\n@compute", 1), 1, 1)


def avg_pool(backend, x, kernel, stride, padding, count_include_pad, ceil_mode):
    if x.storage.compute != "f32":
        return NotImplemented
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    ones = (1,) * len(kernel)
    out = tuple(pool_output_size(s, k, st, p, 1, ceil_mode) for s, k, st, p in zip(spatial, kernel, stride, padding))
    y = backend.empty((n, c) + out, x.storage)
    if y.size == 0:
        return y
    kernel_ = backend.cache.get(("avg_pool", x.storage), lambda: _avg_pool_source(x.storage))
    info = [y.size, len(kernel), n, c, math.prod(kernel), math.prod(out), x.offset, 0]
    # The dilation table holds each dim's trailing padding (avg pooling has no dilation).
    info += _geometry(spatial, out, kernel, stride, [p[0] for p in padding], [p[1] for p in padding], ones)
    info += [x.strides[0] & 0xFFFF_FFFF, x.strides[1] & 0xFFFF_FFFF, int(count_include_pad)]
    info += [s & 0xFFFF_FFFF for s in x.strides[2:]]
    backend.runtime.launch(kernel_, [x.buffer, y.buffer], info, -(-y.size // _WG))
    return y


def _avg_pool_backward_source(st: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let s = info[1]; let kk = info[4]; let pp = info[5];",
            f"    let ysize = info[{_TAIL}u];",
            "    let y = gi % ysize; let nc = gi / ysize;",
            _spatial_offsets("y", "s", 0),
            "    var acc = 0.0;",
            f"    var o: array<i32, {MAX_SPATIAL}>;",
            "    for (var k = 0u; k < kk; k++) {",
            "        var rk = k; var w: u32 = 0u; var ok = true;",
            "        for (var j = s; j > 0u; j--) {",
            "            let d = j - 1u;",
            "            let kd = i32(rk % u32(geo(2u, d))); rk = rk / u32(geo(2u, d));",
            "            let q = c_y[d] + geo(4u, d) - kd;",
            "            let step = geo(3u, d);",
            "            if (q < 0 || q % step != 0 || q / step >= geo(1u, d)) { ok = false; }",
            "            o[d] = q / step;",
            "            w += u32(q / step) * u32(geo(6u, d));",
            "        }",
            f"        if (ok) {{ acc += {wgsl.load(st, 'in0', 'nc * pp + w')} / divisor(&o, s, info[{_TAIL + 1}u] != 0u); }}",
            "    }",
            f"    out0[gi] = {wgsl.store(st, 'acc')};",
        ]
    )
    src = _source("avg_pool_backward", [st], [st], body, (st,))
    return KernelSource(src.name, src.source.replace("@compute", _DIVISOR + "\n@compute", 1), 1, 1)


def avg_pool_backward(backend, grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode):
    if grad.storage.compute != "f32":
        return NotImplemented
    n, c = input_shape[:2]
    spatial = tuple(input_shape[2:])
    out = tuple(grad.shape[2:])
    grad = layout.contiguous(backend, grad)
    result = backend.empty(tuple(input_shape), grad.storage)
    if result.size == 0:
        return result
    kernel_ = backend.cache.get(("avg_pool_backward", grad.storage), lambda: _avg_pool_backward_source(grad.storage))
    info = [result.size, len(kernel), n, c, math.prod(kernel), math.prod(out), 0, 0]
    info += _geometry(
        spatial, out, kernel, stride, [p[0] for p in padding], [p[1] for p in padding], contiguous_strides(out)
    )
    info += [math.prod(spatial), int(count_include_pad)]
    backend.runtime.launch(kernel_, [grad.buffer, result.buffer], info, -(-result.size // _WG))
    return result


# ---------------------------------------------------------------------- embedding
def embedding(backend, weights, indices):
    from ember.backend.cube.kernels import index

    bad = index.out_of_range(backend, indices, weights.shape[0])
    if bad is not None:
        from ember.errors import IndexOutOfBoundsError

        size = weights.shape[0]
        raise IndexOutOfBoundsError(
            f"ember: embedding: index {bad} is out of bounds for {size} embeddings (indices must lie in [0, {size}))"
        )
    flat = layout.reshape(backend, indices, (indices.size,))
    rows = index.select(backend, weights, 0, flat)
    return layout.reshape(backend, rows, tuple(indices.shape) + (weights.shape[1],))

"""Indexing kernels: gather/select (one kernel), scatter_add, select_add, argwhere,
and the index bounds check.

Sums at repeated indices are computed by each output element looping over the
indices that may hit it, in index order, so results are deterministic (no atomics).
Bounds are checked before launching: from the index tensor's known ``bounds`` when
it has them (uploads, arange, argmax, argsort), otherwise with a min/max kernel and
one small read-back, whose result is remembered on the (immutable) index tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, coalesce
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import layout
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, CumulativeOp
from ember.errors import IndexOutOfBoundsError, ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_MR = wgsl.MAX_RANK
_WG = wgsl.WORKGROUP
_BLOCK = 1 + _MR


def _words(values) -> list[int]:
    return [int(v) & 0xFFFF_FFFF for v in values]


def _padded(values, fill: int = 0) -> list[int]:
    values = _words(values)
    return values + [fill] * (_MR - len(values))


def _check_rank(op: str, shape) -> None:
    if len(shape) > _MR:
        raise ShapeError(f"ember: cube: {op} over shape {list(shape)} needs more than {_MR} strided dims")


# ---------------------------------------------------------------------- bounds
def _minmax_source(st: Storage) -> KernelSource:
    ct = st.compute
    low, high = wgsl.BINARY[BinaryOp.MINIMUM][ct], wgsl.BINARY[BinaryOp.MAXIMUM][ct]
    body = "\n".join(
        [
            "    let n = info[0];",
            f"    var lo: {ct} = {wgsl.INT_MAX[ct]};",
            f"    var hi: {ct} = {wgsl.INT_MIN[ct]};",
            f"    for (var i = lid; i < n; i += {_WG}u) {{ let v = {wgsl.load(st, 'in0', 'i')}; "
            f"lo = {low.format(a='lo', b='v')}; hi = {high.format(a='hi', b='v')}; }}",
            "    slo[lid] = lo;",
            "    shi[lid] = hi;",
            "    workgroupBarrier();",
            f"    for (var s = {_WG // 2}u; s > 0u; s = s >> 1u) {{",
            f"        if (lid < s) {{ slo[lid] = {low.format(a='slo[lid]', b='slo[lid + s]')}; "
            f"shi[lid] = {high.format(a='shi[lid]', b='shi[lid + s]')}; }}",
            "        workgroupBarrier();",
            "    }",
            "    if (lid == 0u) { out0[0] = slo[0]; out0[1] = shi[0]; }",
        ]
    )
    code = f"var<workgroup> slo: array<{ct}, {_WG}>;\nvar<workgroup> shi: array<{ct}, {_WG}>;\n" + wgsl.main_groups(
        body
    )
    return KernelSource("index_bounds", "\n".join([wgsl.bindings([st], [ct]), wgsl.helpers_for(code), code]), 1, 1)


def bounds(backend: KernelContext, indices: CubeTensor, exact: bool = False) -> tuple[int, int]:
    """Bounds on the values of an int tensor: remembered ones (which may be wider than the
    values, as a pooling's or an argmax's index range is) unless ``exact`` asks for the
    smallest and largest value, read from the data and remembered in their place."""
    if indices.bounds is None or exact:
        st = indices.storage
        flat = layout.contiguous(backend, indices)
        kernel = backend.cache.get(("index_bounds", st), lambda: _minmax_source(st))
        size = 16 if st.compute == "i64" else 8
        out = backend.runtime.alloc(size)
        backend.runtime.launch(kernel, [flat.buffer, out], [flat.size], 1)
        lo, hi = np.frombuffer(backend.runtime.read(out, size), np.int64 if size == 16 else np.int32)
        indices.bounds = (int(lo), int(hi))
    return indices.bounds


def out_of_range(backend: KernelContext, indices: CubeTensor, size: int) -> int | None:
    """An index of ``indices`` outside ``[0, size)``, or None. Remembered bounds only bound
    the values, so where they reach outside, the exact ones decide."""
    if indices.size == 0:
        return None
    lo, hi = bounds(backend, indices)
    if lo < 0 or hi >= size:
        lo, hi = bounds(backend, indices, exact=True)
    if lo < 0 or hi >= size:
        return lo if lo < 0 else hi
    return None


def check(backend: KernelContext, op: str, indices: CubeTensor, size: int, dim: int) -> None:
    bad = out_of_range(backend, indices, size)
    if bad is not None:
        raise IndexOutOfBoundsError(
            f"ember: {op}: index {bad} is out of bounds for dim {dim} of size {size} (indices must lie in [0, {size}))"
        )


# ---------------------------------------------------------------------- gather / select
def _gather_source(x: Storage, idx: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            wgsl.strided_offsets("gi", "info[1]", 2, [("oi", 2 + _MR), ("ox", 2 + _MR + _BLOCK)]),
            f"    let j = {wgsl.index_value(idx, 'in1', 'u32(oi)')};",
            f"    out0[gi] = in0[u32(ox + j * bitcast<i32>(info[{2 + _MR + 2 * _BLOCK}u]))];",
        ]
    )
    code = wgsl.main_linear(body)
    return KernelSource("gather", "\n".join([wgsl.bindings([x, idx], [x]), wgsl.helpers_for(code), code]), 2, 1)


def _gather(backend, x: CubeTensor, dim: int, indices: CubeTensor, out_shape, idx_strides) -> CubeTensor:
    out = backend.empty(tuple(out_shape), x.storage)
    if out.size == 0:
        return out
    x_strides = x.strides[:dim] + (0,) + x.strides[dim + 1 :]
    cshape, (ci, cx) = coalesce(tuple(out_shape), idx_strides, x_strides)
    _check_rank("gather", cshape)
    kernel = backend.cache.get(
        ("gather", x.storage, indices.storage), lambda: _gather_source(x.storage, indices.storage)
    )
    info = [out.size, len(cshape)] + _padded(cshape) + _words([indices.offset]) + _padded(ci)
    info += _words([x.offset]) + _padded(cx) + _words([x.strides[dim]])
    backend.runtime.launch(kernel, [x.buffer, indices.buffer, out.buffer], info, -(-out.size // _WG))
    if x.bounds is not None:
        out.bounds = x.bounds
    return out


def gather(backend: KernelContext, x: CubeTensor, dim: int, indices: CubeTensor) -> CubeTensor:
    check(backend, "gather", indices, x.shape[dim], dim)
    return _gather(backend, x, dim, indices, indices.shape, indices.strides)


def select(backend: KernelContext, x: CubeTensor, dim: int, indices: CubeTensor) -> CubeTensor:
    check(backend, "select", indices, x.shape[dim], dim)
    out_shape = x.shape[:dim] + indices.shape + x.shape[dim + 1 :]
    idx_strides = tuple(indices.strides[0] if d == dim else 0 for d in range(len(x.shape)))
    return _gather(backend, x, dim, indices, out_shape, idx_strides)


# ---------------------------------------------------------------------- scatter_add
def _scatter_source(x: Storage, idx: Storage) -> KernelSource:
    ct = x.compute
    add = wgsl.BINARY["add"][ct]
    base = 2 + 2 * _MR  # after n, rank, x shape, idx shape
    px, pi, pv = base, base + _BLOCK, base + 2 * _BLOCK
    tail = base + 3 * _BLOCK  # dim, idx count along dim, idx stride along dim, values stride along dim
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            f"    let dim = info[{tail}u];",
            "    var rem = gi;",
            f"    var ox: i32 = bitcast<i32>(info[{px}u]);",
            f"    var oi: i32 = bitcast<i32>(info[{pi}u]);",
            f"    var ov: i32 = bitcast<i32>(info[{pv}u]);",
            "    var inside = true;",
            "    var cd: i32 = 0;",
            "    for (var k = info[1]; k > 0u; k--) {",
            "        let d = k - 1u;",
            "        let sz = info[2u + d];",
            "        let c = rem % sz;",
            "        rem = rem / sz;",
            f"        ox += i32(c) * bitcast<i32>(info[{px + 1}u + d]);",
            "        if (d == dim) { cd = i32(c); } else {",
            f"            if (c >= info[{2 + _MR}u + d]) {{ inside = false; }}",
            f"            oi += i32(c) * bitcast<i32>(info[{pi + 1}u + d]);",
            f"            ov += i32(c) * bitcast<i32>(info[{pv + 1}u + d]);",
            "        }",
            "    }",
            f"    var acc = {wgsl.load(x, 'in0', 'u32(ox)')};",
            "    if (inside) {",
            f"        let count = info[{tail + 1}u];",
            f"        let si = bitcast<i32>(info[{tail + 2}u]);",
            f"        let sv = bitcast<i32>(info[{tail + 3}u]);",
            "        for (var i = 0u; i < count; i++) {",
            f"            if ({wgsl.index_value(idx, 'in1', 'u32(oi + i32(i) * si)')} == cd) {{",
            f"                acc = {add.format(a='acc', b=wgsl.load(x, 'in2', 'u32(ov + i32(i) * sv)'))};",
            "            }",
            "        }",
            "    }",
            f"    out0[gi] = {wgsl.store(x, 'acc')};",
        ]
    )
    code = wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([x, idx, x], [x]), wgsl.helpers_for(code + x.store), code])
    return KernelSource("scatter_add", source, 3, 1)


def scatter_add(backend: KernelContext, x: CubeTensor, dim: int, indices: CubeTensor, values: CubeTensor) -> CubeTensor:
    check(backend, "scatter", indices, x.shape[dim], dim)
    _check_rank("scatter", x.shape)
    out = backend.empty(x.shape, x.storage)
    if out.size == 0:
        return out
    kernel = backend.cache.get(
        ("scatter_add", x.storage, indices.storage), lambda: _scatter_source(x.storage, indices.storage)
    )
    info = [x.size, len(x.shape)] + _padded(x.shape) + _padded(indices.shape)
    info += _words([x.offset]) + _padded(x.strides)
    info += _words([indices.offset]) + _padded(indices.strides)
    info += _words([values.offset]) + _padded(values.strides)
    info += _words([dim, indices.shape[dim], indices.strides[dim], values.strides[dim]])
    backend.runtime.launch(kernel, [x.buffer, indices.buffer, values.buffer, out.buffer], info, -(-x.size // _WG))
    return out


# ---------------------------------------------------------------------- select_add
def _select_add_source(x: Storage, idx: Storage) -> KernelSource:
    add = wgsl.BINARY["add"][x.compute]
    tail = 2 + _MR + 3 * _BLOCK  # idx offset, idx stride, count, values stride along dim
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            wgsl.strided_offsets(
                "gi", "info[1]", 2, [("ox", 2 + _MR), ("ov", 2 + _MR + _BLOCK), ("cd", 2 + _MR + 2 * _BLOCK)]
            ),
            f"    var acc = {wgsl.load(x, 'in0', 'u32(ox)')};",
            f"    let oi = bitcast<i32>(info[{tail}u]);",
            f"    let si = bitcast<i32>(info[{tail + 1}u]);",
            f"    let sv = bitcast<i32>(info[{tail + 3}u]);",
            f"    for (var i = 0u; i < info[{tail + 2}u]; i++) {{",
            f"        if ({wgsl.index_value(idx, 'in1', 'u32(oi + i32(i) * si)')} == cd) {{",
            f"            acc = {add.format(a='acc', b=wgsl.load(x, 'in2', 'u32(ov + i32(i) * sv)'))};",
            "        }",
            "    }",
            f"    out0[gi] = {wgsl.store(x, 'acc')};",
        ]
    )
    code = wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([x, idx, x], [x]), wgsl.helpers_for(code + x.store), code])
    return KernelSource("select_add", source, 3, 1)


def _select_add_sorted_source(x: Storage, idx: Storage, order: Storage) -> KernelSource:
    """Like :func:`_select_add_source`, over indices sorted (stably) beforehand: each
    output binary-searches its run of equal indices and adds those rows in index order."""
    add = wgsl.BINARY["add"][x.compute]
    tail = 2 + _MR + 3 * _BLOCK  # index count, values stride along dim
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            wgsl.strided_offsets(
                "gi", "info[1]", 2, [("ox", 2 + _MR), ("ov", 2 + _MR + _BLOCK), ("cd", 2 + _MR + 2 * _BLOCK)]
            ),
            f"    var acc = {wgsl.load(x, 'in0', 'u32(ox)')};",
            f"    let count = info[{tail}u];",
            f"    let sv = bitcast<i32>(info[{tail + 1}u]);",
            "    var lo = 0u; var hi = count;",
            "    loop {",
            "        if (lo >= hi) { break; }",
            "        let mid = (lo + hi) / 2u;",
            f"        if ({wgsl.index_value(idx, 'in1', 'mid')} < cd) {{ lo = mid + 1u; }} else {{ hi = mid; }}",
            "    }",
            f"    for (var i = lo; i < count && {wgsl.index_value(idx, 'in1', 'i')} == cd; i++) {{",
            f"        let row = {wgsl.index_value(order, 'in2', 'i')};",
            f"        acc = {add.format(a='acc', b=wgsl.load(x, 'in3', 'u32(ov + row * sv)'))};",
            "    }",
            f"    out0[gi] = {wgsl.store(x, 'acc')};",
        ]
    )
    code = wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([x, idx, order, x], [x]), wgsl.helpers_for(code + x.store), code])
    return KernelSource("select_add_sorted", source, 4, 1)


_SORT_FROM = 64  # index counts above this are sorted first: O(log n) per output, not O(n)


def select_add(backend: KernelContext, x: CubeTensor, dim: int, indices: CubeTensor, values: CubeTensor) -> CubeTensor:
    check(backend, "select_assign", indices, x.shape[dim], dim)
    out = backend.empty(x.shape, x.storage)
    if out.size == 0:
        return out
    v_strides = values.strides[:dim] + (0,) + values.strides[dim + 1 :]
    d_strides = tuple(1 if d == dim else 0 for d in range(len(x.shape)))
    cshape, (cx, cv, cd) = coalesce(x.shape, x.strides, v_strides, d_strides)
    _check_rank("select_assign", cshape)
    info = [x.size, len(cshape)] + _padded(cshape)
    info += _words([x.offset]) + _padded(cx) + _words([values.offset]) + _padded(cv) + [0] + _padded(cd)
    n = indices.shape[0]
    if n > _SORT_FROM:
        from ember.backend.cube.kernels import sort

        order = sort.argsort(backend, indices, 0, False)
        ordered = _gather(backend, indices, 0, order, (n,), order.strides)
        kernel = backend.cache.get(
            ("select_add_sorted", x.storage, indices.storage, order.storage),
            lambda: _select_add_sorted_source(x.storage, indices.storage, order.storage),
        )
        info += _words([n, values.strides[dim]])
        buffers = [x.buffer, ordered.buffer, order.buffer, values.buffer, out.buffer]
        backend.runtime.launch(kernel, buffers, info, -(-x.size // _WG))
        return out
    kernel = backend.cache.get(
        ("select_add", x.storage, indices.storage), lambda: _select_add_source(x.storage, indices.storage)
    )
    info += _words([indices.offset, indices.strides[0], n, values.strides[dim]])
    backend.runtime.launch(kernel, [x.buffer, indices.buffer, values.buffer, out.buffer], info, -(-x.size // _WG))
    return out


# ---------------------------------------------------------------------- argwhere
def _argwhere_source(out: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    if (in0[gi] == 0u) { return; }",
            "    let rank = info[1];",
            "    let pos = u32(in1[gi] - 1);",
            "    var rem = gi;",
            "    for (var k = rank; k > 0u; k--) {",
            "        let d = k - 1u;",
            "        let sz = info[2u + d];",
            f"        out0[pos * rank + d] = {wgsl.store(out, wgsl.convert('i32(rem % sz)', 'i32', out.compute))};",
            "        rem = rem / sz;",
            "    }",
        ]
    )
    code = wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings(["u32", "i32"], [out]), wgsl.helpers_for(code), code])
    return KernelSource("argwhere", source, 2, 1)


def argwhere(backend: KernelContext, x: CubeTensor) -> CubeTensor:
    rank = len(x.shape)
    out_storage = backend.storage(DType.INT64)
    if x.size == 0:
        return backend.empty((0, rank), out_storage)
    _check_rank("argwhere", x.shape)
    flat = layout.contiguous(backend, x)
    flat = flat.view((x.size,), (1,), 0)
    positions = backend.cumulative(CumulativeOp.CUMSUM, backend.cast(flat, DType.INT32), 0)
    count = int(backend.to_numpy(positions.view((1,), (1,), x.size - 1))[0])
    out = backend.empty((count, rank), out_storage)
    out.bounds = (0, max(max(x.shape, default=1) - 1, 0))
    if count == 0 or rank == 0:
        return out
    kernel = backend.cache.get(("argwhere", out_storage), lambda: _argwhere_source(out_storage))
    info = [x.size, rank] + _padded(x.shape)
    backend.runtime.launch(kernel, [flat.buffer, positions.buffer, out.buffer], info, -(-x.size // _WG))
    return out

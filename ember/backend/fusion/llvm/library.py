"""Hand-written lowerings (:class:`~ember.backend.fusion.steps.Library` steps) as LLVM IR:
gather and scatter-add, max pooling and its backward, convolutions and row kernels.

Each lowering computes what flex computes, in the same order where the order shows
in the result:

* ``gather``/``scatter_add`` (``np.take_along_axis``/``np.add.at``): one loop over
  the indices, in row-major order (a repeated index accumulates in that order);
  ``embedding_backward`` the same over whole rows;
* ``max_pool_with_indices``: a running maximum over the kernel positions in order,
  taking a later value when it is greater or NaN (so the first maximum wins ties
  and a NaN wins), with padding as ``-inf``; the index is the flat position in the
  input plane, each coordinate clipped into the input (the first real element of
  a window whose maximum is ``-inf``);
  ``max_pool`` (an inference's pooling) is the same loop without the indices;
* ``max_pool_backward``: zeros, then each output's gradient added at its index;
* convolutions (``conv``, ``conv_transpose``, ``conv_weight_grad``): im2col and one
  ``?gemm`` per sample, in :mod:`.conv`;
* ``softmax``/``log_softmax`` along the last dim of float32 values: one row at a
  time, in :mod:`.rows`;
* ``gelu``/``gelu_backward`` of float32 values: flex's native formula, in
  :mod:`.activations`;
* ``layer_norm``/``layer_norm_backward`` along the last dim of float32 values: one
  pass over the rows each, in :mod:`.norms`.
* ``attention``/``attention_backward`` of float32/float64 values: per (batch, head)
  block, ``?gemm`` and row passes, in :mod:`.attention`; their online-softmax
  (flash) form ``flash_attention``/``flash_attention_backward``, in :mod:`.flash`.
* ``linear`` of float32 values in training plans: the inline product with the bias
  as its addend, in :mod:`.linear`.
* ``quantized_linear`` for decode's few rows: flex's compiled quantized kernels called
  from the plan, in :mod:`.quantized`.
* ``cat`` and ``slice_assign`` of any dtype: copies, in :mod:`.copies`.

:data:`LIBRARY` registers them all; :mod:`.emitter` holds what they share
(:class:`LibraryOp`, :class:`Emitter`).

Indices out of range do not read or write out of bounds: the step records the
first bad index in the plan's *status* words and returns, and the run raises
``IndexOutOfBoundsError`` as flex would (see :class:`LibraryOp` ``checks``).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.activations import ACTIVATION_OPS
from ember.backend.fusion.llvm.attention import ATTENTION_OPS
from ember.backend.fusion.llvm.conv import CONV_OPS, Scratch, conv_core, conv_geometry
from ember.backend.fusion.llvm.copies import COPY_OPS
from ember.backend.fusion.llvm.emitter import FLOATS as _FLOATS
from ember.backend.fusion.llvm.emitter import INDEX as _INDEX
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.fusion.llvm.flash import FLASH_OPS
from ember.backend.fusion.llvm.linear import LINEAR_OPS
from ember.backend.fusion.llvm.norms import NORM_OPS
from ember.backend.fusion.llvm.quantized import QUANTIZED_OPS
from ember.backend.fusion.llvm.rows import ROW_OPS
from ember.backend.kernel.llvm.mathlib import I64, const
from ember.backend.kernel.llvm.pooling import PoolGeometry, max_pool_backward_rows
from ember.backend.kernel.llvm.pooling import max_pool_rows as kernel_max_pool_rows
from ember.backend.kernel.views import contiguous_strides, size_of

#: The most kernel positions a pooling unrolls.
MAX_POOL_POSITIONS = 64


# ---------------------------------------------------------------------- gather / scatter
def _gather_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, dim, indices = node.args
    avals = graph.avals
    if type(x) is not Ref or type(indices) is not Ref or avals[indices].dtype != _INDEX:
        return False
    xs, ix = avals[x].shape, avals[indices].shape
    return len(xs) == len(ix) and all(i <= s for d, (i, s) in enumerate(zip(ix, xs)) if d != dim)


def _gather(e: Emitter) -> None:
    x, dim, indices = e.node.args
    shape, x_shape = e.shape(indices), e.shape(x)
    dtype = e.dtype(x)
    x_strides, strides = contiguous_strides(x_shape), contiguous_strides(shape)
    if size_of(shape) == 0:
        return

    def body(pos: list[ir.Value]) -> None:
        flat = e.linear(pos, strides)
        index = e.check_index(e.load(e.args[indices], flat, _INDEX), x_shape[dim])
        source = e.linear([p if d != dim else index for d, p in enumerate(pos)], x_strides)
        e.store(e.load(e.args[x], source, dtype), e.outs[0], flat, dtype)

    e.loops.nest(list(shape), body)


def _scatter_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, dim, indices, values = node.args
    avals = graph.avals
    if any(type(r) is not Ref for r in (x, indices, values)) or avals[indices].dtype != _INDEX:
        return False
    xs, ix = avals[x].shape, avals[indices].shape
    return (
        avals[values].shape == ix
        and avals[values].dtype == avals[x].dtype
        and len(xs) == len(ix)
        and all(i <= s for d, (i, s) in enumerate(zip(ix, xs)) if d != dim)
    )


def _scatter_add(e: Emitter) -> None:
    x, dim, indices, values = e.node.args
    shape, x_shape = e.shape(indices), e.shape(x)
    dtype = e.dtype(x)
    b = e.b
    out = e.outs[0]
    e.span(0, size_of(x_shape), lambda i: e.store(e.load(e.args[x], i, dtype), out, i, dtype))
    if size_of(shape) == 0:
        return
    x_strides, strides = contiguous_strides(x_shape), contiguous_strides(shape)

    def body(pos: list[ir.Value]) -> None:
        flat = e.linear(pos, strides)
        index = e.check_index(e.load(e.args[indices], flat, _INDEX), x_shape[dim])
        target = e.linear([p if d != dim else index for d, p in enumerate(pos)], x_strides)
        old, add = e.load(out, target, dtype), e.load(e.args[values], flat, dtype)
        e.store(b.fadd(old, add) if dtype.kind == "f" else b.add(old, add), out, target, dtype)

    e.loops.nest(list(shape), body)


def _embedding_backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    grad, indices, n = node.args
    avals = graph.avals
    if type(grad) is not Ref or type(indices) is not Ref or avals[indices].dtype != _INDEX:
        return False
    g, ix = avals[grad].shape, avals[indices].shape
    return avals[grad].dtype in _FLOATS and len(g) >= 1 and g[:-1] == ix and isinstance(n, int) and n >= 0


def _embedding_backward(e: Emitter) -> None:
    """``out = zeros([n, d]); out[indices[i]] += grad[i]`` per index in row-major order
    (``np.add.at``'s order: a repeated index accumulates in that order)."""
    grad, indices, n = e.node.args
    d = e.shape(grad)[-1]
    dtype = e.dtype(grad)
    b = e.b
    out = e.outs[0]
    e.fill(out, ir.Constant(I64, 0), n * d, const(dtype, 0.0), dtype)
    rows = size_of(e.shape(indices))
    if rows == 0 or d == 0:
        return

    def row(i: ir.Value, _: list) -> list:
        index = e.check_index(e.load(e.args[indices], i, _INDEX), n)
        target = b.mul(index, ir.Constant(I64, d))
        source = b.mul(i, ir.Constant(I64, d))

        def add(j: ir.Value) -> None:
            at = b.add(target, j)
            e.store(b.fadd(e.load(out, at, dtype), e.load(e.args[grad], b.add(source, j), dtype)), out, at, dtype)

        e.span(0, d, add)
        return []

    e.loops.run(rows, row)


# ---------------------------------------------------------------------- max pooling
def _pool_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, kernel, _stride, padding, _dilation, _ceil = node.args
    aval = graph.avals[x]
    return (
        aval.dtype in _FLOATS
        and len(aval.shape) >= 3
        and all(lo >= 0 and hi >= 0 for lo, hi in padding)
        and size_of(tuple(kernel)) <= MAX_POOL_POSITIONS
    )


def _max_pool(e: Emitter) -> None:
    x_shape = e.shape(e.node.args[0])
    indices = e.outs[1] if len(e.outs) > 1 else None  # max_pool: the values only
    max_pool_rows(e, e.args[e.node.args[0]], e.outs[0], indices, x_shape[0] * x_shape[1])


def max_pool_rows(e: Emitter, x: ir.Value, values: ir.Value, indices: ir.Value | None, rows: int) -> None:
    """The max pooling of ``e.node`` over ``rows`` planes: ``x`` (the first plane's
    first element), ``values`` and ``indices`` (their first output's; ``None`` for
    ``max_pool``, which returns the values only); a convolution chain pools one
    sample's planes at a time. The loop nest is the kernel layer's, which flex runs
    eagerly too (:func:`ember.backend.kernel.llvm.pooling.max_pool_rows`)."""
    x_ref, kernel, stride, padding, dilation, _ceil = e.node.args
    geometry = PoolGeometry(
        spatial=tuple(e.shape(x_ref)[2:]),
        out=tuple(e.graph.avals[e.node.outs[0]].shape[2:]),
        kernel=tuple(kernel),
        stride=tuple(stride),
        pad=tuple(lo for lo, _hi in padding),
        dilation=tuple(dilation),
    )
    kernel_max_pool_rows(e, geometry, e.dtype(x_ref), x, values, indices, rows)


def _pool_backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    grad, indices, input_shape = node.args
    avals = graph.avals
    return (
        avals[grad].dtype in _FLOATS
        and avals[indices].dtype == _INDEX
        and avals[indices].shape == avals[grad].shape
        and len(input_shape) >= 3
        and tuple(input_shape[:2]) == avals[grad].shape[:2]
    )


def _max_pool_backward(e: Emitter) -> None:
    grad, indices, input_shape = e.node.args
    plane = size_of(tuple(input_shape[2:]))
    max_pool_backward_rows(
        e,
        e.dtype(grad),
        e.args[grad],
        e.args[indices],
        e.outs[0],
        input_shape[0] * input_shape[1],
        plane,
        size_of(e.shape(grad)[2:]),
        lambda index: e.check_index(index, plane),
    )


#: op -> its hand-written lowering.
LIBRARY: dict[str, LibraryOp] = {
    "gather": LibraryOp(_gather_supports, no_scratch, _gather, checks=True),
    "scatter_add": LibraryOp(_scatter_supports, no_scratch, _scatter_add, checks=True),
    "embedding_backward": LibraryOp(_embedding_backward_supports, no_scratch, _embedding_backward, checks=True),
    "max_pool": LibraryOp(_pool_supports, no_scratch, _max_pool),
    "max_pool_with_indices": LibraryOp(_pool_supports, no_scratch, _max_pool),
    "max_pool_backward": LibraryOp(_pool_backward_supports, no_scratch, _max_pool_backward, checks=True),
    **CONV_OPS,
    **ROW_OPS,
    **ACTIVATION_OPS,
    **NORM_OPS,
    **ATTENTION_OPS,
    **FLASH_OPS,
    **LINEAR_OPS,
    **QUANTIZED_OPS,
    **COPY_OPS,
}

from ember.backend.fusion.llvm.rnn import RNN_LIBRARY  # noqa: E402 (it builds on the names above)

LIBRARY.update(RNN_LIBRARY)

__all__ = ["LIBRARY", "Emitter", "LibraryOp", "Scratch", "conv_core", "conv_geometry", "max_pool_rows"]

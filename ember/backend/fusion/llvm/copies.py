"""``cat`` and ``slice_assign`` as hand-written lowerings (see :mod:`.library` for the
contract): copies of their dense operands, element by element as integers of the
element's width (any dtype, bit for bit, NaN payloads included).

Left to the plan as eager calls, each is a return to Python in the middle of the
compiled step: an LSTM layer's weights are recorded per gate and concatenated on every
step (four ``cat`` calls per layer, and ``slice_assign`` for the gradient of the last
step's output), nine calls that split ``benchmarks/rnn.py``'s compiled LSTM step into
ten compiled segments.

* ``cat(xs, dim)``: per input, its ``[outer, size * inner]`` rows copied into the
  output's rows at the input's offset along ``dim`` (``np.concatenate``);
* ``slice_assign(x, slices, value)``: ``x`` copied, then ``value`` stored at the
  positions ``slices`` (``(start, stop, step)`` per leading dim, numpy's; a negative
  stop after a negative step reaches index 0) select.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.kernel.llvm.mathlib import I64
from ember.backend.kernel.views import contiguous_strides, size_of

#: Element widths copied as integers.
_WIDTHS = (1, 2, 4, 8)


def _bits(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype of ``dtype``'s width: what the copies move."""
    return np.dtype(f"u{dtype.itemsize}")


def _copyable(graph: Graph, refs: list[Any], dtype: np.dtype) -> bool:
    avals = graph.avals
    return dtype.itemsize in _WIDTHS and all(type(r) is Ref and avals[r].dtype == dtype for r in refs)


def _cat_supports(graph: Graph, node: Node, target: Any) -> bool:
    xs, dim = node.args
    if not isinstance(xs, (list, tuple)) or not xs or type(dim) is not int:
        return False
    dtype = graph.avals[node.outs[0]].dtype
    return _copyable(graph, list(xs), dtype) and 0 <= dim < len(graph.avals[node.outs[0]].shape)


def _cat(e: Emitter) -> None:
    xs, dim = e.node.args
    out_shape = e.graph.avals[e.node.outs[0]].shape
    bits = _bits(e.graph.avals[e.node.outs[0]].dtype)
    outer = size_of(out_shape[:dim])
    inner = size_of(out_shape[dim + 1 :])
    row = out_shape[dim] * inner  # one output row: every input's slab, in order
    b, out = e.b, e.outs[0]
    offset = 0
    for x in xs:
        width = e.shape(x)[dim] * inner
        if width and outer:
            src = e.args[x]

            def copy_row(r: ir.Value, src: ir.Value = src, width: int = width, offset: int = offset) -> None:
                source, target = (
                    b.mul(r, ir.Constant(I64, width)),
                    b.add(b.mul(r, ir.Constant(I64, row)), ir.Constant(I64, offset)),
                )
                e.span(0, width, lambda j: e.store(e.load(src, b.add(source, j), bits), out, b.add(target, j), bits))

            e.span(0, outer, copy_row)
        offset += width


def _assign_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, slices, value = node.args
    if type(x) is not Ref or not isinstance(slices, tuple):
        return False
    if not all(isinstance(s, tuple) and len(s) == 3 and all(type(v) is int for v in s) for s in slices):
        return False
    dtype = graph.avals[x].dtype
    return _copyable(graph, [x, value], dtype) and len(slices) <= len(graph.avals[x].shape)


def _slice_assign(e: Emitter) -> None:
    x, slices, value = e.node.args
    shape = e.shape(x)
    bits = _bits(e.dtype(x))
    out = e.outs[0]
    src, vals = e.args[x], e.args[value]
    e.span(0, size_of(shape), lambda i: e.store(e.load(src, i, bits), out, i, bits))
    v_shape = e.shape(value)
    if size_of(v_shape) == 0:
        return
    strides, v_strides = contiguous_strides(shape), contiguous_strides(v_shape)
    starts = [s[0] for s in slices] + [0] * (len(shape) - len(slices))
    steps = [s[2] for s in slices] + [1] * (len(shape) - len(slices))
    base = sum(start * stride for start, stride in zip(starts, strides))

    def body(pos: list[ir.Value]) -> None:
        target = e.linear(pos, tuple(step * stride for step, stride in zip(steps, strides)), ir.Constant(I64, base))
        e.store(e.load(vals, e.linear(pos, v_strides), bits), out, target, bits)

    e.loops.nest(list(v_shape), body)


#: op -> its lowering.
COPY_OPS: dict[str, LibraryOp] = {
    "cat": LibraryOp(_cat_supports, no_scratch, _cat),
    "slice_assign": LibraryOp(_assign_supports, no_scratch, _slice_assign),
}

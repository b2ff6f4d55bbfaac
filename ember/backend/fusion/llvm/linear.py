"""``linear`` (``x @ weight + bias``) of float32 values in training plans as one
hand-written lowering (see :mod:`.library` for the contract): the inline product
(:mod:`ember.backend.kernel.llvm.small_gemm`) with the bias row as its addend, added
as each register tile is stored.

Expanded (a matmul, then a broadcast add), the product's ``[m, n]`` result is written,
then read again and written once more by the add: an LSTM layer's input projection
``[64 * 32, 128] @ [128, 512] + b`` spent about 160 us of a 16 ms compiled training step
in that add. This is the loop flex's eager ``linear`` runs
(:func:`ember.backend.flex.native_gemm.matmul` with the bias), so compiled and eager
compute the same sums in the same order.

It applies where the plan would run the inline product anyway: float32, a bias, a
single-threaded BLAS, ``n`` whole vectors of the host, at least one register tile of
rows, and a plan that does not run ember's blocked product (an inference plan on a
host whose BLAS is narrower: :func:`expanded_instead`, asked when the plan expands its
composites).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.fusion.llvm.sgemm import own_product_skips, own_sgemm
from ember.backend.kernel.llvm import jit, small_gemm
from ember.backend.kernel.llvm.small_gemm import Operand
from ember.backend.kernel.views import size_of

_F32 = np.dtype(np.float32)


def _supports(graph: Graph, node: Node, target: Any) -> bool:
    x, weight, bias = node.args
    if any(type(r) is not Ref for r in (x, weight, bias)):
        return False
    avals = graph.avals
    xs, ws, bs = avals[x].shape, avals[weight].shape, avals[bias].shape
    if any(avals[r].dtype != _F32 for r in (x, weight, bias)) or len(xs) < 2 or len(ws) != 2 or bs != ws[1:]:
        return False
    blas = target.blas
    if blas is None or blas.threads > 1 or not small_gemm.enabled() or xs[-1] != ws[0] or ws[0] == 0:
        return False
    return size_of(xs[:-1]) >= small_gemm.ROWS and small_gemm.applies(ws[1], small_gemm.lanes(jit.vector_width()))


def expanded_instead(graph: Graph, node: Node) -> bool:
    """Whether a ``linear`` this lowering supports is expanded all the same: in a plan
    that runs ember's blocked product (:func:`~ember.backend.fusion.llvm.sgemm.own_sgemm`
    of the graph as recorded; the expanded graph no longer shows its backward ops), for
    a product too large for the inline loops there
    (:func:`~ember.backend.fusion.llvm.sgemm.own_product_skips`)."""
    if own_sgemm(graph) is None:
        return False
    x, weight, _ = node.args
    k, n = graph.avals[weight].shape
    m = size_of(graph.avals[x].shape[:-1])
    return not own_product_skips(m, n, k, small_gemm.lanes(jit.vector_width()))


def _linear(e: Emitter) -> None:
    x_ref, w_ref, b_ref = e.node.args
    k, n = e.shape(w_ref)
    m = size_of(e.shape(x_ref)[:-1])
    lanes = small_gemm.lanes(e.module.vector_width)
    x, w, bias = (e.args[r] for r in (x_ref, w_ref, b_ref))
    addend = Operand(bias, 0)  # the bias row, broadcast over the rows
    assert small_gemm.emit_shared_gemm(e, m, n, k, Operand(x, k), Operand(w, n), Operand(e.outs[0], n), lanes, addend)


#: op -> its lowering.
LINEAR_OPS: dict[str, LibraryOp] = {"linear": LibraryOp(_supports, no_scratch, _linear)}

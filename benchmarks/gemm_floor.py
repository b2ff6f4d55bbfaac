"""The GEMM floor of a compiled step: the matrix products its trace makes, timed alone.

``gemm_calls(compiled)`` reads the trace of an ``ember.compile``d function (after one
call) and lists its products as ``(batch, m, k, n, transpose_a, transpose_b)``:
``matmul`` nodes as they are, ``linear`` as ``[rows, k] x [k, n]``,
``linear_backward`` as the input gradient ``grad x weight^T`` and the weight gradient
``x^T x grad`` (the ones the node asks for), and ``attention``/``attention_backward``
as the products their library steps make per (batch, head) block. ``gemm_runner(calls)`` makes a function that runs
exactly those products on random float32 operands with numpy's OpenBLAS ``sgemm``
(transposed operands as views, as a BLAS call takes them): timed, it is what a step
could not go below with that BLAS, so a table can show how far the rest of the step
is from the limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

Gemm = tuple[int, int, int, int, bool, bool]


def gemm_calls(compiled: Any) -> list[Gemm]:
    """The matrix products of the (first) trace of ``compiled`` (call it once first)."""
    entries = list(compiled._entries.values())
    if not entries:
        raise ValueError("gemm_calls: the compiled function has no trace yet; call it once first")
    graph = entries[0].graph
    avals = graph.avals

    def shape(arg: Any) -> tuple[int, ...]:
        return tuple(avals[arg].shape)

    calls: list[Gemm] = []
    for node in graph.nodes:
        if node.op == "matmul":
            a, b = shape(node.args[0]), shape(node.args[1])
            batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))
            calls.append((batch, a[-2], a[-1], b[-1], False, False))
        elif node.op == "linear":
            x, w = shape(node.args[0]), shape(node.args[1])
            calls.append((1, math.prod(x[:-1]), w[0], w[1], False, False))
        elif node.op == "linear_backward":
            x, w = shape(node.args[0]), shape(node.args[1])
            need_x, need_w = node.args[3], node.args[4]
            rows = math.prod(x[:-1])
            if need_x:  # grad [rows, n] x weight^T [n, k]
                calls.append((1, rows, w[1], w[0], False, True))
            if need_w:  # x^T [k, rows] x grad [rows, n]
                calls.append((1, w[0], rows, w[1], True, False))
        elif node.op in ("attention", "attention_backward"):  # a library step's ?gemm per block
            calls.extend(_attention_gemms(node, shape))
    return calls


def _attention_gemms(node: Any, shape: Callable[[Any], tuple[int, ...]]) -> list[Gemm]:
    """The products inside one ``attention`` (``Q K^T``, ``P V``) or ``attention_backward``
    (``D^T G``, ``G V^T``, ``dS K``, ``dS^T Q``, those it is asked for) node."""
    q, k, v = (shape(a) for a in node.args[:3])
    batch, nq, dim, nk, dim_v = math.prod(q[:-2]), q[-2], q[-1], k[-2], v[-1]
    if node.op == "attention":  # K^T as a dense operand, as the composite's matmul took it (the
        # first transposed product opens a step's backward for train_step.py's eval floor)
        return [(batch, nq, dim, nk, False, False), (batch, nq, nk, dim_v, False, False)]
    need_q, need_k, need_v, need_s = node.args[9:13]
    calls = [(batch, nk, nq, dim_v, True, False)] if need_v else []
    if need_q or need_k or need_s:
        calls.append((batch, nq, dim_v, nk, False, True))
    if need_q:
        calls.append((batch, nq, nk, dim, False, False))
    if need_k:
        calls.append((batch, nk, nq, dim, True, False))
    return calls


def _operands(call: Gemm, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    batch, m, k, n, ta, tb = call
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + ((k, m) if ta else (m, k)), dtype=np.float32)
    b = rng.standard_normal(lead + ((n, k) if tb else (k, n)), dtype=np.float32)
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return a, b


def gemm_runner(calls: list[Gemm], product: str = "blas") -> Callable[[], None]:
    """A function running all of ``calls`` once on fixed random operands (outputs
    preallocated): time it beside the step, in the same alternating rounds.

    ``product="blas"`` runs each through numpy's OpenBLAS; ``"ember"`` runs the 2-D ones
    through flex's inline product (:mod:`ember.backend.flex.native_gemm`, the loops
    compiled training plans run) where it applies, OpenBLAS otherwise: compiled plans
    take ember's own products where OpenBLAS's kernels are narrower than the host."""
    rng = np.random.default_rng(0)
    work = []
    for call in calls:
        a, b = _operands(call, rng)
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), np.float32)
        work.append((a, b, out))
    if product == "ember":
        from ember.backend.flex import native_gemm

        for a, b, _ in work:  # compiled once per shape before any timing
            if a.ndim == 2:
                native_gemm.matmul(a, b)

        def inline() -> None:
            for a, b, out in work:
                if a.ndim != 2 or native_gemm.matmul(a, b) is None:
                    np.matmul(a, b, out=out)

        return inline

    def once() -> None:
        for a, b, out in work:
            np.matmul(a, b, out=out)

    return once


def flops(calls: list[Gemm]) -> int:
    """Floating-point operations of ``calls`` (2 m k n per product)."""
    return sum(2 * batch * m * k * n for batch, m, k, n, _, _ in calls)

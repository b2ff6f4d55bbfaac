"""Matrix products: forward recording and backward steps side by side.

Compute-bound: inputs are kept (or, under balanced checkpointing, recomputed when
they are outputs of memory-bound ops).
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast
from ember.backend.autodiff.rules.spectral import COMPLEX_NP, conj
from ember.backend.composites import COMPOSITES


def _transpose(ops, x):
    rank = len(x.shape)
    return ops.permute(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _matmul_step(ops, g, saved, ctx):
    a, b = saved
    shape_a, shape_b = ctx
    if g.dtype in COMPLEX_NP:  # A^H g and g B^H (PyTorch's convention for complex gradients)
        a, b = conj(ops, a), conj(ops, b)
    ga = None if shape_a is None else unbroadcast(ops, ops.matmul(g, _transpose(ops, b)), shape_a)
    gb = None if shape_b is None else unbroadcast(ops, ops.matmul(_transpose(ops, a), g), shape_b)
    return (ga, gb)


def _linear_step(ops, g, saved, ctx):
    x, w = saved
    track_x, track_w, track_b = ctx
    out = ops.linear_backward(x, w, g, track_x, track_w, track_b)  # (composites.run, inlined: every step)
    return COMPOSITES["linear_backward"](ops, x, w, g, track_x, track_w, track_b) if out is NotImplemented else out


class LinalgRules(RecordMixin):
    """Recording of matmul and the fused linear layer."""

    def matmul(self, a: AutodiffTensor, b: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.matmul(a.inner, b.inner)
        na, nb = a.node, b.node
        if na is None and nb is None:
            return AutodiffTensor(out, None)
        saved = (self._keep(a) if nb is not None else None, self._keep(b) if na is not None else None)
        ctx = (None if na is None else a.shape, None if nb is None else b.shape)
        return self._record(out, (na, nb), _matmul_step, saved, ctx)

    def linear(self, x: AutodiffTensor, weight: AutodiffTensor, bias: Any) -> Any:
        out = self.inner.linear(x.inner, weight.inner, None if bias is None else bias.inner)
        if out is NotImplemented:
            return NotImplemented
        nx, nw = x.node, weight.node
        nb = None if bias is None else bias.node
        if nx is None and nw is None and nb is None:
            return AutodiffTensor(out, None)
        saved = (self._keep(x) if nw is not None else None, self._keep(weight) if nx is not None else None)
        ctx = (nx is not None, nw is not None, nb is not None)
        return self._record(out, (nx, nw, nb), _linear_step, saved, ctx)

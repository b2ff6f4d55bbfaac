"""Indexing ops: forward recording and backward steps side by side.

Gradients flow to the values read (gather, select) or written (scatter, select_add);
indices never get gradients.
"""

from __future__ import annotations

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, zeros


def _gather_step(ops, g, saved, ctx):
    (indices,) = saved
    shape, dim = ctx
    return (ops.scatter_add(zeros(ops, shape, g.dtype), dim, indices, g),)


def _scatter_step(ops, g, saved, ctx):
    (indices,) = saved
    dim, track_x, track_v = ctx
    return (g if track_x else None, ops.gather(g, dim, indices) if track_v else None)


def _select_step(ops, g, saved, ctx):
    (indices,) = saved
    shape, dim = ctx
    return (ops.select_add(zeros(ops, shape, g.dtype), dim, indices, g),)


def _select_add_step(ops, g, saved, ctx):
    (indices,) = saved
    dim, track_x, track_v = ctx
    return (g if track_x else None, ops.select(g, dim, indices) if track_v else None)


class IndexingRules(RecordMixin):
    """Recording of indexing ops."""

    def gather(self, x: AutodiffTensor, dim: int, indices: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.gather(x.inner, dim, indices.inner)
        if x.node is None:
            return AutodiffTensor(out, None)
        return self._record(out, (x.node,), _gather_step, (indices,), (x.shape, dim))

    def scatter_add(
        self, x: AutodiffTensor, dim: int, indices: AutodiffTensor, values: AutodiffTensor
    ) -> AutodiffTensor:
        out = self.inner.scatter_add(x.inner, dim, indices.inner, values.inner)
        if x.node is None and values.node is None:
            return AutodiffTensor(out, None)
        ctx = (dim, x.node is not None, values.node is not None)
        return self._record(out, (x.node, values.node), _scatter_step, (indices,), ctx)

    def select(self, x: AutodiffTensor, dim: int, indices: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.select(x.inner, dim, indices.inner)
        if x.node is None:
            return AutodiffTensor(out, None)
        return self._record(out, (x.node,), _select_step, (indices,), (x.shape, dim))

    def select_add(
        self, x: AutodiffTensor, dim: int, indices: AutodiffTensor, values: AutodiffTensor
    ) -> AutodiffTensor:
        out = self.inner.select_add(x.inner, dim, indices.inner, values.inner)
        if x.node is None and values.node is None:
            return AutodiffTensor(out, None)
        ctx = (dim, x.node is not None, values.node is not None)
        return self._record(out, (x.node, values.node), _select_add_step, (indices,), ctx)

    def argwhere(self, x: AutodiffTensor) -> AutodiffTensor:
        return AutodiffTensor(self.inner.argwhere(x.inner), None)

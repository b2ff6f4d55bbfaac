"""Layout ops: forward recording and backward steps side by side.

View-like ops (reshape, permute, flip, expand, slice) are memory-bound and
recomputed under balanced checkpointing; cat and slice_assign keep nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast, zeros


def _reshape_step(ops, g, saved, shape):
    return (ops.reshape(g, shape),)


def _permute_step(ops, g, saved, axes):
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return (ops.permute(g, tuple(inverse)),)


def _flip_step(ops, g, saved, axes):
    return (ops.flip(g, axes),)


def _expand_step(ops, g, saved, shape):
    return (unbroadcast(ops, g, shape),)


def _slice_step(ops, g, saved, ctx):
    shape, slices = ctx
    return (ops.slice_assign(zeros(ops, shape, g.dtype), slices, g),)


def _slice_assign_step(ops, g, saved, ctx):
    slices, track_x, track_v = ctx
    gx = gv = None
    if track_x:
        region = tuple(len(range(*s)) for s in slices)
        gx = ops.slice_assign(g, slices, zeros(ops, region, g.dtype))
    if track_v:
        gv = ops.slice(g, slices)
    return (gx, gv)


def _cat_step(ops, g, saved, ctx):
    dim, sizes, tracked = ctx
    grads = []
    start = 0
    for size, is_tracked in zip(sizes, tracked):
        if is_tracked:
            region = tuple((start, start + size, 1) if d == dim else (0, n, 1) for d, n in enumerate(g.shape))
            grads.append(ops.slice(g, region))
        else:
            grads.append(None)
        start += size
    return tuple(grads)


class LayoutRules(RecordMixin):
    """Recording of layout ops."""

    def _view(self, op: Any, x: AutodiffTensor, arg: Any, step: Any, ctx: Any) -> AutodiffTensor:
        out = op(x.inner, arg)
        if x.node is None:
            return AutodiffTensor(out, None)
        recompute = (partial(_apply, op, arg), (self._keep(x),)) if self._balanced else None
        return self._record(out, (x.node,), step, (), ctx, recompute)

    def reshape(self, x: AutodiffTensor, shape: tuple[int, ...]) -> AutodiffTensor:
        return self._view(self.inner.reshape, x, shape, _reshape_step, x.shape)

    def permute(self, x: AutodiffTensor, axes: tuple[int, ...]) -> AutodiffTensor:
        return self._view(self.inner.permute, x, axes, _permute_step, axes)

    def flip(self, x: AutodiffTensor, axes: tuple[int, ...]) -> AutodiffTensor:
        return self._view(self.inner.flip, x, axes, _flip_step, axes)

    def expand(self, x: AutodiffTensor, shape: tuple[int, ...]) -> AutodiffTensor:
        return self._view(self.inner.expand, x, shape, _expand_step, x.shape)

    def slice(self, x: AutodiffTensor, slices: Any) -> AutodiffTensor:
        return self._view(self.inner.slice, x, slices, _slice_step, (x.shape, slices))

    def slice_assign(self, x: AutodiffTensor, slices: Any, value: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.slice_assign(x.inner, slices, value.inner)
        if x.node is None and value.node is None:
            return AutodiffTensor(out, None)
        ctx = (slices, x.node is not None, value.node is not None)
        return self._record(out, (x.node, value.node), _slice_assign_step, (), ctx)

    def cat(self, xs: Any, dim: int) -> AutodiffTensor:
        out = self.inner.cat([x.inner for x in xs], dim)
        parents = tuple(x.node for x in xs)
        if all(p is None for p in parents):
            return AutodiffTensor(out, None)
        ctx = (dim, tuple(x.shape[dim] for x in xs), tuple(p is not None for p in parents))
        return self._record(out, parents, _cat_step, (), ctx)


def _apply(op, arg, x):
    return op(x, arg)

"""Fused layer norm and RMS norm: forward recording and backward step side by side.

The forward's row statistics (mean and ``1 / std``, ``[..., 1]``) are kept with the
input, so the backward is one call of the inner backend's ``layer_norm_backward`` (or,
where a backend has none, as when differentiating the backward itself, its composite
in :mod:`ember.backend.composites.norm`).
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.composites import COMPOSITES, run


def _layer_norm_step(ops, g, saved, ctx):
    x, gamma, mean, rstd = saved
    need_x, need_gamma, need_beta, epsilon = ctx
    is_tracked = getattr(ops, "is_tracked", None)
    if is_tracked is not None and is_tracked(x):
        # Differentiating the backward (create_graph): the kept statistics are constants,
        # so take them again from x, through the forward's composite.
        _, mean, rstd = COMPOSITES["layer_norm"](ops, x, None, None, epsilon)
    return run(ops, "layer_norm_backward", x, gamma, mean, rstd, g, need_x, need_gamma, need_beta)


def _rms_norm_step(ops, g, saved, ctx):
    x, gamma, rstd = saved
    need_x, need_gamma, epsilon = ctx
    is_tracked = getattr(ops, "is_tracked", None)
    if is_tracked is not None and is_tracked(x):  # create_graph: rstd again from x (see above)
        _, rstd = COMPOSITES["rms_norm"](ops, x, None, epsilon)
    return run(ops, "rms_norm_backward", x, gamma, rstd, g, need_x, need_gamma)


class NormRules(RecordMixin):
    """Recording of the fused layer norm and RMS norm (compute-bound: the input is kept)."""

    def layer_norm(self, x: AutodiffTensor, gamma: Any, beta: Any, epsilon: float) -> Any:
        result = self.inner.layer_norm(
            x.inner, None if gamma is None else gamma.inner, None if beta is None else beta.inner, epsilon
        )
        if result is NotImplemented:
            return NotImplemented
        out, mean, rstd = result
        nx = x.node
        ng = None if gamma is None else gamma.node
        nb = None if beta is None else beta.node
        stats = (AutodiffTensor(mean, None), AutodiffTensor(rstd, None))
        if nx is None and ng is None and nb is None:
            return (AutodiffTensor(out, None), *stats)
        saved = (self._keep(x), None if gamma is None else self._keep(gamma), mean, rstd)
        node = self._record(
            out, (nx, ng, nb), _layer_norm_step, saved, (nx is not None, ng is not None, nb is not None, epsilon)
        )
        return (node, *stats)

    def rms_norm(self, x: AutodiffTensor, gamma: Any, epsilon: float) -> Any:
        result = self.inner.rms_norm(x.inner, None if gamma is None else gamma.inner, epsilon)
        if result is NotImplemented:
            return NotImplemented
        out, rstd = result
        nx = x.node
        ng = None if gamma is None else gamma.node
        if nx is None and ng is None:
            return (AutodiffTensor(out, None), AutodiffTensor(rstd, None))
        saved = (self._keep(x), None if gamma is None else self._keep(gamma), rstd)
        node = self._record(out, (nx, ng), _rms_norm_step, saved, (nx is not None, ng is not None, epsilon))
        return (node, AutodiffTensor(rstd, None))

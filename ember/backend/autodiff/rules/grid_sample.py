"""``grid_sample``: forward recording and backward step side by side.

The backward is one call of the inner backend's ``grid_sample_backward`` (the
gradients for the input and for the grid); where the inner backend has no kernel the
forward returns ``NotImplemented`` and the composite (``ember.tensor.grid_sample``)
runs over the differentiable primitives instead. Compute-bound: both inputs are kept.
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.errors import GraphError


def _grid_sample_step(ops, g, saved, ctx):
    x, grid = saved
    mode, padding_mode, align_corners, need_x, need_grid = ctx
    result = ops.grid_sample_backward(g, x, grid, mode, padding_mode, align_corners, need_x, need_grid)
    if result is NotImplemented:
        raise GraphError(
            "ember: grid_sample: its gradient has no second-order rule on this backend; "
            "call backward without create_graph, or use a device without a grid_sample kernel"
        )
    return result


class GridSampleRules(RecordMixin):
    """Recording of the fused ``grid_sample``."""

    def grid_sample(
        self, x: AutodiffTensor, grid: AutodiffTensor, mode: str, padding_mode: str, align_corners: bool
    ) -> Any:
        out = self.inner.grid_sample(x.inner, grid.inner, mode, padding_mode, align_corners)
        if out is NotImplemented:
            return NotImplemented
        nx, ng = x.node, grid.node
        if nx is None and ng is None:
            return AutodiffTensor(out, None)
        ctx = (mode, padding_mode, align_corners, nx is not None, ng is not None)
        return self._record(out, (nx, ng), _grid_sample_step, (self._keep(x), self._keep(grid)), ctx)

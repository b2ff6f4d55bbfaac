"""Spatial transformers: ``grid_sample`` and ``affine_grid`` (PyTorch's
``nn.functional.grid_sample``/``affine_grid``; 4-D and 5-D inputs).

``grid_sample`` is a fused op (:class:`~ember.backend.ops.FusedOp` ``GRID_SAMPLE``):
flex runs it, forward and backward, as vectorised numpy kernels
(``ember/backend/flex/grid_sample.py``); on other backends its composite
(:mod:`ember.backend.composites.grid_sample`: a ``gather`` of each corner and a
weighted sum) runs over the primitives, which autodiff differentiates for the input and
the grid.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.backend.ops import FusedOp
from ember.errors import DeviceError, DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import FLOAT_NP
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor

_MODES = ("bilinear", "nearest")
_PADDING = ("zeros", "border", "reflection")


def grid_sample(
    input: Tensor,
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
) -> Tensor:
    """Samples ``input`` ``[N, C, H, W]`` (or ``[N, C, D, H, W]``) at the points of
    ``grid`` ``[N, Ho, Wo, 2]`` (``[N, Do, Ho, Wo, 3]``), normalised to ``[-1, 1]`` with
    x (the width) first: ``[N, C, Ho, Wo]``. ``mode`` is ``"bilinear"`` (trilinear in
    5-D) or ``"nearest"``; ``padding_mode`` ``"zeros"``, ``"border"`` or ``"reflection"``
    says what lies outside; ``align_corners`` (default ``False``) maps -1 and 1 to the
    centres of the corner pixels rather than their outer edges. Differentiable for
    ``input`` and ``grid``.

    >>> from ember import Device, Tensor
    >>> x = Tensor.from_floats([[[[0.0, 1.0], [2.0, 3.0]]]], device=Device.flex())
    >>> g = Tensor.from_floats([[[[0.0, 0.0], [1.0, -1.0]]]], device=Device.flex())
    >>> grid_sample(x, g, align_corners=True).tolist()
    [[[[1.5, 1.0]]]]
    """
    align = bool(align_corners) if align_corners is not None else False
    _check(input, grid, mode, padding_mode)
    return Tensor(
        fused(FusedOp.GRID_SAMPLE, input.device, input._primitive, grid._primitive, mode, padding_mode, align),
        input.device,
    )


def _check(x: Tensor, grid: Tensor, mode: str, padding_mode: str) -> None:
    if not isinstance(x, Tensor) or not isinstance(grid, Tensor):
        raise DTypeError("ember: grid_sample: input and grid must be Tensors")
    if mode not in _MODES:
        hint = " (bicubic is not implemented)" if mode == "bicubic" else ""
        raise ValueRangeError(f"ember: grid_sample: mode must be one of {_MODES}, got {mode!r}{hint}")
    if padding_mode not in _PADDING:
        raise ValueRangeError(f"ember: grid_sample: padding_mode must be one of {_PADDING}, got {padding_mode!r}")
    xs, gs = tuple(x.dims()), tuple(grid.dims())
    if len(xs) not in (4, 5) or len(gs) != len(xs) or gs[0] != xs[0] or gs[-1] != len(xs) - 2:
        raise ShapeError(
            f"ember: grid_sample: needs input [N, C, H, W] with grid [N, Ho, Wo, 2] (or 5-D input with grid "
            f"[N, Do, Ho, Wo, 3]), got input {list(xs)} and grid {list(gs)}"
        )
    if x._primitive.dtype not in FLOAT_NP or grid._primitive.dtype != x._primitive.dtype:
        raise DTypeError(
            f"ember: grid_sample: input and grid must be floats of one dtype, got {x.dtype} and {grid.dtype}; cast first"
        )
    if x.device != grid.device:
        raise DeviceError(f"ember: grid_sample: input is on {x.device!r} but grid on {grid.device!r}; move one")


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid of the affine maps ``theta`` ``[N, 2, 3]`` (``[N, 3, 4]``) for an
    output of ``size`` ``[N, C, H, W]`` (``[N, C, D, H, W]``): ``[N, H, W, 2]``
    (``[N, D, H, W, 3]``), each point ``theta @ (x, y[, z], 1)`` over the normalised
    output coordinates (``torch.nn.functional.affine_grid``). Differentiable for ``theta``.

    >>> from ember import Device, Tensor
    >>> theta = Tensor.from_floats([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], device=Device.flex())
    >>> affine_grid(theta, [1, 1, 2, 2], align_corners=True).tolist()
    [[[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]]
    """
    align = bool(align_corners) if align_corners is not None else False
    if not isinstance(theta, Tensor) or theta._primitive.dtype not in FLOAT_NP:
        raise DTypeError("ember: affine_grid: theta must be a float Tensor")
    size = [int(s) for s in size]
    rank = len(size) - 2
    ts = list(theta.dims())
    if rank not in (2, 3) or ts != [size[0], rank, rank + 1]:
        raise ShapeError(
            f"ember: affine_grid: needs theta [N, 2, 3] with size [N, C, H, W] (or [N, 3, 4] with [N, C, D, H, W]), "
            f"got theta {ts} and size {size}"
        )
    spatial = size[2:]
    axes = []
    for n in reversed(spatial):  # x (the last spatial dim) first
        line = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        axes.append(line if align else line * (n - 1) / n)
    mesh = np.meshgrid(*axes[::-1], indexing="ij")  # the spatial dims in order
    base = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, rank + 1)
    base_t = Tensor.from_data(base.astype(theta._primitive.dtype), device=theta.device)
    grid = base_t.unsqueeze_dim(0).matmul(theta.swap_dims(1, 2))  # [N, P, rank]
    return grid.reshape([size[0], *spatial, rank])

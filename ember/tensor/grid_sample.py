"""Spatial transformers: ``grid_sample`` and ``affine_grid`` (PyTorch's
``nn.functional.grid_sample``/``affine_grid``; 4-D and 5-D inputs).

``grid_sample`` is a fused op (:class:`~ember.backend.ops.FusedOp` ``GRID_SAMPLE``):
flex runs it, forward and backward, as vectorised numpy kernels
(``ember/backend/flex/grid_sample.py``); on other backends the composite below runs
over the tensor ops (``gather`` of each corner and a weighted sum), which autodiff
differentiates for the input and the grid. Source coordinates follow PyTorch:
``x = ((g + 1) * size - 1) / 2`` (``(g + 1) / 2 * (size - 1)`` with ``align_corners``),
then clipped (``border``) or reflected and clipped (``reflection``); ``nearest`` rounds
half to even.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from ember.backend.ops import FusedOp
from ember.errors import DeviceError, DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import FLOAT_NP
from ember.tensor.fused import composite, fused
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
    return Tensor(fused(FusedOp.GRID_SAMPLE, input.device, input._p, grid._p, mode, padding_mode, align), input.device)


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
    if x._p.dtype not in FLOAT_NP or grid._p.dtype != x._p.dtype:
        raise DTypeError(
            f"ember: grid_sample: input and grid must be floats of one dtype, got {x.dtype} and {grid.dtype}; cast first"
        )
    if x.device != grid.device:
        raise DeviceError(f"ember: grid_sample: input is on {x.device!r} but grid on {grid.device!r}; move one")


def _reflect(c: Tensor, twice_low: int, twice_high: int) -> Tensor:
    if twice_low == twice_high:
        return c.zeros_like()
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = c.sub_scalar(low).abs()
    extra = c.fmod_scalar(span)
    odd = c.div_scalar(span).floor().remainder_scalar(2).equal_elem(1)
    return extra.add_scalar(low).mask_where(odd, extra.neg().add_scalar(span + low))


def _source(g: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    if align_corners:
        c = g.add_scalar(1).div_scalar(2).mul_scalar(size - 1)
    else:
        c = g.add_scalar(1).mul_scalar(size).sub_scalar(1).div_scalar(2)
    if padding_mode == "border":
        c = c.clamp(0, size - 1)
    elif padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        c = _reflect(c, *twice).clamp(0, size - 1)
    return c


@composite(FusedOp.GRID_SAMPLE)
def grid_sample_composite(x: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners: bool) -> Tensor:
    """``grid_sample`` over the tensor ops: one ``gather`` per corner and a weighted sum."""
    n, c, *spatial = x.dims()
    out = list(grid.dims())[1:-1]
    rank = len(spatial)
    points = math.prod(out)
    g = grid.reshape([n, points, rank])
    coords = [
        _source(
            g.slice([(0, n), (0, points), (rank - 1 - d, rank - d)]).reshape([n, points]),
            size,
            padding_mode,
            align_corners,
        )
        for d, size in enumerate(spatial)
    ]
    strides = [math.prod(spatial[d + 1 :]) for d in range(rank)]
    slab = x.reshape([n, c, math.prod(spatial)])
    taps: list[tuple[list[Tensor], Tensor | None]]
    if mode == "nearest":
        taps = [([co.round() for co in coords], None)]
    else:
        low = [co.floor() for co in coords]
        frac = [co.sub(f) for co, f in zip(coords, low)]
        taps = []
        for bits in itertools.product((0, 1), repeat=rank):
            weight = None
            for d, bit in enumerate(bits):
                w = frac[d] if bit else frac[d].neg().add_scalar(1)
                weight = w if weight is None else weight.mul(w)
            taps.append(([f.add_scalar(bit) if bit else f for f, bit in zip(low, bits)], weight))
    result = None
    for at, weight in taps:
        valid = None
        flat = None
        for i, size in zip(at, spatial):
            inside = i.greater_equal_elem(0).bool_and(i.lower_equal_elem(size - 1))
            valid = inside if valid is None else valid.bool_and(inside)
        assert valid is not None
        for i, stride in zip(at, strides):
            index = i.detach().mask_fill(valid.bool_not(), 0).int().mul_scalar(stride)
            flat = index if flat is None else flat.add(index)
        assert flat is not None
        w = valid.float().cast(x.dtype) if weight is None else weight.mask_fill(valid.bool_not(), 0)
        values = slab.gather(2, flat.reshape([n, 1, points]).expand([n, c, points]))
        term = values.mul(w.reshape([n, 1, points]))
        result = term if result is None else result.add(term)
    assert result is not None
    return result.reshape([n, c, *out])


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
    if not isinstance(theta, Tensor) or theta._p.dtype not in FLOAT_NP:
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
    base_t = Tensor.from_data(base.astype(theta._p.dtype), device=theta.device)
    grid = base_t.unsqueeze_dim(0).matmul(theta.swap_dims(1, 2))  # [N, P, rank]
    return grid.reshape([size[0], *spatial, rank])

"""Resizing: ``interpolate`` (PyTorch's ``nn.functional.interpolate``; Burn's
``interpolate`` covers nearest, bilinear and bicubic).

The input is channels-first ``[batch, channels, *spatial]`` with 1 to 3 spatial
dims. Every mode is separable, so each spatial dim is resized in turn: the source
positions and weights of one dim are computed on the host with PyTorch's formulas
(``nearest``: ``floor(i * scale)``; ``linear``: the two neighbours of
``(i + 0.5) * scale - 0.5``, or ``i * scale`` with ``align_corners``; ``bicubic``:
four neighbours with Keys' kernel, ``a = -0.75``, edges clamped) and applied with
``select`` and a weighted sum, which autodiff and every backend run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import FLOAT_NP
from ember.tensor.tensor import Tensor

_MODES = {
    "nearest": None,
    "nearest-exact": None,
    "linear": 1,
    "bilinear": 2,
    "bicubic": 2,
    "trilinear": 3,
    "area": None,
}
_CUBIC_A = -0.75


def _per_dim(name: str, value: Any, rank: int, kind: type) -> list:
    values = list(value) if isinstance(value, Sequence) else [value] * rank
    if len(values) != rank or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueRangeError(f"ember: interpolate: {name} must be a number or {rank} numbers, got {value!r}")
    return [kind(v) for v in values]


def _nearest(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    """PyTorch's nearest source index, in float32 as it computes it."""
    out = np.arange(n_out, dtype=np.float32)
    if n_out == n_in and not exact:
        return np.arange(n_out, dtype=np.int64)
    if n_out == 2 * n_in and not exact:
        return np.arange(n_out, dtype=np.int64) >> 1
    step = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    source = np.floor(((out + np.float32(0.5)) if exact else out) * step)
    return np.minimum(source.astype(np.int64), n_in - 1)


def _source_scale(n_in: int, n_out: int, scale: float | None, align_corners: bool, work: Any) -> Any:
    if align_corners:
        return work((n_in - 1) / (n_out - 1)) if n_out > 1 else work(0.0)
    return work(1.0 / scale) if scale else work(n_in) / work(n_out)


def _linear(n_in: int, n_out: int, scale: float | None, align_corners: bool, work: Any) -> list[tuple]:
    step = _source_scale(n_in, n_out, scale, align_corners, work)
    out = np.arange(n_out, dtype=work)
    source = out * step if align_corners else np.maximum(step * (out + work(0.5)) - work(0.5), work(0.0))
    low = np.minimum(source.astype(np.int64), n_in - 1)
    high = low + (low < n_in - 1)
    frac = np.clip(source - low.astype(work), 0.0, 1.0).astype(work)
    return [(low, work(1.0) - frac), (high, frac)]


def _cubic(n_in: int, n_out: int, scale: float | None, align_corners: bool, work: Any) -> list[tuple]:
    step = _source_scale(n_in, n_out, scale, align_corners, work)
    out = np.arange(n_out, dtype=work)
    source = out * step if align_corners else step * (out + work(0.5)) - work(0.5)
    base = np.floor(source)
    t = (source - base).astype(work)
    a = work(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    base = base.astype(np.int64)
    return [(np.clip(base - 1 + k, 0, n_in - 1), w.astype(work)) for k, w in enumerate(weights)]


def _apply(x: Tensor, axis: int, taps: list[tuple]) -> Tensor:
    shape = [1] * x.rank
    shape[axis] = -1
    out = None
    for index, weight in taps:
        picked = x.select(axis, Tensor.from_data(index, device=x.device))
        term = picked.mul(Tensor.from_data(weight.astype(x.dtype.np), device=x.device).reshape(shape))
        out = term if out is None else out.add(term)
    assert out is not None, "interpolate: no taps"  # every output position has at least one
    return out


def interpolate(
    x: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """``x`` ``[batch, channels, *spatial]`` resized to ``size`` (or ``spatial *
    scale_factor``, floored) with ``mode``: ``"nearest"``, ``"nearest-exact"``,
    ``"linear"`` (1 spatial dim), ``"bilinear"`` (2), ``"bicubic"`` (2), ``"trilinear"``
    (3) or ``"area"`` (adaptive average pooling; 1 or 2). ``align_corners`` (linear
    modes and bicubic) maps the corner pixels' centres onto each other."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: interpolate: the input must be a Tensor, got {type(x).__name__}")
    if mode not in _MODES:
        raise ValueRangeError(f"ember: interpolate: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    spatial = x.rank - 2
    if not 1 <= spatial <= 3:
        raise ShapeError(
            f"ember: interpolate: the input must be [batch, channels, *spatial] with 1-3 spatial dims, got {x.dims()}"
        )
    wanted = _MODES[mode]
    if wanted is not None and wanted != spatial:
        raise ShapeError(
            f"ember: interpolate: mode {mode!r} needs {wanted} spatial dims, the input {x.dims()} has {spatial}"
        )
    linear = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if align_corners is not None and not linear:
        raise ValueRangeError(
            f"ember: interpolate: align_corners is only for the linear modes and bicubic, not {mode!r}"
        )
    if (size is None) == (scale_factor is None):
        raise ValueRangeError("ember: interpolate: give exactly one of size and scale_factor")
    n_in = x.dims()[2:]
    scales: list[float | None]
    if size is not None:
        n_out = _per_dim("size", size, spatial, int)
        scales = [None] * spatial
    else:
        factors = _per_dim("scale_factor", scale_factor, spatial, float)
        if any(s <= 0 for s in factors):
            raise ValueRangeError(f"ember: interpolate: scale_factor must be > 0, got {scale_factor!r}")
        n_out = [math.floor(n * s) for n, s in zip(n_in, factors)]
        scales = list(factors)
    if any(n < 1 for n in n_out):
        raise ShapeError(f"ember: interpolate: the output size {n_out} must be >= 1 in every dim")
    if mode == "area":
        from ember.tensor.layer_ops import adaptive_avg_pool1d, adaptive_avg_pool2d

        if spatial == 3:
            raise ShapeError("ember: interpolate: mode 'area' takes 1 or 2 spatial dims")
        return (adaptive_avg_pool1d if spatial == 1 else adaptive_avg_pool2d)(x, tuple(n_out))
    source = x.dtype
    if linear and x._primitive.dtype not in FLOAT_NP:
        x = x.float()
    work = np.float64 if x._primitive.dtype == np.float64 else np.float32
    out = x
    image = linear and source is DType.UINT8
    dims = list(enumerate(zip(n_in, n_out, scales)))
    # uint8 images as PyTorch's kernels: the last dim first, each pass rounded half up
    # and clamped to [0, 255] (bicubic overshoots), the result uint8.
    for i, (a, b, s) in reversed(dims) if image else dims:
        axis = 2 + i
        if mode in ("nearest", "nearest-exact"):
            if a != b:
                out = out.select(axis, Tensor.from_data(_nearest(a, b, s, mode == "nearest-exact"), device=x.device))
        elif mode == "bicubic":
            out = _apply(out, axis, _cubic(a, b, s, bool(align_corners), work))
        else:
            out = _apply(out, axis, _linear(a, b, s, bool(align_corners), work))
        if image:
            out = out.add_scalar(0.5).floor().clamp(0.0, 255.0)
    return out.cast(DType.UINT8) if image else out

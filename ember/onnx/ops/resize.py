"""``Resize`` (nearest, linear, cubic), one resized axis at a time.

The source coordinate of every output position follows ONNX's
``coordinate_transformation_mode``; the taps (indices and weights) are computed on
the host once per input shape, and the values are gathered and weighted with
ember's ops, so the result is differentiable with respect to the input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axes, ints
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor

_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _source(mode: str, n: int, m: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """The input coordinate of each of ``m`` output positions."""
    x = np.arange(m, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = m / (scale * n)
        center = n / 2
        offset = center * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if m > 1 else np.zeros(m)
    if mode == "align_corners":
        length = scale * n  # ONNX divides by the unrounded output length (scales given: not m)
        return x * (n - 1) / (length - 1) if length != 1 else np.zeros(m)
    if mode == "asymmetric":
        return x / scale
    start, end = roi  # tf_crop_and_resize
    if m > 1:
        return start * (n - 1) + x * (end - start) * (n - 1) / (m - 1)
    return np.full(m, 0.5 * (start + end) * (n - 1))


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """The four cubic convolution weights of taps ``floor(x) - 1 .. floor(x) + 2``."""

    def near(d: np.ndarray) -> np.ndarray:
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def _taps(
    node: Node, n: int, m: int, scale: float, roi: tuple[float, float]
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray | None]:
    """For one axis: index arrays, weight arrays, and (tf_crop_and_resize) the outside mask."""
    mode = node.attr("mode", "nearest")
    coords = _source(node.attr("coordinate_transformation_mode", "half_pixel"), n, m, scale, roi)
    outside = None
    if node.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
        outside = (coords < 0) | (coords > n - 1)
    if mode == "nearest":
        rounding = _NEAREST[node.attr("nearest_mode", "round_prefer_floor")]
        index = np.clip(rounding(coords), 0, n - 1).astype(np.int64)
        return [index], [np.ones(m)], outside
    if mode == "linear":
        x = np.clip(coords, 0, n - 1)
        low = np.floor(x).astype(np.int64)
        high = np.minimum(low + 1, n - 1)
        w = x - low
        return [low, high], [1 - w, w], outside
    a = float(node.attr("cubic_coeff_a", -0.75))
    base = np.floor(coords).astype(np.int64)
    weights = _cubic_weights(coords - base, a)
    index = base[:, None] + np.arange(-1, 3)[None, :]
    if node.attr("exclude_outside", 0):
        weights = np.where((index < 0) | (index > n - 1), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    index = np.clip(index, 0, n - 1)
    return [index[:, j] for j in range(4)], [weights[:, j] for j in range(4)], outside


@op("Resize", host=(1, 2, 3), since=11)
def resize(node: Node) -> Callable[..., Any]:
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise node.attr_error("mode", "is not one of nearest, linear, cubic")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    if transform not in _MODES:
        raise node.attr_error("coordinate_transformation_mode", "is not supported")
    if node.attr("nearest_mode", "round_prefer_floor") not in _NEAREST:
        raise node.attr_error("nearest_mode", "is not supported")
    if int(node.attr("antialias", 0)):
        raise node.attr_error("antialias", "is not supported (resizing without an antialiasing filter)")
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    extrapolation = float(node.attr("extrapolation_value", 0.0))
    cache: dict[Any, Any] = {}
    node.uses("axes", "cubic_coeff_a", "exclude_outside")  # read per input shape (_taps, plan)

    def plan(shape: list[int], roi: Any, scales: Any, sizes: Any) -> list[tuple[int, int, Any]]:
        rank = len(shape)
        axes_attr = node.ints("axes")
        chosen = axes(node, axes_attr, rank) if axes_attr is not None else list(range(rank))
        roi_values = [float(v) for v in np.asarray(roi).reshape(-1)] if roi is not None and np.size(roi) else []
        if sizes is not None and np.size(sizes):
            targets = ints(sizes)
            if policy != "stretch":
                ratios = [t / shape[a] for a, t in zip(chosen, targets)]
                r = min(ratios) if policy == "not_larger" else max(ratios)
                targets = [math.floor(shape[a] * r + 0.5) for a in chosen]
                factors = [r] * len(chosen)
            else:
                factors = [t / shape[a] for a, t in zip(chosen, targets)]
        elif scales is not None and np.size(scales):
            factors = [float(v) for v in np.asarray(scales).reshape(-1)]
            targets = []
            for i, (a, f) in enumerate(zip(chosen, factors)):
                start, end = (
                    (roi_values[i], roi_values[i + len(chosen)])
                    if transform == "tf_crop_and_resize" and roi_values
                    else (0.0, 1.0)
                )
                targets.append(math.floor(shape[a] * (end - start) * f))
        else:
            raise node.error("needs scales or sizes")
        if len(factors) != len(chosen):
            raise node.error(f"{len(factors)} scales or sizes for {len(chosen)} axes")
        steps = []
        for i, (a, m, f) in enumerate(zip(chosen, targets, factors)):
            n = shape[a]
            if m == n and f == 1.0 and transform != "tf_crop_and_resize":
                continue
            roi_pair = (roi_values[i], roi_values[i + len(chosen)]) if roi_values else (0.0, 1.0)
            steps.append((a, m, _taps(node, n, m, f, roi_pair)))
        return steps

    def run(x: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None) -> Tensor:
        key = (
            tuple(x.dims()),
            None if roi is None else np.asarray(roi).tobytes(),
            None if scales is None else np.asarray(scales).tobytes(),
            None if sizes is None else np.asarray(sizes).tobytes(),
        )
        steps = cache.get(key)
        if steps is None:
            steps = cache[key] = plan(x.dims(), roi, scales, sizes)
        out = x
        for a, m, (indices, weights, outside) in steps:
            view = [1] * out.rank
            view[a] = m
            total = None
            for index, weight in zip(indices, weights):
                picked = out.take(a, Tensor.from_data(index, device=x.device))
                if not np.all(weight == 1.0):
                    picked = picked * Tensor.from_data(weight.astype(x.dtype.np).reshape(view), device=x.device)
                total = picked if total is None else total + picked
            assert total is not None  # _taps gives every axis at least one tap
            if outside is not None and outside.any():
                mask = Tensor.from_data(outside.reshape(view), device=x.device)
                total = total.mask_fill(mask, extrapolation)
            out = total
        return out

    return run


@op("Upsample", host=(1,), since=7)
def upsample(node: Node) -> Callable[..., Any]:
    """Upsample (opsets 7-9, deprecated since 10): Resize with the asymmetric transformation,
    flooring for ``nearest``; the scales are an attribute at opset 7 and an input at 9."""
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise node.attr_error("mode", "is not one of nearest, linear")
    fixed = node.attr("scales")
    attrs = {
        "mode": "nearest" if mode == "nearest" else "linear",
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
    }
    inner = resize(Node("Resize", node.name, 13, node.opset, attrs, node.inputs, node.outputs, [], []))

    def run(x: Tensor, scales: Any = None) -> Tensor:
        given = np.asarray(fixed if scales is None else scales, np.float32)
        return inner(x, None, given, None)

    return run

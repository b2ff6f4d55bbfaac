"""Detection operators: ``NonMaxSuppression`` (greedy, per batch and class, on the host:
its output's length depends on the scores) and ``RoiAlign`` (bilinear samples of each
region's bins, averaged or maxed; the sample positions and weights are computed on the
host from the regions, the feature map is gathered with ember's ops, so the output is
differentiable with respect to it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


# ------------------------------------------------------------------ NonMaxSuppression
def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """``(y_min, x_min, y_max, x_max)`` of ``[n, 4]`` boxes: ``[y1, x1, y2, x2]`` (either
    diagonal) or, with ``center``, ``[x_center, y_center, width, height]``."""
    if center:
        x, y, w, h = boxes.T
        return y - h / 2, x - w / 2, y + h / 2, x + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _select(
    boxes: np.ndarray, scores: np.ndarray, center: bool, limit: int, iou: float, floor: float | None
) -> list[int]:
    """The indices greedy NMS keeps for one batch and class, best score first (ties:
    the lower index), as ONNX's reference and onnxruntime do."""
    order = np.argsort(-scores, kind="stable")
    if floor is not None:
        order = order[scores[order] > floor]
    y0, x0, y1, x1 = _corners(boxes, center)
    area = (x1 - x0) * (y1 - y0)
    alive = np.ones(len(order), bool)
    kept: list[int] = []
    for rank, i in enumerate(order):
        if len(kept) >= limit:
            break
        if not alive[rank]:
            continue
        kept.append(int(i))
        rest = order[rank + 1 :]
        inter_w = np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest])
        inter_h = np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest])
        inter = inter_w * inter_h
        union = area[i] + area[rest] - inter
        with np.errstate(all="ignore"):
            overlap = (inter_w > 0) & (inter_h > 0) & (area[i] > 0) & (area[rest] > 0) & (inter / union > iou)
        alive[rank + 1 :] &= ~overlap
    return kept


def _nms(node: Node) -> Callable[..., Any]:
    center = int(node.attr("center_point_box", 0))
    if center not in (0, 1):
        raise node.attr_error("center_point_box", "must be 0 (corners) or 1 (center, width, height)")

    def run(boxes: np.ndarray, scores: np.ndarray, limit: Any = None, iou: Any = None, floor: Any = None) -> np.ndarray:
        boxes, scores = np.asarray(boxes), np.asarray(scores)
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
            raise node.error(
                f"boxes must be [batch, boxes, 4] and scores [batch, classes, boxes], got {boxes.shape} and {scores.shape}"
            )
        most = 0 if limit is None or np.size(limit) == 0 else max(int(np.reshape(limit, -1)[0]), 0)
        threshold = 0.0 if iou is None or np.size(iou) == 0 else float(np.reshape(iou, -1)[0])
        least = None if floor is None or np.size(floor) == 0 else np.reshape(floor, -1)[0]
        picked = [
            (b, c, i)
            for b in range(boxes.shape[0])
            for c in range(scores.shape[1])
            for i in _select(boxes[b], scores[b, c], bool(center), most, threshold, least)
        ]
        return np.array(picked, np.int64).reshape(-1, 3)

    return run


op("NonMaxSuppression", host=(0, 1, 2, 3, 4), since=10, data_dependent=True)(_nms)
numpy_op("NonMaxSuppression")(_nms)


# ------------------------------------------------------------------ RoiAlign
def _samples(
    rois: np.ndarray, size: tuple[int, int], out: tuple[int, int], ratio: int, scale: float, half_pixel: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per region, bin and sample: the four flat ``y * width + x`` corners and their
    bilinear weights (``[rois, bins, samples, 4]``, padded to the largest grid), whether
    each sample exists (``[rois, 1, samples]``) and the samples per bin (``[rois]``)."""
    height, width = size
    oh, ow = out
    offset = 0.5 if half_pixel else 0.0
    grids = []
    for x0, y0, x1, y1 in rois.astype(np.float64):
        sx, sy = x0 * scale - offset, y0 * scale - offset
        rw, rh = x1 * scale - offset - sx, y1 * scale - offset - sy
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else math.ceil(rh / oh)
        gw = ratio if ratio > 0 else math.ceil(rw / ow)
        bh, bw = rh / oh, rw / ow
        ys = sy + np.arange(oh)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # [oh, gh]
        xs = sx + np.arange(ow)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw  # [ow, gw]
        y = np.broadcast_to(ys[:, None, :, None], (oh, ow, gh, gw)).reshape(oh * ow, -1)
        x = np.broadcast_to(xs[None, :, None, :], (oh, ow, gh, gw)).reshape(oh * ow, -1)
        grids.append((y, x, max(gh * gw, 1)))
    most = max([y.shape[1] for y, _, _ in grids] + [1])
    n, bins = len(rois), oh * ow
    index = np.zeros((n, bins, most, 4), np.int64)
    weight = np.zeros((n, bins, most, 4))
    present = np.zeros((n, 1, most), bool)
    for r, (y, x, _) in enumerate(grids):
        k = y.shape[1]
        present[r, 0, :k] = True
        inside = ~((y < -1.0) | (y > height) | (x < -1.0) | (x > width))
        y, x = np.maximum(y, 0), np.maximum(x, 0)
        y_low, x_low = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
        top, right = y_low >= height - 1, x_low >= width - 1
        y_low, x_low = np.where(top, height - 1, y_low), np.where(right, width - 1, x_low)
        y_high, x_high = np.where(top, y_low, y_low + 1), np.where(right, x_low, x_low + 1)
        ly, lx = np.where(top, 0.0, y - y_low), np.where(right, 0.0, x - x_low)
        hy, hx = 1.0 - ly, 1.0 - lx
        corners = [
            (y_low, x_low, hy * hx),
            (y_low, x_high, hy * lx),
            (y_high, x_low, ly * hx),
            (y_high, x_high, ly * lx),
        ]
        for c, (yy, xx, w) in enumerate(corners):
            index[r, :, :k, c] = np.where(inside, yy * width + xx, 0)
            weight[r, :, :k, c] = np.where(inside, w, 0.0)
    counts = np.array([c for _, _, c in grids], np.float64)
    return index, weight, present, counts


@op("RoiAlign", host=(1, 2), since=10)
def roi_align(node: Node) -> Callable[..., Any]:
    mode = node.attr("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    default_transform = "half_pixel" if node.version >= 16 else "output_half_pixel"
    transform = node.attr("coordinate_transformation_mode", default_transform)
    transform = transform.decode() if isinstance(transform, bytes) else str(transform)
    out = (int(node.attr("output_height", 1)), int(node.attr("output_width", 1)))
    ratio = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    if mode not in ("avg", "max"):
        raise node.attr_error("mode", "must be 'avg' or 'max'")
    if transform not in ("half_pixel", "output_half_pixel"):
        raise node.attr_error("coordinate_transformation_mode", "must be 'half_pixel' or 'output_half_pixel'")

    def run(x: Tensor, rois: np.ndarray, batch_indices: np.ndarray) -> Tensor:
        rois, batch_indices = np.asarray(rois), np.asarray(batch_indices).reshape(-1)
        if x.rank != 4 or rois.ndim != 2 or rois.shape[1] != 4 or len(batch_indices) != rois.shape[0]:
            raise node.error(
                f"X must be [N, C, H, W], rois [num_rois, 4] and batch_indices [num_rois], got "
                f"{x.dims()}, {list(rois.shape)} and {list(batch_indices.shape)}"
            )
        n, channels, height, width = x.dims()
        if batch_indices.size and (batch_indices.min() < 0 or batch_indices.max() >= n):
            raise node.error(f"batch_indices must lie in [0, {n}), got {batch_indices.tolist()}")
        index, weight, present, counts = _samples(rois, (height, width), out, ratio, scale, transform == "half_pixel")
        num, bins, most, _ = index.shape
        flat = index + (batch_indices.astype(np.int64) * height * width).reshape(-1, 1, 1, 1)
        table = x.permute([0, 2, 3, 1]).reshape([n * height * width, channels])
        picked = table.select(0, Tensor.from_data(flat.reshape(-1), device=x.device))
        values = picked.reshape([num, bins, most, 4, channels]) * Tensor.from_data(
            weight.reshape(num, bins, most, 4, 1).astype(x.dtype.np), device=x.device
        )
        if mode == "avg":
            pooled = values.sum_dims([2, 3]) / Tensor.from_data(
                counts.reshape(num, 1, 1, 1, 1).astype(x.dtype.np), device=x.device
            )
        else:  # the largest weighted corner of the largest sample, as ONNX's reference and onnxruntime
            missing = np.where(present, 0.0, -np.inf).reshape(num, 1, most, 1, 1)
            values = values.max_dims([3]) + Tensor.from_data(missing.astype(x.dtype.np), device=x.device)
            pooled = values.max_dims([2])
        return pooled.reshape([num, out[0], out[1], channels]).permute([0, 3, 1, 2])

    return run

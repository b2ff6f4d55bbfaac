"""Flex's ``grid_sample`` kernels (forward and backward) in vectorised numpy.

The sampling positions are computed once per output point (``[N, P]``, ``P`` the
number of output points) and shared by every channel: each of the ``2^D`` corners
(bilinear/trilinear) or the one nearest point is a flat index into the input's
spatial positions and a weight (zero where the corner lies outside the input), so the
forward pass is ``2^D`` column gathers (``np.take`` along the spatial axis of a
``[C, S]`` slab) and weighted sums. The backward pass scatters ``grad * weight`` back
with one ``np.bincount`` per batch entry, and the grid's gradient is the derivative
of the weights, ``sum_c grad * value`` per corner, times the coordinate map's slope
(zero where ``border``/``reflection`` clip, negative where reflection mirrors).
PyTorch's formulas (``grid_sampler_compute_source_index``) throughout.

In float32, above :data:`ember.backend.flex.native.MIN_ELEMENTS` output elements, the
gathers and the scatter run as LLVM loops instead
(:mod:`ember.backend.flex.native_grid`; the same points and the same sums).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ember.backend.flex import native_grid


def _work(dtype: np.dtype) -> Any:
    return np.float64 if dtype == np.float64 else np.float32


def _clip(c: np.ndarray, size: int, work: Any) -> tuple[np.ndarray, np.ndarray]:
    """``c`` clipped to ``[0, size - 1]`` (NaN to 0, as PyTorch) and the slope (1
    inside, 0 where clipped)."""
    limit = work(size - 1)
    slope = ((c > 0) & (c < limit)).astype(work)
    return np.fmin(np.fmax(c, work(0)), limit), slope


def _reflect(c: np.ndarray, twice_low: int, twice_high: int, work: Any) -> tuple[np.ndarray, np.ndarray]:
    """``c`` reflected into ``[twice_low / 2, twice_high / 2]`` and the slope (+-1)."""
    if twice_low == twice_high:
        return np.zeros_like(c), np.zeros_like(c)
    low = work(twice_low / 2)
    span = work((twice_high - twice_low) / 2)
    c = c - low
    slope = np.where(c < 0, work(-1), work(1)).astype(work)
    c = np.abs(c)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    odd = np.fmod(flips, 2) == 1
    slope = np.where(odd, -slope, slope)
    return np.where(odd, span - extra + low, extra + low).astype(work), slope


def source_coords(
    grid: np.ndarray, spatial: tuple[int, ...], padding_mode: str, align_corners: bool, work: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per spatial dim (in the input's order), the source coordinates ``[N, P]`` and the
    slopes ``d coordinate / d grid``. The grid's last axis lists x (the last spatial
    dim) first."""
    n = grid.shape[0]
    rank = len(spatial)
    flat = grid.reshape(n, -1, rank).astype(work, copy=False)
    coords, slopes = [], []
    for d, size in enumerate(spatial):
        g = flat[:, :, rank - 1 - d]
        if align_corners:
            scale = work((size - 1) / 2)
            c = (g + work(1)) * scale
        else:
            scale = work(size / 2)
            c = ((g + work(1)) * work(size) - work(1)) / work(2)
        slope = np.full(c.shape, scale, work)
        if padding_mode == "border":
            c, s = _clip(c, size, work)
            slope *= s
        elif padding_mode == "reflection":
            low, high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
            c, s1 = _reflect(c, low, high, work)
            c, s2 = _clip(c, size, work)
            slope *= s1 * s2
        coords.append(c)
        slopes.append(slope)
    return coords, slopes


def _strides(spatial: tuple[int, ...]) -> list[int]:
    return [math.prod(spatial[d + 1 :]) for d in range(len(spatial))]


def corners(
    coords: list[np.ndarray], spatial: tuple[int, ...], mode: str, work: Any
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]]:
    """The sampled points: ``(flat index [N, P], weight [N, P], inside [N, P], corner
    bits)`` each, the weight zero (and the index 0) where the point lies outside the input."""
    strides = _strides(spatial)
    if mode == "nearest":
        flat = np.zeros(coords[0].shape, np.int64)
        valid = np.ones(coords[0].shape, bool)
        for c, size, stride in zip(coords, spatial, strides):
            i = np.rint(c)
            valid &= (i >= 0) & (i < size)
            flat += np.where(valid, i, 0).astype(np.int64) * stride
        flat[~valid] = 0
        return [(flat, valid.astype(work), valid, ())]
    low = [np.floor(c) for c in coords]
    frac = [c - f for c, f in zip(coords, low)]
    out = []
    for bits in itertools.product((0, 1), repeat=len(spatial)):
        flat = np.zeros(coords[0].shape, np.int64)
        valid = np.ones(coords[0].shape, bool)
        weight = np.ones(coords[0].shape, work)
        for d, bit in enumerate(bits):
            i = low[d] + bit
            valid &= (i >= 0) & (i < spatial[d])
            weight *= frac[d] if bit else work(1) - frac[d]
        for d, bit in enumerate(bits):
            i = np.where(valid, low[d] + bit, 0)
            flat += i.astype(np.int64) * strides[d]
        weight = np.where(valid | np.isnan(weight), weight, work(0)).astype(work)  # NaN points stay NaN
        out.append((flat, weight, valid, bits))
    return out


def _channels_last(x: np.ndarray, work: Any) -> np.ndarray:
    """``x`` ``[N, C, *spatial]`` as contiguous ``[N, S, C]`` rows (a gather of a
    point's channels is then one row copy)."""
    n, c = x.shape[:2]
    return np.ascontiguousarray(x.reshape(n, c, -1).transpose(0, 2, 1), dtype=work)


def _native(work: Any, x: np.ndarray, points: int, corners: int) -> native_grid.GridKernels | None:
    """The native kernels for float32 work on large enough arrays (int32 indices)."""
    if work is not np.float32 or math.prod(x.shape[2:]) >= 2**31:
        return None
    return native_grid.kernels(corners, x.shape[0] * x.shape[1] * points)


def _stacked(points: list) -> tuple[np.ndarray, np.ndarray]:
    """The corners as ``idx`` (int32) and ``w`` (float32), both ``[N, P, K]``."""
    idx = np.stack([flat for flat, _, _, _ in points], axis=-1).astype(np.int32)
    w = np.stack([weight for _, weight, _, _ in points], axis=-1)
    return idx, np.ascontiguousarray(w, dtype=np.float32)


def _planes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.reshape(x.shape[0], x.shape[1], -1), dtype=np.float32)


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: bool) -> Any:
    """``x`` ``[N, C, *spatial]`` sampled at ``grid`` ``[N, *out, D]``: ``[N, C, *out]``."""
    if mode not in ("bilinear", "nearest"):
        return NotImplemented
    work = _work(x.dtype)
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    out_spatial = tuple(grid.shape[1:-1])
    coords, _ = source_coords(grid, spatial, padding_mode, align_corners, work)
    points = corners(coords, spatial, mode, work)
    flat_points = math.prod(out_spatial)
    kernels = _native(work, x, flat_points, len(points))
    if kernels is not None:
        idx, w = _stacked(points)
        out = native_grid.forward(kernels, _planes(x), idx, w, flat_points)
        return out.reshape((n, c, *out_spatial))
    rows = _channels_last(x, work)
    out = np.empty((n, c, flat_points), work)
    for b in range(n):
        acc = np.zeros((flat_points, c), work)
        for flat, weight, _, _ in points:
            values = np.take(rows[b], flat[b], axis=0)
            values *= weight[b][:, None]
            acc += values
        out[b] = acc.T
    return out.reshape((n, c, *out_spatial)).astype(x.dtype, copy=False)


def grid_sample_backward(
    grad: np.ndarray,
    x: np.ndarray,
    grid: np.ndarray,
    mode: str,
    padding_mode: str,
    align_corners: bool,
    need_x: bool,
    need_grid: bool,
) -> Any:
    """The gradients of :func:`grid_sample` for ``x`` and ``grid`` (``None`` where not needed)."""
    if mode not in ("bilinear", "nearest"):
        return NotImplemented
    work = _work(x.dtype)
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    size = math.prod(spatial)
    coords, slopes = source_coords(grid, spatial, padding_mode, align_corners, work)
    points = corners(coords, spatial, mode, work)
    g = grad.reshape(n, c, -1).astype(work, copy=False)
    gx = ggrid = None
    dots: list[np.ndarray] | None = None
    kernels = _native(work, x, points[0][0].shape[1], len(points))
    if kernels is not None:
        idx, w = _stacked(points)
        need_dot = need_grid and mode != "nearest"
        gx, dot = native_grid.backward(kernels, _planes(x), np.ascontiguousarray(g), idx, w, need_x, need_dot)
        gx = None if gx is None else gx.reshape(x.shape)
        dots = None if dot is None else [dot[:, :, q] for q in range(len(points))]
        need_x = False
    if need_x:
        gx = np.empty((n, c, size), work)
        flat_count = points[0][0].shape[1]
        scaled = np.empty((c, len(points) * flat_count), work)
        for b in range(n):
            index = np.concatenate([flat[b] for flat, _, _, _ in points])
            for k, (_, weight, _, _) in enumerate(points):
                np.multiply(g[b], weight[b], out=scaled[:, k * flat_count : (k + 1) * flat_count])
            for ch in range(c):
                gx[b, ch] = np.bincount(index, scaled[ch], minlength=size)
        gx = gx.reshape(x.shape).astype(x.dtype, copy=False)
    if need_grid:
        rank = len(spatial)
        gc = [np.zeros(coords[0].shape, work) for _ in range(rank)]
        if mode != "nearest":
            if dots is None:
                rows = _channels_last(x, work)
                grad_rows = _channels_last(g, work)
            low = [np.floor(co) for co in coords]
            frac = [co - f for co, f in zip(coords, low)]
            for q, (flat, _, valid, bits) in enumerate(points):
                if dots is not None:
                    dot = dots[q] * valid
                else:
                    dot = np.empty(flat.shape, work)
                    for b in range(n):
                        dot[b] = np.einsum("pc,pc->p", grad_rows[b], np.take(rows[b], flat[b], axis=0))
                    dot *= valid
                for d in range(rank):
                    # d weight / d coordinate d: the other dims' factors, signed by this dim's bit.
                    factor = np.ones(flat.shape, work)
                    for e, bit in enumerate(bits):
                        if e != d:
                            factor *= frac[e] if bit else work(1) - frac[e]
                    gc[d] += (dot * factor) if bits[d] else -(dot * factor)
        ggrid = np.empty(grid.shape, work)
        flat_grid = ggrid.reshape(n, -1, rank)
        for d in range(rank):
            flat_grid[:, :, rank - 1 - d] = gc[d] * slopes[d]
        ggrid = ggrid.astype(grid.dtype, copy=False)
    return gx, ggrid

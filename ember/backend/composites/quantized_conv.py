"""``quantized_conv``: a convolution with a quantized weight as the input's sliding
blocks times the packed weight (``quantized_linear``), where a backend has no kernel.

The weight ``[channels_out, channels_in / groups, *kernel]`` is stored as the matrix
``[channels_out, channels_in / groups * prod(kernel)]`` (one row per output channel,
the columns channel-major then kernel tap, as PyTorch flattens a conv weight). The
zero-padded input's sliding blocks (strided slices, stacked: no arithmetic) become the
rows ``[batch * positions, channels_in / groups * prod(kernel)]`` of each group, and
``quantized_linear`` multiplies them by the packed weight: a backend with a kernel for
that (cube, cuda) never builds the float weight either.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ember.backend.composites.registry import composite, run
from ember.backend.dtype import DType

__all__ = ["quantized_conv"]


@composite("quantized_conv")
def quantized_conv(
    ops: Any,
    x: Any,
    values: Any,
    scales: Any,
    zero_points: Any,
    bias: Any,
    input_scale: Any,
    value: str,
    group: int,
    activations: str,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
    activation: str = "",
) -> Any:
    """``x [N, C, *spatial]`` (float32) -> ``[N, C_out, *out]``, then the fused op
    ``activation`` (``""``: none)."""
    n, channels = x.shape[:2]
    c_out = values.shape[0]
    c_per_group = channels // groups
    rank = len(x.shape)
    padded = _padded(ops, x, padding)
    # Each tap's block as [N, *out, C, 1] (views), joined along the last dim (one copy):
    # [N, *out, C, taps], i.e. rows [N * positions, groups, C / groups * taps].
    channels_last = (0, *range(2, rank), 1, rank)
    unit = ops.reshape(padded, (*padded.shape, 1))
    blocks = []
    for offsets in itertools.product(*[range(k) for k in kernel]):
        ranges = tuple((o * d, o * d + (size - 1) * s + 1, s) for o, d, size, s in zip(offsets, dilation, out, stride))
        region = ops.slice(unit, ((0, n, 1), (0, channels, 1), *ranges, (0, 1, 1)))
        blocks.append(ops.permute(region, channels_last))
    positions = math.prod(out)
    taps = len(blocks)
    joined = ops.cat(blocks, rank) if taps > 1 else blocks[0]
    rows = ops.reshape(joined, (n * positions, groups, c_per_group * taps))
    per_group = c_out // groups
    results = []
    for g in range(groups):
        part = rows if groups == 1 else ops.slice(rows, ((0, n * positions, 1), (g, g + 1, 1), (0, rows.shape[2], 1)))
        part = ops.reshape(part, (n * positions, c_per_group * taps))
        weight = _weight_rows(ops, values, scales, zero_points, g * per_group, per_group, groups)
        b = bias if bias is None or groups == 1 else ops.slice(bias, ((g * per_group, (g + 1) * per_group, 1),))
        results.append(run(ops, "quantized_linear", part, *weight, b, input_scale, value, group, activations))
    y = results[0] if groups == 1 else ops.cat(results, 1)
    y = ops.permute(ops.reshape(y, (n, *out, c_out)), (0, rank - 1, *range(1, rank - 1)))
    return run(ops, activation, y) if activation else y


def _padded(ops: Any, x: Any, padding: tuple[tuple[int, int], ...]) -> Any:
    """``x`` with ``padding`` zeros before and after each spatial dim."""
    if not any(p for pair in padding for p in pair):
        return x
    shape = tuple(x.shape)
    big = shape[:2] + tuple(s + before + after for s, (before, after) in zip(shape[2:], padding))
    region = ((0, shape[0], 1), (0, shape[1], 1)) + tuple(
        (before, before + s, 1) for s, (before, _) in zip(shape[2:], padding)
    )
    return ops.slice_assign(ops.full(big, 0.0, DType.FLOAT32), region, x)


def _weight_rows(ops: Any, values: Any, scales: Any, zero_points: Any, start: int, count: int, groups: int) -> tuple:
    """``(values, scales, zero_points)`` of the weight rows ``start .. start + count``
    (scales per tensor stay as they are)."""
    if groups == 1:
        return values, scales, zero_points

    def rows(t: Any) -> Any:
        if t is None or t.shape[0] == 1:
            return t
        return ops.slice(t, ((start, start + count, 1), *[(0, s, 1) for s in t.shape[1:]]))

    return rows(values), rows(scales), rows(zero_points)

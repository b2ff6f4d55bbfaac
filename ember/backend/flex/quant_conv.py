"""flex's ``quantized_conv``: the columns of the input from the kernel layer's compiled
im2col (:func:`ember.backend.flex.module_ops.native_columns`, as flex's float
convolution gets them), times the packed weight by :mod:`.quantized`'s kernels, the
output written ``[batch, channels_out, *out]`` directly.

- weight-only: :data:`~.quantized.TILE_ROWS` weight rows at a time dequantized into a
  float tile (:func:`~.quantized.dequantized_tiles`), then one sgemm per sample and tile,
  ``tile [rows, Cg * K] @ columns [Cg * K, positions]``, straight into the output's
  channels;
- dynamic (or static) int8: the columns transposed into rows ``[batch * positions,
  Cg * K]`` (zero-padded to a multiple of 64 values, with the int8 weight padded once
  alike: zeros add nothing to an integer dot product), then :func:`~.quantized.int8_gemm`
  (each row quantized with its own scale, the VNNI kernels).

``None`` where these do not apply (no compiled kernels, a group of values that is not
a multiple of 32, columns too small for the compiled im2col): the caller then runs the
tensor-level composite.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend.flex.module_ops import native_columns, scratch
from ember.backend.flex.quant_kernels import quant_kernels
from ember.backend.flex.quantized import dequantized_tiles, derived, int8_gemm

__all__ = ["quantized_conv"]

_F32 = np.dtype(np.float32)
#: Rows of columns transposed per numpy copy (16: 1.14 ms against 1.85 for one ``.T``
#: of [288, 6272] float32; 8 and 32 slower).
_TRANSPOSE_ROWS = 16
#: Int8 weights padded with zero columns (one array per group), keyed by ``id`` of the values they were padded
#: from (dropped with that array).
_PADDED: dict[Any, tuple[Any, list[np.ndarray]]] = {}


def quantized_conv(
    x: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    bias: np.ndarray | None,
    input_scale: np.ndarray | None,
    value: str,
    group: int,
    activations: str,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
) -> np.ndarray | None:
    """The convolution of ``x`` ``[N, C, *spatial]`` (float32) with the quantized weight
    matrix ``[O, C / groups * prod(kernel)]`` (``ember.tensor.quant``'s layout, as
    :meth:`ember.backend.base.Backend.quantized_linear` takes it): ``[N, O, *out]``, or
    ``None`` where flex has no kernel for it."""
    kernels = quant_kernels()
    if kernels is None or x.dtype != _F32 or (not activations and group % 32):
        return None
    n = x.shape[0]
    c_out = values.shape[0]
    per_group = c_out // groups
    positions = math.prod(out)
    cols = native_columns(x, kernel, stride, padding, dilation, out, groups)
    if cols is None:
        return None
    ck = cols.shape[1]
    if scales.shape[0] != c_out:  # one scale per tensor: one per row for the kernels
        scales = np.broadcast_to(scales, (c_out, scales.shape[1]))
        zero_points = None if zero_points is None else np.broadcast_to(zero_points, (c_out, zero_points.shape[1]))
    scales = np.ascontiguousarray(scales, dtype=_F32)
    y = np.empty((n, c_out, positions), dtype=_F32)
    if activations:
        weights = _padded_groups(np.ascontiguousarray(values), groups, -(-ck // 64) * 64)
        rows = scratch("quantized rows", (n * positions, weights[0].shape[1]), _F32)
        rows[:, ck:] = 0.0
        for g, weight in enumerate(weights):
            part = slice(g * per_group, (g + 1) * per_group)
            for k0 in range(0, ck, _TRANSPOSE_ROWS):  # a few columns' rows at a time: 1.7x numpy's whole .T
                rows[:, k0 : k0 + _TRANSPOSE_ROWS] = cols[g, k0 : k0 + _TRANSPOSE_ROWS].T
            b = None if bias is None else bias[part]
            got = int8_gemm(rows, weight, scales[part], b, input_scale, None)
            y[:, part] = got.reshape(n, positions, per_group).transpose(0, 2, 1)
        return y.reshape((n, c_out, *out))
    values = np.ascontiguousarray(values)
    zps = None if zero_points is None else np.ascontiguousarray(zero_points, dtype=np.uint8)
    for g in range(groups):
        part = slice(g * per_group, (g + 1) * per_group)
        group_zps = None if zps is None else zps[part]
        for n0, tile in dequantized_tiles(kernels, values[part], scales[part], group_zps, value, group, ck):
            r0 = g * per_group + n0
            for i in range(n):
                sample = cols[g, :, i * positions : (i + 1) * positions]
                np.matmul(tile, sample, out=y[i, r0 : r0 + tile.shape[0]])
    if bias is not None:
        y += bias.reshape(1, c_out, 1)
    return y.reshape((n, c_out, *out))


def _padded_groups(values: np.ndarray, groups: int, k: int) -> list[np.ndarray]:
    """``values`` (int8 ``[N, K]``) with zero columns up to ``k``, split into ``groups``
    contiguous row blocks; made once per array (the same arrays every call, so the
    packed kernels' cache of packed weights holds)."""
    rows = values.shape[0] // groups

    def pad() -> list[np.ndarray]:
        parts = []
        for g in range(groups):
            padded = np.zeros((rows, k), dtype=values.dtype)
            padded[:, : values.shape[1]] = values[g * rows : (g + 1) * rows]
            parts.append(padded)
        return parts

    return derived(_PADDED, values, (groups, k), pad)

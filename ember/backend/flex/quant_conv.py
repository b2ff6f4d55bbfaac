"""flex's ``quantized_conv``: the columns of the input from the kernel layer's compiled
im2col (:func:`ember.backend.flex.module_ops.native_columns`, as flex's float
convolution gets them), times the packed weight by :mod:`.quantized`'s kernels, the
output written ``[batch, channels_out, *out]`` directly.

- weight-only: :data:`~.quantized.TILE_ROWS` weight rows at a time dequantized into a
  float tile (:func:`~.quantized.dequantized_tiles`), then one sgemm per sample and tile,
  ``tile [rows, Cg * K] @ columns [Cg * K, positions]``, straight into the output's
  channels (samples of fewer than 1024 positions: several per sgemm, copied into place),
  the bias and the activation applied to each block right after its product;
  int8 with one scale per row and a row length that is not a multiple of 32 (a small
  kernel's ``Cg * K``: 9, 144) pads the rows once with zero columns;
- dynamic (or static) int8: the input's values written by the compiled im2row straight
  into rows ``[batch * positions, Cg * K]`` (the transpose of the columns, no copy between;
  zero-padded to a multiple of 64 values, with the int8 weight padded once alike: zeros
  add nothing to an integer dot product), then :func:`~.quantized.int8_gemm` (each row
  quantized with its own scale, the VNNI kernels).

An input too small to compile an im2col for takes numpy's windows instead. ``None``
where these do not apply (no compiled kernels, an int4 or per-block group of values
that is not a multiple of 32): the composite runs then.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend.flex import native_gemm
from ember.backend.flex.module_ops import _columns as numpy_columns
from ember.backend.flex.module_ops import _padded, native_columns, scratch
from ember.backend.flex.native_conv import rows as native_rows
from ember.backend.flex.quant_kernels import quant_kernels
from ember.backend.flex.quantized import TILE_ROWS, activate, dequantized_tiles, derived, int8_gemm

__all__ = ["quantized_conv"]

_F32 = np.dtype(np.float32)
#: Columns (sample positions) one product of a weight tile takes at least, where samples
#: are small: several samples' columns at once, copied into the output's layout after.
_PRODUCT_COLUMNS = 1024
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
    activation: str = "",
) -> np.ndarray | None:
    """The convolution of ``x`` ``[N, C, *spatial]`` (float32) with the quantized weight
    matrix ``[O, C / groups * prod(kernel)]`` (``ember.tensor.quant``'s layout, as
    :meth:`ember.backend.base.Backend.quantized_linear` takes it), plus the bias, then
    ``activation`` (:func:`~.quantized.activate`): ``[N, O, *out]``, or ``None`` where
    flex has no kernel for it."""
    kernels = quant_kernels()
    if kernels is None or x.dtype != _F32:
        return None
    n = x.shape[0]
    c_out = values.shape[0]
    per_group = c_out // groups
    positions = math.prod(out)
    ck = values.shape[1] * (2 if value == "int4" else 1)
    if scales.shape[0] != c_out:  # one scale per tensor: one per row for the kernels
        scales = np.broadcast_to(scales, (c_out, scales.shape[1]))
        zero_points = None if zero_points is None else np.broadcast_to(zero_points, (c_out, zero_points.shape[1]))
    scales = np.ascontiguousarray(scales, dtype=_F32)
    if activations:
        return _int8_conv(
            x, values, scales, bias, input_scale, kernel, stride, padding, dilation, out, groups, ck, activation
        )
    if group % 32:
        if value != "int8" or scales.shape[1] != 1:
            return None
        # One group per row (int8 per channel or per tensor): the rows padded to a multiple
        # of 32 values for the dequantizing kernel, the padding cut from each float tile.
        group = -(-ck // 32) * 32
        values = _padded_groups(np.ascontiguousarray(values), 1, group)[0]
    cols = _columns(x, kernel, stride, padding, dilation, out, groups)
    y = np.empty((n, c_out, positions), dtype=_F32)
    values = np.ascontiguousarray(values)
    zps = None if zero_points is None else np.ascontiguousarray(zero_points, dtype=np.uint8)
    k_values = values.shape[1] * (2 if value == "int4" else 1)
    # Samples per product: one where a sample has many positions (written into the output
    # in place), several small ones at once (then copied into the output's layout).
    chunk = max(1, min(n, _PRODUCT_COLUMNS // positions))
    staging = scratch("quantized conv", (TILE_ROWS, chunk * positions), _F32) if chunk > 1 else None
    channel_bias = None if bias is None else np.ascontiguousarray(bias, dtype=_F32).reshape(c_out, 1)
    for g in range(groups):
        part = slice(g * per_group, (g + 1) * per_group)
        group_zps = None if zps is None else zps[part]
        for n0, tile in dequantized_tiles(kernels, values[part], scales[part], group_zps, value, group, k_values):
            r0, count = g * per_group + n0, tile.shape[0]
            weights = tile if k_values == ck else tile[:, :ck]
            b = None if channel_bias is None else channel_bias[r0 : r0 + count]
            for i0 in range(0, n, chunk):
                samples = min(chunk, n - i0)
                columns = cols[g, :, i0 * positions : (i0 + samples) * positions]
                block = y[i0 : i0 + samples, r0 : r0 + count]  # [samples, count, positions]
                # The bias and the activation while the block is in cache.
                if staging is None:
                    _product(weights, columns, block[0])
                    if b is not None:
                        np.add(block, b, out=block)
                else:
                    product = staging[:count, : samples * positions]
                    _product(weights, columns, product)
                    product = product.reshape(count, samples, positions).transpose(1, 0, 2)
                    if b is None:
                        np.copyto(block, product)
                    else:
                        np.add(product, b, out=block)
                activate(block, activation)
    return y.reshape((n, c_out, *out))


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b``: ember's inline product for the host's vectors where it applies
    (:mod:`.native_gemm`: 1.25-1.7x numpy's sgemm on the tiles' shapes, where this
    environment's OpenBLAS runs its AVX2 kernels), numpy's otherwise."""
    if native_gemm.matmul(a, b, out=out) is None:
        np.matmul(a, b, out=out)


def _int8_conv(
    x: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    bias: np.ndarray | None,
    input_scale: np.ndarray | None,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
    ck: int,
    activation: str,
) -> np.ndarray | None:
    """Dynamic (or static) int8: one row of ``(c, *k)`` input values per output position,
    written by the compiled im2row straight into ``[G, N * positions, K]`` with ``K``
    padded to a multiple of 64 (zeros, as in the weight padded once alike: zeros add
    nothing to an integer dot product), then :func:`~.quantized.int8_gemm` per group."""
    n = x.shape[0]
    c_out = values.shape[0]
    per_group = c_out // groups
    positions = math.prod(out)
    weights = _padded_groups(np.ascontiguousarray(values), groups, -(-ck // 64) * 64)
    k = weights[0].shape[1]
    rows = scratch("quantized rows", (groups, n * positions, k), _F32)
    if native_rows(x, kernel, stride, tuple(lo for lo, _ in padding), dilation, out, groups, rows) is None:
        cols = _columns(x, kernel, stride, padding, dilation, out, groups)  # a small input
        rows[:, :, :ck] = cols.transpose(0, 2, 1)
    if k > ck:
        rows[:, :, ck:] = 0.0
    y = np.empty((n, c_out, positions), dtype=_F32)
    for g, weight in enumerate(weights):
        part = slice(g * per_group, (g + 1) * per_group)
        b = None if bias is None else bias[part]
        got = int8_gemm(rows[g], weight, scales[part], b, input_scale, None)
        block = y[:, part]
        if activation == "relu":  # the activation joined with the copy into [N, C, P]
            np.maximum(got.reshape(n, positions, per_group).transpose(0, 2, 1), np.float32(0.0), out=block)
        else:
            activate(got, activation)
            np.copyto(block, got.reshape(n, positions, per_group).transpose(0, 2, 1))
    return y.reshape((n, c_out, *out))


def _columns(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
) -> np.ndarray:
    """The columns ``[G, Cg * K, N * positions]``: the compiled im2col's, or numpy's
    windows of the padded input where that declines (an input too small to compile for)."""
    cols = native_columns(x, kernel, stride, padding, dilation, out, groups)
    if cols is not None:
        return cols
    xp = _padded(x, padding, 0.0, "pad")
    cols = numpy_columns(xp, kernel, stride, dilation, out)  # [C, *kernel, N, *out]
    return cols.reshape(groups, -1, x.shape[0] * math.prod(out))


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

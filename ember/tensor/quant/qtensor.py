"""``QuantizedTensor``: packed integer values and their scales (and zero points).

The values are quantized along the last axis: a 2-D tensor ``[rows, cols]`` (a
Linear weight is stored ``[d_output, d_input]``, one row per output channel) has
one scale per tensor, per row (``channel``) or per block of ``n`` consecutive
values of a row. int8 values are one byte each (``int8`` when symmetric, ``uint8``
with a ``uint8`` zero point when asymmetric). int4 values are packed two per byte,
in groups: within each group of ``g`` values (the block, or the whole row), byte
``j`` holds value ``j`` in its low nibble and value ``j + g/2`` in its high nibble, so
that a kernel unpacks 16 bytes into 32 consecutive values with one mask and one
shift. A stored nibble ``u`` means ``(u - 8) * s`` when symmetric and ``(u - z) * s``
with a zero point ``z``.

Quantizing runs on the host (numpy, once per weight); :meth:`QuantizedTensor.dequantize`
runs as tensor ops on the tensor's device.

>>> from ember import Tensor
>>> q = quantize(Tensor.from_floats([[0.5, -1.27, 0.25, 1.27]]), QuantScheme.int8())
>>> q.values.tolist(), q.scales.tolist()  # one scale per row: max |w| / 127
([[50, -127, 25, 127]], [[0.009999999776482582]])
>>> [round(v, 4) for v in q.dequantize().tolist()[0]]
[0.5, -1.27, 0.25, 1.27]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.quant.scheme import QuantScheme
from ember.tensor.shape import Shape
from ember.tensor.tensor import Tensor

__all__ = ["QuantizedTensor", "quantize", "quantize_array"]


class QuantizedTensor:
    """Packed quantized values with their scales; not a float tensor (int4 holds two
    values per byte). Build it with :func:`quantize`."""

    __slots__ = ("values", "scales", "zero_points", "scheme", "_shape")

    def __init__(
        self,
        values: Tensor,
        scales: Tensor,
        zero_points: Tensor | None,
        scheme: QuantScheme,
        shape: tuple[int, ...] | list[int],
    ):
        shape = tuple(int(d) for d in shape)
        _check_parts(values, scales, zero_points, scheme, shape)
        self.values = values
        self.scales = scales
        self.zero_points = zero_points
        self.scheme = scheme
        self._shape = shape

    # ------------------------------------------------------------------ queries
    @property
    def shape(self) -> Shape:
        """The logical (unpacked) shape."""
        return Shape(list(self._shape))

    def dims(self) -> list[int]:
        return list(self._shape)

    @property
    def dtype(self) -> str:
        """``"qint8"`` or ``"qint4"`` (the float dtype it dequantizes to is float32)."""
        return "q" + self.scheme.value

    @property
    def device(self) -> Device:
        return self.values.device

    @property
    def group(self) -> int:
        """How many consecutive values of a row share one scale."""
        return self.scheme.group_size(self._shape[-1])

    def nbytes(self) -> int:
        """Bytes held: packed values, scales and zero points."""
        parts = [self.values, self.scales] + ([self.zero_points] if self.zero_points is not None else [])
        return sum(int(np.prod(p.dims())) * p.dtype.itemsize for p in parts)

    def num_elements(self) -> int:
        return int(np.prod(self._shape))

    # ------------------------------------------------------------------ conversions
    def to_device(self, device: Device) -> QuantizedTensor:
        zp = self.zero_points
        return QuantizedTensor(
            self.values.to_device(device),
            self.scales.to_device(device),
            None if zp is None else zp.to_device(device),
            self.scheme,
            self._shape,
        )

    def dequantize(self) -> Tensor:
        """The float32 tensor the values stand for, computed with tensor ops on the
        tensor's device (any backend)."""
        return dequantize_parts(self.values, self.scales, self.zero_points, self.scheme, self._shape)

    def __repr__(self) -> str:
        return f"QuantizedTensor(shape={list(self._shape)}, scheme={self.scheme!r}, device={self.device!r})"


def quantize(tensor: Tensor, scheme: QuantScheme) -> QuantizedTensor:
    """``tensor`` (float, rank >= 1) quantized by ``scheme`` along its last axis, on its device."""
    if not isinstance(tensor, Tensor):
        raise DTypeError(f"ember: quantize: expected a Tensor, got {type(tensor).__name__}")
    if not isinstance(scheme, QuantScheme):
        raise DTypeError(f"ember: quantize: expected a QuantScheme, got {type(scheme).__name__}")
    if not tensor.is_float():
        raise DTypeError(f"ember: quantize: only float tensors are quantized, got {tensor.dtype}")
    device = tensor.device.inner() if tensor.device._inner is not None else tensor.device
    values, scales, zero_points = quantize_array(tensor.to_numpy(), scheme)
    return QuantizedTensor(
        Tensor.from_data(values, device=device),
        Tensor.from_data(scales, device=device),
        None if zero_points is None else Tensor.from_data(zero_points, device=device),
        scheme,
        tensor.dims(),
    )


def quantize_array(array: np.ndarray, scheme: QuantScheme) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(values, scales, zero_points)`` of a float array, on the host: the packed
    values ``[..., cols]`` (int4: ``[..., cols / 2]``), scales ``[rows, groups]`` float32
    (``[1, 1]`` per tensor) and ``uint8`` zero points of the scales' shape (``None`` when
    symmetric). ``rows`` is the product of the leading dims."""
    if array.ndim < 1 or array.size == 0:
        raise ShapeError(f"ember: quantize: needs a non-empty tensor of rank >= 1, got shape {list(array.shape)}")
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0].tolist()
        raise ValueRangeError(
            f"ember: quantize: the tensor of shape {list(array.shape)} holds NaN or inf (first at index {bad}); "
            "scales of non-finite values are undefined: fix or mask the weights before quantizing"
        )
    cols = array.shape[-1]
    if scheme.value == "int4" and cols % 2:
        raise ShapeError(
            f"ember: quantize: int4 packs two values per byte along the last dimension, which must be even, "
            f"got shape {list(array.shape)}"
        )
    g = scheme.group_size(cols)
    rows = array.size // cols
    grouped = array.reshape(rows, cols // g, g).astype(np.float64)
    if scheme.level == "tensor":
        lo = np.full((1, 1, 1), grouped.min())
        hi = np.full((1, 1, 1), grouped.max())
    else:
        lo, hi = grouped.min(axis=2, keepdims=True), grouped.max(axis=2, keepdims=True)
    qmin, qmax = scheme.qmin, scheme.qmax
    zero: np.ndarray | None
    if scheme.symmetric:
        amax = np.maximum(np.abs(lo), np.abs(hi))
        scale = (amax / qmax).astype(np.float32)
        if scheme.value == "int4" and scheme.level != "tensor":
            scale = _search_scale(grouped, amax, qmin, qmax)
        zero = None
    else:
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
        scale = ((hi - lo) / (qmax - qmin)).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    s64 = scale.astype(np.float64)
    if not scheme.symmetric:
        zero = np.clip(np.rint(qmin - lo / s64), qmin, qmax)
    q = np.rint(grouped / s64) + (0.0 if zero is None else zero)
    q = np.clip(q, qmin, qmax)
    if scheme.value == "int8":
        values = q.astype(np.int8 if scheme.symmetric else np.uint8).reshape(array.shape)
    else:
        u = (q + (8 if scheme.symmetric else 0)).astype(np.uint8)  # nibbles 0..15
        half = g // 2
        packed = u[..., :half] | (u[..., half:] << 4)
        values = packed.reshape(array.shape[:-1] + (cols // 2,))
    scales = scale.reshape(scale.shape[0], scale.shape[1])
    zps = None if zero is None else zero.astype(np.uint8).reshape(scales.shape)
    return values, scales, zps


#: Divisors of the largest magnitude tried for a symmetric int4 scale (7 maps it to 7,
#: 8 to -8 with the full 16 levels, clipping larger values of the other sign).
_INT4_DIVISORS = (7.0, 7.25, 7.5, 7.75, 8.0, 8.5, 9.0)


def _search_scale(grouped: np.ndarray, amax: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """Per group, the scale among ``amax / d`` (:data:`_INT4_DIVISORS`) with the least
    squared error after rounding and clipping: int4's 15-16 levels are coarse enough
    that clipping a few large values beats spreading the levels over them."""
    best_scale = np.zeros_like(amax, dtype=np.float32)
    best_err = np.full(amax.shape, np.inf, dtype=np.float32)
    values = grouped.astype(np.float32)  # float32 is enough to rank the candidates
    for d in _INT4_DIVISORS:
        scale = (amax / d).astype(np.float32)
        s32 = np.where(scale > 0, scale, np.float32(1.0))
        q = np.clip(np.rint(values / s32), qmin, qmax)
        err = np.square(q * s32 - values).sum(axis=2, keepdims=True)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_scale = np.where(better, scale, best_scale)
    return best_scale


def dequantize_parts(
    values: Tensor, scales: Tensor, zero_points: Tensor | None, scheme: QuantScheme, shape: tuple[int, ...]
) -> Tensor:
    """The float32 tensor of shape ``shape`` that packed values stand for (tensor ops)."""
    cols = shape[-1]
    g = scheme.group_size(cols)
    rows = math.prod(shape) // cols
    srows = scales.dims()[0]
    v = values.cast(DType.FLOAT32)
    if scheme.value == "int4":
        v = v.reshape([rows, cols // g, g // 2])
        high = v.div_scalar(16.0).floor()
        low = v.sub(high.mul_scalar(16.0))
        q = Tensor.cat([low, high], dim=2)
    else:
        q = v.reshape([rows, cols // g, g])
    s = scales.reshape([srows, scales.dims()[1], 1])
    if zero_points is not None:
        q = q.sub(zero_points.cast(DType.FLOAT32).reshape([srows, scales.dims()[1], 1]))
    elif scheme.value == "int4":
        q = q.sub_scalar(8.0)
    return q.mul(s).reshape(list(shape))


def _check_parts(values: Any, scales: Any, zero_points: Any, scheme: QuantScheme, shape: tuple[int, ...]) -> None:
    if not isinstance(values, Tensor) or not isinstance(scales, Tensor):
        raise DTypeError("ember: QuantizedTensor: values and scales must be Tensors")
    if not isinstance(scheme, QuantScheme):
        raise DTypeError(f"ember: QuantizedTensor: expected a QuantScheme, got {type(scheme).__name__}")
    if not shape or any(d <= 0 for d in shape):
        raise ShapeError(f"ember: QuantizedTensor: needs a non-empty shape of rank >= 1, got {list(shape)}")
    cols = shape[-1]
    g = scheme.group_size(cols)
    rows = math.prod(shape) // cols
    want_dtype = DType.INT8 if scheme.value == "int8" and scheme.symmetric else DType.UINT8
    packed = list(shape[:-1]) + [cols // 2 if scheme.value == "int4" else cols]
    if values.dtype != want_dtype or values.dims() != packed:
        raise ShapeError(
            f"ember: QuantizedTensor: a {scheme!r} tensor of shape {list(shape)} stores {want_dtype.value} values "
            f"of shape {packed}, got {values.dtype.value} {values.dims()}"
        )
    want_scales = [1, 1] if scheme.level == "tensor" else [rows, cols // g]
    if scales.dims() != want_scales or not scales.is_float():
        raise ShapeError(
            f"ember: QuantizedTensor: {scheme!r} of shape {list(shape)} needs float scales of shape {want_scales}, "
            f"got {scales.dtype.value} {scales.dims()}"
        )
    if scheme.symmetric != (zero_points is None):
        raise ShapeError(
            f"ember: QuantizedTensor: a {'symmetric' if scheme.symmetric else 'asymmetric'} scheme "
            f"{'takes no' if scheme.symmetric else 'needs'} zero points"
        )
    if zero_points is not None and (zero_points.dims() != want_scales or zero_points.dtype != DType.UINT8):
        raise ShapeError(
            f"ember: QuantizedTensor: zero points must be uint8 of shape {want_scales}, "
            f"got {zero_points.dtype.value} {zero_points.dims()}"
        )
    for part in (scales, zero_points):
        if part is not None and part.device is not values.device:
            raise ShapeError(
                f"ember: QuantizedTensor: values on {values.device!r} but scales or zero points on {part.device!r}"
            )

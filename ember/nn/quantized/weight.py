"""The parameters of a quantized weight: packed values, scales and zero points as
``Param``s that never require grad (so records, ``to_device`` and ``valid`` keep them
as they are), and back to a :class:`QuantizedTensor`."""

from __future__ import annotations

from ember.module import Param
from ember.tensor import Tensor
from ember.tensor.quant import QuantizedTensor, QuantScheme, quantize


def weight_params(weight: Tensor, scheme: QuantScheme) -> tuple[Param, Param, Param | None]:
    """``weight`` (rows are output channels) quantized, as ``(values, scales, zero_points)``."""
    q = quantize(weight.detach(), scheme)
    zp = q.zero_points
    return (
        Param.from_tensor(q.values, require_grad=False),
        Param.from_tensor(q.scales, require_grad=False),
        None if zp is None else Param.from_tensor(zp, require_grad=False),
    )


def qtensor(
    values: Param, scales: Param, zero_points: Param | None, scheme: QuantScheme, shape: tuple[int, ...]
) -> QuantizedTensor:
    return QuantizedTensor(
        values.val(), scales.val(), None if zero_points is None else zero_points.val(), scheme, shape
    )

"""The parameters of a quantized weight: packed values, scales and zero points as
``Param``s that never require grad (so records, ``to_device`` and ``valid`` keep them
as they are), and back to a :class:`QuantizedTensor`; the fields every quantized
layer (Linear, Conv1d, Conv2d) builds from its float weight."""

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


def quantized_fields(rows: Tensor, bias: Param | None, scheme: QuantScheme, input_scale: float | None) -> dict:
    """A quantized layer's fields from its weight as a matrix ``rows`` (one row per output
    channel): ``values``, ``scales``, ``zero_points``, the ``bias`` (kept, no longer
    trained) and the calibrated ``input_scale`` of a static scheme (``None`` otherwise)."""
    values, scales, zero_points = weight_params(rows, scheme)
    scale = None
    if input_scale is not None:
        scale = Param.from_tensor(Tensor.from_floats([input_scale], device=values.device), require_grad=False)
    if bias is not None:
        bias = Param.from_mapped_value(bias.id, bias.val().detach(), require_grad=False)
    return dict(values=values, scales=scales, zero_points=zero_points, bias=bias, input_scale=scale)


def qtensor(
    values: Param, scales: Param, zero_points: Param | None, scheme: QuantScheme, shape: tuple[int, ...]
) -> QuantizedTensor:
    return QuantizedTensor(
        values.val(), scales.val(), None if zero_points is None else zero_points.val(), scheme, shape
    )

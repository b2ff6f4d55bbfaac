"""``quantized_linear``: ``x @ dequantize(weight).T + bias`` for a :class:`QuantizedTensor`
weight stored ``[d_output, d_input]``, as the fused op ``QUANTIZED_LINEAR``.

A backend with a kernel (flex) never materialises the float weight; elsewhere the
composite (:mod:`ember.backend.composites.quantized`) dequantizes with primitive ops
and runs the float matmul, quantizing the activations the same way the kernel does
(per row to int8 for ``"dynamic"``, with the calibrated scale for ``"static"``), so
every device computes the same function.
"""

from __future__ import annotations

from ember.backend.composites.quantized import fake_quantize_int8 as composite_fake_quantize
from ember.backend.dtype import DType
from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError
from ember.tensor.checks import check_device
from ember.tensor.fused import fused
from ember.tensor.quant.qtensor import QuantizedTensor
from ember.tensor.tensor import Tensor

__all__ = ["quantized_linear"]


def quantized_linear(
    x: Tensor, weight: QuantizedTensor, bias: Tensor | None = None, input_scale: Tensor | None = None
) -> Tensor:
    """``x [..., d_input] -> [..., d_output]`` with ``weight`` quantized ``[d_output, d_input]``;
    ``input_scale`` (shape ``[1]``) is the calibrated activation scale of a ``"static"`` scheme."""
    if not isinstance(x, Tensor) or not isinstance(weight, QuantizedTensor):
        raise DTypeError(
            f"ember: quantized_linear: expected a Tensor input and a QuantizedTensor weight, got "
            f"{type(x).__name__} and {type(weight).__name__}"
        )
    shape = weight.dims()
    xshape = x.dims()
    if len(shape) != 2:
        raise ShapeError(f"ember: quantized_linear: the weight must have rank 2 [d_output, d_input], got {shape}")
    if not xshape or xshape[-1] != shape[1]:
        raise ShapeError(
            f"ember: quantized_linear: the input's last dim must be d_input={shape[1]}, got input shape {xshape}"
        )
    if not x.is_float():
        raise DTypeError(f"ember: quantized_linear: the input must be float, got {x.dtype}")
    scheme = weight.scheme
    if (scheme.activations == "static") != (input_scale is not None):
        raise ShapeError(
            "ember: quantized_linear: a 'static' activation scheme needs input_scale (from calibration) and other "
            f"schemes take none; scheme {scheme!r}, input_scale {'given' if input_scale is not None else 'missing'}"
        )
    d = x.device
    # The weight lives on the inner device (it never requires grad); the input may be tracked.
    for part in (weight.values, bias, input_scale):
        if part is not None and part.device is not d and part.device is not d.inner():
            check_device("quantized_linear", x, part)
    if x.dtype != DType.FLOAT32:
        x = x.cast(DType.FLOAT32)
    rows = x.reshape([1, xshape[0]]) if len(xshape) == 1 else x
    tracked = d._inner is not None

    def prim(t: Tensor | None) -> object:
        if t is None:
            return None
        return (t.to_device(d) if tracked and t.device is not d else t)._primitive

    zp = weight.zero_points
    out = Tensor(
        fused(
            FusedOp.QUANTIZED_LINEAR,
            d,
            rows._primitive,
            prim(weight.values),
            prim(weight.scales),
            prim(zp),
            prim(bias),
            prim(input_scale),
            scheme.value,
            weight.group,
            scheme.activations or "",
        ),
        d,
    )
    return out.reshape([shape[0]]) if len(xshape) == 1 else out


def fake_quantize_int8(x: Tensor, input_scale: Tensor | None) -> Tensor:
    """``x`` rounded to the int8 grid the kernels use: per row ``max |x| / 127`` (dynamic),
    or the calibrated ``input_scale`` (static), values clamped to ``[-127, 127]`` (the
    composite's math, :func:`ember.backend.composites.quantized.fake_quantize_int8`)."""
    d = x.device
    scale = None
    if input_scale is not None:
        scale = (input_scale if input_scale.device is d else input_scale.to_device(d))._primitive
    return Tensor(composite_fake_quantize(d._backend, x._primitive, scale), d)

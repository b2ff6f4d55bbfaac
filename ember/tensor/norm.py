"""Layer normalisation and RMS normalisation: the fused ops ``LAYER_NORM`` and
``RMS_NORM`` (the device's kernel, or its composite in
:mod:`ember.backend.composites.norm`)."""

from __future__ import annotations

from ember.backend.dtype import promote
from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError
from ember.tensor.checks import FLOAT_NP, check_device
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor


def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None, epsilon: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last dim (biased
    variance); ``gamma`` and ``beta`` are ``[D]`` or ``None``. Integer inputs are cast
    to float32."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: layer_norm: expected a Tensor, got {type(x).__name__}")
    if x._primitive.dtype not in FLOAT_NP:
        x = x.float()
    if x.rank < 1:
        raise ShapeError("ember: layer_norm: the input needs at least one dim to normalise over")
    d = x.dims()[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is None:
            continue
        if not isinstance(p, Tensor) or p.dims() != [d]:
            shape = p.dims() if isinstance(p, Tensor) else type(p).__name__
            raise ShapeError(
                f"ember: layer_norm: {name} must be a Tensor of shape [{d}] (the input's last dim), got {shape}"
            )
        if p._device is not x._device:
            check_device("layer_norm", x, p)
    if any(
        p is not None and p._primitive.dtype != x._primitive.dtype for p in (gamma, beta)
    ):  # one dtype, PyTorch's promotion
        dtype = x.dtype
        for p in (gamma, beta):
            dtype = dtype if p is None else promote(dtype, p.dtype)
        x = x.cast(dtype)
        gamma = None if gamma is None else gamma.cast(dtype)
        beta = None if beta is None else beta.cast(dtype)
    device = x._device
    out = fused(
        FusedOp.LAYER_NORM,
        device,
        x._primitive,
        None if gamma is None else gamma._primitive,
        None if beta is None else beta._primitive,
        epsilon,
    )
    return Tensor(out[0], device)


def rms_norm(x: Tensor, gamma: Tensor | None = None, epsilon: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x^2) + epsilon) * gamma`` over the last dim; ``gamma`` is ``[D]``
    or ``None``. Integer inputs are cast to float32; ``x`` and ``gamma`` take one dtype
    (PyTorch's promotion)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: rms_norm: expected a Tensor, got {type(x).__name__}")
    if x._primitive.dtype not in FLOAT_NP:
        x = x.float()
    if x.rank < 1:
        raise ShapeError("ember: rms_norm: the input needs at least one dim to normalise over")
    d = x.dims()[-1]
    if gamma is not None:
        if not isinstance(gamma, Tensor) or gamma.dims() != [d]:
            shape = gamma.dims() if isinstance(gamma, Tensor) else type(gamma).__name__
            raise ShapeError(
                f"ember: rms_norm: gamma must be a Tensor of shape [{d}] (the input's last dim), got {shape}"
            )
        if gamma._device is not x._device:
            check_device("rms_norm", x, gamma)
        if gamma._primitive.dtype != x._primitive.dtype:
            dtype = promote(x.dtype, gamma.dtype)
            x, gamma = x.cast(dtype), gamma.cast(dtype)
    device = x._device
    out = fused(FusedOp.RMS_NORM, device, x._primitive, None if gamma is None else gamma._primitive, epsilon)
    return Tensor(out[0], device)

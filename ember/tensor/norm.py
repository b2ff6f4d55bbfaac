"""Layer normalisation, written once over the tensor ops (a fused kernel when the
device's backend has one)."""

from __future__ import annotations

from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError
from ember.tensor.checks import FLOAT_NP, check_device
from ember.tensor.fused import composite, fused
from ember.tensor.tensor import Tensor


def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None, epsilon: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last dim (biased
    variance); ``gamma`` and ``beta`` are ``[D]`` or ``None``. Integer inputs are cast
    to float32."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: layer_norm: expected a Tensor, got {type(x).__name__}")
    if x._p.dtype not in FLOAT_NP:
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
        if p._d is not x._d:
            check_device("layer_norm", x, p)
    if any(p is not None and p._p.dtype != x._p.dtype for p in (gamma, beta)):
        return _layer_norm(x, gamma, beta, epsilon)[0]  # the composite promotes
    device = x._d
    out = fused(
        FusedOp.LAYER_NORM,
        device,
        x._p,
        None if gamma is None else gamma._p,
        None if beta is None else beta._p,
        epsilon,
    )
    return Tensor(out[0], device)


@composite(FusedOp.LAYER_NORM)
def _layer_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    mean = x.mean_dim(-1)
    centered = x.sub(mean)
    rstd = centered.mul(centered).mean_dim(-1).add_scalar(epsilon).rsqrt()
    out = centered.mul(rstd)
    if gamma is not None:
        out = out.mul(gamma)
    return (out if beta is None else out.add(beta)), mean, rstd

"""Functional module ops (Burn's ``burn::tensor::module``): the layer math, written
once over the tensor ops, using a backend's fused kernel when it has one."""

from __future__ import annotations

from ember.errors import DTypeError, ShapeError
from ember.tensor.dispatch import check_device
from ember.tensor.tensor import Tensor


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight + bias`` with ``weight`` of shape ``[d_input, d_output]`` (Burn's
    layout) and ``bias`` of shape ``[d_output]``; ``x`` is ``[..., d_input]``."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: linear: the input must be a Tensor, got {type(x).__name__}")
    wshape = weight._p.shape
    xshape = x._p.shape
    if len(wshape) != 2:
        raise ShapeError(f"ember: linear: the weight must have rank 2 [d_input, d_output], got {list(wshape)}")
    if not xshape or xshape[-1] != wshape[0]:
        raise ShapeError(
            f"ember: linear: the input's last dim must be d_input={wshape[0]}, got input shape {list(xshape)}; "
            f"reshape the input or build the layer with d_input={xshape[-1] if xshape else '?'}"
        )
    d = x._d
    if weight._d is not d:
        check_device("linear", x, weight)
    if bias is not None:
        if bias._p.shape != (wshape[1],):
            raise ShapeError(f"ember: linear: the bias must have shape [{wshape[1]}], got {list(bias._p.shape)}")
        if bias._d is not d:
            check_device("linear", x, bias)
    if x._p.dtype != weight._p.dtype:
        x = x.cast(weight.dtype)
    fused = d._b.linear(x._p, weight._p, None if bias is None else bias._p)
    if fused is not NotImplemented:
        return Tensor(fused, d)
    out = x.matmul(weight)
    return out if bias is None else out.add(bias)

"""Functional losses written once over the tensor ops (``mse_loss`` and the cross
entropy of class indices are fused ops: see :mod:`ember.tensor.fused`; their composites
are in :mod:`ember.backend.composites.loss`). ``ember.nn.loss`` wraps them as modules."""

from __future__ import annotations

from ember.backend.ops import FusedOp
from ember.errors import ShapeError
from ember.tensor import autocast
from ember.tensor.checks import FLOAT_NP, check_device
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor


def check_same_shape(name: str, pred: Tensor, target: Tensor) -> None:
    if pred._primitive.shape != target._primitive.shape:
        raise ShapeError(
            f"ember: {name}: predictions {pred.dims()} and targets {target.dims()} must have one shape; "
            "reshape the targets (e.g. .unsqueeze_dim(-1)) to match"
        )
    if pred._device is not target._device:
        check_device(name, pred, target)


def squared_error(pred: Tensor, target: Tensor) -> Tensor:
    """``(pred - target)^2`` elementwise."""
    check_same_shape("mse_loss", pred, target)
    if autocast.ACTIVE:
        pred, target = autocast.cast_inputs("mse_loss", pred, target)
    diff = pred.float().sub(target)
    return diff.mul(diff)


def mse_loss(pred: Tensor, target: Tensor, mean: bool = True) -> Tensor:
    """``mean((pred - target)^2)`` (or the sum), shape ``[1]``."""
    check_same_shape("mse_loss", pred, target)
    if autocast.ACTIVE:
        pred, target = autocast.cast_inputs("mse_loss", pred, target)
    if pred._primitive.dtype not in FLOAT_NP:
        pred = pred.float()
    if target._primitive.dtype != pred._primitive.dtype:
        target = target.cast(pred.dtype)
    d = pred._device
    return Tensor(fused(FusedOp.MSE_LOSS, d, pred._primitive, target._primitive, mean), d)


def margin_ranking_loss(x1: Tensor, x2: Tensor, target: Tensor, margin: float = 0.0, mean: bool = True) -> Tensor:
    """``max(0, -target * (x1 - x2) + margin)``, averaged (or summed), shape ``[1]``
    (``torch.nn.functional.margin_ranking_loss``); ``target`` holds 1 or -1."""
    losses = target.float().neg().mul(x1.float().sub(x2)).add_scalar(margin).clamp_min(0.0)
    return losses.mean() if mean else losses.sum()


def cross_entropy_indices(logits: Tensor, targets: Tensor) -> Tensor:
    """``-log_softmax(logits)[i, targets[i]]`` per row of float ``logits`` ``[N, C]``
    with int ``targets`` ``[N]`` (each in ``[0, C)``) on the same device: the fused op
    ``CROSS_ENTROPY`` (one kernel where the backend has one)."""
    t = targets if targets._primitive.dtype.itemsize == 8 else targets.int()
    d = logits._device
    return Tensor(fused(FusedOp.CROSS_ENTROPY, d, logits._primitive, t._primitive)[0], d)

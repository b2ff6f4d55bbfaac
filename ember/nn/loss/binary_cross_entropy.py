"""Binary cross entropy, from probabilities or (stably) from logits."""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError, DTypeError, ShapeError, ValueRangeError
from ember.module import Config, Module
from ember.nn.host import cheap_values
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor import activation as F


class BinaryCrossEntropyLossConfig(Config):
    """Configuration of :class:`BinaryCrossEntropyLoss` (Burn's fields): ``weights``
    one per class (the inputs' last dim), ``smoothing`` pulls targets toward 0.5,
    ``logits`` says the inputs are logits (else probabilities); ``pos_weight`` (with
    ``logits``, one per class or one for all) scales the positive term, as
    PyTorch's ``BCEWithLogitsLoss(pos_weight=...)``.

    >>> loss = BinaryCrossEntropyLossConfig(logits=True).init()
    >>> round(loss(Tensor.from_floats([0.0]), Tensor.from_ints([1])).into_scalar(), 4)
    0.6931
    """

    weights: list[float] | None = None
    smoothing: float | None = None
    logits: bool = False
    pos_weight: list[float] | None = None

    def validate(self) -> None:
        if self.pos_weight is not None:
            if not self.logits:
                raise ConfigError("ember: BinaryCrossEntropyLossConfig: pos_weight needs logits=True (as PyTorch's)")
            if not self.pos_weight or any(w < 0 for w in self.pos_weight):
                raise ConfigError(
                    f"ember: BinaryCrossEntropyLossConfig: pos_weight must be values >= 0, got {self.pos_weight}"
                )
        if self.smoothing is not None and not 0.0 <= self.smoothing <= 1.0:
            raise ConfigError(
                f"ember: BinaryCrossEntropyLossConfig: smoothing must lie in [0, 1], got {self.smoothing}"
            )
        if self.weights is not None and (not self.weights or any(w < 0 for w in self.weights)):
            raise ConfigError(f"ember: BinaryCrossEntropyLossConfig: weights must be values >= 0, got {self.weights}")

    def init(self, device: Any = None) -> BinaryCrossEntropyLoss:
        return BinaryCrossEntropyLoss(
            weights=None if self.weights is None else tuple(float(w) for w in self.weights),
            smoothing=self.smoothing,
            logits=self.logits,
            pos_weight=None if self.pos_weight is None else tuple(float(w) for w in self.pos_weight),
        )


class BinaryCrossEntropyLoss(Module):
    """``-w (y log p + (1 - y) log(1 - p))`` per element. With ``logits`` it is
    computed as ``softplus(x) - x y``, whose gradient is ``sigmoid(x) - y`` (``1/2 - y``
    at 0); from probabilities the logs are clamped at -100 and the gradient is
    ``(p - y) / max(p (1 - p), 1e-12)``, finite at ``p`` = 0 and 1, both as PyTorch.
    Targets (int or float) have the inputs' shape.

    From probabilities, inputs or targets outside [0, 1] (or NaN) raise a
    ``ValueRangeError``, as PyTorch, where reading them is free: on an eager flex
    device. On cube, fusion devices and in ``ember.compile``'d steps the check would
    cost a device sync (or break the trace), so it is skipped there: inputs outside
    [0, 1] then give NaN (a log of a negative number), targets outside a loss without
    meaning."""

    weights: tuple[float, ...] | None = None
    smoothing: float | None = None
    logits: bool = False
    pos_weight: tuple[float, ...] | None = None

    def forward(self, logits: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        """The reduced loss, shape ``[1]`` (``AUTO`` is the mean)."""
        return reduction.apply(self.forward_no_reduction(logits, targets))

    def forward_no_reduction(self, logits: Tensor, targets: Tensor) -> Tensor:
        if not isinstance(logits, Tensor) or not isinstance(targets, Tensor):
            raise DTypeError("ember: BinaryCrossEntropyLoss: inputs and targets must be Tensors")
        if logits.dims() != targets.dims():
            raise ShapeError(
                f"ember: BinaryCrossEntropyLoss: inputs {logits.dims()} and targets {targets.dims()} must have one shape"
            )
        if not self.logits:
            _check_unit_interval(logits, "inputs", "probabilities (for logits, pass logits=True)")
            _check_unit_interval(targets, "targets", "probabilities of the positive class")
        x = logits.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("binary_cross_entropy", x)
        y = targets.cast(x.dtype)
        if y.device is not x.device:
            y = y.to_device(x.device)
        if self.smoothing:
            y = y.mul_scalar(1.0 - self.smoothing).add_scalar(0.5 * self.smoothing)
        if self.logits:
            pos = None
            if self.pos_weight is not None:
                pos = _per_class(self.pos_weight, x, "pos_weight")
            loss = _from_logits(x, y, pos)
        else:
            loss = _from_probabilities(x, y)
        if self.weights is not None:
            if x.rank == 0 or x.dims()[-1] != len(self.weights):
                raise ShapeError(
                    f"ember: BinaryCrossEntropyLoss: {len(self.weights)} class weights for inputs of shape {x.dims()} "
                    "(one weight per entry of the last dim)"
                )
            loss = loss.mul(_per_class(self.weights, x, "class weights"))
        return loss


def _per_class(values: tuple[float, ...], x: Tensor, name: str) -> Tensor:
    if len(values) != 1 and (x.rank == 0 or x.dims()[-1] != len(values)):
        raise ShapeError(
            f"ember: BinaryCrossEntropyLoss: {len(values)} {name} for inputs of shape {x.dims()} "
            "(one per entry of the last dim, or one for all)"
        )
    return Tensor.from_floats(list(values), device=x.device, dtype=x.dtype)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """``torch.nn.functional.binary_cross_entropy_with_logits``: ``(1 - y) x + (1 + (pw - 1) y)
    softplus(-x)``, times ``weight``, reduced by ``"mean"``, ``"sum"`` or ``"none"``;
    ``weight`` and ``pos_weight`` are Tensors broadcasting with the input."""
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise DTypeError("ember: binary_cross_entropy_with_logits: input and target must be Tensors")
    if reduction not in ("mean", "sum", "none"):
        raise ValueRangeError(
            f"ember: binary_cross_entropy_with_logits: reduction must be mean, sum or none, got {reduction!r}"
        )
    x = input.float()
    y = target.cast(x.dtype)
    loss = _from_logits(x, y, None if pos_weight is None else pos_weight.cast(x.dtype))
    if weight is not None:
        loss = loss.mul(weight.cast(x.dtype))
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _check_unit_interval(t: Tensor, name: str, meaning: str) -> None:
    """PyTorch's check that every value lies in [0, 1], where it is free (see the class)."""
    values = cheap_values(t)
    if values is None or values.size == 0:
        return
    if values.dtype.kind == "V":  # bfloat16
        values = values.astype("float32")
    low, high = values.min(), values.max()
    if not (low >= 0 and high <= 1):  # NaN fails both
        found = "NaN" if low != low or high != high else f"values from {float(low):g} to {float(high):g}"
        raise ValueRangeError(
            f"ember: BinaryCrossEntropyLoss: every element of the {name} must lie in [0, 1], as they are {meaning}; "
            f"got {found} (shape {t.dims()})"
        )


_EPSILON = 1e-12  # PyTorch's floor on p (1 - p) in the gradient from probabilities


def _from_logits(x: Tensor, y: Tensor, pos_weight: Tensor | None = None) -> Tensor:
    if pos_weight is None:
        return F.softplus(x, threshold=math.inf).sub(x.mul(y))
    # PyTorch's form: (1 - y) x + (1 + (pw - 1) y) softplus(-x)
    scale = y.mul(pos_weight.sub_scalar(1)).add_scalar(1)
    return y.neg().add_scalar(1).mul(x).add(scale.mul(F.softplus(x.neg(), threshold=math.inf)))


def _from_probabilities(p: Tensor, y: Tensor) -> Tensor:
    """The loss at probabilities ``p``, with PyTorch's gradient for ``p``.

    The clamped logs are flat where ``p`` is 0 or 1, so their own gradient is 0 (or
    NaN, through ``log'(0)``) exactly where a saturated prediction needs the largest
    push. The value is therefore computed from ``p`` detached, and ``p``'s gradient
    comes from ``(p - stop(p)) * stop(c)``, which is 0 in value and has gradient ``c``.
    """
    q = p.detach()
    log_p = q.log().clamp_min(-100.0)
    log_q = q.neg().add_scalar(1.0).log().clamp_min(-100.0)
    loss = y.mul(log_p).add(y.neg().add_scalar(1.0).mul(log_q)).neg()
    if not p.is_require_grad():
        return loss
    slope = q.sub(y.detach()).div(q.mul(q.neg().add_scalar(1.0)).clamp_min(_EPSILON))
    return loss.add(p.sub(q).mul(slope))

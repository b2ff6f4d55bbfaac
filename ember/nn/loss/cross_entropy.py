"""Cross entropy from logits (or probabilities), with class weights, label
smoothing and ignored (pad) targets."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError, DTypeError, ShapeError
from ember.module import Config, Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor import activation as F
from ember.tensor.loss import cross_entropy_indices


class CrossEntropyLossConfig(Config):
    """Configuration of :class:`CrossEntropyLoss` (Burn's fields).

    ``pad_tokens``: target classes whose samples are ignored (PyTorch's
    ``ignore_index``); ``weights``: one weight per class; ``smoothing``: label
    smoothing in ``[0, 1]``; ``logits``: whether the inputs are logits (else
    probabilities).

    >>> loss = CrossEntropyLossConfig(smoothing=0.1).init()
    >>> round(loss(Tensor.from_floats([[2.0, 0.0]]), Tensor.from_ints([0])).into_scalar(), 4)
    0.2269
    """

    pad_tokens: list[int] | None = None
    weights: list[float] | None = None
    smoothing: float | None = None
    logits: bool = True

    def validate(self) -> None:
        if self.smoothing is not None and not 0.0 <= self.smoothing <= 1.0:
            raise ConfigError(f"ember: CrossEntropyLossConfig: smoothing must lie in [0, 1], got {self.smoothing}")
        if self.weights is not None and (not self.weights or any(w < 0 for w in self.weights)):
            raise ConfigError(
                f"ember: CrossEntropyLossConfig: weights must be a non-empty list of values >= 0, got {self.weights}"
            )

    def init(self, device: Any = None) -> CrossEntropyLoss:
        return CrossEntropyLoss(
            pad_tokens=None if self.pad_tokens is None else tuple(self.pad_tokens),
            weights=None if self.weights is None else tuple(float(w) for w in self.weights),
            smoothing=self.smoothing,
            logits=self.logits,
        )


class CrossEntropyLoss(Module):
    """``-sum_c w_c q_c log softmax(x)_c`` per sample, where ``q`` is the (smoothed)
    target distribution; the same formula and normalisation as
    ``torch.nn.functional.cross_entropy``: the mean divides by the summed weights of
    the targets that are not ignored.

    Inputs: ``[batch, classes]`` or ``[batch, classes, d1, ...]``; targets: class
    indices (an int tensor ``[batch]`` / ``[batch, d1, ...]``) or class probabilities
    (a float tensor of the inputs' shape).
    """

    pad_tokens: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None
    smoothing: float | None = None
    logits: bool = True

    def forward(self, logits: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        """The reduced loss, shape ``[1]`` (``AUTO`` is the weighted mean)."""
        values, norm = self._losses(logits, targets)
        if reduction is Reduction.SUM:
            return values.sum()
        if reduction is Reduction.BATCH_MEAN:
            return values.sum().div_scalar(float(values.dims()[0]))
        return values.sum().div(norm) if norm is not None else values.mean()

    def forward_no_reduction(self, logits: Tensor, targets: Tensor) -> Tensor:
        """The loss of each sample (``[batch]`` or ``[batch, d1, ...]``); ignored ones are 0."""
        return self._losses(logits, targets)[0]

    def _losses(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor | None]:
        if not isinstance(logits, Tensor) or not isinstance(targets, Tensor):
            raise DTypeError("ember: CrossEntropyLoss: logits and targets must be Tensors")
        if autocast.ACTIVE:
            logits, targets = autocast.cast_inputs("cross_entropy", logits.float(), targets)
        x, weights, sample_shape = class_rows("CrossEntropyLoss", "logits", logits, self.weights)
        eps = self.smoothing or 0.0
        if targets.is_float():
            logp = F.log_softmax(x, 1) if self.logits else x.log()
            return self._soft(logp, targets, weights, eps, logits.dims(), sample_shape), None
        t = index_targets("CrossEntropyLoss", "logits", logits, targets, sample_shape, x)
        if self.logits and weights is None and not eps and not self.pad_tokens:
            return cross_entropy_indices(x, t).reshape(sample_shape), None
        logp = F.log_softmax(x, 1) if self.logits else x.log()
        return class_index_losses(logp, t, weights, eps, self.pad_tokens, sample_shape)

    def _soft(
        self,
        logp: Tensor,
        targets: Tensor,
        weights: Tensor | None,
        eps: float,
        shape: list[int],
        sample_shape: list[int],
    ) -> Tensor:
        if targets.dims() != shape:
            raise ShapeError(
                f"ember: CrossEntropyLoss: probability targets must have the logits' shape {shape}, got {targets.dims()}"
            )
        classes = shape[1]
        q = targets.cast(logp.dtype)
        if q.rank > 2:
            q = q.movedim(1, -1)
        q = q.reshape([-1, classes])
        if q.device is not logp.device:
            q = q.to_device(logp.device)
        if eps:
            q = q.mul_scalar(1.0 - eps).add_scalar(eps / classes)
        terms = logp.mul(q)
        if weights is not None:
            terms = terms.mul(weights.unsqueeze_dim(0))
        return terms.sum_dim(1).neg().reshape(sample_shape)


def class_rows(
    loss: str, what: str, inputs: Tensor, weights: tuple[float, ...] | None
) -> tuple[Tensor, Tensor | None, list[int]]:
    """``inputs`` ``[batch, classes, d1, ...]`` as float rows ``[M, classes]``, the class
    weights as a tensor (or ``None``) and the per-sample shape ``[batch, d1, ...]``."""
    if not isinstance(inputs, Tensor):
        raise DTypeError(f"ember: {loss}: {what} must be a Tensor, got {type(inputs).__name__}")
    if inputs.rank < 2:
        raise ShapeError(f"ember: {loss}: {what} must be [batch, classes, ...], got shape {inputs.dims()}")
    classes = inputs.dims()[1]
    if weights is not None and len(weights) != classes:
        raise ShapeError(f"ember: {loss}: {len(weights)} class weights for {classes} classes")
    x = inputs.float()
    sample_shape = [x.dims()[0]] + x.dims()[2:]
    if x.rank > 2:
        x = x.movedim(1, -1)  # classes last
    x = x.reshape([-1, classes])
    w = None if weights is None else Tensor.from_floats(list(weights), device=x.device, dtype=x.dtype)
    return x, w, sample_shape


def index_targets(
    loss: str, what: str, inputs: Tensor, targets: Tensor, sample_shape: list[int], rows: Tensor
) -> Tensor:
    """Class-index ``targets`` checked against the samples' shape, flat ``[M]``, on the rows' device."""
    if not isinstance(targets, Tensor):
        raise DTypeError(f"ember: {loss}: targets must be a Tensor, got {type(targets).__name__}")
    if targets.dims() != sample_shape:
        raise ShapeError(
            f"ember: {loss}: class-index targets must have shape {sample_shape} for {what} "
            f"{inputs.dims()}, got {targets.dims()}"
        )
    t = targets.reshape([-1])
    return t if t.device is rows.device else t.to_device(rows.device)


def class_index_losses(
    logp: Tensor,
    t: Tensor,
    weights: Tensor | None,
    eps: float,
    pad_tokens: tuple[int, ...] | None,
    sample_shape: list[int],
) -> tuple[Tensor, Tensor | None]:
    """``-w[t] logp[t]`` per row (smoothed by ``eps``; 0 at ignored ``pad_tokens``) and
    the weighted mean's divisor (``None`` for a plain mean)."""
    classes = logp.dims()[1]
    ignored = None
    for pad in pad_tokens or ():
        hit = t.equal_elem(pad)
        ignored = hit if ignored is None else ignored.bool_or(hit)
    safe = t if ignored is None else t.mask_fill(ignored, 0)
    nll = logp.gather(1, safe.unsqueeze_dim(1)).squeeze_dim(1).neg()
    target_w = None if weights is None else weights.select(0, safe)
    if target_w is not None:
        nll = nll.mul(target_w)
    if eps:
        smooth = logp.mul(weights.unsqueeze_dim(0)) if weights is not None else logp
        nll = nll.mul_scalar(1.0 - eps).sub(smooth.sum_dim(1).squeeze_dim(1).mul_scalar(eps / classes))
    # The mean's divisor: the summed weights of the targets that are not ignored.
    norm = target_w
    if ignored is not None:
        keep = ignored.bool_not().cast(logp.dtype)
        nll = nll.mul(keep)
        norm = keep if norm is None else norm.mul(keep)
    return nll.reshape(sample_shape), None if norm is None else norm.sum()

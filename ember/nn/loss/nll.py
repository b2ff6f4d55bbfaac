"""Negative log-likelihood of log-probabilities (PyTorch's ``NLLLoss``), with class
weights and ignored (pad) targets."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError, DTypeError
from ember.module import Config, Module
from ember.nn.loss.cross_entropy import class_index_losses, class_rows, index_targets
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor


class NllLossConfig(Config):
    """Configuration of :class:`NllLoss`: ``pad_tokens``, target classes whose samples
    are ignored (PyTorch's ``ignore_index``); ``weights``, one weight per class.

    >>> from ember.tensor import activation
    >>> loss = NllLossConfig().init()
    >>> log_probs = activation.log_softmax(Tensor.from_floats([[2.0, 0.0]]), 1)
    >>> round(loss(log_probs, Tensor.from_ints([0])).into_scalar(), 4)
    0.1269
    """

    pad_tokens: list[int] | None = None
    weights: list[float] | None = None

    def validate(self) -> None:
        if self.weights is not None and (not self.weights or any(w < 0 for w in self.weights)):
            raise ConfigError(
                f"ember: NllLossConfig: weights must be a non-empty list of values >= 0, got {self.weights}"
            )

    def init(self, device: Any = None) -> NllLoss:
        return NllLoss(
            pad_tokens=None if self.pad_tokens is None else tuple(self.pad_tokens),
            weights=None if self.weights is None else tuple(float(w) for w in self.weights),
        )


class NllLoss(Module):
    """``-w[t] log_probs[t]`` per sample from log-probabilities (e.g. ``log_softmax``
    outputs) and class-index targets: ``torch.nn.functional.nll_loss``. Inputs
    ``[batch, classes]`` or ``[batch, classes, d1, ...]``, targets ``[batch]`` or
    ``[batch, d1, ...]``; the mean divides by the summed weights of the targets that
    are not ignored. ``CrossEntropyLoss`` is ``NllLoss`` after ``log_softmax``, in one
    fused step."""

    pad_tokens: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None

    def forward(self, log_probs: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        """The reduced loss, shape ``[1]`` (``AUTO`` and ``MEAN`` give the weighted mean)."""
        values, norm = self._losses(log_probs, targets)
        if reduction is Reduction.SUM:
            return values.sum()
        if reduction is Reduction.BATCH_MEAN:
            return values.sum().div_scalar(float(values.dims()[0]))
        return values.sum().div(norm) if norm is not None else values.mean()

    def forward_no_reduction(self, log_probs: Tensor, targets: Tensor) -> Tensor:
        """The loss of each sample (``[batch]`` or ``[batch, d1, ...]``); ignored ones are 0."""
        return self._losses(log_probs, targets)[0]

    def _losses(self, log_probs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor | None]:
        if isinstance(targets, Tensor) and targets.is_float():
            raise DTypeError(
                f"ember: NllLoss: targets must be class indices (an int tensor), got {targets.dtype}; "
                "for class probabilities use CrossEntropyLoss"
            )
        x, weights, sample_shape = class_rows("NllLoss", "log_probs", log_probs, self.weights)
        t = index_targets("NllLoss", "log_probs", log_probs, targets, sample_shape, x)
        return class_index_losses(x, t, weights, 0.0, self.pad_tokens, sample_shape)

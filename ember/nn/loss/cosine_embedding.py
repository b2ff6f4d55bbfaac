"""Cosine embedding loss: pulls similar pairs together, pushes dissimilar ones apart."""

from __future__ import annotations

from typing import Any

from ember.errors import DTypeError, ShapeError
from ember.module import Config, Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast

_EPS = 1e-12


class CosineEmbeddingLossConfig(Config):
    """Configuration of :class:`CosineEmbeddingLoss` (Burn's fields).

    >>> x = Tensor.from_floats([[1.0, 0.0]])
    >>> CosineEmbeddingLossConfig().init()(x, x, Tensor.from_ints([1])).into_scalar()
    0.0
    """

    margin: float = 0.0
    reduction: Reduction = Reduction.MEAN

    def init(self, device: Any = None) -> CosineEmbeddingLoss:
        return CosineEmbeddingLoss(self.margin, self.reduction)


class CosineEmbeddingLoss(Module):
    """For inputs ``[batch, d]`` and targets ``[batch]`` of 1 (similar) or -1
    (dissimilar): ``1 - cos`` for similar pairs, ``max(0, cos - margin)`` for
    dissimilar ones; ``cos = x1.x2 / sqrt((|x1|^2 + eps) (|x2|^2 + eps))`` as PyTorch.
    ``forward``'s ``AUTO`` uses the configured ``reduction``."""

    margin: float = 0.0
    reduction: Reduction = Reduction.MEAN

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        if reduction is Reduction.AUTO:
            reduction = self.reduction
        return reduction.apply(self.forward_no_reduction(input1, input2, target))

    def forward_no_reduction(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        for name, t in (("input1", input1), ("input2", input2), ("target", target)):
            if not isinstance(t, Tensor):
                raise DTypeError(f"ember: CosineEmbeddingLoss: {name} must be a Tensor, got {type(t).__name__}")
        if input1.rank != 2 or input1.dims() != input2.dims():
            raise ShapeError(
                f"ember: CosineEmbeddingLoss: input1 {input1.dims()} and input2 {input2.dims()} must both be [batch, d]"
            )
        if target.dims() != input1.dims()[:1]:
            raise ShapeError(
                f"ember: CosineEmbeddingLoss: target must be [batch={input1.dims()[0]}] of 1 / -1, got {target.dims()}"
            )
        a, b = input1.float(), input2.float()
        if autocast.ACTIVE:
            a, b = autocast.cast_inputs("cosine_embedding_loss", a, b)
        dot = a.mul(b).sum_dim(1)
        norms = a.mul(a).sum_dim(1).add_scalar(_EPS).mul(b.mul(b).sum_dim(1).add_scalar(_EPS))
        cos = dot.div(norms.sqrt()).squeeze_dim(1)
        t = target if target.device is cos.device else target.to_device(cos.device)
        similar = cos.neg().add_scalar(1.0)
        dissimilar = cos.sub_scalar(self.margin).clamp_min(0.0)
        zeros = cos.mul_scalar(0.0)
        return zeros.mask_where(t.equal_elem(1), similar).mask_where(t.equal_elem(-1), dissimilar)

"""Training losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ONNX's
``reduction`` none/sum/mean, per-class ``weight``, ``ignore_index``), on ember's gather
and reductions, so they differentiate on an autodiff device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


def _nll(node: Node) -> Callable[[Tensor, Tensor, Tensor | None], Tensor]:
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise node.attr_error("reduction", "is not one of none, sum, mean")
    ignore = node.attr("ignore_index")

    def run(log_prob: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
        target = target.cast("int64")
        valid = target.not_equal_elem(int(ignore)) if ignore is not None else None
        index = target.where(valid, target.zeros_like()) if valid is not None else target
        picked = log_prob.gather(1, index.unsqueeze_dim(1)).squeeze_dim(1).neg()
        w = weight.take(0, index) if weight is not None else None
        if valid is not None:
            mask = valid.cast(log_prob.dtype)
            w = mask if w is None else w * mask
        loss = picked if w is None else picked * w
        if reduction == "none":
            return loss
        total = loss.sum().reshape([])  # ember's sum keeps one dim; ONNX's is a scalar
        if reduction == "sum":
            return total
        if w is None:
            return total / float(max(loss.num_elements(), 1))
        return total / w.sum().reshape([])

    return run


@op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(node: Node) -> Callable[..., Any]:
    return _nll(node)


@op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(node: Node) -> Callable[..., Any]:
    nll = _nll(node)
    with_log_prob = len(node.outputs) > 1 and node.outputs[1] != ""

    def run(scores: Tensor, target: Tensor, weight: Tensor | None = None) -> Any:
        log_prob = scores.log_softmax(1)
        loss = nll(log_prob, target, weight)
        return (loss, log_prob) if with_log_prob else loss

    return run

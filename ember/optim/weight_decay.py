"""Weight decay, shared by the optimizers (Burn's ``WeightDecay``), in its two forms."""

from __future__ import annotations

from ember.tensor import Tensor


def l2_penalty(grad: Tensor, param: Tensor, weight_decay: float) -> Tensor:
    """``grad + weight_decay * param``: an L2 penalty folded into the gradient (SGD,
    Adam, AdaGrad, RMSProp...); ``grad`` itself when ``weight_decay`` is 0."""
    return grad.add(param.mul_scalar(weight_decay)) if weight_decay else grad


def decoupled_decay(param: Tensor, lr: float, weight_decay: float) -> Tensor:
    """``param * (1 - lr * weight_decay)``: decay applied to the weights apart from the
    gradient step (AdamW, Lion, Muon...); ``param`` itself when ``weight_decay`` is 0."""
    return param.mul_scalar(1.0 - lr * weight_decay) if weight_decay else param

"""Optimizer updates: Adam and AdamW over many tensors in one call."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite, scalar_sqrt
from ember.backend.ops import BinaryOp, UnaryOp


def adam_step(
    ops: Any,
    param: Any,
    grad: Any,
    moment_1: Any,
    moment_2: Any,
    max_moment_2: Any,
    *,
    lr: Any,
    beta_1: Any,
    beta_2: Any,
    epsilon: Any,
    weight_decay: Any,
    decoupled: bool,
    amsgrad: bool,
    time: Any,
) -> tuple[Any, Any, Any, Any]:
    """One Adam/AdamW update (PyTorch's order of operations, which the kernels follow):
    ``g += weight_decay * w`` (Adam); ``m = beta_1 m + (1 - beta_1) g``,
    ``v = beta_2 v + (1 - beta_2) g^2`` (``(1 - beta) g`` on the first step); AMSGrad
    keeps ``v_max = max(v_max, v)`` and uses it for ``v``; ``w *= 1 - lr * weight_decay``
    (AdamW); ``w -= m / (sqrt(v) / sqrt(1 - beta_2^t) + epsilon) * (lr / (1 - beta_1^t))``."""
    mul, add = BinaryOp.MUL, BinaryOp.ADD
    g = grad
    if weight_decay and not decoupled:
        g = ops.binary(add, g, ops.binary(mul, param, weight_decay))
    sq = ops.binary(mul, g, g)
    if moment_1 is None:
        m = ops.binary(mul, g, 1.0 - beta_1)
        v = ops.binary(mul, sq, 1.0 - beta_2)
    else:
        m = ops.binary(add, ops.binary(mul, moment_1, beta_1), ops.binary(mul, g, 1.0 - beta_1))
        v = ops.binary(add, ops.binary(mul, moment_2, beta_2), ops.binary(mul, sq, 1.0 - beta_2))
    v_max = None
    if amsgrad:
        v_max = v if max_moment_2 is None else ops.binary(BinaryOp.MAXIMUM, max_moment_2, v)
    denom = ops.unary(UnaryOp.SQRT, v_max if v_max is not None else v)
    denom = ops.binary(add, ops.binary(BinaryOp.DIV, denom, scalar_sqrt(1.0 - beta_2**time)), epsilon)
    update = ops.binary(mul, ops.binary(BinaryOp.DIV, m, denom), lr / (1.0 - beta_1**time))
    if weight_decay and decoupled:
        param = ops.binary(mul, param, 1.0 - lr * weight_decay)
    return ops.binary(BinaryOp.SUB, param, update), m, v, v_max


@composite("adam_step_many")
def adam_step_many(
    ops: Any, params: list, grads: list, moments_1: Any, moments_2: Any, max_moments_2: Any, **options: Any
) -> tuple[list, list, list, list | None]:
    """:func:`adam_step` on each tensor: ``(params, moments_1, moments_2, max_moments_2)``,
    the maxima ``None`` unless ``amsgrad``."""
    results = [
        adam_step(
            ops,
            p,
            g,
            None if moments_1 is None else moments_1[i],
            None if moments_2 is None else moments_2[i],
            None if max_moments_2 is None else max_moments_2[i],
            **options,
        )
        for i, (p, g) in enumerate(zip(params, grads))
    ]
    outs, ms, vs, vms = (list(column) for column in zip(*results))
    return outs, ms, vs, (vms if options["amsgrad"] else None)

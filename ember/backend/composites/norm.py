"""Layer normalisation and RMS normalisation over the last dim."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp


@composite("layer_norm")
def layer_norm(ops: Any, x: Any, gamma: Any, beta: Any, epsilon: float) -> tuple[Any, Any, Any]:
    """``((x - mean) * rstd * gamma + beta, mean, rstd)`` with ``rstd = 1 / sqrt(var +
    epsilon)`` (biased variance) over the last dim; the statistics ``[..., 1]``."""
    last = len(x.shape) - 1
    mean = ops.reduce(ReduceOp.MEAN, x, last)
    centered = ops.binary(BinaryOp.SUB, x, mean)
    var = ops.reduce(ReduceOp.MEAN, ops.binary(BinaryOp.MUL, centered, centered), last)
    rstd = ops.unary(UnaryOp.RSQRT, ops.binary(BinaryOp.ADD, var, epsilon))
    out = ops.binary(BinaryOp.MUL, centered, rstd)
    if gamma is not None:
        out = ops.binary(BinaryOp.MUL, out, gamma)
    if beta is not None:
        out = ops.binary(BinaryOp.ADD, out, beta)
    return out, mean, rstd


@composite("layer_norm_backward")
def layer_norm_backward(
    ops: Any, x: Any, gamma: Any, mean: Any, rstd: Any, grad: Any, need_x: bool, need_gamma: bool, need_beta: bool
) -> tuple[Any, Any, Any]:
    """With ``xhat = (x - mean) rstd`` and ``h = grad * gamma``: ``dx = rstd (h - mean(h)
    - xhat mean(h xhat))``, ``dgamma = sum(grad xhat)``, ``dbeta = sum(grad)`` over the
    rows (``None`` where not needed)."""
    mul, sub = BinaryOp.MUL, BinaryOp.SUB
    last = len(x.shape) - 1
    d = x.shape[-1]
    xhat = ops.binary(mul, ops.binary(sub, x, mean), rstd)

    def over_rows(v: Any) -> Any:
        return ops.reshape(ops.reduce(ReduceOp.SUM, ops.reshape(v, (-1, d)), 0), (d,))

    g_gamma = over_rows(ops.binary(mul, grad, xhat)) if need_gamma and gamma is not None else None
    g_beta = over_rows(grad) if need_beta else None
    gx = None
    if need_x:
        h = grad if gamma is None else ops.binary(mul, grad, gamma)
        a = ops.reduce(ReduceOp.MEAN, h, last)
        b = ops.reduce(ReduceOp.MEAN, ops.binary(mul, h, xhat), last)
        gx = ops.binary(mul, ops.binary(sub, ops.binary(sub, h, a), ops.binary(mul, xhat, b)), rstd)
    return gx, g_gamma, g_beta


@composite("rms_norm")
def rms_norm(ops: Any, x: Any, gamma: Any, epsilon: float) -> tuple[Any, Any]:
    """``(x * rstd * gamma, rstd)`` with ``rstd = 1 / sqrt(mean(x^2) + epsilon)`` over the
    last dim; ``rstd`` ``[..., 1]``."""
    last = len(x.shape) - 1
    mean_square = ops.reduce(ReduceOp.MEAN, ops.binary(BinaryOp.MUL, x, x), last)
    rstd = ops.unary(UnaryOp.RSQRT, ops.binary(BinaryOp.ADD, mean_square, epsilon))
    out = ops.binary(BinaryOp.MUL, x, rstd)
    if gamma is not None:
        out = ops.binary(BinaryOp.MUL, out, gamma)
    return out, rstd


@composite("rms_norm_backward")
def rms_norm_backward(
    ops: Any, x: Any, gamma: Any, rstd: Any, grad: Any, need_x: bool, need_gamma: bool
) -> tuple[Any, Any]:
    """With ``xhat = x rstd`` and ``h = grad * gamma``: ``dx = rstd (h - xhat mean(h
    xhat))``, ``dgamma = sum(grad xhat)`` over the rows (``None`` where not needed)."""
    mul, sub = BinaryOp.MUL, BinaryOp.SUB
    last = len(x.shape) - 1
    d = x.shape[-1]
    xhat = ops.binary(mul, x, rstd)
    g_gamma = None
    if need_gamma and gamma is not None:
        g_gamma = ops.reshape(ops.reduce(ReduceOp.SUM, ops.reshape(ops.binary(mul, grad, xhat), (-1, d)), 0), (d,))
    gx = None
    if need_x:
        h = grad if gamma is None else ops.binary(mul, grad, gamma)
        b = ops.reduce(ReduceOp.MEAN, ops.binary(mul, h, xhat), last)
        gx = ops.binary(mul, ops.binary(sub, h, ops.binary(mul, xhat, b)), rstd)
    return gx, g_gamma

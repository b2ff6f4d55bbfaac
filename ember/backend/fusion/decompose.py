"""Known decompositions of the composite (fused) backend calls into primitives.

Each function computes a fused call of the protocol (``ember/backend/base.py``) with
the primitive ops of any backend ``ops``. An executor runs one when the backend it
lowers to returns ``NotImplemented`` for the fused call; a lowering expands a
composite node with it into primitive nodes it can fuse (run over a recording
backend, a decomposition *is* that expansion). Float arguments may arrive as
run-time scalars (:class:`~ember.backend.fusion.scalars.SymScalar`), so the
arithmetic on them goes through helpers that keep them symbolic (``scalar_sqrt``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.backend.dtype import DType
from ember.backend.fusion.graph import Node, Ref, flatten
from ember.backend.fusion.scalars import SymScalar, scalar_sqrt
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp


def _dtype(x: Any) -> DType:
    return DType.from_numpy(x.dtype)


def relu(ops, x):
    return ops.clamp(x, 0.0, None)


def sigmoid(ops, x):
    # 0.5 * (tanh(x / 2) + 1): finite everywhere, as the tensor layer's composite.
    half = ops.binary(BinaryOp.MUL, x, 0.5)
    return ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.ADD, ops.unary(UnaryOp.TANH, half), 1.0), 0.5)


def softmax(ops, x, dim):
    e = ops.unary(UnaryOp.EXP, ops.binary(BinaryOp.SUB, x, ops.reduce(ReduceOp.MAX, x, dim)))
    return ops.binary(BinaryOp.DIV, e, ops.reduce(ReduceOp.SUM, e, dim))


def log_softmax(ops, x, dim):
    shifted = ops.binary(BinaryOp.SUB, x, ops.reduce(ReduceOp.MAX, x, dim))
    total = ops.reduce(ReduceOp.SUM, ops.unary(UnaryOp.EXP, shifted), dim)
    return ops.binary(BinaryOp.SUB, shifted, ops.unary(UnaryOp.LOG, total))


def linear(ops, x, weight, bias):
    out = ops.matmul(x, weight)
    return out if bias is None else ops.binary(BinaryOp.ADD, out, bias)


def _transpose(ops, x):
    rank = len(x.shape)
    return ops.permute(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def linear_backward(ops, x, weight, grad, need_x, need_weight, need_bias):
    d_out = grad.shape[-1]
    gx = ops.matmul(grad, _transpose(ops, weight)) if need_x else None
    g2 = grad if len(grad.shape) == 2 else ops.reshape(grad, (-1, d_out))
    gw = None
    if need_weight:
        x2 = x if len(x.shape) == 2 else ops.reshape(x, (-1, x.shape[-1]))
        gw = ops.matmul(_transpose(ops, x2), g2)
    gb = ops.reshape(ops.reduce(ReduceOp.SUM, g2, 0), (d_out,)) if need_bias else None
    return gx, gw, gb


def mse_loss(ops, pred, target, mean):
    diff = ops.reshape(ops.binary(BinaryOp.SUB, pred, target), (-1,))
    total = ops.reduce(ReduceOp.MEAN if mean else ReduceOp.SUM, ops.binary(BinaryOp.MUL, diff, diff), 0)
    return ops.reshape(total, (1,))


def adam_step(
    ops,
    param,
    grad,
    moment_1,
    moment_2,
    max_moment_2,
    *,
    lr,
    beta_1,
    beta_2,
    epsilon,
    weight_decay,
    decoupled,
    amsgrad,
    time,
):
    """One Adam/AdamW update, in the operation order of ``ember.optim.adam``."""
    g = grad
    if weight_decay and not decoupled:
        g = ops.binary(BinaryOp.ADD, g, ops.binary(BinaryOp.MUL, param, weight_decay))
    sq = ops.binary(BinaryOp.MUL, g, g)
    if moment_1 is None:
        m = ops.binary(BinaryOp.MUL, g, 1.0 - beta_1)
        v = ops.binary(BinaryOp.MUL, sq, 1.0 - beta_2)
    else:
        m = ops.binary(
            BinaryOp.ADD, ops.binary(BinaryOp.MUL, moment_1, beta_1), ops.binary(BinaryOp.MUL, g, 1.0 - beta_1)
        )
        v = ops.binary(
            BinaryOp.ADD, ops.binary(BinaryOp.MUL, moment_2, beta_2), ops.binary(BinaryOp.MUL, sq, 1.0 - beta_2)
        )
    v_max = None
    if amsgrad:
        v_max = v if max_moment_2 is None else ops.binary(BinaryOp.MAXIMUM, max_moment_2, v)
    denom = ops.unary(UnaryOp.SQRT, v_max if v_max is not None else v)
    denom = ops.binary(BinaryOp.ADD, ops.binary(BinaryOp.DIV, denom, scalar_sqrt(1.0 - beta_2**time)), epsilon)
    update = ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.DIV, m, denom), lr / (1.0 - beta_1**time))
    if weight_decay and decoupled:
        param = ops.binary(BinaryOp.MUL, param, 1.0 - lr * weight_decay)
    return ops.binary(BinaryOp.SUB, param, update), m, v, v_max


def adam_step_many(ops, params, grads, moments_1, moments_2, max_moments_2, **options):
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


#: fused call -> its decomposition ``fn(ops, *args, **kwargs)``.
def embedding(ops, weights, indices):
    """Rows of ``weights`` by ``indices``: a gather along dim 0 of the index column
    broadcast over the row's width (a lowering's gather loop checks the indices)."""
    n, d = math.prod(indices.shape), weights.shape[1]
    rows = ops.expand(ops.reshape(indices, (n, 1)), (n, d))
    return ops.reshape(ops.gather(weights, 0, rows), tuple(indices.shape) + (d,))


DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    "relu": relu,
    "sigmoid": sigmoid,
    "softmax": softmax,
    "log_softmax": log_softmax,
    "linear": linear,
    "linear_backward": linear_backward,
    "mse_loss": mse_loss,
    "adam_step_many": adam_step_many,
    "embedding": embedding,
}


def call_node(backend: Any, node: Node, ref_value: Callable[[Ref], Any], scalar_value: Callable[[Any], Any]) -> list:
    """Runs ``node`` on ``backend`` (its decomposition where the backend returns
    ``NotImplemented``), with each Ref argument given by ``ref_value`` and each run-time
    scalar by ``scalar_value``; returns the result's leaves (what executors do for the
    steps they do not lower)."""

    def arg(a: Any) -> Any:
        kind = type(a)
        if kind is Ref:
            return ref_value(a)
        if kind is SymScalar:
            return scalar_value(a)
        if kind is tuple:
            return tuple(arg(x) for x in a)
        if kind is list:
            return [arg(x) for x in a]
        return a

    args = arg(node.args)
    kwargs = {k: arg(v) for k, v in node.kwargs}
    result = getattr(backend, node.op)(*args, **kwargs)
    if result is NotImplemented:
        result = DECOMPOSITIONS[node.op](backend, *args, **kwargs)
    return flatten(result)[0]

"""``ai.onnx.preview.training``'s optimizer steps as graph operators: Adagrad, Adam and
Momentum (standard and Nesterov), each over any number of tensors at once.

Inputs are the learning rate ``R`` and the step count ``T`` (scalars, read on the host),
then the tensors ``X_1..X_n``, their gradients ``G_1..G_n`` and the optimizer's state
(``H``: accumulated squares; ``V``: momentum); outputs are the new tensors, then the new
states, in the same grouping. The updates are ONNX's formulas (``norm_coefficient`` adds
an L2 term to the gradient) on ember's tensor ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.common import scalar
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor

_DOMAIN = "ai.onnx.preview.training"


def _groups(node: Node, args: tuple[Any, ...], per: int) -> list[tuple[Tensor, ...]]:
    """``(X_i, G_i, state_i...)`` for each tensor of a variadic optimizer node."""
    if len(args) % per or not args:
        raise node.error(f"takes R, T and {per} inputs per tensor (X, G and the state), got {len(args) + 2} inputs")
    n = len(args) // per
    return [tuple(args[i + k * n] for k in range(per)) for i in range(n)]


def _required(node: Node, key: str) -> float:
    value = node.attr(key)
    if value is None:
        raise node.error(f"needs the attribute {key!r}")
    return float(value)


@op("Adagrad", domain=_DOMAIN, host=(0, 1))
def adagrad(node: Node) -> Callable[..., Any]:
    decay = float(node.attr("decay_factor", 0.0))
    epsilon = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))

    def run(r: Any, t: Any, *args: Tensor) -> tuple[Tensor, ...]:
        rate = float(scalar(r)) / (1 + int(scalar(t)) * decay)
        xs, hs = [], []
        for x, g, h in _groups(node, args, 3):
            g = g + x * norm if norm else g
            h = h + g * g
            xs.append(x - g / (h.sqrt() + epsilon) * rate)
            hs.append(h)
        return (*xs, *hs)

    return run


@op("Adam", domain=_DOMAIN, host=(0, 1))
def adam(node: Node) -> Callable[..., Any]:
    alpha, beta = float(node.attr("alpha", 0.9)), float(node.attr("beta", 0.999))
    epsilon = float(node.attr("epsilon", 1e-6))
    norm, post = float(node.attr("norm_coefficient", 0.0)), float(node.attr("norm_coefficient_post", 0.0))

    def run(r: Any, t: Any, *args: Tensor) -> tuple[Tensor, ...]:
        step = int(scalar(t))
        rate = float(scalar(r))
        if step > 0:  # bias correction of both moments
            rate = rate * (1 - beta**step) ** 0.5 / (1 - alpha**step)
        xs, vs, hs = [], [], []
        for x, g, v, h in _groups(node, args, 4):
            g = g + x * norm if norm else g
            v = v * alpha + g * (1 - alpha)
            h = h * beta + g * g * (1 - beta)
            x = x - v / (h.sqrt() + epsilon) * rate
            xs.append(x * (1 - post) if post else x)
            vs.append(v)
            hs.append(h)
        return (*xs, *vs, *hs)

    return run


@op("Momentum", domain=_DOMAIN, host=(0, 1))
def momentum(node: Node) -> Callable[..., Any]:
    alpha, beta, norm = (_required(node, k) for k in ("alpha", "beta", "norm_coefficient"))
    mode = node.attr("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        raise node.attr_error("mode", "must be 'standard' or 'nesterov'")

    def run(r: Any, t: Any, *args: Tensor) -> tuple[Tensor, ...]:
        rate = float(scalar(r))
        first = int(scalar(t)) <= 0  # the gradient's coefficient is 1 at the first step
        xs, vs = [], []
        for x, g, v in _groups(node, args, 3):
            g = g + x * norm if norm else g
            v = v * alpha + (g if first else g * beta)
            xs.append(x - (v if mode == "standard" else g + v * alpha) * rate)
            vs.append(v)
        return (*xs, *vs)

    return run

"""Activations and the softmax family."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.onnx.ops.common import axis
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor
from ember.tensor import activation as A


@op("Relu")
def relu(node: Node) -> Callable[..., Any]:
    return A.relu


@op("Sigmoid")
def sigmoid(node: Node) -> Callable[..., Any]:
    return A.sigmoid


@op("Softsign")
def softsign(node: Node) -> Callable[..., Any]:
    return A.softsign


@op("Softplus")
def softplus(node: Node) -> Callable[..., Any]:
    # ONNX's softplus is log(1 + exp(x)) without PyTorch's linear threshold.
    return lambda x: A.softplus(x, 1.0, math.inf)


@op("Mish")
def mish(node: Node) -> Callable[..., Any]:
    return A.mish


@op("HardSwish")
def hard_swish(node: Node) -> Callable[..., Any]:
    return A.hard_swish


@op("Swish", since=24)
def swish(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.0))
    if alpha == 1.0:
        return lambda x: x * x.sigmoid()
    return lambda x: x * (x * alpha).sigmoid()


@op("SwiGLU", since=28)
def swiglu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.0))
    return lambda a, b: a * (a * alpha if alpha != 1.0 else a).sigmoid() * b


@op("HardSigmoid")
def hard_sigmoid(node: Node) -> Callable[..., Any]:
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return lambda x: A.hard_sigmoid(x, alpha, beta)


@op("LeakyRelu")
def leaky_relu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 0.01))
    return lambda x: A.leaky_relu(x, alpha)


@op("Elu")
def elu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.0))
    return lambda x: A.elu(x, alpha)


@op("Celu")
def celu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.0))
    return lambda x: A.celu(x, alpha)


@op("Selu")
def selu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return lambda x: A.elu(x, alpha) * gamma


@op("ThresholdedRelu")
def thresholded_relu(node: Node) -> Callable[..., Any]:
    alpha = float(node.attr("alpha", 1.0))
    return lambda x: A.thresholded_relu(x, alpha)


@op("Gelu", since=20)
def gelu(node: Node) -> Callable[..., Any]:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.error(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return lambda x: A.gelu(x, approximate)


@op("PRelu")
def prelu(node: Node) -> Callable[..., Any]:
    # The slope broadcasts against x (ONNX's unidirectional broadcasting).
    return lambda x, slope: x.where(x.greater_elem(0), x * slope)


@op("Shrink")
def shrink(node: Node) -> Callable[..., Any]:
    bias, lambd = float(node.attr("bias", 0.0)), float(node.attr("lambd", 0.5))

    def run(x: Tensor) -> Tensor:
        zero = x.zeros_like()
        return (x - bias).where(x.greater_elem(lambd), (x + bias).where(x.lower_elem(-lambd), zero))

    return run


# ---------------------------------------------------------------------- softmax family
def _softmax_builder(fn: Callable[[Tensor, int], Tensor]) -> Callable[[Node], Callable[..., Any]]:
    def build(node: Node) -> Callable[..., Any]:
        if node.version >= 13:
            dim = int(node.attr("axis", -1))

            def run(x: Tensor) -> Tensor:
                return fn(x, axis(node, dim, x.rank))

            return run
        # Before opset 13: the input is seen as 2-d, [prod(dims[:axis]), prod(dims[axis:])].
        first = int(node.attr("axis", 1))

        def coerced(x: Tensor) -> Tensor:
            shape = x.dims()
            a = axis(node, first, x.rank) if x.rank else 0
            flat = x.reshape([math.prod(shape[:a]), math.prod(shape[a:])])
            return fn(flat, 1).reshape(shape)

        return coerced

    return build


op("Softmax")(_softmax_builder(A.softmax))
op("LogSoftmax")(_softmax_builder(A.log_softmax))


def _hardmax(x: Tensor, dim: int) -> Tensor:
    return x.argmax(dim).one_hot(x.dims()[dim]).squeeze_dim(dim).movedim(-1, dim).cast(x.dtype)


op("Hardmax")(_softmax_builder(_hardmax))

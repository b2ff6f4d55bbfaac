"""Normalisation and Dropout: BatchNormalization, InstanceNormalization,
LayerNormalization, RMSNormalization, GroupNormalization, LpNormalization, Dropout, and
the random draws RandomUniformLike and Bernoulli.

As ember's own layers, BatchNormalization and Dropout train on an autodiff device
(batch statistics with running averages updated; random masks) and infer elsewhere
(after ``model.valid()``). The running statistics of a BatchNormalization are
:class:`~ember.module.RunningState` buffers of the module (saved, never trained)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.module import RunningState
from ember.onnx.dtypes import ember_dtype
from ember.onnx.ops.common import axes, axis, scalar
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


def _value(x: Any, device: Any) -> Tensor:
    """A running statistic's current value (a state, or a plain input) on ``device``."""
    value = x.value() if isinstance(x, RunningState) else x
    return value if value.device is device else value.to_device(device)


@op("BatchNormalization", training=True)
def batch_norm(node: Node) -> Callable[..., Any]:
    eps = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))  # ONNX weighs the old value (PyTorch's 1 - momentum)
    extra_outputs = len([o for o in node.outputs[1:] if o])
    # training_mode=1 (opset 14) trains on every device; 0 or absent: the device decides.
    always = bool(node.attr("training_mode", 0)) or (node.version < 7 and not node.attr("is_test", 0))
    if node.version < 7:
        node.attr("consumed_inputs")  # opset 6's optimisation hint: read, no effect
    if node.version < 9:
        node.attr("spatial")  # 1 (the default) or 0; ember normalises per channel as spatial=1 does
        if node.attr("spatial", 1) != 1:
            raise node.error("attribute spatial=0 (statistics per element) is not supported")

    def run(x: Tensor, scale: Tensor, bias: Tensor, mean: Any, var: Any) -> Any:
        channels = x.dims()[1]
        stat = [1, channels] + [1] * (x.rank - 2)
        device = x.device
        if always or device.is_autodiff():
            reduced = [0] + list(range(2, x.rank))
            batch_mean = x.mean_dims(reduced)
            centered = x - batch_mean
            batch_var = (centered * centered).mean_dims(reduced)
            new_mean = new_var = None
            if isinstance(mean, RunningState) or extra_outputs:
                # ONNX (and onnxruntime) move the running variance toward the population variance.
                population = batch_var.detach().reshape([channels])
                new_mean = _value(mean, device) * momentum + batch_mean.detach().reshape([channels]) * (1 - momentum)
                new_var = _value(var, device) * momentum + population * (1 - momentum)
                if isinstance(mean, RunningState):
                    mean.update(new_mean)
                if isinstance(var, RunningState):
                    var.update(new_var)
            y = centered * ((batch_var + eps).rsqrt() * scale.reshape(stat)) + bias.reshape(stat)
            return (y, new_mean, new_var) if extra_outputs else y
        m = _value(mean, device)
        v = _value(var, device)
        factor = (v + eps).rsqrt() * scale
        y = x * factor.reshape(stat) + (bias - m * factor).reshape(stat)
        return (y, m, v) if extra_outputs else y

    return run


@op("InstanceNormalization")
def instance_norm(node: Node) -> Callable[..., Any]:
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
        stat = [1, x.dims()[1]] + [1] * (x.rank - 2)
        reduced = list(range(2, x.rank))
        centered = x - x.mean_dims(reduced)
        var = (centered * centered).mean_dims(reduced)
        return centered * (var + eps).rsqrt() * scale.reshape(stat) + bias.reshape(stat)

    return run


@op("LayerNormalization", since=17)
def layer_norm(node: Node) -> Callable[..., Any]:
    first = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    outputs = [o for o in node.outputs[1:] if o]

    def run(x: Tensor, scale: Tensor, bias: Tensor | None = None) -> Any:
        a = axis(node, first, x.rank)
        reduced = list(range(a, x.rank))
        mean = x.mean_dims(reduced)
        centered = x - mean
        inv_std = ((centered * centered).mean_dims(reduced) + eps).rsqrt()
        y = centered * inv_std * scale
        if bias is not None:
            y = y + bias
        return (y, mean, inv_std) if outputs else y

    return run


@op("RMSNormalization", since=23)
def rms_norm(node: Node) -> Callable[..., Any]:
    first = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    if int(node.attr("stash_type", 1)) != 1:
        raise node.attr_error("stash_type", "only 1 (statistics in float32) is defined")

    def run(x: Tensor, scale: Tensor) -> Tensor:
        a = axis(node, first, x.rank)
        low = x.dtype in (DType.FLOAT16, DType.BFLOAT16)  # stash_type=1: the statistics in float32
        src = x.cast(DType.FLOAT32) if low else x
        y = src * ((src * src).mean_dims(list(range(a, x.rank))) + eps).rsqrt()
        return (y.cast(x.dtype) if low else y) * scale

    return run


@op("GroupNormalization", since=18)
def group_norm(node: Node) -> Callable[..., Any]:
    groups = int(node.attr("num_groups"))
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
        shape = x.dims()
        n, c = shape[:2]
        grouped = x.reshape([n, groups, -1])
        centered = grouped - grouped.mean_dims([2])
        var = (centered * centered).mean_dims([2])
        y = (centered * (var + eps).rsqrt()).reshape(shape)
        stat = [1, c] + [1] * (len(shape) - 2)
        if scale.num_elements() == groups and groups != c:  # opset 18: one scale per group
            scale = scale.reshape([groups, 1]).expand([groups, c // groups]).reshape([c])
            bias = bias.reshape([groups, 1]).expand([groups, c // groups]).reshape([c])
        return y * scale.reshape(stat) + bias.reshape(stat)

    return run


@op("LpNormalization")
def lp_norm(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise node.error(f"p must be 1 or 2, got {p}")

    def run(x: Tensor) -> Tensor:
        d = axis(node, a, x.rank)
        norm = x.abs().sum_dim(d) if p == 1 else (x * x).sum_dim(d).sqrt()
        return x / norm.where(norm.not_equal_elem(0), norm.ones_like())  # a zero row stays zero

    return run


@op("Dropout", host=(1, 2), training=True)
def dropout(node: Node) -> Callable[..., Any]:
    default = float(node.attr("ratio", 0.5))  # an attribute before opset 12
    node.attr("seed")  # read: ember draws masks from the device's generator
    is_test = node.version < 7 and bool(node.attr("is_test", 0))
    with_mask = len(node.outputs) > 1 and node.outputs[1] != ""

    def run(x: Tensor, ratio: Any = None, training_mode: Any = None) -> Any:
        p = float(scalar(ratio)) if ratio is not None and np.size(ratio) else default
        # training_mode given: it decides (a random mask on every device); absent: the device does.
        given = training_mode is not None and np.size(training_mode)
        training = bool(scalar(training_mode)) if given else x.device.is_autodiff() and not is_test
        if not training or p == 0.0:
            return (x, x.ones_like().bool()) if with_mask else x
        keep = Tensor.random(x.dims(), Distribution.bernoulli(1.0 - p), device=x.device, dtype=x.dtype)
        y = x * keep * (1.0 / (1.0 - p)) if p < 1.0 else x * 0.0
        return (y, keep.bool()) if with_mask else y

    return run


# ---------------------------------------------------------------------- random draws
@op("RandomUniformLike", eager=True)
def random_uniform_like(node: Node) -> Callable[..., Any]:
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    to = node.attr("dtype")
    node.uses("seed")  # ember draws from the device's generator (Device.seed)

    def run(x: Tensor) -> Tensor:
        dtype = x.dtype if to is None else ember_dtype(int(to), node.label)
        return Tensor.random(x.dims(), Distribution.uniform(low, high), device=x.device, dtype=dtype)

    return run


@op("Bernoulli", eager=True, since=15)
def bernoulli(node: Node) -> Callable[..., Any]:
    to = node.attr("dtype")
    node.uses("seed")  # ember draws from the device's generator (Device.seed)

    def run(p: Tensor) -> Tensor:
        dtype = p.dtype if to is None else ember_dtype(int(to), node.label)
        draw = Tensor.random(p.dims(), Distribution.uniform(0.0, 1.0), device=p.device, dtype=p.dtype)
        return draw.lower(p).cast(dtype)

    return run


@op("MeanVarianceNormalization", since=9)
def mean_variance_norm(node: Node) -> Callable[..., Any]:
    wanted = node.ints("axes", [0, 2, 3])

    def run(x: Tensor) -> Tensor:
        dims = sorted(set(axes(node, wanted, x.rank)))
        mean = x.mean_dims(dims)
        variance = (x * x).mean_dims(dims) - mean * mean  # the spec's E[x^2] - E[x]^2
        return (x - mean) / (variance.sqrt() + 1e-9)

    return run

"""Every activation and every loss at its kinks, bounds and thresholds, against PyTorch.

One table: each case gives ember's function, torch's, and inputs that sit exactly on
the points where a piecewise or composite definition can go wrong (0, clamp bounds,
thresholds, targets 0 and 1, +-inf where the function is defined there). Values are
checked on every conformance device; gradients (of a fixed weighted sum of the
outputs) on the autodiff ones. ``test_the_table_covers_everything`` fails when an
activation or a loss is added without a row here.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ember.nn.activation as nn_act
import ember.nn.loss as nn_loss
from ember import Param, Tensor
from ember.module import Module
from ember.nn import Linear
from ember.nn.loss import (
    BinaryCrossEntropyLossConfig,
    CosineEmbeddingLossConfig,
    CrossEntropyLossConfig,
    HuberLossConfig,
    KLDivLossConfig,
    L1Loss,
    MseLoss,
    NllLossConfig,
    Reduction,
    SmoothL1LossConfig,
)
from ember.tensor import activation as A
from tests.conftest import assert_close

pytestmark = pytest.mark.torch
INF = math.inf


def _torch():
    return __import__("torch")


def _tf():
    return _torch().nn.functional


@dataclass(frozen=True)
class Case:
    """``ember(*tensors)`` against ``torch(*tensors)`` at ``inputs`` (float32 arrays,
    except int targets); gradients for the inputs listed in ``grads``."""

    ember: Callable[..., Tensor]
    torch: Callable[..., Any]
    inputs: tuple
    grads: tuple[int, ...] = (0,)
    covers: tuple[str, ...] = ()
    rtol: float = 1e-5  # float32 rounding; kink errors are O(1)


def _points(*extra: float, infinite: bool = True) -> tuple:
    base = [-30.0, -6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 30.0]
    if infinite:
        base += [-INF, INF]
    return (np.array(sorted(set(base + list(extra))), np.float32),)


def _module(cls: type, **fields: Any) -> Callable[[Tensor], Tensor]:
    return lambda x: cls(**fields)(x)


def _quiet_softmax_torch(x):
    torch = _torch()
    padded = torch.cat([x, torch.zeros(x.shape[0], 1, dtype=x.dtype)], 1)
    return torch.softmax(padded, 1)[:, :-1]


ROWS = np.array([[0.0, 0.0, 0.0], [1e4, 0.0, -1e4], [-INF, 0.0, 1.0], [2.0, 2.0, -1.0]], np.float32)
SWIGLU_INNER = [[1.0, -1.0], [0.5, 0.0]]  # [d_in, d_out]
SWIGLU_OUTER = [[2.0, 0.0], [0.0, 1.0]]
GLU_IN = (np.array([[0.0, 1.0, -2.0, 0.0, 5.0], [0.0, 0.0, 0.0, -INF, INF]], np.float32),)


def _swiglu(x):
    def linear(weight):
        return Linear(
            weight=Param.from_tensor(Tensor.from_data(np.array(weight, np.float32), device=x.device)),
            bias=Param.from_tensor(Tensor.from_floats([0.0, -1.0], device=x.device)),
        )

    return nn_act.SwiGlu(linear_inner=linear(SWIGLU_INNER), linear_outer=linear(SWIGLU_OUTER))(x)


def _swiglu_torch(x):
    torch = _torch()
    bias = torch.tensor([0.0, -1.0])
    return _tf().silu(x @ torch.tensor(SWIGLU_INNER) + bias) * (x @ torch.tensor(SWIGLU_OUTER) + bias)


# gelu's erf/tanh composites lose digits to cancellation in 1 + erf(x) for x << 0.
ACTIVATIONS: dict[str, Case] = {
    "relu": Case(A.relu, lambda x: _tf().relu(x), _points(), covers=("relu", "nn.Relu")),
    "nn.Relu": Case(_module(nn_act.Relu), lambda x: _tf().relu(x), _points()),
    "leaky_relu": Case(
        lambda x: A.leaky_relu(x, 0.1), lambda x: _tf().leaky_relu(x, 0.1), _points(), covers=("leaky_relu",)
    ),
    "nn.LeakyRelu": Case(
        lambda x: nn_act.LeakyReluConfig(negative_slope=0.2).init()(x),
        lambda x: _tf().leaky_relu(x, 0.2),
        _points(),
        covers=("nn.LeakyRelu",),
    ),
    "relu6": Case(A.relu6, lambda x: _tf().relu6(x), _points(), covers=("relu6",)),
    "hard_tanh": Case(A.hard_tanh, lambda x: _tf().hardtanh(x), _points(), covers=("hard_tanh",)),
    "hard_tanh(-2,3)": Case(lambda x: A.hard_tanh(x, -2.0, 3.0), lambda x: _tf().hardtanh(x, -2.0, 3.0), _points(-2.0)),
    "hard_sigmoid(torch)": Case(
        lambda x: A.hard_sigmoid(x, 1 / 6, 0.5), lambda x: _tf().hardsigmoid(x), _points(), covers=("hard_sigmoid",)
    ),
    "nn.HardSigmoid": Case(
        _module(nn_act.HardSigmoid),
        lambda x: _tf().hardtanh(x * 0.2 + 0.5, 0.0, 1.0),
        _points(-2.5, 2.5),
        covers=("nn.HardSigmoid",),
    ),
    "hard_swish": Case(
        A.hard_swish, lambda x: _tf().hardswish(x), _points(infinite=False), covers=("hard_swish", "nn.HardSwish")
    ),
    "nn.HardSwish": Case(_module(nn_act.HardSwish), lambda x: _tf().hardswish(x), _points(infinite=False)),
    "sigmoid": Case(A.sigmoid, lambda x: x.sigmoid(), _points(), covers=("sigmoid", "nn.Sigmoid")),
    "nn.Sigmoid": Case(_module(nn_act.Sigmoid), lambda x: x.sigmoid(), _points()),
    "tanh": Case(A.tanh, lambda x: x.tanh(), _points(), covers=("tanh", "nn.Tanh")),
    "nn.Tanh": Case(_module(nn_act.Tanh), lambda x: x.tanh(), _points()),
    "softplus": Case(A.softplus, lambda x: _tf().softplus(x), _points(20.0), covers=("softplus",)),
    "softplus(beta=2,threshold=4)": Case(
        lambda x: A.softplus(x, 2.0, 4.0), lambda x: _tf().softplus(x, 2.0, 4.0), _points(2.0)
    ),
    "nn.Softplus": Case(_module(nn_act.Softplus), lambda x: _tf().softplus(x), _points(20.0), covers=("nn.Softplus",)),
    "log_sigmoid": Case(A.log_sigmoid, lambda x: _tf().logsigmoid(x), _points(), covers=("log_sigmoid",)),
    "silu": Case(A.silu, lambda x: _tf().silu(x), _points(infinite=False), covers=("silu", "swish", "nn.SiLU")),
    "nn.SiLU": Case(_module(nn_act.SiLU), lambda x: _tf().silu(x), _points(infinite=False)),
    "gelu": Case(A.gelu, lambda x: _tf().gelu(x), _points(infinite=False), covers=("gelu", "nn.Gelu"), rtol=2e-4),
    "gelu_tanh": Case(
        A.gelu_tanh,
        lambda x: _tf().gelu(x, approximate="tanh"),
        _points(infinite=False),
        covers=("gelu_tanh",),
        rtol=2e-4,
    ),
    "nn.Gelu(tanh)": Case(
        _module(nn_act.Gelu, approximate="tanh"),
        lambda x: _tf().gelu(x, approximate="tanh"),
        _points(infinite=False),
        rtol=2e-4,
    ),
    "mish": Case(A.mish, lambda x: _tf().mish(x), _points(infinite=False), covers=("mish", "nn.Mish")),
    "nn.Mish": Case(_module(nn_act.Mish), lambda x: _tf().mish(x), _points(infinite=False)),
    "elu": Case(A.elu, lambda x: _tf().elu(x), _points(), covers=("elu",)),
    "nn.Elu(alpha=2)": Case(_module(nn_act.Elu, alpha=2.0), lambda x: _tf().elu(x, 2.0), _points(), covers=("nn.Elu",)),
    "selu": Case(A.selu, lambda x: _tf().selu(x), _points(), covers=("selu", "nn.Selu")),
    "nn.Selu": Case(_module(nn_act.Selu), lambda x: _tf().selu(x), _points()),
    "celu": Case(A.celu, lambda x: _tf().celu(x), _points(), covers=("celu",)),
    "nn.Celu(alpha=2)": Case(
        _module(nn_act.Celu, alpha=2.0), lambda x: _tf().celu(x, 2.0), _points(), covers=("nn.Celu",)
    ),
    "prelu": Case(
        lambda x, a: A.prelu(x.reshape([1, 2, 7]), a),
        lambda x, a: _tf().prelu(x.reshape(1, 2, 7), a),
        (
            np.array([-INF, -3.0, -1.0, 0.0, 1.0, 3.0, INF, 0.0, -0.0, -2.0, 2.0, -1e-3, 1e-3, 0.0], np.float32),
            np.array([0.25, -0.5], np.float32),
        ),
        grads=(0, 1),
        covers=("prelu",),
    ),
    "nn.PRelu": Case(
        lambda x: nn_act.PReluConfig(num_parameters=1, alpha=0.3).init(x.device)(x),
        lambda x: _tf().prelu(x, _torch().tensor([0.3])),
        _points(),
        covers=("nn.PRelu",),
    ),
    "glu": Case(lambda x: A.glu(x, 0), lambda x: _tf().glu(x, 0), GLU_IN, covers=("glu",)),
    "nn.Glu": Case(lambda x: nn_act.Glu(dim=0)(x), lambda x: _tf().glu(x, 0), GLU_IN, covers=("nn.Glu",)),
    "nn.SwiGlu": Case(
        _swiglu, _swiglu_torch, (np.array([[0.0, 0.0], [-2.0, 1.0], [1.0, 2.0]], np.float32),), covers=("nn.SwiGlu",)
    ),
    "softmax": Case(lambda x: A.softmax(x, 1), lambda x: x.softmax(1), (ROWS,), covers=("softmax",)),
    "log_softmax": Case(lambda x: A.log_softmax(x, 1), lambda x: x.log_softmax(1), (ROWS,), covers=("log_softmax",)),
    "softmin": Case(lambda x: A.softmin(x, 1), lambda x: _tf().softmin(x, 1), (ROWS[[0, 1, 3]],), covers=("softmin",)),
    "quiet_softmax": Case(lambda x: A.quiet_softmax(x, 1), _quiet_softmax_torch, (ROWS,), covers=("quiet_softmax",)),
    "softsign": Case(A.softsign, lambda x: _tf().softsign(x), _points(), covers=("softsign", "nn.Softsign")),
    "nn.Softsign": Case(_module(nn_act.Softsign), lambda x: _tf().softsign(x), _points()),
    "tanhshrink": Case(
        A.tanhshrink, lambda x: _tf().tanhshrink(x), _points(infinite=False), covers=("tanhshrink", "nn.Tanhshrink")
    ),
    "nn.Tanhshrink": Case(_module(nn_act.Tanhshrink), lambda x: _tf().tanhshrink(x), _points(infinite=False)),
    "threshold": Case(
        lambda x: A.threshold(x, 0.5, -2.0), lambda x: _tf().threshold(x, 0.5, -2.0), _points(), covers=("threshold",)
    ),
    "nn.Threshold": Case(
        _module(nn_act.Threshold, threshold=1.0, value=3.0),
        lambda x: _tf().threshold(x, 1.0, 3.0),
        _points(),
        covers=("nn.Threshold",),
    ),
    "thresholded_relu": Case(
        lambda x: A.thresholded_relu(x, 0.5),
        lambda x: _torch().where(x > 0.5, x, 0.0),
        _points(),
        covers=("thresholded_relu",),
    ),
    "nn.ThresholdedRelu": Case(
        _module(nn_act.ThresholdedRelu),
        lambda x: _torch().where(x > 1.0, x, 0.0),
        _points(),
        covers=("nn.ThresholdedRelu",),
    ),
    "quick_gelu": Case(
        A.quick_gelu,
        lambda x: x * _torch().sigmoid(1.702 * x),
        _points(infinite=False),
        covers=("quick_gelu", "nn.QuickGelu"),
    ),
    "nn.QuickGelu": Case(_module(nn_act.QuickGelu), lambda x: x * _torch().sigmoid(1.702 * x), _points(infinite=False)),
    "hard_shrink": Case(
        lambda x: A.hard_shrink(x, 0.5), lambda x: _tf().hardshrink(x, 0.5), _points(-0.5), covers=("hard_shrink",)
    ),
    "soft_shrink": Case(
        lambda x: A.soft_shrink(x, 0.5), lambda x: _tf().softshrink(x, 0.5), _points(-0.5), covers=("soft_shrink",)
    ),
}

# ---------------------------------------------------------------------- losses
LOGITS = np.array([[0.0, 0.0, 0.0, 1.0, -1.0, 30.0, -30.0, 100.0, -100.0]], np.float32)
PROBS = np.array([[0.0, 0.0, 1.0, 1.0, 0.5, 0.5, 1e-30, 1.0 - 2**-24, 0.25]], np.float32)
PROB_TARGETS = np.array([[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5]], np.float32)
BIN_TARGETS = np.array([[1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]], np.float32)
RESIDUALS = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 1e4], np.float32)
CE_LOGITS = np.array([[0.0, 0.0, 0.0], [1e4, 0.0, -1e4], [-INF, 0.0, 1.0], [2.0, 2.0, -1.0]], np.float32)
CE_TARGETS = np.array([1, 1, 2, 0], np.int64)
CE_PROBS = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5], [0.5, 0.5, 0.0]], np.float32)
COS_A = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [3.0, 4.0], [0.0, 0.0]], np.float32)
COS_B = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [-3.0, -4.0], [1.0, 1.0]], np.float32)
COS_T = np.array([1, -1, -1, 1, -1, 1], np.int64)
LOG_PRED = np.array([[-1.0, 0.0, -0.5, -30.0, 0.0, -2.0]], np.float32)
KL_TARGETS = np.array([[0.0, 1.0, 0.5, 0.0, 0.0, 1.0]], np.float32)
ZERO9 = np.zeros(9, np.float32)


def _bce(**fields):
    return lambda x, y: BinaryCrossEntropyLossConfig(**fields).init().forward_no_reduction(x, y)


def _residual_loss(module: Any) -> Callable:
    return lambda x, y: module.forward_no_reduction(x, y)


def _ce(reduction: Reduction = Reduction.AUTO, **fields):
    return lambda x, y: CrossEntropyLossConfig(**fields).init()(x, y, reduction)


def _ce_torch(**kwargs):
    def run(x, y):
        options = dict(kwargs)
        if "weight" in options:
            options["weight"] = _torch().tensor(options["weight"])
        return _tf().cross_entropy(x, y, **options).reshape(1)

    return run


LOSSES: dict[str, Case] = {
    "bce(logits)": Case(
        _bce(logits=True),
        lambda x, y: _tf().binary_cross_entropy_with_logits(x, y, reduction="none"),
        (LOGITS, BIN_TARGETS),
        covers=("BinaryCrossEntropyLoss",),
    ),
    "bce(logits,weights,smoothing)": Case(
        _bce(logits=True, weights=[1.0, 2.0, 0.0, 1.0, 0.5, 1.0, 1.0, 3.0, 1.0], smoothing=0.2),
        lambda x, y: _tf().binary_cross_entropy_with_logits(
            x, y * 0.8 + 0.1, weight=_torch().tensor([1.0, 2.0, 0.0, 1.0, 0.5, 1.0, 1.0, 3.0, 1.0]), reduction="none"
        ),
        (LOGITS, BIN_TARGETS),
    ),
    "bce(probabilities)": Case(
        _bce(), lambda x, y: _tf().binary_cross_entropy(x, y, reduction="none"), (PROBS, PROB_TARGETS)
    ),
    "mse": Case(
        _residual_loss(MseLoss()),
        lambda x, y: _tf().mse_loss(x, y, reduction="none"),
        (RESIDUALS, ZERO9),
        covers=("MseLoss",),
    ),
    "mse(mean, fused)": Case(
        lambda x, y: MseLoss()(x, y), lambda x, y: _tf().mse_loss(x, y).reshape(1), (RESIDUALS, ZERO9)
    ),
    "l1": Case(
        _residual_loss(L1Loss()),
        lambda x, y: _tf().l1_loss(x, y, reduction="none"),
        (RESIDUALS, ZERO9),
        covers=("L1Loss",),
    ),
    "huber": Case(
        _residual_loss(HuberLossConfig(1.0).init()),
        lambda x, y: _tf().huber_loss(x, y, reduction="none", delta=1.0),
        (RESIDUALS, ZERO9),
        covers=("HuberLoss",),
    ),
    "huber(delta=2)": Case(
        _residual_loss(HuberLossConfig(2.0).init()),
        lambda x, y: _tf().huber_loss(x, y, reduction="none", delta=2.0),
        (RESIDUALS, ZERO9),
    ),
    "smooth_l1": Case(
        _residual_loss(SmoothL1LossConfig().init()),
        lambda x, y: _tf().smooth_l1_loss(x, y, reduction="none", beta=1.0),
        (RESIDUALS, ZERO9),
        covers=("SmoothL1Loss",),
    ),
    "smooth_l1(beta=0)": Case(
        _residual_loss(SmoothL1LossConfig(beta=0.0).init()),
        lambda x, y: _tf().smooth_l1_loss(x, y, reduction="none", beta=0.0),
        (RESIDUALS, ZERO9),
    ),
    "cross_entropy": Case(_ce(), _ce_torch(), (CE_LOGITS, CE_TARGETS), covers=("CrossEntropyLoss",)),
    "nll(weights, pad)": Case(
        lambda x, y: NllLossConfig(weights=[1.0, 2.0, 0.5], pad_tokens=[0]).init()(x, y),
        lambda x, y: _tf().nll_loss(x, y, weight=_torch().tensor([1.0, 2.0, 0.5]), ignore_index=0).reshape(1),
        (CE_LOGITS, CE_TARGETS),
        covers=("NllLoss",),
    ),
    "cross_entropy(weights,smoothing,pad)": Case(
        _ce(weights=[1.0, 2.0, 0.5], smoothing=0.1, pad_tokens=[2]),
        _ce_torch(weight=[1.0, 2.0, 0.5], label_smoothing=0.1, ignore_index=2),
        (CE_LOGITS[[0, 1, 3]], CE_TARGETS[[0, 1, 3]]),
    ),
    "cross_entropy(sum, probability targets)": Case(
        _ce(Reduction.SUM), _ce_torch(reduction="sum"), (CE_LOGITS[[0, 1, 3]], CE_PROBS[[0, 1, 3]])
    ),
    "cross_entropy(probabilities)": Case(
        _ce(logits=False),
        lambda p, y: _tf().nll_loss(p.log(), y).reshape(1),
        (np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.5]], np.float32), np.array([0, 0, 2], np.int64)),
    ),
    "cosine_embedding": Case(
        lambda a, b, t: CosineEmbeddingLossConfig().init().forward_no_reduction(a, b, t),
        lambda a, b, t: _tf().cosine_embedding_loss(a, b, t, reduction="none"),
        (COS_A, COS_B, COS_T),
        grads=(0, 1),
        covers=("CosineEmbeddingLoss",),
    ),
    "cosine_embedding(margin=-0.5)": Case(
        lambda a, b, t: CosineEmbeddingLossConfig(margin=-0.5).init().forward_no_reduction(a, b, t),
        lambda a, b, t: _tf().cosine_embedding_loss(a, b, t, margin=-0.5, reduction="none"),
        (COS_A, COS_B, COS_T),
        grads=(0, 1),
    ),
    "kl_div": Case(
        lambda x, y: KLDivLossConfig().init().forward_no_reduction(x, y),
        lambda x, y: _tf().kl_div(x, y, reduction="none"),
        (LOG_PRED, KL_TARGETS),
        covers=("KLDivLoss",),
    ),
    "kl_div(log_target)": Case(
        lambda x, y: KLDivLossConfig(log_target=True).init().forward_no_reduction(x, y),
        lambda x, y: _tf().kl_div(x, y, reduction="none", log_target=True),
        (LOG_PRED, np.array([[-INF, 0.0, -0.5, -1.0, -30.0, -0.25]], np.float32)),
        grads=(0, 1),
    ),
}


# Tensor ops whose composites or rules divide by zero at an edge (PyTorch gives 0 there).
ZERO_ROWS = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0], [2.0, 2.0, 2.0]], np.float32)
BASES = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 0.5, 3.0], np.float32)
EXPONENTS = np.array([0.0, 1.0, 2.0, 0.5, 0.0, 0.5, -1.0], np.float32)
ATAN2_Y = np.array([0.0, 0.0, -0.0, 1.0, -1.0, INF, -INF, INF, 1.0, -1.0, 2.0], np.float32)
ATAN2_X = np.array([0.0, -0.0, -1.0, 0.0, 0.0, 1.0, 1.0, -INF, INF, -INF, 3.0], np.float32)
TENSOR_OPS: dict[str, Case] = {
    "norm(zero row)": Case(lambda x: x.norm(2.0, 1), lambda x: x.norm(2, 1, keepdim=True), (ZERO_ROWS,)),
    "norm(all zero)": Case(lambda x: x.norm(), lambda x: x.norm().reshape(1), (ZERO_ROWS[:1],)),
    "norm(p=3)": Case(lambda x: x.norm(3.0, 1), lambda x: x.norm(3, 1, keepdim=True), (ZERO_ROWS,)),
    "norm(p=1, inf)": Case(
        lambda x: x.norm(1.0, 1).add(x.norm(INF, 1)),
        lambda x: x.norm(1, 1, keepdim=True) + x.norm(INF, 1, keepdim=True),
        (ZERO_ROWS,),
    ),
    "std(constant row)": Case(lambda x: x.std(1), lambda x: x.std(1, keepdim=True), (ZERO_ROWS,)),
    "pow(tensor exponent)": Case(lambda x, y: x.pow(y), lambda x, y: x**y, (BASES, EXPONENTS), grads=(0, 1)),
    "pow(x, 0) and x ** 0": Case(
        lambda x: x.powf_scalar(0.0).add(x**0).add(x.powf(Tensor.zeros([7], device=x.device))),
        lambda x: x**0.0 + x**0 + x ** _torch().zeros(7),
        (BASES,),
    ),
    "rpow(0 ** x)": Case(lambda x: 0.0**x, lambda x: 0.0**x, (EXPONENTS[:6],)),
    "atan2": Case(lambda y, x: y.atan2(x), lambda y, x: y.atan2(x), (ATAN2_Y, ATAN2_X), grads=(0, 1)),
}

CASES = {**ACTIVATIONS, **LOSSES, **TENSOR_OPS}


def _weights(shape) -> np.ndarray:
    """A fixed weighting of the outputs (a plain sum has zero gradient through softmax)."""
    n = int(np.prod(shape))
    return (1.0 + np.arange(n, dtype=np.float32) / max(n, 1)).reshape(shape)


@pytest.mark.parametrize("name", list(CASES))
def test_value_and_gradient_match_torch(device, torch, name):
    case = CASES[name]
    ad = device.is_autodiff()
    inputs = [Tensor.from_data(a, device=device) for a in case.inputs]
    if ad:
        inputs = [t.require_grad() if i in case.grads else t for i, t in enumerate(inputs)]
    t_inputs = [
        torch.tensor(a, requires_grad=i in case.grads and a.dtype.kind == "f") for i, a in enumerate(case.inputs)
    ]
    out = case.ember(*inputs)
    ref = case.torch(*t_inputs)
    cube = device.backend_name == "cube"
    rtol = case.rtol * (10 if cube else 1)
    atol = rtol / 10
    assert_close(out, ref.detach().numpy(), rtol=rtol, atol=atol)
    if not ad:
        return
    w = _weights(tuple(ref.shape))
    grads = out.mul(Tensor.from_data(w, device=device)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for i in case.grads:
        g = inputs[i].grad(grads)
        assert g is not None, f"no gradient for input {i}"
        assert_close(g, t_inputs[i].grad.numpy(), rtol=rtol, atol=atol)


def _public_functions(module) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
    } | {name for name, value in vars(module).items() if name == "swish"}


def test_the_table_covers_everything():
    covered = {c for case in CASES.values() for c in case.covers}
    functions = _public_functions(A)
    modules = {
        f"nn.{name}"
        for name, value in vars(nn_act).items()
        if inspect.isclass(value) and issubclass(value, Module) and value.__module__ == nn_act.__name__
    }
    losses = {name for name in nn_loss.__all__ if name.endswith("Loss")}
    missing = (functions | modules | losses) - covered
    assert not missing, f"add rows for {sorted(missing)} to the kink table"

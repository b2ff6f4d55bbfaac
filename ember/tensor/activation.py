"""Activation functions, written once over the tensor ops.

``relu``, ``sigmoid``, ``gelu``, ``softmax`` and ``log_softmax`` are fused ops
(:mod:`ember.tensor.fused`): the device's kernel where it has one, else their composites
in :mod:`ember.backend.composites.activation`. Composites are
written to stay finite in both directions (no ``inf * 0`` in their gradients).

At kinks and bounds the gradients follow PyTorch's conventions (tests/nn/test_kinks.py
checks each against torch):

* piecewise functions with a branch for ``x > 0`` (relu, leaky_relu, prelu, elu,
  celu, selu) take the other branch's slope at 0: ``relu'(0) = 0``,
  ``leaky_relu'(0) = negative_slope``, ``elu'(0) = alpha``;
* the hard clamps (relu6, hard_tanh, hard_sigmoid, hard_swish) pass no gradient at
  their bounds, unlike ``Tensor.clamp``, which (as ``torch.clamp``) passes it;
* the smooth ones are exact there: ``softplus'(0) = log_sigmoid'(0) = 1/2``.

>>> from ember import Tensor
>>> from ember.tensor import activation
>>> activation.relu(Tensor.from_floats([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import math

from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor import autocast
from ember.tensor.checks import FLOAT_NP, INT_NP
from ember.tensor.fused import fused
from ember.tensor.ops.rank0 import rank0_as_vector
from ember.tensor.shape import normalize_dim
from ember.tensor.tensor import Tensor

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float(op: str, x: Tensor) -> Tensor:
    """``x`` itself when it is a float tensor (functions never mutate it), else cast."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: {op}: expected a Tensor, got {type(x).__name__}")
    return x if x._primitive.dtype in FLOAT_NP else x.float()


def _int(x: Tensor) -> bool:
    """Whether ``x`` is an int tensor, which the piecewise-linear activations (``relu``,
    ``relu6``, ``hard_tanh``, ``threshold``) keep int, as PyTorch (their bounds are
    truncated to ints, as PyTorch's)."""
    return isinstance(x, Tensor) and x._primitive.dtype in INT_NP


def _split(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(x where x > 0 else 0, x where x <= 0 else 0)``: they sum to ``x``, and each
    passes gradient only on its own side, 0 belonging to the negative side."""
    positive = x.greater_elem(0.0)
    return x.mask_fill(positive.bool_not(), 0.0), x.mask_fill(positive, 0.0)


def _hard_clamp(x: Tensor, low: float, high: float) -> Tensor:
    """``clamp(x, low, high)`` with no gradient at the bounds (PyTorch's hardtanh)."""
    if not x.is_require_grad():
        return x.clamp(low, high)
    low, high = float(low), float(high)
    return x.mask_fill(x.lower_equal_elem(low), low).mask_fill(x.greater_equal_elem(high), high)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0. Ints stay ints."""
    if not isinstance(x, Tensor) or x._primitive.dtype not in FLOAT_NP:
        if _int(x):
            return x.clamp(0, None)
        x = _float("relu", x)
    d = x._device
    return Tensor(fused(FusedOp.RELU, d, x._primitive), d)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere (also the slope at 0)."""
    x = _float("leaky_relu", x)
    return x.mul_scalar(negative_slope).mask_where(x.greater_elem(0.0), x)


def relu6(x: Tensor) -> Tensor:
    """``min(max(x, 0), 6)``; no gradient at 0 and 6. Ints stay ints."""
    if _int(x):
        return x.clamp(0, 6)
    return _hard_clamp(_float("relu6", x), 0.0, 6.0)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    x = _float("sigmoid", x)
    d = x._device
    return Tensor(fused(FusedOp.SIGMOID, d, x._primitive), d)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold`` (as
    PyTorch; ``threshold=math.inf`` never switches)."""
    x = _float("softplus", x)
    if autocast.ACTIVE:
        x = autocast.cast_input("softplus", x)
    if beta <= 0:
        raise ValueRangeError(f"ember: softplus: beta must be > 0, got {beta}")
    bx = x.mul_scalar(beta) if beta != 1.0 else x
    # max(bx, 0) + log(1 + exp(-|bx|)); `maximum` splits its gradient at the tie, so
    # the two halves add up to the exact derivative 1/2 at 0 (clamp_min would give 1).
    stable = bx.maximum(0.0).add(bx.abs().neg().exp().log1p())
    if beta != 1.0:
        stable = stable.div_scalar(beta)
    if math.isinf(threshold) and threshold > 0:
        return stable
    return stable.mask_where(bx.greater_elem(threshold), x)


def log_sigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed stably."""
    return softplus(_float("log_sigmoid", x).neg()).neg()


def tanh(x: Tensor) -> Tensor:
    return _float("tanh", x).tanh()


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    x = _float("silu", x)
    return x.mul(sigmoid(x))


swish = silu


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """The Gaussian error linear unit; ``approximate="tanh"`` for the tanh form."""
    x = _float("gelu", x)
    if approximate == "tanh":
        return gelu_tanh(x)
    if approximate != "none":
        raise ValueRangeError(f"ember: gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    d = x._device
    return Tensor(fused(FusedOp.GELU, d, x._primitive), d)


def gelu_tanh(x: Tensor) -> Tensor:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    x = _float("gelu_tanh", x)
    inner = x.add(x.mul(x).mul(x).mul_scalar(0.044715)).mul_scalar(_SQRT_2_OVER_PI)
    return x.mul(inner.tanh().add_scalar(1.0)).mul_scalar(0.5)


def mish(x: Tensor) -> Tensor:
    """``x * tanh(softplus(x))``."""
    x = _float("mish", x)
    return x.mul(softplus(x).tanh())


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere (``elu'(0) = alpha``)."""
    positive, negative = _split(_float("elu", x))
    return positive.add(negative.expm1().mul_scalar(alpha))


def selu(x: Tensor) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return elu(_float("selu", x), _SELU_ALPHA).mul_scalar(_SELU_SCALE)


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    x = _float("celu", x)
    if alpha == 0:
        raise ValueRangeError("ember: celu: alpha must not be 0")
    positive, negative = _split(x)
    return positive.add(negative.div_scalar(alpha).expm1().mul_scalar(alpha))


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """``clamp(alpha * x + beta, 0, 1)`` (Burn's and ONNX's form; PyTorch uses alpha=1/6);
    no gradient where it reaches 0 or 1."""
    return _hard_clamp(_float("hard_sigmoid", x).mul_scalar(alpha).add_scalar(beta), 0.0, 1.0)


def hard_swish(x: Tensor) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    x = _float("hard_swish", x)
    return x.mul(relu6(x.add_scalar(3.0))).div_scalar(6.0)


def hard_tanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """``clamp(x, min_val, max_val)``; no gradient at the bounds. Ints stay ints."""
    if _int(x):
        return x.clamp(int(min_val), int(max_val))
    return _hard_clamp(_float("hard_tanh", x), min_val, max_val)


def prelu(x: Tensor, alpha: Tensor) -> Tensor:
    """Leaky ReLU with a learned slope: ``alpha`` of shape ``[1]`` or ``[channels]``
    (channels at dim 1 of ``x``)."""
    x = _float("prelu", x)
    if autocast.ACTIVE:
        x, alpha = autocast.cast_inputs("prelu", x, alpha)
    if alpha.rank == 0:  # one slope, as PyTorch's
        alpha = alpha.reshape([1])
    if alpha.rank != 1:
        raise ShapeError(f"ember: prelu: alpha must have rank 0 or 1, got shape {alpha.dims()}")
    n = alpha.dims()[0]
    if n == 1 and x.rank < 1:
        alpha = alpha.reshape([])  # a 0-d input keeps its shape
    if n != 1:
        if x.rank < 2 or x.dims()[1] != n:
            raise ShapeError(
                f"ember: prelu: alpha has {n} channels but the input {x.dims()} has "
                f"{x.dims()[1] if x.rank >= 2 else 'no'} channels at dim 1"
            )
        alpha = alpha.reshape([n] + [1] * (x.rank - 2))
    positive, negative = _split(x)
    return positive.add(negative.mul(alpha))


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` where ``a, b`` are the halves of ``x`` along ``dim``."""
    x = _float("glu", x)
    dim = normalize_dim("glu", dim, x.rank)
    if x.dims()[dim] % 2:
        raise ShapeError(f"ember: glu: dim {dim} of shape {x.dims()} must have an even size")
    a, b = x.chunk(2, dim)
    return a.mul(sigmoid(b))


@rank0_as_vector("dim")
def softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably."""
    x = _float("softmax", x)
    if autocast.ACTIVE:
        x = autocast.cast_input("softmax", x)
    dim = normalize_dim("softmax", dim, x.rank)
    if x.num_elements() == 0:
        return x  # nothing to normalise (as PyTorch: an empty result, even over an empty dim)
    d = x._device
    return Tensor(fused(FusedOp.SOFTMAX, d, x._primitive, dim), d)


@rank0_as_vector("dim")
def log_softmax(x: Tensor, dim: int) -> Tensor:
    """``log(softmax(x))`` along ``dim``, computed stably."""
    x = _float("log_softmax", x)
    if autocast.ACTIVE:
        x = autocast.cast_input("log_softmax", x)
    dim = normalize_dim("log_softmax", dim, x.rank)
    if x.num_elements() == 0:
        return x
    d = x._device
    return Tensor(fused(FusedOp.LOG_SOFTMAX, d, x._primitive, dim), d)


def softmin(x: Tensor, dim: int) -> Tensor:
    """``softmax(-x)``."""
    return softmax(_float("softmin", x).neg(), dim)


@rank0_as_vector("dim")
def quiet_softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x) / (1 + sum(exp(x)))``: lets a row attend to nothing (Burn's ``quiet_softmax``)."""
    x = _float("quiet_softmax", x)
    dim = normalize_dim("quiet_softmax", dim, x.rank)
    if x.num_elements() == 0:
        return x
    peak = x.max_dim(dim).detach().clamp_min(0.0)
    e = x.sub(peak).exp()
    return e.div(e.sum_dim(dim).add(peak.neg().exp()))


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    x = _float("softsign", x)
    return x.div(x.abs().add_scalar(1.0))


def tanhshrink(x: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    x = _float("tanhshrink", x)
    return x.sub(x.tanh())


def threshold(x: Tensor, threshold: float, value: float) -> Tensor:
    """``x`` where ``x > threshold``, else ``value`` (``torch.nn.functional.threshold``).
    Ints stay ints."""
    if _int(x):
        return x.mask_fill(x.lower_equal_elem(int(threshold)), int(value))
    x = _float("threshold", x)
    return x.mask_fill(x.lower_equal_elem(threshold), value)


def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where ``x > alpha``, else 0 (ONNX's ``ThresholdedRelu``)."""
    return threshold(_float("thresholded_relu", x), alpha, 0.0)


def quick_gelu(x: Tensor) -> Tensor:
    """``x * sigmoid(1.702 x)``, the sigmoid approximation of GELU (CLIP's)."""
    x = _float("quick_gelu", x)
    return x.mul(sigmoid(x.mul_scalar(1.702)))


def hard_shrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    x = _float("hard_shrink", x)
    return x.mask_fill(x.abs().lower_equal_elem(lambd), 0.0)


def soft_shrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` moved toward 0 by ``lambd``, 0 inside ``[-lambd, lambd]``."""
    x = _float("soft_shrink", x)
    if lambd < 0:
        raise ValueRangeError(f"ember: soft_shrink: lambd must be >= 0, got {lambd}")
    return x.sub(x.clamp(-lambd, lambd))

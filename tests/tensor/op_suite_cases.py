"""The cases of the PyTorch-style op suite (``test_op_suite.py``), in the manner of
tinygrad's ``test_ops``: each case names its inputs, ember's call and PyTorch's, and
whether gradients are compared; a case ember cannot run yet is listed with
:func:`unsupported` and a reason, so the suite measures how much of PyTorch's op
surface ember covers.

Shapes follow each library's convention and the lambdas adapt them (ember's full
reductions give ``[1]``, PyTorch's ``[]``; Burn-named ``*_dim`` reductions keep the
dim).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ember.nn.functional as F
from ember import Tensor, linalg
from ember.nn import loss as L
from ember.nn.loss import Reduction
from ember.tensor import activation as A
from ember.tensor import layer_ops as M

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover - the suite skips (or fails under EMBER_REQUIRE_TORCH) first
    torch = TF = None


@dataclass(frozen=True)
class Case:
    name: str
    inputs: tuple = ()
    ours: Any = None
    theirs: Any = None
    grad: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5
    unsupported: str | None = None
    exact: bool = False
    extra: dict = field(default_factory=dict)


def f(*shape: int, lo: float = -2.0, hi: float = 2.0) -> tuple:
    """A float32 input drawn uniformly from ``[lo, hi)``."""
    return ("f", shape, lo, hi)


def i(*shape: int, lo: int = 0, hi: int = 5) -> tuple:
    """An int64 input drawn from ``[lo, hi)``."""
    return ("i", shape, lo, hi)


def b(*shape: int) -> tuple:
    """A bool input."""
    return ("b", shape)


def c(array: Any, dtype: Any = None) -> tuple:
    """A fixed input."""
    return ("c", np.asarray(array, dtype=dtype))


def case(name: str, inputs: list, ours: Any, theirs: Any, **options: Any) -> Case:
    return Case(name, tuple(inputs), ours, theirs, **options)


def unsupported(name: str, reason: str) -> Case:
    return Case(name, unsupported=reason)


def _special() -> Any:
    import ember.special

    return ember.special


def _pool3d() -> Any:
    import ember.tensor.pool3d

    return ember.tensor.pool3d


def _one(t: Any) -> Any:
    """A PyTorch scalar result in ember's full-reduction shape ``[1]``."""
    return t.reshape(1)


INF, NAN = float("inf"), float("nan")
EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, INF, -INF, NAN, 1e-30, -1e30]

# ---------------------------------------------------------------------------------- creation
CREATION = [
    case("zeros", [f(1)], lambda x: Tensor.zeros([2, 3], device=x.device), lambda x: torch.zeros(2, 3), grad=False),
    case("ones", [f(1)], lambda x: Tensor.ones([4], device=x.device), lambda x: torch.ones(4), grad=False),
    case(
        "full",
        [f(1)],
        lambda x: Tensor.full([2, 2], 3.5, device=x.device),
        lambda x: torch.full((2, 2), 3.5),
        grad=False,
    ),
    case("full_int", [f(1)], lambda x: Tensor.full([3], 7, device=x.device), lambda x: torch.full((3,), 7), grad=False),
    case("zeros_like", [f(2, 3)], lambda x: x.zeros_like(), lambda x: torch.zeros_like(x), grad=False),
    case("ones_like", [f(2, 3)], lambda x: x.ones_like(), lambda x: torch.ones_like(x), grad=False),
    case("full_like", [f(2, 3)], lambda x: x.full_like(-1.0), lambda x: torch.full_like(x, -1.0), grad=False),
    case("eye", [f(1)], lambda x: Tensor.eye(4, device=x.device), lambda x: torch.eye(4), grad=False),
    case("eye_rect", [f(1)], lambda x: Tensor.eye(2, 5, device=x.device), lambda x: torch.eye(2, 5), grad=False),
    case("arange", [f(1)], lambda x: Tensor.arange(10, device=x.device), lambda x: torch.arange(10), grad=False),
    case(
        "arange_start_step",
        [f(1)],
        lambda x: Tensor.arange(3, 20, 4, device=x.device),
        lambda x: torch.arange(3, 20, 4),
        grad=False,
    ),
    case(
        "arange_negative_step",
        [f(1)],
        lambda x: Tensor.arange(5, -5, -3, device=x.device),
        lambda x: torch.arange(5, -5, -3),
        grad=False,
    ),
    case(
        "arange_float",
        [f(1)],
        lambda x: Tensor.arange(0.0, 1.0, 0.125, device=x.device),
        lambda x: torch.arange(0.0, 1.0, 0.125),
        grad=False,
    ),
    case(
        "arange_float_step",
        [f(1)],
        lambda x: Tensor.arange(-1.5, 2.0, 0.5, device=x.device),
        lambda x: torch.arange(-1.5, 2.0, 0.5),
        grad=False,
    ),
    case(
        "linspace",
        [f(1)],
        lambda x: Tensor.linspace(0, 1, 5, device=x.device),
        lambda x: torch.linspace(0, 1, 5),
        grad=False,
    ),
    case(
        "linspace_negative",
        [f(1)],
        lambda x: Tensor.linspace(3, -2, 11, device=x.device),
        lambda x: torch.linspace(3, -2, 11),
        grad=False,
    ),
    case(
        "linspace_one",
        [f(1)],
        lambda x: Tensor.linspace(2, 9, 1, device=x.device),
        lambda x: torch.linspace(2, 9, 1),
        grad=False,
    ),
    case(
        "meshgrid_ij",
        [f(3), f(4)],
        lambda x, y: Tensor.meshgrid(x, y, indexing="ij"),
        lambda x, y: torch.meshgrid(x, y, indexing="ij"),
    ),
    case(
        "meshgrid_xy",
        [f(3), f(4)],
        lambda x, y: Tensor.meshgrid(x, y, indexing="xy"),
        lambda x, y: torch.meshgrid(x, y, indexing="xy"),
    ),
    case(
        "tril_ones",
        [f(1)],
        lambda x: Tensor.ones([3, 4], device=x.device).tril(),
        lambda x: torch.ones(3, 4).tril(),
        grad=False,
    ),
    case(
        "triu_ones",
        [f(1)],
        lambda x: Tensor.ones([4, 3], device=x.device).triu(1),
        lambda x: torch.ones(4, 3).triu(1),
        grad=False,
    ),
    case("one_hot", [i(5, hi=4)], lambda x: x.one_hot(4), lambda x: TF.one_hot(x, 4), grad=False),
    case(
        "from_data_nested",
        [f(1)],
        lambda x: Tensor.from_data([[1, 2], [3, 4]], device=x.device),
        lambda x: torch.tensor([[1, 2], [3, 4]]),
        grad=False,
    ),
    case(
        "empty_shape", [f(1)], lambda x: Tensor.zeros([0, 3], device=x.device), lambda x: torch.zeros(0, 3), grad=False
    ),
    unsupported("tensor_complex", "complex dtypes are not supported"),
]

# ---------------------------------------------------------------------------------- unary math
_U = [
    ("neg", lambda x: x.neg(), lambda x: x.neg(), -2, 2),
    ("abs", lambda x: x.abs(), lambda x: x.abs(), -2, 2),
    ("exp", lambda x: x.exp(), lambda x: x.exp(), -3, 3),
    ("exp2", lambda x: x.exp2(), lambda x: x.exp2(), -4, 4),
    ("expm1", lambda x: x.expm1(), lambda x: x.expm1(), -2, 2),
    ("log", lambda x: x.log(), lambda x: x.log(), 0.1, 5),
    ("log2", lambda x: x.log2(), lambda x: x.log2(), 0.1, 9),
    ("log10", lambda x: x.log10(), lambda x: x.log10(), 0.1, 200),
    ("log1p", lambda x: x.log1p(), lambda x: x.log1p(), -0.5, 3),
    ("sqrt", lambda x: x.sqrt(), lambda x: x.sqrt(), 0.1, 5),
    ("rsqrt", lambda x: x.rsqrt(), lambda x: x.rsqrt(), 0.2, 5),
    ("reciprocal", lambda x: x.recip(), lambda x: x.reciprocal(), 0.5, 3),
    ("square", lambda x: x.square(), lambda x: x.square(), -2, 2),
    ("sin", lambda x: x.sin(), lambda x: x.sin(), -3, 3),
    ("cos", lambda x: x.cos(), lambda x: x.cos(), -3, 3),
    ("tan", lambda x: x.tan(), lambda x: x.tan(), -1.2, 1.2),
    ("asin", lambda x: x.asin(), lambda x: x.asin(), -0.9, 0.9),
    ("acos", lambda x: x.acos(), lambda x: x.acos(), -0.9, 0.9),
    ("atan", lambda x: x.atan(), lambda x: x.atan(), -3, 3),
    ("sinh", lambda x: x.sinh(), lambda x: x.sinh(), -2, 2),
    ("cosh", lambda x: x.cosh(), lambda x: x.cosh(), -2, 2),
    ("tanh", lambda x: x.tanh(), lambda x: x.tanh(), -3, 3),
    ("asinh", lambda x: x.asinh(), lambda x: x.asinh(), -4, 4),
    ("acosh", lambda x: x.acosh(), lambda x: x.acosh(), 1.1, 6),
    ("atanh", lambda x: x.atanh(), lambda x: x.atanh(), -0.9, 0.9),
    ("erf", lambda x: x.erf(), lambda x: x.erf(), -2.5, 2.5),
    ("sigmoid", lambda x: A.sigmoid(x), lambda x: x.sigmoid(), -5, 5),
    ("logit", lambda x: x.logit(), lambda x: x.logit(), 0.05, 0.95),
    ("logit_eps", lambda x: x.logit(0.1), lambda x: x.logit(0.1), 0.0, 1.0),
    ("deg2rad", lambda x: x.deg2rad(), lambda x: x.deg2rad(), -360, 360),
    ("rad2deg", lambda x: x.rad2deg(), lambda x: x.rad2deg(), -4, 4),
    ("sinc", lambda x: x.sinc(), lambda x: x.sinc(), -3, 3),
    ("frac", lambda x: x.frac(), lambda x: x.frac(), -5, 5),
    ("positive", lambda x: +x, lambda x: +x, -2, 2),
]
UNARY = [case(n, [f(3, 4, lo=lo, hi=hi)], ours, theirs, rtol=2e-4, atol=2e-5) for n, ours, theirs, lo, hi in _U] + [
    case("sign", [f(3, 4)], lambda x: x.sign(), lambda x: x.sign(), grad=False),
    case("floor", [f(3, 4, lo=-5, hi=5)], lambda x: x.floor(), lambda x: x.floor()),
    case("ceil", [f(3, 4, lo=-5, hi=5)], lambda x: x.ceil(), lambda x: x.ceil()),
    case("round", [f(3, 4, lo=-5, hi=5)], lambda x: x.round(), lambda x: x.round()),
    case(
        "round_half_even",
        [c([0.5, 1.5, 2.5, -0.5, -1.5], np.float32)],
        lambda x: x.round(),
        lambda x: x.round(),
        grad=False,
    ),
    case("trunc", [f(3, 4, lo=-5, hi=5)], lambda x: x.trunc(), lambda x: x.trunc()),
    case("isnan", [c(EDGE, np.float32)], lambda x: x.is_nan(), lambda x: x.isnan(), grad=False),
    case("isinf", [c(EDGE, np.float32)], lambda x: x.is_inf(), lambda x: x.isinf(), grad=False),
    case("isfinite", [c(EDGE, np.float32)], lambda x: x.is_finite(), lambda x: x.isfinite(), grad=False),
    case("nan_to_num", [c(EDGE, np.float32)], lambda x: x.nan_to_num(), lambda x: x.nan_to_num(), grad=False),
    case(
        "nan_to_num_values",
        [c(EDGE, np.float32)],
        lambda x: x.nan_to_num(1.0, 9.0, -9.0),
        lambda x: x.nan_to_num(1.0, 9.0, -9.0),
        grad=False,
    ),
    case("clamp", [f(3, 4)], lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7)),
    case("clamp_min", [f(3, 4)], lambda x: x.clamp_min(0.1), lambda x: x.clamp_min(0.1)),
    case("clamp_max", [f(3, 4)], lambda x: x.clamp_max(0.1), lambda x: x.clamp_max(0.1)),
    case("clip_alias", [f(3, 4)], lambda x: x.clamp(min=-1.0), lambda x: x.clip(min=-1.0)),
    case("exp_edges", [c(EDGE, np.float32)], lambda x: x.exp(), lambda x: x.exp(), grad=False),
    case("log_edges", [c(EDGE, np.float32)], lambda x: x.log(), lambda x: x.log(), grad=False),
    case(
        "log2_powers",
        [c([1, 2, 8, 1024, 0.25, 2.0**-20], np.float32)],
        lambda x: x.log2(),
        lambda x: x.log2(),
        grad=False,
        exact=True,
    ),
    case(
        "log10_powers",
        [c([1, 10, 100, 1000, 1e5, 1e-3], np.float32)],
        lambda x: x.log10(),
        lambda x: x.log10(),
        grad=False,
        exact=True,
    ),
    case("sqrt_edges", [c(EDGE, np.float32)], lambda x: x.sqrt(), lambda x: x.sqrt(), grad=False),
    case("asinh_edges", [c(EDGE, np.float32)], lambda x: x.asinh(), lambda x: x.asinh(), grad=False),
    case("acosh_edges", [c(EDGE, np.float32)], lambda x: x.acosh(), lambda x: x.acosh(), grad=False),
    case("atanh_edges", [c(EDGE, np.float32)], lambda x: x.atanh(), lambda x: x.atanh(), grad=False),
    case(
        "asin_outside", [c([-2.0, -1.0, 1.0, 1.5, NAN], np.float32)], lambda x: x.asin(), lambda x: x.asin(), grad=False
    ),
    case(
        "acos_outside", [c([-2.0, -1.0, 1.0, 1.5, NAN], np.float32)], lambda x: x.acos(), lambda x: x.acos(), grad=False
    ),
    case(
        "sign_zeros_nan",
        [c([0.0, -0.0, 2.0, -3.0, NAN], np.float32)],
        lambda x: x.sign(),
        lambda x: x.sign(),
        grad=False,
        exact=True,
    ),
    case(
        "tanh_large", [c([-100.0, -20.0, 20.0, 100.0], np.float32)], lambda x: x.tanh(), lambda x: x.tanh(), grad=False
    ),
    case("abs_int", [i(3, 4, lo=-5, hi=5)], lambda x: x.abs(), lambda x: x.abs(), grad=False),
    case("neg_int", [i(3, 4, lo=-5, hi=5)], lambda x: x.neg(), lambda x: x.neg(), grad=False),
    case("sqrt_int", [i(3, 4, lo=0, hi=9)], lambda x: x.sqrt(), lambda x: x.sqrt(), grad=False),
    case("logical_not", [b(3, 4)], lambda x: x.bool_not(), lambda x: x.logical_not(), grad=False),
    case("bitwise_not", [i(3, 4, lo=-9, hi=9)], lambda x: x.bitwise_not(), lambda x: x.bitwise_not(), grad=False),
    case("lgamma", [f(3, 4, lo=-3.5, hi=6)], lambda x: x.lgamma(), lambda x: x.lgamma()),
    case("digamma", [f(3, 4, lo=0.3, hi=6)], lambda x: x.digamma(), lambda x: x.digamma()),
    case("erfinv", [f(3, 4, lo=-0.95, hi=0.95)], lambda x: x.erfinv(), lambda x: x.erfinv()),
    case("erfc", [f(3, 4, lo=-2, hi=6)], lambda x: _special().erfc(x), lambda x: torch.special.erfc(x), rtol=1e-3),
    case("i0", [f(3, 4, lo=-6, hi=6)], lambda x: x.i0(), lambda x: x.i0()),
]

# ---------------------------------------------------------------------------------- binary math
_B = [
    ("add", lambda x, y: x + y, lambda x, y: x + y, (3, 4), (3, 4)),
    ("sub", lambda x, y: x - y, lambda x, y: x - y, (3, 4), (3, 4)),
    ("mul", lambda x, y: x * y, lambda x, y: x * y, (3, 4), (3, 4)),
    ("div", lambda x, y: x / y.abs().add_scalar(0.5), lambda x, y: x / (y.abs() + 0.5), (3, 4), (3, 4)),
    ("add_broadcast_row", lambda x, y: x + y, lambda x, y: x + y, (3, 4), (4,)),
    ("mul_broadcast_col", lambda x, y: x * y, lambda x, y: x * y, (3, 4), (3, 1)),
    ("sub_broadcast_both", lambda x, y: x - y, lambda x, y: x - y, (2, 1, 4), (3, 1)),
    (
        "div_broadcast_scalar_tensor",
        lambda x, y: x / y.abs().add_scalar(1.0),
        lambda x, y: x / (y.abs() + 1.0),
        (2, 3),
        (),
    ),
    ("maximum", lambda x, y: x.maximum(y), lambda x, y: x.maximum(y), (3, 4), (3, 4)),
    ("minimum", lambda x, y: x.minimum(y), lambda x, y: x.minimum(y), (3, 4), (4,)),
    ("atan2", lambda x, y: x.atan2(y), lambda x, y: x.atan2(y), (3, 4), (3, 4)),
    ("hypot", lambda x, y: x.hypot(y), lambda x, y: x.hypot(y), (3, 4), (3, 4)),
    ("copysign", lambda x, y: x.copysign(y), lambda x, y: x.copysign(y), (3, 4), (3, 4)),
    ("logaddexp", lambda x, y: x.logaddexp(y), lambda x, y: x.logaddexp(y), (3, 4), (3, 4)),
    ("logaddexp2", lambda x, y: x.logaddexp2(y), lambda x, y: x.logaddexp2(y), (3, 4), (4,)),
    ("lerp_tensor_weight", lambda x, y: x.lerp(y, A.sigmoid(y)), lambda x, y: x.lerp(y, y.sigmoid()), (3, 4), (3, 4)),
    ("pow_tensor", lambda x, y: x.abs().add_scalar(0.5).pow(y), lambda x, y: (x.abs() + 0.5).pow(y), (3, 4), (3, 4)),
    ("xlogy", lambda x, y: x.xlogy(y.abs().add_scalar(0.1)), lambda x, y: x.xlogy(y.abs() + 0.1), (3, 4), (3, 4)),
    (
        "fmod",
        lambda x, y: (x * 3).fmod(y.abs().add_scalar(0.5)),
        lambda x, y: (x * 3).fmod(y.abs() + 0.5),
        (3, 4),
        (3, 4),
    ),
    (
        "remainder",
        lambda x, y: (x * 3).remainder(y.abs().add_scalar(0.5)),
        lambda x, y: (x * 3).remainder(y.abs() + 0.5),
        (3, 4),
        (3, 4),
    ),
]
BINARY = [case(n, [f(*sa), f(*sb)], ours, theirs) for n, ours, theirs, sa, sb in _B] + [
    case("add_scalar", [f(3, 4)], lambda x: x + 2.5, lambda x: x + 2.5),
    case("radd_scalar", [f(3, 4)], lambda x: 2.5 + x, lambda x: 2.5 + x),
    case("rsub_scalar", [f(3, 4)], lambda x: 1.0 - x, lambda x: 1.0 - x),
    case("mul_scalar", [f(3, 4)], lambda x: x * -3.0, lambda x: x * -3.0),
    case("div_scalar", [f(3, 4)], lambda x: x / 4.0, lambda x: x / 4.0),
    case("rdiv_scalar", [f(3, 4, lo=0.5, hi=2)], lambda x: 2.0 / x, lambda x: 2.0 / x),
    case("pow_scalar", [f(3, 4, lo=0.1, hi=2)], lambda x: x**1.7, lambda x: x**1.7),
    case("pow_int_scalar", [f(3, 4)], lambda x: x**3, lambda x: x**3),
    case("pow_square", [f(3, 4)], lambda x: x**2, lambda x: x**2),
    case("pow_negative_scalar", [f(3, 4, lo=0.5, hi=2)], lambda x: x**-1.5, lambda x: x**-1.5),
    case("rpow", [f(3, 4)], lambda x: 2.0**x, lambda x: 2.0**x),
    case(
        "pow_edges", [c([0.0, -0.0, -INF, INF, -2.0, NAN], np.float32)], lambda x: x**0.3, lambda x: x**0.3, grad=False
    ),
    case("pow_edges_odd", [c([0.0, -INF, INF, -2.0], np.float32)], lambda x: x**3.0, lambda x: x**3.0, grad=False),
    case("lerp_scalar_weight", [f(3, 4), f(3, 4)], lambda x, y: x.lerp(y, 0.3), lambda x, y: x.lerp(y, 0.3)),
    case("lerp_weight_high", [f(3, 4), f(3, 4)], lambda x, y: x.lerp(y, 0.8), lambda x, y: x.lerp(y, 0.8)),
    case("fmod_scalar", [f(3, 4, lo=-5, hi=5)], lambda x: x.fmod(1.5), lambda x: x.fmod(1.5)),
    case("remainder_scalar", [f(3, 4, lo=-5, hi=5)], lambda x: x % 1.5, lambda x: x % 1.5),
    case(
        "floor_divide",
        [f(3, 4, lo=-5, hi=5), f(3, 4, lo=0.5, hi=2)],
        lambda x, y: x // y,
        lambda x, y: x // y,
        grad=False,
    ),
    case(
        "div_trunc",
        [f(3, 4, lo=-5, hi=5), f(3, 4, lo=0.5, hi=2)],
        lambda x, y: x.div(y, rounding_mode="trunc"),
        lambda x, y: x.div(y, rounding_mode="trunc"),
        grad=False,
    ),
    case(
        "div_floor",
        [f(3, 4, lo=-5, hi=5), f(3, 4, lo=0.5, hi=2)],
        lambda x, y: x.div(y, rounding_mode="floor"),
        lambda x, y: x.div(y, rounding_mode="floor"),
        grad=False,
    ),
    case(
        "div_trunc_int",
        [i(4, 5, lo=-20, hi=20), i(4, 5, lo=1, hi=6)],
        lambda x, y: x.div(y, rounding_mode="trunc"),
        lambda x, y: x.div(y, rounding_mode="trunc"),
        grad=False,
    ),
    case(
        "div_floor_int",
        [i(4, 5, lo=-20, hi=20), i(4, 5, lo=1, hi=6)],
        lambda x, y: x.div(y, rounding_mode="floor"),
        lambda x, y: x.div(y, rounding_mode="floor"),
        grad=False,
    ),
    case(
        "div_trunc_int_negative_divisor",
        [i(4, 5, lo=-20, hi=20)],
        lambda x: x.div(-3, rounding_mode="trunc"),
        lambda x: x.div(-3, rounding_mode="trunc"),
        grad=False,
    ),
    case(
        "fmod_int",
        [i(4, 5, lo=-20, hi=20), i(4, 5, lo=1, hi=6)],
        lambda x, y: x.fmod(y),
        lambda x, y: x.fmod(y),
        grad=False,
    ),
    case(
        "remainder_int",
        [i(4, 5, lo=-20, hi=20), i(4, 5, lo=1, hi=6)],
        lambda x, y: x % y,
        lambda x, y: x % y,
        grad=False,
    ),
    case("add_int", [i(3, 4, lo=-9, hi=9), i(3, 4, lo=-9, hi=9)], lambda x, y: x + y, lambda x, y: x + y, grad=False),
    case("mul_int", [i(3, 4, lo=-9, hi=9), i(3, 4, lo=-9, hi=9)], lambda x, y: x * y, lambda x, y: x * y, grad=False),
    case("pow_int", [i(3, 4, lo=-3, hi=4), i(3, 4, lo=0, hi=4)], lambda x, y: x**y, lambda x, y: x**y, grad=False),
    case("int_plus_float", [i(3, 4), f(3, 4)], lambda x, y: x + y, lambda x, y: x + y, grad=False),
    case("int_times_float_scalar", [i(3, 4)], lambda x: x * 0.5, lambda x: x * 0.5, grad=False),
    case("bool_plus_int", [b(3, 4), i(3, 4)], lambda x, y: x + y, lambda x, y: x + y, grad=False),
    case(
        "hypot_edges",
        [c([INF, 0.0, 3e30, NAN, -INF], np.float32), c([NAN, 0.0, 4e30, 1.0, 2.0], np.float32)],
        lambda x, y: x.hypot(y),
        lambda x, y: x.hypot(y),
        grad=False,
    ),
    case(
        "copysign_zeros",
        [c([1.0, 2.0, -3.0, 0.0], np.float32), c([-0.0, 0.0, INF, -1.0], np.float32)],
        lambda x, y: x.copysign(y),
        lambda x, y: x.copysign(y),
        grad=False,
        exact=True,
    ),
    case(
        "logaddexp_infinities",
        [c([-INF, INF, 2.0, -INF], np.float32), c([-INF, INF, -INF, 3.0], np.float32)],
        lambda x, y: x.logaddexp(y),
        lambda x, y: x.logaddexp(y),
        grad=False,
    ),
    case(
        "fmod_edges",
        [c([-0.0, 5.0, -5.0, INF, 3.0], np.float32), c([1.0, INF, 2.0, 1.0, 0.0], np.float32)],
        lambda x, y: x.fmod(y),
        lambda x, y: x.fmod(y),
        grad=False,
    ),
    case(
        "xlogy_zeros",
        [c([0.0, 0.0, 2.0, 0.0], np.float32), c([0.0, NAN, 3.0, 5.0], np.float32)],
        lambda x, y: x.xlogy(y),
        lambda x, y: x.xlogy(y),
        grad=False,
    ),
    case(
        "maximum_nan",
        [c([NAN, 1.0, 2.0], np.float32), c([0.0, NAN, 1.0], np.float32)],
        lambda x, y: x.maximum(y),
        lambda x, y: x.maximum(y),
        grad=False,
    ),
    case(
        "fmax",
        [c([NAN, 1.0, 2.0, NAN], np.float32), c([0.0, NAN, 3.0, NAN], np.float32)],
        lambda x, y: x.fmax(y),
        lambda x, y: x.fmax(y),
        grad=False,
    ),
    case("fmin", [f(3, 4), f(3, 4)], lambda x, y: x.fmin(y), lambda x, y: x.fmin(y)),
    case("ldexp", [f(3, 4), i(3, 4, lo=0, hi=4)], lambda x, e: x.ldexp(e), lambda x, e: x.ldexp(e)),
    unsupported("gcd", "no gcd/lcm yet"),
]

# ---------------------------------------------------------------------------------- comparisons and logic
_C = [
    ("eq", lambda x, y: x == y, lambda x, y: x == y),
    ("ne", lambda x, y: x != y, lambda x, y: x != y),
    ("lt", lambda x, y: x < y, lambda x, y: x < y),
    ("le", lambda x, y: x <= y, lambda x, y: x <= y),
    ("gt", lambda x, y: x > y, lambda x, y: x > y),
    ("ge", lambda x, y: x >= y, lambda x, y: x >= y),
]
COMPARE = (
    [case(n, [i(3, 4), i(3, 4)], ours, theirs, grad=False) for n, ours, theirs in _C]
    + [case(n + "_float_broadcast", [f(3, 4), f(4)], ours, theirs, grad=False) for n, ours, theirs in _C]
    + [
        case("eq_scalar", [i(3, 4)], lambda x: x == 2, lambda x: x == 2, grad=False),
        case("gt_scalar_float", [f(3, 4)], lambda x: x > 0.25, lambda x: x > 0.25, grad=False),
        case("logical_and", [b(3, 4), b(3, 4)], lambda x, y: x & y, lambda x, y: x & y, grad=False),
        case("logical_or", [b(3, 4), b(3, 4)], lambda x, y: x | y, lambda x, y: x | y, grad=False),
        case("logical_xor", [b(3, 4), b(3, 4)], lambda x, y: x ^ y, lambda x, y: x ^ y, grad=False),
        case("bitwise_and", [i(3, 4, hi=64), i(3, 4, hi=64)], lambda x, y: x & y, lambda x, y: x & y, grad=False),
        case("bitwise_or", [i(3, 4, hi=64), i(3, 4, hi=64)], lambda x, y: x | y, lambda x, y: x | y, grad=False),
        case("bitwise_xor", [i(3, 4, hi=64), i(3, 4, hi=64)], lambda x, y: x ^ y, lambda x, y: x ^ y, grad=False),
        case("left_shift", [i(3, 4, hi=64), i(3, 4, hi=5)], lambda x, y: x << y, lambda x, y: x << y, grad=False),
        case("right_shift", [i(3, 4, hi=64), i(3, 4, hi=5)], lambda x, y: x >> y, lambda x, y: x >> y, grad=False),
        case(
            "isclose",
            [c([1.0, 1.0, INF, INF, NAN, 0.0], np.float32), c([1.0 + 1e-6, 1.1, INF, -INF, NAN, 1e-9], np.float32)],
            lambda x, y: x.is_close(y),
            lambda x, y: x.isclose(y),
            grad=False,
        ),
        case(
            "isclose_equal_nan",
            [c([NAN, 1.0], np.float32), c([NAN, 2.0], np.float32)],
            lambda x, y: x.is_close(y, equal_nan=True),
            lambda x, y: x.isclose(y, equal_nan=True),
            grad=False,
        ),
        case(
            "isclose_tolerances",
            [f(3, 4), f(3, 4)],
            lambda x, y: x.is_close(y, rtol=0.5, atol=0.5),
            lambda x, y: x.isclose(y, rtol=0.5, atol=0.5),
            grad=False,
        ),
        case(
            "allclose_infinities",
            [c([INF, -INF, 1.0], np.float32)],
            lambda x: Tensor.from_data([float(x.all_close(x))]),
            lambda x: torch.tensor([float(x.allclose(x))]),
            grad=False,
        ),
        case(
            "contains_nan",
            [c([1.0, NAN], np.float32)],
            lambda x: x.contains_nan(),
            lambda x: x.isnan().any().reshape(1),
            grad=False,
        ),
        case(
            "where",
            [b(3, 4), f(3, 4), f(3, 4)],
            lambda m, x, y: x.mask_where(m.bool_not(), y),
            lambda m, x, y: torch.where(m, x, y),
        ),
        case("where_scalar", [b(3, 4), f(3, 4)], lambda m, x: x.where(m, 0.0), lambda m, x: torch.where(m, x, 0.0)),
        case(
            "where_broadcast",
            [b(4), f(3, 4), f(3, 1)],
            lambda m, x, y: x.where(m, y.expand([3, 4])),
            lambda m, x, y: torch.where(m, x, y),
        ),
        case("maximum_bool", [b(3, 4), b(3, 4)], lambda x, y: x.maximum(y), lambda x, y: x.maximum(y), grad=False),
        case("minimum_bool", [b(3, 4), b(3, 4)], lambda x, y: x.minimum(y), lambda x, y: x.minimum(y), grad=False),
        case("max_bool", [b(3, 4)], lambda x: x.max(), lambda x: _one(x.max()), grad=False),
        case("min_bool", [b(3, 4)], lambda x: x.min(), lambda x: _one(x.min()), grad=False),
        case(
            "equal_all",
            [i(3, 4)],
            lambda x: Tensor.from_data([x.equal_all(x)]),
            lambda x: torch.tensor([torch.equal(x, x)]),
            grad=False,
        ),
    ]
)

# ---------------------------------------------------------------------------------- activations
_ACT = [
    ("relu", A.relu, TF.relu if TF else None),
    ("relu6", A.relu6, TF.relu6 if TF else None),
    ("leaky_relu", lambda x: A.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1)),
    ("elu", A.elu, TF.elu if TF else None),
    ("elu_alpha", lambda x: A.elu(x, 0.5), lambda x: TF.elu(x, 0.5)),
    ("celu", lambda x: A.celu(x, 1.5), lambda x: TF.celu(x, 1.5)),
    ("selu", A.selu, TF.selu if TF else None),
    ("gelu", A.gelu, TF.gelu if TF else None),
    ("gelu_tanh", lambda x: A.gelu(x, "tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    ("quick_gelu", A.quick_gelu, lambda x: x * torch.sigmoid(1.702 * x)),
    ("silu", A.silu, TF.silu if TF else None),
    ("mish", A.mish, TF.mish if TF else None),
    ("softplus", A.softplus, TF.softplus if TF else None),
    ("softplus_beta", lambda x: A.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    ("softsign", A.softsign, TF.softsign if TF else None),
    ("tanhshrink", A.tanhshrink, TF.tanhshrink if TF else None),
    ("hardtanh", A.hard_tanh, TF.hardtanh if TF else None),
    ("hardswish", A.hard_swish, TF.hardswish if TF else None),
    ("hardsigmoid_torch", lambda x: A.hard_sigmoid(x, 1.0 / 6.0, 0.5), TF.hardsigmoid if TF else None),
    ("logsigmoid", A.log_sigmoid, TF.logsigmoid if TF else None),
    ("sigmoid_fn", A.sigmoid, torch.sigmoid if torch else None),
    ("tanh_fn", A.tanh, torch.tanh if torch else None),
    ("threshold", lambda x: A.threshold(x, 0.3, -1.0), lambda x: TF.threshold(x, 0.3, -1.0)),
    ("thresholded_relu", lambda x: A.thresholded_relu(x, 0.5), lambda x: torch.where(x > 0.5, x, torch.zeros_like(x))),
    ("hardshrink", lambda x: A.hard_shrink(x, 0.4), lambda x: TF.hardshrink(x, 0.4)),
    ("softshrink", lambda x: A.soft_shrink(x, 0.4), lambda x: TF.softshrink(x, 0.4)),
    ("softmax_last", lambda x: A.softmax(x, -1), lambda x: TF.softmax(x, -1)),
    ("softmax_first", lambda x: A.softmax(x, 0), lambda x: TF.softmax(x, 0)),
    ("log_softmax", lambda x: A.log_softmax(x, -1), lambda x: TF.log_softmax(x, -1)),
    ("softmin", lambda x: A.softmin(x, 1), lambda x: TF.softmin(x, 1)),
    ("glu", lambda x: A.glu(x, -1), lambda x: TF.glu(x, -1)),
]
ACTIVATION = [case(n, [f(4, 6, lo=-4, hi=4)], ours, theirs) for n, ours, theirs in _ACT] + [
    case("prelu", [f(2, 3, 4), f(3, lo=0, hi=0.5)], lambda x, a: A.prelu(x, a), lambda x, a: TF.prelu(x, a)),
    case("prelu_shared", [f(2, 3, 4), f(1, lo=0, hi=0.5)], lambda x, a: A.prelu(x, a), lambda x, a: TF.prelu(x, a)),
    case("softmax_large", [f(2, 5, lo=-500, hi=500)], lambda x: A.softmax(x, -1), lambda x: TF.softmax(x, -1)),
    case(
        "log_softmax_large",
        [f(2, 5, lo=-500, hi=500)],
        lambda x: A.log_softmax(x, -1),
        lambda x: TF.log_softmax(x, -1),
        rtol=1e-3,
    ),
    case("relu_int", [i(3, 4, lo=-5, hi=5)], lambda x: A.relu(x), lambda x: TF.relu(x).float(), grad=False),
    unsupported("rrelu", "no randomized leaky ReLU"),
]

# ---------------------------------------------------------------------------------- reductions
REDUCE = [
    case("sum", [f(3, 4)], lambda x: x.sum(), lambda x: _one(x.sum())),
    case("sum_dim", [f(3, 4, 5)], lambda x: x.sum_dim(1), lambda x: x.sum(1, keepdim=True)),
    case("sum_dims", [f(3, 4, 5)], lambda x: x.sum_dims([0, 2]), lambda x: x.sum((0, 2), keepdim=True)),
    case("sum_dims_squeeze", [f(3, 4, 5)], lambda x: x.sum_dims_squeeze([0, 2]), lambda x: x.sum((0, 2))),
    case("sum_int", [i(3, 4)], lambda x: x.sum(), lambda x: _one(x.sum()), grad=False),
    case("sum_bool", [b(3, 4)], lambda x: x.sum(), lambda x: _one(x.sum()), grad=False),
    case("mean", [f(3, 4)], lambda x: x.mean(), lambda x: _one(x.mean())),
    case("mean_dim", [f(3, 4, 5)], lambda x: x.mean_dim(-1), lambda x: x.mean(-1, keepdim=True)),
    case("mean_dims", [f(3, 4, 5)], lambda x: x.mean_dims([1, 2]), lambda x: x.mean((1, 2), keepdim=True)),
    case("prod", [f(3, 4, lo=0.5, hi=1.5)], lambda x: x.prod(), lambda x: _one(x.prod())),
    case("prod_dim", [f(3, 4)], lambda x: x.prod_dim(1), lambda x: x.prod(1, keepdim=True)),
    case(
        "prod_dim_zeros",
        [c([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]], np.float32)],
        lambda x: x.prod_dim(1),
        lambda x: x.prod(1, keepdim=True),
    ),
    case(
        "prod_dims",
        [f(2, 3, 4)],
        lambda x: x.prod_dims([0, 2]),
        lambda x: x.prod(2, keepdim=True).prod(0, keepdim=True),
    ),
    case("max", [f(3, 4)], lambda x: x.max(), lambda x: _one(x.max())),
    case("max_dim", [f(3, 4)], lambda x: x.max_dim(1), lambda x: x.max(1, keepdim=True).values),
    case(
        "max_dim_with_indices", [f(3, 4)], lambda x: x.max_dim_with_indices(0), lambda x: tuple(x.max(0, keepdim=True))
    ),
    case("max_dims", [f(3, 4, 5)], lambda x: x.max_dims([0, 2]), lambda x: x.amax((0, 2), keepdim=True)),
    case("min", [f(3, 4)], lambda x: x.min(), lambda x: _one(x.min())),
    case(
        "min_dim_with_indices", [f(3, 4)], lambda x: x.min_dim_with_indices(1), lambda x: tuple(x.min(1, keepdim=True))
    ),
    case("min_dims", [f(3, 4, 5)], lambda x: x.min_dims([1]), lambda x: x.amin(1, keepdim=True)),
    case("amax", [f(3, 4, 5)], lambda x: x.amax((0, 2)), lambda x: x.amax((0, 2))),
    case("amin_keepdim", [f(3, 4, 5)], lambda x: x.amin(1, keepdim=True), lambda x: x.amin(1, keepdim=True)),
    case("amax_ties", [c([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)], lambda x: x.amax(1), lambda x: x.amax(1)),
    case("max_ties", [c([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)], lambda x: x.max(), lambda x: _one(x.max())),
    case("max_int", [i(3, 4, lo=-9, hi=9)], lambda x: x.max(), lambda x: _one(x.max()), grad=False),
    case("max_abs", [f(3, 4)], lambda x: x.max_abs(), lambda x: _one(x.abs().max())),
    case("max_abs_dim", [f(3, 4)], lambda x: x.max_abs_dim(1), lambda x: x.abs().max(1, keepdim=True).values),
    case("argmax", [f(3, 4)], lambda x: x.argmax(1), lambda x: x.argmax(1, keepdim=True), grad=False),
    case("argmin", [f(3, 4)], lambda x: x.argmin(0), lambda x: x.argmin(0, keepdim=True), grad=False),
    case("argmax_flat", [f(3, 4)], lambda x: x.argmax(), lambda x: _one(x.argmax()), grad=False),
    case(
        "argmax_ties",
        [c([[1, 5, 5], [2, 2, 1]])],
        lambda x: x.argmax(1),
        lambda x: x.argmax(1, keepdim=True),
        grad=False,
    ),
    case("any", [b(3, 4)], lambda x: x.any(), lambda x: _one(x.any()), grad=False),
    case("all", [b(3, 4)], lambda x: x.all(), lambda x: _one(x.all()), grad=False),
    case("any_dim", [b(3, 4)], lambda x: x.any_dim(1), lambda x: x.any(1, keepdim=True), grad=False),
    case("all_dim_float", [f(3, 4)], lambda x: x.all_dim(0), lambda x: x.all(0, keepdim=True), grad=False),
    case("count_nonzero", [i(3, 4, hi=3)], lambda x: x.count_nonzero(), lambda x: _one(x.count_nonzero()), grad=False),
    case(
        "count_nonzero_dim",
        [i(3, 4, hi=3)],
        lambda x: x.count_nonzero(1),
        lambda x: x.count_nonzero(1).unsqueeze(1),
        grad=False,
    ),
    case("var", [f(3, 5)], lambda x: x.var(1), lambda x: x.var(1, keepdim=True)),
    case("var_biased", [f(3, 5)], lambda x: x.var_bias(1), lambda x: x.var(1, keepdim=True, unbiased=False)),
    case(
        "var_correction_2", [f(3, 5)], lambda x: x.var(1, correction=2), lambda x: x.var(1, keepdim=True, correction=2)
    ),
    case("var_all", [f(3, 5)], lambda x: x.var(), lambda x: _one(x.var())),
    case("std", [f(3, 5)], lambda x: x.std(0), lambda x: x.std(0, keepdim=True)),
    case(
        "std_correction_0", [f(3, 5)], lambda x: x.std(1, correction=0), lambda x: x.std(1, keepdim=True, correction=0)
    ),
    case("var_mean", [f(3, 5)], lambda x: x.var_mean(1), lambda x: torch.var_mean(x, 1, keepdim=True)),
    case(
        "std_mean",
        [f(3, 5)],
        lambda x: x.std_mean(1, correction=0),
        lambda x: torch.std_mean(x, 1, keepdim=True, correction=0),
    ),
    case("logsumexp", [f(3, 5)], lambda x: x.logsumexp(1), lambda x: x.logsumexp(1, keepdim=True)),
    case(
        "logsumexp_large", [f(3, 5, lo=-300, hi=300)], lambda x: x.logsumexp(1), lambda x: x.logsumexp(1, keepdim=True)
    ),
    case("norm_2", [f(3, 5)], lambda x: x.norm(), lambda x: _one(x.norm())),
    case("norm_1_dim", [f(3, 5)], lambda x: x.norm(1, 1), lambda x: torch.linalg.vector_norm(x, 1, 1, keepdim=True)),
    case(
        "norm_inf_dim", [f(3, 5)], lambda x: x.norm(INF, 1), lambda x: torch.linalg.vector_norm(x, INF, 1, keepdim=True)
    ),
    case(
        "norm_neg_inf_dim",
        [f(3, 5)],
        lambda x: x.norm(-INF, 1),
        lambda x: torch.linalg.vector_norm(x, -INF, 1, keepdim=True),
    ),
    case(
        "norm_0_dim",
        [c([[0.0, 1.0, -2.0], [0.0, 0.0, 3.0]], np.float32)],
        lambda x: x.norm(0, 1),
        lambda x: torch.linalg.vector_norm(x, 0, 1, keepdim=True),
    ),
    case("norm_3", [f(3, 5)], lambda x: x.norm(3), lambda x: _one(torch.linalg.vector_norm(x, 3))),
    case("cumsum", [f(3, 5)], lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
    case("cumsum_int", [i(3, 5)], lambda x: x.cumsum(0), lambda x: x.cumsum(0), grad=False),
    case("cumprod", [f(3, 5, lo=0.5, hi=1.5)], lambda x: x.cumprod(1), lambda x: x.cumprod(1)),
    case(
        "cumprod_zeros",
        [c([[1.0, 0.0, 2.0, 3.0], [0.0, 2.0, 0.0, 1.0]], np.float32)],
        lambda x: x.cumprod(1),
        lambda x: x.cumprod(1),
    ),
    case("cummax", [f(3, 6)], lambda x: x.cummax_with_indices(1), lambda x: tuple(x.cummax(1))),
    case("cummin", [f(3, 6)], lambda x: x.cummin_with_indices(0), lambda x: tuple(x.cummin(0))),
    case(
        "cummax_ties",
        [c([[1.0, 1.0, 0.0, 2.0, 2.0]], np.float32)],
        lambda x: x.cummax_with_indices(1),
        lambda x: tuple(x.cummax(1)),
        grad=False,
    ),
    case("cummax_values_burn", [f(3, 6)], lambda x: x.cummax(1), lambda x: x.cummax(1).values),
    case("logcumsumexp", [f(3, 6)], lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(1)),
    case(
        "logcumsumexp_spread",
        [c([[-1000.0, 0.0, 5.0, -INF, 1.0]], np.float32)],
        lambda x: x.logcumsumexp(1),
        lambda x: x.logcumsumexp(1),
        grad=False,
    ),
    case("median_all", [f(3, 5)], lambda x: x.median(), lambda x: _one(x.median())),
    case("median_dim", [f(3, 5)], lambda x: x.median_with_indices(1), lambda x: tuple(x.median(1, keepdim=True))),
    case("median_even", [f(3, 4)], lambda x: x.median(1), lambda x: x.median(1, keepdim=True).values),
    case(
        "median_nan",
        [c([[1.0, NAN, 3.0], [3.0, 1.0, 2.0]], np.float32)],
        lambda x: x.median(1),
        lambda x: x.median(1, keepdim=True).values,
        grad=False,
    ),
    case("kthvalue", [f(3, 5)], lambda x: x.kthvalue(2, 1), lambda x: tuple(x.kthvalue(2, 1, keepdim=True))),
    case(
        "nansum",
        [c([[1.0, NAN, 2.0], [NAN, NAN, 3.0]], np.float32)],
        lambda x: x.nansum(),
        lambda x: _one(x.nansum()),
        grad=False,
    ),
    case(
        "nanmean_dim",
        [c([[1.0, NAN, 2.0], [NAN, 4.0, 3.0]], np.float32)],
        lambda x: x.nanmean_dim(1),
        lambda x: x.nanmean(1, keepdim=True),
        grad=False,
    ),
    case("sort", [f(3, 6)], lambda x: x.sort_with_indices(1), lambda x: tuple(x.sort(1))),
    case(
        "sort_descending",
        [f(3, 6)],
        lambda x: x.sort_with_indices(0, descending=True),
        lambda x: tuple(x.sort(0, descending=True)),
    ),
    case(
        "sort_stable_ties",
        [c([[2, 1, 2, 1, 0]])],
        lambda x: x.sort_with_indices(1),
        lambda x: tuple(torch.sort(x, dim=1, stable=True)),
        grad=False,
    ),
    case("argsort", [f(3, 6)], lambda x: x.argsort(1), lambda x: x.argsort(1), grad=False),
    case("topk", [f(3, 6)], lambda x: x.topk_with_indices(3, 1), lambda x: tuple(x.topk(3, 1))),
    case(
        "topk_smallest",
        [f(3, 6)],
        lambda x: x.topk_with_indices(2, 1, largest=False),
        lambda x: tuple(x.topk(2, 1, largest=False)),
    ),
    case("mean_int_is_float", [i(3, 4)], lambda x: x.mean(), lambda x: _one(x.float().mean()), grad=False),
    case("aminmax", [f(3, 4)], lambda x: x.aminmax(1), lambda x: tuple(x.aminmax(dim=1))),
    unsupported("mode", "no mode reduction"),
    unsupported("quantile", "no quantile yet"),
]

# ---------------------------------------------------------------------------------- shape ops
SHAPE = [
    case("reshape", [f(3, 4)], lambda x: x.reshape([4, 3]), lambda x: x.reshape(4, 3)),
    case("reshape_infer", [f(3, 4)], lambda x: x.reshape([2, -1]), lambda x: x.reshape(2, -1)),
    case("view", [f(2, 6)], lambda x: x.view([3, 2, 2]), lambda x: x.view(3, 2, 2)),
    case("flatten", [f(2, 3, 4)], lambda x: x.flatten(), lambda x: x.flatten()),
    case("flatten_range", [f(2, 3, 4, 5)], lambda x: x.flatten(1, 2), lambda x: x.flatten(1, 2)),
    case("unflatten", [f(2, 12)], lambda x: x.unflatten(1, (3, -1)), lambda x: x.unflatten(1, (3, -1))),
    case("squeeze", [f(1, 3, 1, 4)], lambda x: x.squeeze(), lambda x: x.squeeze()),
    case("squeeze_dim", [f(1, 3, 1, 4)], lambda x: x.squeeze(2), lambda x: x.squeeze(2)),
    case("squeeze_dims", [f(1, 3, 1, 4)], lambda x: x.squeeze_dims([0, 2]), lambda x: x.squeeze((0, 2))),
    case("unsqueeze", [f(3, 4)], lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(1)),
    case("unsqueeze_negative", [f(3, 4)], lambda x: x.unsqueeze_dim(-1), lambda x: x.unsqueeze(-1)),
    case("unsqueeze_dims", [f(3, 4)], lambda x: x.unsqueeze_dims([0, 3]), lambda x: x.unsqueeze(0).unsqueeze(3)),
    case("permute", [f(2, 3, 4)], lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    case("transpose", [f(2, 3, 4)], lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    case("t", [f(3, 4)], lambda x: x.T, lambda x: x.T),
    case("swapaxes", [f(2, 3, 4)], lambda x: x.swap_dims(1, 2), lambda x: x.swapaxes(1, 2)),
    case("movedim", [f(2, 3, 4)], lambda x: x.movedim(0, -1), lambda x: x.movedim(0, -1)),
    case("movedim_lists", [f(2, 3, 4, 5)], lambda x: x.movedim([0, 1], [3, 0]), lambda x: x.movedim([0, 1], [3, 0])),
    case("flip", [f(3, 4)], lambda x: x.flip(0), lambda x: x.flip(0)),
    case("flip_two", [f(2, 3, 4)], lambda x: x.flip([0, 2]), lambda x: x.flip([0, 2])),
    case("expand", [f(3, 1)], lambda x: x.expand([2, 3, 4]), lambda x: x.expand(2, 3, 4)),
    case("expand_keep", [f(3, 1)], lambda x: x.expand([-1, 5]), lambda x: x.expand(-1, 5)),
    case("broadcast_to", [f(4)], lambda x: x.broadcast_to([3, 4]), lambda x: x.broadcast_to((3, 4))),
    case("repeat", [f(2, 3)], lambda x: x.repeat([2, 3]), lambda x: x.repeat(2, 3)),
    case("repeat_extra_dims", [f(2, 3)], lambda x: x.repeat([2, 1, 2]), lambda x: x.repeat(2, 1, 2)),
    case("tile", [f(2, 3)], lambda x: x.tile((2,)), lambda x: x.tile((2,))),
    case("repeat_interleave", [f(2, 3)], lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1)),
    case("repeat_interleave_flat", [f(2, 3)], lambda x: x.repeat_interleave(3), lambda x: x.repeat_interleave(3)),
    case(
        "repeat_interleave_counts",
        [f(3, 2)],
        lambda x: x.repeat_interleave(Tensor.from_ints([2, 0, 1], device=x.device), 0),
        lambda x: x.repeat_interleave(torch.tensor([2, 0, 1]), 0),
    ),
    case("cat", [f(2, 3), f(4, 3)], lambda x, y: Tensor.cat([x, y], 0), lambda x, y: torch.cat([x, y], 0)),
    case("cat_last", [f(2, 3), f(2, 1)], lambda x, y: Tensor.cat([x, y], -1), lambda x, y: torch.cat([x, y], -1)),
    case("stack", [f(2, 3), f(2, 3)], lambda x, y: Tensor.stack([x, y], 1), lambda x, y: torch.stack([x, y], 1)),
    case("split", [f(7, 2)], lambda x: x.split(3), lambda x: x.split(3)),
    case("split_sizes", [f(7, 2)], lambda x: x.split([2, 0, 5]), lambda x: x.split([2, 0, 5])),
    case("chunk", [f(2, 7)], lambda x: x.chunk(3, 1), lambda x: x.chunk(3, 1)),
    case("narrow", [f(4, 5)], lambda x: x.narrow(1, 1, 3), lambda x: x.narrow(1, 1, 3)),
    case("unbind", [f(3, 4)], lambda x: x.unbind(1), lambda x: x.unbind(1)),
    case("select_dim", [f(3, 4)], lambda x: x.select_dim(1, -1), lambda x: x.select(1, -1)),
    case("iter_dim", [f(3, 4)], lambda x: list(x.iter_dim(0)), lambda x: list(x.split(1, 0))),
    case("roll", [f(3, 5)], lambda x: x.roll(2, 1), lambda x: x.roll(2, 1)),
    case("roll_negative", [f(3, 5)], lambda x: x.roll(-4, 1), lambda x: x.roll(-4, 1)),
    case("roll_multi", [f(3, 5)], lambda x: x.roll((1, 3), (0, 1)), lambda x: x.roll((1, 3), (0, 1))),
    case("roll_flat", [f(3, 5)], lambda x: x.roll(4), lambda x: x.roll(4)),
    case("rot90", [f(3, 4)], lambda x: x.rot90(), lambda x: x.rot90()),
    case("rot90_k3", [f(2, 3, 4)], lambda x: x.rot90(3, (1, 2)), lambda x: x.rot90(3, (1, 2))),
    case("tril", [f(4, 5)], lambda x: x.tril(), lambda x: x.tril()),
    case("tril_offset", [f(4, 5)], lambda x: x.tril(-1), lambda x: x.tril(-1)),
    case("triu_batch", [f(2, 4, 4)], lambda x: x.triu(1), lambda x: x.triu(1)),
    case("diagonal", [f(4, 5)], lambda x: x.diagonal(), lambda x: x.diagonal()),
    case("diagonal_offset", [f(4, 5)], lambda x: x.diagonal(2), lambda x: x.diagonal(2)),
    case("diagonal_negative_offset", [f(4, 5)], lambda x: x.diagonal(-1), lambda x: x.diagonal(-1)),
    case("diagonal_dims", [f(2, 3, 4)], lambda x: x.diagonal(0, 0, 2), lambda x: x.diagonal(0, 0, 2)),
    case("diag_from_vector", [f(4)], lambda x: x.diag(), lambda x: x.diag()),
    case("diag_from_vector_offset", [f(3)], lambda x: x.diag(-2), lambda x: x.diag(-2)),
    case("diag_of_matrix", [f(3, 4)], lambda x: x.diag(1), lambda x: x.diag(1)),
    case(
        "diag_mask",
        [f(1)],
        lambda x: Tensor.diag_mask([3, 4], 1, device=x.device),
        lambda x: ~torch.ones(3, 4, dtype=torch.bool).tril(1).triu(1),
        grad=False,
    ),
    case("unfold", [f(3, 7)], lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2)),
    case("unfold_step1", [f(6, 2)], lambda x: x.unfold(0, 2, 1), lambda x: x.unfold(0, 2, 1)),
    case("pad_constant", [f(2, 3, 4)], lambda x: x.pad((1, 2)), lambda x: TF.pad(x, (1, 2))),
    case(
        "pad_constant_value",
        [f(2, 3, 4)],
        lambda x: x.pad((1, 0, 2, 1), value=-1.5),
        lambda x: TF.pad(x, (1, 0, 2, 1), value=-1.5),
    ),
    case("pad_negative", [f(2, 3, 4)], lambda x: x.pad((-1, 2, 1, -2)), lambda x: TF.pad(x, (-1, 2, 1, -2))),
    case(
        "pad_reflect",
        [f(1, 2, 5)],
        lambda x: x.pad((2, 3), mode="reflect"),
        lambda x: TF.pad(x, (2, 3), mode="reflect"),
    ),
    case(
        "pad_reflect_2d",
        [f(1, 2, 4, 5)],
        lambda x: x.pad((1, 2, 2, 1), mode="reflect"),
        lambda x: TF.pad(x, (1, 2, 2, 1), mode="reflect"),
    ),
    case(
        "pad_replicate",
        [f(1, 2, 4, 5)],
        lambda x: x.pad((2, 0, 1, 3), mode="replicate"),
        lambda x: TF.pad(x, (2, 0, 1, 3), mode="replicate"),
    ),
    case(
        "pad_circular",
        [f(1, 2, 5)],
        lambda x: x.pad((2, 4), mode="circular"),
        lambda x: TF.pad(x, (2, 4), mode="circular"),
    ),
    case(
        "pad_circular_2d",
        [f(1, 1, 3, 4)],
        lambda x: x.pad((1, 1, 2, 0), mode="circular"),
        lambda x: TF.pad(x, (1, 1, 2, 0), mode="circular"),
    ),
    case(
        "pad_circular_negative",
        [f(1, 2, 5)],
        lambda x: x.pad((2, -1), mode="circular"),
        lambda x: TF.pad(x, (2, -1), mode="circular"),
    ),
    case("clone", [f(3, 4)], lambda x: x.clone(), lambda x: x.clone()),
    case("cast_int", [f(3, 4, lo=-5, hi=5)], lambda x: x.int(), lambda x: x.long(), grad=False),
    case("cast_bool", [f(3, 4)], lambda x: x.bool(), lambda x: x.bool(), grad=False),
    case("cast_half_roundtrip", [f(3, 4)], lambda x: x.cast("float16").float(), lambda x: x.half().float()),
    case("detach", [f(3, 4)], lambda x: x.detach() * 2, lambda x: x.detach() * 2, grad=False),
    unsupported("as_strided", "no as_strided (tensors are values, not views)"),
]

# ---------------------------------------------------------------------------------- indexing
_IDX = [
    ("int", (1,)),
    ("negative_int", (-1,)),
    ("slice", (slice(1, 3),)),
    ("slice_step", (slice(None, None, 2), slice(1, None, 3))),
    ("ellipsis", (Ellipsis, 1)),
    ("none", (None, 1)),
    ("list", ([0, 2, 2],)),
    ("list_negative", ([-1, 0],)),
    ("bool_list", ([True, False, True, True],)),
    ("two_lists", ([0, 1, 3], [2, 2, 0])),
    ("broadcast_lists", ([[0], [3]], [1, 2, 4])),
    ("lists_separated", ([0, 1], slice(None), [2, 3])),
    ("slice_then_list", (slice(1, 3), [0, 4])),
    ("list_int_apart", ([1, 2], slice(None), 0)),
    ("list_then_none", (slice(None), None, [1, 3])),
    ("ellipsis_list", (Ellipsis, [5, 0])),
    ("empty_list", ([],)),
]


def _walk(x: Any, key: tuple) -> Any:
    """PyTorch has no negative steps: each slice of ``key`` as an ``index_select``."""
    for dim, s in enumerate(key):
        x = x.index_select(dim, torch.tensor(list(range(x.shape[dim]))[s], dtype=torch.int64))
    return x


def _scatter_reduce(reduce: str, include_self: bool) -> Any:
    return lambda x, k, v: x.scatter_reduce(1, k, v, reduce, include_self=include_self)


def _einsum(equation: str) -> tuple[Any, Any]:
    return (lambda *xs: Tensor.einsum(equation, *xs)), (lambda *xs: torch.einsum(equation, *xs))


def _index_case(name: str, key: tuple) -> Case:
    return case(f"getitem_{name}", [f(4, 5, 6)], lambda x: x[key], lambda x: x[key])


def _setitem(key: tuple) -> tuple:
    def ours(x, v):
        y = x.clone()
        y[key] = v
        return y

    def theirs(x, v):
        y = x.clone()
        y[key] = v
        return y

    return ours, theirs


INDEXING = (
    [_index_case(n, k) for n, k in _IDX]
    + [
        case("getitem_negative_step", [f(4, 5, 6)], lambda x: x[::-1], lambda x: _walk(x, (slice(None, None, -1),))),
        case(
            "getitem_negative_step_offsets",
            [f(4, 5, 6)],
            lambda x: x[3:0:-2, ::-3],
            lambda x: _walk(x, (slice(3, 0, -2), slice(None, None, -3))),
        ),
        case(
            "slice_burn_negative_step",
            [f(6, 5)],
            lambda x: x.slice([(1, 5, -2)]),
            lambda x: _walk(x, (slice(4, 0, -2),)),
        ),
        # numpy's rule (ember's): an int beside an index list, a slice between them, counts as
        # advanced, so the list's dim goes first; PyTorch applies the int first.
        case(
            "getitem_int_and_list_apart",
            [f(4, 5, 6)],
            lambda x: x[0, :, [1, 2]],
            lambda x: x[0][:, [1, 2]].transpose(0, 1),
        ),
        case("getitem_bool_mask", [f(4, 5), b(4, 5)], lambda x, m: x[m], lambda x, m: x[m]),
        case("getitem_bool_mask_rows", [f(4, 5), c([True, False, True, False])], lambda x, m: x[m], lambda x, m: x[m]),
        case("getitem_index_tensor", [f(4, 5), i(2, 3, hi=4)], lambda x, k: x[k], lambda x, k: x[k]),
        case(
            "getitem_two_index_tensors",
            [f(4, 5), i(3, hi=4), i(3, hi=5)],
            lambda x, k, j: x[k, j],
            lambda x, k, j: x[k, j],
        ),
        case(
            "getitem_mask_and_slice",
            [f(4, 5), c([True, False, True, True])],
            lambda x, m: x[m, 1:4],
            lambda x, m: x[m, 1:4],
        ),
        case("setitem_slice", [f(4, 5), f(2, 5)], *_setitem((slice(1, 3),))),
        case("setitem_step", [f(4, 6), f(4, 3)], *_setitem((slice(None), slice(None, None, 2)))),
        case(
            "setitem_negative_step",
            [f(4, 6), f(4, 2)],
            lambda x, v: _set(x, (slice(None), slice(None, 1, -3)), v),
            lambda x, v: x.index_put((torch.arange(4)[:, None], torch.tensor([5, 2])[None, :]), v),
        ),
        case("setitem_list", [f(4, 5), f(2, 5)], *_setitem(([3, 0],))),
        case("setitem_two_lists", [f(4, 5), f(3)], *_setitem(([0, 1, 3], [4, 4, 0]))),
        case("setitem_bool_list", [f(4, 5), f(2, 5)], *_setitem(([False, True, True, False],))),
        case("setitem_list_broadcast_value", [f(4, 5), f(5)], *_setitem(([1, 2],))),
        case(
            "setitem_mask_scalar",
            [f(4, 5), b(4, 5)],
            lambda x, m: _masked_fill_copy(x, m),
            lambda x, m: x.masked_fill(m, 0.5),
        ),
        case(
            "setitem_int_scalar",
            [f(4, 5)],
            lambda x: _set_scalar(x, (1, 2), -7.0),
            lambda x: _set_scalar(x, (1, 2), -7.0),
        ),
        case("gather", [f(3, 4), i(3, 6, hi=4)], lambda x, k: x.gather(1, k), lambda x, k: x.gather(1, k)),
        case("gather_dim0", [f(3, 4), i(5, 4, hi=3)], lambda x, k: x.gather(0, k), lambda x, k: x.gather(0, k)),
        case(
            "scatter_replace",
            [f(3, 5), c([[0, 1, 2], [4, 3, 2], [1, 3, 0]]), f(3, 3)],
            lambda x, k, v: x.scatter(1, k, v, "assign"),
            lambda x, k, v: x.scatter(1, k, v),
        ),
        # Repeated targets: the last value wins (PyTorch's CPU result; its gradient there is undefined).
        case(
            "scatter_replace_repeated",
            [f(3, 5), c([[0, 0, 2], [4, 3, 4], [1, 1, 1]]), f(3, 3)],
            lambda x, k, v: x.scatter(1, k, v, "assign"),
            lambda x, k, v: x.scatter(1, k, v),
            grad=False,
        ),
        case(
            "scatter_add",
            [f(3, 5), i(3, 4, hi=5), f(3, 4)],
            lambda x, k, v: x.scatter(1, k, v),
            lambda x, k, v: x.scatter_add(1, k, v),
        ),
        case(
            "scatter_value_dim0",
            [f(4, 3), c([[0, 1, 2], [3, 0, 1]]), f(2, 3)],
            lambda x, k, v: x.scatter(0, k, v, "assign"),
            lambda x, k, v: x.scatter(0, k, v),
        ),
    ]
    + [
        case(
            f"scatter_reduce_{r}_{'self' if s else 'noself'}",
            [f(3, 5, lo=-3, hi=3), i(3, 6, hi=5), f(3, 6, lo=-3, hi=3)],
            _scatter_reduce(r, s),
            _scatter_reduce(r, s),
        )
        for r in ("sum", "prod", "mean", "amax", "amin")
        for s in (True, False)
    ]
    + [
        case(
            "scatter_reduce_amax_ties",
            [
                c([[2.0, 1.0, 1.0, 1.0]], np.float32),
                c([[0, 0, 1, 1, 1, 2]]),
                c([[2.0, 2.0, 1.0, 0.0, 1.0, 3.0]], np.float32),
            ],
            lambda x, k, v: x.scatter_reduce(1, k, v, "amax"),
            lambda x, k, v: x.scatter_reduce(1, k, v, "amax"),
        ),
        case(
            "scatter_mul_burn",
            [f(2, 4), c([[0, 0, 3], [1, 2, 1]]), f(2, 3)],
            lambda x, k, v: x.scatter(1, k, v, "mul"),
            lambda x, k, v: x.scatter_reduce(1, k, v, "prod"),
        ),
        case("index_select", [f(4, 5), c([3, 0, 3])], lambda x, k: x.select(0, k), lambda x, k: x.index_select(0, k)),
        case(
            "index_add",
            [f(4, 5), c([3, 0, 3]), f(3, 5)],
            lambda x, k, v: x.select_assign(0, k, v),
            lambda x, k, v: x.index_add(0, k, v),
        ),
        case("masked_fill", [f(3, 4), b(3, 4)], lambda x, m: x.mask_fill(m, -1.0), lambda x, m: x.masked_fill(m, -1.0)),
        case(
            "masked_fill_broadcast",
            [f(3, 4), b(4)],
            lambda x, m: x.mask_fill(m, 2.0),
            lambda x, m: x.masked_fill(m, 2.0),
        ),
        case("masked_select", [f(3, 4), b(3, 4)], lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m)),
        case(
            "masked_select_broadcast", [f(3, 4), b(4)], lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m)
        ),
        case("take_flat", [f(3, 4), c([[0, 11], [-1, 5]])], lambda x, k: x.take(k), lambda x, k: x.take(k)),
        case("take_along_dim_burn", [f(3, 4), c([[2, 0], [1, 1]])], lambda x, k: x.take(1, k), lambda x, k: x[:, k]),
        case("nonzero", [i(3, 4, hi=2)], lambda x: x.argwhere(), lambda x: x.nonzero(), grad=False),
        case(
            "nonzero_tuple",
            [i(3, 4, hi=2)],
            lambda x: tuple(x.nonzero()),
            lambda x: x.nonzero(as_tuple=True),
            grad=False,
        ),
        case("argwhere", [b(2, 3, 2)], lambda x: x.argwhere(), lambda x: torch.argwhere(x), grad=False),
        case(
            "searchsorted",
            [c([1.0, 3.0, 5.0, 7.0], np.float32), f(3, 4, lo=0, hi=8)],
            lambda s, v: s.searchsorted(v),
            lambda s, v: torch.searchsorted(s, v),
            grad=False,
        ),
        case(
            "unique",
            [i(3, 4, hi=5)],
            lambda x: x.unique(return_inverse=True, return_counts=True),
            lambda x: torch.unique(x, return_inverse=True, return_counts=True),
            grad=False,
        ),
        case("histc", [f(40)], lambda x: x.histc(8, -1, 1), lambda x: torch.histc(x, 8, -1, 1), grad=False),
        unsupported("index_put_accumulate", "no index_put with accumulate=True (use scatter with update='add')"),
    ]
)


def _set(x: Any, key: tuple, value: Any) -> Any:
    y = x.clone()
    y[key] = value
    return y


def _masked_fill_copy(x: Tensor, m: Tensor) -> Tensor:
    y = x.clone()
    y[m] = 0.5
    return y


def _set_scalar(x: Any, key: tuple, value: float) -> Any:
    y = x.clone()
    y[key] = value
    return y


# ---------------------------------------------------------------------------------- linear algebra
def _shifted(x: Any) -> Any:
    """``x + 4 I``: a well-conditioned (or, from ``x x^T``, positive-definite) matrix."""
    return x.add(Tensor.eye(x.dims()[-1], device=x.device, dtype=x.dtype).mul_scalar(4.0))


def _tshifted(x: Any) -> Any:
    return x + 4.0 * torch.eye(x.shape[-1])


LINALG = (
    [
        case("matmul", [f(3, 4), f(4, 5)], lambda x, y: x @ y, lambda x, y: x @ y),
        case("matmul_batched", [f(2, 3, 4), f(2, 4, 5)], lambda x, y: x @ y, lambda x, y: x @ y),
        case("matmul_broadcast", [f(2, 1, 3, 4), f(5, 4, 2)], lambda x, y: x @ y, lambda x, y: x @ y),
        case("matmul_vector_right", [f(3, 4), f(4)], lambda x, y: x @ y, lambda x, y: x @ y),
        case("matmul_vector_left", [f(4), f(4, 5)], lambda x, y: x @ y, lambda x, y: x @ y),
        case("dot", [f(5), f(5)], lambda x, y: x.dot(y), lambda x, y: _one(x.dot(y))),
        case("matmul_int", [i(3, 4), i(4, 2)], lambda x, y: x @ y, lambda x, y: x @ y, grad=False),
        case("outer", [f(3), f(4)], lambda x, y: x.outer(y), lambda x, y: x.outer(y)),
        case("trace", [f(4, 4)], lambda x: x.trace(), lambda x: _one(x.trace())),
        case("cross", [f(4, 3), f(4, 3)], lambda x, y: x.cross(y), lambda x, y: torch.linalg.cross(x, y)),
        case(
            "tensordot", [f(2, 3, 4), f(3, 4, 5)], lambda x, y: x.tensordot(y, 2), lambda x, y: torch.tensordot(x, y, 2)
        ),
        case(
            "tensordot_dims",
            [f(2, 3, 4), f(4, 2)],
            lambda x, y: x.tensordot(y, ([0, 2], [1, 0])),
            lambda x, y: torch.tensordot(x, y, ([0, 2], [1, 0])),
        ),
    ]
    + [
        case(f"einsum_{eq}", [f(*s) for s in shapes], *_einsum(eq))
        for eq, shapes in [
            ("ij,jk->ik", [(3, 4), (4, 5)]),
            ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
            ("ii->i", [(4, 4)]),
            ("ij->ji", [(3, 4)]),
            ("i,i->", [(5,), (5,)]),
            ("i,j->ij", [(3,), (4,)]),
            ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
            ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
            ("ijk->", [(2, 3, 4)]),
            ("ij,ij->ij", [(3, 4), (3, 4)]),
            ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
            ("ij,jk", [(3, 4), (4, 5)]),
            ("iij->j", [(3, 3, 2)]),
            ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
        ]
    ]
    + [
        case("einsum_trace", [f(4, 4)], lambda x: Tensor.einsum("ii->", x), lambda x: torch.einsum("ii->", x)),
        case("linalg_det", [f(2, 3, 3)], linalg.det, lambda x: torch.linalg.det(x)),
        case("linalg_inv", [f(2, 3, 3)], lambda x: linalg.inv(_shifted(x)), lambda x: torch.linalg.inv(_tshifted(x))),
        case(
            "linalg_solve",
            [f(3, 3), f(3, 2)],
            lambda x, y: linalg.solve(_shifted(x), y),
            lambda x, y: torch.linalg.solve(_tshifted(x), y),
        ),
        case(
            "linalg_cholesky",
            [f(3, 3)],
            lambda x: linalg.cholesky(_shifted(x.matmul(x.transpose()))),
            lambda x: torch.linalg.cholesky(_tshifted(x @ x.T)),
        ),
        case("linalg_svdvals", [f(4, 3)], linalg.svdvals, lambda x: torch.linalg.svdvals(x)),
        case(
            "linalg_eigvalsh",
            [f(3, 3)],
            lambda x: linalg.eigvalsh(x.add(x.transpose())),
            lambda x: torch.linalg.eigvalsh(x + x.T),
        ),
        case("linalg_qr_r", [f(4, 3)], lambda x: linalg.qr(x).R, lambda x: torch.linalg.qr(x).R),
        case("linalg_matrix_exp", [f(3, 3, lo=-0.5, hi=0.5)], linalg.matrix_exp, lambda x: torch.linalg.matrix_exp(x)),
    ]
)

# ---------------------------------------------------------------------------------- nn functional
_N = np.float32


def _pool_input() -> tuple:
    return f(2, 3, 6, 7)


NN = [
    case(
        "linear", [f(4, 5), f(5, 3), f(3)], lambda x, w, b_: M.linear(x, w, b_), lambda x, w, b_: TF.linear(x, w.T, b_)
    ),
    case("linear_no_bias", [f(2, 4, 5), f(5, 3)], lambda x, w: M.linear(x, w), lambda x, w: TF.linear(x, w.T)),
    case(
        "conv1d",
        [f(2, 3, 9), f(4, 3, 3), f(4)],
        lambda x, w, b_: M.conv1d(x, w, b_),
        lambda x, w, b_: TF.conv1d(x, w, b_),
    ),
    case(
        "conv1d_stride_pad",
        [f(2, 3, 9), f(4, 3, 3)],
        lambda x, w: M.conv1d(x, w, stride=2, padding=1),
        lambda x, w: TF.conv1d(x, w, stride=2, padding=1),
    ),
    case(
        "conv2d",
        [f(2, 3, 6, 7), f(4, 3, 3, 3), f(4)],
        lambda x, w, b_: M.conv2d(x, w, b_),
        lambda x, w, b_: TF.conv2d(x, w, b_),
    ),
    case(
        "conv2d_stride_pad_dilation",
        [f(2, 3, 8, 7), f(4, 3, 3, 2)],
        lambda x, w: M.conv2d(x, w, stride=(2, 1), padding=(2, 1), dilation=2),
        lambda x, w: TF.conv2d(x, w, stride=(2, 1), padding=(2, 1), dilation=2),
    ),
    case(
        "conv2d_groups",
        [f(2, 4, 5, 5), f(6, 2, 3, 3)],
        lambda x, w: M.conv2d(x, w, groups=2),
        lambda x, w: TF.conv2d(x, w, groups=2),
    ),
    case(
        "conv2d_same",
        [f(1, 2, 5, 6), f(3, 2, 3, 3)],
        lambda x, w: M.conv2d(x, w, padding="same"),
        lambda x, w: TF.conv2d(x, w, padding="same"),
    ),
    case("conv3d", [f(1, 2, 4, 4, 4), f(3, 2, 2, 2, 2)], lambda x, w: M.conv3d(x, w), lambda x, w: TF.conv3d(x, w)),
    case(
        "conv_transpose1d",
        [f(2, 3, 5), f(3, 2, 3), f(2)],
        lambda x, w, b_: M.conv_transpose1d(x, w, b_, stride=2),
        lambda x, w, b_: TF.conv_transpose1d(x, w, b_, stride=2),
    ),
    case(
        "conv_transpose2d",
        [f(1, 3, 4, 4), f(3, 2, 3, 3)],
        lambda x, w: M.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        lambda x, w: TF.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
    ),
    case("max_pool1d", [f(2, 3, 9)], lambda x: M.max_pool1d(x, 3, 2), lambda x: TF.max_pool1d(x, 3, 2)),
    case("max_pool2d", [_pool_input()], lambda x: M.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2)),
    case(
        "max_pool2d_stride_pad",
        [_pool_input()],
        lambda x: M.max_pool2d(x, 3, 2, 1),
        lambda x: TF.max_pool2d(x, 3, 2, 1),
    ),
    case(
        "max_pool2d_ceil",
        [_pool_input()],
        lambda x: M.max_pool2d(x, 2, ceil_mode=True),
        lambda x: TF.max_pool2d(x, 2, ceil_mode=True),
    ),
    case(
        "max_pool2d_dilation",
        [_pool_input()],
        lambda x: M.max_pool2d(x, 2, 1, dilation=2),
        lambda x: TF.max_pool2d(x, 2, 1, dilation=2),
    ),
    case(
        "max_pool2d_indices",
        [_pool_input()],
        lambda x: M.max_pool2d_with_indices(x, 2),
        lambda x: TF.max_pool2d(x, 2, return_indices=True),
    ),
    case("avg_pool1d", [f(2, 3, 9)], lambda x: M.avg_pool1d(x, 3, 2), lambda x: TF.avg_pool1d(x, 3, 2)),
    case("avg_pool2d", [_pool_input()], lambda x: M.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2)),
    case(
        "avg_pool2d_pad_exclude",
        [_pool_input()],
        lambda x: M.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    ),
    case(
        "adaptive_avg_pool1d",
        [f(2, 3, 10)],
        lambda x: M.adaptive_avg_pool1d(x, 4),
        lambda x: TF.adaptive_avg_pool1d(x, 4),
    ),
    case(
        "adaptive_avg_pool2d",
        [_pool_input()],
        lambda x: M.adaptive_avg_pool2d(x, (4, 3)),
        lambda x: TF.adaptive_avg_pool2d(x, (4, 3)),
    ),
    case(
        "max_unpool2d",
        [f(2, 3, 3, 3), c(np.arange(9).reshape(1, 1, 3, 3).repeat(2, 0).repeat(3, 1) * 4 % 36)],
        lambda x, k: F.max_unpool2d(x, k, 2, output_size=(6, 6)),
        lambda x, k: TF.max_unpool2d(x, k, 2, output_size=(6, 6)),
    ),
    case(
        "max_unpool2d_roundtrip",
        [_pool_input()],
        lambda x: F.max_unpool2d(*M.max_pool2d_with_indices(x, 2), 2, output_size=(6, 7)),
        lambda x: TF.max_unpool2d(*TF.max_pool2d(x, 2, return_indices=True), 2, output_size=(6, 7)),
    ),
    case(
        "max_unpool1d",
        [f(2, 3, 8)],
        lambda x: F.max_unpool1d(*M.max_pool1d_with_indices(x, 2), 2),
        lambda x: TF.max_unpool1d(*TF.max_pool1d(x, 2, return_indices=True), 2),
    ),
    case(
        "unfold_im2col",
        [_pool_input()],
        lambda x: F.unfold(x, (2, 3), stride=2, padding=1),
        lambda x: TF.unfold(x, (2, 3), stride=2, padding=1),
    ),
    case(
        "unfold_dilation", [_pool_input()], lambda x: F.unfold(x, 2, dilation=2), lambda x: TF.unfold(x, 2, dilation=2)
    ),
    case("fold", [f(2, 12, 12)], lambda x: F.fold(x, (4, 5), 2), lambda x: TF.fold(x, (4, 5), 2)),
    case(
        "interpolate_nearest",
        [f(2, 3, 4, 5)],
        lambda x: F.interpolate(x, size=(7, 3)),
        lambda x: TF.interpolate(x, size=(7, 3)),
    ),
    case(
        "interpolate_nearest_scale",
        [f(2, 3, 4, 5)],
        lambda x: F.interpolate(x, scale_factor=2.0),
        lambda x: TF.interpolate(x, scale_factor=2.0),
    ),
    case(
        "interpolate_nearest_exact",
        [f(2, 3, 4, 5)],
        lambda x: F.interpolate(x, size=(7, 9), mode="nearest-exact"),
        lambda x: TF.interpolate(x, size=(7, 9), mode="nearest-exact"),
    ),
    case(
        "interpolate_linear",
        [f(2, 3, 6)],
        lambda x: F.interpolate(x, size=11, mode="linear"),
        lambda x: TF.interpolate(x, size=11, mode="linear"),
    ),
    case(
        "interpolate_linear_align",
        [f(2, 3, 6)],
        lambda x: F.interpolate(x, size=4, mode="linear", align_corners=True),
        lambda x: TF.interpolate(x, size=4, mode="linear", align_corners=True),
    ),
    case(
        "interpolate_bilinear",
        [f(1, 2, 4, 5)],
        lambda x: F.interpolate(x, size=(8, 7), mode="bilinear"),
        lambda x: TF.interpolate(x, size=(8, 7), mode="bilinear"),
    ),
    case(
        "interpolate_bilinear_align",
        [f(1, 2, 4, 5)],
        lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
        lambda x: TF.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
    ),
    case(
        "interpolate_bilinear_down",
        [f(1, 2, 8, 9)],
        lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"),
        lambda x: TF.interpolate(x, size=(3, 4), mode="bilinear"),
    ),
    case(
        "interpolate_bicubic",
        [f(1, 2, 4, 5)],
        lambda x: F.interpolate(x, size=(9, 6), mode="bicubic"),
        lambda x: TF.interpolate(x, size=(9, 6), mode="bicubic"),
    ),
    case(
        "interpolate_bicubic_align",
        [f(1, 2, 4, 5)],
        lambda x: F.interpolate(x, scale_factor=2.0, mode="bicubic", align_corners=True),
        lambda x: TF.interpolate(x, scale_factor=2.0, mode="bicubic", align_corners=True),
    ),
    case(
        "interpolate_trilinear",
        [f(1, 2, 3, 4, 3)],
        lambda x: F.interpolate(x, size=(5, 2, 4), mode="trilinear"),
        lambda x: TF.interpolate(x, size=(5, 2, 4), mode="trilinear"),
    ),
    case(
        "interpolate_area",
        [f(1, 2, 6, 8)],
        lambda x: F.interpolate(x, size=(3, 3), mode="area"),
        lambda x: TF.interpolate(x, size=(3, 3), mode="area"),
    ),
    case("embedding", [f(10, 4), i(3, 5, hi=10)], lambda w, k: M.embedding(w, k), lambda w, k: TF.embedding(k, w)),
    case(
        "dropout_eval",
        [f(3, 4)],
        lambda x: M.dropout(x, 0.5, training=False),
        lambda x: TF.dropout(x, 0.5, training=False),
    ),
    case("dropout_zero", [f(3, 4)], lambda x: M.dropout(x, 0.0), lambda x: TF.dropout(x, 0.0)),
    case("normalize", [f(3, 5)], lambda x: F.normalize(x), lambda x: TF.normalize(x)),
    case("normalize_p1_last", [f(2, 3, 4)], lambda x: F.normalize(x, 1.0, -1), lambda x: TF.normalize(x, 1.0, -1)),
    case(
        "cosine_similarity",
        [f(3, 5), f(3, 5)],
        lambda x, y: F.cosine_similarity(x, y),
        lambda x, y: TF.cosine_similarity(x, y),
    ),
    case(
        "pairwise_distance",
        [f(3, 5), f(3, 5)],
        lambda x, y: F.pairwise_distance(x, y),
        lambda x, y: TF.pairwise_distance(x, y),
    ),
    case(
        "sdpa",
        [f(2, 3, 4, 8), f(2, 3, 5, 8), f(2, 3, 5, 6)],
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v),
    ),
    case(
        "sdpa_bool_mask",
        [f(2, 4, 8), f(2, 5, 8), f(2, 5, 6), b(4, 5)],
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m),
    ),
    case(
        "sdpa_float_mask",
        [f(2, 4, 8), f(2, 5, 8), f(2, 5, 6), f(4, 5)],
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m),
    ),
    case(
        "sdpa_causal",
        [f(2, 2, 5, 8), f(2, 2, 5, 8), f(2, 2, 5, 4)],
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    case(
        "sdpa_scale",
        [f(2, 4, 8), f(2, 5, 8), f(2, 5, 6)],
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.2),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, scale=0.2),
    ),
    case(
        "pad_fn",
        [f(2, 3, 4)],
        lambda x: F.pad(x, (1, 1), "constant", 2.0),
        lambda x: TF.pad(x, (1, 1), "constant", 2.0),
    ),
    case("one_hot_fn", [i(4, hi=3)], lambda x: F.one_hot(x, 3), lambda x: TF.one_hot(x, 3), grad=False),
    case("layer_norm", [f(3, 4, 5)], lambda x: _layer_norm(x), lambda x: TF.layer_norm(x, (5,))),
    case("group_norm", [f(2, 4, 3, 3)], lambda x: _group_norm(x), lambda x: TF.group_norm(x, 2)),
    case("rms_norm", [f(3, 6)], lambda x: _rms_norm(x), lambda x: TF.rms_norm(x, (6,), eps=1e-5)),
    case(
        "batch_norm_train",
        [f(4, 3, 2)],
        lambda x: _batch_norm(x),
        lambda x: TF.batch_norm(x, None, None, training=True),
    ),
    case("max_pool3d", [f(2, 2, 4, 4, 4)], lambda x: _pool3d().max_pool3d(x, 2), lambda x: TF.max_pool3d(x, 2)),
    unsupported("adaptive_max_pool2d", "no adaptive max pooling yet"),
    case(
        "grid_sample",
        [f(2, 3, 5, 6), f(2, 4, 3, 2, lo=-1.2, hi=1.2)],
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        lambda x, g: TF.grid_sample(x, g, align_corners=False),
        rtol=1e-3,
        atol=1e-4,
    ),
    case("pixel_shuffle", [f(2, 8, 3, 2)], lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2)),
    case("pixel_unshuffle", [f(2, 2, 4, 6)], lambda x: F.pixel_unshuffle(x, 2), lambda x: TF.pixel_unshuffle(x, 2)),
]


def _layer_norm(x: Tensor) -> Tensor:
    from ember.nn import LayerNormConfig

    return LayerNormConfig(5).init(x.device)(x)


def _group_norm(x: Tensor) -> Tensor:
    from ember.nn import GroupNormConfig

    return GroupNormConfig(2, 4).init(x.device)(x)


def _rms_norm(x: Tensor) -> Tensor:
    from ember.nn import RmsNormConfig

    return RmsNormConfig(6, epsilon=1e-5).init(x.device)(x)


def _batch_norm(x: Tensor) -> Tensor:
    from ember.nn import BatchNormConfig

    return (
        BatchNormConfig(3)
        .init(x.device.autodiff() if not x.device.is_autodiff() else x.device)(
            x.to_device(x.device.autodiff()) if not x.device.is_autodiff() else x
        )
        .to_device(x.device)
    )


# ---------------------------------------------------------------------------------- losses
def _mean(module: Any, *args: Any) -> Any:
    return module.forward(*args, Reduction.MEAN)


def _sum(module: Any, *args: Any) -> Any:
    return module.forward(*args, Reduction.SUM)


LOSS = [
    case("mse_loss", [f(4, 3), f(4, 3)], lambda x, y: _mean(L.MseLoss(), x, y), lambda x, y: _one(TF.mse_loss(x, y))),
    case(
        "mse_loss_sum",
        [f(4, 3), f(4, 3)],
        lambda x, y: _sum(L.MseLoss(), x, y),
        lambda x, y: _one(TF.mse_loss(x, y, reduction="sum")),
    ),
    case("l1_loss", [f(4, 3), f(4, 3)], lambda x, y: _mean(L.L1Loss(), x, y), lambda x, y: _one(TF.l1_loss(x, y))),
    case(
        "smooth_l1_loss",
        [f(4, 3), f(4, 3)],
        lambda x, y: _mean(L.SmoothL1LossConfig(beta=0.5).init(), x, y),
        lambda x, y: _one(TF.smooth_l1_loss(x, y, beta=0.5)),
    ),
    case(
        "huber_loss",
        [f(4, 3), f(4, 3)],
        lambda x, y: _mean(L.HuberLossConfig(0.7).init(), x, y),
        lambda x, y: _one(TF.huber_loss(x, y, delta=0.7)),
    ),
    case(
        "bce_with_logits",
        [f(4, 3), f(4, 3, lo=0, hi=1)],
        lambda x, y: _mean(L.BinaryCrossEntropyLossConfig(logits=True).init(), x, y),
        lambda x, y: _one(TF.binary_cross_entropy_with_logits(x, y)),
    ),
    case(
        "bce_probabilities",
        [f(4, 3, lo=0.05, hi=0.95), f(4, 3, lo=0, hi=1)],
        lambda x, y: _mean(L.BinaryCrossEntropyLossConfig().init(), x, y),
        lambda x, y: _one(TF.binary_cross_entropy(x, y)),
    ),
    case(
        "cross_entropy",
        [f(5, 4), i(5, hi=4)],
        lambda x, y: _mean(L.CrossEntropyLossConfig().init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y)),
    ),
    case(
        "cross_entropy_sum",
        [f(5, 4), i(5, hi=4)],
        lambda x, y: _sum(L.CrossEntropyLossConfig().init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y, reduction="sum")),
    ),
    case(
        "cross_entropy_smoothing",
        [f(5, 4), i(5, hi=4)],
        lambda x, y: _mean(L.CrossEntropyLossConfig(smoothing=0.2).init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y, label_smoothing=0.2)),
    ),
    case(
        "cross_entropy_weights",
        [f(5, 3), i(5, hi=3)],
        lambda x, y: _mean(L.CrossEntropyLossConfig(weights=[0.2, 1.0, 3.0]).init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y, weight=torch.tensor([0.2, 1.0, 3.0]))),
    ),
    case(
        "cross_entropy_ignore",
        [f(5, 3), c([0, 2, 1, 2, 2])],
        lambda x, y: _mean(L.CrossEntropyLossConfig(pad_tokens=[2]).init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y, ignore_index=2)),
    ),
    case(
        "cross_entropy_probs",
        [f(5, 3), f(5, 3, lo=0, hi=1)],
        lambda x, y: _mean(L.CrossEntropyLossConfig().init(), x, A.softmax(y, 1)),
        lambda x, y: _one(TF.cross_entropy(x, y.softmax(1))),
    ),
    case(
        "cross_entropy_spatial",
        [f(2, 3, 4), i(2, 4, hi=3)],
        lambda x, y: _mean(L.CrossEntropyLossConfig().init(), x, y),
        lambda x, y: _one(TF.cross_entropy(x, y)),
    ),
    case(
        "nll_loss",
        [f(5, 4), i(5, hi=4)],
        lambda x, y: _mean(L.CrossEntropyLossConfig().init(), A.log_softmax(x, 1), y),
        lambda x, y: _one(TF.nll_loss(x.log_softmax(1), y)),
    ),
    case(
        "kl_div",
        [f(4, 3), f(4, 3, lo=0.05, hi=1)],
        lambda x, y: _sum(L.KLDivLoss(), A.log_softmax(x, 1), y),
        lambda x, y: _one(TF.kl_div(x.log_softmax(1), y, reduction="sum")),
    ),
    case(
        "cosine_embedding_loss",
        [f(4, 5), f(4, 5), c([1, -1, 1, -1])],
        lambda x, y, t: _mean(L.CosineEmbeddingLossConfig(margin=0.1).init(), x, y, t),
        lambda x, y, t: _one(TF.cosine_embedding_loss(x, y, t, margin=0.1)),
    ),
    case(
        "margin_ranking_loss",
        [f(6), f(6), c([1, -1, 1, 1, -1, -1])],
        lambda x, y, t: F.margin_ranking_loss(x, y, t, 0.2),
        lambda x, y, t: _one(TF.margin_ranking_loss(x, y, t, 0.2)),
    ),
    unsupported("ctc_loss", "no CTC loss"),
]

CATEGORIES = {
    "creation": CREATION,
    "unary": UNARY,
    "binary": BINARY,
    "compare": COMPARE,
    "activation": ACTIVATION,
    "reduce": REDUCE,
    "shape": SHAPE,
    "indexing": INDEXING,
    "linalg": LINALG,
    "nn": NN,
    "loss": LOSS,
}

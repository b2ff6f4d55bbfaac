"""Second derivatives of every differentiable primitive (``backward(create_graph=True)``)
against float64 finite differences of the first derivative and against
``torch.autograd.grad(..., create_graph=True)``."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.autodiff import Checkpointing
from ember.backend.autodiff.rules.elementwise import BINARY, UNARY
from ember.backend.ops import BinaryOp, UnaryOp
from ember.tensor import activation as act
from ember.tensor import layer_ops as fm
from ember.tensor.loss import mse_loss
from ember.tensor.norm import layer_norm
from tests.autodiff.second_order import ember_hvp, numeric_hvp, torch_hvp


def _cases():
    r = np.random.default_rng(2024)

    def u(*shape, lo=-2.0, hi=2.0):
        return r.uniform(lo, hi, size=shape)

    def away(*shape):
        return r.uniform(0.5, 2.0, size=shape) * r.choice([-1.0, 1.0], size=shape)

    def ints(values):
        return np.array(values, dtype=np.int64)

    def fn(t):
        return t.nn.functional

    return {
        # ---- elementwise unary (UnaryOp)
        "neg": (lambda x: x.neg(), lambda t, x: -x, [u(3, 4)]),
        "abs": (lambda x: x.abs().mul(x), lambda t, x: x.abs() * x, [away(3, 4)]),
        "exp": (lambda x: x.exp(), lambda t, x: x.exp(), [u(3, 4)]),
        "log": (lambda x: x.log(), lambda t, x: x.log(), [u(3, 4, lo=0.5, hi=3)]),
        "log1p": (lambda x: x.log1p(), lambda t, x: x.log1p(), [u(3, 4, lo=-0.5, hi=3)]),
        "expm1": (lambda x: x.expm1(), lambda t, x: x.expm1(), [u(3, 4)]),
        "sqrt": (lambda x: x.sqrt(), lambda t, x: x.sqrt(), [u(3, 4, lo=0.5, hi=3)]),
        "rsqrt": (lambda x: x.rsqrt(), lambda t, x: x.rsqrt(), [u(3, 4, lo=0.5, hi=3)]),
        "recip": (lambda x: x.recip(), lambda t, x: x.reciprocal(), [away(3, 4)]),
        "square": (lambda x: x.square(), lambda t, x: x.square(), [u(3, 4)]),
        "sin": (lambda x: x.sin(), lambda t, x: x.sin(), [u(3, 4)]),
        "cos": (lambda x: x.cos(), lambda t, x: x.cos(), [u(3, 4)]),
        "tan": (lambda x: x.tan(), lambda t, x: x.tan(), [u(3, 4, lo=-1, hi=1)]),
        "tanh": (lambda x: x.tanh(), lambda t, x: x.tanh(), [u(3, 4)]),
        "sinh": (lambda x: x.sinh(), lambda t, x: x.sinh(), [u(3, 4)]),
        "cosh": (lambda x: x.cosh(), lambda t, x: x.cosh(), [u(3, 4)]),
        "asin": (lambda x: x.asin(), lambda t, x: x.asin(), [u(3, 4, lo=-0.9, hi=0.9)]),
        "acos": (lambda x: x.acos(), lambda t, x: x.acos(), [u(3, 4, lo=-0.9, hi=0.9)]),
        "atan": (lambda x: x.atan(), lambda t, x: x.atan(), [u(3, 4)]),
        "erf": (lambda x: x.erf(), lambda t, x: x.erf(), [u(3, 4)]),
        "log2": (lambda x: x.log2(), lambda t, x: x.log2(), [u(3, 4, lo=0.5, hi=3)]),
        "log10": (lambda x: x.log10(), lambda t, x: x.log10(), [u(3, 4, lo=0.5, hi=3)]),
        "exp2": (lambda x: x.exp2(), lambda t, x: x.exp2(), [u(3, 4)]),
        "asinh": (lambda x: x.asinh(), lambda t, x: x.asinh(), [u(3, 4)]),
        "acosh": (lambda x: x.acosh(), lambda t, x: x.acosh(), [u(3, 4, lo=1.5, hi=3)]),
        "atanh": (lambda x: x.atanh(), lambda t, x: x.atanh(), [u(3, 4, lo=-0.8, hi=0.8)]),
        "copysign": (lambda a, b: a.copysign(b).mul(a), lambda t, a, b: t.copysign(a, b) * a, [away(3, 4), away(4)]),
        "sign": (lambda x: x.sign().mul(x.square()), lambda t, x: x.sign() * x.square(), [away(3, 4)]),
        "round": (lambda x: x.round().mul(x.square()), lambda t, x: x.round() * x.square(), [u(3, 4)]),
        "floor_ceil_trunc": (
            lambda x: x.floor().add(x.ceil()).add(x.trunc()).mul(x.exp()),
            lambda t, x: (x.floor() + x.ceil() + x.trunc()) * x.exp(),
            [u(3, 4)],
        ),
        "clamp": (lambda x: x.clamp(-0.5, 0.7).mul(x), lambda t, x: x.clamp(-0.5, 0.7) * x, [u(4, 5)]),
        "clamp_min": (lambda x: x.clamp_min(0.1).square(), lambda t, x: x.clamp_min(0.1).square(), [u(4, 5)]),
        # float32 in the middle: finite differences need a step far above its rounding
        "cast": (
            lambda x: x.cast("float32").cast("float64").mul(x),
            lambda t, x: x.float().double() * x,
            [u(3)],
            {"eps": 1e-3, "rtol": 1e-3, "torch_rtol": 1e-6},
        ),
        # ---- elementwise binary (BinaryOp), with broadcasting
        "add": (lambda a, b: a.add(b).square(), lambda t, a, b: (a + b).square(), [u(3, 4), u(4)]),
        "sub": (lambda a, b: a.sub(b).exp(), lambda t, a, b: (a - b).exp(), [u(2, 1, 4), u(3, 1)]),
        "mul": (lambda a, b: a.mul(b), lambda t, a, b: a * b, [u(3, 4), u(3, 1)]),
        "mul_self": (lambda a: a.mul(a).mul(a), lambda t, a: a * a * a, [u(3, 4)]),
        "div": (lambda a, b: a.div(b), lambda t, a, b: a / b, [u(3, 4), away(1, 4)]),
        "powf": (lambda a, b: a.powf(b), lambda t, a, b: a**b, [u(3, 4, lo=0.5, hi=2), u(3, 4)]),
        "powf_scalar": (lambda a: a.powf_scalar(2.5), lambda t, a: a**2.5, [u(3, 4, lo=0.5, hi=2)]),
        "powi_scalar": (lambda a: a.powi_scalar(3), lambda t, a: a**3, [u(3, 4)]),
        "rpow": (lambda a: 2.0**a, lambda t, a: 2.0**a, [u(3)]),
        "remainder": (
            lambda a, b: a.remainder(b).mul(a),
            lambda t, a, b: t.remainder(a, b) * a,
            [u(3, 4, lo=0.1, hi=0.9) + 3, u(3, 4, lo=1.1, hi=1.9)],
        ),
        "atan2": (lambda a, b: a.atan2(b), lambda t, a, b: t.atan2(a, b), [u(3, 4), away(3, 4)]),
        "maximum": (lambda a, b: a.maximum(b).square(), lambda t, a, b: t.maximum(a, b).square(), [u(3, 4), u(3, 4)]),
        "minimum": (lambda a, b: a.minimum(b).mul(a), lambda t, a, b: t.minimum(a, b) * a, [u(3, 4), u(4)]),
        "scalar_ops": (
            lambda a: a.add_scalar(1).mul_scalar(3).sub_scalar(2).div_scalar(4).square(),
            lambda t, a: ((a + 1) * 3 - 2).div(4).square(),
            [u(5)],
        ),
        "rsub_rdiv": (lambda a: (1.0 - a) + 2.0 / a, lambda t, a: (1.0 - a) + 2.0 / a, [away(5)]),
        # ---- masks
        "mask_where": (
            lambda a, b: a.mask_where(a.greater_elem(0), b).mul(a),
            lambda t, a, b: t.where(a > 0, b, a) * a,
            [away(3, 4), u(4)],
        ),
        "mask_fill": (
            lambda a: a.mask_fill(a.lower_elem(0), 3.0).square(),
            lambda t, a: t.where(a < 0, 3.0, a).square(),
            [away(3, 4)],
        ),
        # ---- matmul and the fused linear layer
        "matmul": (lambda a, b: a.matmul(b), lambda t, a, b: a @ b, [u(3, 4), u(4, 5)]),
        "matmul_self": (lambda a: a.matmul(a.transpose()).square(), lambda t, a: (a @ a.T).square(), [u(3, 4)]),
        "matmul_batched": (lambda a, b: a.matmul(b).tanh(), lambda t, a, b: (a @ b).tanh(), [u(2, 3, 4), u(2, 4, 5)]),
        "matmul_broadcast": (lambda a, b: a.matmul(b), lambda t, a, b: a @ b, [u(2, 1, 3, 4), u(3, 4, 2)]),
        "linear": (
            lambda x, w, b: fm.linear(x, w, b).tanh(),
            lambda t, x, w, b: (x @ w + b).tanh(),
            [u(5, 3), u(3, 4), u(4)],
        ),
        "linear_batched": (
            lambda x, w, b: fm.linear(x, w, b).square(),
            lambda t, x, w, b: (x @ w + b).square(),
            [u(2, 5, 3), u(3, 4), u(4)],
        ),
        "linear_no_bias": (lambda x, w: fm.linear(x, w).exp(), lambda t, x, w: (x @ w).exp(), [u(5, 3), u(3, 2)]),
        "mse_loss": (lambda p, t: mse_loss(p, t), lambda t, p, y: fn(t).mse_loss(p, y), [u(4, 3), u(4, 3)]),
        "mse_loss_sum": (
            lambda p, t: mse_loss(p.tanh(), t, mean=False),
            lambda t, p, y: fn(t).mse_loss(p.tanh(), y, reduction="sum"),
            [u(6), u(6)],
        ),
        # ---- reductions and scans
        "sum": (lambda x: x.sum().square(), lambda t, x: x.sum().square(), [u(3, 4)]),
        "sum_dim": (
            lambda x: x.sum_dim(1).exp(),
            lambda t, x: x.sum(1, keepdim=True).exp(),
            [u(3, 4, 2, lo=-0.5, hi=0.5)],
        ),
        "mean": (lambda x: x.mean().square(), lambda t, x: x.mean().square(), [u(3, 4)]),
        "mean_dim": (lambda x: x.mean_dim(0).sin(), lambda t, x: x.mean(0, keepdim=True).sin(), [u(3, 4)]),
        "prod": (lambda x: x.prod_dim(1), lambda t, x: x.prod(1, keepdim=True), [u(3, 4)]),
        "prod_with_zero": (
            lambda x: x.prod_dim(1),
            lambda t, x: x.prod(1, keepdim=True),
            [np.array([[1.5, 0.0, 2.0], [0.5, -1.0, 3.0], [1.0, 2.0, 3.0]])],
        ),
        "max": (lambda x: x.max().square(), lambda t, x: x.max().square(), [u(3, 4)]),
        "min_dim": (lambda x: x.min_dim(1).exp(), lambda t, x: x.min(1, keepdim=True).values.exp(), [u(3, 4)]),
        "var": (lambda x: x.var(1), lambda t, x: x.var(1, keepdim=True), [u(3, 4)]),
        "logsumexp": (lambda x: x.logsumexp(1), lambda t, x: x.logsumexp(1, keepdim=True), [u(3, 4)]),
        "norm": (lambda x: x.norm(), lambda t, x: x.norm().reshape(1), [u(3, 4)]),
        "cumsum": (lambda x: x.cumsum(1).square(), lambda t, x: x.cumsum(1).square(), [u(3, 4)]),
        "cumprod": (lambda x: x.cumprod(1), lambda t, x: x.cumprod(1), [u(3, 4)]),
        "cumprod_with_zero": (
            lambda x: x.cumprod(1),
            lambda t, x: x.cumprod(1),
            [np.array([[1.5, 0.0, 2.0, -1.0], [0.5, 2.0, 0.7, 3.0]])],
        ),
        "cummax": (lambda x: x.cummax(1).square(), lambda t, x: x.cummax(1).values.square(), [u(3, 5)]),
        "cummin": (lambda x: x.cummin(0).mul(x), lambda t, x: x.cummin(0).values * x, [u(4, 3)]),
        "sort": (lambda x: x.sort(1).square(), lambda t, x: x.sort(1).values.square(), [u(3, 5)]),
        "topk": (lambda x: x.topk(2, 1).exp(), lambda t, x: x.topk(2, 1).values.exp(), [u(3, 5)]),
        # ---- layout
        "reshape": (
            lambda x: x.reshape([4, 3]).mul(x.reshape([4, 3])),
            lambda t, x: x.reshape(4, 3) * x.reshape(4, 3),
            [u(3, 4)],
        ),
        "permute": (lambda x: x.permute([2, 0, 1]).square(), lambda t, x: x.permute(2, 0, 1).square(), [u(2, 3, 4)]),
        "flip": (lambda x: x.flip([0, 1]).mul(x), lambda t, x: x.flip(0, 1) * x, [u(3, 4)]),
        "expand": (lambda x: x.expand([2, 3, 4]).sin(), lambda t, x: x.expand(2, 3, 4).sin(), [u(3, 1)]),
        "slice": (
            lambda x: x.slice([(0, 2), (1, 4, 2)]).square(),
            lambda t, x: x[0:2, 1:4:2].square(),
            [u(3, 5)],
        ),
        "getitem_negative_step": (
            lambda x: x[1:, ::-2].square(),
            lambda t, x: x[1:].flip(1)[:, ::2].square(),
            [u(3, 5)],
        ),
        "slice_assign": (
            lambda x, v: x.slice_assign([(1, 3), None], v).square(),
            lambda t, x, v: t.cat([x[:1], v, x[3:]], 0).square(),
            [u(4, 3), u(2, 3)],
        ),
        "cat": (
            lambda a, b: Tensor.cat([a, b, a], 1).square(),
            lambda t, a, b: t.cat([a, b, a], 1).square(),
            [u(2, 3), u(2, 1)],
        ),
        "pad_reflect": (
            lambda x: x.pad((2, 1), mode="reflect").square(),
            lambda t, x: fn(t).pad(x[None], (2, 1), mode="reflect")[0].square(),
            [u(2, 4)],
        ),
        "tril": (lambda x: x.tril().exp(), lambda t, x: x.tril().exp(), [u(3, 3)]),
        # ---- indexing
        "gather": (
            lambda x: x.gather(1, Tensor.from_ints([[0, 2, 2], [1, 1, 0]], device=x.device)).square(),
            lambda t, x: x.gather(1, t.tensor([[0, 2, 2], [1, 1, 0]])).square(),
            [u(2, 3)],
        ),
        "scatter": (
            lambda x, v: x.scatter(1, Tensor.from_ints([[0, 0], [2, 1]], device=x.device), v).square(),
            lambda t, x, v: x.scatter_add(1, t.tensor([[0, 0], [2, 1]]), v).square(),
            [u(2, 3), u(2, 2)],
        ),
        "select": (
            lambda x: x.select(0, Tensor.from_ints([2, 0, 2], device=x.device)).exp(),
            lambda t, x: x.index_select(0, t.tensor([2, 0, 2])).exp(),
            [u(3, 4)],
        ),
        "select_assign": (
            lambda x, v: x.select_assign(1, Tensor.from_ints([1, 1], device=x.device), v).square(),
            lambda t, x, v: x.index_add(1, t.tensor([1, 1]), v).square(),
            [u(3, 4), u(3, 2)],
        ),
        # ---- fused activations and the composites over them
        "relu": (lambda x: act.relu(x).square(), lambda t, x: x.relu().square(), [away(3, 4)]),
        "sigmoid": (act.sigmoid, lambda t, x: x.sigmoid(), [u(3, 4)]),
        "softmax": (lambda x: act.softmax(x, 1), lambda t, x: x.softmax(1), [u(3, 5)]),
        "log_softmax": (lambda x: act.log_softmax(x, 0), lambda t, x: x.log_softmax(0), [u(3, 5)]),
        "leaky_relu": (
            lambda x: act.leaky_relu(x, 0.2).square(),
            lambda t, x: fn(t).leaky_relu(x, 0.2).square(),
            [away(3, 4)],
        ),
        "softplus": (act.softplus, lambda t, x: fn(t).softplus(x), [u(3, 4, lo=-5, hi=5)]),
        "silu": (act.silu, lambda t, x: fn(t).silu(x), [u(3, 4)]),
        "gelu": (act.gelu, lambda t, x: fn(t).gelu(x), [u(3, 4)]),
        "gelu_tanh": (act.gelu_tanh, lambda t, x: fn(t).gelu(x, approximate="tanh"), [u(3, 4)]),
        # flex's layer norm kernel and its backward kernel; the second order differentiates
        # the backward's composite (ember.backend.composites.norm)
        "layer_norm": (
            lambda x, g, b: layer_norm(x, g, b).mul(x),
            lambda t, x, g, b: fn(t).layer_norm(x, (4,), g, b) * x,
            [u(3, 4), u(4), u(4)],
        ),
        "layer_norm_plain": (
            lambda x: layer_norm(x).square(),
            lambda t, x: fn(t).layer_norm(x, (4,)).square(),
            [u(2, 3, 4)],
        ),
        "mish": (act.mish, lambda t, x: fn(t).mish(x), [u(3, 4)]),
        "elu": (act.elu, lambda t, x: fn(t).elu(x), [away(3, 4)]),
        # ---- module ops (conv, pooling, embedding)
        "conv1d": (
            lambda x, w, b: fm.conv1d(x, w, b, stride=2, padding=1).tanh(),
            lambda t, x, w, b: fn(t).conv1d(x, w, b, stride=2, padding=1).tanh(),
            [u(2, 2, 7), u(3, 2, 3), u(3)],
        ),
        "conv2d_groups_dilation": (
            lambda x, w: fm.conv2d(x, w, None, padding=1, dilation=(1, 2), groups=2).square(),
            lambda t, x, w: fn(t).conv2d(x, w, None, padding=1, dilation=(1, 2), groups=2).square(),
            [u(1, 4, 4, 5), u(2, 2, 2, 2)],
        ),
        "conv_transpose2d": (
            lambda x, w, b: fm.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1).tanh(),
            lambda t, x, w, b: fn(t).conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1).tanh(),
            [u(1, 2, 3, 3), u(2, 3, 3, 3), u(3)],
        ),
        "max_pool2d": (
            lambda x: fm.max_pool2d(x, 2, stride=1).square(),
            lambda t, x: fn(t).max_pool2d(x, 2, stride=1).square(),
            [u(1, 2, 3, 4)],
        ),
        "avg_pool2d": (
            lambda x: fm.avg_pool2d(x, 2, stride=1, padding=1).exp(),
            lambda t, x: fn(t).avg_pool2d(x, 2, stride=1, padding=1).exp(),
            [u(1, 2, 3, 4)],
        ),
        "adaptive_avg_pool2d": (
            lambda x: fm.adaptive_avg_pool2d(x, (2, 3)).square(),
            lambda t, x: fn(t).adaptive_avg_pool2d(x, (2, 3)).square(),
            [u(1, 2, 5, 4)],
        ),
        "embedding": (
            lambda w, i: fm.embedding(w, i).tanh(),
            lambda t, w, i: fn(t).embedding(i, w).tanh(),
            [u(5, 3), ints([[0, 4, 4], [2, 1, 0]])],
        ),
    }


CASES = _cases()
# The ops of the elementwise gradient tables each case exercises (checked to cover them all).
COVERS = {
    UnaryOp.NEG: "neg",
    UnaryOp.ABS: "abs",
    UnaryOp.EXP: "exp",
    UnaryOp.LOG: "log",
    UnaryOp.LOG1P: "log1p",
    UnaryOp.EXPM1: "expm1",
    UnaryOp.SQRT: "sqrt",
    UnaryOp.RSQRT: "rsqrt",
    UnaryOp.RECIP: "recip",
    UnaryOp.SQUARE: "square",
    UnaryOp.SIN: "sin",
    UnaryOp.COS: "cos",
    UnaryOp.TAN: "tan",
    UnaryOp.TANH: "tanh",
    UnaryOp.SINH: "sinh",
    UnaryOp.COSH: "cosh",
    UnaryOp.ASIN: "asin",
    UnaryOp.ACOS: "acos",
    UnaryOp.ATAN: "atan",
    UnaryOp.ERF: "erf",
    UnaryOp.SIGN: "sign",
    UnaryOp.ROUND: "round",
    UnaryOp.FLOOR: "floor_ceil_trunc",
    UnaryOp.CEIL: "floor_ceil_trunc",
    UnaryOp.TRUNC: "floor_ceil_trunc",
    UnaryOp.LOG2: "log2",
    UnaryOp.LOG10: "log10",
    UnaryOp.EXP2: "exp2",
    UnaryOp.ASINH: "asinh",
    UnaryOp.ACOSH: "acosh",
    UnaryOp.ATANH: "atanh",
    BinaryOp.COPYSIGN: "copysign",
    BinaryOp.ADD: "add",
    BinaryOp.SUB: "sub",
    BinaryOp.MUL: "mul",
    BinaryOp.DIV: "div",
    BinaryOp.POW: "powf",
    BinaryOp.REMAINDER: "remainder",
    BinaryOp.ATAN2: "atan2",
    BinaryOp.MAXIMUM: "maximum",
    BinaryOp.MINIMUM: "minimum",
}


def _float_inputs(arrays):
    return [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]


def test_every_elementwise_rule_has_a_second_order_case():
    missing = [op for op in list(UNARY) + list(BINARY) if op not in COVERS]
    assert not missing, f"add second-order cases for {missing}"
    assert all(name in CASES for name in COVERS.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_matches_finite_differences(name):
    fn, _, arrays, *options = CASES[name]
    options = options[0] if options else {}
    wrt = _float_inputs(arrays)
    ours = ember_hvp(fn, arrays, wrt)
    numeric = numeric_hvp(fn, arrays, wrt, eps=options.get("eps", 1e-6))
    for i in wrt:
        np.testing.assert_allclose(
            ours[i], numeric[i], rtol=options.get("rtol", 1e-5), atol=1e-6, err_msg=f"{name}: input {i}"
        )


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_matches_torch(name, torch):
    fn, torch_fn, arrays, *options = CASES[name]
    options = options[0] if options else {}
    wrt = _float_inputs(arrays)
    ours = ember_hvp(fn, arrays, wrt)
    out_shape = fn(*[Tensor.from_data(a, device=Device.flex()) for a in arrays]).dims()
    theirs = torch_hvp(torch, torch_fn, arrays, wrt, out_shape)
    for i in wrt:
        np.testing.assert_allclose(
            ours[i], theirs[i], rtol=options.get("torch_rtol", 1e-9), atol=1e-11, err_msg=f"{name}: input {i}"
        )


@pytest.mark.parametrize(
    "name", ["exp", "mul_self", "tanh", "softmax", "sigmoid", "relu", "linear", "slice", "mse_loss", "conv1d"]
)
def test_second_derivative_with_balanced_checkpointing(name):
    """Balanced checkpointing recomputes memory-bound outputs during the first backward;
    the recomputed values enter the gradient graph as outputs of their own nodes."""
    fn, _, arrays, *_ = CASES[name]
    wrt = _float_inputs(arrays)
    plain = ember_hvp(fn, arrays, wrt)
    balanced = ember_hvp(fn, arrays, wrt, device=Device.flex().autodiff(Checkpointing.BALANCED))
    for i in wrt:
        np.testing.assert_allclose(balanced[i], plain[i], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["mul_self", "softmax", "linear", "conv1d", "log_softmax"])
def test_second_derivative_on_the_fusion_device(name):
    fn, _, arrays, *_ = CASES[name]
    wrt = _float_inputs(arrays)
    plain = ember_hvp(fn, arrays, wrt)
    fused = ember_hvp(fn, arrays, wrt, device=Device.flex().fusion().autodiff())
    for i in wrt:
        np.testing.assert_allclose(fused[i], plain[i], rtol=1e-10, atol=1e-12)

"""Every differentiable primitive's gradient against central finite differences
(float64), through the tensor API."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.backend.autodiff import Checkpointing
from ember.tensor import activation as act
from ember.tensor.layer_ops import linear
from ember.tensor.loss import mse_loss
from tests.autodiff.gradcheck import check_grad


def _cases():
    r = np.random.default_rng(42)

    def u(*shape, lo=-2.0, hi=2.0):
        return r.uniform(lo, hi, size=shape)

    def away_from_zero(*shape):
        return r.uniform(0.5, 2.0, size=shape) * r.choice([-1.0, 1.0], size=shape)

    return {
        # elementwise unary
        "neg": (lambda x: x.neg(), [u(3, 4)]),
        "abs": (lambda x: x.abs(), [away_from_zero(3, 4)]),
        "exp": (lambda x: x.exp(), [u(3, 4)]),
        "log": (lambda x: x.log(), [u(3, 4, lo=0.5, hi=3)]),
        "log1p": (lambda x: x.log1p(), [u(3, 4, lo=-0.5, hi=3)]),
        "expm1": (lambda x: x.expm1(), [u(3, 4)]),
        "sqrt": (lambda x: x.sqrt(), [u(3, 4, lo=0.5, hi=3)]),
        "rsqrt": (lambda x: x.rsqrt(), [u(3, 4, lo=0.5, hi=3)]),
        "recip": (lambda x: x.recip(), [away_from_zero(3, 4)]),
        "square": (lambda x: x.square(), [u(3, 4)]),
        "sin": (lambda x: x.sin(), [u(3, 4)]),
        "cos": (lambda x: x.cos(), [u(3, 4)]),
        "tan": (lambda x: x.tan(), [u(3, 4, lo=-1, hi=1)]),
        "tanh": (lambda x: x.tanh(), [u(3, 4)]),
        "sinh": (lambda x: x.sinh(), [u(3, 4)]),
        "cosh": (lambda x: x.cosh(), [u(3, 4)]),
        "asin": (lambda x: x.asin(), [u(3, 4, lo=-0.9, hi=0.9)]),
        "acos": (lambda x: x.acos(), [u(3, 4, lo=-0.9, hi=0.9)]),
        "atan": (lambda x: x.atan(), [u(3, 4)]),
        "erf": (lambda x: x.erf(), [u(3, 4)]),
        "round": (lambda x: x.round().add(x), [u(3, 4)]),
        "clamp": (lambda x: x.clamp(-0.5, 0.7), [u(4, 5)]),
        "clamp_min": (lambda x: x.clamp_min(0.1), [u(4, 5)]),
        # elementwise binary, with broadcasting
        "add": (lambda a, b: a.add(b), [u(3, 4), u(4)]),
        "sub": (lambda a, b: a.sub(b), [u(2, 1, 4), u(3, 1)]),
        "mul": (lambda a, b: a.mul(b), [u(3, 4), u(3, 1)]),
        "div": (lambda a, b: a.div(b), [u(3, 4), away_from_zero(1, 4)]),
        "powf": (lambda a, b: a.powf(b), [u(3, 4, lo=0.5, hi=2), u(3, 4)]),
        "powf_scalar": (lambda a: a.powf_scalar(2.5), [u(3, 4, lo=0.5, hi=2)]),
        "powi_scalar": (lambda a: a.powi_scalar(3), [u(3, 4)]),
        "rpow": (lambda a: 2.0**a, [u(3)]),
        "remainder": (lambda a, b: a.remainder(b), [u(3, 4, lo=0.1, hi=0.9) + 3, u(3, 4, lo=1.1, hi=1.9)]),
        "atan2": (lambda a, b: a.atan2(b), [u(3, 4), away_from_zero(3, 4)]),
        "maximum": (lambda a, b: a.maximum(b), [u(3, 4), u(3, 4)]),
        "minimum": (lambda a, b: a.minimum(b), [u(3, 4), u(4)]),
        "scalar_ops": (lambda a: a.add_scalar(1).mul_scalar(3).sub_scalar(2).div_scalar(4), [u(5)]),
        "rsub_rdiv": (lambda a: (1.0 - a) + 2.0 / a, [away_from_zero(5)]),
        # masks
        "mask_where": (lambda a, b: a.mask_where(a.greater_elem(0), b), [away_from_zero(3, 4), u(4)]),
        "mask_fill": (lambda a: a.mask_fill(a.lower_elem(0), 3.0), [away_from_zero(3, 4)]),
        "where": (lambda a, b: a.where(b.greater_elem(0), b), [u(3, 4), away_from_zero(3, 4)]),
        # matmul
        "matmul": (lambda a, b: a.matmul(b), [u(3, 4), u(4, 5)]),
        "matmul_batched": (lambda a, b: a.matmul(b), [u(2, 3, 4), u(2, 4, 5)]),
        "matmul_broadcast": (lambda a, b: a.matmul(b), [u(2, 1, 3, 4), u(3, 4, 2)]),
        "matmul_vector": (lambda a, b: a.matmul(b), [u(4), u(4, 3)]),
        "linear": (lambda x, w, b: linear(x, w, b), [u(5, 3), u(3, 4), u(4)]),
        "linear_batched": (lambda x, w, b: linear(x, w, b), [u(2, 5, 3), u(3, 4), u(4)]),
        "linear_no_bias": (lambda x, w: linear(x, w), [u(5, 3), u(3, 2)]),
        "mse_loss_mean": (lambda p, t: mse_loss(p, t), [u(4, 3), u(4, 3)]),
        "mse_loss_sum": (lambda p, t: mse_loss(p, t, mean=False), [u(6), u(6)]),
        # reductions
        "sum": (lambda x: x.sum(), [u(3, 4)]),
        "sum_dim": (lambda x: x.sum_dim(1), [u(3, 4, 2)]),
        "mean": (lambda x: x.mean(), [u(3, 4)]),
        "mean_dim": (lambda x: x.mean_dim(0), [u(3, 4)]),
        "prod": (lambda x: x.prod_dim(1), [u(3, 4)]),
        "prod_with_zero": (lambda x: x.prod_dim(1), [np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.0, 2.0, 3.0]])]),
        "max": (lambda x: x.max(), [u(3, 4)]),
        "min_dim": (lambda x: x.min_dim(1), [u(3, 4)]),
        "max_dim_with_indices": (lambda x: x.max_dim_with_indices(0)[0], [u(3, 4)]),
        "var": (lambda x: x.var(1), [u(3, 4)]),
        "var_bias": (lambda x: x.var_bias(0), [u(3, 4)]),
        "logsumexp": (lambda x: x.logsumexp(1), [u(3, 4)]),
        "norm": (lambda x: x.norm(), [u(3, 4)]),
        "cumsum": (lambda x: x.cumsum(1), [u(3, 4)]),
        "cumprod": (lambda x: x.cumprod(1), [u(3, 4)]),
        "cumprod_with_zero": (lambda x: x.cumprod(1), [np.array([[1.5, 0.0, 2.0, -1.0], [0.5, 2.0, 0.0, 0.0]])]),
        "cummax": (lambda x: x.cummax(1), [u(3, 5)]),
        "cummin": (lambda x: x.cummin(0), [u(4, 3)]),
        "sort": (lambda x: x.sort(1), [u(3, 5)]),
        "sort_descending": (lambda x: x.sort(0, descending=True), [u(4, 3)]),
        "topk": (lambda x: x.topk(2, 1), [u(3, 5)]),
        # layout
        "reshape": (lambda x: x.reshape([4, 3]).mul(x.reshape([4, 3])), [u(3, 4)]),
        "permute": (lambda x: x.permute([2, 0, 1]), [u(2, 3, 4)]),
        "transpose": (lambda x: x.transpose().matmul(x), [u(3, 4)]),
        "flip": (lambda x: x.flip([0, 1]).mul(x), [u(3, 4)]),
        "expand": (lambda x: x.expand([2, 3, 4]), [u(3, 1)]),
        "repeat_dim": (lambda x: x.repeat_dim(1, 3), [u(2, 2)]),
        "getitem": (lambda x: x[1:, ::-2], [u(3, 5)]),
        "slice": (lambda x: x.slice([(0, 2), (1, 4, 2)]), [u(3, 5)]),
        "slice_assign": (lambda x, v: x.slice_assign([(1, 3), None], v), [u(4, 3), u(2, 3)]),
        "narrow_chunk": (lambda x: x.chunk(2, 1)[1].mul(x.narrow(1, 0, 2)), [u(3, 4)]),
        "cat": (lambda a, b: Tensor.cat([a, b, a], 1), [u(2, 3), u(2, 1)]),
        "stack": (lambda a, b: Tensor.stack([a, b], 0), [u(2, 3), u(2, 3)]),
        "pad_constant": (lambda x: x.pad((1, 2, 0, 1), value=0.5), [u(2, 3)]),
        "pad_reflect": (lambda x: x.pad((2, 1), mode="reflect"), [u(2, 4)]),
        "pad_edge": (lambda x: x.pad((2, 1), mode="edge"), [u(2, 4)]),
        "tril": (lambda x: x.tril(), [u(3, 3)]),
        "triu": (lambda x: x.triu(1), [u(3, 4)]),
        "squeeze_unsqueeze": (lambda x: x.unsqueeze(0).squeeze(0).flatten(), [u(2, 3)]),
        # indexing
        "gather": (lambda x: x.gather(1, Tensor.from_ints([[0, 2, 2], [1, 1, 0]], device=x.device)), [u(2, 3)]),
        "scatter": (
            lambda x, v: x.scatter(1, Tensor.from_ints([[0, 0], [2, 1]], device=x.device), v),
            [u(2, 3), u(2, 2)],
        ),
        "select": (lambda x: x.select(0, Tensor.from_ints([2, 0, 2], device=x.device)), [u(3, 4)]),
        "select_assign": (
            lambda x, v: x.select_assign(1, Tensor.from_ints([1, 1], device=x.device), v),
            [u(3, 4), u(3, 2)],
        ),
        # activations
        "relu": (act.relu, [away_from_zero(3, 4)]),
        "leaky_relu": (lambda x: act.leaky_relu(x, 0.2), [away_from_zero(3, 4)]),
        "sigmoid": (act.sigmoid, [u(3, 4)]),
        "softplus": (act.softplus, [u(3, 4, lo=-5, hi=5)]),
        "log_sigmoid": (act.log_sigmoid, [u(3, 4)]),
        "silu": (act.silu, [u(3, 4)]),
        "gelu": (act.gelu, [u(3, 4)]),
        "gelu_tanh": (act.gelu_tanh, [u(3, 4)]),
        "mish": (act.mish, [u(3, 4)]),
        "elu": (act.elu, [away_from_zero(3, 4)]),
        "selu": (act.selu, [away_from_zero(3, 4)]),
        "celu": (lambda x: act.celu(x, 0.5), [away_from_zero(3, 4)]),
        "hard_sigmoid": (act.hard_sigmoid, [u(3, 4)]),
        "hard_swish": (act.hard_swish, [u(3, 4, lo=-2.9, hi=2.9)]),
        "prelu": (act.prelu, [away_from_zero(2, 3, 4), u(3, lo=0.1, hi=0.5)]),
        "glu": (lambda x: act.glu(x, 1), [u(2, 4)]),
        "softmax": (lambda x: act.softmax(x, 1), [u(3, 5)]),
        "log_softmax": (lambda x: act.log_softmax(x, 0), [u(3, 5)]),
        "softmin": (lambda x: act.softmin(x, 1), [u(3, 5)]),
        "quiet_softmax": (lambda x: act.quiet_softmax(x, 1), [u(3, 5)]),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    fn, arrays = CASES[name]
    check_grad(fn, arrays, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "name",
    ["exp", "mul", "matmul", "gelu", "softmax", "pad_reflect", "slice", "sigmoid", "relu", "linear", "mse_loss_mean"],
)
def test_gradient_with_balanced_checkpointing(name, flex):
    fn, arrays = CASES[name]
    check_grad(fn, arrays, device=flex.autodiff(Checkpointing.BALANCED))


def test_gradient_through_shared_input_accumulates(flex, rng):
    check_grad(lambda x: x.mul(x).add(x.exp()).add(x), [rng.uniform(-2.0, 2.0, size=3)])


def test_cast_between_floats_passes_gradient_back(flex, rng):
    x = Tensor.from_data(rng.uniform(-2.0, 2.0, size=3), device=flex.autodiff()).require_grad()
    y = x.cast("float32").mul_scalar(2.0).sum()
    g = x.grad(y.backward())
    assert g.dtype.value == "float64" and g.tolist() == [2.0, 2.0, 2.0]
    assert not x.cast("int64").is_require_grad()


def test_fused_and_composite_paths_agree(flex):
    """The fused linear/mse kernels and their composite fallbacks give the same values
    and gradients (float16 inputs take the composite path on flex)."""
    rng = np.random.default_rng(5)
    x, w, b, t = (
        rng.standard_normal((6, 3)),
        rng.standard_normal((3, 2)),
        rng.standard_normal(2),
        rng.standard_normal((6, 2)),
    )
    ad = flex.autodiff()

    def run(dtype):
        tensors = [Tensor.from_data(a, device=ad, dtype=dtype).require_grad() for a in (x, w, b)]
        target = Tensor.from_data(t, device=ad, dtype=dtype)
        loss = mse_loss(linear(*tensors), target)
        grads = loss.backward()
        return [loss.cast("float64").to_numpy()] + [p.grad(grads).cast("float64").to_numpy() for p in tensors]

    for fused, composite in zip(run("float32"), run("float16")):
        np.testing.assert_allclose(fused, composite, rtol=2e-2, atol=2e-2)

"""``autocast``: op dtypes against ``torch.autocast`` (bfloat16, PyTorch's CPU lists)
and against PyTorch's documented CUDA lists (float16); gradients reach float32
parameters; scoping by device and thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.amp import BFLOAT16_POLICY, FLOAT16_POLICY, autocast, policy_for
from ember.errors import DTypeError
from ember.nn import GroupNormConfig, LayerNormConfig, LinearConfig, RmsNormConfig
from ember.nn.loss import (
    BinaryCrossEntropyLossConfig,
    CosineEmbeddingLossConfig,
    CrossEntropyLossConfig,
    HuberLossConfig,
    KLDivLossConfig,
    L1Loss,
    MseLoss,
    SmoothL1LossConfig,
)
from ember.tensor import activation as act
from ember.tensor import layer_ops as fm


def _ops():
    """name -> (ember fn, torch fn, input shapes, class in PyTorch's CUDA lists).

    Float inputs come first; an int tensor of targets/indices is appended where noted
    by the fn itself."""

    def t_f(torch):
        return torch.nn.functional

    return {
        "matmul": (lambda a, b: a.matmul(b), lambda t, a, b: a @ b, [(3, 4), (4, 5)], "lower"),
        "linear": (
            lambda x, w, b: fm.linear(x, w, b),
            lambda t, x, w, b: t_f(t).linear(x, w.T, b),
            [(3, 4), (4, 5), (5,)],
            "lower",
        ),
        "conv1d": (lambda x, w: fm.conv1d(x, w), lambda t, x, w: t_f(t).conv1d(x, w), [(1, 2, 8), (3, 2, 3)], "lower"),
        "conv2d": (
            lambda x, w, b: fm.conv2d(x, w, b),
            lambda t, x, w, b: t_f(t).conv2d(x, w, b),
            [(1, 2, 5, 5), (3, 2, 3, 3), (3,)],
            "lower",
        ),
        "conv_transpose2d": (
            lambda x, w: fm.conv_transpose2d(x, w),
            lambda t, x, w: t_f(t).conv_transpose2d(x, w),
            [(1, 2, 4, 4), (2, 3, 3, 3)],
            "lower",
        ),
        "prelu": (lambda x, a: act.prelu(x, a), lambda t, x, a: t_f(t).prelu(x, a), [(2, 3), (3,)], "lower"),
        "softmax": (lambda x: act.softmax(x, 1), lambda t, x: x.softmax(1), [(3, 4)], "float32"),
        "log_softmax": (lambda x: act.log_softmax(x, 1), lambda t, x: x.log_softmax(1), [(3, 4)], "float32"),
        "sum": (lambda x: x.sum(), lambda t, x: x.sum(), [(3, 4)], "float32"),
        "sum_dim": (lambda x: x.sum_dim(1), lambda t, x: x.sum(1), [(3, 4)], "float32"),
        "mean": (lambda x: x.mean(), lambda t, x: x.mean(), [(3, 4)], "follow"),
        "prod": (lambda x: x.prod(), lambda t, x: x.prod(), [(3, 4)], "float32"),
        "cumsum": (lambda x: x.cumsum(1), lambda t, x: x.cumsum(1), [(3, 4)], "float32"),
        "cumprod": (lambda x: x.cumprod(1), lambda t, x: x.cumprod(1), [(3, 4)], "float32"),
        "logsumexp": (lambda x: x.logsumexp(1), lambda t, x: x.logsumexp(1), [(3, 4)], "float32"),
        "norm": (lambda x: x.norm(), lambda t, x: x.norm(), [(3, 4)], "float32"),
        "var": (lambda x: x.var(1), lambda t, x: x.var(1), [(3, 4)], "follow"),
        "max": (lambda x: x.max(), lambda t, x: x.max(), [(3, 4)], "follow"),
        "exp": (lambda x: x.exp(), lambda t, x: x.exp(), [(3, 4)], "float32"),
        "log": (lambda x: x.abs().log(), lambda t, x: x.abs().log(), [(3, 4)], "float32"),
        "rsqrt": (lambda x: x.abs().rsqrt(), lambda t, x: x.abs().rsqrt(), [(3, 4)], "float32"),
        "pow": (lambda x: x.powf_scalar(2.5), lambda t, x: x.abs().pow(2.5) * 0 + x.pow(2.5), [(3, 4)], "float32"),
        "sqrt": (lambda x: x.abs().sqrt(), lambda t, x: x.abs().sqrt(), [(3, 4)], "follow"),
        "tanh": (lambda x: x.tanh(), lambda t, x: x.tanh(), [(3, 4)], "follow"),
        "relu": (act.relu, lambda t, x: x.relu(), [(3, 4)], "follow"),
        "gelu": (act.gelu, lambda t, x: t_f(t).gelu(x), [(3, 4)], "follow"),
        "sigmoid": (act.sigmoid, lambda t, x: x.sigmoid(), [(3, 4)], "follow"),
        "softplus": (act.softplus, lambda t, x: t_f(t).softplus(x), [(3, 4)], "float32"),
        "add": (lambda a, b: a.add(b), lambda t, a, b: a + b, [(3, 4), (3, 4)], "follow"),
        "max_pool2d": (lambda x: fm.max_pool2d(x, 2), lambda t, x: t_f(t).max_pool2d(x, 2), [(1, 2, 4, 4)], "follow"),
        "avg_pool2d": (lambda x: fm.avg_pool2d(x, 2), lambda t, x: t_f(t).avg_pool2d(x, 2), [(1, 2, 4, 4)], "follow"),
        "adaptive_avg_pool2d": (
            lambda x: fm.adaptive_avg_pool2d(x, 2),
            lambda t, x: t_f(t).adaptive_avg_pool2d(x, 2),
            [(1, 2, 4, 4)],
            "follow",
        ),
        "mse_loss": (
            lambda a, b: MseLoss().forward(a, b),
            lambda t, a, b: t_f(t).mse_loss(a, b),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "l1_loss": (
            lambda a, b: L1Loss().forward(a, b),
            lambda t, a, b: t_f(t).l1_loss(a, b),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "smooth_l1_loss": (
            lambda a, b: SmoothL1LossConfig().init().forward(a, b),
            lambda t, a, b: t_f(t).smooth_l1_loss(a, b),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "huber_loss": (
            lambda a, b: HuberLossConfig(1.0).init().forward(a, b),
            lambda t, a, b: t_f(t).huber_loss(a, b),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "bce_with_logits": (
            lambda a, b: BinaryCrossEntropyLossConfig(logits=True).init().forward(a, act.sigmoid(b)),
            lambda t, a, b: t_f(t).binary_cross_entropy_with_logits(a, b.sigmoid()),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "cross_entropy": (
            lambda a: CrossEntropyLossConfig().init().forward(a, Tensor.from_ints([0, 3, 1], device=a.device)),
            lambda t, a: t_f(t).cross_entropy(a, t.tensor([0, 3, 1])),
            [(3, 4)],
            "float32",
        ),
        "kl_div": (
            lambda a, b: KLDivLossConfig().init().forward(a, b.abs()),
            lambda t, a, b: t_f(t).kl_div(a, b.abs(), reduction="batchmean"),
            [(3, 4), (3, 4)],
            "float32",
        ),
        "cosine_embedding_loss": (
            lambda a, b: (
                CosineEmbeddingLossConfig().init().forward(a, b, Tensor.from_ints([1, -1, 1], device=a.device))
            ),
            lambda t, a, b: t_f(t).cosine_embedding_loss(a, b, t.tensor([1, -1, 1])),
            [(3, 4), (3, 4)],
            "float32",
        ),
    }


OPS = _ops()
# Norm layers carry float32 affine parameters: ember promotes, so a half input gives a
# float32 output with or without autocast (PyTorch's CPU kernels return the input's
# dtype). Under float16 PyTorch's CUDA lists run them in float32: the same result.
NORMS = {
    "layer_norm": (lambda device: LayerNormConfig(4).init(device), [(3, 4)]),
    "group_norm": (lambda device: GroupNormConfig(2, 4).init(device), [(2, 4, 3)]),
    "rms_norm": (lambda device: RmsNormConfig(4).init(device), [(3, 4)]),
}


def _inputs(shapes, dtype, device, seed=0):
    rng = np.random.default_rng(seed)
    return [Tensor.from_data(rng.uniform(0.2, 1.0, s).astype(np.float32), device=device).cast(dtype) for s in shapes]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("input_dtype", ["float32", "bfloat16"])
def test_bfloat16_op_dtypes_match_torch_autocast_on_cpu(name, input_dtype, torch):
    fn, torch_fn, shapes, _ = OPS[name]
    device = Device.flex().autodiff()
    inputs = _inputs(shapes, input_dtype, device)
    with ember.autocast(device, "bfloat16"):
        ours = fn(*inputs)
    torch_inputs = [torch.tensor(x.cast("float32").to_numpy()).to(getattr(torch, input_dtype)) for x in inputs]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs = torch_fn(torch, *torch_inputs)
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (name, input_dtype)


# ember composites over ``sum`` (in float16's float32 list) compute in float32 under
# float16 where PyTorch has a kernel of their own that is in no list.
SUM_COMPOSITES = {"var"}


def _cuda_list_dtype(name: str, kind: str, inputs: list[Tensor], low: str) -> str:
    """The dtype PyTorch's documented CUDA autocast lists give."""
    if kind == "lower":
        return low
    if kind == "float32" or name in SUM_COMPOSITES:
        return "float32"
    dtypes = {str(x.dtype) for x in inputs}
    return dtypes.pop() if len(dtypes) == 1 else "float32"


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("input_dtype", ["float32", "float16"])
def test_float16_op_dtypes_follow_torch_cuda_lists(name, input_dtype):
    fn, _, shapes, kind = OPS[name]
    device = Device.flex().autodiff()
    inputs = _inputs(shapes, input_dtype, device)
    with ember.autocast(device, "float16"):
        ours = fn(*inputs)
    assert str(ours.dtype) == _cuda_list_dtype(name, kind, inputs, "float16"), (name, input_dtype)


@pytest.mark.parametrize("name", sorted(NORMS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_norm_layers_compute_and_return_float32(name, dtype):
    make, shapes = NORMS[name]
    device = Device.flex().autodiff()
    layer = make(device)
    (x,) = _inputs(shapes, dtype, device)
    with ember.autocast(device, dtype):
        assert layer(x).dtype.value == "float32"


def test_policies_name_the_ops():
    assert policy_for("bf16") is BFLOAT16_POLICY and policy_for(ember.float16) is FLOAT16_POLICY
    assert BFLOAT16_POLICY.target("linear") is ember.bfloat16 and BFLOAT16_POLICY.target("softmax") is None
    assert FLOAT16_POLICY.target("softmax") is ember.float32 and FLOAT16_POLICY.target("relu") is None
    with pytest.raises(DTypeError, match="bfloat16 or float16"):
        policy_for("float64")
    with pytest.raises(DTypeError, match="Device"), autocast("flex", "bfloat16"):
        pass


def test_float64_inputs_are_never_cast(flex):
    x = Tensor.ones([2, 2], device=flex, dtype="float64")
    with ember.autocast(flex, "bfloat16"):
        assert x.matmul(x).dtype is ember.float64


def test_gradients_reach_float32_master_parameters():
    device = Device.flex().autodiff()
    layer = LinearConfig(4, 3).init(device)
    x = Tensor.ones([2, 4], device=device)
    with ember.autocast(device, "bfloat16"):
        out = layer(x)
        loss = CrossEntropyLossConfig().init().forward(out, Tensor.from_ints([0, 2], device=device))
    assert out.dtype is ember.bfloat16 and loss.dtype is ember.float32
    grads = loss.backward()
    g = layer.weight.val().grad(grads)
    assert g.dtype is ember.float32 and layer.weight.val().dtype is ember.float32
    reference = CrossEntropyLossConfig().init().forward(layer(x), Tensor.from_ints([0, 2], device=device)).backward()
    np.testing.assert_allclose(g.to_numpy(), layer.weight.val().grad(reference).to_numpy(), rtol=2e-2, atol=2e-3)


def test_autocast_is_scoped_to_its_device_nesting_and_thread():
    flex = Device.flex()
    ad = flex.autodiff()
    x = Tensor.ones([2, 2], device=ad)
    y = Tensor.ones([2, 2], device=Device.flex().fusion())
    seen = []
    with ember.autocast(flex, "bfloat16"):  # the family: flex, its autodiff and fusion wrappers
        assert x.matmul(x).dtype is ember.bfloat16
        assert y.matmul(y).dtype is ember.bfloat16
        with ember.autocast(ad, enabled=False):
            assert x.matmul(x).dtype is ember.float32
        assert x.matmul(x).dtype is ember.bfloat16
        thread = threading.Thread(target=lambda: seen.append(x.matmul(x).dtype))
        thread.start()
        thread.join()
    assert seen == [ember.float32]  # autocast state is per thread
    assert x.matmul(x).dtype is ember.float32
    from ember.tensor import autocast as state

    assert state.ACTIVE == 0


def test_autocast_on_the_gpu_backend():
    """cube holds float16 natively when the adapter has shader-f16 (else in 32-bit
    words) and bfloat16 in words; both compute in f32 and round on store."""
    from tests.conftest import make_device

    gpu = make_device("cube+autodiff")
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    for dtype in ("float16", "bfloat16"):
        a = Tensor.from_data(a_np, device=gpu).require_grad()
        b = Tensor.from_data(b_np, device=gpu)
        with ember.autocast(gpu, dtype):
            out = a.matmul(b)
            loss = MseLoss().forward(out, Tensor.zeros([8, 4], device=gpu))
        assert out.dtype.value == dtype and loss.dtype is ember.float32
        g = a.grad(loss.backward())
        assert g.dtype is ember.float32
        expected = 2 * (a_np @ b_np) @ b_np.T / 32
        np.testing.assert_allclose(g.to_numpy(), expected, rtol=5e-2, atol=5e-2)


def test_compiled_functions_guard_on_the_autocast_state():
    device = Device.flex().autodiff()
    layer = LinearConfig(4, 3).init(device)
    x = Tensor.ones([2, 4], device=device)
    step = ember.compile(lambda m, x: m(x))
    plain = step(layer, x)
    with ember.autocast(device, "bfloat16"):
        mixed = step(layer, x)
        mixed_again = step(layer, x)
    assert plain.dtype is ember.float32 and mixed.dtype is ember.bfloat16 and mixed_again.dtype is ember.bfloat16
    assert step(layer, x).dtype is ember.float32
    assert step.stats["traces"] == 2 and step.stats["replays"] == 2 and step.stats["eager"] == 0

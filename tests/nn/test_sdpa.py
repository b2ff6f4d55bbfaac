"""``scaled_dot_product_attention`` beyond the PyTorch comparisons of the op suite:
flex's fused kernel against the composite (values, gradients, dropout, the weights'
own gradient, balanced checkpointing), fully masked rows, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.autodiff.checkpoint import Checkpointing
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.nn import MhaInput, MultiHeadAttentionConfig
from ember.tensor.attention import attention, scaled_dot_product_attention
from tests.conftest import assert_close
from tests.nn.parity import rand


def _run(device, arrays, **options):
    tensors = [Tensor.from_data(a, device=device).require_grad() for a in arrays]
    bias = options.pop("bias", None)
    if bias is not None:
        options["bias"] = Tensor.from_data(bias, device=device).require_grad()
        tensors.append(options["bias"])
    context, weights = attention(*tensors[:3], **options)
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal(context.dims()).astype(np.float32)
    w2 = rng.standard_normal(weights.dims()).astype(np.float32)
    loss = (
        context.mul(Tensor.from_data(w1, device=device))
        .sum()
        .add(weights.mul(Tensor.from_data(w2, device=device)).sum())
    )
    grads = loss.backward()
    return context.to_numpy(), weights.to_numpy(), [t.grad(grads).to_numpy() for t in tensors]


OPTIONS = {
    "plain": {},
    "mask": {"mask": "mask"},
    "causal": {"causal": True},
    "bias": {"bias": "bias"},
    "min_float_fill": {"mask": "mask", "fill": -1.0e4},
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_fused_kernel_matches_the_composite(name, monkeypatch, rng):
    arrays = [rand(rng, 2, 3, 4, 8), rand(rng, 2, 3, 5, 8), rand(rng, 2, 3, 5, 6)]
    mask = rng.random((4, 5)) > 0.6
    mask[2] = True  # a row with every key hidden
    options = dict(OPTIONS[name])
    if options.get("mask") == "mask":
        options["mask"] = Tensor.from_data(mask, device=Device.flex().autodiff())
    if options.get("bias") == "bias":
        options["bias"] = rand(rng, 3, 4, 5)
    device = Device.flex().autodiff()
    fused = _run(device, arrays, **dict(options))
    from ember.backend.flex.backend import FlexBackend

    monkeypatch.setattr(FlexBackend, "attention", lambda self, *args: NotImplemented)
    composite = _run(device, arrays, **dict(options))
    for a, b in zip([fused[0], fused[1], *fused[2]], [composite[0], composite[1], *composite[2]]):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_row_with_every_key_hidden_attends_to_nothing(device, torch, rng):
    q, k, v = rand(rng, 1, 3, 4), rand(rng, 1, 5, 4), rand(rng, 1, 5, 2)
    keep = np.ones((3, 5), dtype=bool)
    keep[1] = False
    out = scaled_dot_product_attention(
        *(Tensor.from_data(a, device=device) for a in (q, k, v)), attn_mask=Tensor.from_data(keep, device=device)
    )
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=torch.from_numpy(keep)
    )
    assert_close(out, expected.numpy(), atol=1e-6)
    assert out.to_numpy()[0, 1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("fused", [True, False])
def test_dropout_draws_the_same_mask_on_both_paths(fused, monkeypatch, rng):
    device = Device.flex().autodiff()
    if not fused:
        from ember.backend.flex.backend import FlexBackend

        monkeypatch.setattr(FlexBackend, "attention", lambda self, *args: NotImplemented)
    q, k, v = (Tensor.from_data(a, device=device) for a in (rand(rng, 2, 4, 8), rand(rng, 2, 6, 8), rand(rng, 2, 6, 3)))
    device.seed(5)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    device.seed(5)
    keep = Tensor.random([2, 4, 6], __import__("ember").Distribution.bernoulli(0.6), device=device).mul_scalar(1 / 0.6)
    weights = attention(q, k, v)[1]
    assert_close(out, weights.mul(keep).matmul(v).to_numpy(), atol=1e-6)


def test_balanced_checkpointing_gives_the_same_gradients(rng):
    arrays = [rand(rng, 2, 4, 8), rand(rng, 2, 5, 8), rand(rng, 2, 5, 3)]
    plain = _run(Device.flex().autodiff(), arrays, causal=True)
    balanced = _run(Device.flex().autodiff(Checkpointing.BALANCED), arrays, causal=True)
    for a, b in zip(plain[2], balanced[2]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("quiet", [False, True])
def test_mha_weights_carry_gradients(quiet, rng):
    device = Device.flex().autodiff()
    device.seed(0)
    mha = MultiHeadAttentionConfig(8, 2, dropout=0.0, quiet_softmax=quiet).init(device)
    x = Tensor.from_data(rand(rng, 2, 3, 8), device=device).require_grad()
    out = mha(MhaInput.self_attn(x))
    grads = out.weights.mul(out.weights).sum().backward()
    g = x.grad(grads)
    assert g is not None and np.abs(g.to_numpy()).sum() > 0


def test_bad_calls_raise_clear_errors(flex, rng):
    q, k = Tensor.from_data(rand(rng, 2, 4, 8), device=flex), Tensor.from_data(rand(rng, 2, 5, 7), device=flex)
    with pytest.raises(ShapeError, match="L, E"):
        scaled_dot_product_attention(q, k, k)
    with pytest.raises(ValueRangeError, match="not both"):
        scaled_dot_product_attention(q, q, q, attn_mask=Tensor.ones([4, 4], device=flex).bool(), is_causal=True)
    with pytest.raises(DTypeError, match="bool"):
        attention(q, q, q, mask=Tensor.ones([4, 4], device=flex))
    with pytest.raises(ShapeError, match="broadcast"):
        scaled_dot_product_attention(q, q, q, attn_mask=Tensor.ones([3, 4], device=flex))
    with pytest.raises(ValueRangeError, match="dropout"):
        attention(q, q, q, dropout=1.5)
    assert math.isclose(
        float(scaled_dot_product_attention(q, q, q, scale=0.0).sum().into_scalar()),
        float(q.mean_dim(1).expand([2, 4, 8]).sum().into_scalar()),
        rel_tol=1e-5,
    )

"""``MultiHeadAttention`` and ``TransformerEncoder`` called as a PyTorch user calls
them: a tensor for self-attention, masks without batch or head dims (as
``generate_autoregressive_mask`` gives them, batch 1 or the batch), ``causal=True``;
all give what the ``MhaInput`` form gives, gradients included."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import DTypeError, ShapeError
from ember.nn import MhaInput, MultiHeadAttentionConfig
from ember.nn.attention import generate_autoregressive_mask
from ember.nn.transformer import TransformerEncoderConfig, TransformerEncoderInput


def _x(device, batch=3, seq=5, d=8):
    data = np.random.default_rng(15).standard_normal((batch, seq, d)).astype(np.float32)
    return Tensor.from_data(data, device=device).require_grad()


def _run(fn, device):
    x = _x(device)
    out = fn(x)
    grads = (
        out.mul(
            Tensor.from_data(np.random.default_rng(16).standard_normal(out.dims()).astype(np.float32), device=device)
        )
        .sum()
        .backward()
    )
    return out.to_numpy(), x.grad(grads).to_numpy()


@pytest.mark.parametrize("quiet", [False, True])
def test_tensor_masks_and_causal_agree_with_mha_input(quiet):
    device = Device.flex().autodiff()
    device.seed(1)
    mha = MultiHeadAttentionConfig(8, 2, dropout=0.0, quiet_softmax=quiet).init(device)
    full = generate_autoregressive_mask(3, 5, device=device)
    reference = _run(lambda x: mha(MhaInput.self_attn(x).with_mask_attn(full)).context, device)
    variants = {
        "tensor, [B, T, T]": lambda x: mha(x, mask=full).context,
        "tensor, [1, T, T]": lambda x: mha(x, mask=generate_autoregressive_mask(1, 5, device=device)).context,
        "tensor, [T, T]": lambda x: (
            mha(x, mask=generate_autoregressive_mask(1, 5, device=device).reshape([5, 5])).context
        ),
        "tensor, [B, 1, T, T]": lambda x: mha(x, mask=full.unsqueeze_dim(1)).context,
        "causal": lambda x: mha(x, causal=True).context,
        "MhaInput with [1, T, T]": lambda x: (
            mha(MhaInput.self_attn(x).with_mask_attn(generate_autoregressive_mask(1, 5, device=device))).context
        ),
    }
    for name, fn in variants.items():
        out, grad = _run(fn, device)
        np.testing.assert_allclose(out, reference[0], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(grad, reference[1], rtol=1e-5, atol=1e-6, err_msg=name)


def test_padding_with_a_tensor_and_unpacking():
    device = Device.flex()
    mha = MultiHeadAttentionConfig(8, 2, dropout=0.0).init(device)
    x = _x(device).detach()
    pad = Tensor.from_bools([[False] * 4 + [True]] * 3, device=device)
    a = mha(x, mask_pad=pad)
    b = mha(MhaInput.self_attn(x).with_mask_pad(pad))
    np.testing.assert_array_equal(a.context.to_numpy(), b.context.to_numpy())
    context, weights = mha(x, mask_pad=pad)  # PyTorch's (output, weights) pair
    assert context.dims() == [3, 5, 8] and weights.dims() == [3, 2, 5, 5]
    assert np.abs(weights.to_numpy()[..., 4]).max() < 1e-6


def test_encoder_with_a_tensor_and_causal():
    device = Device.flex().autodiff()
    device.seed(2)
    encoder = TransformerEncoderConfig(8, 16, 2, 2, dropout=0.0, norm_first=True).init(device)
    mask = generate_autoregressive_mask(3, 5, device=device)
    reference = _run(lambda x: encoder(TransformerEncoderInput(x).with_mask_attn(mask)), device)
    for name, fn in {
        "mask": lambda x: encoder(x, mask=mask),
        "mask [1, T, T]": lambda x: encoder(x, mask=generate_autoregressive_mask(1, 5, device=device)),
        "causal": lambda x: encoder(x, causal=True),
    }.items():
        out, grad = _run(fn, device)
        np.testing.assert_allclose(out, reference[0], rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(grad, reference[1], rtol=1e-5, atol=1e-5, err_msg=name)


def test_wrong_masks_and_inputs_name_the_shapes():
    device = Device.flex()
    mha = MultiHeadAttentionConfig(8, 2, dropout=0.0).init(device)
    x = _x(device).detach()
    with pytest.raises(ShapeError, match=r"mask_attn must be \[seq_q=5, seq_k=5\]"):
        mha(x, mask=generate_autoregressive_mask(2, 5, device=device))  # batch 2 for a batch of 3
    with pytest.raises(ShapeError, match="mask_attn must be"):
        mha(x, mask=generate_autoregressive_mask(1, 4, device=device))
    with pytest.raises(DTypeError, match="bool Tensor"):
        mha(x, mask=Tensor.zeros([5, 5], device=device))
    with pytest.raises(DTypeError, match="inside the MhaInput"):
        mha(MhaInput.self_attn(x), mask=generate_autoregressive_mask(1, 5, device=device))
    with pytest.raises(DTypeError, match="MhaInput or a Tensor"):
        mha([x])

"""Multi-head attention, the transformer encoder (pre- and post-norm), the
position-wise feed-forward block and the positional encodings against PyTorch
(with the weight layouts mapped: ember's Linear weight is ``[d_in, d_out]``)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ShapeError
from ember.nn import (
    LayerNorm,
    MhaInput,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    PositionalEncodingConfig,
    PositionWiseFeedForwardConfig,
    RotaryEncodingConfig,
    TransformerEncoderConfig,
    TransformerEncoderInput,
    generate_autoregressive_mask,
    generate_padding_mask,
)
from tests.conftest import assert_close, import_torch
from tests.nn.parity import (
    assert_grad,
    autodiff_of,
    check_layer,
    leaf,
    param,
    rand,
    to_torch,
    torch_linear,
    weighted_backward,
)


def _mha_grads(mha, t_mha):
    """``(ember parameter, torch's gradient in ember's layout)`` for every parameter."""
    d = t_mha.embed_dim
    g_w, g_b = t_mha.in_proj_weight.grad.numpy(), t_mha.in_proj_bias.grad.numpy()
    pairs = []
    for i, linear in enumerate((mha.query, mha.key, mha.value)):
        pairs += [(linear.weight, g_w[i * d : (i + 1) * d].T), (linear.bias, g_b[i * d : (i + 1) * d])]
    pairs += [
        (mha.output.weight, t_mha.out_proj.weight.grad.numpy().T),
        (mha.output.bias, t_mha.out_proj.bias.grad.numpy()),
    ]
    return pairs


def _encoder_layer_grads(layer, t_layer):
    pairs = _mha_grads(layer.mha, t_layer.self_attn)
    for ours, theirs in ((layer.pwff.linear_inner, t_layer.linear1), (layer.pwff.linear_outer, t_layer.linear2)):
        pairs += [(ours.weight, theirs.weight.grad.numpy().T), (ours.bias, theirs.bias.grad.numpy())]
    for ours, theirs in ((layer.norm_1, t_layer.norm1), (layer.norm_2, t_layer.norm2)):
        pairs += [(ours.gamma, theirs.weight.grad.numpy()), (ours.beta, theirs.bias.grad.numpy())]
    return pairs


def _mha_from_torch(t_mha, device, n_heads, dropout=0.0):
    d = t_mha.embed_dim
    w, b = t_mha.in_proj_weight, t_mha.in_proj_bias
    template = MultiHeadAttentionConfig(d, n_heads, dropout=dropout).init(device)
    return MultiHeadAttention(
        query=torch_linear(w[:d], b[:d], device),
        key=torch_linear(w[d : 2 * d], b[d : 2 * d], device),
        value=torch_linear(w[2 * d :], b[2 * d :], device),
        output=torch_linear(t_mha.out_proj.weight, t_mha.out_proj.bias, device),
        dropout=template.dropout,
        n_heads=n_heads,
    )


@pytest.mark.torch
@pytest.mark.parametrize("masks", ["none", "pad", "causal", "both"])
def test_mha_matches_torch(device, masks, rng):
    torch = import_torch()
    torch.manual_seed(0)
    batch, seq_q, seq_k, d, heads = 2, 3, 5, 8, 2
    t_mha = torch.nn.MultiheadAttention(d, heads, batch_first=True)
    ad = autodiff_of(device)
    mha = _mha_from_torch(t_mha, ad, heads)
    q, kv = rand(rng, batch, seq_q, d), rand(rng, batch, seq_k, d)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    causal = np.triu(np.ones((seq_q, seq_k), dtype=bool), 1)
    tq, tkv = to_torch(q, True), to_torch(kv, True)
    kwargs = {}
    eq, ekv = leaf(q, ad), leaf(kv, ad)
    inp = MhaInput(eq, ekv, ekv)
    if masks in ("pad", "both"):
        kwargs["key_padding_mask"] = torch.from_numpy(pad)
        inp = inp.with_mask_pad(Tensor.from_data(pad, device=ad))
    if masks in ("causal", "both"):
        kwargs["attn_mask"] = torch.from_numpy(causal)
        inp = inp.with_mask_attn(Tensor.from_data(np.broadcast_to(causal, (batch, seq_q, seq_k)).copy(), device=ad))
    ref, ref_w = t_mha(tq, tkv, tkv, need_weights=True, average_attn_weights=False, **kwargs)
    out = mha(inp)
    assert out.weights.dims() == [batch, heads, seq_q, seq_k]
    assert_close(out.context, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_close(out.weights, ref_w.detach().numpy(), rtol=1e-4, atol=1e-6)
    grads = weighted_backward(out.context, ref)
    assert_grad(eq, grads, tq, rtol=1e-3, atol=1e-5)
    assert_grad(ekv, grads, tkv, rtol=1e-3, atol=1e-5)
    for ours, expected in _mha_grads(mha, t_mha):
        assert_close(ours.val().grad(grads), expected, rtol=1e-3, atol=1e-5)
    # Forward on the plain device as well (masks given as [seq_q, seq_k] broadcast too).
    plain = _mha_from_torch(t_mha, device, heads)
    inp2 = MhaInput.new(*(Tensor.from_data(a, device=device) for a in (q, kv, kv)))
    if masks in ("causal", "both"):
        inp2 = inp2.with_mask_attn(Tensor.from_data(causal, device=device))
    if masks in ("pad", "both"):
        inp2 = inp2.with_mask_pad(Tensor.from_data(pad, device=device))
    assert_close(plain(inp2).context, ref.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_mha_config_and_errors():
    with pytest.raises(ConfigError, match="divisible by n_heads=3"):
        MultiHeadAttentionConfig(8, 3)
    mha = MultiHeadAttentionConfig(8, 2, query_bias=False).init()
    assert mha.query.bias is None and mha.d_k == 4
    with pytest.raises(ShapeError, match="d_model=8"):
        mha(MhaInput.self_attn(Tensor.zeros([1, 2, 6])))
    with pytest.raises(ShapeError, match=r"mask_pad must be \[batch=1, seq_k=2\]"):
        mha(MhaInput.self_attn(Tensor.zeros([1, 2, 8])).with_mask_pad(Tensor.from_bools([[True, False, False]])))


def test_quiet_softmax_lets_a_fully_masked_row_attend_to_nothing():
    mha = MultiHeadAttentionConfig(4, 1, dropout=0.0, quiet_softmax=True).init()
    mask = Tensor.from_bools([[True, True]])
    out = mha(MhaInput.self_attn(Tensor.ones([1, 2, 4])).with_mask_pad(mask))
    assert np.isfinite(out.context.to_numpy()).all()
    assert out.weights.to_numpy().max() < 1e-3


def test_masks():
    mask = generate_autoregressive_mask(2, 4)
    assert mask.dims() == [2, 4, 4]
    np.testing.assert_array_equal(mask.to_numpy()[1], np.triu(np.ones((4, 4), dtype=bool), 1))
    padded = generate_padding_mask(0, [[3, 4, 5, 6], [7, 8]], max_seq_length=3)
    assert padded.tensor.tolist() == [[3, 4, 5], [7, 8, 0]]
    assert padded.mask.tolist() == [[False, False, False], [False, False, True]]


def _encoder_from_torch(t_encoder, config, device):
    layers = []
    template = config.init(device)
    for t_layer, layer in zip(t_encoder.layers, template.layers):
        mha = _mha_from_torch(t_layer.self_attn, device, config.n_heads)
        pwff = layer.pwff.__class__(
            linear_inner=torch_linear(t_layer.linear1.weight, t_layer.linear1.bias, device),
            linear_outer=torch_linear(t_layer.linear2.weight, t_layer.linear2.bias, device),
            dropout=layer.pwff.dropout,
            activation=layer.pwff.activation,
        )
        norms = [
            LayerNorm(
                gamma=param(n.weight.detach().numpy(), device),
                beta=param(n.bias.detach().numpy(), device),
                epsilon=config.layer_norm_eps,
            )
            for n in (t_layer.norm1, t_layer.norm2)
        ]
        layers.append(
            layer.__class__(
                mha=mha,
                pwff=pwff,
                norm_1=norms[0],
                norm_2=norms[1],
                dropout=layer.dropout,
                norm_first=config.norm_first,
            )
        )
    return template.__class__(layers=layers)


@pytest.mark.torch
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_transformer_encoder_matches_torch(norm_first, rng):
    torch = import_torch()
    torch.manual_seed(1)
    d, heads, d_ff = 8, 2, 12
    t_layer = torch.nn.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first, layer_norm_eps=1e-5
    )
    t_encoder = torch.nn.TransformerEncoder(t_layer, 2, enable_nested_tensor=False)
    with torch.no_grad():
        for p in t_encoder.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # distinct norms per layer
    config = TransformerEncoderConfig(d, d_ff, heads, 2, dropout=0.0, norm_first=norm_first)
    ad = Device.flex().autodiff()
    encoder = _encoder_from_torch(t_encoder, config, ad)
    x = rand(rng, 2, 4, d)
    pad = np.array([[False] * 4, [False, False, False, True]])
    causal = np.triu(np.ones((4, 4), dtype=bool), 1)
    tx = to_torch(x, True)
    ref = t_encoder.train()(tx, mask=torch.from_numpy(causal), src_key_padding_mask=torch.from_numpy(pad))
    ex = leaf(x, ad)
    inp = (
        TransformerEncoderInput(ex)
        .with_mask_pad(Tensor.from_data(pad, device=ad))
        .with_mask_attn(generate_autoregressive_mask(2, 4, device=ad))
    )
    out = encoder(inp)
    assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    grads = weighted_backward(out, ref)
    assert_grad(ex, grads, tx, rtol=1e-3, atol=1e-4)
    for layer, t_layer in zip(encoder.layers, t_encoder.layers):
        pairs = _encoder_layer_grads(layer, t_layer)
        assert len(pairs) == len(layer.params())
        for ours, expected in pairs:
            assert_close(ours.val().grad(grads), expected, rtol=2e-3, atol=1e-4)
    assert_close(
        encoder.valid()(TransformerEncoderInput(Tensor.from_data(x))),
        t_encoder(to_torch(x)).detach().numpy(),
        rtol=1e-4,
        atol=1e-4,
    )


def test_encoder_dropout_only_while_training(rng):
    encoder = TransformerEncoderConfig(8, 16, 2, 1, dropout=0.5).init(Device.flex().autodiff())
    x = Tensor.from_data(rand(rng, 1, 3, 8))
    evaluated = encoder.valid()
    np.testing.assert_array_equal(
        evaluated(TransformerEncoderInput(x)).to_numpy(), evaluated(TransformerEncoderInput(x)).to_numpy()
    )
    with pytest.raises(ConfigError, match="activation must be one of"):
        TransformerEncoderConfig(8, 16, 2, 1, activation="swishy")


@pytest.mark.torch
def test_pwff_matches_torch(rng):
    torch = import_torch()
    lin1, lin2 = torch.nn.Linear(6, 10), torch.nn.Linear(10, 6)
    ad = Device.flex().autodiff()
    block = PositionWiseFeedForwardConfig(6, 10, dropout=0.0, activation="relu").init(ad)
    block = block.__class__(
        linear_inner=torch_linear(lin1.weight, lin1.bias, ad),
        linear_outer=torch_linear(lin2.weight, lin2.bias, ad),
        dropout=block.dropout,
        activation=block.activation,
    )
    x = rand(rng, 2, 3, 6)
    grads = check_layer(
        block, lambda tx: lin2(torch.relu(lin1(tx))), x, ad, rtol=1e-5, atol=1e-5, grad_rtol=1e-4, grad_atol=1e-5
    )
    assert_close(block.linear_inner.weight.val().grad(grads), lin1.weight.grad.numpy().T, rtol=1e-4, atol=1e-5)


def test_positional_encoding_is_the_sinusoid_table(device, rng):
    layer = PositionalEncodingConfig(6, max_sequence_size=10).init(device)
    x = rand(rng, 2, 7, 6)
    pos = np.arange(7)[:, None]
    i = np.arange(0, 6, 2)
    table = np.zeros((7, 6))
    table[:, 0::2] = np.sin(pos / 10000 ** (i / 6))
    table[:, 1::2] = np.cos(pos / 10000 ** (i / 6))
    assert_close(layer(Tensor.from_data(x, device=device)), x + table, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="exceeds max_sequence_size=10"):
        layer(Tensor.zeros([1, 11, 6], device=device))
    with pytest.raises(ConfigError, match="d_model must be even"):
        PositionalEncodingConfig(5)


def test_rotary_encoding_rotates_pairs(device, rng):
    d, seq = 8, 5
    layer = RotaryEncodingConfig(16, d, theta=100.0).init(device)
    x = rand(rng, 2, 3, seq, d)
    z = x[..., 0::2] + 1j * x[..., 1::2]
    start = 4
    angles = (np.arange(seq) + start)[:, None] * (100.0 ** (-np.arange(0, d, 2) / d))
    rotated = z * np.exp(1j * angles)
    expected = np.stack([rotated.real, rotated.imag], -1).reshape(x.shape)
    assert_close(layer.apply(Tensor.from_data(x, device=device), start), expected, rtol=1e-4, atol=1e-5)
    assert_close(layer(Tensor.from_data(x, device=device)).to_numpy()[..., 0, :], x[..., 0, :], rtol=1e-6, atol=1e-6)
    with pytest.raises(ShapeError, match="exceed max_sequence_length=16"):
        layer.apply(Tensor.zeros([1, seq, d], device=device), 12)


def test_rotary_encoding_gradient_is_the_inverse_rotation(rng):
    ad = Device.flex().autodiff()
    layer = RotaryEncodingConfig(8, 4).init(ad)
    x = leaf(rand(rng, 2, 6, 4), ad)
    g = rand(rng, 2, 6, 4)
    grads = layer(x).mul(Tensor.from_data(g, device=ad)).sum().backward()
    # The rotation is orthogonal: its transpose turns each pair back by the same angle.
    angles = np.arange(6)[:, None] * (10000.0 ** (-np.arange(0, 4, 2) / 4))
    zg = g[..., 0::2] + 1j * g[..., 1::2]
    expected = zg * np.exp(-1j * angles)
    assert_close(x.grad(grads), np.stack([expected.real, expected.imag], -1).reshape(g.shape), rtol=1e-4, atol=1e-5)

"""``MultiHeadAttention``'s inference features against a PyTorch oracle written from
``torch.nn.functional.scaled_dot_product_attention``: grouped-query and multi-query
heads, a fused QKV projection, ``head_dim``, additive float masks and rotary positions
(both layouts, gathered at ``position_ids``), outputs and every parameter's gradient."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, DTypeError, ShapeError, UsageError
from ember.nn import LayerCache, MhaInput, MultiHeadAttentionConfig, RotaryEncodingConfig
from tests.conftest import assert_close
from tests.nn.parity import leaf, rand

D_MODEL, HEADS = 16, 4


def _weights(mha):
    """``{name: (ember Param, numpy array)}`` of every projection."""
    out = {}
    for name in ("query", "key", "value", "qkv", "output"):
        linear = getattr(mha, name)
        if linear is not None:
            out[name + ".weight"] = linear.weight
            if linear.bias is not None:
                out[name + ".bias"] = linear.bias
    return out


def _torch_rotate(torch, x, positions, theta, rot, interleaved):
    """``x`` ``[B, H, T, hd]`` with its first ``rot`` features turned (float64 angles)."""
    angles = positions[..., None].astype(np.float64) * theta ** (-np.arange(0, rot, 2) / rot)
    cos = torch.from_numpy(np.cos(angles).astype(np.float32))
    sin = torch.from_numpy(np.sin(angles).astype(np.float32))
    if positions.ndim == 2:
        cos, sin = cos[:, None], sin[:, None]
    turned, rest = x[..., :rot], x[..., rot:]
    if interleaved:
        even, odd = turned[..., 0::2], turned[..., 1::2]
        turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
    else:
        first, second = turned[..., : rot // 2], turned[..., rot // 2 :]
        turned = torch.cat([first * cos - second * sin, second * cos + first * sin], -1)
    return torch.cat([turned, rest], -1)


def _torch_mha(torch, w, x, config, *, causal=False, mask=None, rotary=None):
    """The oracle: ``w`` maps names to torch tensors in ember's ``[d_in, d_out]`` layout;
    ``mask`` is a bool keep-mask or a float mask added to the scores."""
    hd = config.head_dim or config.d_model // config.n_heads
    kv = config.n_kv_heads or config.n_heads
    b, t, _ = x.shape

    def lin(name, inp):
        y = inp @ w[name + ".weight"]
        return y + w[name + ".bias"] if name + ".bias" in w else y

    if config.fused_qkv:
        q, k, v = lin("qkv", x).split([config.n_heads * hd, kv * hd, kv * hd], -1)
    else:
        q, k, v = lin("query", x), lin("key", x), lin("value", x)
    q = q.reshape(b, t, config.n_heads, hd).transpose(1, 2)
    k, v = (a.reshape(b, t, kv, hd).transpose(1, 2) for a in (k, v))
    if rotary is not None:
        positions, theta, rot, interleaved = rotary
        q, k = (_torch_rotate(torch, a, positions, theta, rot, interleaved) for a in (q, k))
    context = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=kv != config.n_heads
    )
    return lin("output", context.transpose(1, 2).reshape(b, t, config.n_heads * hd))


CONFIGS = {
    "gqa": {"n_kv_heads": 2},
    "mqa": {"n_kv_heads": 1},
    "head_dim": {"head_dim": 6, "n_kv_heads": 2},
    "fused": {"fused_qkv": True},
    "fused_gqa_no_bias": {
        "fused_qkv": True,
        "n_kv_heads": 2,
        "query_bias": False,
        "key_bias": False,
        "value_bias": False,
    },
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_projections_match_torch(name, torch, rng):
    config = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, **CONFIGS[name])
    ad = Device.flex().autodiff()
    mha = config.init(ad)
    x_np = rand(rng, 2, 5, D_MODEL)
    x = leaf(x_np, ad)
    params = _weights(mha)
    w = {k: torch.from_numpy(p.val().to_numpy()).requires_grad_() for k, p in params.items()}
    tx = torch.from_numpy(x_np).requires_grad_()
    out = mha(x, causal=True).context
    expected = _torch_mha(torch, w, tx, config, causal=True)
    assert_close(out, expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = rand(rng, *out.dims())
    grads = out.mul(Tensor.from_data(g, device=ad)).sum().backward()
    (expected * torch.from_numpy(g)).sum().backward()
    assert_close(x.grad(grads), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for key, p in params.items():
        assert_close(p.val().grad(grads), w[key].grad.numpy(), rtol=1e-4, atol=1e-5)
    if config.fused_qkv:
        assert mha.query is None and mha.key is None and mha.value is None
        kv = config.n_kv_heads or HEADS
        assert mha.qkv is not None and mha.qkv.weight.shape == [D_MODEL, (HEADS + 2 * kv) * mha.d_k]


def test_float_bias_equals_the_bool_mask_and_torch(torch, rng):
    flex = Device.flex()
    config = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, n_kv_heads=2)
    mha = config.init(flex)
    x_np = rand(rng, 2, 5, D_MODEL)
    x = Tensor.from_data(x_np, device=flex)
    hide = rng.random((2, 1, 5, 5)) > 0.6
    hide[..., 0] = False
    bias = np.where(hide, np.finfo(np.float32).min, 0.0).astype(np.float32)
    out = mha(x, bias=Tensor.from_data(bias, device=flex)).context
    assert_close(out, mha(x, mask=Tensor.from_data(hide, device=flex)).context.to_numpy(), atol=1e-6)
    w = {k: torch.from_numpy(p.val().to_numpy()) for k, p in _weights(mha).items()}
    expected = _torch_mha(torch, w, torch.from_numpy(x_np), config, mask=torch.from_numpy(bias))
    assert_close(out, expected.numpy(), rtol=1e-5, atol=1e-5)
    # A real-valued bias (ALiBi-like, per head) is added as is.
    slopes = rand(rng, 1, HEADS, 5, 5)
    out = mha(x, bias=Tensor.from_data(slopes, device=flex)).context
    expected = _torch_mha(torch, w, torch.from_numpy(x_np), config, mask=torch.from_numpy(slopes))
    assert_close(out, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("per_batch", [False, True])
def test_rotary_attention_matches_torch(interleaved, per_batch, torch, rng):
    rotary = RotaryEncodingConfig(32, 4, theta=500.0, interleaved=interleaved)  # head_dim 6: partial rotation
    config = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, n_kv_heads=2, head_dim=6, rotary=rotary)
    ad = Device.flex().autodiff()
    mha = config.init(ad)
    x_np = rand(rng, 2, 5, D_MODEL)
    positions = np.array([[3, 4, 5, 6, 7], [0, 1, 2, 9, 20]]) if per_batch else np.arange(2, 7)
    x = leaf(x_np, ad)
    out = mha(x, causal=True, position_ids=Tensor.from_data(positions, device=ad)).context
    params = _weights(mha)
    w = {k: torch.from_numpy(p.val().to_numpy()).requires_grad_() for k, p in params.items()}
    expected = _torch_mha(
        torch, w, torch.from_numpy(x_np), config, causal=True, rotary=(positions, 500.0, 4, interleaved)
    )
    assert_close(out, expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rand(rng, *out.dims())
    grads = out.mul(Tensor.from_data(g, device=ad)).sum().backward()
    (expected * torch.from_numpy(g)).sum().backward()
    for key, p in params.items():
        assert_close(p.val().grad(grads), w[key].grad.numpy(), rtol=1e-4, atol=1e-5)


def test_default_behaviour_is_unchanged(rng):
    """Without the new options: three d_model x d_model projections, no cache."""
    mha = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0).init(Device.flex())
    assert mha.qkv is None and mha.rotary is None and mha.kv_heads == HEADS and mha.d_k == 4
    assert [mha.query.weight.shape, mha.output.weight.shape] == [[D_MODEL, D_MODEL]] * 2
    x = Tensor.from_data(rand(rng, 1, 3, D_MODEL))
    out = mha(x)
    context, weights = out
    assert out.cache is None and context.dims() == [1, 3, D_MODEL] and weights.dims() == [1, HEADS, 3, 3]


def test_errors(rng):
    flex = Device.flex()
    with pytest.raises(ConfigError, match="n_kv_heads=3 must be > 0 and divide"):
        MultiHeadAttentionConfig(D_MODEL, HEADS, n_kv_heads=3)
    with pytest.raises(ConfigError, match="one bias"):
        MultiHeadAttentionConfig(D_MODEL, HEADS, fused_qkv=True, key_bias=False)
    with pytest.raises(ConfigError, match="exceeds head_dim=4"):
        MultiHeadAttentionConfig(D_MODEL, HEADS, rotary=RotaryEncodingConfig(8, 8))
    with pytest.raises(ConfigError, match="divisible"):
        MultiHeadAttentionConfig(D_MODEL, 3)
    MultiHeadAttentionConfig(D_MODEL, 3, head_dim=8)  # with head_dim it need not divide
    fused = MultiHeadAttentionConfig(D_MODEL, HEADS, fused_qkv=True, dropout=0.0).init(flex)
    x, y = Tensor.from_data(rand(rng, 1, 3, D_MODEL)), Tensor.from_data(rand(rng, 1, 4, D_MODEL))
    with pytest.raises(UsageError, match="self-attention only"):
        fused(MhaInput(x, y, y))
    mha = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0).init(flex)
    with pytest.raises(DTypeError, match="float Tensor"):
        mha(x, bias=Tensor.from_data(np.zeros((3, 3), dtype=bool)))
    with pytest.raises(ShapeError, match="must broadcast"):
        mha(x, bias=Tensor.zeros([1, 2, 3, 3]))
    with pytest.raises(UsageError, match="cache_position"):
        mha(x, cache=LayerCache.empty(1, HEADS, 8, 4))
    with pytest.raises(ShapeError, match="the cache"):
        mha(x, cache=LayerCache.empty(1, 2, 8, 4), cache_position=Tensor.from_ints([0]))


def test_record_round_trip(tmp_path, rng):
    """A fused, grouped, rotary layer saves and loads its parameters (and its rotary
    table) by path; the absent projections are absent from the record."""
    rotary = RotaryEncodingConfig(16, 4, interleaved=False)
    config = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, n_kv_heads=2, fused_qkv=True, rotary=rotary)
    mha = config.init(Device.flex())
    assert sorted(mha.to_record()) == ["output.bias", "output.weight", "qkv.bias", "qkv.weight", "rotary.freq_complex"]
    mha.save_file(tmp_path / "mha.safetensors")
    loaded = config.init(Device.flex()).load_file(tmp_path / "mha.safetensors")
    x = Tensor.from_data(rand(rng, 1, 3, D_MODEL))
    assert_close(loaded(x).context, mha(x).context.to_numpy(), atol=0)

"""The static KV cache: a prefill then single-token decode steps give what one causal
forward over the whole sequence gives (every attention variant), the cache's writes
against numpy, and a compiled decode step that traces once for every position."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.capture import CompileWarning
from ember.errors import DTypeError, IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.nn import KvCache, LayerCache, MultiHeadAttentionConfig, RotaryEncodingConfig
from tests.conftest import assert_close
from tests.nn.parity import rand

D_MODEL, HEADS, PREFILL, STEPS, MAX_LEN = 16, 4, 4, 3, 10

CONFIGS = {
    "plain": {},
    "gqa": {"n_kv_heads": 2},
    "mqa": {"n_kv_heads": 1},
    "fused": {"fused_qkv": True, "n_kv_heads": 2},
    "rotary_interleaved": {"rotary": RotaryEncodingConfig(MAX_LEN, 4, theta=100.0)},
    "rotary_half": {"rotary": RotaryEncodingConfig(MAX_LEN, 4, interleaved=False), "n_kv_heads": 2},
    "quiet_gqa": {"n_kv_heads": 2, "quiet_softmax": True},
}


def _decode(mha, x, device, mask_pad=None):
    """Prefill ``PREFILL`` tokens, then one token per step; the contexts side by side."""
    cache = LayerCache.empty(x.dims()[0], mha.kv_heads, MAX_LEN, mha.d_k, device=device)
    outs = []
    for start, end in [(0, PREFILL)] + [(t, t + 1) for t in range(PREFILL, PREFILL + STEPS)]:
        out = mha(
            x[:, start:end], mask_pad=mask_pad, cache=cache, cache_position=Tensor.from_ints([start], device=device)
        )
        assert out.cache is not None and out.cache.max_len == MAX_LEN
        assert out.weights.dims() == [x.dims()[0], HEADS, end - start, MAX_LEN]
        cache = out.cache
        outs.append(out.context.to_numpy())
    return np.concatenate(outs, 1), cache


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prefill_and_decode_equal_the_full_causal_forward(name, rng):
    flex = Device.flex()
    mha = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, **CONFIGS[name]).init(flex)
    x = Tensor.from_data(rand(rng, 2, PREFILL + STEPS, D_MODEL), device=flex)
    decoded, cache = _decode(mha, x, flex)
    assert_close(decoded, mha(x, causal=True).context.to_numpy(), rtol=1e-5, atol=1e-6)
    # The slots after the last position were never written.
    assert not cache.key.to_numpy()[:, :, PREFILL + STEPS :].any()


def test_padding_mask_over_the_cache(device, rng):
    """Left padding: ``mask_pad`` ``[batch, max_len]`` hides the same keys as the full
    forward's ``[batch, seq]`` mask (on every device)."""
    config = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, **CONFIGS["rotary_half"])
    mha = config.init(device)
    x = Tensor.from_data(rand(rng, 2, PREFILL + STEPS, D_MODEL), device=device)
    pad = np.zeros((2, MAX_LEN), dtype=bool)
    pad[1, :2] = True
    full = mha(x, causal=True, mask_pad=Tensor.from_data(pad[:, : PREFILL + STEPS], device=device)).context
    decoded, _ = _decode(mha, x, device, mask_pad=Tensor.from_data(pad, device=device))
    # Row 1's first two queries see no key at all: their (even) weights are not compared.
    assert_close(decoded[0], full.to_numpy()[0], rtol=1e-4, atol=1e-5)
    assert_close(decoded[1, 2:], full.to_numpy()[1, 2:], rtol=1e-4, atol=1e-5)


def test_layer_cache_update_against_numpy(rng):
    cache = LayerCache.empty(2, 3, 8, 4)
    old = rand(rng, 2, 3, 8, 4)
    cache = LayerCache(Tensor.from_data(old), Tensor.from_data(-old))
    new = rand(rng, 2, 3, 3, 4)
    for position in (0, 2, 5):
        out = cache.update(Tensor.from_data(new), Tensor.from_data(2 * new), Tensor.from_ints([position]))
        expected = old.copy()
        expected[:, :, position : position + 3] = new
        assert_close(out.key, expected, atol=0)
        expected = -old
        expected[:, :, position : position + 3] = 2 * new
        assert_close(out.value, expected, atol=0)
    with pytest.raises(IndexOutOfBoundsError, match=r"slots 6..9 lie outside the cache's \[0, max_len=8\)"):
        cache.update(Tensor.from_data(new), Tensor.from_data(new), Tensor.from_ints([6]))
    with pytest.raises(ShapeError, match="shape \\[1\\]"):
        cache.update(Tensor.from_data(new), Tensor.from_data(new), Tensor.from_ints([0, 1]))
    with pytest.raises(DTypeError, match="int Tensor"):
        cache.update(Tensor.from_data(new), Tensor.from_data(new), Tensor.from_floats([0.0]))
    with pytest.raises(ShapeError, match="to fit the cache"):
        cache.update(Tensor.from_data(new[:, :2]), Tensor.from_data(new[:, :2]), Tensor.from_ints([0]))


def test_kv_cache_container():
    kv = KvCache.empty(3, 2, 1, 16, 8, dtype="float16")
    assert len(kv) == 3 and kv.max_len == 16 and kv[0].key.dims() == [2, 1, 16, 8]
    assert kv[2].value.dtype.name.lower() == "float16"
    layer = LayerCache.empty(2, 1, 16, 8)
    replaced = kv.replace_layer(1, layer)
    assert replaced[1] is layer and replaced[0] is kv[0] and kv[1] is not layer
    with pytest.raises(IndexOutOfBoundsError):
        kv.replace_layer(3, layer)
    with pytest.raises(ValueRangeError):
        KvCache.empty(0, 2, 1, 16, 8)


def test_compiled_decode_step_traces_once(rng):
    flex = Device.flex()
    rotary = RotaryEncodingConfig(24, 4, interleaved=False)
    mha = MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, n_kv_heads=2, rotary=rotary).init(flex)

    @ember.compile
    def step(mha, x, cache, position):
        out = mha(x, cache=cache, cache_position=position)
        return out.context, out.cache

    xs = Tensor.from_data(rand(rng, 2, 20, D_MODEL), device=flex)
    compiled = eager = LayerCache.empty(2, 2, 24, mha.d_k, device=flex)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # no fall-back to eager
        for t in range(20):
            x, position = xs[:, t : t + 1], Tensor.from_ints([t], device=flex)
            context, compiled = step(mha, x, compiled, position)
            out = mha(x, cache=eager, cache_position=position)
            eager = out.cache
            assert_close(context, out.context.to_numpy(), rtol=1e-6, atol=1e-6)
    assert_close(compiled.key, eager.key.to_numpy(), rtol=1e-6, atol=1e-6)
    assert step.stats["traces"] <= 2 and step.cache_size() <= 2 and step.stats["eager"] == 0


def test_compiled_model_step_takes_and_returns_a_kv_cache(rng):
    """A two-layer stack: the whole :class:`KvCache` in and out of a compiled step."""
    flex = Device.flex()
    layers = tuple(MultiHeadAttentionConfig(D_MODEL, HEADS, dropout=0.0, fused_qkv=True).init(flex) for _ in range(2))

    def forward(layers, x, kv, position):
        for i, layer in enumerate(layers):
            out = layer(x, cache=kv[i], cache_position=position)
            x, kv = out.context, kv.replace_layer(i, out.cache)
        return x, kv

    step = ember.compile(forward)
    xs = Tensor.from_data(rand(rng, 1, 6, D_MODEL), device=flex)
    kv_c = kv_e = KvCache.empty(2, 1, HEADS, 8, 4, device=flex)
    for t in range(6):
        x, position = xs[:, t : t + 1], Tensor.from_ints([t], device=flex)
        y_c, kv_c = step(layers, x, kv_c, position)
        y_e, kv_e = forward(layers, x, kv_e, position)
        assert isinstance(kv_c, KvCache) and len(kv_c) == 2
        assert_close(y_c, y_e.to_numpy(), rtol=1e-6, atol=1e-6)
    assert_close(kv_c[1].value, kv_e[1].value.to_numpy(), rtol=1e-6, atol=1e-6)
    assert step.stats["traces"] <= 2 and step.stats["eager"] == 0

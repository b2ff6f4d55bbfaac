"""Rotary encoding's layouts, scaled frequencies and gathered positions against Hugging
Face's ``modeling_rope_utils`` and ``apply_rotary_pos_emb`` and a float64 numpy oracle."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.nn import RopeScaling, RotaryEncodingConfig
from ember.nn.rope_scaling import inverse_frequencies
from tests.conftest import assert_close
from tests.nn.parity import leaf, rand

D, MAX_POS = 16, 128

SCALINGS = {
    "linear": {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.5},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
    "yarn_mscale": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "original_max_position_embeddings": 16,
        "mscale": 0.707,
        "mscale_all_dim": 0.707 * 1.3,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
    },
    "yarn_no_factor": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": None,
        "original_max_position_embeddings": 32,
    },
    "yarn_attention_factor": {
        "rope_type": "yarn",
        "rope_theta": 1000.0,
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "attention_factor": 0.8,
    },
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
}


def _hf_config(params: dict):
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(
        hidden_size=4 * D, num_attention_heads=4, head_dim=D, max_position_embeddings=MAX_POS, rope_parameters=params
    )


def _ours(params: dict, interleaved: bool = False, max_len: int = MAX_POS) -> RotaryEncodingConfig:
    fields = {k: v for k, v in params.items() if k != "rope_theta"}
    if fields["rope_type"] == "dynamic":
        fields["original_max_position_embeddings"] = MAX_POS
    return RotaryEncodingConfig(
        max_len, D, theta=params["rope_theta"], interleaved=interleaved, scaling=RopeScaling(**fields)
    )


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_frequencies_match_transformers(name, torch):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = SCALINGS[name]
    inv_hf, factor_hf = ROPE_INIT_FUNCTIONS[params["rope_type"]](_hf_config(dict(params)), None)
    config = _ours(params)
    inv, factor = inverse_frequencies(D, config.theta, config.scaling, MAX_POS)
    np.testing.assert_allclose(inv, inv_hf.double().numpy(), rtol=2e-6)
    assert factor == pytest.approx(factor_hf, rel=1e-12)


def _hf_rotate(torch, params, x, positions):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope = LlamaRotaryEmbedding(_hf_config(dict(params)))  # fresh: dynamic scaling keeps state
    tx = torch.from_numpy(x)
    cos, sin = rope(tx, torch.from_numpy(positions))
    return apply_rotary_pos_emb(tx, tx, cos, sin)[0].numpy()


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_apply_positions_matches_transformers(name, torch, rng):
    params = SCALINGS[name]
    x = rand(rng, 2, 3, 5, D)
    positions = np.array([[0, 7, 30, 31, 100], [4, 5, 6, 7, 8]], dtype=np.int64)
    if params["rope_type"] == "dynamic":
        positions[0, -1] = 300  # beyond max_position_embeddings: frequencies of length 301
    rotary = _ours(params).init(Device.flex())  # dynamic: positions past the table are computed
    out = rotary.apply_positions(Tensor.from_data(x), Tensor.from_data(positions))
    assert_close(out, _hf_rotate(torch, params, x, positions), rtol=1e-4, atol=2e-5)


def test_default_half_layout_matches_transformers(torch, rng):
    params = {"rope_type": "default", "rope_theta": 10000.0}
    x = rand(rng, 1, 2, 6, D)
    positions = np.arange(3, 9, dtype=np.int64)[None]
    rotary = RotaryEncodingConfig(16, D, interleaved=False).init()
    assert_close(rotary.apply(Tensor.from_data(x), 3), _hf_rotate(torch, params, x, positions), rtol=1e-5, atol=1e-5)
    out = rotary.apply_positions(Tensor.from_data(x), Tensor.from_data(positions[0]))
    assert_close(out, _hf_rotate(torch, params, x, positions), rtol=1e-5, atol=1e-5)


def _numpy_rotate(x: np.ndarray, positions: np.ndarray, theta: float, interleaved: bool) -> np.ndarray:
    """float64: complex rotation of each pair; positions ``[B, T]`` against x ``[B, H, T, d]``."""
    d = x.shape[-1]
    angles = positions[:, None, :, None].astype(np.float64) * theta ** (-np.arange(0, d, 2) / d)
    x = x.astype(np.float64)
    if interleaved:
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
        return np.stack([z.real, z.imag], -1).reshape(x.shape)
    z = (x[..., : d // 2] + 1j * x[..., d // 2 :]) * np.exp(1j * angles)
    return np.concatenate([z.real, z.imag], -1)


@pytest.mark.parametrize("interleaved", [True, False])
def test_apply_positions_against_numpy_with_gradients(interleaved, rng):
    ad = Device.flex().autodiff()
    rotary = RotaryEncodingConfig(40, 8, theta=100.0, interleaved=interleaved).init(ad)
    x_np = rand(rng, 2, 3, 4, 8)
    positions = np.array([[0, 1, 2, 3], [39, 10, 20, 5]], dtype=np.int64)
    x = leaf(x_np, ad)
    out = rotary.apply_positions(x, Tensor.from_data(positions, device=ad))
    assert_close(out, _numpy_rotate(x_np, positions, 100.0, interleaved), rtol=1e-5, atol=1e-5)
    g = rand(rng, *x_np.shape)
    grads = out.mul(Tensor.from_data(g, device=ad)).sum().backward()
    # An orthogonal rotation: the gradient turns back by the same angles.
    assert_close(x.grad(grads), _numpy_rotate(g, -positions, 100.0, interleaved), rtol=1e-4, atol=1e-5)


def test_apply_positions_traces_once_under_compile(rng):
    flex = Device.flex()
    rotary = RotaryEncodingConfig(64, 8, interleaved=False).init(flex)
    x_np = rand(rng, 1, 2, 1, 8)

    @ember.compile
    def step(rotary, x, position):
        return rotary.apply_positions(x, position)

    x = Tensor.from_data(x_np, device=flex)
    for p in range(0, 60, 7):
        position = Tensor.from_data(np.array([p], dtype=np.int64), device=flex)
        assert_close(step(rotary, x, position), rotary.apply_positions(x, position).to_numpy(), rtol=1e-6, atol=1e-6)
    assert step.stats["traces"] == 1 and step.stats["eager"] == 0


def test_errors():
    rotary = RotaryEncodingConfig(8, 4).init()
    x = Tensor.zeros([2, 3, 4])
    with pytest.raises(ShapeError, match="outside"):
        rotary.apply_positions(x, Tensor.from_data(np.array([0, 1, 8])))
    with pytest.raises(ShapeError, match="must be"):
        rotary.apply_positions(x, Tensor.from_data(np.array([0, 1])))
    with pytest.raises(DTypeError, match="int Tensor"):
        rotary.apply_positions(x, Tensor.from_data(np.array([0.0, 1.0, 2.0])))
    with pytest.raises(ConfigError, match="needs factor"):
        RopeScaling("linear")
    with pytest.raises(ConfigError, match="low_freq_factor"):
        RopeScaling("llama3", factor=8.0)
    with pytest.raises(ConfigError, match="original_max_position_embeddings"):
        RopeScaling("yarn", factor=2.0)
    with pytest.raises(ConfigError):
        RopeScaling("longrope", factor=2.0)  # type: ignore[arg-type]

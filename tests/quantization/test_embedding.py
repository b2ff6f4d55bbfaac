"""Quantized embeddings and tied heads: the gather against a float64 decoding of the
packed table, tied-head logits (GPT-2, LLaMA), the opt-in, records and ``generate``."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.models import Gpt2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, generate
from ember.module import Param
from ember.module.safetensors_file import read_safetensors
from ember.nn import Embedding, EmbeddingConfig, Linear
from ember.quantization import DEFAULT_GROUP, ParamGroup, QuantizedEmbedding, QuantizedLinear, QuantScheme, schemes_of

SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int4(block=32),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int4(block=16, symmetric=False),
]


def decode(table: QuantizedEmbedding) -> np.ndarray:
    """The float64 table the packed values stand for, decoded here from the bytes (the
    layout of ``ember.tensor.quant.qtensor``), not by ``dequantize``."""
    scheme = table.scheme
    n, d = table.n_embedding, table.d_model
    g = scheme.group_size(d)
    v = table.values.val().to_numpy().astype(np.int64)
    if scheme.value == "int4":
        v = v.reshape(n, d // g, g // 2)
        q = np.concatenate([v & 15, v >> 4], axis=2).reshape(n, d)
    else:
        q = v
    scales = np.repeat(table.scales.val().to_numpy().astype(np.float64), g, axis=1)
    if table.zero_points is not None:
        zero = np.repeat(table.zero_points.val().to_numpy().astype(np.float64), g, axis=1)
    else:
        zero = 8.0 if scheme.value == "int4" else 0.0
    if scheme.level == "tensor":
        scales = np.full((n, d), scales[0, 0])
    return (q - zero) * scales


def gpt2(device: Device, tie: bool = True) -> GPT2LMHeadModel:
    device.seed(0)
    config = Gpt2Config(
        vocab_size=96,
        n_positions=32,
        n_embd=64,
        n_layer=1,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=tie,
    )
    return GPT2LMHeadModel.from_config(config, device)


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_gather_matches_float64_rows_of_the_packed_table(device, scheme, rng):
    table = Embedding(weight=Param.from_tensor(Tensor.from_data(rng.standard_normal((50, 64)).astype(np.float32))))
    q = table.quantized(scheme)
    expected_table = decode(q)
    indices = rng.integers(0, 50, (2, 3, 4))
    indices[0, 0, :2] = [49, 49]  # repeats and the last row
    got = q.to_device(device)(Tensor.from_data(indices, device=device))
    assert got.dims() == [2, 3, 4, 64] and got.device == device
    np.testing.assert_allclose(got.to_numpy(), expected_table[indices], rtol=1e-6, atol=1e-6)
    error = np.abs(expected_table - table.weight.val().to_numpy()).max()
    assert error < (0.5 if scheme.value == "int4" else 0.05)  # it is the table, quantized
    assert q.weight.nbytes() < table.weight.val().to_numpy().nbytes / (4.5 if scheme.value == "int4" else 3.5)
    np.testing.assert_array_equal(q.dequantize().weight.val().to_numpy(), q.weight.dequantize().to_numpy())
    if device.inner() is not device:
        valid = q.to_device(device).valid()
        assert valid(Tensor.from_data(indices, device=device.inner())).dims() == [2, 3, 4, 64]


def test_the_gather_dequantizes_only_the_gathered_rows(rng, monkeypatch):
    import ember.nn.quantized.embedding as module

    seen = []
    original = module.dequantize_parts

    def spy(values, scales, zero_points, scheme, shape):
        seen.append((values.dims(), scales.dims(), shape))
        return original(values, scales, zero_points, scheme, shape)

    monkeypatch.setattr(module, "dequantize_parts", spy)
    q = EmbeddingConfig(1000, 64).init().quantized(QuantScheme.int4(block=32))
    q(Tensor.from_ints([[5, 7, 5]]))
    assert seen == [([3, 32], [3, 2], (3, 64))]


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(block=32)], ids=repr)
def test_tied_gpt2_head_reads_the_packed_table(scheme, rng):
    device = Device.flex()
    model = gpt2(device)
    q = model.quantize(scheme, include_embeddings=True)
    wte = q.transformer.wte
    assert isinstance(wte, QuantizedEmbedding) and isinstance(q.transformer.wpe, QuantizedEmbedding)
    assert isinstance(q.transformer.h[0].mlp.c_fc, QuantizedLinear) and q.lm_head is None
    ids = Tensor.from_data(rng.integers(0, 96, (2, 8)))
    hidden, _ = q.transformer(ids)
    logits = q(ids).to_numpy()
    expected = hidden.to_numpy().astype(np.float64) @ decode(wte).T
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    # and the embedding input is the float64 rows of the packed tables
    positions = np.arange(8)
    x0 = decode(wte)[ids.to_numpy()] + decode(q.transformer.wpe)[positions]
    np.testing.assert_allclose(
        q.transformer.wte(ids).add(q.transformer.wpe(Tensor.from_data(positions))), x0, atol=1e-6
    )
    reference = model(ids).to_numpy()
    cosine = (logits * reference).sum(-1) / np.linalg.norm(logits, axis=-1) / np.linalg.norm(reference, axis=-1)
    assert cosine.min() > (0.99 if scheme.value == "int8" else 0.9)


def test_tied_llama_head_and_generate(rng):
    device = Device.flex()
    device.seed(1)
    config = LlamaConfig(
        vocab_size=80,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM.from_config(config, device)
    q = model.quantize(QuantScheme.int8(), include_embeddings=True)
    table = q.model.embed_tokens
    assert isinstance(table, QuantizedEmbedding)
    ids = Tensor.from_data(rng.integers(0, 80, (1, 6)))
    hidden, _ = q.model(ids)
    expected = hidden.to_numpy().astype(np.float64) @ decode(table).T
    np.testing.assert_allclose(q(ids).to_numpy(), expected, rtol=1e-4, atol=1e-4)
    # greedy decoding with a cache reads the same packed table each step
    prompt = rng.integers(0, 80, (1, 4))
    tokens = generate(q, prompt, 5, compile=False).to_numpy()
    steps = prompt
    for _ in range(5):
        nxt = q(Tensor.from_data(steps)).to_numpy()[:, -1].argmax(-1)
        steps = np.concatenate([steps, nxt[:, None]], axis=1)
    np.testing.assert_array_equal(tokens, steps)


def test_embeddings_are_opt_in_and_follow_the_group():
    device = Device.flex()
    model = gpt2(device, tie=False)
    default = model.quantize(QuantScheme.int8())
    assert type(default.transformer.wte) is Embedding and type(default.lm_head) is Linear
    assert type(model.quantize(QuantScheme.int8(), ParamGroup.all()).transformer.wte) is Embedding
    every = model.quantize(QuantScheme.int8(), ParamGroup.all(), include_embeddings=True)
    assert isinstance(every.transformer.wte, QuantizedEmbedding) and isinstance(every.lm_head, QuantizedLinear)
    with_embeddings = model.quantize(QuantScheme.int8(), include_embeddings=True)
    assert isinstance(with_embeddings.transformer.wpe, QuantizedEmbedding)
    assert type(with_embeddings.lm_head) is Linear  # an untied head stays float under the default group
    some = model.quantize(QuantScheme.int8(), DEFAULT_GROUP & ~ParamGroup.contains("wpe"), include_embeddings=True)
    assert isinstance(some.transformer.wte, QuantizedEmbedding) and type(some.transformer.wpe) is Embedding
    # an activation scheme applies to the Linear layers; a lookup table is weight-only
    dynamic = model.quantize(QuantScheme.int8(activations="dynamic"), include_embeddings=True)
    assert dynamic.transformer.wte.scheme == QuantScheme.int8()
    assert dynamic.transformer.h[0].mlp.c_fc.scheme.activations == "dynamic"


def test_static_calibration_skips_the_embeddings(rng):
    model = gpt2(Device.flex())
    batches = [Tensor.from_data(rng.integers(0, 96, (1, 8))) for _ in range(2)]
    q = model.quantize(QuantScheme.int8(activations="static"), calibration=batches, include_embeddings=True)
    assert isinstance(q.transformer.wte, QuantizedEmbedding) and q.transformer.wte.scheme.activations is None
    assert q.transformer.h[0].mlp.c_fc.input_scale is not None


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(block=32, symmetric=False)], ids=repr)
def test_records_keep_the_packed_table(tmp_path, scheme, rng):
    device = Device.flex()
    q = gpt2(device).quantize(scheme, include_embeddings=True)
    path = tmp_path / "q.safetensors"
    q.save_file(path)
    tensors, _ = read_safetensors(path)
    assert tensors["transformer.wte.values"].shape == ((96, 32) if scheme.value == "int4" else (96, 64))
    assert "transformer.wte.weight" not in tensors
    assert "transformer.wte" in schemes_of(q)
    ids = Tensor.from_data(rng.integers(0, 96, (1, 8)))
    for template in (gpt2(device).quantize(scheme, include_embeddings=True), gpt2(device)):
        loaded = template.load_file(path)
        assert isinstance(loaded.transformer.wte, QuantizedEmbedding)
        np.testing.assert_array_equal(loaded(ids).to_numpy(), q(ids).to_numpy())

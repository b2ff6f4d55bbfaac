"""The LLaMA family (LLaMA, Mistral, Qwen2) from checkpoints ``transformers`` saved:
logits, rotary scalings, sliding windows, the static cache, left padding, round trips,
dtypes, shards, keys."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, RecordError, UsageError
from ember.models import (
    LlamaConfig,
    LoadReport,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    from_pretrained,
)
from ember.module.safetensors_file import read_safetensors, write_safetensors
from tests.conftest import make_device
from tests.models.hf import assert_logits, import_transformers, torch_logits

BASE = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)
#: name: (transformers model class, config class, config)
VARIANTS = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", BASE),
    "llama_tied": (
        "LlamaForCausalLM",
        "LlamaConfig",
        {**BASE, "tie_word_embeddings": True, "num_key_value_heads": 1, "head_dim": 16, "attention_bias": True,
         "mlp_bias": True},
    ),
    "llama3": (
        "LlamaForCausalLM",
        "LlamaConfig",
        {**BASE, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8}},
    ),
    "linear": (
        "LlamaForCausalLM",
        "LlamaConfig",
        {**BASE, "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
    ),
    "yarn": (
        "LlamaForCausalLM",
        "LlamaConfig",
        {**BASE, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                     "original_max_position_embeddings": 16}},
    ),
    "dynamic": (  # NTK-aware scaling beyond max_position_embeddings (the tests' 9 tokens)
        "LlamaForCausalLM",
        "LlamaConfig",
        {**BASE, "max_position_embeddings": 8,
         "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}},
    ),
    "mistral": ("MistralForCausalLM", "MistralConfig", {**BASE, "sliding_window": 4}),
    "qwen2": (
        "Qwen2ForCausalLM",
        "Qwen2Config",
        {**BASE, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
    ),
}  # fmt: skip


def save_variant(name: str, directory, seed: int = 0):
    """A ``transformers`` model of the variant, every parameter random (biases and norm
    scales too, which Hugging Face initialises to constants), saved to ``directory``."""
    transformers = import_transformers()
    import torch

    model_class, config_class, config = VARIANTS[name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param.ndim == 1:
                param.copy_(torch.randn_like(param) * 0.2 + (1.0 if "norm" in param_name else 0.0))
    model.save_pretrained(str(directory))
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """``checkpoint(name) -> (directory, transformers model)``, each saved once."""
    saved: dict[str, tuple] = {}

    def get(name: str):
        if name not in saved:
            directory = tmp_path_factory.mktemp(name)
            saved[name] = (directory, save_variant(name, directory))
        return saved[name]

    return get


def ids(rng, batch=2, seq=9):
    return rng.integers(0, BASE["vocab_size"], size=(batch, seq))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_transformers_on_flex(checkpoint, rng, name):
    directory, reference = checkpoint(name)
    model = from_pretrained(directory, device=Device.flex())
    assert type(model).__name__ == VARIANTS[name][0]
    tokens = ids(rng)
    assert_logits(model(Tensor.from_data(tokens, device=Device.flex())), torch_logits(reference, tokens))


def test_the_variants_switches(checkpoint):
    tied = from_pretrained(checkpoint("llama_tied")[0])
    assert tied.lm_head is None and tied.config.d_head == 16
    assert tied.model.layers[0].self_attn.query.bias is not None and tied.model.layers[0].mlp.up_proj.bias is not None
    mistral = from_pretrained(checkpoint("mistral")[0])
    assert isinstance(mistral, MistralForCausalLM) and [la.sliding_window for la in mistral.model.layers] == [4, 4]
    qwen = from_pretrained(checkpoint("qwen2")[0])
    assert isinstance(qwen, Qwen2ForCausalLM) and [la.sliding_window for la in qwen.model.layers] == [None, 3]
    attn = qwen.model.layers[0].self_attn
    assert attn.query.bias is not None and attn.value.bias is not None and attn.output.bias is None
    # The layers share one rotary table.
    assert qwen.model.layers[0].self_attn.rotary is qwen.model.layers[1].self_attn.rotary


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_logits_match_transformers_on_cube(checkpoint, rng, name):
    directory, reference = checkpoint(name)
    gpu_device = make_device("cube")
    model = from_pretrained(directory, device=gpu_device)
    tokens = ids(rng, 1, 6)
    assert_logits(model(Tensor.from_data(tokens, device=gpu_device)), torch_logits(reference, tokens), rtol=1e-4)


def left_padded(rng, lengths=(9, 6), seq=9):
    """Tokens, Hugging Face's attention mask (leading zeros) and the positions
    ``generate`` computes: ``cumsum(mask) - 1``, the padding's set to 1."""
    tokens = ids(rng, len(lengths), seq)
    mask = np.zeros_like(tokens)
    for row, length in enumerate(lengths):
        mask[row, seq - length :] = 1
    positions = np.cumsum(mask, -1) - 1
    positions[mask == 0] = 1
    return tokens, mask, positions


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2"])
def test_left_padding_matches_transformers_on_the_real_tokens(checkpoint, rng, name):
    directory, reference = checkpoint(name)
    model = from_pretrained(directory)
    tokens, mask, positions = left_padded(rng)
    ours = model(Tensor.from_data(tokens), Tensor.from_data(mask), Tensor.from_data(positions)).to_numpy()
    theirs = torch_logits(reference, tokens, attention_mask=mask, position_ids=positions)
    real = mask.astype(bool)
    assert_logits(ours[real], theirs[real])


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "yarn"])
def test_cached_decoding_gives_the_full_forwards_logits(checkpoint, rng, name):
    directory, reference = checkpoint(name)
    model = from_pretrained(directory)
    tokens = ids(rng, 2, 9)
    full = torch_logits(reference, tokens)
    cache = model.new_cache(2, 12)
    logits, cache = model(Tensor.from_data(tokens[:, :5]), cache=cache, cache_position=Tensor.from_ints([0]))
    steps = [logits.to_numpy()]
    for t in range(5, 9):
        logits, cache = model(Tensor.from_data(tokens[:, t : t + 1]), cache=cache, cache_position=Tensor.from_ints([t]))
        steps.append(logits.to_numpy())
    assert_logits(np.concatenate(steps, axis=1), full)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_cached_decoding_of_a_left_padded_batch(checkpoint, rng, name):
    directory, reference = checkpoint(name)
    model = from_pretrained(directory)
    tokens, mask, positions = left_padded(rng)
    theirs = torch_logits(reference, tokens, attention_mask=mask, position_ids=positions)
    cache = model.new_cache(2, 16)
    prompt = 6
    logits, cache = model(
        Tensor.from_data(tokens[:, :prompt]),
        Tensor.from_data(mask[:, :prompt]),
        Tensor.from_data(positions[:, :prompt]),
        cache=cache,
        cache_position=Tensor.from_ints([0]),
    )
    steps = [logits.to_numpy()]
    full_mask = np.concatenate([mask, np.ones((2, 7), mask.dtype)], 1)  # the cache's length: one shape per step
    for t in range(prompt, 9):
        logits, cache = model(
            Tensor.from_data(tokens[:, t : t + 1]),
            Tensor.from_data(full_mask),
            Tensor.from_data(positions[:, t : t + 1]),
            cache=cache,
            cache_position=Tensor.from_ints([t]),
        )
        steps.append(logits.to_numpy())
    real = mask.astype(bool)
    assert_logits(np.concatenate(steps, axis=1)[real], theirs[real])


def test_a_cache_needs_its_position(checkpoint):
    model = from_pretrained(checkpoint("llama")[0])
    with pytest.raises(UsageError, match="cache_position"):
        model(Tensor.from_ints([[1, 2]]), cache=model.new_cache(1, 4))


@pytest.mark.parametrize("name", ["llama", "llama_tied", "llama3", "mistral", "qwen2"])
def test_save_pretrained_round_trips_through_transformers(checkpoint, tmp_path, rng, name):
    directory, reference = checkpoint(name)
    transformers = import_transformers()
    model = from_pretrained(directory)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    original = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [VARIANTS[name][0]] and config["model_type"] == original["model_type"]
    assert config["rope_parameters"] == original["rope_parameters"] and config["bos_token_id"] == 1
    theirs, _ = read_safetensors(directory / "model.safetensors")
    ours, _ = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    back = getattr(transformers, VARIANTS[name][0]).from_pretrained(str(tmp_path)).eval()
    tokens = ids(rng)
    np.testing.assert_array_equal(torch_logits(back, tokens), torch_logits(reference, tokens))


def test_sharded_checkpoints_load_and_save(checkpoint, tmp_path, rng):
    directory, reference = checkpoint("llama")
    transformers = import_transformers()
    sharded = tmp_path / "theirs"
    reference.save_pretrained(str(sharded), max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    model = from_pretrained(sharded)
    tokens = ids(rng)
    assert_logits(model(Tensor.from_data(tokens)), torch_logits(reference, tokens))
    model.save_pretrained(tmp_path / "ours", max_shard_size=20_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    back = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_array_equal(torch_logits(back, tokens), torch_logits(reference, tokens))


@pytest.mark.parametrize("stored", ["float16", "bfloat16"])
def test_half_precision_checkpoints(checkpoint, tmp_path, rng, stored):
    import torch

    _, reference = checkpoint("llama")
    half_reference = copy.deepcopy(reference).to(getattr(torch, stored))  # .to() is in place: the fixture's stays
    half_reference.save_pretrained(str(tmp_path / stored))
    tokens = ids(rng)
    expected = torch_logits(half_reference.float(), tokens)  # the rounded weights in float32
    model = from_pretrained(tmp_path / stored)
    assert_logits(model(Tensor.from_data(tokens)), expected)
    half = from_pretrained(tmp_path / stored, dtype=stored)
    assert half.model.embed_tokens.weight.dtype.name.lower() == stored
    assert_logits(half(Tensor.from_data(tokens)).float(), expected, rtol=5e-2)
    logits, _ = half(Tensor.from_data(tokens), cache=half.new_cache(2, 9), cache_position=Tensor.from_ints([0]))
    assert logits.dtype.name.lower() == stored


def test_missing_and_unexpected_keys(checkpoint, tmp_path):
    directory, _ = checkpoint("llama")
    arrays, _ = read_safetensors(directory / "model.safetensors")
    arrays = dict(arrays)
    arrays["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(4, np.float32)  # older files: ignored
    del arrays["model.layers.1.self_attn.k_proj.weight"]
    arrays["model.extra.weight"] = np.zeros(3, np.float32)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"(?s)model\.layers\.1\.self_attn\.key\.weight.*model\.extra\.weight"):
        from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(tmp_path, strict=False)
    assert any(isinstance(w.message, LoadReport) and "model.extra.weight" in str(w.message) for w in caught)
    assert model(Tensor.from_ints([[1, 2]])).dims() == [1, 2, BASE["vocab_size"]]


def test_older_configs_with_rope_theta_and_rope_scaling(checkpoint, tmp_path, rng):
    directory, reference = checkpoint("llama3")
    config = json.loads((directory / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = {**{k: v for k, v in rope.items() if k != "rope_type"}, "type": rope["rope_type"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    model = from_pretrained(tmp_path)
    tokens = ids(rng)
    assert_logits(model(Tensor.from_data(tokens)), torch_logits(reference, tokens))
    written = model.config.to_hf()
    assert written["rope_parameters"] == {**rope, "rope_theta": config["rope_theta"]}
    assert "rope_scaling" not in written and "rope_theta" not in written


def test_unsupported_options_are_named():
    with pytest.raises(ConfigError, match="longrope"):
        LlamaConfig.from_hf({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}})
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        LlamaConfig.from_hf({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5}})
    with pytest.raises(ConfigError, match="num_key_value_heads=3"):
        LlamaConfig(num_attention_heads=4, hidden_size=32, num_key_value_heads=3)
    with pytest.raises(ConfigError, match="layer_types"):
        Qwen2Config(num_hidden_layers=2, layer_types=["full_attention"])
    with pytest.raises(ConfigError, match="hidden_act"):
        LlamaConfig(hidden_act="swishy")


def test_qwen2_layer_types_and_windows():
    config = Qwen2Config.from_hf({"num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": 5,
                                  "max_window_layers": 1})  # fmt: skip
    assert config.layer_windows() == [None, 5, 5]
    assert Qwen2Config(num_hidden_layers=2, use_sliding_window=False).layer_windows() == [None, None]
    typed = Qwen2Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=2,
                        layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    assert typed.layer_windows() == [2, None]


def test_a_compiled_decode_step_traces_once(checkpoint, rng):
    import ember
    from ember.capture import CompileWarning

    directory, reference = checkpoint("mistral")
    model = from_pretrained(directory)
    tokens = ids(rng, 2, 9)
    mask = np.ones((2, 12), np.int64)

    @ember.compile
    def step(model, input_ids, mask, cache, position):
        return model(input_ids, mask, cache=cache, cache_position=position)

    cache = model.new_cache(2, 12)
    steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # no fall-back to eager
        for t in range(9):
            logits, cache = step(
                model, Tensor.from_data(tokens[:, t : t + 1]), Tensor.from_data(mask), cache, Tensor.from_ints([t])
            )
            steps.append(logits.to_numpy())
    assert_logits(np.concatenate(steps, axis=1), torch_logits(reference, tokens))
    assert step.stats["traces"] <= 2 and step.stats["eager"] == 0

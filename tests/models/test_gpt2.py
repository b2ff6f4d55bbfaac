"""GPT-2 from a checkpoint ``transformers`` saved: logits, round trips, dtypes, shards, keys."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, RecordError
from ember.models import GPT2LMHeadModel, LoadReport, from_pretrained
from ember.module.safetensors_file import read_safetensors, write_safetensors
from tests.conftest import make_device
from tests.models.hf import assert_logits, import_transformers, save_random, torch_logits

CONFIG = dict(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpt2")
    model = save_random("GPT2LMHeadModel", "GPT2Config", directory, **CONFIG)
    return directory, model


def ids(rng, batch=2, seq=7):
    return rng.integers(0, CONFIG["vocab_size"], size=(batch, seq))


def test_logits_match_transformers_on_flex(checkpoint, rng):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    assert isinstance(model, GPT2LMHeadModel) and model.lm_head is None  # tied to wte
    tokens = ids(rng)
    assert_logits(model(Tensor.from_data(tokens, device=Device.flex())), torch_logits(reference, tokens))


def test_padding_mask_matches_transformers_on_the_real_tokens(checkpoint, rng):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    tokens = ids(rng)
    mask = np.ones_like(tokens)
    mask[0, 5:] = 0  # right padding: positions of the real tokens are unchanged
    ours = model(Tensor.from_data(tokens), Tensor.from_data(mask)).to_numpy()
    theirs = torch_logits(reference, tokens, attention_mask=mask)
    assert_logits(ours[0, :5], theirs[0, :5])
    assert_logits(ours[1], theirs[1])


@pytest.mark.gpu
def test_logits_match_transformers_on_cube(checkpoint, rng):
    directory, reference = checkpoint
    gpu_device = make_device("cube")
    model = from_pretrained(directory, device=gpu_device)
    tokens = ids(rng, 1, 5)
    assert_logits(model(Tensor.from_data(tokens, device=gpu_device)), torch_logits(reference, tokens), rtol=1e-4)


def test_save_pretrained_round_trips_through_transformers(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    model = from_pretrained(directory)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2"
    assert config["bos_token_id"] == 1  # keys ember does not read are written back
    theirs, _ = read_safetensors(directory / "model.safetensors")
    ours, _ = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path)).eval()
    tokens = ids(rng)
    np.testing.assert_array_equal(torch_logits(back, tokens), torch_logits(reference, tokens))


def test_sharded_checkpoints_load_and_save(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    sharded = tmp_path / "theirs"
    reference.save_pretrained(str(sharded), max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    model = from_pretrained(sharded)
    tokens = ids(rng)
    assert_logits(model(Tensor.from_data(tokens)), torch_logits(reference, tokens))
    model.save_pretrained(tmp_path / "ours", max_shard_size=20_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_array_equal(torch_logits(back, tokens), torch_logits(reference, tokens))


@pytest.mark.parametrize("stored", ["float16", "bfloat16"])
def test_half_precision_checkpoints(tmp_path, rng, stored):
    import torch

    reference = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "f32", **CONFIG)
    reference.to(getattr(torch, stored)).save_pretrained(str(tmp_path / stored))
    tokens = ids(rng)
    expected = torch_logits(reference.to(getattr(torch, stored)).float(), tokens)  # the rounded weights in float32
    model = from_pretrained(tmp_path / stored)
    assert_logits(model(Tensor.from_data(tokens)), expected)
    half = from_pretrained(tmp_path / stored, dtype=stored)
    assert half.transformer.wte.weight.dtype.name.lower() == stored
    assert_logits(half(Tensor.from_data(tokens)).float(), expected, rtol=5e-2)


def test_missing_and_unexpected_keys(checkpoint, tmp_path):
    directory, _ = checkpoint
    arrays, _ = read_safetensors(directory / "model.safetensors")
    arrays = dict(arrays)
    del arrays["transformer.ln_f.weight"]
    arrays["transformer.extra.weight"] = np.zeros(3, np.float32)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"(?s)transformer\.ln_f\.gamma.*transformer\.extra\.weight"):
        from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(tmp_path, strict=False)
    assert any(isinstance(w.message, LoadReport) and "transformer.extra.weight" in str(w.message) for w in caught)
    assert model(Tensor.from_ints([[1, 2]])).dims() == [1, 2, CONFIG["vocab_size"]]


def test_a_hub_name_is_refused_without_network():
    with pytest.raises(RecordError, match="never downloads"):
        from_pretrained("openai-community/gpt2")


def test_unknown_architectures_and_unsupported_options_are_named(checkpoint, tmp_path):
    directory, _ = checkpoint
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2DoubleHeadsModel"]}))
    with pytest.raises(ConfigError, match="GPT2DoubleHeadsModel.*ember builds"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "scale_attn_by_inverse_layer_idx": True}))
    with pytest.raises(ConfigError, match="scale_attn_by_inverse_layer_idx"):
        from_pretrained(tmp_path)

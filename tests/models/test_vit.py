"""ViT from a checkpoint ``transformers`` saved: logits, round trips, dtypes, shards, keys."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, RecordError, ShapeError
from ember.models import LoadReport, ViTConfig, ViTForImageClassification, from_pretrained
from ember.module.safetensors_file import read_safetensors, write_safetensors
from tests.conftest import make_device
from tests.models.hf import assert_logits, import_transformers, save_random, torch_logits

CONFIG = dict(
    image_size=16,
    patch_size=4,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    num_labels=5,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vit")
    model = save_random("ViTForImageClassification", "ViTConfig", directory, **CONFIG)
    return directory, model


def pixels(rng, batch=2, size=16):
    return rng.standard_normal((batch, 3, size, size)).astype(np.float32)


def test_logits_match_transformers_on_flex(checkpoint, rng):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    assert isinstance(model, ViTForImageClassification)
    assert model.config.num_labels == 5 and model.config.extra["id2label"]["4"] == "LABEL_4"
    x = pixels(rng)
    logits = model(Tensor.from_data(x, device=Device.flex()))
    assert logits.dims() == [2, 5]
    assert_logits(logits, torch_logits(reference, x))


@pytest.mark.gpu
def test_logits_match_transformers_on_cube(checkpoint, rng):
    directory, reference = checkpoint
    gpu_device = make_device("cube")
    model = from_pretrained(directory, device=gpu_device)
    x = pixels(rng, 1)
    assert_logits(model(Tensor.from_data(x, device=gpu_device)), torch_logits(reference, x), rtol=1e-4)


def test_other_image_sizes_and_channels_are_refused(checkpoint):
    directory, _ = checkpoint
    model = from_pretrained(directory)
    with pytest.raises(ShapeError, match=r"24x24.*16x16.*interpolate"):
        model(Tensor.zeros([1, 3, 24, 24]))
    with pytest.raises(ShapeError, match=r"\[batch, 3, height, width\]"):
        model(Tensor.zeros([1, 1, 16, 16]))


def test_save_pretrained_round_trips_through_transformers(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    model = from_pretrained(directory)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["ViTForImageClassification"] and config["model_type"] == "vit"
    assert "num_labels" not in config and len(config["id2label"]) == 5  # as transformers writes it
    assert config["pooler_act"] == "tanh"  # keys ember does not read are written back
    theirs, _ = read_safetensors(directory / "model.safetensors")
    ours, _ = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    back = transformers.ViTForImageClassification.from_pretrained(str(tmp_path)).eval()
    assert back.config.num_labels == 5
    x = pixels(rng)
    np.testing.assert_array_equal(torch_logits(back, x), torch_logits(reference, x))


def test_a_fresh_model_saves_a_checkpoint_transformers_loads(tmp_path, rng):
    transformers = import_transformers()
    config = ViTConfig(**{**CONFIG, "num_labels": 3, "image_size": (16, 8)})
    model = ViTForImageClassification.from_config(config)
    model.save_pretrained(tmp_path)
    back = transformers.ViTForImageClassification.from_pretrained(str(tmp_path)).eval()
    assert back.config.num_labels == 3 and back.config.id2label[2] == "LABEL_2"
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)
    assert_logits(model(Tensor.from_data(x)), torch_logits(back, x))
    assert from_pretrained(tmp_path).config.replace(extra={}) == config


def test_sharded_checkpoints_load_and_save(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    sharded = tmp_path / "theirs"
    reference.save_pretrained(str(sharded), max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    model = from_pretrained(sharded)
    x = pixels(rng)
    assert_logits(model(Tensor.from_data(x)), torch_logits(reference, x))
    model.save_pretrained(tmp_path / "ours", max_shard_size=20_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    back = transformers.ViTForImageClassification.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_array_equal(torch_logits(back, x), torch_logits(reference, x))


def test_bfloat16_checkpoints(checkpoint, tmp_path, rng):
    import torch

    directory, _ = checkpoint
    transformers = import_transformers()
    half = transformers.ViTForImageClassification.from_pretrained(str(directory), dtype=torch.bfloat16).eval()
    half.save_pretrained(str(tmp_path))
    x = pixels(rng)
    expected = torch_logits(half.float(), x)  # the rounded weights in float32
    assert_logits(from_pretrained(tmp_path)(Tensor.from_data(x)), expected)
    model = from_pretrained(tmp_path, dtype="bfloat16")
    assert model.vit.embeddings.cls_token.dtype.name.lower() == "bfloat16"
    assert_logits(model(Tensor.from_data(x).cast("bfloat16")).float(), expected, rtol=5e-2)


def test_missing_and_unexpected_keys(checkpoint, tmp_path):
    directory, _ = checkpoint
    arrays = dict(read_safetensors(directory / "model.safetensors")[0])
    del arrays["vit.encoder.layer.1.attention.attention.key.bias"]
    arrays["vit.pooler.dense.weight"] = np.zeros((32, 32), np.float32)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"(?s)layer\.1\.attention\.key\.bias.*vit\.pooler\.dense\.weight"):
        from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(tmp_path, strict=False)
    assert any(isinstance(w.message, LoadReport) and "vit.pooler.dense.weight" in str(w.message) for w in caught)
    assert model(Tensor.zeros([1, 3, 16, 16])).dims() == [1, 5]


def test_unsupported_options_are_named(checkpoint, tmp_path):
    directory, _ = checkpoint
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_act": "nope"}))
    with pytest.raises(ConfigError, match="nope"):
        from_pretrained(tmp_path)

"""ResNet from a checkpoint ``transformers`` saved: logits (running and batch statistics),
round trips, dtypes, shards, keys; both layer types."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, RecordError, ShapeError
from ember.models import LoadReport, ResNetConfig, ResNetForImageClassification, from_pretrained
from ember.module.safetensors_file import read_safetensors, write_safetensors
from tests.conftest import make_device
from tests.models.hf import assert_logits, import_transformers, torch_logits

CONFIG = dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 2], num_labels=4)
LAYER_TYPES = ["basic", "bottleneck"]


def save_resnet(directory, layer_type: str, seed: int = 0):
    """A random ``transformers`` ResNet whose batch norms have non-trivial scales, shifts
    and running statistics, saved to ``directory``; returns it (eval mode)."""
    transformers = import_transformers()
    import torch

    torch.manual_seed(seed)
    config = transformers.ResNetConfig(**CONFIG, layer_type=layer_type, downsample_in_bottleneck=True)
    model = transformers.ResNetForImageClassification(config)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.2)
                module.running_mean.normal_(0.0, 0.2)
                module.running_var.uniform_(0.5, 2.0)
                module.num_batches_tracked.fill_(7)
    model.eval().save_pretrained(str(directory))
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for layer_type in LAYER_TYPES:
        directory = tmp_path_factory.mktemp(f"resnet-{layer_type}")
        out[layer_type] = directory, save_resnet(directory, layer_type)
    return out


@pytest.fixture(params=LAYER_TYPES)
def checkpoint(request, checkpoints):
    return checkpoints[request.param]


def pixels(rng, batch=2, size=32):
    return rng.standard_normal((batch, 3, size, size)).astype(np.float32)


def test_logits_match_transformers_on_flex(checkpoint, rng):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    assert isinstance(model, ResNetForImageClassification) and model.config.num_labels == 4
    assert model.config.layer_type == reference.config.layer_type
    x = pixels(rng)
    logits = model(Tensor.from_data(x, device=Device.flex()))
    assert logits.dims() == [2, 4]
    assert_logits(logits, torch_logits(reference, x))


def test_training_uses_the_batch_statistics_and_valid_the_running_ones(checkpoint, rng):
    directory, reference = checkpoint
    training = copy.deepcopy(reference).train()  # train mode moves the running statistics
    device = Device.flex().autodiff()
    model = from_pretrained(directory, device=device)
    x = pixels(rng)
    assert_logits(model(Tensor.from_data(x, device=device)).detach(), torch_logits(training, x))
    # The step moved the running statistics as PyTorch's (momentum 0.1, unbiased variance).
    assert_logits(model.valid()(Tensor.from_data(x)), torch_logits(training.eval(), x))
    assert_logits(from_pretrained(directory, device=device).valid()(Tensor.from_data(x)), torch_logits(reference, x))


@pytest.mark.gpu
def test_logits_match_transformers_on_cube(checkpoints, rng):
    directory, reference = checkpoints["bottleneck"]  # its 1x1 and 3x3 convolutions cover the basic layer's
    gpu_device = make_device("cube")
    model = from_pretrained(directory, device=gpu_device)
    x = pixels(rng, 1)
    assert_logits(model(Tensor.from_data(x, device=gpu_device)), torch_logits(reference, x), rtol=1e-4)


def test_save_pretrained_round_trips_through_transformers(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    model = from_pretrained(directory)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["ResNetForImageClassification"] and config["model_type"] == "resnet"
    assert config["hidden_sizes"] == [8, 16] and "num_labels" not in config and len(config["id2label"]) == 4
    assert config["out_features"] == ["stage2"]  # keys ember does not read are written back
    theirs, _ = read_safetensors(directory / "model.safetensors")
    ours, _ = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(theirs)  # num_batches_tracked included, as 0
    for key in theirs:
        if key.endswith("num_batches_tracked"):
            assert ours[key].dtype == np.int64 and ours[key].shape == () and ours[key] == 0
        else:
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    back, info = transformers.ResNetForImageClassification.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    x = pixels(rng)
    np.testing.assert_array_equal(torch_logits(back.eval(), x), torch_logits(reference, x))


def test_a_fresh_model_saves_a_checkpoint_transformers_loads(tmp_path, rng):
    transformers = import_transformers()
    config = ResNetConfig(
        embedding_size=8, hidden_sizes=(8, 16), depths=(2, 1), downsample_in_first_stage=True, num_labels=3
    )  # bottleneck layers downsampling in their 3x3 convolution, as ResNet-50
    model = ResNetForImageClassification.from_config(config)
    model.save_pretrained(tmp_path)
    back = transformers.ResNetForImageClassification.from_pretrained(str(tmp_path)).eval()
    assert back.config.num_labels == 3 and back.config.depths == [2, 1]
    x = pixels(rng)
    assert_logits(model(Tensor.from_data(x)), torch_logits(back, x))
    assert from_pretrained(tmp_path).config.replace(extra={}) == config


def test_sharded_checkpoints_load_and_save(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    sharded = tmp_path / "theirs"
    reference.save_pretrained(str(sharded), max_shard_size="4KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    model = from_pretrained(sharded)
    x = pixels(rng)
    assert_logits(model(Tensor.from_data(x)), torch_logits(reference, x))
    model.save_pretrained(tmp_path / "ours", max_shard_size=8_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    back = transformers.ResNetForImageClassification.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_array_equal(torch_logits(back, x), torch_logits(reference, x))


def test_bfloat16_checkpoints(checkpoint, tmp_path, rng):
    import torch

    directory, reference = checkpoint
    transformers = import_transformers()
    half = transformers.ResNetForImageClassification.from_pretrained(str(directory), dtype=torch.bfloat16).eval()
    half.save_pretrained(str(tmp_path))
    x = pixels(rng)
    expected = torch_logits(half.float(), x)  # the rounded weights in float32
    assert_logits(from_pretrained(tmp_path)(Tensor.from_data(x)), expected)
    model = from_pretrained(tmp_path, dtype="bfloat16")
    assert model.classifier is not None and model.classifier.weight.dtype.name.lower() == "bfloat16"
    assert_logits(model(Tensor.from_data(x).cast("bfloat16")).float(), expected, rtol=5e-2)


def test_missing_and_unexpected_keys(checkpoint, tmp_path):
    directory, _ = checkpoint
    arrays = dict(read_safetensors(directory / "model.safetensors")[0])
    del arrays["resnet.embedder.embedder.normalization.running_var"]
    arrays["resnet.pooler.weight"] = np.zeros(3, np.float32)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"(?s)embedder\.normalization\.running_var.*resnet\.pooler\.weight"):
        from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(tmp_path, strict=False)
    assert any(isinstance(w.message, LoadReport) and "running_var" in str(w.message) for w in caught)
    assert model(Tensor.zeros([1, 3, 32, 32])).dims() == [1, 4]


def test_bad_inputs_and_options_are_named(checkpoint, tmp_path):
    directory, _ = checkpoint
    with pytest.raises(ShapeError, match=r"\[batch, 3, height, width\]"):
        from_pretrained(directory)(Tensor.zeros([1, 1, 32, 32]))
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "layer_type": "preact"}))
    with pytest.raises(ConfigError, match="preact"):
        from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="same"):
        ResNetConfig(hidden_sizes=(8, 16), depths=(1,))

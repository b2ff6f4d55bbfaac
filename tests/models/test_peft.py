"""PEFT adapter directories: adapters trained with Hugging Face PEFT load onto the
``ember.models`` model and give PEFT's logits; adapters trained in ember load into PEFT."""

from __future__ import annotations

import json

import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ModuleError, RecordError
from ember.models import from_pretrained
from ember.nn.lora import LoraConfig, LoraLinear, adapter_params, load_peft, lora_layers, save_peft
from tests.models.hf import assert_logits, import_peft, save_random, torch_logits

GPT2 = dict(vocab_size=61, n_positions=16, n_embd=24, n_layer=2, n_head=3)
LLAMA = dict(
    vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=32, bos_token_id=1, eos_token_id=2,
)  # fmt: skip


def peft_model(base, directory, **config):
    """``base`` with PEFT adapters of random values (lora_B too), saved to ``directory``."""
    peft = import_peft()
    import torch

    torch.manual_seed(1)
    model = peft.get_peft_model(base, peft.LoraConfig(init_lora_weights=False, **config)).eval()
    model.save_pretrained(str(directory))
    return model


def test_gpt2_adapters_with_rank_and_alpha_patterns_give_pefts_logits(tmp_path, rng):
    base = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "base", **GPT2)
    targets = ["c_attn", "c_proj", "c_fc"]  # c_proj: attention's output (ember's attn.output) and the MLP's
    reference = peft_model(
        base, tmp_path / "adapter", r=4, lora_alpha=8, target_modules=targets,
        rank_pattern={"h.1.attn.c_attn": 2}, alpha_pattern={"c_fc": 3.0},
    )  # fmt: skip
    model = load_peft(from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    layers = dict(lora_layers(model))
    assert len(layers) == 8
    assert layers["transformer.h.1.attn.qkv"].r == 2 and layers["transformer.h.0.attn.qkv"].r == 4
    assert layers["transformer.h.0.mlp.c_fc"].scale == pytest.approx(3.0 / 4)
    assert layers["transformer.h.0.attn.output"].scale == pytest.approx(2.0)
    trained = {path for path, p in model.named_params() if p.require_grad}
    assert trained == {path for path, _ in adapter_params(model)}
    ids = rng.integers(0, GPT2["vocab_size"], size=(2, 7))
    assert_logits(model(Tensor.from_data(ids)), torch_logits(reference, ids))


def test_llama_rank_stabilised_adapters_and_a_saved_head(tmp_path, rng):
    base = save_random("LlamaForCausalLM", "LlamaConfig", tmp_path / "base", **LLAMA)
    reference = peft_model(
        base, tmp_path / "adapter", r=4, lora_alpha=16, use_rslora=True,
        target_modules=["q_proj", "v_proj", "down_proj"], modules_to_save=["lm_head"],
    )  # fmt: skip
    import torch

    with torch.no_grad():  # make the saved head differ from the base's
        for name, param in reference.named_parameters():
            if "modules_to_save" in name:
                param.add_(torch.randn_like(param))
    reference.save_pretrained(str(tmp_path / "adapter"))
    model = load_peft(from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    assert lora_layers(model)[0][1].scale == pytest.approx(16 / 2)  # alpha / sqrt(r)
    assert model.lm_head.weight.require_grad  # modules_to_save train
    ids = rng.integers(0, LLAMA["vocab_size"], size=(2, 6))
    assert_logits(model(Tensor.from_data(ids)), torch_logits(reference, ids))


def test_ember_adapters_load_into_peft(tmp_path, rng):
    peft = import_peft()
    import transformers

    save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "base", **GPT2)
    model = from_pretrained(tmp_path / "base", device=Device.flex().autodiff())
    model = LoraConfig(r=3, alpha=6.0, targets=["qkv", "c_fc"]).init(model)

    def perturb(param, path):  # lora_b starts at zero: give the update a value
        return param.map(lambda t: t.add(Tensor.random_like(t).mul_scalar(0.3))) if path.endswith("lora_b") else param

    model = model.map_params(perturb)
    save_peft(model, tmp_path / "adapter", base_model_name_or_path=str(tmp_path / "base"))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == ["c_attn", "c_fc"] and config["fan_in_fan_out"] is True
    base = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "base")).eval()
    reference = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    ids = rng.integers(0, GPT2["vocab_size"], size=(2, 7))
    assert_logits(model.valid()(Tensor.from_data(ids)), torch_logits(reference, ids))
    # and back: the file loads onto a fresh base in ember with the same logits
    again = load_peft(from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    assert_logits(again(Tensor.from_data(ids)), torch_logits(reference, ids))


def test_a_subset_of_layers_is_saved_as_a_regex_and_patterns(tmp_path):
    save_random("LlamaForCausalLM", "LlamaConfig", tmp_path / "base", **LLAMA)
    model = from_pretrained(tmp_path / "base")
    model = LoraConfig(r=2, targets=r"layers\.0\.self_attn\.query$").init(model)
    save_peft(model, tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == r"^(?:model\.layers\.0\.self_attn\.q_proj)$"
    again = load_peft(from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    assert [path for path, _ in lora_layers(again)] == ["model.layers.0.self_attn.query"]
    assert isinstance(again.model.layers[0].self_attn.query, LoraLinear)


def test_what_ember_cannot_load_is_named(tmp_path):
    base = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "base", **GPT2)
    model = from_pretrained(tmp_path / "base")
    with pytest.raises(RecordError, match="no adapter_config.json"):
        load_peft(model, tmp_path)
    peft_model(base, tmp_path / "a", r=2, target_modules=["c_fc"])
    config_file = tmp_path / "a" / "adapter_config.json"
    config = json.loads(config_file.read_text())
    for key, value, match in [("use_dora", True, "DoRA"), ("bias", "all", "bias='all'"), ("peft_type", "IA3", "IA3")]:
        config_file.write_text(json.dumps({**config, key: value}))
        with pytest.raises(ConfigError, match=match):
            load_peft(model, tmp_path / "a")
    config_file.write_text("{not json")
    with pytest.raises(RecordError, match="not valid JSON"):
        load_peft(model, tmp_path / "a")
    config_file.write_text(json.dumps(config))
    smaller = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "small", **{**GPT2, "n_embd": 12})
    del smaller
    with pytest.raises(RecordError, match=r"must\s+be \[r, 12\]"):
        load_peft(from_pretrained(tmp_path / "small"), tmp_path / "a")
    with pytest.raises(ModuleError, match="already has LoRA adapters"):
        load_peft(load_peft(model, tmp_path / "a"), tmp_path / "a")
    with pytest.raises(ModuleError, match="no LoRA adapters"):
        save_peft(model, tmp_path / "b")


def test_a_saved_head_tied_to_the_embedding_is_refused(tmp_path):
    base = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path / "base", **GPT2)
    peft_model(base, tmp_path / "a", r=2, target_modules=["c_fc"], modules_to_save=["lm_head"])
    with pytest.raises(RecordError, match="tied to the embedding"):
        load_peft(from_pretrained(tmp_path / "base"), tmp_path / "a")

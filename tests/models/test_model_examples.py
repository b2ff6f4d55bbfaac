"""examples/generate.py and examples/finetune_lora.py on a small random GPT-2 that
``transformers`` saved, with a tokenizer.json trained here."""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.models.hf import import_transformers, save_random, save_tokenizer, torch_logits

ROOT = Path(__file__).resolve().parent.parent.parent
# Weights of std 0.3 (not 0.02) keep the logits apart: greedy ties would flip with the thread count.
CONFIG = dict(
    vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2, initializer_range=0.3
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpt2")
    model = save_random("GPT2LMHeadModel", "GPT2Config", directory, **CONFIG)
    save_tokenizer(directory, CONFIG["vocab_size"], inspect.getdoc(argparse))
    return directory, model


def run(*args: str) -> str:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_finetune_lora_lowers_the_loss_and_writes_a_model_transformers_loads(checkpoint, tmp_path, rng):
    directory, reference = checkpoint
    transformers = import_transformers()
    out = run(
        "examples/finetune_lora.py", str(directory), "--steps", "30", "--lr", "1e-2", "--out", str(tmp_path), "--merge"
    )
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step")]
    assert losses[-1] < losses[0]
    assert (tmp_path / "adapters.safetensors").is_file()
    merged = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "merged")).eval()
    tokens = rng.integers(0, CONFIG["vocab_size"], size=(1, 8))
    # The adapters changed the attention, so the merged model's logits moved.
    assert not np.allclose(torch_logits(merged, tokens), torch_logits(reference, tokens))


def test_generate_prints_the_greedy_continuation_transformers_gives(checkpoint):
    directory, reference = checkpoint
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    prompt = "usage: the parser"
    out = run("examples/generate.py", str(directory), prompt, "--max-new-tokens", "12")
    text, speed = out.rsplit("\n[", 1)
    assert "tokens in" in speed and "tokens/s" in speed
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        prompt_ids = torch.as_tensor([ids])
        expected = reference.generate(  # the mask given: transformers would hide prompt tokens equal to pad_token_id
            prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )[0, len(ids) :]
    new = [int(t) for t in expected if int(t) != 0]
    assert text == prompt + tokenizer.decode(new[: new.index(2) + 1] if 2 in new else new)

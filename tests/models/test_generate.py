"""generate() against transformers' greedy search on the same weights, sampling from
the device's stream, streamers, stopping, and the compiled decode step's traces."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.errors import ConfigError, ShapeError
from ember.models import from_pretrained, generate
from ember.models import generation as generate_module
from tests.models.hf import save_random

# Weights of std 0.3 (not 0.02) keep the logits apart: near-ties in greedy search would
# flip with the summation order (thread counts, fused kernels) of either framework.
GPT2 = dict(
    vocab_size=97, n_positions=96, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2, initializer_range=0.3
)
LLAMA = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=96,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.3,
)
ARCHS = {"gpt2": ("GPT2LMHeadModel", "GPT2Config", GPT2), "llama": ("LlamaForCausalLM", "LlamaConfig", LLAMA)}


@pytest.fixture(scope="module", params=list(ARCHS))
def checkpoint(request, tmp_path_factory):
    model_class, config_class, config = ARCHS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_random(model_class, config_class, directory, seed=3, **config)
    return directory, reference


def transformers_greedy(reference, prompt, mask, new_tokens):
    import torch

    with torch.no_grad():
        out = reference.generate(
            torch.as_tensor(prompt),
            attention_mask=torch.as_tensor(mask),
            max_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )
    return out.numpy()


@pytest.mark.parametrize("compile", [False, True])
def test_greedy_tokens_equal_transformers(checkpoint, rng, compile):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prompt = rng.integers(3, 97, size=(1, 6))
    ours = generate(model, prompt, 24, eos_token_id=2, pad_token_id=0, compile=compile).to_numpy()
    np.testing.assert_array_equal(ours, transformers_greedy(reference, prompt, np.ones_like(prompt), 24))


def test_greedy_left_padded_batch_equals_transformers(checkpoint, rng):
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prompt = rng.integers(3, 97, size=(3, 7))
    mask = np.ones_like(prompt)
    mask[0, :3] = 0  # left padding
    mask[2, :5] = 0
    prompt[mask == 0] = 0
    ours = generate(model, prompt, 16, attention_mask=mask, eos_token_id=2, pad_token_id=0).to_numpy()
    np.testing.assert_array_equal(ours, transformers_greedy(reference, prompt, mask, 16))


def test_the_compiled_decode_step_traces_at_most_twice_over_fifty_tokens(checkpoint, rng):
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    step = generate_module._compiled_step()  # one per process, shared by every generate call
    before = dict(step.stats)
    prompt = rng.integers(3, 97, size=(2, 5))
    compiled = generate(model, prompt, 50).to_numpy()
    delta = {key: step.stats[key] - before[key] for key in before}
    assert delta["traces"] <= 2 and delta["eager"] == 0 and delta["calls"] == 49
    again = generate(model, prompt, 50).to_numpy()  # a second call traces nothing
    assert step.stats["traces"] - before["traces"] == delta["traces"]
    np.testing.assert_array_equal(compiled, again)
    np.testing.assert_array_equal(compiled, generate(model, prompt, 50, compile=False).to_numpy())


def test_calls_of_other_lengths_reuse_the_compiled_step(checkpoint, rng):
    """The compiled step's cache is a multiple of CACHE_BLOCK slots: generate calls whose
    prompt plus new tokens round up to the same block trace (and compile) nothing new;
    past the model's positions the cache keeps the exact length. Tokens as eager."""
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    step = generate_module._compiled_step()
    prompt = rng.integers(3, 97, size=(1, 6))
    generate(model, prompt, 3)
    before = dict(step.stats)
    for new_tokens in (2, 9, 30, 56):  # the prompt padded to 8, 10 to 64 slots: one block
        ours = generate(model, prompt, new_tokens).to_numpy()
        np.testing.assert_array_equal(ours, generate(model, prompt, new_tokens, compile=False).to_numpy())
    delta = {key: step.stats[key] - before[key] for key in before}
    assert delta["traces"] == 0 and delta["retraces"] == 0 and delta["eager"] == 0
    assert delta["replays"] == 1 + 8 + 29 + 55
    # 8 + 84 = 92 slots: the next block (128) is past n_positions = 96, so 92 exactly.
    ours = generate(model, prompt, 84).to_numpy()
    np.testing.assert_array_equal(ours, generate(model, prompt, 84, compile=False).to_numpy())
    assert step.stats["eager"] == before["eager"]


def test_sampling_is_reproducible_from_the_seed_and_respects_top_k(checkpoint, rng):
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prompt = rng.integers(3, 97, size=(2, 4))
    options = dict(temperature=0.9, top_k=5, top_p=0.95, repetition_penalty=1.3, seed=7)
    first = generate(model, prompt, 20, **options).to_numpy()
    np.testing.assert_array_equal(first, generate(model, prompt, 20, **options).to_numpy())
    assert not np.array_equal(first, generate(model, prompt, 20, **{**options, "seed": 8}).to_numpy())
    greedy = generate(model, prompt, 20).to_numpy()
    assert not np.array_equal(first, greedy)


def test_eos_stops_rows_and_pads_them(checkpoint, rng):
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prompt = rng.integers(3, 97, size=(2, 4))
    free = generate(model, prompt, 12, compile=False).to_numpy()
    eos = int(free[0, 6])  # row 0's third new token: it stops there
    stopped = generate(model, prompt, 12, eos_token_id=eos, pad_token_id=0, compile=False).to_numpy()
    row = stopped[0, 4:]
    first = int(np.argmax(row == eos))
    assert row[first] == eos and (row[first + 1 :] == 0).all()
    assert stopped.shape[1] <= free.shape[1]


def test_streamers_see_each_token(checkpoint, rng):
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prompt = rng.integers(3, 97, size=(1, 4))
    seen = []
    out = generate(model, prompt, 8, streamer=lambda tokens: seen.append(int(tokens[0]))).to_numpy()
    assert seen == list(out[0, 4:])

    class HfStyle:
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, value):
            self.puts.append(np.asarray(value).tolist())

        def end(self):
            self.ended = True

    streamer = HfStyle()
    generate(model, prompt, 3, streamer=streamer)
    assert streamer.puts[0] == prompt[0].tolist() and len(streamer.puts) == 4 and streamer.ended


def test_bad_arguments_are_named(checkpoint):
    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    with pytest.raises(ConfigError, match="temperature"):
        generate(model, [[1, 2]], 3, temperature=-1.0)
    with pytest.raises(ConfigError, match="top_p"):
        generate(model, [[1, 2]], 3, top_p=0.0)
    with pytest.raises(ShapeError, match="left-padded"):
        generate(model, [[1, 2]], 3, attention_mask=[[1, 0]])
    with pytest.raises(ShapeError, match="n_positions|max_position|exceed"):
        generate(model, [[1, 2]], 500)


def test_a_cache_without_its_position_or_of_another_model_is_named(checkpoint):
    from ember import Tensor
    from ember.errors import UsageError

    directory, _ = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    ids = Tensor.from_ints([[3, 4]])
    with pytest.raises(UsageError, match="needs cache_position"):
        model(ids, cache=model.new_cache(1, 8))
    with pytest.raises(UsageError, match="cache must be a KvCache of 2 layers"):
        model(ids, cache=(), cache_position=Tensor.from_ints([0]))


def test_the_compiled_prefill_traces_once_per_prompt_bucket(checkpoint, rng):
    """Prompts of 5 to 16 tokens run the compiled prefill left-padded to 8 or 16 tokens
    (masked): two traces for twelve lengths, tokens equal to the eager, unpadded run and
    to transformers'."""
    directory, reference = checkpoint
    model = from_pretrained(directory, device=Device.flex())
    prefill = generate_module._compiled_prefill()
    before = dict(prefill.stats)
    for length in range(5, 17):
        prompt = rng.integers(3, 97, size=(2, length))
        ours = generate(model, prompt, 6, eos_token_id=2, pad_token_id=0).to_numpy()
        np.testing.assert_array_equal(
            ours, generate(model, prompt, 6, eos_token_id=2, pad_token_id=0, compile=False).to_numpy()
        )
        if length in (5, 16):
            np.testing.assert_array_equal(ours, transformers_greedy(reference, prompt, np.ones_like(prompt), 6))
    delta = {key: prefill.stats[key] - before[key] for key in before}
    assert delta["calls"] == 12 and delta["traces"] <= 2 and delta["eager"] == 0
    assert generate_module.prefill_length(5) == 8 and generate_module.prefill_length(9) == 16

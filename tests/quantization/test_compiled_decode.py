"""A quantized decoder's compiled decode step (``generate``'s default): the same tokens
as its eager steps, one trace for calls of different lengths, and no eager fallback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ember import Device
from ember.errors import FallbackWarning
from ember.models import Gpt2Config, GPT2LMHeadModel, generate, generation
from ember.quantization import QuantScheme


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(block=32)], ids=["int8", "int4"])
def test_quantized_generate_compiles_once_and_matches_eager(scheme, rng):
    device = Device.flex()
    device.seed(1)
    config = Gpt2Config(vocab_size=96, n_positions=64, n_embd=64, n_layer=2, n_head=4, initializer_range=0.3)
    model = GPT2LMHeadModel.from_config(config, device).quantize(scheme)
    step = generation._compiled_step()
    prompt = rng.integers(0, 96, (2, 5))
    before = dict(step.stats)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for new_tokens in (3, 20):  # 8 and 25 slots: one cache block
            compiled = generate(model, prompt, new_tokens).to_numpy()
            np.testing.assert_array_equal(compiled, generate(model, prompt, new_tokens, compile=False).to_numpy())
    delta = {key: step.stats[key] - before[key] for key in before}
    assert delta["traces"] == 1 and delta["retraces"] == 0 and delta["eager"] == 0
    assert delta["calls"] == 2 + 19

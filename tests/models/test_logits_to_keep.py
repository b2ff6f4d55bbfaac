"""``logits_to_keep``: the causal language models' logits of the last positions only
(``generate``'s prefill takes the last one)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ShapeError
from ember.models import Gpt2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def _models():
    device = Device.flex()
    gpt2 = GPT2LMHeadModel.from_config(
        Gpt2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2, embd_pdrop=0.0), device
    )
    llama = LlamaForCausalLM.from_config(
        LlamaConfig(
            vocab_size=50,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=32,
        ),
        device,
    )
    return [gpt2, llama]


@pytest.mark.parametrize("index", [0, 1])
def test_logits_to_keep_gives_the_last_positions(index):
    model = _models()[index]
    ids = Tensor.from_ints([[1, 5, 7, 9, 2], [3, 4, 8, 1, 0]])
    full = model(ids).to_numpy()
    for n, want in ((0, full), (1, full[:, -1:]), (3, full[:, -3:]), (9, full)):
        np.testing.assert_allclose(model(ids, logits_to_keep=n).to_numpy(), want, rtol=1e-5, atol=1e-6)
    cache = model.new_cache(2, 8)
    logits, _ = model(
        ids, cache=cache, cache_position=Tensor.from_ints([0]), attention_mask=Tensor.ones([2, 5]), logits_to_keep=1
    )
    np.testing.assert_allclose(logits.to_numpy(), full[:, -1:], rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="logits_to_keep"):
        model(ids, logits_to_keep=-1)

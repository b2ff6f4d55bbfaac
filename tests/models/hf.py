"""Small random models saved by ``transformers``: the oracle of ``ember.models``' tests.

``transformers`` (with torch) is a test install, never a runtime dependency: without it
these tests skip, and with ``EMBER_REQUIRE_TORCH=1`` (CI) a missing one fails.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import REQUIRE_TORCH, import_torch


def import_transformers():
    """``transformers``, or a skip (a failure when EMBER_REQUIRE_TORCH=1)."""
    import_torch()
    try:
        import transformers
    except ImportError:
        if REQUIRE_TORCH:
            pytest.fail("transformers is required (EMBER_REQUIRE_TORCH=1) but not installed")
        pytest.skip("transformers is not installed")
    transformers.logging.set_verbosity_error()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return transformers


def save_random(model_class: str, config_class: str, directory, seed: int = 0, **config) -> object:
    """A ``transformers`` model of random weights saved to ``directory``; returns it (eval mode)."""
    transformers = import_transformers()
    import torch

    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).eval()
    model.save_pretrained(str(directory))
    return model


def torch_logits(model, *args, **kwargs) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(*[torch.as_tensor(a) for a in args], **{k: torch.as_tensor(v) for k, v in kwargs.items()})
    return out.logits.float().numpy()


def assert_logits(actual, expected, rtol: float = 1e-5) -> None:
    """Max abs difference within ``rtol`` of the logits' scale (relative, as the issue states it)."""
    actual = actual.to_numpy() if hasattr(actual, "to_numpy") else np.asarray(actual)
    scale = max(float(np.abs(expected).max()), 1e-6)
    err = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
    assert actual.shape == expected.shape
    assert err <= rtol * scale, f"max abs error {err:.3g} over scale {scale:.3g} (rtol {rtol})"


def save_tokenizer(directory, vocab_size: int, text: str) -> object:
    """A small BPE ``tokenizer.json`` (Metaspace pre-tokenizer and decoder) trained on ``text``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"], limit_alphabet=40)
    tokenizer.train_from_iterator([text], trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    return tokenizer


def import_peft():
    """Hugging Face ``peft`` (the oracle of PEFT adapter files), or a skip (a failure
    when EMBER_REQUIRE_TORCH=1)."""
    import_transformers()
    try:
        import peft
    except ImportError:
        if REQUIRE_TORCH:
            pytest.fail("peft is required (EMBER_REQUIRE_TORCH=1) but not installed")
        pytest.skip("peft is not installed")
    return peft

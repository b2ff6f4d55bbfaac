"""``generate``: text from a causal language model with a static KV cache.

A prefill step runs the prompt and fills the cache (compiled, the prompts left-padded
to a power of two of tokens: :data:`PREFILL_MIN`); each decode step runs one token
per row at the cache's write position, a run-time value, so the compiled decode step
(``ember.compile``, the default where the device compiles) traces once for every
position. Prompts of a batch are left-padded (``attention_mask`` 0 on the padding);
positions count the real tokens only, as ``transformers`` computes them.

A model that ``generate`` drives (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...) has
``new_cache(batch, max_len, device, dtype)`` and a forward
``model(input_ids, attention_mask, position_ids, cache=cache, cache_position=pos)``
returning ``(logits, new_cache)``; ``attention_mask`` then spans the cache's slots.

>>> tokens = generate(model, input_ids, max_new_tokens=20)                  # doctest: +SKIP
>>> tokens = generate(model, input_ids, 20, temperature=0.8, top_p=0.9, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend.distribution import Distribution
from ember.device import Device
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.models.sampling import check_options, choose, process
from ember.module import Module
from ember.tensor import Tensor

__all__ = ["generate"]

#: A compiled decode step's cache holds a multiple of this many slots (the slots past
#: the last token are masked): ``generate`` calls of different lengths then share one
#: trace instead of tracing (and compiling) a step per cache length.
CACHE_BLOCK = 64
#: A compiled prefill runs prompts left-padded to a power of two of at least this many
#: tokens (``attention_mask`` 0 on the padding, as a batch of prompts of other lengths
#: is): prompts of 5 to 64 tokens share four traces (8, 16, 32, 64), not sixty.
PREFILL_MIN = 8


def _host_ids(name: str, value: Any) -> np.ndarray:
    array = value.to_numpy() if isinstance(value, Tensor) else np.asarray(value)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.dtype.kind not in "iub":
        raise ShapeError(
            f"ember: generate: {name} must be integers of shape [batch, seq], got {array.dtype} {array.shape}"
        )
    return array.astype(np.int64)


def _eos_ids(eos_token_id: int | Sequence[int] | None) -> np.ndarray:
    if eos_token_id is None:
        return np.zeros(0, np.int64)
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    return np.asarray(ids, np.int64)


def _decode_step(model: Any, tokens: Tensor, mask: Tensor, positions: Tensor, cache: Any, slot: Tensor) -> Any:
    logits, cache = model(tokens, attention_mask=mask, position_ids=positions, cache=cache, cache_position=slot)
    return logits.squeeze_dim(1), cache


def _prefill(model: Any, tokens: Tensor, mask: Tensor, positions: Tensor, cache: Any, slot: Tensor, keep: bool) -> Any:
    extra = {"logits_to_keep": 1} if keep else {}
    logits, cache = model(
        tokens, attention_mask=mask, position_ids=positions, cache=cache, cache_position=slot, **extra
    )
    return logits.narrow(1, logits.dims()[1] - 1, 1).squeeze_dim(1), cache


def prefill_length(length: int) -> int:
    """The prompt length a compiled prefill runs ``length`` tokens at (see :data:`PREFILL_MIN`)."""
    return max(PREFILL_MIN, 1 << (length - 1).bit_length())


def _keeps_logits(cls: type) -> bool:
    """Whether the forward of model class ``cls`` takes ``logits_to_keep``."""
    found = _KEEPS.get(cls)
    if found is None:
        import inspect

        try:
            found = "logits_to_keep" in inspect.signature(getattr(cls, "forward")).parameters  # noqa: B009
        except (AttributeError, TypeError, ValueError):
            found = False
        _KEEPS[cls] = found
    return found


_KEEPS: dict[type, bool] = {}


@functools.cache
def _compiled_step() -> Any:
    """The compiled decode step, made once per process: its traces (one per model
    structure, batch and cache length, kept by ``ember.compile``'s guards) are reused by
    every later ``generate`` call, as a device keeps its kernel caches."""
    from ember.capture import compile

    return compile(_decode_step, max_traces=16, donate=(4,), recompile_warning=False)


@functools.cache
def _compiled_prefill() -> Any:
    """The compiled prefill, made once per process: one trace per model structure, batch,
    padded prompt length (:func:`prefill_length`) and cache length."""
    from ember.capture import compile

    return compile(_prefill, max_traces=16, donate=(4,), recompile_warning=False)


def _new_cache(model: Any, batch: int, needed: int, device: Device, bucket: bool) -> Any:
    """The model's cache of ``needed`` slots; for a compiled step (``bucket``), of
    ``needed`` rounded up to a multiple of :data:`CACHE_BLOCK`, unless the model cannot
    hold that many positions (its ``new_cache`` refuses them)."""
    rounded = -(-needed // CACHE_BLOCK) * CACHE_BLOCK
    if bucket and rounded > needed:
        try:
            return model.new_cache(batch, rounded, device=device)
        except ShapeError:
            pass  # past the model's positions: the exact length still fits
    return model.new_cache(batch, needed, device=device)


def generate(
    model: Module,
    input_ids: Tensor | np.ndarray | Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    attention_mask: Tensor | np.ndarray | None = None,
    seed: int | None = None,
    streamer: Any = None,
    compile: bool | None = None,
) -> Tensor:
    """The prompts followed by up to ``max_new_tokens`` new tokens, ``[batch, seq + new]``.

    ``temperature=0`` is greedy (token for token ``transformers``' greedy search);
    otherwise tokens are sampled from the processed distribution (``repetition_penalty``,
    ``temperature``, ``top_k``, ``top_p``, in ``transformers``' order) with uniforms
    drawn from the device's Philox stream, reseeded with ``seed`` when given (the same
    seed gives the same text). A row that produced an ``eos_token_id`` continues with
    ``pad_token_id`` (default: the first eos id); generation stops when every row has.
    ``streamer`` is called with each step's new tokens (an int array ``[batch]``), or,
    if it has ``put``/``end`` (``transformers``' streamers), fed the prompt and each
    token the way ``transformers`` feeds it. ``compile`` (default: where the device is
    not an autodiff device) runs the prefill and the decode step through
    ``ember.compile``; the prefill then takes the prompts left-padded (masked) to
    :func:`prefill_length`, so prompts of many lengths share a few traces.
    """
    check_options(temperature, top_k, top_p, repetition_penalty)
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ConfigError(f"ember: generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not hasattr(model, "new_cache"):
        raise DTypeError(
            f"ember: generate: {type(model).__name__} has no KV cache (new_cache); generate drives the causal "
            "language models of ember.models (GPT2LMHeadModel, LlamaForCausalLM, ...)"
        )
    prompt = _host_ids("input_ids", input_ids)
    batch, length = prompt.shape
    if length == 0:
        raise ShapeError("ember: generate: the prompt is empty; give at least one token per row")
    mask = np.ones_like(prompt) if attention_mask is None else _host_ids("attention_mask", attention_mask)
    if mask.shape != prompt.shape:
        raise ShapeError(
            f"ember: generate: attention_mask {list(mask.shape)} must match input_ids {list(prompt.shape)}"
        )
    if not mask[:, -1].all():
        raise ShapeError(
            "ember: generate: the prompts must be left-padded (attention_mask 1 on each row's last token); "
            "pad on the left, as transformers' tokenizers do with padding_side='left'"
        )
    devices = model.devices()
    device: Device = devices[0] if devices else Device.default()
    if compile is None:
        compile = not device.is_autodiff()
    eos = _eos_ids(eos_token_id)
    pad = int(pad_token_id if pad_token_id is not None else (eos[0] if eos.size else 0))
    # A compiled prefill pads the prompts on the left to a bucket length, where the
    # model's positions allow it (masked: each real token sees what it saw unpadded).
    filled = prefill_length(length) if compile else length
    try:
        cache = _new_cache(model, batch, filled + max_new_tokens, device, compile)
    except ShapeError:
        filled = length
        cache = _new_cache(model, batch, filled + max_new_tokens, device, compile)
    max_len = cache.max_len
    if seed is not None:
        device.seed(seed)
    if streamer is not None and hasattr(streamer, "put"):
        streamer.put(prompt if batch > 1 else prompt[0])

    tokens_in, mask_in = prompt, mask
    if filled > length:
        tokens_in = np.concatenate([np.full((batch, filled - length), pad, np.int64), prompt], axis=1)
        mask_in = np.concatenate([np.zeros((batch, filled - length), np.int64), mask], axis=1)
    slots = np.zeros((batch, max_len), np.int64)
    slots[:, :filled] = mask_in
    positions = np.where(mask_in == 0, 1, np.cumsum(mask_in, axis=-1) - 1)
    # The prefill needs the last position's logits only: a model that can skips the
    # head's product over the other positions (transformers' logits_to_keep=1).
    last, cache = (_compiled_prefill() if compile else _prefill)(
        model,
        Tensor.from_data(tokens_in, device=device),
        Tensor.from_data(slots, device=device),
        Tensor.from_data(positions, device=device),
        cache,
        Tensor.from_data(np.array([0], np.int64), device=device),
        _keeps_logits(type(model)),
    )
    step = _compiled_step() if compile else _decode_step
    sequences = prompt
    unfinished = np.ones(batch, bool)
    greedy = temperature == 0.0 and (repetition_penalty is None or repetition_penalty == 1.0)
    next_position = positions[:, -1] + 1
    for i in range(max_new_tokens):
        if greedy:  # the first largest score, as choose finds it (float32 to float64 is exact)
            tokens = last.to_numpy().argmax(axis=-1)
        else:
            scores = process(last.to_numpy(), sequences, temperature, top_k, top_p, repetition_penalty)
            uniforms = None
            if temperature > 0.0:
                uniforms = Tensor.random([batch], Distribution.uniform(0.0, 1.0), device=device.inner()).to_numpy()
            tokens = choose(scores, uniforms)
        tokens = np.where(unfinished, tokens, pad)
        sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
        if streamer is not None:
            streamer.put(tokens if batch > 1 else tokens[:1]) if hasattr(streamer, "put") else streamer(tokens)
        if eos.size:
            unfinished &= ~np.isin(tokens, eos)
        if not unfinished.any() or i == max_new_tokens - 1:
            break
        slot = filled + i
        slots[:, slot] = 1
        last, cache = step(
            model,
            Tensor.from_data(tokens[:, None], device=device),
            Tensor.from_data(slots, device=device),
            Tensor.from_data(next_position[:, None], device=device),
            cache,
            Tensor.from_data(np.array([slot], np.int64), device=device),
        )
        next_position = next_position + 1
    if streamer is not None and hasattr(streamer, "end"):
        streamer.end()
    return Tensor.from_data(sequences, device=device.inner())

"""The masks of a decoder-only model's self-attention, from Hugging Face's inputs.

``attention_mask`` is Hugging Face's ``[batch, keys]`` tensor of 1 (a token) and 0
(padding); the masks here are bool, ``True`` hiding a key (``MultiHeadAttention``'s
convention). Queries and keys are addressed by their slots: ``0 .. seq - 1`` without a
cache, ``cache_position + i`` for the ``i``-th new token with one, where the keys are
the cache's ``max_len`` slots.
"""

from __future__ import annotations

from typing import Any

from ember.device import Device
from ember.errors import DTypeError, ShapeError, UsageError
from ember.nn import KvCache
from ember.tensor import Tensor

__all__ = ["check_cache", "padding_mask", "window_mask"]


def check_cache(op: str, cache: Any, n_layers: int, cache_position: Tensor | None) -> None:
    """A ``UsageError`` naming the fix unless ``cache`` is a ``KvCache`` of ``n_layers``
    layers given with its ``cache_position`` (a decoder's forward with a cache)."""
    if not isinstance(cache, KvCache) or len(cache) != n_layers:
        raise UsageError(
            f"ember: {op}: cache must be a KvCache of {n_layers} layers (model.new_cache(batch, max_len)), "
            f"got {cache!r:.80}"
        )
    if cache_position is None:
        raise UsageError(
            f"ember: {op}: a cache needs cache_position, an int tensor [1] holding the slot of the first new "
            "token (Tensor.from_ints([0]) for the prompt, then the number of tokens so far)"
        )


def padding_mask(attention_mask: Tensor | None, batch: int, key_len: int, device: Device, op: str) -> Tensor | None:
    """``True`` at the padding of ``attention_mask`` ``[batch, L]``, as ``[batch,
    key_len]``. With a cache, ``L`` may be shorter than the cache (the tokens so far):
    the slots after it count as tokens, since attention hides them as later keys."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, Tensor):
        raise DTypeError(
            f"ember: {op}: attention_mask must be a Tensor of 1 and 0, got {type(attention_mask).__name__}"
        )
    dims = attention_mask.dims()
    if attention_mask.rank != 2 or dims[0] != batch or dims[1] > key_len:
        raise ShapeError(
            f"ember: {op}: attention_mask must be [batch={batch}, keys] with keys <= {key_len} (the input's length, "
            f"or the cache's max_len), got {dims}"
        )
    mask = attention_mask if attention_mask.device is device else attention_mask.to_device(device)
    mask = mask.int()
    if dims[1] < key_len:
        mask = Tensor.cat([mask, Tensor.ones([batch, key_len - dims[1]], device=device, dtype=mask.dtype)], 1)
    return mask.equal_elem(0)


def window_mask(seq: int, key_len: int, window: int, start: Tensor | None, device: Device) -> Tensor:
    """``[seq, key_len]``: ``True`` where a key lies ``window`` or more slots before its
    query (Hugging Face's sliding window: a query sees itself and the ``window - 1``
    keys before it). Query ``i`` is at slot ``start + i`` (``start`` an int tensor
    ``[1]``; ``None``: 0)."""
    offsets = Tensor.arange(key_len, device=device)
    if start is not None:
        offsets = offsets.sub((start if start.device is device else start.to_device(device)).int())
    queries = Tensor.arange(seq, device=device).sub_scalar(window).unsqueeze_dim(1)
    return offsets.unsqueeze_dim(0).lower_equal(queries)

"""The masks of a decoder-only model's self-attention, from Hugging Face's inputs.

``attention_mask`` is Hugging Face's ``[batch, keys]`` tensor of 1 (a token) and 0
(padding); the masks here are bool, ``True`` hiding a key (``MultiHeadAttention``'s
convention). Queries and keys are addressed by their slots: ``0 .. seq - 1`` without a
cache, ``cache_position + i`` for the ``i``-th new token with one, where the keys are
the cache's ``max_len`` slots.
"""

from __future__ import annotations

from ember.device import Device
from ember.errors import DTypeError, ShapeError
from ember.tensor import Tensor

__all__ = ["padding_mask", "window_mask"]


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

"""The input and output of ``MultiHeadAttention`` and the checks of its masks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ember.errors import DTypeError, ShapeError
from ember.nn.attention.cache import LayerCache
from ember.tensor import Tensor


@dataclass(frozen=True)
class MhaInput:
    """The input of :class:`MultiHeadAttention`: ``query`` ``[batch, seq_q, d_model]``,
    ``key`` and ``value`` ``[batch, seq_k, d_model]``, and optional bool masks where
    ``True`` hides a key: ``mask_pad`` ``[batch, seq_k]`` (padding) and ``mask_attn``
    ``[batch, seq_q, seq_k]``, ``[seq_q, seq_k]``, or ``[batch, n_heads, seq_q, seq_k]``
    (batch and heads may be 1: broadcast)."""

    query: Tensor
    key: Tensor
    value: Tensor
    mask_pad: Tensor | None = None
    mask_attn: Tensor | None = None

    @staticmethod
    def self_attn(x: Tensor) -> MhaInput:
        """Query, key and value all ``x``."""
        return MhaInput(x, x, x)

    @staticmethod
    def new(query: Tensor, key: Tensor, value: Tensor) -> MhaInput:
        return MhaInput(query, key, value)

    def with_mask_pad(self, mask_pad: Tensor) -> MhaInput:
        """This input with a padding mask ``[batch, seq_k]``."""
        return replace(self, mask_pad=mask_pad)

    def with_mask_attn(self, mask_attn: Tensor) -> MhaInput:
        """This input with an attention mask ``[batch, seq_q, seq_k]`` or ``[seq_q, seq_k]``."""
        return replace(self, mask_attn=mask_attn)


@dataclass(frozen=True)
class MhaOutput:
    """``context`` ``[batch, seq_q, d_model]``, the attention ``weights``
    ``[batch, n_heads, seq_q, seq_k]`` (after softmax, before dropout) and, when the
    call was given one, the updated ``cache``. Unpacks as PyTorch's pair:
    ``context, weights = mha(x)``."""

    weights: Tensor
    context: Tensor
    cache: LayerCache | None = None

    def __iter__(self) -> Iterator[Tensor]:
        return iter((self.context, self.weights))


def bool_mask(name: str, mask: Tensor, like: Tensor) -> Tensor:
    """``mask`` checked to be a bool tensor, on ``like``'s device."""
    if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
        raise DTypeError(
            f"ember: MultiHeadAttention: {name} must be a bool Tensor (True hides a key), got {mask!r:.80}"
        )
    return mask if mask.device is like.device else mask.to_device(like.device)


def pad_mask(mask: Tensor, batch: int, seq_k: int, like: Tensor) -> Tensor:
    """The padding mask ``[batch or 1, seq_k]`` as ``[batch or 1, 1, 1, seq_k]``."""
    pad = bool_mask("mask_pad", mask, like)
    if pad.rank != 2 or pad.dims()[0] not in (1, batch) or pad.dims()[1] != seq_k:
        raise ShapeError(
            f"ember: MultiHeadAttention: mask_pad must be [batch={batch}, seq_k={seq_k}] (or [1, {seq_k}]), "
            f"got {pad.dims()}"
        )
    return pad.reshape([pad.dims()[0], 1, 1, seq_k])


def attn_mask(mask: Tensor, batch: int, heads: int, seq_q: int, seq_k: int, like: Tensor) -> Tensor:
    """The attention mask as ``[batch or 1, heads or 1, seq_q, seq_k]``."""
    mask = bool_mask("mask_attn", mask, like)
    dims = mask.dims()
    expected = f"[seq_q={seq_q}, seq_k={seq_k}], [batch={batch} or 1, {seq_q}, {seq_k}] or [batch, heads={heads} or 1, {seq_q}, {seq_k}]"
    if mask.rank == 2:
        mask = mask.reshape([1, 1] + dims)
    elif mask.rank == 3:
        mask = mask.unsqueeze_dim(1)
    elif mask.rank != 4:
        raise ShapeError(f"ember: MultiHeadAttention: mask_attn must be {expected}, got {dims}")
    b, h, q, k = mask.dims()
    if b not in (1, batch) or h not in (1, heads) or (q, k) != (seq_q, seq_k):
        raise ShapeError(f"ember: MultiHeadAttention: mask_attn must be {expected}, got {dims}")
    return mask


def additive_bias(bias: Tensor, batch: int, heads: int, seq_q: int, seq_k: int, like: Tensor) -> Tensor:
    """A float ``bias`` added to the scores, checked to broadcast to ``[batch, heads,
    seq_q, seq_k]`` (``seq_k`` is the cache's length with a cache)."""
    if not isinstance(bias, Tensor) or not bias.is_float():
        raise DTypeError(
            f"ember: MultiHeadAttention: bias must be a float Tensor added to the scores (e.g. 0 and finfo.min), "
            f"got {bias!r:.80}; give bool masks as mask/mask_attn"
        )
    dims = [1] * (4 - bias.rank) + bias.dims()
    if bias.rank > 4 or any(d not in (1, n) for d, n in zip(dims, (batch, heads, seq_q, seq_k))):
        raise ShapeError(
            f"ember: MultiHeadAttention: bias {bias.dims()} must broadcast to [batch={batch}, heads={heads}, "
            f"seq_q={seq_q}, seq_k={seq_k}]"
        )
    bias = bias if bias.device is like.device else bias.to_device(like.device)
    return bias.cast(like.dtype) if bias.dtype != like.dtype else bias

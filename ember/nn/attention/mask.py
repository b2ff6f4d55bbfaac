"""Attention masks: ``True`` marks a position that must not be attended to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ember.device import Device
from ember.errors import ValueRangeError
from ember.tensor import Tensor


def generate_autoregressive_mask(batch_size: int, seq_length: int, device: Device | None = None) -> Tensor:
    """The causal mask ``[batch_size, seq_length, seq_length]``: position ``i`` may
    attend to ``j <= i`` only (``True`` strictly above the diagonal).

    >>> generate_autoregressive_mask(1, 3).tolist()
    [[[False, True, True], [False, False, True], [False, False, False]]]
    """
    if batch_size <= 0 or seq_length <= 0:
        raise ValueRangeError(
            f"ember: generate_autoregressive_mask: batch_size and seq_length must be > 0, got {batch_size}, {seq_length}"
        )
    rows = Tensor.arange(seq_length, device=device).unsqueeze_dim(1)
    cols = Tensor.arange(seq_length, device=device).unsqueeze_dim(0)
    return cols.greater(rows).unsqueeze_dim(0).expand([batch_size, seq_length, seq_length])


@dataclass(frozen=True)
class GeneratePaddingMask:
    """The padded token ids ``[batch, seq]`` (int64) and their mask (``True`` at padding)."""

    tensor: Tensor
    mask: Tensor


def generate_padding_mask(
    pad_token: int,
    tokens_list: Sequence[Sequence[int]],
    max_seq_length: int | None = None,
    device: Device | None = None,
) -> GeneratePaddingMask:
    """Pads token sequences to the longest one (cut at ``max_seq_length``) with
    ``pad_token`` and masks the padding.

    >>> generate_padding_mask(0, [[5, 6, 7], [8]]).mask.tolist()
    [[False, False, False], [False, True, True]]
    """
    if not tokens_list:
        raise ValueRangeError("ember: generate_padding_mask: tokens_list must not be empty")
    longest = max(len(tokens) for tokens in tokens_list) or 1
    size = longest if max_seq_length is None else min(longest, max_seq_length)
    if size <= 0:
        raise ValueRangeError(f"ember: generate_padding_mask: max_seq_length must be > 0, got {max_seq_length}")
    rows = [list(tokens[:size]) + [pad_token] * (size - min(len(tokens), size)) for tokens in tokens_list]
    tensor = Tensor.from_ints(rows, device=device)
    return GeneratePaddingMask(tensor=tensor, mask=tensor.equal_elem(pad_token))

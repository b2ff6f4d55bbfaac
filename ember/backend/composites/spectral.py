"""``stft_frames`` (``torch.stft``'s framing): the signal padded on both sides, an
``n_fft``-point frame every ``hop`` samples, each times the window.

With ``hop`` a large part of ``n_fft`` (the usual 25-50%), the padded signal cut into
hop-sized blocks gives each frame as ``ceil(n_fft / hop)`` consecutive blocks: one
``cat`` of that many shifted block slices copies each sample once per frame reading it,
with no index. Otherwise (and for circular padding) one ``select`` makes the frames,
the padding included: each frame position reads the sample the padding would put there.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ember.backend.composites.registry import composite
from ember.backend.dtype import DType, promote
from ember.backend.ops import BinaryOp

#: Beyond this many hop-sized pieces per frame, one gather is cheaper than the ``cat``.
MAX_PIECES = 8


@lru_cache(maxsize=64)
def frame_index(length: int, n_fft: int, hop: int, pad: int, mode: str) -> np.ndarray:
    """The sample each frame position reads, ``[frames * n_fft]``, for a signal of
    ``length`` padded by ``pad`` on both sides in ``mode`` (read-only: cached)."""
    frames = 1 + (length + 2 * pad - n_fft) // hop
    pos = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :] - pad
    if mode == "reflect":
        pos = np.abs(pos)
        pos = np.where(pos >= length, 2 * (length - 1) - pos, pos)
    elif mode == "replicate":
        pos = np.clip(pos, 0, length - 1)
    elif mode == "circular":
        pos = pos % length
    index = pos.reshape(-1).astype(np.int64)
    index.flags.writeable = False
    return index


def _narrow(ops: Any, x: Any, start: int, length: int) -> Any:
    """``x[..., start:start + length]``."""
    slices = tuple((0, n, 1) for n in x.shape[:-1]) + ((start, start + length, 1),)
    return ops.slice(x, slices)


def _pad(ops: Any, x: Any, before: int, after: int, mode: str) -> Any:
    """``x`` padded along its last dim (``mode`` reflect, replicate or constant zeros)."""
    last = len(x.shape) - 1
    n = x.shape[-1]
    if mode == "reflect":
        parts = [ops.flip(_narrow(ops, x, 1, before), (last,))] if before else []
        parts.append(x)
        if after:
            parts.append(ops.flip(_narrow(ops, x, n - 1 - after, after), (last,)))
    elif mode == "replicate":
        lead = tuple(x.shape[:-1])
        parts = [ops.expand(_narrow(ops, x, 0, 1), (*lead, before))] if before else []
        parts.append(x)
        if after:
            parts.append(ops.expand(_narrow(ops, x, n - 1, 1), (*lead, after)))
    else:
        dtype = DType.from_numpy(x.dtype)
        parts = [ops.full((*x.shape[:-1], before), 0, dtype)] if before else []
        parts.append(x)
        if after:
            parts.append(ops.full((*x.shape[:-1], after), 0, dtype))
    return ops.cat(parts, last) if len(parts) > 1 else x


@composite("stft_frames")
def stft_frames(ops: Any, x: Any, window: Any, n_fft: int, hop: int, pad: int, pad_mode: str) -> Any:
    """The windowed frames ``[..., frames, n_fft]`` of ``x`` ``[..., L]`` (see the
    module docstring)."""
    lead = tuple(x.shape[:-1])
    length = x.shape[-1]
    count = 1 + (length + 2 * pad - n_fft) // hop
    pieces = -(-n_fft // hop)
    if pieces > MAX_PIECES or (pad and pad_mode == "circular"):
        index = ops.from_numpy(frame_index(length, n_fft, hop, pad, pad_mode))
        frames = ops.reshape(ops.select(x, len(lead), index), (*lead, count, n_fft))
    else:
        if pad:
            x = _pad(ops, x, pad, pad, pad_mode)
        total = length + 2 * pad
        blocks = count + pieces - 1
        need = blocks * hop  # the last block may run past the signal: those samples are never read
        x = _narrow(ops, x, 0, need) if need <= total else _pad(ops, x, 0, need - total, "constant")
        x = ops.reshape(x, (*lead, blocks, hop))
        rows = len(lead)
        parts = []
        for j in range(pieces):
            width = hop if j < pieces - 1 else n_fft - (pieces - 1) * hop
            slices = tuple((0, n, 1) for n in lead) + ((j, j + count, 1), (0, width, 1))
            parts.append(ops.slice(x, slices))
        frames = ops.cat(parts, rows + 1) if pieces > 1 else parts[0]
    if window is None:
        return frames
    dtype = promote(DType.from_numpy(frames.dtype), DType.from_numpy(window.dtype))
    if frames.dtype != dtype.np:
        frames = ops.cast(frames, dtype)
    if window.dtype != dtype.np:
        window = ops.cast(window, dtype)
    return ops.binary(BinaryOp.MUL, frames, window)

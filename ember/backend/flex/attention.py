"""flex's fused scaled dot-product attention: one numpy function instead of the
seven tensor ops of the composite (matmul, scale, mask, softmax's four passes,
dropout, matmul), with the score matrix updated in place."""

from __future__ import annotations

import numpy as np

from ember.backend.flex.quiet import quiet_reset, quiet_set

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def attention(query, key, value, mask, bias, fill, scale, causal, keep):
    """See :meth:`ember.backend.base.Backend.attention`."""
    if query.dtype not in _FLOATS:
        return NotImplemented
    token = quiet_set()
    try:
        scores = np.matmul(query, np.swapaxes(key, -1, -2))
        scores *= query.dtype.type(scale)
        if bias is not None:
            scores += bias
        hidden = mask
        if causal:
            rows, cols = scores.shape[-2:]
            later = np.arange(cols)[None, :] > np.arange(rows)[:, None]
            hidden = later if hidden is None else hidden | later
        if hidden is not None:
            np.putmask(scores, np.broadcast_to(hidden, scores.shape), query.dtype.type(fill))
        peak = scores.max(axis=-1, keepdims=True)
        empty = ~np.isfinite(peak) & (peak < 0)  # every key hidden by -inf
        if empty.any():
            peak = np.where(empty, 0.0, peak).astype(scores.dtype)
        scores -= peak
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        if empty.any():
            np.putmask(scores, np.broadcast_to(empty, scores.shape), 0.0)
        weights = scores if keep is None else scores * keep
        return np.matmul(weights, value), scores
    finally:
        quiet_reset(token)

"""flex's fused scaled dot-product attention, forward and backward: numpy functions
instead of the seven tensor ops of the composite (matmul, scale, mask, softmax's
four passes, dropout, matmul), with the score matrix updated in place.

Where the time goes on small heads (a ``[16, 4, 64, 64]`` score matrix) and what is
done about it:

* masks: a mask is usually a broadcast view (one causal ``[L, S]`` pattern for every
  batch and head). It is applied to the scores bit for bit (``and`` with a keep
  pattern, ``or`` with the fill's bits) from its smallest broadcast form, two
  branch-free passes, where a masked copy branches per element;
* the softmax: a native row kernel (:mod:`ember.backend.flex.native`) for float32.
  Without it (and for float64): numpy's reductions along a short last axis run several times slower
  than a pass over the array, so the exponentials are shifted by the array's
  maximum (one fast reduction) rather than each row's, and the row sums come from
  ``einsum``. A row whose sum is tiny there (its maximum 46 or more below the
  array's, where the shared shift would lose precision), or a maximum that is not
  finite, is recomputed with its own maximum, as the plain softmax does.
"""

from __future__ import annotations

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.quiet import quietly

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_BITS: dict[int, type[np.uint32] | type[np.uint64]] = {4: np.uint32, 8: np.uint64}
_F32 = np.dtype(np.float32)
_TINY_SUM = 1e-20  # exp(-46): below it a row is recomputed with its own maximum


def _compact(a: np.ndarray) -> np.ndarray:
    """The smallest array that broadcasts to ``a``: stride-0 dims cut to size 1."""
    index = tuple(slice(0, 1) if stride == 0 and n > 1 else slice(None) for n, stride in zip(a.shape, a.strides))
    return a[index]


def _hidden(mask, causal: bool, rows: int, cols: int):
    """The bool pattern of hidden keys, in its smallest broadcast form (or ``None``)."""
    hidden = None if mask is None else _compact(mask)
    if causal:
        later = np.arange(cols)[None, :] > np.arange(rows)[:, None]
        hidden = later if hidden is None else hidden | later
    return hidden


def _fill_hidden(scores: np.ndarray, hidden: np.ndarray, fill) -> None:
    """``scores[hidden] = fill`` in place, bitwise (``scores`` contiguous)."""
    bits = _BITS[scores.dtype.itemsize]
    keep = np.where(hidden, bits(0), ~bits(0))
    fill_bits = np.where(hidden, np.asarray(fill, scores.dtype).view(bits), bits(0))
    view = scores.view(bits)
    np.bitwise_and(view, keep, out=view)
    np.bitwise_or(view, fill_bits, out=view)


def _zero_hidden(grads: np.ndarray, hidden: np.ndarray) -> None:
    """``grads[hidden] = 0`` in place, bitwise."""
    bits = _BITS[grads.dtype.itemsize]
    view = grads.view(bits)
    np.bitwise_and(view, np.where(hidden, bits(0), ~bits(0)), out=view)


def _softmax_rows(rows: np.ndarray) -> None:
    """The plain softmax of ``[n, S]`` rows in place; rows of only ``-inf`` become zeros."""
    peak = rows.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(peak) & (peak < 0)
    if empty.any():
        peak = np.where(empty, 0.0, peak).astype(rows.dtype)
    rows -= peak
    np.exp(rows, out=rows)
    rows /= rows.sum(axis=-1, keepdims=True)
    if empty.any():
        np.putmask(rows, np.broadcast_to(empty, rows.shape), 0.0)


def softmax_last_dim(x: np.ndarray, empty_zero: bool = False) -> np.ndarray | None:
    """The softmax of the last dim of float32 ``x`` with the native row kernel (a row
    of only ``-inf`` gives zeros when ``empty_zero``, else NaN as numpy); ``None``
    without native kernels."""
    kernels = native.kernels(x.size)
    if kernels is None:
        return None
    flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty_like(flat)
    kernels.softmax_rows(native.address(flat), native.address(out), flat.shape[0], flat.shape[1], int(empty_zero))
    return out.reshape(x.shape)


def _softmax(scores: np.ndarray) -> np.ndarray:
    """The softmax of the last dim of ``scores`` (contiguous), as a new array."""
    flat = scores.reshape(-1, scores.shape[-1])
    if flat.size == 0:
        return scores.copy()
    if scores.dtype == _F32:  # one native pass per row: max, exponentials and sum, scaling
        out = softmax_last_dim(scores, empty_zero=True)
        if out is not None:
            return out
    peak = flat.max()
    if not np.isfinite(peak):
        out = flat.copy()
        _softmax_rows(out)
        return out.reshape(scores.shape)
    out = np.subtract(flat, peak)
    np.exp(out, out=out)
    sums = np.einsum("ij->i", out)
    small = sums < _TINY_SUM
    if small.any():  # rows far below the array's maximum: their own maximum, from the scores
        redo = flat[small]
        _softmax_rows(redo)
        out[small] = redo
        sums[small] = 1.0
    np.reciprocal(sums, out=sums)
    out *= sums[:, None]
    return out.reshape(scores.shape)


@quietly
def attention(query, key, value, mask, bias, fill, scale, causal, keep):
    """See :meth:`ember.backend.base.Backend.attention`."""
    if query.dtype not in _FLOATS:
        return NotImplemented
    scores = np.matmul(query, np.swapaxes(key, -1, -2))
    scores *= query.dtype.type(scale)
    if bias is not None:
        scores += bias
    hidden = _hidden(mask, causal, *scores.shape[-2:])
    if hidden is not None:
        _fill_hidden(scores, hidden, fill)
    probs = _softmax(scores)
    weights = probs if keep is None else probs * keep
    return np.matmul(weights, value), probs


@quietly
def attention_backward(
    query, key, value, probs, mask, keep, grad, scale, causal, need_query, need_key, need_value, need_scores
):
    """See :meth:`ember.backend.base.Backend.attention_backward`."""
    if query.dtype not in _FLOATS or grad.dtype != query.dtype:
        return NotImplemented
    dropped = probs if keep is None else probs * keep
    g_value = np.matmul(np.swapaxes(dropped, -1, -2), grad) if need_value else None
    g_query = g_key = g_scores = None
    if need_query or need_key or need_scores:
        ds = np.matmul(grad, np.swapaxes(value, -1, -2))  # the gradient of the weights
        if keep is not None:
            ds *= keep
        # Each row's dot(dS, P), float32 summed in float64 (its products are exact there): the
        # sum is all but independent of order, so the compiled kernel rounds the same value.
        dot = np.einsum("...i,...i->...", ds, probs, dtype=np.float64 if ds.dtype == _F32 else None)
        dot = dot.astype(ds.dtype, copy=False)
        ds -= dot[..., None]
        ds *= probs
        hidden = _hidden(mask, causal, *ds.shape[-2:])
        if hidden is not None:
            _zero_hidden(ds, hidden)
        s = query.dtype.type(scale)
        if need_query:
            g_query = np.matmul(ds, key)
            g_query *= s
        if need_key:
            g_key = np.matmul(np.swapaxes(ds, -1, -2), query)
            g_key *= s
        g_scores = ds if need_scores else None
    return g_query, g_key, g_value, g_scores

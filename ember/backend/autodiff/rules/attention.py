"""Fused attention: forward recording and backward steps side by side.

One fused call gives two outputs, the context and the attention weights, and each
gets its own node (the weights' gradient matters when a model reads them, e.g. an
attention loss). With ``P`` the weights, ``D = P * keep`` the dropped weights and
``G`` the incoming gradient of the context:

* ``dV = D^T G``; ``dP = (G V^T) * keep``;
* ``dS = P * (dP - sum(dP * P))`` (softmax), zero where a key was hidden;
* ``dQ = scale * dS K``, ``dK = scale * dS^T Q``, ``dBias = dS``.

A backend with a fused ``attention_backward`` (flex) computes the context's step in
one call; the steps below are the composite over the primitives (the forward's is
``ember.backend.composites.attention``).

Compute-bound: the inputs and the weights are kept.
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast
from ember.backend.composites.activation import softmax_backward
from ember.backend.composites.attention import hidden_keys
from ember.backend.ops import BinaryOp


def _t(ops, x):
    rank = len(x.shape)
    return ops.permute(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _hidden(ops, scores_shape, mask, causal):
    """The bool ``[..., L, S]`` of hidden keys (or ``None``), as the forward's composite."""
    return hidden_keys(ops, scores_shape[-2], scores_shape[-1], mask, causal)


def _scores_grad(ops, g_probs, probs, hidden):
    ds = softmax_backward(ops, probs, g_probs, len(probs.shape) - 1)
    return ds if hidden is None else ops.where(hidden, 0.0, ds)


def _query_key_grads(ops, ds, q, k, scale, ctx):
    track_q, track_k, bias_shape = ctx[2], ctx[3], ctx[5]
    gq = ops.binary(BinaryOp.MUL, ops.matmul(ds, k), scale) if track_q else None
    gk = ops.binary(BinaryOp.MUL, ops.matmul(_t(ops, ds), q), scale) if track_k else None
    gb = unbroadcast(ops, ds, bias_shape) if bias_shape is not None else None
    return gq, gk, gb


def _context_step(ops, g, saved, ctx):
    q, k, v, probs, mask, keep = saved
    scale, causal, track_q, track_k, track_v, bias_shape = ctx
    fused = ops.attention_backward(
        q, k, v, probs, mask, keep, g, scale, causal, track_q, track_k, track_v, bias_shape is not None
    )
    if fused is not NotImplemented:
        gq, gk, gv, gs = fused
        return (gq, gk, gv, None if gs is None else unbroadcast(ops, gs, bias_shape))
    dropped = probs if keep is None else ops.binary(BinaryOp.MUL, probs, keep)
    gv = ops.matmul(_t(ops, dropped), g) if track_v else None
    gq = gk = gb = None
    if track_q or track_k or bias_shape is not None:
        g_probs = ops.matmul(g, _t(ops, v))
        if keep is not None:
            g_probs = ops.binary(BinaryOp.MUL, g_probs, keep)
        ds = _scores_grad(ops, g_probs, probs, _hidden(ops, probs.shape, mask, causal))
        gq, gk, gb = _query_key_grads(ops, ds, q, k, scale, ctx)
    return (gq, gk, gv, gb)


def _weights_step(ops, g, saved, ctx):
    q, k, probs, mask = saved
    scale, causal = ctx[0], ctx[1]
    ds = _scores_grad(ops, g, probs, _hidden(ops, probs.shape, mask, causal))
    gq, gk, gb = _query_key_grads(ops, ds, q, k, scale, ctx)
    return (gq, gk, gb)


class AttentionRules(RecordMixin):
    """Recording of the fused attention."""

    def attention(self, query, key, value, mask, bias, fill, scale, causal, keep) -> Any:
        inner_mask = None if mask is None else mask.inner
        inner_bias = None if bias is None else bias.inner
        inner_keep = None if keep is None else keep.inner
        result = self.inner.attention(
            query.inner, key.inner, value.inner, inner_mask, inner_bias, fill, scale, causal, inner_keep
        )
        if result is NotImplemented:
            return NotImplemented
        out, probs = result
        nq, nk, nv = query.node, key.node, value.node
        nb = None if bias is None else bias.node
        if nq is None and nk is None and nv is None and nb is None:
            return AutodiffTensor(out, None), AutodiffTensor(probs, None)
        ctx = (scale, causal, nq is not None, nk is not None, nv is not None, None if nb is None else bias.shape)
        keep_q, keep_k = self._keep(query), self._keep(key)
        context = self._record(
            out,
            (nq, nk, nv, nb),
            _context_step,
            (keep_q, keep_k, self._keep(value), probs, inner_mask, inner_keep),
            ctx,
        )
        if nq is None and nk is None and nb is None:
            return context, AutodiffTensor(probs, None)
        weights = self._record(probs, (nq, nk, nb), _weights_step, (keep_q, keep_k, probs, inner_mask), ctx)
        return context, weights

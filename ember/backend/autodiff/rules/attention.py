"""Fused attention: forward recording and backward steps side by side.

One fused call gives two outputs, the context and the attention weights, and each
gets its own node (the weights' gradient matters when a model reads them, e.g. an
attention loss). With ``P`` the weights, ``D = P * keep`` the dropped weights and
``G`` the incoming gradient of the context:

* ``dV = D^T G``; ``dP = (G V^T) * keep``;
* ``dS = P * (dP - sum(dP * P))`` (softmax), zero where a key was hidden;
* ``dQ = scale * dS K``, ``dK = scale * dS^T Q``, ``dBias = dS``.

The context's step is one ``attention_backward`` call: a backend's fused kernel (flex;
a compiled plan's library step) or its composite
(``ember.backend.composites.attention``, beside the forward's).

Compute-bound: the inputs and the weights are kept.
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast
from ember.backend.composites.attention import hidden_keys, scores_grad
from ember.backend.composites.layers import transpose
from ember.backend.composites.registry import run
from ember.backend.ops import BinaryOp


def _hidden(ops, scores_shape, mask, causal):
    """The bool ``[..., L, S]`` of hidden keys (or ``None``), as the forward's composite."""
    return hidden_keys(ops, scores_shape[-2], scores_shape[-1], mask, causal)


def _query_key_grads(ops, ds, q, k, scale, ctx):
    track_q, track_k, bias_shape = ctx[2], ctx[3], ctx[5]
    gq = ops.binary(BinaryOp.MUL, ops.matmul(ds, k), scale) if track_q else None
    gk = ops.binary(BinaryOp.MUL, ops.matmul(transpose(ops, ds), q), scale) if track_k else None
    gb = unbroadcast(ops, ds, bias_shape) if bias_shape is not None else None
    return gq, gk, gb


def _context_step(ops, g, saved, ctx):
    q, k, v, probs, mask, keep = saved
    scale, causal, track_q, track_k, track_v, bias_shape = ctx
    gq, gk, gv, gs = run(
        ops,
        "attention_backward",
        q,
        k,
        v,
        probs,
        mask,
        keep,
        g,
        scale,
        causal,
        track_q,
        track_k,
        track_v,
        bias_shape is not None,
    )
    return (gq, gk, gv, None if gs is None else unbroadcast(ops, gs, bias_shape))


def _weights_step(ops, g, saved, ctx):
    q, k, probs, mask = saved
    scale, causal = ctx[0], ctx[1]
    ds = scores_grad(ops, g, probs, _hidden(ops, probs.shape, mask, causal))
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

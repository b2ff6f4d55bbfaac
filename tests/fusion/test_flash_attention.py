"""Attention in the online-softmax (flash) form inside compiled plans
(``ember/backend/fusion/llvm/flash.py``, chosen by ``flash_graph.py``), forced with
``EMBER_FLASH=1`` on shapes small enough for the suite: values and gradients against
torch's ``scaled_dot_product_attention`` in float64 (the oracle) and against eager
flex, causal and not, lengths that are not multiples of the blocks, queries longer and
shorter than keys, bool masks and additive biases with rows hidden everywhere (torch
and ember give zeros there, and zero gradients), inference, dropout drawn in the
kernels (equal to eager's draw from the same seed; its rate; the backward using the
forward's mask; reproducible by seed), and where the old steps are kept."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.fusion.llvm import flash_graph
from ember.backend.fusion.llvm.flash import BLOCK_K, BLOCK_Q
from ember.backend.fusion.steps import Library
from ember.nn import functional as F

_TOL = {np.float32: 3e-5, np.float64: 1e-11}
_TORCH_TOL = {np.float32: 2e-4, np.float64: 1e-10}
#: (batch, heads, queries, keys, dim, value dim): one block; several blocks with tails
#: (not multiples of BLOCK_Q/BLOCK_K); more queries than keys; one query and key.
SHAPES = [
    (2, 3, 9, 9, 5, 3),
    (1, 2, BLOCK_Q + 6, BLOCK_K + 6, 16, 16),
    (1, 1, 2 * BLOCK_Q + 3, BLOCK_K - 7, 8, 4),
    (2, 1, 33, 2 * BLOCK_K + 17, 12, 6),
    (1, 1, 1, 1, 4, 2),
]


@pytest.fixture(autouse=True)
def _flash_everywhere(monkeypatch):
    monkeypatch.setenv(flash_graph.ENV, "1")


def _library_ops(compiled) -> collections.Counter:
    entry = next(iter(compiled._entries.values()))
    (variant,) = entry.plan.variants
    return collections.Counter(s.node.op for s in variant.schedule.steps if isinstance(s, Library))


def _mask(rng, case: str, shape, dtype):
    b, _, nq, nk = shape
    if case == "bool":  # true: take part; row 1 sees nothing
        mask = rng.random((b, 1, nq, nk)) > 0.4
        mask[:, :, min(1, nq - 1)] = False
        return mask
    if case == "bias_inf":  # one pattern for every batch and head, the last row all -inf
        mask = np.where(rng.random((1, 1, nq, nk)) > 0.3, 0.0, -np.inf).astype(dtype)
        mask[..., -1, :] = -np.inf
        return mask
    if case == "padding_min":  # Hugging Face's padding bias: the last keys at finfo.min
        mask = np.zeros((b, 1, 1, nk), dtype)
        mask[..., -max(1, nk // 3) :] = np.finfo(dtype).min
        return mask
    return None


def _compiled_and_eager(arrays, w, mask, causal, dtype, dropout=0.0, seed=7, train=True):
    device = Device.flex().autodiff() if train else Device.flex()
    q, k, v = (Tensor.from_data(a, device=device) for a in arrays)
    if train:
        q, k, v = q.require_grad(), k.require_grad(), v.require_grad()
    wt = Tensor.from_data(w, device=device)
    extra = [] if mask is None else [Tensor.from_data(mask, device=device)]

    def step(q, k, v, w, *mask):
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[0] if mask else None, dropout_p=dropout, is_causal=causal
        )
        if not train:
            return [out]
        grads = out.mul(w).sum().backward()
        return [out, q.grad(grads), k.grad(grads), v.grad(grads)]

    compiled = ember.compile(step)
    for _ in range(3):  # traced, planned, then run compiled
        device.seed(seed)
        got = [t.to_data().to_numpy() for t in compiled(q, k, v, wt, *extra)]
    device.seed(seed)
    eager = [t.to_data().to_numpy() for t in step(q, k, v, wt, *extra)]
    return got, eager, compiled


def _torch(torch, arrays, w, mask, causal):
    tq, tk, tv = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays)
    tm = None if mask is None else torch.tensor(mask if mask.dtype == bool else mask.astype(np.float64))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal)
    out.mul(torch.tensor(w.astype(np.float64))).sum().backward()
    return [t.detach().numpy() for t in (out, tq.grad, tk.grad, tv.grad)]


def _arrays(rng, shape, dtype):
    b, h, nq, nk, e, ev = shape
    arrays = [rng.standard_normal(s).astype(dtype) for s in ((b, h, nq, e), (b, h, nk, e), (b, h, nk, ev))]
    return arrays, rng.standard_normal((b, h, nq, ev)).astype(dtype)


def _close(got, expected, tol):
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flash_matches_torch_and_eager(shape, causal, dtype, rng, torch):
    arrays, w = _arrays(rng, shape, dtype)
    got, eager, compiled = _compiled_and_eager(arrays, w, None, causal, dtype)
    assert _library_ops(compiled) == {"flash_attention": 1, "flash_attention_backward": 1}
    _close(got, eager, _TOL[dtype])
    _close(got, _torch(torch, arrays, w, None, causal), _TORCH_TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", ["bool", "bias_inf", "padding_min"])
def test_flash_masks_and_hidden_rows_match_torch(case, dtype, rng, torch):
    """Rows whose every key is hidden give zeros and zero gradients, as torch's."""
    shape = (2, 2, BLOCK_Q + 5, BLOCK_K + 9, 8, 4)
    arrays, w = _arrays(rng, shape, dtype)
    mask = _mask(rng, case, (2, 2, shape[2], shape[3]), dtype)
    got, eager, compiled = _compiled_and_eager(arrays, w, mask, False, dtype)
    assert _library_ops(compiled) == {"flash_attention": 1, "flash_attention_backward": 1}
    _close(got, eager, _TOL[dtype])
    expected = _torch(torch, arrays, w, mask, False)
    _close(got, expected, _TORCH_TOL[dtype])
    if case != "padding_min":
        empty = ~mask.any(-1) if case == "bool" else np.isneginf(mask).all(-1)
        rows = np.broadcast_to(empty, shape[:3])
        assert rows.any() and (got[0][rows] == 0).all() and (got[1][rows] == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_flash_inference_matches_torch(dtype, rng, torch):
    shape = (2, 2, BLOCK_Q + 11, BLOCK_K + 11, 8, 8)
    arrays, w = _arrays(rng, shape, dtype)
    got, eager, compiled = _compiled_and_eager(arrays, w, None, True, dtype, train=False)
    assert _library_ops(compiled) == {"flash_attention": 1}
    _close(got, eager, _TOL[dtype])
    _close(got, _torch(torch, arrays, w, None, True)[:1], _TORCH_TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_flash_dropout_is_eagers_draw(causal, dtype, rng):
    """The keep mask drawn in the kernels is element for element the draw eager makes
    from the same seed (values and gradients agree), and the draw and its scaling are
    gone from the plan."""
    shape = (2, 2, BLOCK_Q + 3, BLOCK_K + 21, 8, 5)
    arrays, w = _arrays(rng, shape, dtype)
    got, eager, compiled = _compiled_and_eager(arrays, w, None, causal, dtype, dropout=0.3)
    assert _library_ops(compiled) == {"flash_attention": 1, "flash_attention_backward": 1}
    entry = next(iter(compiled._entries.values()))
    assert not any(n.op == "random" for n in entry.plan.variants[0].expanded.graph.nodes)
    _close(got, eager, _TOL[dtype])
    plain, _, _ = _compiled_and_eager(arrays, w, None, causal, dtype)
    assert not np.allclose(got[0], plain[0])  # the draws took effect


def test_flash_dropout_rate_and_backward_mask(rng):
    """With the values the identity, the context is the dropped weights themselves:
    about ``p`` of them are 0, the others the weights over ``1 - p``; the gradients,
    recomputed in float64 from that mask, agree, so the backward used the forward's."""
    p, n = 0.3, 2 * BLOCK_K + 9
    q = rng.standard_normal((1, 2, n, 8))
    k = rng.standard_normal((1, 2, n, 8))
    v = np.broadcast_to(np.eye(n), (1, 2, n, n)).copy()
    w = rng.standard_normal((1, 2, n, n))
    arrays = [a.astype(np.float64) for a in (q, k, v)]
    got, _, compiled = _compiled_and_eager(arrays, w, None, False, np.float64, dropout=p)
    assert _library_ops(compiled)["flash_attention"] == 1
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(8)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = got[0]
    dropped = out == 0
    rate = dropped.mean()
    assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / out.size)
    np.testing.assert_allclose(out[~dropped], (probs / (1 - p))[~dropped], rtol=1e-10)
    keep = (~dropped) / (1 - p)
    # float64 oracle of the gradients with that mask: dV = (P keep)^T W, dP = (W V^T) keep
    g_v = np.swapaxes(probs * keep, -1, -2) @ w
    d_p = (w @ np.swapaxes(v, -1, -2)) * keep
    d_s = probs * (d_p - (d_p * probs).sum(-1, keepdims=True))
    g_q = d_s @ k / math.sqrt(8)
    g_k = np.swapaxes(d_s, -1, -2) @ q / math.sqrt(8)
    _close(got[1:], [g_q, g_k, g_v], 1e-10)


def test_flash_dropout_is_reproducible_by_seed(rng):
    shape = (1, 2, BLOCK_Q + 1, BLOCK_K + 1, 8, 4)
    arrays, w = _arrays(rng, shape, np.float32)
    first, _, _ = _compiled_and_eager(arrays, w, None, True, np.float32, dropout=0.2, seed=11)
    again, _, _ = _compiled_and_eager(arrays, w, None, True, np.float32, dropout=0.2, seed=11)
    other, _, _ = _compiled_and_eager(arrays, w, None, True, np.float32, dropout=0.2, seed=12)
    for a, b in zip(first, again, strict=True):
        assert a.tobytes() == b.tobytes()
    assert not np.array_equal(first[0], other[0])


def test_flash_plan_holds_no_score_matrix(rng):
    """The plan's buffers of a 512-key causal step are far below one ``[L, S]`` matrix
    per head, which the old steps store (``EMBER_FLASH=0``)."""
    shape = (1, 2, 512, 512, 16, 16)
    arrays, w = _arrays(rng, shape, np.float32)
    _, _, flash = _compiled_and_eager(arrays, w, None, True, np.float32)
    weights = 2 * 512 * 512 * 4
    assert next(iter(flash._entries.values())).plan.variants[0].memory.arena_bytes < weights / 4


def test_old_steps_kept_where_flash_does_not_apply(rng, monkeypatch):
    """The weights read (returned), a bias that needs its gradient, and ``EMBER_FLASH=0``
    keep the steps that store the weights; ``auto`` takes the flash form for training
    from ``AUTO_KEYS`` keys, for inference only where the weights are large."""
    from ember.tensor.attention import attention

    device = Device.flex().autodiff()
    n = 12
    q, k, v = (Tensor.from_data(rng.standard_normal((1, 2, n, 4)), device=device).require_grad() for _ in range(3))
    bias = Tensor.from_data(rng.standard_normal((1, 2, n, n)), device=device).require_grad()

    def with_weights(q, k, v):
        out, weights = attention(q, k, v, causal=True)
        grads = out.sum().backward()
        return out, weights, q.grad(grads)

    def with_bias_grad(q, k, v, bias):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        grads = out.sum().backward()
        return out, bias.grad(grads)

    def plain(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grads = out.sum().backward()
        return out, q.grad(grads)

    old = {"attention": 1, "attention_backward": 1}
    for fn, args in ((with_weights, (q, k, v)), (with_bias_grad, (q, k, v, bias))):
        compiled = ember.compile(fn)
        for _ in range(2):
            compiled(*args)
        assert _library_ops(compiled) == old
    for setting, expected in (("0", old), ("auto", old)):
        monkeypatch.setenv(flash_graph.ENV, setting)
        compiled = ember.compile(plain)
        for _ in range(2):
            compiled(q, k, v)
        assert _library_ops(compiled) == expected
    assert n < flash_graph.AUTO_KEYS
    long = flash_graph.AUTO_KEYS
    q, k, v = (Tensor.from_data(rng.standard_normal((1, 1, long, 4)), device=device).require_grad() for _ in range(3))
    compiled = ember.compile(plain)
    for _ in range(2):
        compiled(q, k, v)
    assert _library_ops(compiled) == {"flash_attention": 1, "flash_attention_backward": 1}
    # an inference of the same length keeps the old step: its weights are small
    arrays = [rng.standard_normal((1, 1, long, 4)) for _ in range(3)]
    infer = ember.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    for _ in range(2):
        infer(*(Tensor.from_data(a, device=device.inner()) for a in arrays))
    assert _library_ops(infer) == {"attention": 1}

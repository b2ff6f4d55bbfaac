"""Scaled dot-product attention under ``ember.compile`` on flex: recorded as one
``attention`` node (its gradient as one ``attention_backward``), each lowered to one
library step of the LLVM target (``ember/backend/fusion/llvm/attention.py``; these
shapes are below where ``EMBER_FLASH=auto`` takes the flash form, whose own tests are
``test_flash_attention.py``).
Values and gradients against eager flex (its numpy kernel), the composite
(``ember.backend.composites.attention``, run on flex's primitives) and torch's
``F.scaled_dot_product_attention``: causal, bool and additive masks (``-inf`` and
``finfo.min``), fully masked rows, grouped-query heads, dropout (compiled equals eager
from the same seed), float32 and float64."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.composites import COMPOSITES
from ember.backend.fusion.steps import Library
from ember.nn import functional as F

B, HQ, L, S, E, EV = 2, 4, 6, 9, 5, 3
CASES = ["plain", "causal", "bool", "additive_inf", "additive_min", "bias_grad", "gqa", "gqa_causal"]
_TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _inputs(rng, case: str, dtype):
    hk = 2 if case.startswith("gqa") else HQ
    s = L if "causal" in case else S
    q = rng.standard_normal((B, HQ, L, E)).astype(dtype)
    k = rng.standard_normal((B, hk, s, E)).astype(dtype)
    v = rng.standard_normal((B, hk, s, EV)).astype(dtype)
    mask = None
    if case == "bool":  # true: take part (torch's convention); row 2 of every head sees nothing
        mask = rng.random((B, 1, L, s)) > 0.4
        mask[:, :, 2] = False
    elif case == "additive_inf":  # one pattern for every batch and head, a row of only -inf
        mask = np.where(rng.random((1, 1, L, s)) > 0.3, 0.0, -np.inf).astype(dtype)
        mask[..., 4, :] = -np.inf
    elif case == "additive_min":  # padding per sample, as Hugging Face's models build it
        mask = np.zeros((B, 1, 1, s), dtype)
        mask[0, ..., -3:] = np.finfo(dtype).min
        mask[1, ..., :] = np.finfo(dtype).min  # a sample with every key padded
    elif case == "bias_grad":  # a trained relative-position bias per head
        mask = rng.standard_normal((1, HQ, L, s)).astype(dtype)
    return q, k, v, mask


def _empty_rows(case: str, mask) -> np.ndarray:
    """Rows whose every key is hidden (torch gives NaN there, ember zeros), [B, H, L]."""
    if case == "bool":
        return np.broadcast_to(~mask.any(-1), (B, HQ, L))
    if case == "additive_inf":
        return np.broadcast_to(np.isneginf(mask).all(-1), (B, HQ, L))
    return np.zeros((B, HQ, L), bool)


def _step(case: str, dropout: float):
    causal = "causal" in case
    gqa = case.startswith("gqa")

    def step(q, k, v, w, mask=None):
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal, enable_gqa=gqa
        )
        grads = out.mul(w).sum().backward()
        tracked = [q, k, v] + ([mask] if case == "bias_grad" else [])
        return [out] + [t.grad(grads) for t in tracked]

    return step


def _run(rng, case: str, dtype, dropout: float = 0.0):
    q, k, v, mask = _inputs(rng, case, dtype)
    w = rng.standard_normal((B, HQ, L, EV)).astype(dtype)
    device = Device.flex().autodiff()
    tensors = [Tensor.from_data(a, device=device).require_grad() for a in (q, k, v)]
    m = None if mask is None else Tensor.from_data(mask, device=device)
    if case == "bias_grad":
        m = m.require_grad()
    wt = Tensor.from_data(w, device=device)
    step = _step(case, dropout)
    extra = [] if m is None else [m]
    compiled = ember.compile(step)
    for _ in range(3):  # traced, planned, then run compiled
        device.seed(7)
        got = [t.to_data().to_numpy() for t in compiled(*tensors, wt, *extra)]
    device.seed(7)
    eager = [t.to_data().to_numpy() for t in step(*tensors, wt, *extra)]
    return (q, k, v, mask, w), got, eager, compiled


def _assert_one_step_each(compiled) -> None:
    entry = next(iter(compiled._entries.values()))
    ops = collections.Counter(n.op for n in entry.graph.nodes)
    assert ops["attention"] == 1 and ops["attention_backward"] == 1 and ops["softmax"] == 0
    (variant,) = entry.plan.variants
    library = collections.Counter(s.node.op for s in variant.schedule.steps if isinstance(s, Library))
    assert library["attention"] == 1 and library["attention_backward"] == 1
    assert not any(s.node.op in ("softmax", "matmul") for s in variant.schedule.steps if hasattr(s, "node"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_compiled_attention_matches_eager_and_torch(case, dtype, rng, torch):
    (q, k, v, mask, w), got, eager, compiled = _run(rng, case, dtype)
    tol = _TOL[dtype]
    for a, b in zip(got, eager, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    _assert_one_step_each(compiled)

    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None if mask is None else torch.tensor(mask, requires_grad=case == "bias_grad")
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tm, is_causal="causal" in case, enable_gqa=case.startswith("gqa")
    )
    out.mul(torch.tensor(w)).sum().backward()
    expected = [out, tq.grad, tk.grad, tv.grad] + ([tm.grad] if case == "bias_grad" else [])
    expected = [t.detach().numpy() for t in expected]
    empty = _empty_rows(case, mask)
    assert (got[0][empty] == 0).all()  # ember: zero weights; torch: NaN
    keep = ~empty
    loose = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got[0][keep], expected[0][keep], rtol=loose, atol=loose)
    if not empty.any():  # torch's NaN rows spread into its key and value gradients
        for a, b in zip(got[1:], expected[1:], strict=True):
            np.testing.assert_allclose(a, b, rtol=loose, atol=loose)
    else:
        np.testing.assert_allclose(got[1][keep], expected[1][keep], rtol=loose, atol=loose)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_compiled_dropout_equals_eager_from_the_same_seed(dtype, rng):
    _, got, eager, compiled = _run(rng, "causal", dtype, dropout=0.3)
    for a, b in zip(got, eager, strict=True):
        np.testing.assert_allclose(a, b, rtol=_TOL[dtype], atol=_TOL[dtype])
    assert (got[0] != 0).any()
    _assert_one_step_each(compiled)
    _, other, _, _ = _run(np.random.default_rng(1234), "causal", dtype, dropout=0.0)
    assert not np.allclose(got[0], other[0])  # the draws took effect


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", ["causal", "bool", "additive_inf", "bias_grad"])
def test_the_library_steps_equal_the_composite(case, dtype, rng):
    """The forward and backward steps against the composites run on flex's primitives
    (the one definition of the math), the same keep mask given to both."""
    q, k, v, mask = _inputs(rng, case, dtype)
    flex = Device.flex()._backend
    hidden = bias = None
    if mask is not None and mask.dtype == bool:
        hidden = np.broadcast_to(~mask, (B, HQ, L, mask.shape[-1]))
    elif mask is not None:
        bias = np.broadcast_to(mask, (B, HQ, L, mask.shape[-1]))
    keep = (rng.random((B, HQ, L, k.shape[-2])) > 0.25).astype(dtype) / dtype(0.75)
    scale = 1.0 / math.sqrt(E)
    causal = case == "causal"
    args = (q, k, v, hidden, bias, -np.inf, scale, causal, keep)
    context, probs = (np.asarray(a) for a in COMPOSITES["attention"](flex, *args))
    grad = rng.standard_normal(context.shape).astype(dtype)
    wanted = COMPOSITES["attention_backward"](flex, q, k, v, probs, hidden, keep, grad, scale, causal, *[True] * 4)

    device = Device.flex()
    given = {name: a for name, a in (("hidden", hidden), ("bias", bias)) if a is not None}

    def fn(q, k, v, keep, grad, **given):
        # the backend calls themselves: the trace records them as the two nodes
        ops = q.device._backend
        h, b = (given[n].primitive if n in given else None for n in ("hidden", "bias"))
        c, p = ops.attention(q.primitive, k.primitive, v.primitive, h, b, -np.inf, scale, causal, keep.primitive)
        gs = ops.attention_backward(
            q.primitive, k.primitive, v.primitive, p, h, keep.primitive, grad.primitive, scale, causal, *[True] * 4
        )
        return [Tensor(x, q.device) for x in (c, p, *gs)]

    def to(a):
        return Tensor.from_data(np.ascontiguousarray(a), device=device)

    compiled = ember.compile(fn)
    for _ in range(2):
        got = [
            t.to_data().to_numpy()
            for t in compiled(*map(to, (q, k, v, keep, grad)), **{n: to(a) for n, a in given.items()})
        ]
    entry = next(iter(compiled._entries.values()))
    (variant,) = entry.plan.variants
    assert sorted(s.node.op for s in variant.schedule.steps if isinstance(s, Library)) == [
        "attention",
        "attention_backward",
    ]
    tol = _TOL[dtype]
    for a, b in zip(got, [context, probs, *wanted], strict=True):
        np.testing.assert_allclose(a, np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("fill", [-math.inf, -3.0], ids=["fill_inf", "fill_finite"])
@pytest.mark.parametrize(("nq", "nk"), [(40, 40), (37, 50), (50, 37)])
def test_causal_blocks_in_row_tiles_match_eager_and_torch(nq, nk, fill, dtype, rng, torch):
    """Causal blocks of 32 rows or more run in row tiles whose products stop at their
    last query's keys (at -inf; with a finite fill the hidden keys still weigh)."""
    from ember.tensor.attention import attention

    device = Device.flex().autodiff()
    arrays = [rng.standard_normal(s).astype(dtype) for s in ((2, 3, nq, 8), (2, 3, nk, 8), (2, 3, nk, 5))]
    q, k, v = (Tensor.from_data(a, device=device).require_grad() for a in arrays)
    w_np = rng.standard_normal((2, 3, nq, 5)).astype(dtype)
    w = Tensor.from_data(w_np, device=device)

    def step(q, k, v, w, dropout):
        out, weights = attention(q, k, v, causal=True, fill=fill, dropout=dropout)
        grads = out.mul(w).sum().backward()
        return out, weights, q.grad(grads), k.grad(grads), v.grad(grads)

    tol = _TOL[dtype]
    results = {}
    for dropout in (0.0, 0.2):
        compiled = ember.compile(lambda q, k, v, w: step(q, k, v, w, dropout))  # noqa: B023
        for _ in range(2):
            device.seed(3)
            got = [t.to_data().to_numpy() for t in compiled(q, k, v, w)]
        device.seed(3)
        eager = [t.to_data().to_numpy() for t in step(q, k, v, w, dropout)]
        for a, b in zip(got, eager, strict=True):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        _assert_one_step_each(compiled)
        results[dropout] = got

    got = results[0.0]
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in arrays)
    scores = (tq @ tk.transpose(-1, -2)) * (1.0 / math.sqrt(8))
    hidden = torch.ones(nq, nk, dtype=torch.bool).triu(1)
    out = scores.masked_fill(hidden, fill).softmax(-1) @ tv
    out.mul(torch.tensor(w_np)).sum().backward()
    loose = 1e-4 if dtype == np.float32 else 1e-10
    for a, b in zip([got[0], *got[2:]], [out, tq.grad, tk.grad, tv.grad], strict=True):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=loose, atol=loose)

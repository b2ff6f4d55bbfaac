"""``scaled_dot_product_attention(..., enable_gqa=True)`` against PyTorch: grouped and
multi-query key/value heads with every kind of mask, values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ShapeError
from ember.tensor.attention import attention, scaled_dot_product_attention
from tests.conftest import assert_close
from tests.nn.parity import leaf, rand

CASES = {
    "gqa": {"heads": (4, 2)},
    "mqa": {"heads": (6, 1)},
    "same_heads": {"heads": (3, 3)},
    "causal": {"heads": (4, 2), "is_causal": True},
    "bool_mask_per_head": {"heads": (4, 2), "mask": (2, 4, 3, 5)},
    "bool_mask_shared": {"heads": (4, 1), "mask": (3, 5)},
    "float_mask_per_batch": {"heads": (4, 2), "bias": (2, 1, 3, 5)},
    "float_mask_per_head": {"heads": (4, 2), "bias": (4, 3, 5)},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_enable_gqa_matches_torch(name, torch, rng):
    case = CASES[name]
    hq, hk = case["heads"]
    seq_k = 3 if case.get("is_causal") else 5
    q, k, v = rand(rng, 2, hq, 3, 8), rand(rng, 2, hk, seq_k, 8), rand(rng, 2, hk, seq_k, 6)
    options: dict = {"is_causal": case.get("is_causal", False)}
    if "mask" in case:
        keep = rng.random(case["mask"]) > 0.3
        keep[..., 0] = True
        options["attn_mask"] = keep
    if "bias" in case:
        options["attn_mask"] = rand(rng, *case["bias"])
    ad = Device.flex().autodiff()
    ours = [leaf(a, ad) for a in (q, k, v)]
    theirs = [torch.from_numpy(a).requires_grad_() for a in (q, k, v)]
    mask = options.pop("attn_mask", None)
    out = scaled_dot_product_attention(
        *ours, attn_mask=None if mask is None else Tensor.from_data(mask, device=ad), enable_gqa=True, **options
    )
    expected = torch.nn.functional.scaled_dot_product_attention(
        *theirs, attn_mask=None if mask is None else torch.from_numpy(mask), enable_gqa=True, **options
    )
    assert_close(out, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = rand(rng, *out.dims())
    grads = out.mul(Tensor.from_data(w, device=ad)).sum().backward()
    (expected * torch.from_numpy(w)).sum().backward()
    for a, b in zip(ours, theirs):
        assert_close(a.grad(grads), b.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_grouped_weights_are_the_repeated_heads(rng):
    """The weights ``attention`` returns are those of the keys repeated per group."""
    flex = Device.flex()
    q, k, v = rand(rng, 1, 4, 3, 8), rand(rng, 1, 2, 5, 8), rand(rng, 1, 2, 5, 4)
    t = [Tensor.from_data(a, device=flex) for a in (q, k, v)]
    context, weights = attention(*t, causal=True, enable_gqa=True)
    repeated = [Tensor.from_data(np.repeat(a, 2, axis=1), device=flex) for a in (k, v)]
    context_ref, weights_ref = attention(t[0], *repeated, causal=True)
    assert_close(context, context_ref.to_numpy(), atol=1e-6)
    assert_close(weights, weights_ref.to_numpy(), atol=1e-6)


def test_enable_gqa_errors(rng):
    flex = Device.flex()
    q = Tensor.from_data(rand(rng, 1, 3, 2, 4), device=flex)
    k = Tensor.from_data(rand(rng, 1, 2, 2, 4), device=flex)
    with pytest.raises(ShapeError, match="dividing the query's"):
        scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(ShapeError, match="enable_gqa needs"):
        scaled_dot_product_attention(q.reshape([3, 2, 4]), k.reshape([2, 2, 4]), k.reshape([2, 2, 4]), enable_gqa=True)
    with pytest.raises(ShapeError):  # without enable_gqa the heads must broadcast
        scaled_dot_product_attention(q.narrow(1, 0, 2).repeat([1, 2, 1, 1]), k, k)


def test_enable_gqa_on_every_device(device, torch, rng):
    """Grouped heads with a causal mask and a boolean mask, values (and gradients on the
    autodiff devices) against torch."""
    q, k, v = rand(rng, 2, 4, 3, 8), rand(rng, 2, 2, 5, 8), rand(rng, 2, 2, 5, 6)
    keep = rng.random((2, 4, 3, 5)) > 0.3
    keep[..., 0] = True
    theirs = [torch.from_numpy(a).requires_grad_() for a in (q, k, v)]
    for options, their_mask in [({"is_causal": True}, None), ({}, keep)]:
        ours = [Tensor.from_data(a, device=device) for a in (q, k, v)]
        if device.is_autodiff():
            ours = [t.require_grad() for t in ours]
        mask = None if their_mask is None else Tensor.from_data(their_mask, device=device)
        out = scaled_dot_product_attention(*ours, attn_mask=mask, enable_gqa=True, **options)
        expected = torch.nn.functional.scaled_dot_product_attention(
            *theirs,
            attn_mask=None if their_mask is None else torch.from_numpy(their_mask),
            enable_gqa=True,
            **options,
        )
        assert_close(out, expected.detach().numpy(), rtol=1e-4, atol=1e-5)
        if not device.is_autodiff():
            continue
        w = rand(rng, *out.dims())
        grads = out.mul(Tensor.from_data(w, device=device)).sum().backward()
        for t in theirs:
            t.grad = None
        (expected * torch.from_numpy(w)).sum().backward()
        for a, b in zip(ours, theirs):
            assert_close(a.grad(grads), b.grad.numpy(), rtol=1e-4, atol=1e-4)

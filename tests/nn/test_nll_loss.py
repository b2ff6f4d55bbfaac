"""``NllLoss`` against ``torch.nn.functional.nll_loss``: values and gradients, class
weights, ignored targets, extra dims, reductions; and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.nn.loss import CrossEntropyLoss, NllLoss, NllLossConfig, Reduction
from ember.tensor import activation as F

CASES = {
    "plain": ({}, {}),
    "weights": ({"weights": [0.5, 2.0, 1.0, 0.25]}, {"weight": [0.5, 2.0, 1.0, 0.25]}),
    "ignored": ({"pad_tokens": [2]}, {"ignore_index": 2}),
    "both": (
        {"weights": [0.5, 2.0, 1.0, 0.25], "pad_tokens": [1]},
        {"weight": [0.5, 2.0, 1.0, 0.25], "ignore_index": 1},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5)])
@pytest.mark.parametrize("reduction", [Reduction.MEAN, Reduction.SUM, None])
def test_matches_torch(torch, case, shape, reduction):
    ours_cfg, theirs = CASES[case]
    rng = np.random.default_rng(12)
    log_probs = rng.standard_normal(shape).astype(np.float32) - 1.0  # NLL reads any numbers, normalised or not
    targets = rng.integers(0, 4, (shape[0],) + shape[2:])
    targets.reshape(-1)[0] = 2
    device = Device.flex().autodiff()
    x = Tensor.from_data(log_probs, device=device).require_grad()
    t = Tensor.from_data(targets, device=device)
    loss = NllLossConfig(**ours_cfg).init()
    out = loss.forward_no_reduction(x, t) if reduction is None else loss.forward(x, t, reduction)
    weights = np.random.default_rng(13).standard_normal(out.dims()).astype(np.float32)
    grad = x.grad(out.mul(Tensor.from_data(weights, device=device)).sum().backward()).to_numpy()
    tx = torch.tensor(log_probs, requires_grad=True)
    kwargs = {k: (torch.tensor(v) if k == "weight" else v) for k, v in theirs.items()}
    mode = "none" if reduction is None else reduction.value
    expected = torch.nn.functional.nll_loss(tx, torch.from_numpy(targets), reduction=mode, **kwargs)
    expected = expected.reshape(out.dims())
    expected.backward(torch.from_numpy(weights))
    np.testing.assert_allclose(out.to_numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_is_cross_entropy_after_log_softmax():
    rng = np.random.default_rng(14)
    logits = Tensor.from_data(rng.standard_normal((8, 5)).astype(np.float32))
    targets = Tensor.from_data(rng.integers(0, 5, 8))
    a = NllLoss()(F.log_softmax(logits, 1), targets).into_scalar()
    b = CrossEntropyLoss()(logits, targets).into_scalar()
    assert abs(a - b) < 1e-6


def test_errors():
    with pytest.raises(DTypeError, match="class indices"):
        NllLoss()(Tensor.zeros([2, 3]), Tensor.zeros([2, 3]))
    with pytest.raises(ShapeError, match=r"targets must have shape \[2\]"):
        NllLoss()(Tensor.zeros([2, 3]), Tensor.from_ints([0, 1, 2]))
    with pytest.raises(ShapeError, match="3 class weights for 4 classes"):
        NllLossConfig(weights=[1.0, 1.0, 1.0]).init()(Tensor.zeros([2, 4]), Tensor.from_ints([0, 1]))
    with pytest.raises(ConfigError, match="weights"):
        NllLossConfig(weights=[-1.0])
    with pytest.raises(ShapeError, match=r"\[batch, classes"):
        NllLoss()(Tensor.zeros([3]), Tensor.from_ints([0, 1, 2]))

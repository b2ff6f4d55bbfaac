"""Every loss against torch.nn.functional: values for each reduction and gradients."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ShapeError, ValueRangeError
from ember.nn.loss import (
    BinaryCrossEntropyLossConfig,
    CosineEmbeddingLossConfig,
    CrossEntropyLossConfig,
    HuberLossConfig,
    KLDivLossConfig,
    L1Loss,
    Reduction,
    SmoothL1LossConfig,
)
from tests.conftest import assert_close, import_torch
from tests.nn.parity import autodiff_of, leaf, rand, to_torch

pytestmark = pytest.mark.torch
REDUCTIONS = [(Reduction.MEAN, "mean"), (Reduction.SUM, "sum"), (Reduction.AUTO, "mean")]


def _check(device, ember_fn, torch_fn, arrays, grad_index=0, rtol=1e-5, atol=1e-6):
    """Value on ``device``, and the gradient with respect to ``arrays[grad_index]``."""
    ad = autodiff_of(device)
    t_inputs = [to_torch(a, i == grad_index) for i, a in enumerate(arrays)]
    ref = torch_fn(*t_inputs)
    plain = ember_fn(*(Tensor.from_data(a, device=device) for a in arrays))
    assert plain.dims() == [1]
    assert_close(plain, ref.detach().numpy().reshape(1), rtol=rtol, atol=atol)
    tensors = [leaf(a, ad) if i == grad_index else Tensor.from_data(a, device=ad) for i, a in enumerate(arrays)]
    grads = ember_fn(*tensors).backward()
    ref.backward()
    assert_close(
        tensors[grad_index].grad(grads), t_inputs[grad_index].grad.numpy(), rtol=max(rtol, 1e-4), atol=max(atol, 1e-6)
    )


@pytest.mark.parametrize("reduction,name", REDUCTIONS)
def test_cross_entropy_plain(device, reduction, name, rng):
    torch = import_torch()
    logits, targets = rand(rng, 6, 5), rng.integers(0, 5, 6)
    loss = CrossEntropyLossConfig().init()
    _check(
        device,
        lambda x, t: loss(x, t, reduction),
        lambda x, t: torch.nn.functional.cross_entropy(x, t, reduction=name),
        [logits, targets],
    )


@pytest.mark.parametrize("reduction,name", REDUCTIONS)
def test_cross_entropy_weights_smoothing_and_ignored_targets(device, reduction, name, rng):
    torch = import_torch()
    logits, targets = rand(rng, 8, 4), np.array([0, 3, 1, 1, 2, 3, 0, 2])
    weights = [0.5, 2.0, 1.0, 1.5]
    loss = CrossEntropyLossConfig(pad_tokens=[3], weights=weights, smoothing=0.2).init()

    def ref(x, t):
        return torch.nn.functional.cross_entropy(
            x, t, torch.tensor(weights), ignore_index=3, reduction=name, label_smoothing=0.2
        )

    _check(device, lambda x, t: loss(x, t, reduction), ref, [logits, targets])
    per_sample = loss.forward_no_reduction(Tensor.from_data(logits), Tensor.from_data(targets))
    expected = torch.nn.functional.cross_entropy(
        to_torch(logits),
        torch.from_numpy(targets),
        torch.tensor(weights),
        ignore_index=3,
        reduction="none",
        label_smoothing=0.2,
    )
    assert_close(per_sample, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_cross_entropy_spatial_and_probability_targets(device, rng):
    torch = import_torch()
    logits, targets = rand(rng, 2, 4, 3, 5), rng.integers(0, 4, (2, 3, 5))
    loss = CrossEntropyLossConfig(smoothing=0.1).init()
    _check(
        device,
        lambda x, t: loss(x, t),
        lambda x, t: torch.nn.functional.cross_entropy(x, t, label_smoothing=0.1),
        [logits, targets],
    )
    probs = np.random.default_rng(0).dirichlet(np.ones(4), size=6).astype(np.float32)
    weights = [1.0, 2.0, 0.5, 1.0]
    loss = CrossEntropyLossConfig(weights=weights, smoothing=0.3).init()
    _check(
        device,
        lambda x, t: loss(x, t),
        lambda x, t: torch.nn.functional.cross_entropy(x, t, torch.tensor(weights), label_smoothing=0.3),
        [rand(rng, 6, 4), probs],
    )


def test_cross_entropy_from_probabilities_and_errors():
    torch = import_torch()
    probs = np.random.default_rng(1).dirichlet(np.ones(3), size=4).astype(np.float32)
    targets = np.array([0, 2, 1, 1])
    loss = CrossEntropyLossConfig(logits=False).init()
    expected = torch.nn.functional.nll_loss(torch.from_numpy(probs).log(), torch.from_numpy(targets))
    assert_close(loss(Tensor.from_data(probs), Tensor.from_data(targets)), expected.numpy().reshape(1), rtol=1e-5)
    with pytest.raises(ShapeError, match=r"class-index targets must have shape \[4\]"):
        loss(Tensor.from_data(probs), Tensor.from_ints([0, 1]))
    with pytest.raises(ShapeError, match="2 class weights for 3 classes"):
        CrossEntropyLossConfig(weights=[1.0, 2.0]).init()(Tensor.from_data(probs), Tensor.from_data(targets))
    with pytest.raises(ConfigError, match=r"smoothing must lie in \[0, 1\]"):
        CrossEntropyLossConfig(smoothing=1.5)


@pytest.mark.parametrize("reduction,name", REDUCTIONS)
def test_binary_cross_entropy(device, reduction, name, rng):
    torch = import_torch()
    x, y = rand(rng, 5, 3) * 3, rng.integers(0, 2, (5, 3)).astype(np.float32)
    weights = [0.5, 1.0, 2.0]
    with_logits = BinaryCrossEntropyLossConfig(logits=True, weights=weights).init()
    _check(
        device,
        lambda a, b: with_logits(a, b, reduction),
        lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b, torch.tensor(weights), reduction=name),
        [x, y],
    )
    probs = 1 / (1 + np.exp(-x))
    plain = BinaryCrossEntropyLossConfig().init()
    _check(
        device,
        lambda a, b: plain(a, b, reduction),
        lambda a, b: torch.nn.functional.binary_cross_entropy(a, b, reduction=name),
        [probs, y],
        rtol=1e-4,
    )


def test_binary_cross_entropy_smoothing_int_targets_and_saturated_probabilities():
    torch = import_torch()
    x = np.array([[0.0, 1.0, 0.3]], np.float32)
    y = np.array([[1, 0, 1]])
    loss = BinaryCrossEntropyLossConfig(smoothing=0.2).init()
    smoothed = torch.from_numpy(y * 0.8 + 0.1).float()
    expected = torch.nn.functional.binary_cross_entropy(torch.from_numpy(x), smoothed)
    assert_close(loss(Tensor.from_data(x), Tensor.from_data(y)), expected.numpy().reshape(1), rtol=1e-5)
    with pytest.raises(ShapeError, match="must have one shape"):
        loss(Tensor.from_data(x), Tensor.from_ints([1, 0, 1]))


BCE_OUT_OF_RANGE = [
    # (probabilities, targets, which side PyTorch names)
    ([0.5, 1.2], [0.0, 1.0], "input"),
    ([float("nan"), 0.5], [0.0, 1.0], "input"),
    ([-0.1, 0.5], [0.0, 1.0], "input"),
    ([0.5, 0.5], [2.0, -1.0], "target"),
    ([0.5, 0.5], [0.0, float("nan")], "target"),
]


@pytest.mark.parametrize(("probs", "targets", "side"), BCE_OUT_OF_RANGE)
def test_binary_cross_entropy_outside_the_unit_interval(device, probs, targets, side):
    """Issue 31 item 16: PyTorch raises; ember raises a ValueRangeError where the check is
    free (eager flex), and elsewhere (cube, fusion) skips it as its docstring says."""
    torch = import_torch()
    with pytest.raises(RuntimeError, match=f"all elements of {side} should be between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor(probs), torch.tensor(targets))
    loss = BinaryCrossEntropyLossConfig().init()
    p, y = Tensor.from_floats(probs, device=device), Tensor.from_floats(targets, device=device)
    if device.is_fusion() or device.backend_name != "flex":
        loss(p, y).to_data()  # no check: a value (NaN for inputs outside [0, 1]), no error
        return
    name = "inputs" if side == "input" else "targets"
    with pytest.raises(ValueRangeError, match=rf"every element of the {name} must lie in \[0, 1\]"):
        loss(p, y)
    with pytest.raises(ValueRangeError, match=r"got (NaN|values from -?[\d.]+ to [\d.]+) \(shape \[2\]\)"):
        loss(p, y)
    # the same values as logits are fine, and in range the loss is PyTorch's
    BinaryCrossEntropyLossConfig(logits=True).init()(p, y.clamp(0.0, 1.0).mask_fill(y.is_nan(), 0.0))
    edge = loss(Tensor.from_floats([0.0, 1.0], device=device), Tensor.from_floats([0.0, 1.0], device=device))
    assert edge.tolist() == [0.0]


@pytest.mark.parametrize("reduction,name", REDUCTIONS)
def test_regression_losses(device, reduction, name, rng):
    torch = import_torch()
    p, t = rand(rng, 4, 5) * 2, rand(rng, 4, 5) * 2
    nnf = torch.nn.functional
    cases = [
        (HuberLossConfig(0.7).init(), lambda a, b: nnf.huber_loss(a, b, reduction=name, delta=0.7)),
        (SmoothL1LossConfig(beta=0.5).init(), lambda a, b: nnf.smooth_l1_loss(a, b, reduction=name, beta=0.5)),
        (SmoothL1LossConfig(beta=0.0).init(), lambda a, b: nnf.smooth_l1_loss(a, b, reduction=name, beta=0.0)),
        (L1Loss(), lambda a, b: nnf.l1_loss(a, b, reduction=name)),
    ]
    for loss, ref in cases:
        _check(device, lambda a, b, loss=loss: loss(a, b, reduction), ref, [p, t])


@pytest.mark.parametrize(
    "reduction,name",
    [
        (Reduction.AUTO, "batchmean"),
        (Reduction.BATCH_MEAN, "batchmean"),
        (Reduction.MEAN, "mean"),
        (Reduction.SUM, "sum"),
    ],
)
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
def test_kl_div(device, reduction, name, log_target):
    torch = import_torch()
    log_p = np.log(np.random.default_rng(2).dirichlet(np.ones(5), size=4)).astype(np.float32)
    q = np.random.default_rng(3).dirichlet(np.ones(5), size=4).astype(np.float32)
    q[0, 1] = 0.0  # a zero target contributes 0
    target = np.log(q + 1e-8).astype(np.float32) if log_target else q
    loss = KLDivLossConfig(log_target=log_target).init()
    _check(
        device,
        lambda a, b: loss(a, b, reduction),
        lambda a, b: torch.nn.functional.kl_div(a, b, reduction=name, log_target=log_target),
        [log_p, target],
    )


@pytest.mark.parametrize("reduction,name", REDUCTIONS)
def test_cosine_embedding(device, reduction, name, rng):
    torch = import_torch()
    a, b = rand(rng, 6, 4), rand(rng, 6, 4)
    y = np.array([1, -1, 1, -1, -1, 1])
    loss = CosineEmbeddingLossConfig(margin=0.2).init()

    def ours(x1, x2, t):
        return loss(x1, x2, t, reduction)

    def theirs(x1, x2, t):
        return torch.nn.functional.cosine_embedding_loss(x1, x2, t, margin=0.2, reduction=name)

    _check(device, ours, theirs, [a, b, y])
    _check(device, ours, theirs, [a, b, y], grad_index=1)
    summed = CosineEmbeddingLossConfig(reduction=Reduction.SUM).init()
    expected = torch.nn.functional.cosine_embedding_loss(to_torch(a), to_torch(b), torch.from_numpy(y), reduction="sum")
    assert_close(
        summed(Tensor.from_data(a), Tensor.from_data(b), Tensor.from_data(y)), expected.numpy().reshape(1), rtol=1e-5
    )
    with pytest.raises(ShapeError, match=r"target must be \[batch=6\]"):
        loss(Tensor.from_data(a), Tensor.from_data(b), Tensor.from_ints([1, -1]))


def test_loss_shape_errors():
    with pytest.raises(ShapeError, match="must have one shape"):
        L1Loss()(Tensor.zeros([2, 3]), Tensor.zeros([3, 2]))
    with pytest.raises(ConfigError, match="delta must be > 0"):
        HuberLossConfig(0.0)
    ad = Device.flex().autodiff()
    assert HuberLossConfig(1.0).init()(Tensor.zeros([2], device=ad), Tensor.zeros([2], device=ad)).into_scalar() == 0.0

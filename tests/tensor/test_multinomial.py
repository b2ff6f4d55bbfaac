"""``Tensor.multinomial``: frequencies against the probabilities (and torch's own
sampler for draws without replacement), reproducibility from the device's seed, the
same draws on every backend, and errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ShapeError, ValueRangeError
from tests.conftest import DEVICE_NAMES, make_device


def within(counts: np.ndarray, probs: np.ndarray, n: int, sigmas: float = 5.0) -> None:
    """Each observed count lies within ``sigmas`` binomial standard deviations."""
    expected = probs * n
    std = np.sqrt(n * probs * (1 - probs)) + 1e-12
    assert (np.abs(counts - expected) <= sigmas * std + 1).all(), (counts, expected)


def test_with_replacement_frequencies_and_zero_weights():
    device = Device.flex()
    device.seed(3)
    weights = np.array([2.0, 0.0, 5.0, 1.0, 0.0, 2.0])  # unnormalised, zeros never drawn
    n = 40000
    draws = Tensor.from_data(weights.astype(np.float32), device=device).multinomial(n, replacement=True).to_numpy()
    assert draws.shape == (n,) and draws.dtype == np.int64
    counts = np.bincount(draws, minlength=6)
    assert counts[1] == 0 and counts[4] == 0
    within(counts, weights / weights.sum(), n)


def test_rows_draw_independently():
    device = Device.flex()
    device.seed(4)
    weights = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]], np.float32)
    draws = Tensor.from_data(weights, device=device).multinomial(3000, replacement=True).to_numpy()
    assert draws.shape == (3, 3000)
    assert (draws[0] == 0).all() and (draws[1] == 2).all()
    within(np.bincount(draws[2], minlength=3), np.full(3, 1 / 3), 3000)


def test_without_replacement_matches_sequential_draws_and_torch(torch):
    """Pairs drawn without replacement follow P(i, j) = p_i p_j / (1 - p_i), the
    distribution of drawing one at a time and renormalising, as torch.multinomial does."""
    p = np.array([0.1, 0.2, 0.3, 0.4])
    device = Device.flex()
    device.seed(5)
    rows = 20000
    weights = Tensor.from_data(np.tile(p, (rows, 1)).astype(np.float32), device=device)
    draws = weights.multinomial(2).to_numpy()
    assert (draws[:, 0] != draws[:, 1]).all()
    pairs = list(itertools.permutations(range(4), 2))
    exact = np.array([p[i] * p[j] / (1 - p[i]) for i, j in pairs])
    counts = np.array([np.sum((draws[:, 0] == i) & (draws[:, 1] == j)) for i, j in pairs])
    within(counts, exact, rows)
    generator = torch.Generator().manual_seed(0)
    theirs = torch.multinomial(torch.from_numpy(np.tile(p, (rows, 1))), 2, generator=generator).numpy()
    their_counts = np.array([np.sum((theirs[:, 0] == i) & (theirs[:, 1] == j)) for i, j in pairs])
    within(their_counts, exact, rows)  # the same law on both sides


def test_without_replacement_draws_every_category_once():
    device = Device.flex()
    device.seed(6)
    draws = Tensor.from_floats([[1.0, 5.0, 2.0, 0.5]], device=device).multinomial(4).to_numpy()
    assert sorted(draws[0].tolist()) == [0, 1, 2, 3]


def test_same_seed_same_draws_and_another_seed_others():
    device = Device.flex()
    weights = Tensor.from_floats([0.3, 0.2, 0.5], device=device)
    device.seed(7)
    a = weights.multinomial(50, replacement=True).to_numpy()
    device.seed(7)
    b = weights.multinomial(50, replacement=True).to_numpy()
    device.seed(8)
    c = weights.multinomial(50, replacement=True).to_numpy()
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


@pytest.mark.parametrize("name", [n for n in DEVICE_NAMES if n != "flex"])
def test_every_backend_draws_what_flex_draws(name):
    device = make_device(name)
    weights = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]], np.float32)
    results = []
    for d in (Device.flex(), device):
        d.seed(9)
        w = Tensor.from_data(weights, device=d)
        results.append((w.multinomial(6, replacement=True).to_numpy(), w.multinomial(3).to_numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)


def test_sampling_text_at_a_temperature():
    """The generator's pattern: logits / T, softmax, one draw (int64 [batch, 1])."""
    device = Device.flex().autodiff()
    device.seed(10)
    logits = Tensor.from_floats([[0.0, 10.0, 0.0]], device=device).require_grad()
    token = logits.div_scalar(0.5).softmax(-1).multinomial(1)
    assert token.dims() == [1, 1] and token.tolist() == [[1]]


def test_errors_name_the_problem():
    device = Device.flex()
    with pytest.raises(ValueRangeError, match="finite and >= 0"):
        Tensor.from_floats([0.5, -0.1], device=device).multinomial(1)
    with pytest.raises(ValueRangeError, match="finite and >= 0"):
        Tensor.from_floats([0.5, float("nan")], device=device).multinomial(1)
    with pytest.raises(ValueRangeError, match="sums to 0"):
        Tensor.from_floats([[1.0, 0.0], [0.0, 0.0]], device=device).multinomial(1)
    with pytest.raises(ValueRangeError, match="replacement=True"):
        Tensor.from_floats([1.0, 1.0], device=device).multinomial(3)
    with pytest.raises(ValueRangeError, match="only 1 categories"):
        Tensor.from_floats([1.0, 0.0, 0.0], device=device).multinomial(2)
    with pytest.raises(ShapeError, match=r"\[rows, categories\]"):
        Tensor.ones([2, 2, 2], device=device).multinomial(1)
    with pytest.raises(ValueRangeError, match="num_samples"):
        Tensor.ones([3], device=device).multinomial(0)

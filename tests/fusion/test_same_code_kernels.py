"""Elementwise kernels that differ only in their sizes and in where their run-time
scalars are share one LLVM function in a plan (their extent is an argument, their
scalars read relative to the first): an Adam step over parameters of different
sizes, compiled, against eager and against Adam in float64 numpy."""

from __future__ import annotations

import re

import numpy as np

import ember
from ember import Device, Module, Tensor
from ember.module.param import Param
from ember.optim import AdamConfig, GradientsParams

BETA_1, BETA_2, EPSILON, LR = 0.9, 0.999, 1e-5, 1e-2


class Pair(Module):
    small: Param
    large: Param


def adam64(values: list[np.ndarray], steps: int) -> list[np.ndarray]:
    """Adam (Burn's form: epsilon added to the bias-corrected root) on ``0.5 * sum(p**2)``,
    whose gradient is ``p``, in float64."""
    params = [v.astype(np.float64) for v in values]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        for i, p in enumerate(params):
            m[i] = BETA_1 * m[i] + (1 - BETA_1) * p
            v[i] = BETA_2 * v[i] + (1 - BETA_2) * p * p
            update = (m[i] / (1 - BETA_1**t)) / (np.sqrt(v[i] / (1 - BETA_2**t)) + EPSILON)
            params[i] = p - LR * update
    return params


def train(values: list[np.ndarray], steps: int, compiled: bool):
    device = Device.flex().autodiff()
    model = Pair(*(Param.from_tensor(Tensor.from_data(v, device=device)) for v in values))
    optim = AdamConfig(beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON).init()

    def step(model):
        loss = (model.small.val() * model.small.val()).sum() * 0.5 + (model.large.val() * model.large.val()).sum() * 0.5
        return optim.step(LR, model, GradientsParams.from_grads(loss.backward(), model))

    run = ember.compile(step) if compiled else step
    for _ in range(steps):
        model = run(model)
    return [p.val().to_data().to_numpy() for p in (model.small, model.large)], run


def test_kernels_differing_in_size_and_scalar_slots_share_one_function(rng):
    values = [rng.standard_normal(shape).astype(np.float32) for shape in ((3, 5), (40, 33))]
    steps = 6
    compiled, run = train(values, steps, True)
    eager, _ = train(values, steps, False)
    for got, same, expected in zip(compiled, eager, adam64(values, steps)):
        np.testing.assert_allclose(got, same, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.array_equal(compiled[1], train(values, steps, True)[0][1])  # run to run: bit-identical

    ir = next(variant.ir for entry in run._entries.values() for variant in entry.plan.variants)
    # A kernel function called with both parameters' sizes as its extent: one update for both.
    extents: dict[str, set[int]] = {}
    for name, extent in re.findall(r"call void @\"?([\w.]*_k\d+)\"?\([^\n]*, i64 (\d+)\)", ir):
        extents.setdefault(name, set()).add(int(extent))
    assert any({15, 1320} <= sizes for sizes in extents.values()), extents
    defined = set(re.findall(r"define internal void @\"?([\w.]*_k\d+)\"?\(", ir))
    assert set(extents) <= defined


def test_reductions_differing_in_their_outer_extent_share_one_function(rng):
    """Row sums along the innermost dim of [3, 8] and [70, 8] (the loop over rows takes
    its count as an argument; the reduced dim, and so the order of the sums, stays)."""
    values = [rng.standard_normal(shape).astype(np.float32) for shape in ((3, 8), (70, 8))]

    def step(a, b):
        return (a.exp() * 0.5).sum_dim(1), (b.exp() * 0.5).sum_dim(1)

    compiled = ember.compile(step)
    args = [Tensor.from_data(v, device=Device.flex()) for v in values]
    compiled(*args)  # the first call replays; the plan compiles for the next
    got = [t.to_numpy() for t in compiled(*args)]
    for value, x in zip(got, values):
        np.testing.assert_allclose(value[:, 0], (np.exp(x.astype(np.float64)) * 0.5).sum(1), rtol=1e-6)
    (entry,) = compiled._entries.values()
    (variant,) = entry.plan.variants
    extents: dict[str, set[int]] = {}
    for name, extent in re.findall(r"call void @\"?([\w.]*_k\d+)\"?\([^\n]*, i64 (\d+)\)", variant.ir):
        extents.setdefault(name, set()).add(int(extent))
    assert any({3, 70} <= sizes for sizes in extents.values()), extents

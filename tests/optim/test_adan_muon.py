"""Adan and Muon against references: Adan written here from the paper's algorithm
(torch 2.13 has no Adan), Muon against ``torch.optim.Muon`` with its bfloat16
Newton-Schulz iteration replaced by the same iteration in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.module import ParamGroup
from ember.optim import AdamWConfig, AdanConfig, AdjustLrFn, MuonConfig
from ember.optim.muon import zeropower_via_newton_schulz
from tests.conftest import import_torch
from tests.optim.problem import assert_moved, assert_trajectories_close, ember_run, torch_run

pytestmark = pytest.mark.torch


def reference_adan(torch):
    """Adan (Xie et al., Algorithm 1, in the betas-weigh-the-past convention of the
    authors' code), as a plain torch optimizer."""

    class Adan(torch.optim.Optimizer):
        def __init__(self, params, lr, betas, eps, weight_decay, no_prox):
            super().__init__(
                params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "no_prox": no_prox}
            )

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                b1, b2, b3 = group["betas"]
                lr, wd = group["lr"], group["weight_decay"]
                for p in group["params"]:
                    g = p.grad
                    state = self.state[p]
                    if not state:
                        state.update(
                            t=0, m=torch.zeros_like(p), v=torch.zeros_like(p), n=torch.zeros_like(p), prev=g.clone()
                        )
                    state["t"] += 1
                    t = state["t"]
                    diff = g - state["prev"]
                    state["m"] = b1 * state["m"] + (1 - b1) * g
                    state["v"] = b2 * state["v"] + (1 - b2) * diff
                    state["n"] = b3 * state["n"] + (1 - b3) * (g + b2 * diff) ** 2
                    state["prev"] = g.clone()
                    m_hat = state["m"] / (1 - b1**t)
                    v_hat = state["v"] / (1 - b2**t)
                    n_hat = state["n"] / (1 - b3**t)
                    update = (m_hat + b2 * v_hat) / (n_hat.sqrt() + group["eps"])
                    if group["no_prox"]:
                        p.mul_(1 - lr * wd).sub_(lr * update)
                    else:
                        p.sub_(lr * update).div_(1 + lr * wd)

    return Adan


ADAN_CASES = {
    "defaults": (AdanConfig(), 1e-2, {}),
    "betas": (
        AdanConfig(beta_1=0.9, beta_2=0.8, beta_3=0.999, epsilon=1e-6),
        1e-2,
        {"betas": (0.9, 0.8, 0.999), "eps": 1e-6},
    ),
    "proximal_decay": (AdanConfig(weight_decay=0.05), 2e-2, {"weight_decay": 0.05}),
    "decoupled_decay": (AdanConfig(weight_decay=0.05, no_prox=True), 2e-2, {"weight_decay": 0.05, "no_prox": True}),
}


@pytest.mark.parametrize("name", sorted(ADAN_CASES))
def test_adan_trajectory(name):
    torch = import_torch()
    config, lr, kwargs = ADAN_CASES[name]
    options = {"betas": (0.98, 0.92, 0.99), "eps": 1e-8, "weight_decay": 0.0, "no_prox": False, **kwargs}
    expected = torch_run(torch, lambda model: [reference_adan(torch)(model.parameters(), lr=lr, **options)])
    actual = ember_run(config.init(), lr)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


def newton_schulz_f64(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's iteration, in the gradient's dtype (float64 here)."""
    a, b, c = ns_coefficients
    x = grad.T if grad.size(0) > grad.size(1) else grad
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if grad.size(0) > grad.size(1) else x


MUON_CASES = {
    "defaults": (MuonConfig(), {}),
    "no_nesterov": (MuonConfig(nesterov=False, momentum=0.9), {"nesterov": False, "momentum": 0.9}),
    "weight_decay": (MuonConfig(weight_decay=0.1), {"weight_decay": 0.1}),
    "match_rms_adamw": (
        MuonConfig(adjust_lr_fn=AdjustLrFn.MATCH_RMS_ADAMW, ns_steps=3),
        {"adjust_lr_fn": "match_rms_adamw", "ns_steps": 3},
    ),
}


@pytest.mark.parametrize("name", sorted(MUON_CASES))
def test_muon_trajectory_with_adamw_for_biases(name, monkeypatch):
    """Muon on the weights (4x8 is wide, 8x3 tall in ember's layout), AdamW with its
    own learning rate on the biases, as a group; torch uses two optimizers."""
    torch = import_torch()
    import torch.optim._muon as torch_muon

    monkeypatch.setattr(torch_muon, "_zeropower_via_newtonschulz", newton_schulz_f64)
    config, kwargs = MUON_CASES[name]
    lr, bias_lr = 0.02, 3e-3

    def make(model):
        weights = [p for p in model.parameters() if p.ndim == 2]
        biases = [p for p in model.parameters() if p.ndim != 2]
        muon = torch.optim.Muon(weights, lr=lr, **{"weight_decay": 0.0, **kwargs})
        return [muon, torch.optim.AdamW(biases, lr=bias_lr, weight_decay=0.01, eps=1e-5)]

    expected = torch_run(torch, make)
    optim = config.init().with_group(ParamGroup.contains("bias"), AdamWConfig(weight_decay=0.01), lr=bias_lr)
    actual = ember_run(optim, lr)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


def test_muon_refuses_non_matrix_parameters():
    optim = MuonConfig().init()
    with pytest.raises(ConfigError, match=r"^ember: Muon: .*shape \[8\].*with_group"):
        ember_run(optim, 0.02, steps=1)


@pytest.mark.parametrize("shape", [(6, 6), (5, 9), (9, 5)])
def test_newton_schulz_orthogonalises(shape, rng):
    """The quintic iteration maps every singular value into roughly [0.5, 1.5] (Keller
    Jordan's design: U S' V^T), keeping the singular vectors."""
    g = rng.normal(size=shape)
    out = zeropower_via_newton_schulz(
        Tensor.from_data(g, device=Device.flex()), (3.4445, -4.775, 2.0315), 5, 1e-7
    ).to_numpy()
    assert out.shape == shape
    u, _, vt = np.linalg.svd(g, full_matrices=False)
    singular = np.linalg.svd(out, compute_uv=False)
    assert singular.min() > 0.5 and singular.max() < 1.5, singular
    # the same singular vectors: U^T out V is diagonal
    inner = u.T @ out @ vt.T
    np.testing.assert_allclose(inner - np.diag(np.diag(inner)), 0.0, atol=1e-9)


def test_muon_learning_rate_adjustment():
    """ember weights are [d_input, d_output]: the ratio uses fan_out / fan_in."""
    assert AdjustLrFn.ORIGINAL.ratio(4, 8) == pytest.approx(math.sqrt(2.0))
    assert AdjustLrFn.ORIGINAL.ratio(8, 4) == 1.0
    assert AdjustLrFn.MATCH_RMS_ADAMW.ratio(1024, 512) == pytest.approx(0.2 * 32.0)


def test_muon_dampening_follows_sgd_momentum(rng):
    """With dampening, Muon's velocity is SGD's: v1 = g1, v2 = m v1 + (1 - d) g2."""
    m, d = 0.9, 0.25
    w = rng.normal(size=(3, 5))
    g1, g2 = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    muon = MuonConfig(momentum=m, dampening=d, nesterov=False)
    flex = Device.flex()
    t = Tensor.from_data(w, device=flex)
    t1, state = muon.step(0.1, t, Tensor.from_data(g1, device=flex), None)
    t2, state = muon.step(0.1, t1, Tensor.from_data(g2, device=flex), state)
    velocity = m * g1 + (1 - d) * g2
    np.testing.assert_allclose(state.momentum.to_numpy(), velocity, rtol=1e-12)
    ratio = math.sqrt(max(1.0, 5 / 3))
    expected = t1.to_numpy() - 0.1 * ratio * newton_schulz_np(velocity)
    np.testing.assert_allclose(t2.to_numpy(), expected, rtol=1e-10, atol=1e-12)


def newton_schulz_np(g):
    x = g / max(np.linalg.norm(g), 1e-7)
    for _ in range(5):
        gram = x @ x.T
        x = 3.4445 * x + (-4.775 * gram + 2.0315 * gram @ gram) @ x
    return x

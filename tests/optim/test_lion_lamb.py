"""Lion and LAMB, which torch.optim lacks, against float64 numpy references written
here from the papers' equations (Lion: Chen et al. 2023, Algorithm 2; LAMB: You et
al. 2020, Algorithm 2 with phi the identity). PyTorch only computes the gradients of
the shared problem; every update is the numpy code below."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.optim import LambConfig, LionConfig
from tests.conftest import import_torch
from tests.optim.problem import assert_moved, assert_trajectories_close, ember_run, torch_run


def lion_update(w, g, state, lr, beta_1, beta_2, weight_decay):
    m = state.get("m", np.zeros_like(w))
    c = beta_1 * m + (1 - beta_1) * g
    w = w - lr * (np.sign(c) + weight_decay * w)
    state["m"] = beta_2 * m + (1 - beta_2) * g
    return w


def lamb_update(w, g, state, lr, beta_1, beta_2, epsilon, weight_decay):
    t = state["t"] = state.get("t", 0) + 1
    m = state["m"] = beta_1 * state.get("m", np.zeros_like(w)) + (1 - beta_1) * g
    v = state["v"] = beta_2 * state.get("v", np.zeros_like(w)) + (1 - beta_2) * g * g
    m_hat, v_hat = m / (1 - beta_1**t), v / (1 - beta_2**t)
    r = m_hat / (np.sqrt(v_hat) + epsilon) + weight_decay * w
    w_norm, r_norm = np.linalg.norm(w), np.linalg.norm(r)
    trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
    return w - lr * trust * r


def numpy_optimizer(torch, update, **options):
    """A torch optimizer whose step is ``update(w, g, state, lr, **options)`` in numpy."""

    class NumpyOptimizer(torch.optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    new = update(p.numpy().copy(), p.grad.numpy().copy(), self.state[p], group["lr"], **options)
                    p.copy_(torch.from_numpy(new))

    return NumpyOptimizer


LION_CASES = {
    "defaults": (LionConfig(), 1e-3, {}),
    "betas": (LionConfig(beta_1=0.95, beta_2=0.98), 2e-3, {"beta_1": 0.95, "beta_2": 0.98}),
    "weight_decay": (LionConfig(weight_decay=0.5), 2e-3, {"weight_decay": 0.5}),
}
LAMB_CASES = {
    "defaults": (LambConfig(), 1e-2, {}),
    "weight_decay": (LambConfig(weight_decay=0.1), 1e-2, {"weight_decay": 0.1}),
    "betas_epsilon": (
        LambConfig(beta_1=0.8, beta_2=0.99, epsilon=1e-8, weight_decay=0.01),
        2e-2,
        {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-8, "weight_decay": 0.01},
    ),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(LION_CASES))
def test_lion_trajectory(name):
    torch = import_torch()
    config, lr, options = LION_CASES[name]
    options = {"beta_1": 0.9, "beta_2": 0.99, "weight_decay": 0.0, **options}
    reference = numpy_optimizer(torch, lion_update, **options)
    expected = torch_run(torch, lambda model: [reference(model.parameters(), lr=lr)])
    actual = ember_run(config.init(), lr)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(LAMB_CASES))
def test_lamb_trajectory(name):
    torch = import_torch()
    config, lr, options = LAMB_CASES[name]
    options = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6, "weight_decay": 0.0, **options}
    reference = numpy_optimizer(torch, lamb_update, **options)
    expected = torch_run(torch, lambda model: [reference(model.parameters(), lr=lr)])
    actual = ember_run(config.init(), lr)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


def test_lamb_trust_ratio_is_one_for_a_zero_weight():
    """A zero tensor (a fresh bias) has no norm to trust: the step is ``lr * r``."""
    flex = Device.flex()
    w = Tensor.zeros([3], device=flex, dtype="float64")
    g = Tensor.from_data(np.array([0.5, -2.0, 1e-3]), device=flex)
    new, state = LambConfig(epsilon=1e-6).step(0.1, w, g)
    expected = lamb_update(np.zeros(3), g.to_numpy(), {}, 0.1, 0.9, 0.999, 1e-6, 0.0)
    np.testing.assert_allclose(new.to_numpy(), expected, rtol=1e-12)
    assert state.time == 1


def test_lion_update_has_unit_magnitude(rng):
    flex = Device.flex()
    w = rng.normal(size=(4, 5))
    g = rng.normal(size=(4, 5))
    new, _ = LionConfig().step(0.01, Tensor.from_data(w, device=flex), Tensor.from_data(g, device=flex))
    np.testing.assert_allclose(np.abs(new.to_numpy() - w), 0.01, rtol=1e-12)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LionConfig(beta_1=1.0), r"LionConfig: beta_1 must lie in \[0.0, 1.0\)"),
        (lambda: LionConfig(weight_decay=-1.0), r"LionConfig: weight_decay must lie"),
        (lambda: LambConfig(epsilon=0.0), r"LambConfig: epsilon must lie in \(0.0, inf\)"),
        (lambda: LambConfig(beta_2=-0.1), r"LambConfig: beta_2 must lie in \[0.0, 1.0\)"),
    ],
)
def test_invalid_configs(make, message):
    with pytest.raises(ConfigError, match=r"^ember: " + message):
        make()

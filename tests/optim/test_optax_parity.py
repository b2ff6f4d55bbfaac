"""Lion and LAMB against optax (torch.optim has neither): the stored trajectories of
``optax_reference.py`` everywhere, and optax itself where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.optim import LambConfig, LionConfig
from tests.optim.optax_reference import CASES, DATA, LR, problem

CONFIGS = {"lion": LionConfig, "lamb": LambConfig}
NAMES = {"b1": "beta_1", "b2": "beta_2", "eps": "epsilon", "weight_decay": "weight_decay"}


def ember_trajectory(name: str, device: Device) -> np.ndarray:
    _, options = CASES[name]
    config = CONFIGS[name](**{NAMES[k]: v for k, v in options.items()})
    params, grads = problem()
    tensors = [Tensor.from_data(p, device=device) for p in params]
    states = [None] * len(tensors)
    rows = []
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            tensors[i], states[i] = config.apply_single(LR, tensors[i], Tensor.from_data(g, device=device), states[i])
        rows.append(np.concatenate([t.to_data().to_numpy().ravel() for t in tensors]))
    return np.stack(rows)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_stored_optax_trajectory(name, device):
    expected = np.load(DATA)[name]
    np.testing.assert_allclose(ember_trajectory(name, device), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_optax_live(name):
    pytest.importorskip("optax")
    from tests.optim.optax_reference import optax_trajectory

    np.testing.assert_allclose(
        ember_trajectory(name, Device.flex()), np.stack(optax_trajectory(name)), rtol=2e-5, atol=2e-6
    )

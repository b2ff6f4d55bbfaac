"""Each optimizer's 50-step trajectory against ``torch.optim`` on the same float64
problem with matching hyperparameters (relative error at most 1e-5). Lion and LAMB,
which torch lacks, are in test_lion_lamb.py."""

from __future__ import annotations

import pytest

from ember.optim import (
    AdadeltaConfig,
    AdaGradConfig,
    AdamaxConfig,
    AdamConfig,
    AdamWConfig,
    NAdamConfig,
    RAdamConfig,
    RmsPropConfig,
    SgdConfig,
)
from tests.conftest import import_torch
from tests.optim.problem import assert_moved, assert_trajectories_close, ember_run, torch_run

pytestmark = pytest.mark.torch

# (ember config, learning rate, torch optimizer class name, torch keyword arguments)
CASES = {
    "adam": (AdamConfig(epsilon=1e-8), 1e-2, "Adam", {"eps": 1e-8}),
    "adam_burn_epsilon": (AdamConfig(), 1e-2, "Adam", {"eps": 1e-5}),
    "adam_betas": (
        AdamConfig(beta_1=0.8, beta_2=0.99, epsilon=1e-6),
        2e-2,
        "Adam",
        {"betas": (0.8, 0.99), "eps": 1e-6},
    ),
    "adam_l2": (AdamConfig(weight_decay=0.1, epsilon=1e-8), 1e-2, "Adam", {"weight_decay": 0.1, "eps": 1e-8}),
    "adam_amsgrad": (AdamConfig(amsgrad=True, epsilon=1e-8), 1e-2, "Adam", {"amsgrad": True, "eps": 1e-8}),
    "adamw": (AdamWConfig(weight_decay=0.05, epsilon=1e-8), 1e-2, "AdamW", {"weight_decay": 0.05, "eps": 1e-8}),
    "adamw_defaults": (AdamWConfig(), 1e-2, "AdamW", {"weight_decay": 1e-4, "eps": 1e-5}),
    "adamw_amsgrad": (
        AdamWConfig(weight_decay=0.5, amsgrad=True),
        1e-2,
        "AdamW",
        {"weight_decay": 0.5, "amsgrad": True, "eps": 1e-5},
    ),
    "sgd": (SgdConfig(), 0.1, "SGD", {}),
    "sgd_momentum": (SgdConfig(momentum=0.9), 0.05, "SGD", {"momentum": 0.9}),
    "sgd_dampening": (SgdConfig(momentum=0.9, dampening=0.3), 0.05, "SGD", {"momentum": 0.9, "dampening": 0.3}),
    "sgd_nesterov": (SgdConfig(momentum=0.8, nesterov=True), 0.05, "SGD", {"momentum": 0.8, "nesterov": True}),
    "sgd_weight_decay": (
        SgdConfig(momentum=0.5, weight_decay=0.01),
        0.1,
        "SGD",
        {"momentum": 0.5, "weight_decay": 0.01},
    ),
    "sgd_everything": (
        SgdConfig(momentum=0.9, nesterov=True, weight_decay=0.02),
        0.05,
        "SGD",
        {"momentum": 0.9, "nesterov": True, "weight_decay": 0.02},
    ),
    "adagrad": (AdaGradConfig(epsilon=1e-10), 0.1, "Adagrad", {"eps": 1e-10}),
    "adagrad_burn_epsilon": (AdaGradConfig(), 0.1, "Adagrad", {"eps": 1e-5}),
    "adagrad_decays": (
        AdaGradConfig(lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.1),
        0.1,
        "Adagrad",
        {"lr_decay": 0.05, "weight_decay": 0.01, "initial_accumulator_value": 0.1, "eps": 1e-5},
    ),
    "rmsprop": (RmsPropConfig(momentum=0.0, epsilon=1e-8), 1e-2, "RMSprop", {"eps": 1e-8}),
    "rmsprop_burn_defaults": (RmsPropConfig(), 1e-3, "RMSprop", {"momentum": 0.9, "eps": 1e-5}),
    "rmsprop_centered": (
        RmsPropConfig(alpha=0.9, momentum=0.0, centered=True),
        1e-2,
        "RMSprop",
        {"alpha": 0.9, "centered": True, "eps": 1e-5},
    ),
    "rmsprop_centered_momentum": (
        RmsPropConfig(alpha=0.95, momentum=0.5, centered=True, weight_decay=0.01),
        5e-3,
        "RMSprop",
        {"alpha": 0.95, "momentum": 0.5, "centered": True, "weight_decay": 0.01, "eps": 1e-5},
    ),
    "adadelta": (AdadeltaConfig(), 1.0, "Adadelta", {}),
    "adadelta_everything": (
        AdadeltaConfig(rho=0.95, epsilon=1e-5, weight_decay=0.05),
        0.5,
        "Adadelta",
        {"rho": 0.95, "eps": 1e-5, "weight_decay": 0.05},
    ),
    "adamax": (AdamaxConfig(), 2e-2, "Adamax", {}),
    "adamax_everything": (
        AdamaxConfig(beta_1=0.8, beta_2=0.99, epsilon=1e-6, weight_decay=0.05),
        2e-2,
        "Adamax",
        {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05},
    ),
    "nadam": (NAdamConfig(), 1e-2, "NAdam", {}),
    "nadam_l2": (
        NAdamConfig(weight_decay=0.05, momentum_decay=0.01),
        1e-2,
        "NAdam",
        {"weight_decay": 0.05, "momentum_decay": 0.01},
    ),
    "nadamw": (
        NAdamConfig(beta_1=0.8, weight_decay=0.1, decoupled_weight_decay=True),
        2e-2,
        "NAdam",
        {"betas": (0.8, 0.999), "weight_decay": 0.1, "decoupled_weight_decay": True},
    ),
    "radam": (RAdamConfig(), 1e-2, "RAdam", {}),
    "radam_l2": (
        RAdamConfig(beta_2=0.99, epsilon=1e-6, weight_decay=0.05),
        1e-2,
        "RAdam",
        {"betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.05},
    ),
    "radamw": (
        RAdamConfig(weight_decay=0.1, decoupled_weight_decay=True),
        2e-2,
        "RAdam",
        {"weight_decay": 0.1, "decoupled_weight_decay": True},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_trajectory_matches_torch(name):
    torch = import_torch()
    config, lr, torch_name, kwargs = CASES[name]
    expected = torch_run(torch, lambda model: [getattr(torch.optim, torch_name)(model.parameters(), lr=lr, **kwargs)])
    actual = ember_run(config.init(), lr)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


def test_scheduled_learning_rate_matches_torch():
    """A learning rate that changes every step reaches the per-tensor step unchanged:
    Adam with ``0.02 * 0.95**step`` against torch's Adam + LambdaLR."""
    torch = import_torch()
    schedulers = []

    def make(model):
        opt = torch.optim.Adam(model.parameters(), lr=0.02, eps=1e-8)
        schedulers.append(torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.95**step))
        return [opt]

    expected = torch_run(torch, make, after_step=lambda optimizers: schedulers[0].step())
    actual = ember_run(AdamConfig(epsilon=1e-8).init(), lambda step: 0.02 * 0.95**step)
    assert_trajectories_close(actual, expected)

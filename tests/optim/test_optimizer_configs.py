"""Optimizer configs: Burn's defaults, validation when the config is made, JSON
round trips; per-parameter states that resume a run bit-identically; dtypes kept."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.module import ParamGroup
from ember.optim import (
    AdadeltaConfig,
    AdaGradConfig,
    AdamaxConfig,
    AdamConfig,
    AdamWConfig,
    AdanConfig,
    AdjustLrFn,
    GradientClipping,
    GradientsParams,
    LambConfig,
    LionConfig,
    MuonConfig,
    NAdamConfig,
    RAdamConfig,
    RmsPropConfig,
    SgdConfig,
)
from tests.optim.problem import ember_loss, ember_model, problem, snapshot

CONFIGS = {
    "sgd": SgdConfig(momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adagrad": AdaGradConfig(lr_decay=0.01, initial_accumulator_value=0.1),
    "rmsprop": RmsPropConfig(centered=True, weight_decay=1e-3),
    "adan": AdanConfig(weight_decay=0.02),
    "adam": AdamConfig(amsgrad=True),
    "adamw": AdamWConfig(),
    "muon": MuonConfig(weight_decay=0.01, grad_clipping=GradientClipping.norm(1.0)),
    "adadelta": AdadeltaConfig(weight_decay=1e-3),
    "adamax": AdamaxConfig(weight_decay=1e-3),
    "nadam": NAdamConfig(weight_decay=1e-3, decoupled_weight_decay=True),
    "radam": RAdamConfig(weight_decay=1e-3, grad_clipping=GradientClipping.global_norm(1.0)),
    "lion": LionConfig(weight_decay=0.1),
    "lamb": LambConfig(weight_decay=0.01),
}


def make_optimizer(name: str):
    optim = CONFIGS[name].init()
    if name == "muon":
        optim = optim.with_group(ParamGroup.contains("bias"), AdamWConfig())
    return optim


def train(optim, model, steps: int):
    _, x, y = problem()
    for _ in range(steps):
        grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
        model = optim.step(0.01, model, grads)
    return model


def test_burn_defaults():
    assert (SgdConfig().momentum, SgdConfig().weight_decay, SgdConfig().nesterov) == (0.0, 0.0, False)
    assert AdaGradConfig().epsilon == 1e-5 and AdaGradConfig().lr_decay == 0.0
    rms = RmsPropConfig()
    assert (rms.alpha, rms.momentum, rms.epsilon, rms.centered) == (0.99, 0.9, 1e-5, False)
    adan = AdanConfig()
    assert (adan.beta_1, adan.beta_2, adan.beta_3, adan.epsilon, adan.weight_decay, adan.no_prox) == (
        0.98,
        0.92,
        0.99,
        1e-8,
        0.0,
        False,
    )
    muon = MuonConfig()
    assert (muon.momentum, muon.dampening, muon.nesterov, muon.weight_decay) == (0.95, 0.0, True, 0.0)
    assert (muon.ns_coefficients, muon.ns_steps, muon.epsilon) == ((3.4445, -4.775, 2.0315), 5, 1e-7)
    assert muon.adjust_lr_fn is AdjustLrFn.ORIGINAL


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_record_resumes_bit_identically(name):
    """5 steps, states through to_record/load_record into a fresh optimizer, 5 more:
    the same parameters as 10 uninterrupted steps."""
    weights, _, _ = problem()
    straight = snapshot(train(make_optimizer(name), ember_model(weights), 10))
    first = make_optimizer(name)
    model = train(first, ember_model(weights), 5)
    second = make_optimizer(name).load_record(first.to_record())
    resumed = snapshot(train(second, model, 5))
    for path, value in straight.items():
        np.testing.assert_array_equal(resumed[path], value)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_json_round_trip(name):
    config = CONFIGS[name]
    assert type(config).from_json(config.to_json()) == config


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float32_parameters_stay_float32(name):
    weights, _, _ = problem()
    model = ember_model({k: v.astype(np.float32) for k, v in weights.items()})
    _, x, y = problem()
    x, y = x.astype(np.float32), y.astype(np.float32)
    optim = make_optimizer(name)
    for _ in range(2):
        grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
        model = optim.step(0.01, model, grads)
    for path, param in model.named_params():
        assert str(param.val().dtype) == "float32", path
        assert np.isfinite(param.val().to_numpy()).all()
        assert param.val().device == Device.flex().autodiff()


def test_new_optimizer_defaults():
    """PyTorch's defaults for the optimizers Burn lacks; the papers' for Lion and LAMB."""
    assert (AdadeltaConfig().rho, AdadeltaConfig().epsilon) == (0.9, 1e-6)
    assert (AdamaxConfig().beta_1, AdamaxConfig().beta_2, AdamaxConfig().epsilon) == (0.9, 0.999, 1e-8)
    nadam = NAdamConfig()
    assert (nadam.epsilon, nadam.momentum_decay, nadam.decoupled_weight_decay) == (1e-8, 4e-3, False)
    assert (RAdamConfig().epsilon, RAdamConfig().decoupled_weight_decay) == (1e-8, False)
    assert (LionConfig().beta_1, LionConfig().beta_2, LionConfig().weight_decay) == (0.9, 0.99, 0.0)
    assert (LambConfig().epsilon, LambConfig().weight_decay) == (1e-6, 0.0)


def test_an_optimizer_is_one_class():
    """The config is the optimizer: its fields are the hyper-parameters, it steps a
    tensor, and its state is a small record."""
    config = AdamWConfig(weight_decay=0.1)
    assert AdamWConfig.state_type.__name__ == "AdamState" and config.decoupled and not AdamConfig().decoupled
    flex = Device.flex()
    w = Tensor.from_data(np.array([1.0, -2.0]), device=flex)
    g = Tensor.from_data(np.array([0.5, 0.25]), device=flex)
    new, state = config.step(0.1, w, g)
    assert isinstance(state.moment_1, Tensor) and state.time == 1
    # AdamW's first step: w (1 - lr wd) - lr sign(g) (up to epsilon)
    np.testing.assert_allclose(new.to_numpy(), [0.99 - 0.1, -1.98 - 0.1], rtol=1e-4)


def test_per_tensor_step_without_a_module():
    """The per-tensor optimizers work on any tensor of the inner device."""
    flex = Device.flex()
    w = Tensor.from_data(np.array([1.0, -2.0]), device=flex)
    g = Tensor.from_data(np.array([0.5, 0.25]), device=flex)
    new, state = SgdConfig(momentum=0.5).step(0.1, w, g)
    np.testing.assert_allclose(new.to_numpy(), [0.95, -2.025])
    new, _ = SgdConfig(momentum=0.5).step(0.1, new, g, state)
    np.testing.assert_allclose(new.to_numpy(), [0.95 - 0.1 * 0.75, -2.025 - 0.1 * 0.375])


INVALID = [
    (lambda: SgdConfig(momentum=1.0), r"SgdConfig: momentum must lie in \[0.0, 1.0\), got 1.0"),
    (lambda: SgdConfig(momentum=-0.1), r"SgdConfig: momentum must lie in \[0.0, 1.0\)"),
    (lambda: SgdConfig(dampening=1.5), r"SgdConfig: dampening must lie in \[0.0, 1.0\]"),
    (lambda: SgdConfig(weight_decay=-1e-3), r"SgdConfig: weight_decay must lie in \[0.0, inf\)"),
    (lambda: SgdConfig(weight_decay=math.inf), r"SgdConfig: weight_decay must lie"),
    (lambda: SgdConfig(nesterov=True), r"SgdConfig: nesterov=True needs a momentum"),
    (lambda: SgdConfig(nesterov="yes"), r"SgdConfig.nesterov must be bool"),
    (lambda: AdaGradConfig(epsilon=0.0), r"AdaGradConfig: epsilon must lie in \(0.0, inf\)"),
    (lambda: AdaGradConfig(lr_decay=-1.0), r"AdaGradConfig: lr_decay must lie in \[0.0, inf\)"),
    (lambda: AdaGradConfig(initial_accumulator_value=-0.1), r"AdaGradConfig: initial_accumulator_value"),
    (lambda: RmsPropConfig(alpha=1.5), r"RmsPropConfig: alpha must lie in \[0.0, 1.0\]"),
    (lambda: RmsPropConfig(momentum=1.0), r"RmsPropConfig: momentum must lie in \[0.0, 1.0\)"),
    (lambda: RmsPropConfig(epsilon=-1.0), r"RmsPropConfig: epsilon must lie in \(0.0, inf\)"),
    (lambda: RmsPropConfig(weight_decay=math.nan), r"RmsPropConfig: weight_decay must lie"),
    (lambda: AdanConfig(beta_1=1.0), r"AdanConfig: beta_1 must lie in \[0.0, 1.0\)"),
    (lambda: AdanConfig(beta_2=-0.5), r"AdanConfig: beta_2 must lie in \[0.0, 1.0\)"),
    (lambda: AdanConfig(beta_3=2.0), r"AdanConfig: beta_3 must lie in \[0.0, 1.0\)"),
    (lambda: AdanConfig(epsilon=0.0), r"AdanConfig: epsilon must lie in \(0.0, inf\)"),
    (lambda: AdanConfig(weight_decay=-0.1), r"AdanConfig: weight_decay must lie"),
    (lambda: MuonConfig(momentum=1.0), r"MuonConfig: momentum must lie in \[0.0, 1.0\)"),
    (lambda: MuonConfig(ns_steps=0), r"MuonConfig: ns_steps must lie in \[1, 100\), got 0"),
    (lambda: MuonConfig(ns_steps=100), r"MuonConfig: ns_steps must lie in \[1, 100\)"),
    (lambda: MuonConfig(epsilon=0.0), r"MuonConfig: epsilon must lie in \(0.0, inf\)"),
    (lambda: MuonConfig(ns_coefficients=(1.0, math.nan, 2.0)), r"MuonConfig: ns_coefficients must be finite"),
    (lambda: MuonConfig(ns_coefficients=[3.0, -4.0, 2.0]), r"MuonConfig.ns_coefficients must be tuple"),
    (lambda: MuonConfig(adjust_lr_fn="original"), r"MuonConfig.adjust_lr_fn must be AdjustLrFn"),
    (lambda: MuonConfig(weight_decay=-1.0), r"MuonConfig: weight_decay must lie"),
    (lambda: AdamWConfig(beta_2=1.0), r"AdamWConfig: beta_2 must lie in \[0.0, 1.0\)"),
    (lambda: AdadeltaConfig(rho=1.5), r"AdadeltaConfig: rho must lie in \[0.0, 1.0\]"),
    (lambda: AdadeltaConfig(epsilon=0.0), r"AdadeltaConfig: epsilon must lie in \(0.0, inf\)"),
    (lambda: AdamaxConfig(beta_1=-0.1), r"AdamaxConfig: beta_1 must lie in \[0.0, 1.0\)"),
    (lambda: NAdamConfig(momentum_decay=-1.0), r"NAdamConfig: momentum_decay must lie in \[0.0, inf\)"),
    (lambda: NAdamConfig(decoupled_weight_decay=1), r"NAdamConfig.decoupled_weight_decay must be bool"),
    (lambda: RAdamConfig(weight_decay=math.inf), r"RAdamConfig: weight_decay must lie"),
    (lambda: GradientClipping("global", 1.0), r"GradientClipping: kind must be one of 'value', 'norm', 'global_norm'"),
    (lambda: GradientClipping.global_norm(0.0), r"GradientClipping: the threshold must be > 0, got 0.0"),
]


@pytest.mark.parametrize(("make", "message"), INVALID)
def test_invalid_configs(make, message):
    with pytest.raises(ConfigError, match=r"^ember: " + message):
        make()


@pytest.mark.parametrize(
    "module",
    [
        "ember.optim.adam",
        "ember.optim.sgd",
        "ember.optim.adadelta",
        "ember.optim.adamax",
        "ember.optim.nadam",
        "ember.optim.radam",
        "ember.optim.lion",
        "ember.optim.lamb",
        "ember.optim.clipping",
        "ember.tensor.fused",
    ],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0

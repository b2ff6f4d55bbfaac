"""Parameter groups (another optimizer, learning rate or clipping per group; the last
matching group wins) and gradient clipping, against torch's param groups and
``clip_grad_value_`` / per-tensor and global ``clip_grad_norm_``; ids and untouched
parameters."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.module import ParamGroup
from ember.optim import AdamConfig, AdanConfig, GradientClipping, GradientsParams, RmsPropConfig, SgdConfig
from tests.conftest import import_torch
from tests.optim.problem import (
    assert_moved,
    assert_trajectories_close,
    ember_loss,
    ember_model,
    ember_run,
    problem,
    snapshot,
    torch_run,
)


def named(model, *prefixes):
    return [p for name, p in model.named_parameters() if name.startswith(prefixes)]


@pytest.mark.torch
def test_group_with_another_optimizer():
    """SGD with momentum for the first layer, Adam for the second."""
    torch = import_torch()
    expected = torch_run(
        torch,
        lambda m: [
            torch.optim.SGD(named(m, "0."), lr=0.05, momentum=0.9),
            torch.optim.Adam(named(m, "2."), lr=0.05, eps=1e-5),
        ],
    )
    optim = SgdConfig(momentum=0.9).init().with_group(ParamGroup.prefix("l2."), AdamConfig())
    actual = ember_run(optim, 0.05)
    assert_moved(actual[0])
    assert_trajectories_close(actual, expected)


@pytest.mark.torch
def test_group_learning_rates():
    """A fixed rate for the biases and a scaled rate for the first layer's weight."""
    torch = import_torch()

    def make(m):
        return [
            torch.optim.RMSprop(
                [
                    {"params": [m.get_parameter("2.weight")]},
                    {"params": [m.get_parameter("0.weight")], "lr": 0.5 * 0.01},
                    {"params": [m.get_parameter("0.bias"), m.get_parameter("2.bias")], "lr": 0.003},
                ],
                lr=0.01,
                momentum=0.5,
                eps=1e-5,
            )
        ]

    expected = torch_run(torch, make)
    optim = (
        RmsPropConfig(momentum=0.5)
        .init()
        .with_group(ParamGroup.paths(["l1.weight"]), lr_scale=0.5)
        .with_group(ParamGroup.contains("bias"), lr=0.003)
    )
    assert_trajectories_close(ember_run(optim, 0.01), expected)


@pytest.mark.torch
@pytest.mark.parametrize("reverse", [False, True])
def test_last_matching_group_wins(reverse):
    torch = import_torch()
    everything = (ParamGroup.all(), 0.2)
    weights = (ParamGroup.contains("weight"), 0.01)
    first, second = (weights, everything) if reverse else (everything, weights)
    optim = SgdConfig().init().with_group(first[0], lr=first[1]).with_group(second[0], lr=second[1])
    weight_lr = 0.2 if reverse else 0.01

    def make(m):
        params = dict(m.named_parameters())
        return [
            torch.optim.SGD(
                [
                    {"params": [params["0.weight"], params["2.weight"]], "lr": weight_lr},
                    {"params": [params["0.bias"], params["2.bias"]], "lr": 0.2},
                ],
                lr=1.0,
            )
        ]

    assert_trajectories_close(ember_run(optim, 1.0), torch_run(torch, make))


@pytest.mark.torch
def test_clipping_by_value_matches_clip_grad_value():
    torch = import_torch()
    threshold = 0.02
    weights, x, y = problem()
    model = ember_model(weights)
    grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
    largest = max(np.abs(g.to_numpy()).max() for _, g in grads.items())
    assert largest > 5 * threshold  # clipping is active on this problem

    expected = torch_run(
        torch,
        lambda m: [torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)],
        before_step=lambda m: torch.nn.utils.clip_grad_value_(m.parameters(), threshold),
    )
    optim = SgdConfig(momentum=0.9, grad_clipping=GradientClipping.value(threshold)).init()
    actual = ember_run(optim, 0.5)
    assert_trajectories_close(actual, expected)


def clip_each_norm(torch, params, threshold):
    for p in params:
        torch.nn.utils.clip_grad_norm_([p], threshold)


@pytest.mark.torch
def test_clipping_by_norm_is_per_tensor_clip_grad_norm():
    torch = import_torch()
    threshold = 0.05
    expected = torch_run(
        torch,
        lambda m: [torch.optim.Adam(m.parameters(), lr=0.01, eps=1e-5)],
        before_step=lambda m: clip_each_norm(torch, m.parameters(), threshold),
    )
    optim = AdamConfig(grad_clipping=GradientClipping.norm(threshold)).init()
    actual = ember_run(optim, 0.01)
    assert_trajectories_close(actual, expected)
    unclipped = ember_run(AdamConfig().init(), 0.01)
    assert not np.allclose(unclipped[1], actual[1])  # the clipping changed the run


@pytest.mark.torch
def test_clipping_by_global_norm_matches_clip_grad_norm():
    """All gradients of the step rescaled together (torch.nn.utils.clip_grad_norm_)."""
    torch = import_torch()
    threshold = 0.05
    weights, x, y = problem()
    model = ember_model(weights)
    grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
    total = np.sqrt(sum(np.square(g.to_numpy()).sum() for _, g in grads.items()))
    assert total > 5 * threshold  # clipping is active on this problem
    expected = torch_run(
        torch,
        lambda m: [torch.optim.Adam(m.parameters(), lr=0.01, eps=1e-5)],
        before_step=lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), threshold),
    )
    actual = ember_run(AdamConfig(grad_clipping=GradientClipping.global_norm(threshold)).init(), 0.01)
    assert_trajectories_close(actual, expected)
    per_tensor = ember_run(AdamConfig(grad_clipping=GradientClipping.norm(threshold)).init(), 0.01)
    assert not np.allclose(per_tensor[1], actual[1])  # not the per-tensor clipping


@pytest.mark.torch
def test_global_norm_per_group():
    """A group's own global-norm clipping covers its parameters; the others share the
    main optimizer's."""
    torch = import_torch()

    def clip(m):
        torch.nn.utils.clip_grad_norm_(named(m, "0.weight", "2.weight"), 0.02)
        torch.nn.utils.clip_grad_norm_(named(m, "0.bias", "2.bias"), 0.1)

    expected = torch_run(torch, lambda m: [torch.optim.SGD(m.parameters(), lr=0.3, momentum=0.5)], before_step=clip)
    optim = (
        SgdConfig(momentum=0.5, grad_clipping=GradientClipping.global_norm(0.1))
        .init()
        .with_group(ParamGroup.contains("weight"), clipping=GradientClipping.global_norm(0.02))
    )
    assert_trajectories_close(ember_run(optim, 0.3), expected)


def test_global_norm_clip_all(rng):
    flex = Device.flex()
    arrays = [rng.normal(size=(3, 4)), rng.normal(size=(5,))]
    grads = [Tensor.from_data(a, device=flex) for a in arrays]
    total = np.sqrt(sum(np.square(a).sum() for a in arrays))
    clipped = GradientClipping.global_norm(1.0).clip_all(grads)
    for a, c in zip(arrays, clipped):
        np.testing.assert_allclose(c.to_numpy(), a / (total + 1e-6), rtol=1e-12)
    untouched = GradientClipping.global_norm(2 * total).clip_all(grads)
    for a, c in zip(arrays, untouched):
        np.testing.assert_array_equal(c.to_numpy(), a)
    single = GradientClipping.global_norm(1.0).clip(grads[0])
    np.testing.assert_allclose(single.to_numpy(), arrays[0] / (np.linalg.norm(arrays[0]) + 1e-6), rtol=1e-12)


@pytest.mark.torch
def test_group_clipping_overrides_the_main_one():
    """Weights clipped by value in their group; biases keep the optimizer's norm clipping."""
    torch = import_torch()

    def clip(m):
        torch.nn.utils.clip_grad_value_(named(m, "0.weight", "2.weight"), 0.01)
        clip_each_norm(torch, named(m, "0.bias", "2.bias"), 0.05)

    expected = torch_run(torch, lambda m: [torch.optim.SGD(m.parameters(), lr=0.3)], before_step=clip)
    optim = (
        SgdConfig(grad_clipping=GradientClipping.norm(0.05))
        .init()
        .with_group(ParamGroup.contains("weight"), clipping=GradientClipping.value(0.01))
    )
    assert_trajectories_close(ember_run(optim, 0.3), expected)


def test_ids_unchanged_and_state_per_id():
    weights, x, y = problem()
    model = ember_model(weights)
    ids = {path: p.id for path, p in model.named_params()}
    optim = AdanConfig().init().with_group(ParamGroup.contains("bias"), SgdConfig(momentum=0.9))
    for _ in range(3):
        grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
        model = optim.step(0.01, model, grads)
    assert {path: p.id for path, p in model.named_params()} == ids
    assert set(optim.states) == set(ids.values())
    kinds = {path: type(optim.states[pid]).__name__ for path, pid in ids.items()}
    assert kinds == {"l1.weight": "AdanState", "l2.weight": "AdanState", "l1.bias": "SgdState", "l2.bias": "SgdState"}
    assert optim.states[ids["l1.weight"]].time == 3


def test_parameters_without_gradient_are_untouched():
    """A frozen layer and a parameter filtered out of the gradients keep their value
    (the same tensor) and get no optimizer state."""
    weights, x, y = problem()
    model = ember_model(weights).freeze(ParamGroup.prefix("l1."))
    frozen = {path: p.val() for path, p in model.named_params() if path.startswith("l1.")}
    optim = AdamConfig().init()
    for _ in range(3):
        all_grads = ember_loss(model, x, y).backward()
        keep = [p.id for path, p in model.named_params() if path == "l2.weight"]
        grads = GradientsParams.from_grads(all_grads, model, filter=keep)
        assert len(grads) == 1
        model = optim.step(0.05, model, grads)
    after = dict(model.named_params())
    for path, value in frozen.items():
        assert after[path].val() is value
        assert not after[path].require_grad
    np.testing.assert_array_equal(after["l2.bias"].val().to_numpy(), weights["l2.bias"])
    assert not np.allclose(after["l2.weight"].val().to_numpy(), weights["l2.weight"])
    assert set(optim.states) == {after["l2.weight"].id}


def test_step_with_no_gradients_returns_the_same_values():
    weights, _, _ = problem()
    model = ember_model(weights)
    before = snapshot(model)
    for config in (SgdConfig(momentum=0.9), AdamConfig()):
        after = config.init().step(0.1, model, GradientsParams())
        for path, value in snapshot(after).items():
            np.testing.assert_array_equal(value, before[path])
    assert AdamConfig().step_many(0.1, [], [], []) == []

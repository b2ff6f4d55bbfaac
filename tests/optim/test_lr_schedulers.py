"""LR schedulers: sequences against torch.optim.lr_scheduler where torch has the
schedule, hand-computed otherwise; records that resume a run; validated configs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ember.errors import ConfigError, RecordError
from ember.optim.lr_scheduler import (
    ComposedLrSchedulerConfig,
    ConstantLr,
    ConstantLrSchedulerConfig,
    CosineAnnealingLrSchedulerConfig,
    ExponentialLrSchedulerConfig,
    LinearLrSchedulerConfig,
    LrSchedulerConfig,
    NoamLrSchedulerConfig,
    SchedulerReduction,
    SequentialLrSchedulerConfig,
    StepLrSchedulerConfig,
    WarmupLrSchedulerConfig,
)
from tests.conftest import import_torch


def run(config: LrSchedulerConfig, steps: int) -> list[float]:
    scheduler = config.init()
    return [scheduler.step() for _ in range(steps)]


def torch_sequence(torch, base_lr: float, make, steps: int) -> list[float]:
    """The rate torch's optimizer uses at each of ``steps`` steps."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base_lr)
    scheduler = make(opt)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


# name: (ember config, torch base lr, torch scheduler factory, steps)
TORCH_CASES = {
    "linear_decay": (
        LinearLrSchedulerConfig(0.1, 0.01, 10),
        0.1,
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=10),
        15,
    ),
    "linear_warmup": (
        LinearLrSchedulerConfig(0.002, 0.01, 7),
        0.01,
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=0.2, end_factor=1.0, total_iters=7),
        12,
    ),
    "cosine": (
        CosineAnnealingLrSchedulerConfig(0.1, 10, min_lr=0.001),
        0.1,
        lambda t, o: t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
        35,
    ),
    "cosine_to_zero": (
        CosineAnnealingLrSchedulerConfig(0.5, 7),
        0.5,
        lambda t, o: t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7),
        20,
    ),
    "exponential": (
        ExponentialLrSchedulerConfig(0.1, 0.9),
        0.1,
        lambda t, o: t.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
        40,
    ),
    "step": (
        StepLrSchedulerConfig(0.1, 3, gamma=0.5),
        0.1,
        lambda t, o: t.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
        20,
    ),
    "constant": (
        ConstantLrSchedulerConfig(0.03),
        0.03,
        lambda t, o: t.optim.lr_scheduler.ConstantLR(o, factor=1.0, total_iters=0),
        5,
    ),
    "sequential": (
        SequentialLrSchedulerConfig(
            [LinearLrSchedulerConfig(0.01, 0.1, 4), ExponentialLrSchedulerConfig(0.1, 0.9)], [5]
        ),
        0.1,
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o,
            [
                t.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=4),
                t.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
            ],
            milestones=[5],
        ),
        20,
    ),
    "sequential_three": (
        SequentialLrSchedulerConfig(
            [
                StepLrSchedulerConfig(0.1, 2, gamma=0.5),
                ConstantLrSchedulerConfig(0.1),
                CosineAnnealingLrSchedulerConfig(0.1, 6),
            ],
            [3, 6],
        ),
        0.1,
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o,
            [
                t.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
                t.optim.lr_scheduler.ConstantLR(o, factor=1.0, total_iters=0),
                t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6),
            ],
            milestones=[3, 6],
        ),
        14,
    ),
    "warmup_cosine": (
        WarmupLrSchedulerConfig(CosineAnnealingLrSchedulerConfig(0.1, 10, min_lr=0.001), 5, start_lr=0.01),
        0.1,
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o,
            [
                t.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
                t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
            ],
            milestones=[5],
        ),
        25,
    ),
    # torch's LinearLR refuses start_factor=0: a warm-up from 0 is a LambdaLR there.
    "warmup_from_zero_cosine": (
        WarmupLrSchedulerConfig(CosineAnnealingLrSchedulerConfig(0.1, 10), 4),
        0.1,
        lambda t, o: t.optim.lr_scheduler.LambdaLR(
            o, lambda s: s / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * (s - 4) / 10))
        ),
        18,
    ),
    "warmup_constant": (
        WarmupLrSchedulerConfig(0.03, 3, start_lr=0.003),
        0.03,
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3),
        8,
    ),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TORCH_CASES))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sequence_matches_torch(name):
    torch = import_torch()
    config, base_lr, make, steps = TORCH_CASES[name]
    expected = torch_sequence(torch, base_lr, lambda opt: make(torch, opt), steps)
    np.testing.assert_allclose(run(config, steps), expected, rtol=1e-12, atol=1e-15)


def test_linear_hits_both_ends_exactly():
    rates = run(LinearLrSchedulerConfig(0.01, 0.1, 3), 6)
    assert rates[0] == 0.01 and rates[3:] == [0.1, 0.1, 0.1]


def test_linear_warm_up_from_zero():
    assert run(LinearLrSchedulerConfig(0.0, 0.01, 4), 6) == [0.0, 0.0025, 0.005, 0.0075, 0.01, 0.01]
    rates = run(WarmupLrSchedulerConfig(ExponentialLrSchedulerConfig(0.1, 0.5), 2), 5)
    assert rates == [0.0, 0.05, 0.1, 0.05, 0.025]  # the warm-up ends at the scheduler's first rate
    assert type(WarmupLrSchedulerConfig(0.1, 2).init()).__name__ == "SequentialLrScheduler"


def test_noam_by_hand():
    factor, warmup, size = 2.0, 5, 64
    expected = [factor / math.sqrt(size) * min(t**-0.5, t * warmup**-1.5) for t in range(1, 21)]
    rates = run(NoamLrSchedulerConfig(factor, warmup_steps=warmup, model_size=size), 20)
    np.testing.assert_allclose(rates, expected, rtol=1e-15)
    assert int(np.argmax(rates)) == warmup - 1  # the peak is at the end of the warm-up


def test_noam_burn_defaults():
    config = NoamLrSchedulerConfig(1.0)
    assert (config.warmup_steps, config.model_size) == (4000, 512)


@pytest.mark.parametrize(
    ("reduction", "combine"),
    [
        (SchedulerReduction.PROD, math.prod),
        (SchedulerReduction.SUM, math.fsum),
        (SchedulerReduction.AVG, lambda rates: math.fsum(rates) / len(rates)),
    ],
)
def test_composed_by_hand(reduction, combine):
    parts = [0.5, StepLrSchedulerConfig(1.0, 2, gamma=0.5), LinearLrSchedulerConfig(0.1, 0.05, 4)]
    composed = ComposedLrSchedulerConfig(parts, reduction=reduction)
    columns = [[0.5] * 8, run(parts[1], 8), run(parts[2], 8)]
    expected = [combine([c[i] for c in columns]) for i in range(8)]
    np.testing.assert_allclose(run(composed, 8), expected, rtol=1e-15)


def test_composed_add_and_default():
    config = ComposedLrSchedulerConfig([]).add(0.1).add(ExponentialLrSchedulerConfig(1.0, 0.5))
    assert config.reduction is SchedulerReduction.PROD
    np.testing.assert_allclose(run(config, 4), [0.1, 0.05, 0.025, 0.0125])
    assert run(ComposedLrSchedulerConfig([]), 2) == [1.0, 1.0]  # the empty product, as in Burn


def test_constant_lr_direct():
    scheduler = ConstantLr(3e-4)
    assert [scheduler.step() for _ in range(3)] == [3e-4] * 3


RESUME = {
    "constant": ConstantLrSchedulerConfig(0.1),
    "linear": LinearLrSchedulerConfig(0.1, 0.01, 6),
    "cosine": CosineAnnealingLrSchedulerConfig(0.1, 8, min_lr=0.01),
    "exponential": ExponentialLrSchedulerConfig(0.1, 0.93),
    "step": StepLrSchedulerConfig(0.1, 3),
    "noam": NoamLrSchedulerConfig(1.0, warmup_steps=4, model_size=16),
    "sequential": SequentialLrSchedulerConfig(
        [LinearLrSchedulerConfig(0.001, 0.1, 3), CosineAnnealingLrSchedulerConfig(0.1, 5)], [4]
    ),
    "warmup": WarmupLrSchedulerConfig(CosineAnnealingLrSchedulerConfig(0.1, 6), 3),
    "composed_nested": ComposedLrSchedulerConfig(
        [
            0.5,
            ExponentialLrSchedulerConfig(1.0, 0.9),
            SequentialLrSchedulerConfig([ConstantLrSchedulerConfig(1.0), StepLrSchedulerConfig(1.0, 2)], [3]),
        ]
    ),
}


@pytest.mark.parametrize("name", sorted(RESUME))
@pytest.mark.parametrize("stop", [0, 1, 5])
def test_record_resumes_bit_identically(name, stop):
    config = RESUME[name]
    uninterrupted = run(config, 12)
    first = config.init()
    head = [first.step() for _ in range(stop)]
    saved = json.loads(json.dumps(first.to_record()))  # plain JSON
    resumed = config.init().load_record(saved)
    assert head + [resumed.step() for _ in range(12 - stop)] == uninterrupted


@pytest.mark.parametrize("name", sorted(RESUME))
def test_config_json_round_trip(name):
    config = RESUME[name]
    again = type(config).from_json(config.to_json())
    assert again == config
    assert run(again, 10) == run(config, 10)


def test_load_record_rejects_another_schedulers_record():
    linear = LinearLrSchedulerConfig(0.1, 0.01, 6).init()
    cosine = CosineAnnealingLrSchedulerConfig(0.1, 8).init()
    with pytest.raises(RecordError, match=r"^ember: LinearLrScheduler.load_record: .*current_iter.*remaining_iters"):
        linear.load_record(cosine.to_record())
    with pytest.raises(RecordError, match="must be int"):
        linear.load_record({"remaining_iters": "3"})
    with pytest.raises(RecordError, match="expected a dict"):
        linear.load_record([3])
    sequential = RESUME["sequential"].init()
    with pytest.raises(RecordError, match="holds 1 schedulers, this scheduler has 2"):
        sequential.load_record({"step": 1, "schedulers": [{"remaining_iters": 2}]})


INVALID = [
    (lambda: LinearLrSchedulerConfig(-0.1, 0.1, 10), "initial_lr must lie in \\[0, 1\\], got -0.1"),
    (lambda: LinearLrSchedulerConfig(1.5, 0.1, 10), "initial_lr must lie in \\[0, 1\\], got 1.5"),
    (lambda: WarmupLrSchedulerConfig(0.1, 0), "warmup_iters must be an integer >= 1, got 0"),
    (lambda: WarmupLrSchedulerConfig(0.1, 5, start_lr=0.2), "start_lr must lie in \\[0, 0.1\\]"),
    (lambda: WarmupLrSchedulerConfig("cosine", 5), "scheduler must be .*LrSchedulerConfig \\| float, got 'cosine'"),
    (lambda: LinearLrSchedulerConfig(0.1, -0.1, 10), "final_lr must lie in \\[0, 1\\]"),
    (lambda: LinearLrSchedulerConfig(0.1, 0.01, 0), "num_iters must be an integer >= 1, got 0"),
    (lambda: LinearLrSchedulerConfig(0.1, 0.01, 2.5), "num_iters must be int"),
    (lambda: CosineAnnealingLrSchedulerConfig(0.1, 10, min_lr=0.2), "min_lr must lie in \\[0, initial_lr\\]"),
    (lambda: CosineAnnealingLrSchedulerConfig(0.1, 0), "num_iters must be an integer >= 1"),
    (lambda: ExponentialLrSchedulerConfig(0.1, 1.5), "gamma must lie in \\(0, 1\\], got 1.5"),
    (lambda: ExponentialLrSchedulerConfig(0.1, 0.0), "gamma must lie in \\(0, 1\\]"),
    (lambda: StepLrSchedulerConfig(0.1, 0), "step_size must be an integer >= 1"),
    (lambda: StepLrSchedulerConfig(math.nan, 2), "must be finite"),
    (lambda: NoamLrSchedulerConfig(0.0), "factor must be a finite number > 0"),
    (lambda: NoamLrSchedulerConfig(1.0, warmup_steps=0), "warmup_steps must be an integer >= 1"),
    (lambda: NoamLrSchedulerConfig(1.0, model_size=0), "model_size must be an integer >= 1"),
    (lambda: ConstantLrSchedulerConfig(-1.0), "lr must be a finite number >= 0"),
    (lambda: SequentialLrSchedulerConfig([], []), "needs at least one scheduler"),
    (lambda: SequentialLrSchedulerConfig([ConstantLrSchedulerConfig(0.1)] * 2, []), "2 schedulers need 1 milestones"),
    (lambda: SequentialLrSchedulerConfig([ConstantLrSchedulerConfig(0.1)] * 3, [4, 4]), "strictly increasing"),
    (lambda: SequentialLrSchedulerConfig([ConstantLrSchedulerConfig(0.1)] * 2, [0]), "> 0"),
    (lambda: SequentialLrSchedulerConfig([0.1, 0.2], [3]), "must be scheduler configs"),
    (lambda: ComposedLrSchedulerConfig(["fast"]), "must be scheduler configs or numbers"),
    (lambda: ComposedLrSchedulerConfig([-0.1]), "lr must be a finite number >= 0"),
]


@pytest.mark.parametrize(("make", "message"), INVALID)
def test_invalid_configs(make, message):
    with pytest.raises(ConfigError, match=r"^ember: \w+.*" + message):
        make()


def test_step_scheduler_warns_on_odd_values_like_burn():
    with pytest.warns(UserWarning, match="gamma=1.5 is outside"):
        StepLrSchedulerConfig(0.1, 2, gamma=1.5)
    with pytest.warns(UserWarning, match="initial_lr=-0.1 is not positive"):
        StepLrSchedulerConfig(-0.1, 2)


@pytest.mark.parametrize(
    "module", ["linear", "cosine", "exponential", "step", "noam", "sequential", "composed", "warmup"]
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"ember.optim.lr_scheduler.{module}"))
    assert result.attempted > 0 and result.failed == 0

"""The optimizers added beyond Burn's, global-norm clipping and warm-up under
``ember.compile``: a compiled step matches the eager one (states, run-time scalars
such as NAdam's momentum product, RAdam's rectification switch as a guard)."""

from __future__ import annotations

import pytest

from ember.optim import (
    AdadeltaConfig,
    AdamaxConfig,
    AdamWConfig,
    GradientClipping,
    LambConfig,
    LionConfig,
    NAdamConfig,
    RAdamConfig,
)
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig, WarmupLrSchedulerConfig
from tests.capture.test_compile import assert_close, train


@pytest.mark.parametrize(
    "config",
    [
        AdadeltaConfig(weight_decay=1e-3),
        AdamaxConfig(weight_decay=1e-3),
        NAdamConfig(weight_decay=1e-2, decoupled_weight_decay=True),
        RAdamConfig(beta_2=0.99),
        LionConfig(weight_decay=0.1),
        LambConfig(weight_decay=0.01),
        AdamWConfig(grad_clipping=GradientClipping.global_norm(0.5)),
    ],
    ids=lambda c: type(c).__name__ + ("_clipped" if c.grad_clipping else ""),
)
def test_compiled_step_matches_eager(config):
    compiled, _, _, step = train(config, 20, True)
    eager = train(config, 20, False)[0]
    assert_close(compiled, eager)
    assert step.stats["eager"] == 0


def test_warm_up_rates_are_run_time_scalars():
    scheduler = WarmupLrSchedulerConfig(CosineAnnealingLrSchedulerConfig(1e-2, 20), 5).init()
    lrs = [scheduler.step() for _ in range(25)]
    assert lrs[0] == 0.0
    compiled = train(AdamWConfig(), 25, True, lrs)
    eager = train(AdamWConfig(), 25, False, lrs)[0]
    assert_close(compiled[0], eager)

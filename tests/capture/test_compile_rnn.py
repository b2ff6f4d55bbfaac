"""A compiled LSTM classifier's training step (issue 27's recurrent workload, small)
against eager: losses over 100 steps within 1e-5 relative, each direction's recurrence
one library step of the LLVM plan (forward and backward, not unrolled), and two compiled runs bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Module, Tensor
from ember.backend.fusion.scheduler import Call, Library
from ember.nn import GruConfig, Linear, LinearConfig, LstmConfig
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams

REL = 1e-5
BATCH, SEQ, FEATURES, HIDDEN = 4, 6, 3, 8


class Classifier(Module):
    rnn: Module
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.rnn(x)
        return self.head(out.narrow(1, SEQ - 1, 1).reshape([BATCH, -1]))


def train(kind: str, bidirectional: bool, steps: int, compiled: bool):
    device = Device.flex().autodiff()
    device.seed(21)
    config = LstmConfig if kind == "lstm" else GruConfig
    width = HIDDEN * (2 if bidirectional else 1)
    model = Classifier(
        rnn=config(FEATURES, HIDDEN, num_layers=2, bidirectional=bidirectional).init(device),
        head=LinearConfig(width, 5).init(device),
    )
    for p in model.params():
        p.val()
    x = Tensor.random([BATCH, SEQ, FEATURES], Distribution.normal(0.0, 1.0), device=device)
    y = Tensor.from_ints([i % 5 for i in range(BATCH)], device=device)
    optim, ce = AdamConfig().init(), CrossEntropyLoss()

    def train_step(model, x, y):
        loss = ce.forward(model(x), y)
        return optim.step(2e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step) if compiled else train_step
    losses = []
    for _ in range(steps):
        model, loss = step(model, x, y)
        losses.append(loss.into_scalar())
    return np.array(losses), step


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_compiled_lstm_classifier_matches_eager(bidirectional):
    compiled, step = train("lstm", bidirectional, 100, True)
    eager, _ = train("lstm", bidirectional, 100, False)
    np.testing.assert_allclose(compiled, eager, rtol=REL)
    assert compiled[-1] < compiled[0]  # it learns
    plan = next(iter(step._entries.values())).plan
    steps = plan.schedule.steps
    # Nothing is left to flex: the gates' weights stacked into w_ih/w_hh (cat) and their
    # gradients split back (slice_assign) are the plan's copies too.
    assert not [s.node.op for s in steps if isinstance(s, Call)]
    ops = [s.node.op for s in steps if isinstance(s, Library)]
    directions = 2 * (2 if bidirectional else 1)
    assert ops.count("lstm_sequence") == directions and ops.count("lstm_sequence_backward") == directions
    np.testing.assert_array_equal(compiled, train("lstm", bidirectional, 100, True)[0])  # bit-identical


def test_compiled_gru_classifier_matches_eager():
    compiled, step = train("gru", False, 100, True)
    eager, _ = train("gru", False, 100, False)
    np.testing.assert_allclose(compiled, eager, rtol=REL)
    ops = [s.node.op for s in next(iter(step._entries.values())).plan.schedule.steps if isinstance(s, Library)]
    assert ops.count("gru_sequence") == 2 and ops.count("gru_sequence_backward") == 2

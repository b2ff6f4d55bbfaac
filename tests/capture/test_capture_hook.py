"""The capture hook (``ember.tensor.capture_hook``) as a module or optimizer author uses
it, and the typed sources a trace reads its inputs from."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.capture.sources import Argument, Parameter, ScalarArgument, StateField, StateNumber
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from ember.tensor.capture_hook import StateDict, capturing, current_capture, scalar_sqrt
from tests.shared_models import Mlp


@dataclasses.dataclass
class _Momentum:
    moment: Tensor
    time: int


def test_state_dict_is_a_dict_outside_a_trace():
    states = StateDict()
    states["a"] = 1.0
    states.update(b=2.0)
    assert not capturing() and current_capture() is None
    assert states.get("a") == 1.0 and states.get("missing", 3.0) == 3.0
    assert states.get_many(["a", "b", "c"]) == [1.0, 2.0, None]
    assert dict(states) == {"a": 1.0, "b": 2.0}
    assert scalar_sqrt(9.0) == 3.0


def _update(states: StateDict, seen: list[bool]):
    """A hand-written stateful update, as an optimizer author writes one: its state in
    a StateDict, its step count and learning rate used arithmetically."""

    def step(w: Tensor, g: Tensor, lr: float) -> Tensor:
        seen.append(capturing())
        state = states.get("w")
        if state is None:
            moment, time = g, 1
        else:
            moment, time = state.moment.mul_scalar(0.9).add(g.mul_scalar(0.1)), state.time + 1
        states["w"] = _Momentum(moment, time)
        return w.sub(moment.mul_scalar(lr / scalar_sqrt(time)))

    return step


def test_a_hand_written_update_compiles_as_it_runs_eagerly(rng):
    device = Device.flex()
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    grads = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(5)]
    eager_states, compiled_states = StateDict(), StateDict()
    eager_seen: list[bool] = []
    compiled_seen: list[bool] = []
    eager = _update(eager_states, eager_seen)
    compiled = ember.compile(_update(compiled_states, compiled_seen))
    w_eager = w_compiled = Tensor.from_data(w0, device=device)
    for n, g in enumerate(grads):
        lr = 0.1 / (n + 1)
        g_t = Tensor.from_data(g, device=device)
        w_eager = eager(w_eager, g_t, lr)
        w_compiled = compiled(w_compiled, g_t, lr)
        np.testing.assert_allclose(w_compiled.to_numpy(), w_eager.to_numpy(), rtol=1e-6, atol=1e-7)
    assert compiled_states["w"].time == eager_states["w"].time == 5
    np.testing.assert_allclose(
        compiled_states["w"].moment.to_numpy(), eager_states["w"].moment.to_numpy(), rtol=1e-6, atol=1e-7
    )
    # Traced twice (without a state, then with one), replayed since: the function ran
    # under a capture each time it ran at all.
    assert compiled_seen == [True, True] and not any(eager_seen)
    assert compiled.stats["traces"] == 2 and compiled.stats["eager"] == 0
    entry = next(e for e in compiled._entries.values() if any(type(s) is StateNumber for s in e.sources))
    kinds = [type(s) for s in entry.sources]
    assert kinds.count(Argument) == 2 and kinds.count(ScalarArgument) == 1
    assert kinds.count(StateField) == 1 and kinds.count(StateNumber) == 1


def test_float_of_a_run_time_scalar_falls_back_with_the_cause():
    device = Device.flex()

    def step(w: Tensor, lr: float) -> Tensor:
        return w.mul_scalar(float(lr))

    compiled = ember.compile(step)
    w = Tensor.from_data(np.ones((2, 2), np.float32), device=device)
    with pytest.warns(ember.capture.CompileWarning, match=r"float\(\) of a run-time scalar"):
        out = compiled(w, 0.5)
    np.testing.assert_allclose(out.to_numpy(), 0.5)


def test_a_training_step_reads_typed_sources_and_donates_in_place():
    device = Device.flex().autodiff()
    device.seed(3)
    x = Tensor.random([16, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = Tensor.random([16, 1], Distribution.uniform(-1.0, 1.0), device=device)
    model, optim = Mlp.new(device), AdamConfig().init()

    def train_step(model, x, y, lr):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step)
    for _ in range(4):
        model, _ = step(model, x, y, 1e-2)
    entry = next(e for e in step._entries.values() if e.state_reads)
    kinds = [type(s) for s in entry.sources]
    n_params = 4  # two Linear layers, weight and bias each
    assert kinds.count(Parameter) == n_params and kinds.count(Argument) == 2
    assert kinds.count(StateField) == 2 * n_params  # Adam's two moments per parameter
    assert kinds.count(StateNumber) == n_params and kinds.count(ScalarArgument) == 1
    # Each parameter and moment is written back where it was read: all of them donated.
    donated_inputs = {i for _, i in entry.donated}
    tensor_kinds = [type(s) for s in entry.tensor_sources]
    assert {tensor_kinds[i] for i in donated_inputs} == {Parameter, StateField}
    assert len(donated_inputs) == 3 * n_params

"""The fusion device's recording: a stream that repeats the last one follows it (its
nodes and result shapes taken, the plan found without hashing), a stream that departs
from it records afresh, and the optimizer's update records in one call. Oracles: eager
flex (bit for bit through the replay executor, which runs eager's very calls) and
float64 numpy."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.backend.flex import FlexBackend
from ember.backend.fusion import FusionBackend, LazyTensor, ReplayExecutor
from ember.backend.ops import BinaryOp
from tests.shared_models import Mlp


def _lookups(monkeypatch, backend):
    """The streams whose plan was looked up by its whole key (not followed)."""
    calls = []
    real = backend._plan

    def spy(stream, outs):
        calls.append(len(stream.keys))
        return real(stream, outs)

    monkeypatch.setattr(backend, "_plan", spy)
    return calls


def _train(device, steps, lookups=None):
    from ember.nn.loss import MseLoss, Reduction
    from ember.optim import AdamConfig, GradientsParams

    device.seed(7)
    x = Tensor.random([32, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp.new(device)
    optim = AdamConfig().init()
    losses, looked_up = [], []
    for _ in range(steps):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        losses.append(loss.into_scalar())
        model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
        looked_up.append(len(lookups) if lookups is not None else 0)
    return losses, looked_up


def test_a_training_loop_follows_its_last_step_bit_for_bit(monkeypatch):
    fused = Device.flex().fusion().autodiff()
    backend = fused.inner().backend
    compiled = backend.executor
    backend.executor = ReplayExecutor()  # eager's very calls: the losses are eager's bits
    try:
        lookups = _lookups(monkeypatch, backend)
        losses, looked_up = _train(fused, 12, lookups)
    finally:
        backend.executor = compiled
    assert losses == _train(Device.flex().autodiff(), 12)[0]
    # the first steps differ (no moments yet); from then on each stream follows the last
    assert looked_up[-1] == looked_up[4]


def test_a_followed_compiled_step_matches_eager(monkeypatch):
    fused = Device.flex().fusion().autodiff()
    lookups = _lookups(monkeypatch, fused.inner().backend)
    losses, looked_up = _train(fused, 12, lookups)
    np.testing.assert_allclose(losses, _train(Device.flex().autodiff(), 12)[0], rtol=1e-5)
    assert looked_up[-1] == looked_up[4]


def test_a_stream_departing_from_the_last_one_records_afresh(rng):
    device = Device.flex().fusion()
    data = rng.standard_normal((4, 3)).astype(np.float32)
    x = Tensor.from_data(data, device=device)

    def chain(t: Tensor, scale: float, last: str) -> np.ndarray:
        u = t.mul_scalar(scale).add_scalar(1.0)
        return (u.exp() if last == "exp" else u.sum_dim(1)).to_data().to_numpy()

    x64 = data.astype(np.float64)
    np.testing.assert_allclose(chain(x, 2.0, "sum"), (x64 * 2 + 1).sum(1, keepdims=True), rtol=1e-5)
    # the same structure with another scalar follows and computes with its own value
    np.testing.assert_allclose(chain(x, 3.0, "sum"), (x64 * 3 + 1).sum(1, keepdims=True), rtol=1e-5)
    # departs at the last op
    np.testing.assert_allclose(chain(x, 2.0, "exp"), np.exp(x64 * 2 + 1), rtol=1e-5)
    # departs at the first op: an input of another shape
    wide = rng.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(
        chain(Tensor.from_data(wide, device=device), 2.0, "exp"), np.exp(wide.astype(np.float64) * 2 + 1), rtol=1e-5
    )


def test_a_departure_after_binding_inputs_binds_them_once(rng):
    """The call that departs bound its inputs and added its scalars while its key was
    built: they are undone and bound again, so the stream holds each input once."""
    device = Device.flex().fusion()
    backend = device.backend
    a_np, b_np = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    a, b = Tensor.from_data(a_np, device=device), Tensor.from_data(b_np, device=device)
    for _ in range(2):  # the second stream follows the first
        got = a.mul_scalar(2.0).add(b).to_data().to_numpy()
        np.testing.assert_array_equal(got, a_np * np.float32(2.0) + b_np)
    shifted = a.add_scalar(3.0)  # departs at the first node, after binding a and adding 3.0
    stream = backend._stream
    assert stream.follow is None and len(stream.graph.inputs) == 1 and len(stream.values) == 1
    assert len(stream.scalars) == 1 and len(stream.graph.avals) == 2
    total = shifted.mul(b).add(a).mul_scalar(0.5)  # a bound once, reused
    assert len(stream.graph.inputs) == 2 and len(stream.scalars) == 2
    expected = ((a_np.astype(np.float64) + 3.0) * b_np + a_np) * 0.5
    np.testing.assert_allclose(total.to_data().to_numpy(), expected, rtol=1e-6)


def test_an_adam_step_departing_from_the_last_one_binds_once(rng):
    backend = FusionBackend(FlexBackend(), ReplayExecutor())
    flex = FlexBackend()
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(3, 2), (2,)] * 3]
    options = dict(lr=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False)

    def lazy(values):
        return [backend.from_numpy(v) for v in values]

    params, grads = arrays[:2], arrays[2:4]
    m, v = [np.abs(a) for a in arrays[4:]], [np.abs(a) + 1 for a in arrays[4:]]
    # a first step (no moments), then a later step: the later one departs after binding
    for moments, time in ((None, 1), ((m, v), 2), ((m, v), 3)):
        m1, m2 = (None, None) if moments is None else (lazy(moments[0]), lazy(moments[1]))
        got = backend.adam_step_many(lazy(params), lazy(grads), m1, m2, None, time=time, **options)
        stream = backend._stream
        assert len(stream.graph.inputs) == (4 if moments is None else 8)
        want = flex.adam_step_many(
            params, grads, *(moments if moments is not None else (None, None)), None, time=time, **options
        )
        for got_list, want_list in zip(got[:3], want[:3]):
            for g, w in zip(got_list, want_list):
                np.testing.assert_array_equal(backend.to_numpy(g), w)
        assert got[3] is None and want[3] is None


@pytest.mark.parametrize(
    "change",
    [{"amsgrad": True}, {"weight_decay": 0}, {"decoupled": True, "weight_decay": 0.01}],
    ids=["amsgrad", "int-decay", "adamw"],
)
def test_adam_steps_recorded_in_one_call_or_the_general_way_match_eager(rng, change):
    """The Adam recorder takes lazy tensors and float options; AMSGrad and an int option
    go the general way (_record): both give flex's bits under the replay executor."""
    backend = FusionBackend(FlexBackend(), ReplayExecutor())
    flex = FlexBackend()
    options = dict(lr=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False)
    options.update(change)
    params = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    lazy_params = [backend.from_numpy(p) for p in params]
    state = None
    want_state = None
    for time in (1, 2):
        lazy_grads = [backend.from_numpy(g) for g in grads]
        moments = (None, None, None) if state is None else state
        got = backend.adam_step_many(lazy_params, lazy_grads, *moments, time=time, **options)
        want_moments = (None, None, None) if want_state is None else want_state
        want = flex.adam_step_many(params, grads, *want_moments, time=time, **options)
        for got_list, want_list in zip(got, want):
            if want_list is None:
                assert got_list is None
                continue
            for g, w in zip(got_list, want_list):
                assert isinstance(g, LazyTensor)
                np.testing.assert_array_equal(backend.to_numpy(g), w)
        lazy_params, state = got[0], got[1:]
        params, want_state = want[0], want[1:]


def test_the_last_stream_keeps_no_tensor_alive(rng):
    device = Device.flex().fusion()
    x = Tensor.from_data(rng.standard_normal((3, 3)).astype(np.float32), device=device)
    y = x.mul_scalar(2.0).add_scalar(1.0)
    y.to_data()
    value = weakref.ref(y._primitive.value)
    input_value = weakref.ref(x._primitive.value)
    del x, y
    gc.collect()
    assert value() is None and input_value() is None


def test_plans_cleared_are_not_followed(monkeypatch):
    device = Device.flex().fusion()
    backend = device.backend
    x = Tensor.from_floats([1.0, 2.0], device=device)
    x.mul_scalar(3.0).to_data()
    planned = []
    real = backend.executor.plan
    monkeypatch.setattr(backend.executor, "plan", lambda graph: planned.append(graph) or real(graph))
    backend._plans.clear()
    assert x.mul_scalar(3.0).to_data().to_numpy().tolist() == [3.0, 6.0]
    assert len(planned) == 1  # planned afresh, not taken from the stream before


def test_raw_binary_calls_with_ready_or_pending_operands(rng):
    """binary's inline path (pending operands) and the general one (ready operands)
    record the same node, so a step alternating between them follows either way."""
    backend = FusionBackend(FlexBackend(), ReplayExecutor())
    a_np, b_np = rng.standard_normal((2, 2)).astype(np.float32), rng.standard_normal((1, 2)).astype(np.float32)
    for _ in range(3):
        a, b = backend.from_numpy(a_np), backend.from_numpy(b_np)
        s = backend.binary(BinaryOp.ADD, a, b)  # ready operands: _record
        t = backend.binary(BinaryOp.MUL, s, 2.0)  # pending and a float: inline
        u = backend.binary(BinaryOp.SUB, t, s)  # pending and pending, broadcast shapes equal
        np.testing.assert_array_equal(backend.to_numpy(u), (a_np + b_np) * np.float32(2.0) - (a_np + b_np))

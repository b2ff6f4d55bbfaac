"""One Adam: the backend kernel (``FusedOp.ADAM_STEP_MANY``) against its composite in
``ember.backend.composites.optim``, bit for bit on flex (one tensor, several small tensors in one
pass, large tensors in cache blocks); step counts that differ between tensors; the
composite fallback; records of the previous layout."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.ops import FusedOp
from ember.module.record import save_record
from ember.optim import AdamConfig, AdamState, AdamWConfig, GradientsParams
from ember.tensor.fused import composite_of, fused
from tests.optim.problem import ember_loss, ember_model, problem, snapshot

OPTIONS = {
    "adam": {},
    "l2": {"weight_decay": 0.1},
    "decoupled": {"weight_decay": 0.1, "decoupled": True},
    "amsgrad": {"amsgrad": True},
    "amsgrad_decoupled": {"amsgrad": True, "weight_decay": 0.05, "decoupled": True},
}
# One small tensor; several small ones (one pass over them concatenated); one large
# tensor (cache blocks, a size that is not a multiple of the block); large and small.
LAYOUTS = {
    "one": [(7, 3)],
    "several": [(7, 3), (5,), (4, 4, 2)],
    "large": [(300, 257)],
    "mixed": [(300, 257), (9,), (70000,)],
}

# The kernel's keyword arguments (Adam's defaults but for epsilon).
SETTINGS = {
    "lr": 1e-3,
    "beta_1": 0.9,
    "beta_2": 0.999,
    "epsilon": 1e-5,
    "weight_decay": 0.0,
    "decoupled": False,
    "amsgrad": False,
}


def _kernel_and_composite(device, shapes, options, rng, dtype=np.float32):
    """Three steps of the kernel (through ``fused``) and of the composite (over the same
    backend), from the same start; yields each step's (kernel, composite) results as
    numpy arrays."""
    settings = {**SETTINGS, **options}
    composite = composite_of(FusedOp.ADAM_STEP_MANY)
    backend = device.backend
    params = [rng.standard_normal(s).astype(dtype) for s in shapes]
    k_state = c_state = (None, None, None)
    k_params = [backend.from_numpy(p) for p in params]
    c_params = [backend.from_numpy(p) for p in params]
    for time in (1, 2, 3):
        grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
        k_out = fused(
            FusedOp.ADAM_STEP_MANY,
            device,
            k_params,
            [backend.from_numpy(g) for g in grads],
            *k_state,
            time=time,
            **settings,
        )
        c_out = composite(backend, c_params, [backend.from_numpy(g) for g in grads], *c_state, time=time, **settings)
        k_params, c_params = k_out[0], c_out[0]
        k_state, c_state = k_out[1:], c_out[1:]
        to_np = backend.to_numpy
        yield (
            [[to_np(p) for p in column] if column is not None else None for column in k_out],
            [[to_np(t) for t in column] if column is not None else None for column in c_out],
        )


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_flex_kernel_is_bit_identical_to_the_composite(name, layout, rng):
    flex = Device.flex()
    for kernel, composite in _kernel_and_composite(flex, LAYOUTS[layout], OPTIONS[name], rng):
        assert (kernel[3] is None) == (composite[3] is None) == (not OPTIONS[name].get("amsgrad"))
        for k_column, c_column in zip(kernel, composite):
            for k, c in zip(k_column or [], c_column or []):
                assert k.shape == c.shape and k.dtype == c.dtype
                assert k.tobytes() == c.tobytes()


def test_half_precision_runs_the_composite(rng):
    """flex has no float16 kernel: ``fused`` falls back to the composite, which keeps
    the dtype and follows a float64 run closely."""
    flex = Device.flex()
    shapes = [(6, 4), (3,)]
    assert (
        flex.backend.adam_step_many(
            [np.zeros(3, np.float16)], [np.zeros(3, np.float16)], None, None, None, time=1, **SETTINGS
        )
        is NotImplemented
    )
    half = list(_kernel_and_composite(flex, shapes, {}, np.random.default_rng(3), np.float16))
    full = list(_kernel_and_composite(flex, shapes, {}, np.random.default_rng(3), np.float64))
    for (kernel, composite), (reference, _) in zip(half, full):
        for k, c, r in zip(kernel[0], composite[0], reference[0]):
            assert k.dtype == np.float16 and k.tobytes() == c.tobytes()
            np.testing.assert_allclose(k, r, rtol=3e-3, atol=1e-3)


def test_tensors_at_different_step_counts():
    """A parameter that gets a gradient every other step has its own step count; the
    step batches tensors by count and matches each tensor stepped alone."""
    weights, x, y = problem()
    model = ember_model(weights)
    optim = AdamWConfig(weight_decay=0.1, amsgrad=True).init()
    alone = {path: (Tensor.from_data(w, device=Device.flex()), None) for path, w in weights.items()}
    config = AdamWConfig(weight_decay=0.1, amsgrad=True)
    for step in range(6):
        all_grads = GradientsParams.from_grads(ember_loss(model, x, y).backward(), model)
        ids = {p.id: path for path, p in model.named_params()}
        if step % 2:
            all_grads.remove(model.l1.weight.id)
        for pid, grad in all_grads.items():
            path = ids[pid]
            value, state = alone[path]
            alone[path] = config.step(1e-2, value, grad, state)
        model = optim.step(1e-2, model, all_grads)
    times = {path: optim.states[p.id].time for path, p in model.named_params()}
    assert times == {"l1.weight": 3, "l1.bias": 6, "l2.weight": 6, "l2.bias": 6}
    for path, value in snapshot(model).items():
        assert value.tobytes() == alone[path][0].to_numpy().tobytes(), path


def test_states_live_on_the_inner_device():
    weights, x, y = problem()
    model = ember_model(weights)
    optim = AdamConfig().init()
    model = optim.step(1e-2, model, GradientsParams.from_grads(ember_loss(model, x, y).backward(), model))
    state = optim.states[model.l1.weight.id]
    assert isinstance(state, AdamState) and state.time == 1 and state.max_moment_2 is None
    assert state.moment_1.device == Device.flex() and state.moment_1.dims() == [4, 8]


def test_records_of_the_previous_layout_load(tmp_path):
    """A file written before the optimizers became one class each (the same tree: the
    state's type name, its fields) resumes as the states it holds."""
    weights, x, y = problem()
    model = ember_model(weights)
    flex = Device.flex()
    reference = AdamConfig().init()
    trained = reference.step(1e-2, model, GradientsParams.from_grads(ember_loss(model, x, y).backward(), model))
    old = {}
    for param in model.params():
        state = reference.states[param.id]
        old[param.id.serialize()] = {
            "type": "AdamState",
            "fields": {
                "moment_1": state.moment_1,
                "moment_2": state.moment_2,
                "time": state.time,
                "max_moment_2": None,
            },
        }
    save_record(tmp_path / "old.safetensors", {"states": old}, metadata={"content": "optimizer"})
    loaded = AdamConfig().init().load_file(tmp_path / "old.safetensors", flex)
    grads = GradientsParams.from_grads(ember_loss(trained, x, y).backward(), trained)
    expected = snapshot(reference.step(1e-2, trained, grads))
    grads = GradientsParams.from_grads(ember_loss(trained, x, y).backward(), trained)
    for path, value in snapshot(loaded.step(1e-2, trained, grads)).items():
        assert value.tobytes() == expected[path].tobytes(), path


def test_flex_kernel_reuses_its_flat_results_and_copies_other_layouts(rng, monkeypatch):
    """Small tensors are stepped as one flat array and come back as views of it: fed
    back in the same order (the next step), only the gradients are concatenated; in
    another order the inputs are concatenated again. Both give the bits of a step
    on fresh copies."""
    backend = Device.flex().backend
    settings = SETTINGS
    shapes = [(3, 2), (4,), (2, 2)]

    def gradients():
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def copies(arrays):
        return [a.copy() for a in arrays]

    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    first = backend.adam_step_many(params, gradients(), None, None, None, time=1, **settings)
    joined = []
    concatenate = np.concatenate

    def counting(arrays, *args, **kwargs):
        joined.append(len(arrays))
        return concatenate(arrays, *args, **kwargs)

    monkeypatch.setattr(np, "concatenate", counting)
    grads = gradients()
    second = backend.adam_step_many(first[0], grads, first[1], first[2], None, time=2, **settings)
    assert joined == [3]  # the gradients only: parameters and moments were already flat
    fresh = backend.adam_step_many(
        copies(first[0]), grads, copies(first[1]), copies(first[2]), None, time=2, **settings
    )
    for got, want in zip(second[:3], fresh[:3]):
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]

    joined.clear()
    grads = gradients()[::-1]
    flipped = [column[::-1] for column in second[:3]]
    third = backend.adam_step_many(flipped[0], grads, flipped[1], flipped[2], None, time=3, **settings)
    assert joined == [3, 3, 3, 3]  # another order: every input is concatenated again
    fresh = backend.adam_step_many(
        copies(flipped[0]), grads, copies(flipped[1]), copies(flipped[2]), None, time=3, **settings
    )
    for got, want in zip(third[:3], fresh[:3]):
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
        assert [g.shape for g in got] == [s for s in shapes[::-1]]

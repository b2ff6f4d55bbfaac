"""Optimizer misuse that used to pass silently or crash: a step without gradients,
gradients taken from another model instance, a replaced gradient of the wrong shape,
optimizer states loaded for another model."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.errors import GraphError, RecordError, ShapeError
from ember.nn import LinearConfig
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, AdamWConfig, GradientsParams
from tests.optim.test_optimizer_configs import CONFIGS, make_optimizer
from tests.shared_models import Mlp


def batch(device):
    device.seed(7)
    x = Tensor.random([16, 4], Distribution.uniform(-1.0, 1.0), device=device)
    return x, x.sum_dim(1)


def loss_of(model, x, y):
    return MseLoss().forward(model(x), y, Reduction.MEAN)


def trained(device, steps=3, optim=None):
    x, y = batch(device)
    model, optim = Mlp.new(device), optim or AdamConfig().init()
    for _ in range(steps):
        model = optim.step(1e-2, model, GradientsParams.from_grads(loss_of(model, x, y).backward(), model))
    return model, optim


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_step_without_gradients_is_a_no_op(name):
    """Adam/AdamW used to raise IndexError on empty GradientsParams."""
    device = Device.flex().autodiff()
    model, optim = trained(device, optim=make_optimizer(name))
    states = dict(optim.states)
    assert optim.step(1e-2, model, GradientsParams()) is model
    assert optim.states == states


@pytest.mark.parametrize("config", [AdamConfig(), AdamWConfig()], ids=["adam", "adamw"])
def test_adam_steps_a_model_whose_parameters_are_all_frozen(config):
    device = Device.flex().autodiff()
    model = Mlp.new(device).no_grad()
    x, y = batch(device)
    loss = loss_of(model, x.require_grad(), y)  # something in the graph requires grad, no parameter does
    grads = GradientsParams.from_grads(loss.backward(), model)
    assert grads.is_empty()
    assert config.init().step(1e-2, model, grads) is model


def test_gradients_from_the_model_before_the_step_are_named_as_the_mistake():
    device = Device.flex().autodiff()
    x, y = batch(device)
    model, optim = Mlp.new(device), AdamConfig().init()
    stepped = optim.step(1e-2, model, GradientsParams.from_grads(loss_of(model, x, y).backward(), model))
    grads = loss_of(model, x, y).backward()  # the old model's loss ...
    with pytest.raises(GraphError, match=r"another instance of the model, e.g. the one from before `model = optim"):
        GradientsParams.from_grads(grads, stepped)  # ... with the new model: zero gradients before
    assert len(GradientsParams.from_grads(grads, model)) == 4  # the graph is intact for the right model


def test_gradients_of_an_unrelated_model_stay_empty():
    """Another architecture (e.g. a discriminator's loss and the generator): no error."""
    device = Device.flex().autodiff()
    x, y = batch(device)
    grads = loss_of(Mlp.new(device), x, y).backward()
    other = LinearConfig(3, 5).init(device)
    other.weight.val()
    assert GradientsParams.from_grads(grads, other).is_empty()


def test_grad_replace_checks_the_shape():
    device = Device.flex().autodiff()
    w = Tensor.ones([2, 3], device=device).require_grad()
    grads = w.sum().backward()
    with pytest.raises(ShapeError, match=r"grad_replace: the new gradient has shape \[3, 2\], the tensor has \[2, 3\]"):
        w.grad_replace(grads, Tensor.ones([3, 2]))
    w.grad_replace(grads, Tensor.full([2, 3], 5.0))
    assert w.grad(grads).tolist() == [[5.0] * 3] * 2


def test_optimizer_states_of_another_model_raise_unless_not_strict(tmp_path):
    device = Device.flex().autodiff()
    model, optim = trained(device)
    optim.save_file(tmp_path / "optim.safetensors")
    model.save_file(tmp_path / "model.safetensors")
    x, y = batch(device)
    fresh = Mlp.new(device)  # new ParamIds: the states match nothing
    grads = GradientsParams.from_grads(loss_of(fresh, x, y).backward(), fresh)

    loaded = AdamConfig().init().load_file(tmp_path / "optim.safetensors", device)
    with pytest.raises(RecordError, match=r"belong to none of the 4 parameters of Mlp .*model.load_file.*strict=False"):
        loaded.step(1e-2, fresh, grads)
    with pytest.raises(RecordError, match="belong to none of the 4 parameters"):
        AdamConfig().init().load_file(tmp_path / "optim.safetensors", device, module=fresh)

    lenient = AdamConfig().init().load_file(tmp_path / "optim.safetensors", device, strict=False)
    lenient.step(1e-2, fresh, grads)  # states for other ids are ignored: a first step

    resumed = Mlp.new(device).load_file(tmp_path / "model.safetensors")  # the saved ids
    matching = AdamConfig().init().load_file(tmp_path / "optim.safetensors", device, module=resumed)
    grads = GradientsParams.from_grads(loss_of(resumed, x, y).backward(), resumed)
    expected = optim.step(1e-2, model, GradientsParams.from_grads(loss_of(model, x, y).backward(), model))
    got = matching.step(1e-2, resumed, grads)
    for a, b in zip(expected.params(), got.params()):
        np.testing.assert_array_equal(a.val().to_numpy(), b.val().to_numpy())


@pytest.mark.parametrize(
    ("case", "fault"),
    [
        ("not a table", "not a table of optimizer states"),
        ("bad id", "the state 'xyz' is malformed"),
        ("no fields", "is malformed"),
        ("wrong field type", "the saved field 'time' is a str, expected int"),
        ("tensor field missing", "the saved field 'moment_1' is a NoneType, expected Tensor"),
    ],
)
def test_malformed_optimizer_records_are_record_errors(case, fault):
    device = Device.flex().autodiff()
    _, optim = trained(device, steps=1)
    record = optim.to_record()
    key = next(iter(record))
    fields = record[key]["fields"]
    bad = {
        "not a table": [1, 2],
        "bad id": {"xyz": record[key]},
        "no fields": {key: {"type": "AdamState"}},
        "wrong field type": {key: {"type": "AdamState", "fields": {**fields, "time": "3"}}},
        "tensor field missing": {key: {"type": "AdamState", "fields": {**fields, "moment_1": None}}},
    }[case]
    with pytest.raises(RecordError, match=fault):
        AdamConfig().init().load_record(bad)


def _linear_states(device, tmp_path, d_in=7, d_out=3):
    """A d_in x d_out Linear stepped once by Adam: (model, its optimizer saved at tmp_path/o.safetensors)."""
    lin = LinearConfig(d_in, d_out).init(device)
    optim = AdamConfig().init()
    x = Tensor.ones([2, d_in], device=device)
    lin = optim.step(1e-2, lin, GradientsParams.from_grads(lin(x).sum().backward(), lin))
    optim.save_file(tmp_path / "o.safetensors")
    return lin, optim


def test_states_of_another_model_name_the_paths_and_shapes_on_both_sides(tmp_path):
    """Issue 31 item 11: a 7x3 Linear's Adam states into the seed Mlp's optimizer, refused at
    load (module=...) and at the first step (without), naming both sides."""
    device = Device.flex().autodiff()
    _linear_states(device, tmp_path)
    model = Mlp.new(device)
    both_sides = (
        r"belong to none of the 4 parameters of Mlp \(2 states; in the record: weight \[7, 3\], bias \[3\]; "
        r"in Mlp: l1.weight \[4, 16\], l1.bias \[16\], l2.weight \[16, 1\], l2.bias \[1\]\): they were saved with "
        r"another model"
    )
    with pytest.raises(RecordError, match=both_sides):
        AdamConfig().init().load_file(tmp_path / "o.safetensors", device, module=model)
    deferred = AdamConfig().init().load_file(tmp_path / "o.safetensors", device)
    x, y = batch(device)
    grads = GradientsParams.from_grads(loss_of(model, x, y).backward(), model)
    with pytest.raises(RecordError, match=both_sides):
        deferred.step(1e-2, model, grads)


def test_a_refused_load_leaves_the_optimizer_as_it_was(tmp_path):
    device = Device.flex().autodiff()
    _linear_states(device, tmp_path)
    model, optim = trained(device)
    before = dict(optim.states)
    with pytest.raises(RecordError):
        optim.load_file(tmp_path / "o.safetensors", device, module=model)
    assert dict(optim.states) == before


def test_states_of_a_fresh_model_of_the_same_structure_say_so(tmp_path):
    device = Device.flex().autodiff()
    _, optim = trained(device)
    optim.save_file(tmp_path / "optim.safetensors")
    with pytest.raises(RecordError, match=r"in the record: l1.weight \[4, 16\].*the paths and shapes agree"):
        AdamConfig().init().load_file(tmp_path / "optim.safetensors", device, module=Mlp.new(device))


def test_a_state_of_another_shape_than_its_parameter_is_refused_at_load(tmp_path):
    """Same ids, other shapes (the states of weight and bias swapped): even strict=False
    refuses, since such a state cannot step its parameter."""
    device = Device.flex().autodiff()
    lin, optim = _linear_states(device, tmp_path)
    record = optim.to_record()
    weight, bias = lin.weight.id.serialize(), lin.bias.id.serialize()
    record[weight], record[bias] = record[bias], record[weight]
    for strict in (True, False):
        with pytest.raises(
            RecordError, match=r"2 of them have another shape than their parameter \(weight: \[7, 3\] in Linear, "
        ):
            AdamConfig().init().load_record(record, lin, strict=strict)


def test_records_of_older_ember_without_paths_name_the_ids(tmp_path):
    device = Device.flex().autodiff()
    _, optim = _linear_states(device, tmp_path)
    record = {key: {k: v for k, v in entry.items() if k != "path"} for key, entry in optim.to_record().items()}
    with pytest.raises(RecordError, match=r"in the record: id [0-9a-f]{16} \[7, 3\], id [0-9a-f]{16} \[3\]; in Mlp"):
        AdamConfig().init().load_record(record, Mlp.new(device))
    with pytest.raises(RecordError, match="the state .* is malformed"):
        key = next(iter(record))
        AdamConfig().init().load_record({key: {**record[key], "path": 3}})


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_optimizer_saves_paths_and_states_of_its_parameters_shape(name, tmp_path):
    """The shape check assumes a state's tensors have its parameter's shape: true of every optimizer."""
    device = Device.flex().autodiff()
    model, optim = trained(device, optim=make_optimizer(name))
    shapes = {param.id: list(param.shape) for _, param in model.named_params()}
    paths = {param.id.serialize(): path for path, param in model.named_params()}
    for pid, state in optim.states.items():
        for value in state.to_record().values():
            if isinstance(value, Tensor):
                assert value.dims() == shapes[pid]
    assert {key: entry["path"] for key, entry in optim.to_record().items()} == paths
    optim.save_file(tmp_path / "o.safetensors")
    make_optimizer(name).load_file(tmp_path / "o.safetensors", device, module=model)  # its own model: fine

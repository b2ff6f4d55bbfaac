"""GradientsParams and GradientsAccumulator."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, GraphError
from ember.module import ParamGroup
from ember.optim import AdamConfig, GradientsAccumulator, GradientsParams, SgdConfig
from tests.shared_models import Mlp


@pytest.fixture
def setup():
    device = Device.flex().autodiff()
    device.seed(1)
    model = Mlp.new(device)
    x = Tensor.random([8, 4], device=device)
    return device, model, x


def test_from_grads_moves_gradients_to_param_ids(setup):
    device, model, x = setup
    grads = model(x).sum().backward()
    gp = GradientsParams.from_grads(grads, model)
    assert len(gp) == gp.len() == 4
    assert set(gp.ids()) == {p.id for p in model.params()}
    weight = gp.get(model.l1.weight.id)
    assert weight.dims() == [4, 16] and weight.device == device.inner()
    assert model.l1.weight.val().grad(grads) is None  # moved out, not copied


def test_from_grads_skips_frozen_untracked_and_filtered(setup):
    device, model, x = setup
    frozen = model.freeze(ParamGroup.prefix("l1."))
    gp = GradientsParams.from_grads(frozen(x).sum().backward(), frozen)
    assert set(gp.ids()) == {frozen.l2.weight.id, frozen.l2.bias.id}
    only = GradientsParams.from_params(model(x).sum().backward(), model, [model.l2.bias.id])
    assert only.ids() == [model.l2.bias.id]
    with pytest.raises(GraphError, match="Module"):
        GradientsParams.from_grads(model(x).sum().backward(), "model")


def test_register_remove_and_to_device(setup):
    device, model, x = setup
    gp = GradientsParams()
    assert gp.is_empty()
    gp.register(model.l1.bias.id, Tensor.ones([16], device=device.inner()))
    assert model.l1.bias.id in gp
    moved = gp.to_device(device)
    assert moved.get(model.l1.bias.id).device == device
    assert gp.remove(model.l1.bias.id).dims() == [16] and gp.remove(model.l1.bias.id) is None
    with pytest.raises(GraphError):
        gp.register(model.l1.bias.id, np.ones(16))


def test_registered_gradients_step_the_module(setup):
    device, model, _ = setup
    gp = GradientsParams()
    gp.register(model.l2.bias.id, Tensor.ones([1], device=device.inner()))
    stepped = SgdConfig().init().step(0.5, model, gp)
    assert stepped.l2.bias.val().tolist()[0] == pytest.approx(model.l2.bias.val().tolist()[0] - 0.5)
    assert stepped.l1.weight is model.l1.weight  # no gradient: untouched


def test_accumulator_sums_batches(setup):
    device, model, x = setup
    acc = GradientsAccumulator()
    singles = []
    for chunk in (x[:4], x[4:]):
        gp = GradientsParams.from_grads(model(chunk).sum().backward(), model)
        singles.append(gp.get(model.l1.weight.id).to_numpy())
        acc.accumulate(model, gp)
    assert acc.count == 2
    summed = acc.grads()
    np.testing.assert_allclose(summed.get(model.l1.weight.id).to_numpy(), singles[0] + singles[1], rtol=1e-6)
    full = GradientsParams.from_grads(model(x).sum().backward(), model)
    np.testing.assert_allclose(
        summed.get(model.l1.weight.id).to_numpy(), full.get(model.l1.weight.id).to_numpy(), rtol=1e-5, atol=1e-6
    )
    assert acc.count == 0 and acc.grads().is_empty()


def test_step_rejects_bad_arguments(setup):
    device, model, x = setup
    optim = AdamConfig().init()
    with pytest.raises(ConfigError, match="GradientsParams"):
        optim.step(1e-3, model, model(x).sum().backward())
    gp = GradientsParams.from_grads(model(x).sum().backward(), model)
    with pytest.raises(ConfigError, match="learning rate"):
        optim.step(-1.0, model, gp)
    bad = GradientsParams()
    bad.register(model.l1.weight.id, Tensor.ones([3], device=device.inner()))
    with pytest.raises(ConfigError, match="gradient of 'l1.weight' has shape"):
        optim.step(1e-3, model, bad)


def test_entries_give_param_path_and_grad(setup):
    """The public (param, path, grad) view an optimizer step collects once: parameters
    found by from_grads without another walk, ids registered alone found by one walk,
    ids of other modules left out."""
    from ember.module import Param, ParamId

    device, model, x = setup
    gp = GradientsParams.from_grads(model(x).sum().backward(), model)
    entries = gp.entries(model)
    assert [path for _, path, _ in entries] == ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]
    for param, path, grad in entries:
        assert isinstance(param, Param) and grad is gp.get(param.id)
        assert param is dict(model.named_params())[path]
    manual = GradientsParams()
    manual.register(model.l2.weight.id, gp.get(model.l2.weight.id))
    manual.register(ParamId.new(), Tensor.ones([2], device=device.inner()))  # not in the model
    [(param, path, grad)] = manual.entries(model)
    assert (param.id, path) == (model.l2.weight.id, "l2.weight")

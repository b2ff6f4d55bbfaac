"""``GradScaler``: dynamic loss scaling, skipped steps, growth and backoff, state;
a float16 run that recovers from forced overflow."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Module, Tensor
from ember.amp import GradScaler
from ember.errors import ConfigError
from ember.nn import LinearConfig, Relu
from ember.nn.loss import MseLoss
from ember.optim import GradientsParams, SgdConfig
from tests.shared_models import Mlp


def _problem(device: Device):
    device.seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    model = Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))
    return Tensor.from_data(x, device=device), Tensor.from_data(y, device=device), model


def _params(model: Module) -> list[np.ndarray]:
    return [p.val().to_numpy().copy() for _, p in model.named_params()]


def _grads(value: float, device: Device) -> GradientsParams:
    from ember import Param

    grads = GradientsParams()
    grads.register(Param.from_tensor(Tensor.zeros([2], device=device)).id, Tensor.full([2], value, device=device))
    return grads


def test_scale_unscale_and_the_update_rule(flex):
    scaler = GradScaler(init_scale=8.0, growth_factor=2.0, backoff_factor=0.25, growth_interval=2)
    loss = Tensor.from_floats([1.5], device=flex)
    assert scaler.scale(loss).tolist() == [12.0]
    unscaled = scaler.unscale(_grads(16.0, flex))
    assert [g.tolist() for _, g in unscaled.items()] == [[2.0, 2.0]] and scaler.found_inf() is False
    scaler.update()
    assert scaler.get_scale() == 8.0  # one clean step of two
    scaler.unscale(_grads(16.0, flex))
    scaler.update()
    assert scaler.get_scale() == 16.0  # grown after growth_interval clean steps
    scaler.unscale(_grads(float("inf"), flex))
    assert scaler.found_inf() is True
    scaler.update()
    assert scaler.get_scale() == 4.0  # backed off
    scaler.unscale(_grads(float("nan"), flex))
    scaler.update()
    assert scaler.get_scale() == 1.0
    scaler.update(new_scale=32.0)
    assert scaler.get_scale() == 32.0


def test_state_dict_round_trip_and_errors(flex):
    scaler = GradScaler(init_scale=64.0, growth_interval=3)
    scaler.unscale(_grads(1.0, flex))
    scaler.update()
    state = scaler.state_dict()
    assert state == {
        "scale": 64.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "growth_tracker": 1,
    }
    restored = GradScaler().load_state_dict(state)
    assert restored.state_dict() == state
    with pytest.raises(ConfigError, match="no step"):
        GradScaler().update()
    with pytest.raises(ConfigError, match="already called"):
        s = GradScaler()
        s.unscale(_grads(1.0, flex))
        s.unscale(_grads(1.0, flex))
    with pytest.raises(ConfigError, match="backoff_factor"):
        GradScaler(backoff_factor=1.5)
    with pytest.raises(ConfigError, match="not a GradScaler state"):
        GradScaler().load_state_dict({"scale": 1.0})


def test_disabled_scaler_passes_everything_through(flex):
    scaler = GradScaler(enabled=False)
    loss = Tensor.from_floats([1.5], device=flex)
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    grads = _grads(3.0, flex)
    assert scaler.unscale(grads) is grads
    scaler.update()
    assert scaler.state_dict() == {} and "enabled=False" in repr(scaler)


def _fp16_step(model, optim, scaler, x, y, device):
    with ember.autocast(device, "float16"):
        pred = model(x)
        loss = MseLoss().forward(pred, y)
    grads = GradientsParams.from_grads(scaler.scale(loss).backward(), model)
    before = _params(model)
    model = scaler.step(optim, 0.05, model, grads)
    skipped = scaler.found_inf()
    scaler.update()
    if skipped:
        for a, b in zip(before, _params(model)):
            np.testing.assert_array_equal(a, b)  # a skipped step leaves the model as it was
    return model, loss.into_scalar(), skipped


def test_float16_run_recovers_from_forced_overflow():
    device = Device.flex().autodiff()
    x, y, model = _problem(device)
    optim = SgdConfig().init()
    # A scale far too large: float16 gradients overflow until it has backed off enough.
    scaler = GradScaler(init_scale=2.0**40, growth_interval=10)
    losses, skipped = [], []
    for step in range(60):
        batch_x = x
        if step == 40:  # a poisoned batch: activations overflow float16 (max 65504)
            batch_x = x.mul_scalar(1e5)
        model, loss, was_skipped = _fp16_step(model, optim, scaler, batch_x, y, device)
        losses.append(loss)
        skipped.append(was_skipped)
    assert all(skipped[:3]), "the first steps overflow at 2^40"
    first_clean = skipped.index(False)
    assert 2.0**8 <= 2.0**40 * 0.5**first_clean <= 2.0**28
    assert skipped[40], "the poisoned batch's step is skipped"
    assert not any(skipped[41:]), "training goes on after the overflow"
    assert scaler.skipped_steps == sum(skipped)
    assert losses[-1] < 0.2 * losses[first_clean], (losses[first_clean], losses[-1])
    assert np.isfinite(losses[-1])
    for p in _params(model):
        assert p.dtype == np.float32 and np.isfinite(p).all()  # float32 masters


def test_complex_gradients_are_unscaled_and_checked_as_torch(rng):
    """A complex Param trained through the scaler with SGD: its gradients are divided
    by the scale (complex64 kept) and an inf in an imaginary part skips the step and
    backs off the scale. The oracle is torch's GradScaler on the parameter's real view
    (``torch.view_as_real``: how torch's optimizers step complex parameters; its CPU
    unscale kernel refuses complex gradients themselves)."""
    from ember import DType
    from tests.conftest import import_torch
    from tests.module.test_complex_params import _complex, _model

    torch = import_torch()
    ad = Device.flex().autodiff()
    w, b, x, target = _complex(rng, (3, 2)), _complex(rng, (2,)), _complex(rng, (5, 3)), _complex(rng, (5, 2))
    model = _model(ad, w, b)
    optim = SgdConfig().init()
    scaler = GradScaler(init_scale=2.0**10, growth_interval=2)
    tw, tb = (torch.tensor(v.view(np.float32).reshape(*v.shape, 2), requires_grad=True) for v in (w, b))
    topt = torch.optim.SGD([tw, tb], lr=0.05)
    tscaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    for step in range(5):
        loss = model(Tensor.from_data(x, device=ad)).sub(Tensor.from_data(target, device=ad)).abs().square().mean()
        grads = GradientsParams.from_grads(scaler.scale(loss).backward(), model)
        topt.zero_grad()
        out = torch.tensor(x) @ torch.view_as_complex(tw) + torch.view_as_complex(tb)
        tscaler.scale((out - torch.tensor(target)).abs().square().mean()).backward()
        if step == 2:  # an overflow in one imaginary part only
            clean = grads.get(model.weight.id)
            g = clean.to_numpy().copy()
            g[1, 0] = complex(0.5, np.inf)
            grads.register(model.weight.id, Tensor.from_data(g, device=clean.device))
            tw.grad[1, 0, 1] = float("inf")
        unscaled = scaler.unscale(grads)
        assert unscaled.get(model.weight.id).dtype is DType.COMPLEX64
        tscaler.unscale_(topt)
        if step != 2:
            np.testing.assert_allclose(
                unscaled.get(model.weight.id).to_numpy().view(np.float32).reshape(3, 2, 2),
                tw.grad.numpy(),
                rtol=1e-5,
                atol=1e-6,
            )
        assert scaler.found_inf() is (step == 2)
        model = scaler.step(optim, 0.05, model, grads)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        assert scaler.get_scale() == tscaler.get_scale()
        np.testing.assert_allclose(
            model.weight.val().to_numpy(), torch.view_as_complex(tw.detach()).numpy(), rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            model.bias.val().to_numpy(), torch.view_as_complex(tb.detach()).numpy(), rtol=1e-5, atol=1e-6
        )
    assert scaler.skipped_steps == 1

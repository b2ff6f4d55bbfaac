"""Complex parameters: visited as trainable (float-like) leaves, stepped by optimizers
through their real view as PyTorch does, and saved/loaded by records."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, DType, Tensor
from ember.errors import RecordError
from ember.module import Module, Param
from ember.optim import AdamConfig, AdamWConfig, GradientsParams, RmsPropConfig, SgdConfig
from tests.conftest import import_torch


class ComplexLinear(Module):
    weight: Param
    bias: Param

    def forward(self, x: Tensor) -> Tensor:
        return x.matmul(self.weight.val()).add(self.bias.val())


def _complex(rng, shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _model(device, w, b) -> ComplexLinear:
    return ComplexLinear(
        weight=Param.from_tensor(Tensor.from_data(w, device=device)),
        bias=Param.from_tensor(Tensor.from_data(b, device=device)),
    )


def test_complex_params_are_visited_as_trainable(rng):
    ad = Device.flex().autodiff()
    model = _model(ad, _complex(rng, (3, 2)), _complex(rng, (2,)))
    assert [p.val().dtype for p in model.params()] == [DType.COMPLEX64] * 2
    assert all(p.require_grad and p.val().is_require_grad() for p in model.params())
    assert model.num_params() == 8
    frozen = model.freeze()
    assert not any(p.require_grad for p in frozen.params())
    assert all(p.require_grad for p in frozen.unfreeze().params())


@pytest.mark.parametrize(
    ("make", "torch_make"),
    [
        (lambda: SgdConfig(momentum=0.9), lambda t, ps: t.optim.SGD(ps, lr=0.05, momentum=0.9)),
        (lambda: AdamConfig(epsilon=1e-8), lambda t, ps: t.optim.Adam(ps, lr=0.05)),
        (
            lambda: AdamWConfig(epsilon=1e-8, weight_decay=0.1),
            lambda t, ps: t.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
        ),
        (lambda: RmsPropConfig(epsilon=1e-8, momentum=0.0), lambda t, ps: t.optim.RMSprop(ps, lr=0.05, alpha=0.99)),
    ],
    ids=["sgd", "adam", "adamw", "rmsprop"],
)
def test_complex_params_train_as_torch(rng, make, torch_make):
    torch = import_torch()
    ad = Device.flex().autodiff()
    w, b, x = _complex(rng, (3, 2)), _complex(rng, (2,)), _complex(rng, (5, 3))
    target = _complex(rng, (5, 2))
    model = _model(ad, w, b)
    optim = make().init()
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    topt = torch_make(torch, [tw, tb])
    for _ in range(4):
        loss = model(Tensor.from_data(x, device=ad)).sub(Tensor.from_data(target, device=ad)).abs().square().mean()
        model = optim.step(0.05, model, GradientsParams.from_grads(loss.backward(), model))
        topt.zero_grad()
        ((torch.tensor(x) @ tw + tb - torch.tensor(target)).abs().square().mean()).backward()
        topt.step()
    assert model.weight.val().dtype == DType.COMPLEX64
    np.testing.assert_allclose(model.weight.val().to_numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.bias.val().to_numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_complex_params_save_and_load(rng, tmp_path):
    ad = Device.flex().autodiff()
    model = _model(ad, _complex(rng, (3, 2)), _complex(rng, (2,)))
    path = tmp_path / "complex.safetensors"
    model.save_file(path)
    loaded = _model(ad, np.zeros((3, 2), np.complex64), np.zeros(2, np.complex64)).load_file(path)
    for a, b in zip(model.params(), loaded.params()):
        assert a.id == b.id
        assert b.val().dtype == DType.COMPLEX64 and b.val().is_require_grad()
        assert a.val().to_numpy().tobytes() == b.val().to_numpy().tobytes()


def test_complex128_params_cannot_be_saved_to_safetensors(rng, tmp_path):
    ad = Device.flex().autodiff()
    model = _model(ad, _complex(rng, (3, 2), np.complex128), _complex(rng, (2,), np.complex128))
    with pytest.raises(RecordError, match="complex128.*complex64"):
        model.save_file(tmp_path / "complex.safetensors")

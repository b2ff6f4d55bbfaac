"""PyTorch reflexes on modules and tensors meet ember's way: an error naming it, or the
method itself where ember has the same meaning."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import DeviceError, UsageError
from ember.nn import LinearConfig
from tests.shared_models import Mlp


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("eval", r"model\.valid\(\)"),
        ("train", r"device\.autodiff\(\)"),
        ("parameters", r"model\.params\(\)"),
        ("named_parameters", r"model\.named_params\(\)"),
        ("state_dict", r"to_record\(\)|save_file"),
        ("load_state_dict", r"load_file"),
        ("zero_grad", r"loss\.backward\(\)"),
        ("cuda", r"to_device\(Device\.cuda\(\)\)"),
    ],
)
def test_pytorch_module_methods_name_embers_way(name, fix):
    model = Mlp.new(Device.flex())
    with pytest.raises(UsageError, match=rf"Mlp has no {name}\(\).*{fix}"):
        getattr(model, name)()
    assert not hasattr(model, name)  # also an AttributeError: duck typing keeps working


def test_unknown_attributes_stay_plain_attribute_errors():
    model = Mlp.new(Device.flex())
    with pytest.raises(AttributeError, match="'Mlp' object has no attribute 'nothing'") as caught:
        model.nothing
    assert not isinstance(caught.value, UsageError)


def test_tensor_sigmoid_relu_and_clip_as_methods(torch, rng):
    values = rng.standard_normal(7).astype(np.float32) * 3
    x, t = Tensor.from_data(values), torch.from_numpy(values)
    np.testing.assert_allclose(x.sigmoid().to_numpy(), t.sigmoid().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(x.relu().to_numpy(), t.relu().numpy())
    np.testing.assert_array_equal(x.clip(-1.0, 0.5).to_numpy(), t.clip(-1.0, 0.5).numpy())


def test_autodiff_inputs_to_a_valid_model_name_device_inner():
    device = Device.flex().autodiff()
    model = LinearConfig(2, 3).init(device).valid()
    with pytest.raises(DeviceError, match=r"device\.inner\(\)"):
        model(Tensor.ones([1, 2], device=device))
    assert model(Tensor.ones([1, 2], device=device.inner())).dims() == [1, 3]

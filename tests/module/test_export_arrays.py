"""``export_arrays``: a module's weights in PyTorch's names and layouts, which PyTorch
loads with ``strict=True`` (BatchNorm's step counter included)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.module.foreign import export_arrays
from tests.module.test_pytorch_import import Net, torch_net


@pytest.mark.torch
def test_pytorch_loads_the_export_strictly_and_computes_the_same(torch, tmp_path):
    reference = torch_net(torch)
    torch.save(reference.state_dict(), tmp_path / "net.pt")
    model = Net.new(Device.flex()).load_pytorch(tmp_path / "net.pt")
    arrays = export_arrays(model)
    assert sorted(arrays) == sorted(reference.state_dict())
    counter = arrays["bn.num_batches_tracked"]  # ember keeps no count: written as 0, dropped on load
    assert counter.dtype == np.int64 and counter.shape == () and counter == 0
    net = torch_net(torch)
    net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}, strict=True)
    x = np.random.default_rng(4).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        net(torch.from_numpy(x)).detach().numpy(), model(Tensor.from_data(x)).to_numpy(), rtol=1e-5, atol=1e-5
    )

"""Host arrays too large for memory (issue 31 item 13) and shapes no host array can
address (item 15): ember errors naming the size, on every device, never numpy's raw
``MemoryError`` or ``ValueError``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ember import Tensor
from ember.errors import DeviceMemoryError, ShapeError

ROOT = Path(__file__).resolve().parents[2]
HUGE = 2**40  # 4 TiB of float32: more than any test machine holds


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # a PyTorch .pt's stride-0 tensor loads as such a view: cheap until it becomes a tensor
        (
            lambda: np.broadcast_to(np.float32(1.5), (HUGE,)),
            ["[1099511627776]", "float32", "4.0 TiB", "broadcast view"],
        ),
        (lambda: np.broadcast_to(np.ones((1, 4), np.float32), (HUGE // 4, 4)), ["[274877906944, 4]", "strides [0, 4]"]),
        (lambda: np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (HUGE,), (0,)), ["uint8", "1.0 TiB"]),
    ],
    ids=["stride-0 float32", "stride-0 rows", "stride-0 uint8"],
)
@pytest.mark.parametrize("dtype", [None, "float64", "int64"])
def test_from_data_of_an_array_too_large_names_the_size(device, make, words, dtype):
    array = make()
    if dtype is not None:  # the cast (and int range checks) must not scan the view first
        words = [w for w in words if w not in ("float32", "uint8", "4.0 TiB", "1.0 TiB")] + [dtype]
    with pytest.raises(DeviceMemoryError, match="ember: Tensor.from_data: a tensor of shape") as info:
        Tensor.from_data(array, device=device, dtype=dtype)
    for word in words:
        assert word in str(info.value)
    assert "bytes" in str(info.value) and "more than this machine's" in str(info.value)


def test_a_copy_the_allocator_refuses_names_the_size():
    """An array below physical memory that the allocator refuses (an address-space limit)."""
    script = textwrap.dedent(
        """
        import resource
        import numpy as np
        from ember import Device, Tensor
        from ember.errors import DeviceMemoryError
        view = np.broadcast_to(np.float32(1), (2**29,))  # 2 GiB as a copy
        resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, resource.RLIM_INFINITY))
        try:
            Tensor.from_data(view, device=Device.flex())
        except DeviceMemoryError as error:
            print(error)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Tensor.from_data: a tensor of shape [536870912] and dtype float32 needs 2,147,483,648 bytes" in out.stdout
    assert "more than the memory free now" in out.stdout, out.stderr


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("Tensor.full", lambda d: Tensor.zeros([2**31 - 1, 0, 2**40], device=d)),
        ("Tensor.full", lambda d: Tensor.full([0, 2**62], 1, device=d, dtype="int64")),
        ("Tensor.random", lambda d: Tensor.random([2**62, 0, 4], device=d)),
        ("reshape", lambda d: Tensor.zeros([0, 3], device=d).reshape([2**31 - 1, 0, 2**40])),
        ("expand", lambda d: Tensor.zeros([1, 0, 1], device=d).expand([2**31 - 1, 0, 2**40])),
        ("expand", lambda d: Tensor.zeros([1, 1], device=d).expand([2**40, 2**40])),
    ],
)
def test_shapes_no_host_array_can_address_are_shape_errors(device, op, call):
    with pytest.raises(ShapeError, match=rf"ember: {op}: shape \[.*\] cannot be represented: .* use smaller dims"):
        call(device)


def test_empty_shapes_with_large_dims_still_work(device):
    t = Tensor.zeros([2**31 - 1, 0, 2**20], device=device)
    assert t.dims() == [2**31 - 1, 0, 2**20] and t.to_numpy().shape == (2**31 - 1, 0, 2**20)
    assert t.reshape([0, 2**40]).dims() == [0, 2**40]

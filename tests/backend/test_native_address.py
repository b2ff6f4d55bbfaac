"""flex's ``address``: the data pointer that compiled kernels receive, read from the
array object, against numpy's own ``__array_interface__``."""

from __future__ import annotations

import numpy as np

from ember.backend.flex.native import address


def numpys(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_address_is_numpys_data_pointer(rng):
    a = rng.standard_normal((6, 8)).astype(np.float32)
    views = [a, a[2:], a[:, 3:], a[::2, 1::3], a.T, a.reshape(-1)[5:], np.empty((0, 4), np.float32)]
    views += [np.zeros(3, np.int8)[1:], np.asarray(a, order="F")]
    for view in views:
        assert address(view) == numpys(view)


def test_address_of_an_array_subclass_asks_numpy(tmp_path):
    mapped = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(4, 4))
    assert address(mapped[1:]) == numpys(mapped[1:])
    masked = np.ma.masked_array(np.arange(5.0), mask=[0, 1, 0, 0, 1])
    assert address(masked) == numpys(masked)

"""float16 and bfloat16 tensors keep their dtype through ops with Python scalars
(as in PyTorch: a scalar never widens a tensor), computed in float32 and rounded."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ember import Tensor


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_scalar_ops_keep_half_dtypes(device, dtype):
    x = Tensor.from_floats([0.5, -1.25, 3.0], device=device).cast(dtype)
    np_dtype = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    exact = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    for out, expected in (
        (x.mul_scalar(0.1), exact * np.float32(0.1)),
        (x.add_scalar(1.0), exact + 1.0),
        (x.sub_scalar(0.3), exact - np.float32(0.3)),
        (x.div_scalar(3.0), exact / 3.0),
        (x.clamp_min(0.0), np.maximum(exact, 0.0)),
        (x.clamp(-1.0, 1.0), np.clip(exact, -1.0, 1.0)),
    ):
        assert out.dtype.value == dtype
        np.testing.assert_array_equal(out.to_numpy(), expected.astype(np_dtype))
    assert x.greater_elem(0.0).dtype.value == "bool"

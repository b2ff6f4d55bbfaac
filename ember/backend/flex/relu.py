"""flex's fused ReLU gradient: ``grad`` where the forward's output is positive, else
0, in one pass over float32 arrays (the native row program
:func:`ember.backend.flex.row_kernels.relu_backward`) instead of the composite's
comparison, mask and select. Other dtypes, small arrays and ``EMBER_FLEX_NATIVE=0``
take the composite, whose values are the same bit for bit."""

from __future__ import annotations

import numpy as np

from ember.backend.flex import native

_F32 = np.dtype(np.float32)


def relu_backward(out: np.ndarray, grad: np.ndarray):
    """``grad`` where ``out > 0``, else 0, for float32 arrays of one shape;
    ``NotImplemented`` where the native kernel does not apply."""
    if out.dtype != _F32 or grad.dtype != _F32 or out.shape != grad.shape:
        return NotImplemented
    kernels = native.kernels(out.size)
    if kernels is None:
        return NotImplemented
    flat_out = np.ascontiguousarray(out).reshape(-1)
    flat_grad = np.ascontiguousarray(grad).reshape(-1)
    result = np.empty(flat_out.size, _F32)
    kernels.relu_backward(native.address(flat_out), native.address(flat_grad), native.address(result), result.size)
    return result.reshape(out.shape)

"""flex's fused ReLU gradient: ``grad`` where the forward's output is positive, else
0, in one pass over float32 arrays (the native row program
:func:`ember.backend.flex.row_kernels.relu_backward`) instead of the composite's
comparison, mask and select. Small float arrays take one numpy select; other dtypes
and ``EMBER_FLEX_NATIVE=0`` take the composite, whose values are the same bit for bit."""

from __future__ import annotations

import numpy as np

from ember.backend.flex import native

_F32 = np.dtype(np.float32)


def relu_backward(out: np.ndarray, grad: np.ndarray):
    """``grad`` where ``out > 0``, else 0, for float arrays of one shape and dtype:
    one numpy select below the native kernels' size (the composite's values, without
    its two dispatched ops), the native row program for float32 above it;
    ``NotImplemented`` elsewhere (the composite runs)."""
    if out.shape != grad.shape or out.dtype != grad.dtype or out.dtype.kind != "f":
        return NotImplemented
    if out.size < native.MIN_ELEMENTS:
        return np.where(out > 0, grad, grad.dtype.type(0))
    kernels = native.kernels() if out.dtype == _F32 else None
    if kernels is None:
        return NotImplemented
    flat_out = np.ascontiguousarray(out).reshape(-1)
    flat_grad = np.ascontiguousarray(grad).reshape(-1)
    result = np.empty(flat_out.size, _F32)
    kernels.relu_backward(native.address(flat_out), native.address(flat_grad), native.address(result), result.size)
    return result.reshape(out.shape)

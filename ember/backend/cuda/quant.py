"""The cuda backend's ``quantized_linear``: the kernel layer's weight-only quantized
matmul (:mod:`ember.backend.kernel.quant`) printed as CUDA C and compiled by NVRTC, so
the packed int8/int4 weight is dequantized in registers and no float weight exists.

The activation-quantized schemes (``"dynamic"``, ``"static"``) round the input to the
int8 grid first (the composite's ``fake_quantize_int8``: per row ``max |x| / 127``, or
the calibrated scale), then run the same kernels: the weight stays packed.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.composites.quantized import fake_quantize_int8
from ember.backend.kernel.quant import BIAS, OUT, PARTIAL, SCALES, VALUES, ZEROS, QuantMatmul, X, quant_matmul_kernels

if TYPE_CHECKING:
    from ember.backend.cuda.backend import CudaBackend
    from ember.backend.cuda.tensor import CudaTensor

_F32 = np.dtype(np.float32)


@functools.lru_cache(maxsize=256)
def _kernels(p: QuantMatmul) -> tuple:
    """The product's kernels (built once per shape and kind)."""
    return tuple(quant_matmul_kernels(p))


def quantized_linear(
    backend: CudaBackend,
    x: CudaTensor,
    values: CudaTensor,
    scales: CudaTensor,
    zero_points: CudaTensor | None,
    bias: CudaTensor | None,
    value: str,
    group: int,
    activations: str,
    input_scale: CudaTensor | None = None,
) -> Any:
    """``x [..., K] @ dequantize(values).T + bias`` as float32 ``[..., N]``, or
    ``NotImplemented`` for operands that are not float32."""
    if x.dtype != _F32 or scales.dtype != _F32 or (bias is not None and bias.dtype != _F32):
        return NotImplemented
    if activations:  # the input on its int8 grid (the composite's rounding), then the packed weight
        x = fake_quantize_int8(backend, x, input_scale)
    n = values.shape[0]
    k = x.shape[-1]
    lead = x.shape[:-1]
    m = math.prod(lead)
    if m == 0 or n == 0:
        return backend.empty((*lead, n), _F32)
    p = QuantMatmul(
        m,
        n,
        k,
        group,
        value,
        values.dtype == np.int8,
        zero_points is not None,
        bias is not None,
        tuple(scales.shape) == (1, 1),
    )
    out = backend.empty((*lead, n), _F32)
    tensors = {X: x, VALUES: values, SCALES: scales, OUT: out}
    if zero_points is not None:
        tensors[ZEROS] = zero_points
    if bias is not None:
        tensors[BIAS] = bias
    kernels = _kernels(p)
    if len(kernels) > 1:
        tensors[PARTIAL] = backend.empty((m, n, p.groups), _F32)
    dense = {b: backend.contiguous(t) for b, t in tensors.items()}
    # Buffer ids index this list (an absent operand's slot holds ``out``; no kernel reads it).
    operands = [dense.get(b, out) for b in range(PARTIAL + 1)]
    for i, kernel in enumerate(kernels):
        backend._run_cached(("quantized_linear", p, i), operands, lambda kernel=kernel: (kernel, None))
    return out

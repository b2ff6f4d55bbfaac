"""flex's direct convolutions: the kernel layer's batch loop over the direct kernel
(:func:`ember.backend.kernel.llvm.direct_batch.batch_loop`, the shared function
fusion's compiled plans call) compiled per shape, for float32 stride-1 convolutions
with small windows, forward and transposed (a convolution's input gradient, as a
convolution with the flipped kernel), and their weight gradients
(:func:`ember.backend.kernel.llvm.direct_weight_batch.weight_grad_loop`, where its rows
fill their vectors). Eager and compiled code then convolve such layers with the same
code. flex calls the shared loops through ctypes, with padded-input and accumulator
buffers of the call's own, so two threads may convolve with one geometry at once.

Where :func:`ember.backend.kernel.llvm.direct_batch.enabled` says (``EMBER_GEMM``;
hosts with 512-bit vectors by default), for outputs of
:data:`ember.backend.flex.native.MIN_ELEMENTS` values or more, under the conditions of
:mod:`.native_pool`'s kernels; ``None`` otherwise, and flex runs im2col and a product.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.native_pool import cached, enabled, shared_entry

_F32 = np.dtype(np.float32)
#: Both shared loops take three pointers, the sample count and two buffers' pointers.
_LOOP_ARGS = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_void_p] * 2


def conv(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
) -> np.ndarray | None:
    """The stride-1 convolution of ``x`` ``[N, C, *spatial]`` with ``weight``
    ``[O, C / groups, *kernel]`` (plus ``bias``), padded by ``pad`` before each dim, to
    ``out`` positions per plane; ``None`` where the direct kernel does not apply."""
    from ember.backend.kernel.llvm import direct_batch, jit

    n, c_in = x.shape[:2]
    c_out = weight.shape[0]
    if (
        x.dtype != _F32
        or weight.dtype != _F32
        or (bias is not None and bias.dtype != _F32)
        or not enabled(n * c_out * int(np.prod(out)), _F32)
        or not direct_batch.enabled()
    ):
        return None
    width = jit.vector_width() or 256
    spatial, kernel = tuple(x.shape[2:]), tuple(weight.shape[2:])
    # one kernel per geometry, whatever the batch size (a ragged last batch, a
    # validation batch): the sample count is read at run time
    batch = direct_batch.direct_batch(
        1, c_in, c_out, groups, spatial, kernel, tuple(pad), tuple(dilation), tuple(out), width
    )
    if batch is None:
        return None
    with_bias = bias is not None

    def build() -> Any:  # loop(x, w, bias, out, count, padded)
        return shared_entry(lambda: direct_batch.batch_loop(batch, width, with_bias).address(), _LOOP_ARGS)

    found = cached(("direct", batch, with_bias, width), build)
    if found is None:
        return None
    x, weight = np.ascontiguousarray(x), np.ascontiguousarray(weight)
    bias = None if bias is None else np.ascontiguousarray(bias)  # kept alive over the call
    y = np.empty((n, c_out, *out), dtype=_F32)
    padded = np.zeros(batch.conv.padded_floats, dtype=_F32)  # its slack past the planes is read, never used
    bias_at = 0 if bias is None else native.address(bias)
    found(native.address(x), native.address(weight), bias_at, native.address(y), n, native.address(padded))
    return y


def conv_transpose(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    padding: tuple[tuple[int, int], ...],
    output_padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> np.ndarray | None:
    """The stride-1 transposed convolution of ``x`` ``[N, C, *spatial]`` with ``weight``
    ``[C, O / groups, *kernel]`` (plus ``bias``): the convolution of ``x`` with the
    kernel flipped and its channel dims swapped per group, padded by ``dilation * (k -
    1) - pad``; ``None`` where the direct kernel does not apply (or that padding is
    negative)."""
    kernel = tuple(weight.shape[2:])
    pad = tuple(d * (k - 1) - lo for d, k, (lo, _) in zip(dilation, kernel, padding))
    if any(p < 0 for p in pad) or x.dtype != _F32 or weight.dtype != _F32:
        return None
    c_in, og = weight.shape[:2]
    ig = c_in // groups
    out = tuple(
        m - lo - hi + d * (k - 1) + op
        for m, (lo, hi), d, k, op in zip(x.shape[2:], padding, dilation, kernel, output_padding)
    )
    if any(o <= 0 for o in out):
        return None
    rank = len(kernel)
    # flipped[g * og + o, c, *k] = weight[g * ig + c, o, *(kernel - 1 - k)]
    grouped = weight.reshape((groups, ig, og, *kernel)).swapaxes(1, 2)
    flipped = np.ascontiguousarray(np.flip(grouped, axis=tuple(range(3, 3 + rank))))
    return conv(x, flipped.reshape((groups * og, ig, *kernel)), bias, pad, tuple(dilation), out, groups)


def conv_weight_grad(
    x: np.ndarray,
    grad: np.ndarray,
    weight_shape: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> np.ndarray | None:
    """The weight gradient ``[O, C / groups, *kernel]`` of the stride-1 convolution of
    ``x`` ``[N, C, *spatial]`` padded by ``pad`` before each dim, given its output
    gradient ``grad`` ``[N, O, *out]``, by the loop and kernel compiled plans run
    (:mod:`ember.backend.kernel.llvm.direct_weight_batch`); ``None`` where the direct
    weight gradient does not apply."""
    from ember.backend.kernel.llvm import direct_batch, direct_weight_batch, jit
    from ember.backend.kernel.llvm.direct_conv_grad import padded_floats

    n, c_in = x.shape[:2]
    c_out, out = grad.shape[1], tuple(grad.shape[2:])
    if n == 0 or x.dtype != _F32 or grad.dtype != _F32 or not enabled(grad.size, _F32) or not direct_batch.enabled():
        return None
    width = jit.vector_width() or 256
    # one loop per geometry, whatever the batch size: the sample count is read at run time
    batch = direct_weight_batch.direct_weight_batch(
        c_in, c_out, groups, tuple(x.shape[2:]), tuple(weight_shape[2:]), tuple(pad), tuple(dilation), out, width
    )
    if batch is None:
        return None

    def build() -> Any:  # loop(x, grad, out, count, padded, acc)
        return shared_entry(lambda: direct_weight_batch.weight_grad_loop(batch, width).address(), _LOOP_ARGS)

    found = cached(("direct_weight_grad", batch, width), build)
    if found is None:
        return None
    x, grad = np.ascontiguousarray(x), np.ascontiguousarray(grad)
    result = np.empty(tuple(weight_shape), dtype=_F32)
    conv = batch.conv
    padded = np.empty(padded_floats(conv, batch.samples), dtype=_F32)  # written before it is read
    acc = np.empty(batch.weights * conv.width, dtype=_F32)  # zeroed by the loop
    found(
        native.address(x), native.address(grad), native.address(result), n, native.address(padded), native.address(acc)
    )
    return result


__all__ = ["conv", "conv_transpose", "conv_weight_grad"]

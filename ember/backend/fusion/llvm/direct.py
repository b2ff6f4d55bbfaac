"""Convolutions by the kernel layer's direct kernel
(:mod:`ember.backend.kernel.llvm.direct_conv`) instead of im2col and a product: float32,
stride 1, windows of at most :data:`~ember.backend.kernel.llvm.direct_conv.MAX_WINDOW`
values (a small CNN's layers), forward or as a stride-1 ``conv_transpose`` (a
convolution's input gradient: the flipped kernel), and their weight gradients
(``conv_weight_grad``, :mod:`ember.backend.kernel.llvm.direct_weight_batch`), where
:func:`.sgemm.direct_convolutions` says (hosts with 512-bit vectors, training plans
included, or ``EMBER_GEMM=ember``). Called by :func:`.conv.conv_core` and
``conv_weight_grad``'s lowering.

Measured on the small CNN's compiled training step (W3, ``benchmarks/profile_compiled.py
--w3 --clock cpu``, AVX-512 host, one thread): its input gradient 1746 -> 619 us with
OpenBLAS pinned to ``Haswell`` and 949 -> 625 us on OpenBLAS's ``SkylakeX`` kernels; its
two forward convolutions (with their ReLU and pooling) 2638 -> 1206 and 1651 -> 1212 us;
its two weight gradients ([32, 16, 3, 3] and [16, 1, 3, 3]) 1197 -> 596 and 359 -> 83 us
pinned to ``Haswell``, 817 -> 595 and 101 -> 82 us on ``SkylakeX``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from ember.backend.fusion.llvm.emitter import Emitter
from ember.backend.kernel.llvm.direct_batch import DirectBatch, direct_batch, emit_batch_loop_call, emit_direct_batch
from ember.backend.kernel.llvm.direct_weight_batch import (
    DirectWeightBatch,
    direct_weight_batch,
    emit_direct_weight_grad,
)
from ember.backend.kernel.llvm.mathlib import I64

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.conv import _Conv


def _runs_direct(e: Emitter, c: _Conv, dtype: np.dtype) -> bool:
    return dtype == np.dtype(np.float32) and e.module.direct_convs and all(s == 1 for s in c.stride)


def direct_geometry(e: Emitter, c: _Conv, dtype: np.dtype) -> DirectBatch | None:
    """The direct kernel's geometry where it runs ``c`` (a float32 convolution of
    stride 1 and small windows, in a plan that runs direct convolutions), else ``None``."""
    if not _runs_direct(e, c, dtype):
        return None
    return direct_batch(
        c.n, c.c_in, c.c_out, c.groups, c.spatial, c.kernel, c.pad, c.dilation, c.out, e.module.vector_width
    )


def direct_weight_geometry(e: Emitter, c: _Conv, dtype: np.dtype) -> DirectWeightBatch | None:
    """The direct weight gradient's geometry where it runs ``c``'s ``conv_weight_grad``:
    as :func:`direct_geometry`, and the rows must also fill their vectors
    (:func:`~ember.backend.kernel.llvm.direct_conv_grad.fits`); else ``None``. Its
    chunks are sized as flex's eager ones (whatever ``c.n``), so that the plan calls
    the batch loop eager compiled."""
    if not _runs_direct(e, c, dtype):
        return None
    return direct_weight_batch(
        c.c_in, c.c_out, c.groups, c.spatial, c.kernel, c.pad, c.dilation, c.out, e.module.vector_width
    )


def direct_core(
    e: Emitter,
    c: _Conv,
    direct: DirectBatch,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value | None,
    block: Callable[[ir.Value], ir.Value] | None,
    epilogue: Callable[[ir.Value, ir.Value], None] | None,
) -> None:
    """:func:`conv_core` by the direct kernel: the batch loop flex's eager convolutions
    run too (:func:`ember.backend.kernel.llvm.direct_batch.emit_direct_batch`). A
    convolution with no fused epilogue (a training step's input gradient) calls the
    shared loop eager compiled (:func:`~ember.backend.kernel.llvm.direct_batch.batch_loop`)
    and emits none of it."""
    if block is None and epilogue is None and out is not None:
        count = ir.Constant(I64, c.n)
        emit_batch_loop_call(e, e.module.module, e.module.prefix, direct, e.module.vector_width, x, w, bias, out, count)
        return
    emit_direct_batch(
        e, e.module.module, e.module.prefix, direct, e.module.vector_width, x, w, bias, out, block, epilogue
    )


def direct_weight_grad(
    e: Emitter, c: _Conv, direct: DirectWeightBatch, x: ir.Value, grad: ir.Value, out: ir.Value
) -> None:
    """``conv_weight_grad`` by the direct kernel: a call of the shared batch loop flex's
    eager weight gradients call too (:func:`ember.backend.kernel.llvm.direct_weight_batch.emit_direct_weight_grad`),
    for the plan's ``c.n`` samples."""
    emit_direct_weight_grad(
        e, e.module.module, e.module.prefix, direct, e.module.vector_width, x, grad, out, ir.Constant(I64, c.n)
    )


__all__ = ["direct_core", "direct_geometry", "direct_weight_geometry", "direct_weight_grad"]

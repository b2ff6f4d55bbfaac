"""Convolutions by the kernel layer's direct kernel
(:mod:`ember.backend.kernel.llvm.direct_conv`) instead of im2col and a product: float32,
stride 1, windows of at most :data:`~ember.backend.kernel.llvm.direct_conv.MAX_WINDOW`
values (a small CNN's layers), forward or as a stride-1 ``conv_transpose`` (a
convolution's input gradient: the flipped kernel), where
:func:`.sgemm.direct_convolutions` says (hosts with 512-bit vectors, training plans
included, or ``EMBER_GEMM=ember``). Called by :func:`.conv.conv_core`.

Measured on the small CNN's compiled training step (W3, ``benchmarks/profile_compiled.py
--w3 --clock cpu``, AVX-512 host, one thread): its input gradient 1746 -> 619 us with
OpenBLAS pinned to ``Haswell`` and 949 -> 625 us on OpenBLAS's ``SkylakeX`` kernels; its
two forward convolutions (with their ReLU and pooling) 2638 -> 1206 and 1651 -> 1212 us."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from ember.backend.fusion.llvm.emitter import Emitter
from ember.backend.kernel.llvm.direct_batch import DirectBatch, direct_batch, emit_direct_batch

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.conv import _Conv


def direct_geometry(e: Emitter, c: _Conv, dtype: np.dtype) -> DirectBatch | None:
    """The direct kernel's geometry where it runs ``c`` (a float32 convolution of
    stride 1 and small windows, in a plan that runs direct convolutions), else ``None``."""
    if dtype != np.dtype(np.float32) or not e.module.direct_convs or any(s != 1 for s in c.stride):
        return None
    return direct_batch(
        c.n, c.c_in, c.c_out, c.groups, c.spatial, c.kernel, c.pad, c.dilation, c.out, e.module.vector_width
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
    run too (:func:`ember.backend.kernel.llvm.direct_batch.emit_direct_batch`)."""
    emit_direct_batch(
        e, e.module.module, e.module.prefix, direct, e.module.vector_width, x, w, bias, out, block, epilogue
    )


__all__ = ["direct_core", "direct_geometry"]

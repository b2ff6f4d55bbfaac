"""Convolutions by the kernel layer's direct kernel
(:mod:`ember.backend.kernel.llvm.direct_conv`) instead of im2col and a product: float32,
stride 1, windows of at most :data:`~ember.backend.kernel.llvm.direct_conv.MAX_WINDOW`
values (a small CNN's layers), forward or as a stride-1 ``conv_transpose`` (a
convolution's input gradient: the flipped kernel), and their weight gradients
(``conv_weight_grad``, :mod:`ember.backend.kernel.llvm.direct_conv_grad`), where
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

from ember.backend.fusion.llvm.columns import _pad_input
from ember.backend.fusion.llvm.emitter import Emitter
from ember.backend.kernel.llvm.direct_batch import DirectBatch, direct_batch, emit_direct_batch, module_buffer
from ember.backend.kernel.llvm.direct_conv import DirectConv
from ember.backend.kernel.llvm.direct_conv_grad import (
    chunk_samples,
    direct_weight_grad_function,
    lane_sums_function,
    padded_floats,
    sample_floats,
)
from ember.backend.kernel.llvm.direct_conv_grad import fits as weight_grad_fits
from ember.backend.kernel.llvm.mathlib import I64, const
from ember.backend.kernel.views import size_of

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


def direct_weight_geometry(e: Emitter, c: _Conv, dtype: np.dtype) -> DirectConv | None:
    """The direct weight gradient's geometry where it runs ``c``'s ``conv_weight_grad``:
    as :func:`direct_geometry`, and the rows must also fill their vectors
    (:func:`~ember.backend.kernel.llvm.direct_conv_grad.fits`); else ``None``."""
    if not _runs_direct(e, c, dtype):
        return None
    conv = DirectConv(c.cg, c.og, c.kernel, c.dilation, c.out, 16 if e.module.vector_width == 512 else 8)
    return conv if weight_grad_fits(conv) else None


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


def direct_weight_grad(e: Emitter, c: _Conv, direct: DirectConv, x: ir.Value, grad: ir.Value, out: ir.Value) -> None:
    """``conv_weight_grad`` by the direct kernel
    (:mod:`ember.backend.kernel.llvm.direct_conv_grad`): per group, chunks of samples'
    padded inputs (a module global), each chunk's weight gradient added into the
    lane-wise accumulators (another), whose lanes are summed into ``out`` at the end."""
    b, module = e.b, e.module.module
    f32 = np.dtype(np.float32)
    samples = chunk_samples(direct, c.n)
    padded = module_buffer(e.b, module, f"{e.module.prefix}_dw_padded", padded_floats(direct, samples))
    weights = c.og * direct.window
    acc = module_buffer(e.b, module, f"{e.module.prefix}_dw_acc", weights * direct.width)
    prefix = module.get_unique_name(f"{e.module.prefix}_direct_dw")
    positions = c.positions
    vector_bits = e.module.vector_width
    kernel = direct_weight_grad_function(module, prefix, direct, vector_bits, samples, c.c_out * positions)
    sums = lane_sums_function(module, f"{prefix}_sums", weights, direct.width, vector_bits)
    plane, per_x = size_of(c.spatial), sample_floats(direct)[0]

    def chunk(first: ir.Value, count: int, g: int) -> list:
        def sample(s: ir.Value, _: list) -> list:
            i = b.add(first, s)
            x_base = b.mul(
                b.add(b.mul(i, ir.Constant(I64, c.c_in)), ir.Constant(I64, g * c.cg)), ir.Constant(I64, plane)
            )
            _pad_input(e, c, x, x_base, e.at(padded, b.mul(s, ir.Constant(I64, per_x)), f32), f32)
            return []

        e.loops.run(count, sample)
        dy = b.mul(
            b.add(b.mul(first, ir.Constant(I64, c.c_out)), ir.Constant(I64, g * c.og)), ir.Constant(I64, positions)
        )
        b.call(kernel, [padded, e.at(grad, dy, f32), acc, ir.Constant(I64, count)])
        return []

    full, rest = divmod(c.n, samples)
    step = ir.Constant(I64, samples)
    for g in range(c.groups):
        e.fill(acc, ir.Constant(I64, 0), weights * direct.width, const(f32, 0.0), f32)
        if full:

            def chunks(k: ir.Value, _: list, g: int = g) -> list:
                return chunk(b.mul(k, step), samples, g)

            e.loops.run(full, chunks)
        if rest:
            chunk(ir.Constant(I64, full * samples), rest, g)
        b.call(sums, [acc, e.at(out, ir.Constant(I64, g * weights), f32)])


__all__ = ["direct_core", "direct_geometry", "direct_weight_geometry", "direct_weight_grad"]

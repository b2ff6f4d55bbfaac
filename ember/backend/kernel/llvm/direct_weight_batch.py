"""The weight gradient of a batch of stride-1 float32 convolutions by the direct kernel
(:mod:`.direct_conv_grad`): per group, chunks of samples' zero-padded inputs copied
into a buffer of the caller's module, each chunk's weight gradient added into lane-wise
accumulators (another), whose lanes are summed into the result at the end. The loop
is itself a shared kernel function (:mod:`.shared`, :func:`weight_grad_loop`) that
fusion's plans (:mod:`ember.backend.fusion.llvm.direct`) and flex's eager weight
gradients (:mod:`ember.backend.flex.native_direct`) call, so eager and compiled code
give the same weight gradient, bit for bit, and a plan compiles none of it: in the
digits example's training plan, its two weight gradients took about 50 ms of LLVM time
as im2col and ``sgemm``, and about 20 as plan-local loops calling the shared kernels.

The chunking does not change the sums' order (each accumulator adds its samples in
order, whether they come in one chunk or several), so the number of samples may be a
run-time value: one compiled loop for every batch size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.direct_batch import module_buffer, pad_input
from ember.backend.kernel.llvm.direct_conv import PTR, DirectConv
from ember.backend.kernel.llvm.direct_conv_grad import (
    chunk_samples,
    direct_weight_grad_function,
    fits,
    lane_sums_function,
    lanes,
    padded_floats,
)
from ember.backend.kernel.llvm.mathlib import I64, const, kernel_function
from ember.backend.kernel.views import size_of

if TYPE_CHECKING:
    from ember.backend.kernel.llvm.shared import SharedKernel

_F32 = np.dtype(np.float32)
#: A sample count past any batch: :func:`chunk_samples`' cap alone sizes the chunk.
_ANY = 1 << 40


@dataclass(frozen=True)
class DirectWeightBatch:
    """The weight gradient of a convolution of ``c_in`` channels (``groups`` groups)
    over ``spatial``, padded by ``pad`` before each dim, by ``conv`` per group, in
    chunks of at most ``samples`` samples."""

    c_in: int
    groups: int
    spatial: tuple[int, ...]
    pad: tuple[int, ...]
    conv: DirectConv
    samples: int

    @property
    def c_out(self) -> int:
        return self.groups * self.conv.outputs

    @property
    def weights(self) -> int:
        """One group's weights."""
        return self.conv.outputs * self.conv.window


def direct_weight_batch(
    c_in: int,
    c_out: int,
    groups: int,
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    vector_bits: int | None,
    n: int | None = None,
) -> DirectWeightBatch | None:
    """The geometry where the direct weight gradient takes it (stride 1 is the caller's
    to check; non-negative leading padding; small windows whose rows fill their
    vectors, :func:`.direct_conv_grad.fits`), else ``None``. ``n``, where known at
    compile time, bounds the chunk; else chunks are as large as the cache allows."""
    if any(p < 0 for p in pad) or c_in % groups or c_out % groups:
        return None
    conv = DirectConv(c_in // groups, c_out // groups, kernel, dilation, out, lanes(out[-1], vector_bits))
    if not fits(conv):
        return None
    return DirectWeightBatch(c_in, groups, spatial, pad, conv, chunk_samples(conv, _ANY if n is None else n))


def weight_grad_kernels(batch: DirectWeightBatch, vector_bits: int | None) -> tuple[SharedKernel, SharedKernel]:
    """The two shared kernels the loop calls
    (:class:`~ember.backend.kernel.llvm.shared.SharedKernel`): the weight gradient
    (:func:`.direct_conv_grad.direct_weight_grad_function`) and the lane sums
    (:func:`.direct_conv_grad.lane_sums_function`)."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    conv, grad_stride = batch.conv, batch.c_out * size_of(batch.conv.out)

    def build_grad(own: ir.Module, name: str) -> ir.Function:
        return direct_weight_grad_function(own, name, conv, vector_bits, grad_stride)

    def build_sums(own: ir.Module, name: str) -> ir.Function:
        return lane_sums_function(own, name, batch.weights, conv.width, vector_bits)

    grad = SharedKernel(
        "ember_direct_dw",
        ("direct_weight_grad", conv, vector_bits, grad_stride),
        ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64]),
        build_grad,
    )
    sums = SharedKernel(
        "ember_lane_sums",
        ("lane_sums", batch.weights, conv.width, vector_bits),
        ir.FunctionType(ir.VoidType(), [PTR, PTR]),
        build_sums,
    )
    return grad, sums


def weight_grad_loop(batch: DirectWeightBatch, vector_bits: int | None) -> SharedKernel:
    """The batch loop as a shared kernel
    ``loop(x, grad, out, count, padded, acc)``: :func:`emit_weight_grad_loop` over
    the caller's buffers (``padded``: :func:`.direct_conv_grad.padded_floats` of
    ``batch.samples``; ``acc``: ``batch.weights * width`` floats), calling the two
    shared kernels of :func:`weight_grad_kernels`. Eager entries and compiled plans
    call it, so a plan emits none of the loop."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    needs = weight_grad_kernels(batch, vector_bits)
    types = [PTR, PTR, PTR, I64, PTR, PTR]

    def build(own: ir.Module, name: str) -> ir.Function:
        fn = kernel_function(own, name, types, vector_bits)
        x, grad, out, count, padded, acc = fn.args
        e = KernelBuilder(ir.IRBuilder(fn.append_basic_block("entry")))
        emit_weight_grad_loop(e, own, batch, vector_bits, x, grad, out, count, padded, acc)
        e.b.ret_void()
        return fn

    return SharedKernel(
        "ember_direct_dw_loop",
        ("direct_weight_grad_loop", batch, vector_bits),
        ir.FunctionType(ir.VoidType(), types),
        build,
        needs,
    )


def emit_direct_weight_grad(
    e: KernelBuilder,
    module: ir.Module,
    prefix: str,
    batch: DirectWeightBatch,
    vector_bits: int | None,
    x: ir.Value,
    grad: ir.Value,
    out: ir.Value,
    count: ir.Value,
) -> None:
    """``out`` ``[c_out, c_in / groups, *kernel]`` = the weight gradient of ``count``
    (an ``i64``, at least 1) samples of ``x`` ``[n, c_in, *spatial]`` and ``grad``
    ``[n, c_out, *out]``: a call of the shared loop (:func:`weight_grad_loop`) with
    ``module``'s own buffers (internal module globals named from ``prefix``)."""
    conv = batch.conv
    padded = module_buffer(e.b, module, f"{prefix}_dw_padded", padded_floats(conv, batch.samples))
    acc = module_buffer(e.b, module, f"{prefix}_dw_acc", batch.weights * conv.width)
    e.b.call(weight_grad_loop(batch, vector_bits).declare(module), [x, grad, out, count, padded, acc])


def emit_weight_grad_loop(
    e: KernelBuilder,
    module: ir.Module,
    batch: DirectWeightBatch,
    vector_bits: int | None,
    x: ir.Value,
    grad: ir.Value,
    out: ir.Value,
    count: ir.Value,
    padded: ir.Value,
    acc: ir.Value,
) -> None:
    """The loop of :func:`weight_grad_loop`: per group, chunks of at most
    ``batch.samples`` samples' padded inputs copied into ``padded``, the shared kernel
    adding each chunk into lane-wise accumulators ``acc``, and the shared lane sums
    into ``out``."""
    b = e.b
    conv = batch.conv
    kernel, sums = (shared.declare(module) for shared in weight_grad_kernels(batch, vector_bits))
    plane, positions = size_of(batch.spatial), size_of(conv.out)
    per_x = conv.channels * conv.plane
    step = ir.Constant(I64, batch.samples)
    chunks = b.udiv(b.add(count, ir.Constant(I64, batch.samples - 1)), step)

    def over_chunks(g: int) -> Callable[[ir.Value, list], list]:
        def chunk(k: ir.Value, _: list) -> list:
            first = b.mul(k, step)
            left = b.sub(count, first)
            samples = b.select(b.icmp_signed("<", left, step), left, step)

            def sample(s: ir.Value, _: list) -> list:
                i = b.add(first, s)
                x_base = b.mul(
                    b.add(b.mul(i, ir.Constant(I64, batch.c_in)), ir.Constant(I64, g * conv.channels)),
                    ir.Constant(I64, plane),
                )
                dst = e.at(padded, b.mul(s, ir.Constant(I64, per_x)), _F32)
                pad_input(e, conv.channels, batch.spatial, conv.padded, batch.pad, x, x_base, dst, _F32)
                return []

            e.loops.count(samples, sample)
            dy = b.mul(
                b.add(b.mul(first, ir.Constant(I64, batch.c_out)), ir.Constant(I64, g * conv.outputs)),
                ir.Constant(I64, positions),
            )
            b.call(kernel, [padded, e.at(grad, dy, _F32), acc, samples])
            return []

        return chunk

    for g in range(batch.groups):
        e.fill(acc, ir.Constant(I64, 0), batch.weights * conv.width, const(_F32, 0.0), _F32)
        e.loops.count(chunks, over_chunks(g))
        b.call(sums, [acc, e.at(out, ir.Constant(I64, g * batch.weights), _F32)])


__all__ = [
    "DirectWeightBatch",
    "direct_weight_batch",
    "emit_direct_weight_grad",
    "emit_weight_grad_loop",
    "weight_grad_kernels",
    "weight_grad_loop",
]

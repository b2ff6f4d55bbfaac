"""A batch of stride-1 float32 convolutions by the direct kernel (:mod:`.direct_conv`):
per sample and group, the input copied zero-padded into a module buffer, then the
kernel straight into the sample's output. flex's eager convolutions
(:mod:`ember.backend.flex.native_direct`) and fusion's plans
(:mod:`ember.backend.fusion.llvm.direct`) call this loop as one shared kernel
(:func:`batch_loop`: the number of samples read at run time), so eager and compiled
code convolve with the same code and a plan compiles none of it; a plan that fuses work
after each sample (a convolution chain's ReLU and pooling) emits the loop itself
around the shared kernel. Digits' training plan: 210 -> 160 ms of LLVM time on a cold
cache (its input gradient's loop), CPU.

Where it runs (:func:`enabled`): ``EMBER_GEMM=ember`` always, ``blas`` never, ``auto``
(the default) on hosts with 512-bit vectors, for convolutions whose windows are small
(:meth:`.direct_conv.DirectConv.fits`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.direct_conv import DirectConv, direct_conv_kernel
from ember.backend.kernel.llvm.mathlib import I64, const, kernel_function
from ember.backend.kernel.views import contiguous_strides, size_of

if TYPE_CHECKING:
    from ember.backend.kernel.llvm.shared import SharedKernel

#: Environment variable: ``auto`` (default), ``blas`` or ``ember``: which products and
#: convolutions compiled code runs (see :mod:`ember.backend.fusion.llvm.sgemm`).
GEMM_ENV = "EMBER_GEMM"


def gemm_setting() -> str:
    """``EMBER_GEMM``, checked: ``auto``, ``blas`` or ``ember``."""
    choice = os.environ.get(GEMM_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "blas", "ember"):
        from ember.errors import ConfigError

        raise ConfigError(f"ember: {GEMM_ENV}={choice!r} is not one of auto, blas, ember; unset it for auto")
    return choice


def enabled() -> bool:
    """Whether small-window stride-1 float32 convolutions run the direct kernel:
    with ``EMBER_GEMM=ember``; never with ``blas``; under ``auto`` where the host has
    512-bit vectors (where it beat im2col and OpenBLAS's products, AVX-512 kernels
    included, on a small CNN's layers)."""
    choice = gemm_setting()
    if choice != "auto":
        return choice == "ember"
    return jit.vector_width() == 512


@dataclass(frozen=True)
class DirectBatch:
    """``n`` samples of ``c_in`` channels (``groups`` groups) over ``spatial``, padded
    by ``pad`` before each dim, convolved per group by ``conv``."""

    n: int
    c_in: int
    groups: int
    spatial: tuple[int, ...]
    pad: tuple[int, ...]
    conv: DirectConv

    @property
    def c_out(self) -> int:
        return self.groups * self.conv.outputs


def direct_batch(
    n: int,
    c_in: int,
    c_out: int,
    groups: int,
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    vector_bits: int,
) -> DirectBatch | None:
    """The batch's geometry where the direct kernel takes it (stride 1 is the caller's
    to check; non-negative leading padding; small windows), else ``None``."""
    if any(p < 0 for p in pad) or c_in % groups or c_out % groups:
        return None
    conv = DirectConv(c_in // groups, c_out // groups, kernel, dilation, out, 16 if vector_bits == 512 else 8)
    return DirectBatch(n, c_in, groups, spatial, pad, conv) if conv.fits() else None


def pad_input(
    e: KernelBuilder,
    channels: int,
    spatial: tuple[int, ...],
    padded: tuple[int, ...],
    pad: tuple[int, ...],
    x: ir.Value,
    x_base: ir.Value,
    dst: ir.Value,
    dtype: np.dtype,
) -> None:
    """``dst[c, *p] = x[x_base + (c, p - pad)]`` over the ``padded`` extent (0 outside
    ``x``), for ``channels`` channels of extent ``spatial``."""
    b = e.b
    plane, p_plane = size_of(spatial), size_of(padded)
    e.fill(dst, ir.Constant(I64, 0), channels * p_plane, const(dtype, 0.0), dtype)
    s_strides, p_strides = contiguous_strides(spatial), contiguous_strides(padded)
    # The input extent that lands inside the padded extent, per dim.
    extent = tuple(min(s, p - lo) for s, p, lo in zip(spatial, padded, pad))
    if any(m <= 0 for m in extent):
        return
    rank = len(spatial)

    def rows(pos: list[ir.Value]) -> None:
        channel, lead = pos[0], pos[1:]
        src = b.add(b.add(x_base, b.mul(channel, ir.Constant(I64, plane))), e.linear(lead, s_strides))
        at = b.add(
            b.mul(channel, ir.Constant(I64, p_plane)),
            e.linear([b.add(i, ir.Constant(I64, pad[d])) for d, i in enumerate(lead)], p_strides),
        )
        at = b.add(at, ir.Constant(I64, pad[rank - 1]))
        e.span(0, extent[-1], lambda i: e.store(e.load(x, b.add(src, i), dtype), dst, b.add(at, i), dtype))

    e.loops.nest([channels, *extent[:-1]], rows)


def module_buffer(b: ir.IRBuilder, module: ir.Module, name: str, floats: int, reuse: bool = False) -> ir.Value:
    """A zeroed, 64-byte aligned internal module global of ``floats`` floats (its first
    float): the direct kernels' padded inputs and accumulators, as ember's product packs.
    A new one per call; with ``reuse``, the one named ``name``, made on first use (a
    buffer the module's steps share)."""
    buffer = module.globals.get(name) if reuse else None
    if buffer is None:
        array = ir.ArrayType(ir.FloatType(), floats)
        buffer = ir.GlobalVariable(module, array, name=name if reuse else module.get_unique_name(name))
        buffer.linkage = "internal"
        buffer.align = 64
        buffer.initializer = ir.Constant(array, None)
    return b.gep(buffer, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)


def emit_direct_batch(
    e: KernelBuilder,
    module: ir.Module,
    prefix: str,
    batch: DirectBatch,
    vector_bits: int | None,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value | None,
    block: Callable[[ir.Value], ir.Value] | None = None,
    epilogue: Callable[[ir.Value, ir.Value], None] | None = None,
    count: ir.Value | None = None,
    padded: ir.Value | None = None,
) -> None:
    """``out = conv(x, w) + bias`` over the batch: per sample and group, the
    zero-padded input (``padded``, where given; else a module global, internal),
    then the kernel straight into the
    sample's block; then, unless ``epilogue`` is given, the bias added to the sample's
    block while it is in cache (the kernel itself takes no bias, so that every module
    convolving a layer calls the same shared kernel). A caller that fuses
    work after each sample passes ``block(i)`` (where sample ``i``'s output goes,
    instead of its place in ``out``) and ``epilogue(i, block)``, run after the sample.
    ``count`` (an ``i64``), where given, is the number of samples at run time instead
    of ``batch.n``: one kernel for every batch size."""
    b = e.b
    conv = batch.conv
    f32 = np.dtype(np.float32)
    if padded is None:
        padded = module_buffer(b, module, f"{prefix}_direct_padded", conv.padded_floats)
    with_bias = bias is not None and epilogue is None
    kernel = direct_conv_kernel(conv, vector_bits).declare(module)
    plane, positions = size_of(batch.spatial), size_of(conv.out)
    null = ir.Constant(ir.PointerType(), None)

    def add_bias(dst: ir.Value) -> None:
        def channel(o: ir.Value, _: list) -> list:
            row = b.mul(o, ir.Constant(I64, positions))
            value = e.load(bias, o, f32)
            e.span(
                0, positions, lambda p: e.store(b.fadd(e.load(dst, b.add(row, p), f32), value), dst, b.add(row, p), f32)
            )
            return []

        e.loops.run(batch.c_out, channel)

    cg, og, window = conv.channels, conv.outputs, conv.window

    def sample(i: ir.Value, _: list) -> list:
        dst = block(i) if block is not None else e.at(out, b.mul(i, ir.Constant(I64, batch.c_out * positions)), f32)
        for g in range(batch.groups):
            x_base = b.mul(
                b.add(b.mul(i, ir.Constant(I64, batch.c_in)), ir.Constant(I64, g * cg)), ir.Constant(I64, plane)
            )
            pad_input(e, cg, batch.spatial, conv.padded, batch.pad, x, x_base, padded, f32)
            weights = e.at(w, ir.Constant(I64, g * og * window), f32)
            b.call(kernel, [padded, weights, e.at(dst, ir.Constant(I64, g * og * positions), f32), null])
        if epilogue is not None:
            epilogue(i, dst)
        elif with_bias:
            add_bias(dst)
        return []

    if count is None:
        e.loops.run(batch.n, sample)
    else:
        e.loops.count(count, sample)


def batch_loop(batch: DirectBatch, vector_bits: int | None, with_bias: bool) -> SharedKernel:
    """The batch loop of a convolution with no fused epilogue as a shared kernel
    ``loop(x, w, bias, out, count, padded)``: :func:`emit_direct_batch` over ``count``
    samples (an ``i64``) with the caller's ``padded`` buffer
    (:attr:`.DirectConv.padded_floats` floats; ``bias`` unread without ``with_bias``).
    flex's eager convolutions and compiled plans' plain ones (a training step's input
    gradients) call it, so a plan emits none of the loop. Its recipe holds the geometry
    without the batch size (the count is read at run time)."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    batch = replace(batch, n=1)
    ptr = ir.PointerType()
    types = [ptr, ptr, ptr, ptr, I64, ptr]

    def build(own: ir.Module, name: str) -> ir.Function:
        fn = kernel_function(own, name, types, vector_bits)
        x, w, bias, out, count, padded = fn.args
        e = KernelBuilder(ir.IRBuilder(fn.append_basic_block("entry")))
        emit_direct_batch(
            e, own, name, batch, vector_bits, x, w, bias if with_bias else None, out, count=count, padded=padded
        )
        e.b.ret_void()
        return fn

    return SharedKernel(
        "ember_direct_conv_loop",
        ("direct_batch_loop", batch, vector_bits, with_bias),
        ir.FunctionType(ir.VoidType(), types),
        build,
        (direct_conv_kernel(batch.conv, vector_bits),),
    )


def emit_batch_loop_call(
    e: KernelBuilder,
    module: ir.Module,
    prefix: str,
    batch: DirectBatch,
    vector_bits: int | None,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value,
    count: ir.Value,
) -> None:
    """``out = conv(x, w) + bias`` over ``count`` samples as one call of the shared
    loop (:func:`batch_loop`), with ``module``'s own padded buffer (an internal module
    global named from ``prefix``)."""
    padded = module_buffer(e.b, module, f"{prefix}_direct_padded", batch.conv.padded_floats)
    loop = batch_loop(batch, vector_bits, bias is not None).declare(module)
    null = ir.Constant(ir.PointerType(), None)
    e.b.call(loop, [x, w, null if bias is None else bias, out, count, padded])


__all__ = [
    "GEMM_ENV",
    "DirectBatch",
    "batch_loop",
    "direct_batch",
    "emit_batch_loop_call",
    "emit_direct_batch",
    "enabled",
    "gemm_setting",
    "module_buffer",
    "pad_input",
]

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

from ember.backend.fusion.llvm.columns import _pad_input
from ember.backend.fusion.llvm.emitter import Emitter
from ember.backend.kernel.llvm.direct_conv import DirectConv, direct_conv_function
from ember.backend.kernel.llvm.mathlib import I64
from ember.backend.kernel.views import size_of

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.conv import _Conv


def direct_geometry(e: Emitter, c: _Conv, dtype: np.dtype) -> DirectConv | None:
    """The direct kernel's geometry where it runs ``c`` (a float32 convolution of
    stride 1 and small windows, in a plan that runs direct convolutions), else ``None``."""
    if dtype != np.dtype(np.float32) or not e.module.direct_convs or any(s != 1 for s in c.stride):
        return None
    conv = DirectConv(c.cg, c.og, c.kernel, c.dilation, c.out, 16 if e.module.vector_width == 512 else 8)
    return conv if conv.fits() else None


def direct_core(
    e: Emitter,
    c: _Conv,
    direct: DirectConv,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value | None,
    block: Callable[[ir.Value], ir.Value] | None,
    epilogue: Callable[[ir.Value, ir.Value], None] | None,
) -> None:
    """:func:`conv_core` by the direct kernel (:mod:`ember.backend.kernel.llvm.direct_conv`):
    per sample and group, the zero-padded input, then the kernel straight into the
    sample's block (adding the bias unless a chain's epilogue adds it). The padded
    input is a module global, as the packs of ember's product are."""
    b, module = e.b, e.module.module
    f32 = np.dtype(np.float32)
    array = ir.ArrayType(ir.FloatType(), direct.padded_floats)
    buffer = ir.GlobalVariable(module, array, name=module.get_unique_name(f"{e.module.prefix}_direct_padded"))
    buffer.linkage = "internal"
    buffer.align = 64
    buffer.initializer = ir.Constant(array, None)
    padded = b.gep(buffer, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)
    with_bias = bias is not None and epilogue is None
    kernel = direct_conv_function(
        module, module.get_unique_name(f"{e.module.prefix}_direct"), direct, e.module.vector_width, with_bias
    )
    plane, positions = size_of(c.spatial), c.positions
    null = ir.Constant(ir.PointerType(), None)

    def sample(i: ir.Value, _: list) -> list:
        dst = block(i) if block is not None else e.at(out, b.mul(i, ir.Constant(I64, c.c_out * positions)), f32)
        for g in range(c.groups):
            x_base = b.mul(
                b.add(b.mul(i, ir.Constant(I64, c.c_in)), ir.Constant(I64, g * c.cg)), ir.Constant(I64, plane)
            )
            _pad_input(e, c, x, x_base, padded, f32)
            group_bias = e.at(bias, ir.Constant(I64, g * c.og), f32) if with_bias else null
            weights = e.at(w, ir.Constant(I64, g * c.og * c.ck), f32)
            b.call(kernel, [padded, weights, e.at(dst, ir.Constant(I64, g * c.og * positions), f32), group_bias])
        if epilogue is not None:
            epilogue(i, dst)
        return []

    e.loops.run(c.n, sample)


__all__ = ["direct_core", "direct_geometry"]

"""Convolution as a GEMM whose B operand is im2col computed in the load stage.

For image ``n`` and group ``g`` the output is ``W[g] @ cols[n, g]`` with ``W[g]`` the
group's weights ``[C_out / G, C_in / G * K]`` and ``cols`` the ``[C_in / G * K, P]``
windows of the input (``K`` kernel positions, ``P`` output positions). Instead of
writing ``cols`` to memory and reading it back, the register-blocked matmul
(:mod:`.gemm_small`) gathers each element from the input when it loads it: per
invocation the output positions of its four columns are decoded once, and per K step
the channel and kernel offsets advance by carries, so the loop has no division. The
bias is the matmul's epilogue. This serves every conv the register kernel suits
(:func:`.matmul.choose`: all of them on a CPU adapter; small channel counts on a GPU)
with up to :data:`MAX_FUSED_RANK` spatial dims; the others materialise ``cols``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, coalesce
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import gemm_common as gc
from ember.backend.cube.kernels import gemm_small, layout
from ember.backend.cube.kernels import matmul as mm

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

MAX_FUSED_RANK = 3
#: Geometry tables after the epilogue's scalars: input size, output size, kernel,
#: stride, leading padding, dilation and input stride per spatial dim, then the
#: input's channel stride and the kernel's size.
_TABLES = 7


class Im2col:
    """The :class:`.gemm_small.GatherB` of a conv with ``rank`` spatial dims over input
    ``in1`` of ``storage``, its geometry at ``info[geo..]``."""

    def __init__(self, rank: int, storage: Storage, geo: int) -> None:
        self.rank, self.storage, self.geo = rank, storage, geo

    def _at(self, table: int, d: int) -> str:
        return f"bitcast<i32>(info[{self.geo + table * self.rank + d}u])"

    def setup(self) -> list[str]:
        s = self.rank
        lines = []
        for d in range(s):
            names = ("in", "out", "ker", "str", "pad", "dil", "xs")
            lines.append("    " + " ".join(f"let g_{name}{d} = {self._at(t, d)};" for t, name in enumerate(names)))
        tail = self.geo + _TABLES * s
        lines.append(f"    let g_xc = bitcast<i32>(info[{tail}u]);")
        # Each column's output position, decoded once: the window's first input position.
        for j in range(4):
            lines.append(f"    var p{j} = i32(min(c + {j}u, n - 1u));")
            for d in reversed(range(s)):
                lines.append(f"    let ib{j}_{d} = (p{j} % g_out{d}) * g_str{d} - g_pad{d}; p{j} = p{j} / g_out{d};")
        # The K position as (channel, kernel offsets), advanced by carries.
        lines.append("    var g_ci = 0;")
        lines += [f"    var g_k{d} = 0;" for d in range(s)]
        return lines

    def step(self, t: int) -> tuple[list[str], str]:
        s = self.rank
        lines = [f"        let xo{t} = base1 + g_ci * g_xc;"]
        lines += [f"        let off{t}_{d} = g_k{d} * g_dil{d};" for d in range(s)]
        values = []
        zero = wgsl.ZERO[self.storage.compute]
        for j in range(4):
            pos = [f"(ib{j}_{d} + off{t}_{d})" for d in range(s)]
            inside = " && ".join(f"u32({p}) < u32(g_in{d})" for d, p in enumerate(pos))
            addr = " + ".join([f"xo{t}"] + [f"{p} * g_xs{d}" for d, p in enumerate(pos)])
            lines.append(f"        let in{t}_{j} = {inside};")
            load = wgsl.load(self.storage, "in1", f"u32(select(0, {addr}, in{t}_{j}))")
            lines.append(f"        let bx{t}_{j} = select({zero}, {load}, in{t}_{j});")
            values.append(f"bx{t}_{j}")
        lines += self._carry()
        return lines, f"vec4<{self.storage.compute}>({', '.join(values)})"

    def _carry(self) -> list[str]:
        """The next K position: the last kernel dim fastest, then the channel."""
        s = self.rank
        lines = [f"        g_k{s - 1} += 1;"]
        for d in reversed(range(s)):
            lines.append(f"        let w{d} = g_k{d} == g_ker{d}; g_k{d} = select(g_k{d}, 0, w{d});")
            lines.append(f"        {'g_k' + str(d - 1) if d else 'g_ci'} += select(0, 1, w{d});")
        return ["        {"] + ["    " + x for x in lines] + ["        }"]

    def advance(self, step: int) -> list[str]:
        return []


def conv(
    backend: KernelContext,
    x: CubeTensor,
    weight: CubeTensor,
    bias: CubeTensor | None,
    stride,
    padding,
    dilation,
    groups: int,
) -> CubeTensor | None:
    """The conv by the fused kernel, or None where it does not apply (the caller then
    materialises the columns)."""
    spatial = tuple(x.shape[2:])
    s = len(spatial)
    ctype = x.storage.compute
    if not 1 <= s <= MAX_FUSED_RANK or ctype not in ("f32", "i32") or weight.storage != x.storage:
        return None
    n_img = x.shape[0]
    c_out, cg = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    k_total = math.prod(kernel)
    out_sp = tuple(
        (size + lo + hi - d * (k - 1) - 1) // st + 1
        for size, k, st, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation)
    )
    cog = c_out // groups
    m, kdim, p = cog, cg * k_total, math.prod(out_sp)
    plan = mm.choose(m, p, kdim, n_img * groups, backend.runtime.cpu)
    if not isinstance(plan, gemm_small.Blocking) or n_img * c_out * p == 0 or kdim == 0:
        return None
    out = backend.empty((n_img, c_out) + out_sp, x.storage)
    w = layout.contiguous(backend, weight)
    # Batches (image, group): weights step per group, the input per image and group.
    batch_shape = (n_img, groups)
    w_b = (0, cog * kdim)
    x_b = (x.strides[0], cg * x.strides[1])
    extra: tuple[CubeTensor, ...] = ()
    e_b: list[tuple[int, int]] = []
    e_rows: list[int] = []
    if bias is not None:
        extra = (bias,)
        e_b = [(0, cog * bias.strides[0])]
        e_rows = [bias.strides[0]]
    cshape, cstrides = coalesce(batch_shape, w_b, x_b, *e_b)
    a_mode = gc.operand_mode(w.storage, m, kdim, kdim, 1, w.offset, cstrides[0], 4)
    out_vec = gc.vectorisable(out.storage) and p % 4 == 0
    spec = None
    if bias is not None:
        from ember.backend.cube import ir
        from ember.backend.ops import BinaryOp

        spec = gc.EpilogueSpec(
            ir.binary(BinaryOp.ADD, ir.load(0, ctype), ir.load(1, bias.storage.compute)), (bias.storage,), ()
        )
    n_ops = 2 + len(extra)
    gather = Im2col(s, x.storage, gc.scalars_at(n_ops))
    key = ("conv_im2col_regs", plan, s, w.storage, a_mode, x.storage, out.storage, out_vec, spec)
    kernel_ = backend.cache.get(
        key,
        lambda: gemm_small.source(plan, w.storage, a_mode, x.storage, "g", out.storage, out_vec, ctype, spec, gather),
    )
    blocks = [(w.offset, kdim, 1, cstrides[0]), (x.offset, 0, 0, cstrides[1])]
    blocks += [(b.offset, r, 0, cs) for b, r, cs in zip(extra, e_rows, cstrides[2:])]
    pad_lo = [lo for lo, _ in padding]
    tables = [spatial, out_sp, kernel, stride, pad_lo, dilation, x.strides[2:]]
    tail = [v & 0xFFFF_FFFF for table in tables for v in table] + [x.strides[1] & 0xFFFF_FFFF, k_total]
    tiles = (mm.ceil_div(mm.ceil_div(p, 4), plan.wx), mm.ceil_div(mm.ceil_div(m, plan.tm), plan.wy))
    buffers = [w.buffer, x.buffer] + [b.buffer for b in extra] + [out.buffer]
    mm.launch(backend, kernel_, tiles, (m, p, kdim), cshape, blocks, n_img * groups, buffers, tail)
    return out

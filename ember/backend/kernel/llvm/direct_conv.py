"""A direct float32 convolution of stride 1 (no column buffer): for layers whose
windows are small (few input channels times kernel positions), where im2col's copy
and the product's packing cost more than the product.

The input of one sample (and group) is first copied, zero-padded, into ``padded``
(``[c, *padded extent]``, :attr:`DirectConv.padded`). Output position ``o`` then reads
``padded[c, o + k * dilation]``, at flat offset ``q(o) + off(c, k)`` where ``q(o)`` is
``o``'s flat index in the *padded* grid: every (channel, kernel position) is one
dense, shifted run of ``padded``. The kernel computes the output over the *virtual*
positions ``q`` in ``[0, out[0] * padded row size)`` (a position past the output's
last columns wraps into the next row: computed and thrown away), with a register tile
of ``rows`` output channels (a broadcast weight each) by ``vectors`` vectors of
consecutive virtual positions; each (channel, kernel position) is ``vectors``
unaligned loads, ``rows`` broadcasts and ``rows * vectors`` fused multiply-adds. Each
vector is stored straight into the dense output ``[c_out, *out]`` by one masked store
per run of real positions it holds (:func:`segments`: a constant table of lane masks
and shifts), so no position thrown away is written and there is no compaction pass.

The sums run over channels, then kernel positions, in order, with fused
multiply-adds: results agree with im2col and ``?gemm`` to float32 rounding, not bit
for bit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import F32, I64
from ember.backend.kernel.views import contiguous_strides, size_of

if TYPE_CHECKING:
    from ember.backend.kernel.llvm.shared import SharedKernel

PTR = ir.PointerType()

#: The most values per window (input channels per group times kernel positions) a
#: direct convolution takes: wider windows reuse each input value enough for the
#: packed product to win (and ResNet's 3x3 layers, 576 and wider, stay on it).
MAX_WINDOW = 512
#: The most bytes of one sample's padded input and output together (they should stay
#: in the core's second-level cache).
MAX_BYTES = 512 << 10


@dataclass(frozen=True)
class DirectConv:
    """One sample's (and group's) stride-1 convolution: ``channels`` inputs,
    ``outputs`` outputs, its ``kernel``, ``dilation`` and output extent ``out``;
    ``width`` floats per vector (16 with AVX-512, else 8)."""

    channels: int
    outputs: int
    kernel: tuple[int, ...]
    dilation: tuple[int, ...]
    out: tuple[int, ...]
    width: int

    @property
    def padded(self) -> tuple[int, ...]:
        """The padded input's extent: as far as the windows reach."""
        return tuple(o + d * (k - 1) for o, d, k in zip(self.out, self.dilation, self.kernel))

    @property
    def plane(self) -> int:
        return size_of(self.padded)

    @property
    def window(self) -> int:
        return self.channels * size_of(self.kernel)

    @property
    def virtual(self) -> int:
        """Virtual positions: the output's first dim times the padded grid's rest."""
        return self.out[0] * size_of(self.padded[1:])

    @property
    def vectors(self) -> int:
        return -(-self.virtual // self.width)

    @property
    def rows(self) -> int:
        """Output channels per register tile (a broadcast each)."""
        return 8 if self.width == 16 else 4

    @property
    def tile_vectors(self) -> int:
        return 3

    @property
    def padded_floats(self) -> int:
        """Floats of the padded input buffer (a vector of slack: the last virtual
        vector's loads run past the plane by at most a vector)."""
        return self.channels * self.plane + self.width

    @property
    def output_floats(self) -> int:
        return self.outputs * size_of(self.out)

    def offsets(self) -> list[int]:
        """Each kernel position's flat offset in a padded plane, in kernel order."""
        strides = contiguous_strides(self.padded)
        return [
            sum(k * d * s for k, d, s in zip(position, self.dilation, strides))
            for position in itertools.product(*(range(k) for k in self.kernel))
        ]

    def fits(self) -> bool:
        """Whether the direct kernel should run this convolution (see :data:`MAX_WINDOW`)."""
        nbytes = 4 * (self.padded_floats + self.output_floats)
        return size_of(self.kernel) > 1 and self.window <= MAX_WINDOW and nbytes <= MAX_BYTES


def segments(conv: DirectConv) -> list[list[tuple[int, int]]]:
    """Per vector of virtual positions, the runs of its real positions:
    ``(lane mask, shift)``, lane ``l`` of vector ``j`` (virtual position ``q = j * width
    + l``) going to dense position ``q + shift``."""
    padded_strides = contiguous_strides(conv.padded)
    out_strides = contiguous_strides(conv.out)
    out: list[list[tuple[int, int]]] = []
    for j in range(conv.vectors):
        runs: dict[int, int] = {}
        for lane in range(conv.width):
            q = j * conv.width + lane
            if q >= conv.virtual:
                continue
            coords, rest = [], q
            for stride in padded_strides:
                coords.append(rest // stride)
                rest %= stride
            if any(p >= o for p, o in zip(coords[1:], conv.out[1:])):
                continue
            shift = sum(p * s for p, s in zip(coords, out_strides)) - q
            runs[shift] = runs.get(shift, 0) | (1 << lane)
        out.append([(mask, shift) for shift, mask in runs.items()])
    return out


def direct_conv_function(
    module: ir.Module, name: str, conv: DirectConv, vector_bits: int | None, with_bias: bool = False
) -> ir.Function:
    """``name(padded, weight, out, bias)``: the convolution of one padded sample
    (``[channels, *padded]``) with ``weight`` (``[outputs, channels, *kernel]``, dense)
    into ``out`` (``[outputs, *out]``, dense), plus ``bias`` (``[outputs]``; read only
    ``with_bias``); see the module docstring. Each vector of virtual positions is stored by
    masked stores, one per run of real positions (:func:`segments`), so the positions
    past each row's end are never written."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, PTR]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    if vector_bits:
        set.add(fn.attributes, f'"prefer-vector-width"="{vector_bits}"')
    padded, weight, dense, bias = fn.args
    for arg in fn.args:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loops = Loops(b)
    w = conv.width
    vec = ir.VectorType(F32, w)
    fma_name = f"llvm.fma.v{w}f32"
    fma = module.globals.get(fma_name) or ir.Function(module, ir.FunctionType(vec, [vec] * 3), name=fma_name)
    mask_type = ir.VectorType(ir.IntType(1), w)
    store_name = f"llvm.masked.store.v{w}f32.p0"
    masked_store = module.globals.get(store_name) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [vec, PTR, ir.IntType(32), mask_type]), name=store_name
    )
    zero = ir.Constant(vec, [0.0] * w)
    undef = ir.Constant(vec, ir.Undefined)
    splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w)
    offsets = conv.offsets()
    positions = len(offsets)
    plane = size_of(conv.out)
    runs = segments(conv)
    per_vector = max(len(r) for r in runs)
    masks_type = ir.ArrayType(ir.IntType(32), conv.vectors * per_vector)
    shifts_type = ir.ArrayType(I64, conv.vectors * per_vector)
    masks = ir.GlobalVariable(module, masks_type, name=f"{name}_masks")
    shifts = ir.GlobalVariable(module, shifts_type, name=f"{name}_shifts")
    for table, typ, values in (
        (
            masks,
            masks_type,
            [m - (1 << 32) * (m >= 1 << 31) for r in runs for m, _ in r + [(0, 0)] * (per_vector - len(r))],
        ),
        (shifts, shifts_type, [s for r in runs for _, s in r + [(0, 0)] * (per_vector - len(r))]),
    ):
        table.linkage = "internal"
        table.global_constant = True
        table.initializer = ir.Constant(typ, values)

    def at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        if isinstance(index, int):
            index = ir.Constant(I64, index)
        return b.gep(ptr, [index], source_etype=F32)

    # The kernel positions run as a loop over the leading kernel dims (their offsets
    # in a table) around the last dim's positions, unrolled: a 3x3 window's tile is a
    # third of the code it would be fully unrolled, and compiles that much faster.
    last, last_step = conv.kernel[-1], conv.dilation[-1]
    leads = positions // last
    lead_offsets = ir.GlobalVariable(module, ir.ArrayType(I64, leads), name=f"{name}_leads")
    lead_offsets.linkage = "internal"
    lead_offsets.global_constant = True
    lead_offsets.initializer = ir.Constant(ir.ArrayType(I64, leads), offsets[::last])

    tiles: dict[tuple[int, int], ir.Function] = {}

    def tile_function(rows: int, vectors: int) -> ir.Function:
        """``tile(x, w, out, first, bias)``: ``rows`` output channels (weights from ``w``,
        bias from ``bias`` if ``with_bias``) at ``vectors`` vectors of virtual positions from
        vector ``first`` (the padded input from ``x``, the result to ``out``, their
        channels' dense planes). Its own function, so that the optimizer does not hoist
        a small window's broadcasts out of the loop over positions (they would spill)."""
        if (rows, vectors) in tiles:
            return tiles[rows, vectors]
        tile = ir.Function(
            module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, PTR]), name=f"{name}_tile{rows}x{vectors}"
        )
        tile.linkage = "internal"
        tile.attributes.add("nounwind")
        tile.attributes.add("noinline")
        if vector_bits:
            set.add(tile.attributes, f'"prefer-vector-width"="{vector_bits}"')
        x_block, w_block, out_block, first, bias_block = tile.args
        for arg in (x_block, w_block, out_block, bias_block):
            arg.add_attribute("noalias")
        t = ir.IRBuilder(tile.append_basic_block("entry"))

        def positions_of(x_lead: ir.Value, w_lead: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            """The last kernel dim's positions (unrolled) from ``x_lead``/``w_lead``."""
            accs = list(accs)
            for k in range(last):
                xs = [t.load(at(t, x_lead, k * last_step + v * w), typ=vec, align=4) for v in range(vectors)]
                for r in range(rows):
                    scalar = t.load(at(t, w_lead, r * conv.window + k), typ=F32, align=4)
                    splat = t.shuffle_vector(
                        t.insert_element(undef, scalar, ir.Constant(ir.IntType(32), 0)), undef, splat_mask
                    )
                    for v in range(vectors):
                        accs[r * vectors + v] = t.call(fma, [splat, xs[v], accs[r * vectors + v]])
            return accs

        def channel(c: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            x_c = at(t, x_block, t.mul(c, ir.Constant(I64, conv.plane)))
            w_c = at(t, w_block, t.mul(c, ir.Constant(I64, positions)))
            if leads == 1:
                return positions_of(x_c, w_c, accs)

            def lead(i: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                off = t.load(t.gep(lead_offsets, [ir.Constant(I64, 0), i]), typ=I64, align=8)
                return positions_of(at(t, x_c, off), at(t, w_c, t.mul(i, ir.Constant(I64, last))), accs)

            return Loops(t).run(leads, lead, accs)

        accs = Loops(t).run(conv.channels, channel, [zero] * (rows * vectors))
        merged = list(accs)
        if with_bias:
            for r in range(rows):
                scalar = t.load(at(t, bias_block, r), typ=F32, align=4)
                splat = t.shuffle_vector(
                    t.insert_element(undef, scalar, ir.Constant(ir.IntType(32), 0)), undef, splat_mask
                )
                for v in range(vectors):
                    merged[r * vectors + v] = t.fadd(accs[r * vectors + v], splat)
        for v in range(vectors):
            j = t.add(first, ir.Constant(I64, v))
            for s in range(per_vector):
                slot = t.add(t.mul(j, ir.Constant(I64, per_vector)), ir.Constant(I64, s))
                bits = t.load(t.gep(masks, [ir.Constant(I64, 0), slot]), typ=ir.IntType(32), align=4)
                mask = t.bitcast(t.trunc(bits, ir.IntType(w)), mask_type)
                shift = t.load(t.gep(shifts, [ir.Constant(I64, 0), slot]), typ=I64, align=8)
                start = t.add(t.mul(j, ir.Constant(I64, w)), shift)
                for r in range(rows):
                    target = at(t, out_block, t.add(start, ir.Constant(I64, r * plane)))
                    t.call(masked_store, [merged[r * vectors + v], target, ir.Constant(ir.IntType(32), 4), mask])
        t.ret_void()
        tiles[rows, vectors] = tile
        return tile

    def tile(first_out: ir.Value, j: ir.Value, rows: int, vectors: int) -> None:
        """Output channels ``first_out + [0, rows)`` at ``vectors`` vectors from vector ``j``."""
        w_block = at(b, weight, b.mul(first_out, ir.Constant(I64, conv.window)))
        out_block = at(b, dense, b.mul(first_out, ir.Constant(I64, plane)))
        bias_block = at(b, bias, first_out) if with_bias else bias
        x_block = at(b, padded, b.mul(j, ir.Constant(I64, w)))
        b.call(tile_function(rows, vectors), [x_block, w_block, out_block, j, bias_block])

    def over_positions(first_out: ir.Value, rows: int) -> None:
        per_tile = conv.tile_vectors
        full, rest = divmod(conv.vectors, per_tile)
        if full:
            step = ir.Constant(I64, per_tile)

            def over_tiles(t: ir.Value, _: list) -> list:
                tile(first_out, b.mul(t, step), rows, per_tile)
                return []

            loops.run(full, over_tiles)
        if rest:
            tile(first_out, ir.Constant(I64, full * per_tile), rows, rest)

    full_blocks, rest_rows = divmod(conv.outputs, conv.rows)
    if full_blocks:
        step = ir.Constant(I64, conv.rows)

        def over_blocks(o: ir.Value, _: list) -> list:
            over_positions(b.mul(o, step), conv.rows)
            return []

        loops.run(full_blocks, over_blocks)
    if rest_rows:
        over_positions(ir.Constant(I64, full_blocks * conv.rows), rest_rows)
    b.ret_void()
    return fn


def direct_conv_kernel(conv: DirectConv, vector_bits: int | None) -> SharedKernel:
    """:func:`direct_conv_function` for ``conv`` as a shared kernel
    (:class:`~ember.backend.kernel.llvm.shared.SharedKernel`), without bias (the caller
    adds it, so that a layer with and one without share the kernel): eager kernels and
    compiled plans that convolve a layer share its machine code."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    def build(own: ir.Module, name: str) -> ir.Function:
        return direct_conv_function(own, name, conv, vector_bits)

    signature = ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, PTR])
    return SharedKernel("ember_direct_conv", ("direct_conv", conv, vector_bits), signature, build)


__all__ = [
    "MAX_BYTES",
    "MAX_WINDOW",
    "DirectConv",
    "direct_conv_function",
    "direct_conv_kernel",
    "segments",
]

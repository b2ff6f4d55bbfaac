"""A direct float32 convolution of stride 1 (no column buffer): for layers whose
windows are small (few input channels times kernel positions), where im2col's copy
and the product's packing cost more than the product.

The input of one sample (and group) is first copied, zero-padded, into ``padded``
(``[c, *padded extent]``, :attr:`DirectConv.padded`). Output position ``o`` then reads
``padded[c, o + k * dilation]``, at flat offset ``q(o) + off(c, k)`` where ``q(o)`` is
``o``'s flat index in the *padded* grid: every (channel, kernel position) is one
dense, shifted run of ``padded``. The kernel computes the output over the *virtual*
positions ``q`` in ``[0, out[0] * padded row size)`` (a position past the output's
last columns wraps into the next row: computed and thrown away), into ``virtual``
(``[c_out, row]``), with a register tile of ``rows`` output channels (a broadcast
weight each) by ``vectors`` vectors of consecutive virtual positions; each
(channel, kernel position) is ``vectors`` unaligned loads, ``rows`` broadcasts and
``rows * vectors`` fused multiply-adds. :func:`compact` copies the real positions
into a dense ``[c_out, *out]`` block.

The sums run over channels, then kernel positions, in order, with fused
multiply-adds: results agree with im2col and ``?gemm`` to float32 rounding, not bit
for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import F32, I64
from ember.backend.kernel.views import contiguous_strides, size_of

PTR = ir.PointerType()

#: The most values per window (input channels per group times kernel positions) a
#: direct convolution takes: wider windows reuse each input value enough for the
#: packed product to win (and ResNet's 3x3 layers, 576 and wider, stay on it).
MAX_WINDOW = 512
#: The most bytes of one sample's padded input and virtual output together (they
#: should stay in the core's second-level cache).
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
    def row(self) -> int:
        """Floats per output channel in ``virtual``."""
        return self.vectors * self.width

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
    def virtual_floats(self) -> int:
        return self.outputs * self.row

    def offsets(self) -> list[int]:
        """Each kernel position's flat offset in a padded plane, in kernel order."""
        strides = contiguous_strides(self.padded)
        return [
            sum(k * d * s for k, d, s in zip(position, self.dilation, strides))
            for position in itertools.product(*(range(k) for k in self.kernel))
        ]

    def fits(self) -> bool:
        """Whether the direct kernel should run this convolution (see :data:`MAX_WINDOW`)."""
        nbytes = 4 * (self.padded_floats + self.virtual_floats)
        return size_of(self.kernel) > 1 and self.window <= MAX_WINDOW and nbytes <= MAX_BYTES


def direct_conv_function(module: ir.Module, name: str, conv: DirectConv, vector_bits: int | None) -> ir.Function:
    """``name(padded, weight, virtual)``: the convolution of one padded sample
    (``[channels, *padded]``) with ``weight`` (``[outputs, channels, *kernel]``, dense)
    into ``virtual`` (``[outputs, row]``); see the module docstring."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    if vector_bits:
        set.add(fn.attributes, f'"prefer-vector-width"="{vector_bits}"')
    padded, weight, virtual = fn.args
    for arg in fn.args:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loops = Loops(b)
    w = conv.width
    vec = ir.VectorType(F32, w)
    fma_name = f"llvm.fma.v{w}f32"
    fma = module.globals.get(fma_name) or ir.Function(module, ir.FunctionType(vec, [vec] * 3), name=fma_name)
    zero = ir.Constant(vec, [0.0] * w)
    undef = ir.Constant(vec, ir.Undefined)
    splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w)
    offsets = conv.offsets()
    positions = len(offsets)

    def at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        if isinstance(index, int):
            index = ir.Constant(I64, index)
        return b.gep(ptr, [index], source_etype=F32)

    tiles: dict[tuple[int, int], ir.Function] = {}

    def tile_function(rows: int, vectors: int) -> ir.Function:
        """``tile(x, w, out)``: ``rows`` output channels (weights from ``w``) at ``vectors``
        vectors of virtual positions (the padded input from ``x``, the result to ``out``).
        Its own function, so that the optimizer does not hoist a small window's
        broadcasts out of the loop over positions (they would spill)."""
        if (rows, vectors) in tiles:
            return tiles[rows, vectors]
        tile = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), name=f"{name}_tile{rows}x{vectors}")
        tile.linkage = "internal"
        tile.attributes.add("nounwind")
        tile.attributes.add("noinline")
        if vector_bits:
            set.add(tile.attributes, f'"prefer-vector-width"="{vector_bits}"')
        x_block, w_block, out_block = tile.args
        for arg in tile.args:
            arg.add_attribute("noalias")
        t = ir.IRBuilder(tile.append_basic_block("entry"))

        def channel(c: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            x_c = at(t, x_block, t.mul(c, ir.Constant(I64, conv.plane)))
            w_c = at(t, w_block, t.mul(c, ir.Constant(I64, positions)))
            accs = list(accs)
            for k, off in enumerate(offsets):
                xs = [t.load(at(t, x_c, off + v * w), typ=vec, align=4) for v in range(vectors)]
                for r in range(rows):
                    scalar = t.load(at(t, w_c, r * conv.window + k), typ=F32, align=4)
                    splat = t.shuffle_vector(
                        t.insert_element(undef, scalar, ir.Constant(ir.IntType(32), 0)), undef, splat_mask
                    )
                    for v in range(vectors):
                        accs[r * vectors + v] = t.call(fma, [splat, xs[v], accs[r * vectors + v]])
            return accs

        accs = Loops(t).run(conv.channels, channel, [zero] * (rows * vectors))
        for r in range(rows):
            for v in range(vectors):
                t.store(accs[r * vectors + v], at(t, out_block, r * conv.row + v * w), align=4)
        t.ret_void()
        tiles[rows, vectors] = tile
        return tile

    def tile(first_out: ir.Value, q: ir.Value, rows: int, vectors: int) -> None:
        """Output channels ``first_out + [0, rows)`` at virtual positions ``q + [0, vectors * w)``."""
        w_block = at(b, weight, b.mul(first_out, ir.Constant(I64, conv.window)))
        out_block = at(b, virtual, b.add(b.mul(first_out, ir.Constant(I64, conv.row)), q))
        b.call(tile_function(rows, vectors), [at(b, padded, q), w_block, out_block])

    def over_positions(first_out: ir.Value, rows: int) -> None:
        per_tile = conv.tile_vectors
        full, rest = divmod(conv.vectors, per_tile)
        if full:
            step = ir.Constant(I64, per_tile * w)

            def over_tiles(t: ir.Value, _: list) -> list:
                tile(first_out, b.mul(t, step), rows, per_tile)
                return []

            loops.run(full, over_tiles)
        if rest:
            tile(first_out, ir.Constant(I64, full * per_tile * w), rows, rest)

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


def compact(
    b: ir.IRBuilder,
    conv: DirectConv,
    virtual: ir.Value,
    dst: ir.Value,
    bias: Callable[[ir.Value], ir.Value] | None = None,
) -> None:
    """``dst[o, *p] = virtual[o, q(p)]`` (plus ``bias(o)``, a float32 register, where
    given): the real positions of :func:`direct_conv_function`'s output, dense."""
    loops = Loops(b)
    padded_strides = contiguous_strides(conv.padded)
    out_strides = contiguous_strides(conv.out)
    plane, width = size_of(conv.out), conv.out[-1]

    def linear(indices: list[ir.Value], strides: tuple[int, ...]) -> ir.Value:
        total: ir.Value = ir.Constant(I64, 0)
        for i, s in zip(indices, strides):
            total = b.add(total, b.mul(i, ir.Constant(I64, s)))
        return total

    def channel(o: ir.Value, _: list) -> list:
        src_base = b.mul(o, ir.Constant(I64, conv.row))
        dst_base = b.mul(o, ir.Constant(I64, plane))
        add = bias(o) if bias is not None else None

        def line(lead: list[ir.Value]) -> None:
            src = b.add(src_base, linear(lead, padded_strides[:-1]))
            to = b.add(dst_base, linear(lead, out_strides[:-1]))

            def element(p: ir.Value, _: list) -> list:
                value = b.load(b.gep(virtual, [b.add(src, p)], source_etype=F32), typ=F32, align=4)
                if add is not None:
                    value = b.fadd(value, add)
                b.store(value, b.gep(dst, [b.add(to, p)], source_etype=F32), align=4)
                return []

            loops.run(width, element)

        if len(conv.out) > 1:
            loops.nest(list(conv.out[:-1]), line)
        else:
            line([])
        return []

    loops.run(conv.outputs, channel)


__all__ = ["MAX_BYTES", "MAX_WINDOW", "DirectConv", "compact", "direct_conv_function"]

"""The weight gradient of a direct float32 convolution of stride 1 (no column buffer):
``dW[o, c, k] = sum over samples and output positions p of dY[o, p] * x[c, p + k * dilation]``,
for the small-window layers :mod:`.direct_conv` runs forward.

It keeps :class:`~.direct_conv.DirectConv`'s padded input (``[c, *padded]`` per
sample): every (channel, kernel position) is one dense, shifted run of it. A register
tile of ``rows`` output channels by a block of kernel positions of one input channel
(:func:`tiling`) runs over a chunk of samples, each output row (the last dim) and its
vectors of positions: per vector, ``rows`` loads of the output gradient (read where
it is, ``[outputs, *out]`` per sample), one unaligned load of the padded input per
kernel position and ``rows`` fused multiply-adds per kernel position. A row's last,
partial vector loads both masked (zeros past the row's end, so the lanes past it add
``0 * 0``, whatever infinity or NaN the next row holds).

The accumulators are lane-wise partial sums (``[o, c, *kernel, width]``), kept in
registers over a chunk of samples (:func:`chunk_samples`: as many as fit in the
second-level cache) and added into a buffer between chunks; :func:`lane_sums_function`
adds each one's lanes at the end. The sums run in another order than im2col and
``?gemm``'s: results agree to float32 rounding, not bit for bit.

Measured in the small CNN's compiled step (``benchmarks/profile_compiled.py --w3
--clock cpu``, one thread, AVX-512 host), 64 samples: [32, 16, 3, 3] about 590 us (near
two 16-lane fused multiply-adds a cycle, with 14 of each vector's 16 lanes real), [16,
1, 3, 3] about 83 us. Three rows by nine kernel positions (27 accumulators) ran 5-15%
faster than four by five or by seven, and 15% faster than two by nine.
"""

from __future__ import annotations

from llvmlite import ir

from ember.backend.kernel.llvm.direct_conv import PTR, DirectConv
from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import F32, I64
from ember.backend.kernel.views import contiguous_strides, size_of

#: The most bytes of one chunk of samples' padded inputs and output gradients.
CHUNK_BYTES = 384 << 10

#: The least share of each row's vectors' lanes that hold output positions (a row
#: narrower than a vector, or just past a whole number of them, wastes the rest). The
#: digits CNN's 8-wide rows fill 8-lane vectors (:func:`lanes`): its [32, 16, 3, 3]
#: weight gradient, 32 samples, ran in 183 us with 8 lanes, 192 us with 16 (half of
#: each vector real) and 268 us by im2col and OpenBLAS's ``sgemm`` pinned to
#: ``Haswell`` (177, 186 and 273 us on its AVX-512 kernels); its [16, 1, 3, 3] one in 22,
#: 22 and 47 (36) us (CPU time, one thread, AVX-512 host).
MIN_LANE_SHARE = 0.75


def lane_share(last: int, width: int) -> float:
    """The share of the lanes of a row of ``last`` positions' vectors that hold positions."""
    return last / (width * -(-last // width))


def lanes(last: int, vector_bits: int | None) -> int:
    """Floats per vector for rows of ``last`` output positions: 16 with 512-bit vectors
    where that fills the rows' vectors (:data:`MIN_LANE_SHARE`), else 8 (256-bit
    vectors, which AVX-512 runs with its 32 registers) where that fills them better."""
    if vector_bits != 512:
        return 8
    return 16 if lane_share(last, 16) >= min(MIN_LANE_SHARE, lane_share(last, 8)) else 8


def vector_registers(vector_bits: int | None) -> int:
    """Vector registers the kernel may tile: 32 with AVX-512 (at 512 or 256 bits a
    vector), 16 otherwise."""
    return 32 if vector_bits == 512 else 16


def fits(conv: DirectConv) -> bool:
    """Whether the direct weight gradient should run ``conv``: the forward kernel's
    test (:meth:`DirectConv.fits`) and rows that fill their vectors (:data:`MIN_LANE_SHARE`)."""
    return conv.fits() and lane_share(conv.out[-1], conv.width) >= MIN_LANE_SHARE


def tiling(conv: DirectConv, vector_bits: int | None) -> tuple[int, list[tuple[int, int]]]:
    """The register tile: output channels per tile, and the kernel positions' blocks
    ``(first, count)`` (balanced; ``rows * count`` accumulators fit the registers with
    the tile's operands: :func:`vector_registers`, whatever the vectors' width)."""
    rows, budget = (3, 27) if vector_registers(vector_bits) == 32 else (2, 12)
    positions = size_of(conv.kernel)
    blocks = -(-positions // (budget // rows))
    base, extra = divmod(positions, blocks)
    out, first = [], 0
    for i in range(blocks):
        count = base + (i < extra)
        out.append((first, count))
        first += count
    return rows, out


def sample_floats(conv: DirectConv) -> tuple[int, int]:
    """Floats of one sample's padded input and of its output gradient."""
    return conv.channels * conv.plane, conv.outputs * size_of(conv.out)


def chunk_samples(conv: DirectConv, n: int) -> int:
    """Samples per chunk (see :data:`CHUNK_BYTES`), at most ``n``."""
    return max(1, min(n, CHUNK_BYTES // (4 * sum(sample_floats(conv)))))


def padded_floats(conv: DirectConv, samples: int) -> int:
    """Floats of a chunk's padded inputs."""
    return samples * conv.channels * conv.plane


def _intrinsic(module: ir.Module, name: str, typ: ir.FunctionType) -> ir.Function:
    found = module.globals.get(name)
    return found if found is not None else ir.Function(module, typ, name=name)


def _internal(fn: ir.Function, vector_bits: int | None) -> None:
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    if vector_bits:
        set.add(fn.attributes, f'"prefer-vector-width"="{vector_bits}"')


def _at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
    if isinstance(index, int):
        index = ir.Constant(I64, index)
    return b.gep(ptr, [index], source_etype=F32)


def direct_weight_grad_function(
    module: ir.Module, name: str, conv: DirectConv, vector_bits: int | None, grad_stride: int
) -> ir.Function:
    """``name(padded, grad, acc, count)``: adds the weight gradient of ``count`` samples
    into ``acc`` (``[outputs, channels, *kernel, width]``: lane-wise
    partial sums). ``padded`` holds the samples' padded inputs (``[count, channels,
    *padded]``), ``grad`` their output gradients (``[outputs, *out]`` dense per sample,
    ``grad_stride`` floats from one sample's to the next); see the module docstring."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64]), name=name)
    _internal(fn, vector_bits)
    padded, grad, acc, count = fn.args
    for arg in (padded, grad, acc):
        arg.add_attribute("noalias")
    w = conv.width
    vec = ir.VectorType(F32, w)
    fma = _intrinsic(module, f"llvm.fma.v{w}f32", ir.FunctionType(vec, [vec] * 3))
    mask_type = ir.VectorType(ir.IntType(1), w)
    masked_load = _intrinsic(
        module, f"llvm.masked.load.v{w}f32.p0", ir.FunctionType(vec, [PTR, ir.IntType(32), mask_type, vec])
    )
    zero = ir.Constant(vec, [0.0] * w)
    four = ir.Constant(ir.IntType(32), 4)
    offsets = conv.offsets()
    positions = len(offsets)
    plane = size_of(conv.out)
    x_stride = conv.channels * conv.plane
    row_stride = conv.channels * positions * w  # one output channel's accumulators
    lead, last = conv.out[:-1], conv.out[-1]
    x_lead, dy_lead = contiguous_strides(conv.padded)[:-1], contiguous_strides(conv.out)[:-1]
    full, rest = divmod(last, w)
    tail = ir.Constant(mask_type, [lane < rest for lane in range(w)])
    rows, blocks = tiling(conv, vector_bits)
    tiles: dict[tuple[int, int, int], ir.Function] = {}

    def tile_function(tile_rows: int, first: int, span: int) -> ir.Function:
        """``tile(x, dy, acc, count)``: output channels ``[0, tile_rows)`` of ``dy`` by
        kernel positions ``first + [0, span)`` of one input channel ``x``, over ``count``
        samples; its own function, so that its accumulators get the registers."""
        key = (tile_rows, first, span)
        if key in tiles:
            return tiles[key]
        tile = ir.Function(
            module,
            ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64]),
            name=f"{name}_tile{tile_rows}x{first}_{span}",
        )
        _internal(tile, vector_bits)
        x_c, dy_o, acc_block, tile_count = tile.args
        for arg in (x_c, dy_o, acc_block):
            arg.add_attribute("noalias")
        t = ir.IRBuilder(tile.append_basic_block("entry"))
        loops = Loops(t)
        slots = [(r, k) for r in range(tile_rows) for k in range(span)]
        starts = [_at(t, acc_block, r * row_stride + (first + k) * w) for r, k in slots]

        def vector(x_row: ir.Value, dy_row: ir.Value, at: ir.Value, masked: bool, accs: list) -> list:
            """The fused multiply-adds of one vector of a row, from position ``at``."""

            def load(ptr: ir.Value) -> ir.Value:
                if masked:
                    return t.call(masked_load, [ptr, four, tail, zero])
                return t.load(ptr, typ=vec, align=4)

            dy = [load(_at(t, dy_row, t.add(at, ir.Constant(I64, r * plane)))) for r in range(tile_rows)]
            out = list(accs)
            for k in range(span):
                x = load(_at(t, x_row, t.add(at, ir.Constant(I64, offsets[first + k]))))
                for r in range(tile_rows):
                    out[r * span + k] = t.call(fma, [dy[r], x, out[r * span + k]])
            return out

        def row(x_row: ir.Value, dy_row: ir.Value, accs: list) -> list:
            if full:

                def whole(v: ir.Value, accs: list) -> list:
                    return vector(x_row, dy_row, t.mul(v, ir.Constant(I64, w)), False, accs)

                accs = loops.run(full, whole, accs)
            if rest:
                accs = vector(x_row, dy_row, ir.Constant(I64, full * w), True, accs)
            return accs

        def rows_of(dim: int, x_at: ir.Value, dy_at: ir.Value, accs: list) -> list:
            if dim == len(lead):
                return row(x_at, dy_at, accs)

            def step(i: ir.Value, accs: list) -> list:
                x_next = _at(t, x_at, t.mul(i, ir.Constant(I64, x_lead[dim])))
                dy_next = _at(t, dy_at, t.mul(i, ir.Constant(I64, dy_lead[dim])))
                return rows_of(dim + 1, x_next, dy_next, accs)

            return loops.run(lead[dim], step, accs)

        def sample(s: ir.Value, accs: list) -> list:
            xs = _at(t, x_c, t.mul(s, ir.Constant(I64, x_stride)))
            dys = _at(t, dy_o, t.mul(s, ir.Constant(I64, grad_stride)))
            return rows_of(0, xs, dys, accs)

        accs = loops.count(tile_count, sample, [t.load(p, typ=vec, align=4) for p in starts])
        for p, value in zip(starts, accs):
            t.store(value, p, align=4)
        t.ret_void()
        tiles[key] = tile
        return tile

    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loops = Loops(b)

    def over_channels(first_out: ir.Value, tile_rows: int) -> list:
        dy_o = _at(b, grad, b.mul(first_out, ir.Constant(I64, plane)))
        acc_o = _at(b, acc, b.mul(first_out, ir.Constant(I64, row_stride)))

        def channel(c: ir.Value, _: list) -> list:
            x_c = _at(b, padded, b.mul(c, ir.Constant(I64, conv.plane)))
            acc_c = _at(b, acc_o, b.mul(c, ir.Constant(I64, positions * w)))
            for first, span in blocks:
                b.call(tile_function(tile_rows, first, span), [x_c, dy_o, acc_c, count])
            return []

        loops.run(conv.channels, channel)
        return []

    full_blocks, rest_rows = divmod(conv.outputs, rows)
    if full_blocks:
        loops.run(full_blocks, lambda o, _: over_channels(b.mul(o, ir.Constant(I64, rows)), rows))
    if rest_rows:
        over_channels(ir.Constant(I64, full_blocks * rows), rest_rows)
    b.ret_void()
    return fn


def lane_sums_function(module: ir.Module, name: str, count: int, width: int, vector_bits: int | None) -> ir.Function:
    """``name(acc, out)``: ``out[i] = sum(acc[i, :])`` for ``acc`` ``[count, width]``
    (the lanes added pairwise, halves first)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR]), name=name)
    _internal(fn, vector_bits)
    acc, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vec = ir.VectorType(F32, width)

    def one(i: ir.Value, _: list) -> list:
        value = b.load(_at(b, acc, b.mul(i, ir.Constant(I64, width))), typ=vec, align=4)
        lanes = width
        while lanes > 1:
            lanes //= 2
            low = b.shuffle_vector(value, value, ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes))))
            high = b.shuffle_vector(
                value, value, ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes, 2 * lanes)))
            )
            value = b.fadd(low, high)
        b.store(b.extract_element(value, ir.Constant(ir.IntType(32), 0)), _at(b, out, i))
        return []

    Loops(b).run(count, one)
    b.ret_void()
    return fn


__all__ = [
    "CHUNK_BYTES",
    "MIN_LANE_SHARE",
    "fits",
    "chunk_samples",
    "lane_share",
    "lanes",
    "vector_registers",
    "direct_weight_grad_function",
    "lane_sums_function",
    "padded_floats",
    "sample_floats",
    "tiling",
]

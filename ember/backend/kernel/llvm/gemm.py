"""A float32 matrix product compiled by ember: ``C = A @ B`` (or ``C += A @ B``),
row-major, every operand dense along its rows.

OpenBLAS picks its kernels from the CPU it detects, or from ``OPENBLAS_CORETYPE``; an
environment that pins AVX2 kernels (``Haswell``) on an AVX-512 machine halves its
``sgemm``'s throughput, while ember's own loops are compiled for the host's features.
This product is blocked as such libraries block theirs: ``B`` packed in panels of
``NR`` columns (``KC`` rows at a time, zero-padded), ``A`` in panels of ``MR`` rows,
and a register-blocked micro-kernel that keeps an ``MR x NR`` tile of ``C`` in vector
registers for ``KC`` steps of fused multiply-adds (``MR x 2`` accumulators of the
host's vector width: 12 x 32 on AVX-512, 6 x 16 on AVX2). A partial tile at the
edges goes through a tile on the stack.

The sums run in a different order than a BLAS's (per ``KC`` block, fused
multiply-adds), so results agree with ``?gemm`` to float32 rounding, not bit for bit.

:func:`gemm_function` declares the function in a module:
``ember_sgemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate, pack_a, pack_b)`` where
``pack_a`` holds :func:`pack_a_floats` and ``pack_b`` :func:`pack_b_floats` floats
(the caller's scratch: no allocation in the product).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import F32, I1, I64

if TYPE_CHECKING:
    from ember.backend.kernel.llvm.shared import SharedKernel

PTR = ir.PointerType()


@dataclass(frozen=True)
class Blocking:
    """A product's register and cache blocking."""

    #: Vector width in floats.
    width: int
    #: Rows of a micro-tile (one broadcast of ``A`` each).
    mr: int
    #: Rows of ``B`` (columns of ``A``) per packed block.
    kc: int = 256
    #: Columns of ``B`` per packed block.
    nc: int = 1536
    #: Rows of ``A`` per packed block (a multiple of ``mr``).
    mc: int = 192
    #: A product of at most this many columns reads ``A`` unpacked.
    direct_n: int = 1024

    @property
    def nr(self) -> int:
        """Columns of a micro-tile: two vectors."""
        return 2 * self.width


def blocking(vector_bits: int | None) -> Blocking:
    """The blocking for the host's vector width (512 bits: AVX-512; else 256)."""
    return Blocking(16, 12) if vector_bits == 512 else Blocking(8, 6)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def pack_a_floats(block: Blocking, m: int, k: int) -> int:
    """Floats of the packed ``A`` of an ``m x k`` operand (at most ``mc x kc``)."""
    return _round_up(min(m, block.mc), block.mr) * min(k, block.kc)


def pack_b_floats(block: Blocking, n: int, k: int) -> int:
    """Floats of the packed ``B`` of a ``k x n`` operand (at most ``kc x nc``)."""
    return _round_up(min(n, block.nc), block.nr) * min(k, block.kc)


class _Emit:
    """Builds the product's functions into ``module``."""

    def __init__(self, module: ir.Module, name: str, block: Blocking, vector_bits: int | None):
        self.module = module
        self.name = name
        self.block = block
        self.vec = ir.VectorType(F32, block.width)
        fma = f"llvm.fma.v{block.width}f32"
        self.fma = module.globals.get(fma) or ir.Function(module, ir.FunctionType(self.vec, [self.vec] * 3), name=fma)
        self.vector_bits = vector_bits

    def _function(self, name: str, types: list[ir.Type], internal: bool) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types), name=name)
        fn.attributes.add("nounwind")
        if internal:
            fn.linkage = "internal"
            fn.attributes.add("noinline")
        if self.vector_bits:
            set.add(fn.attributes, f'"prefer-vector-width"="{self.vector_bits}"')
        return fn

    # -- loops with a run-time count and step --------------------------------------
    @staticmethod
    def _stepped(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int, body: Callable[[ir.Value], None]) -> None:
        """``for i in range(start, stop, step): body(i)``."""
        pre = b.block
        head = b.append_basic_block("head")
        loop = b.append_basic_block("body")
        done = b.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, "i")
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), loop, done)
        b.position_at_end(loop)
        body(i)
        i.add_incoming(b.add(i, ir.Constant(I64, step)), b.block)
        b.branch(head)
        b.position_at_end(done)

    @staticmethod
    def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", x, y), x, y)

    def _at(self, b: ir.IRBuilder, ptr: ir.Value, index: ir.Value) -> ir.Value:
        return b.gep(ptr, [index], source_etype=F32)

    # -- packing -------------------------------------------------------------------
    def pack(self, transposed: bool) -> ir.Function:
        """``pack(src, ld, rows, cols, dst)``: a ``rows x cols`` block of a row-major
        operand copied into zero-padded panels.

        ``B`` (``transposed`` false): panel ``j`` holds, per row ``r`` of the block, the
        ``nr`` columns from ``j * nr`` (``dst[(j * rows + r) * nr + c]``); a full panel's
        row is two vector copies. ``A`` (``transposed`` true): panel ``i`` holds, per
        column ``c``, the ``mr`` rows from ``i * mr`` (``dst[(i * cols + c) * mr + r]``)."""
        blk = self.block
        panel = blk.mr if transposed else blk.nr
        fn = self._function(f"{self.name}_pack_{'a' if transposed else 'b'}", [PTR, I64, I64, I64, PTR], True)
        src, ld, rows, cols, dst = fn.args
        for arg in (src, dst):
            arg.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loops = Loops(b)
        along, across = (rows, cols) if transposed else (cols, rows)
        size = ir.Constant(I64, panel)
        full_panels = b.sdiv(along, size)

        def index(first: ir.Value, u: ir.Value, t: ir.Value) -> ir.Value:
            at = b.add(first, u)
            return b.add(b.mul(at, ld), t) if transposed else b.add(b.mul(t, ld), at)

        def full(p: ir.Value, _: list) -> list:
            first = b.mul(p, size)

            def line(t: ir.Value, _: list) -> list:
                out = b.mul(b.add(b.mul(p, across), t), size)
                if transposed:
                    for u in range(panel):
                        value = b.load(self._at(b, src, index(first, ir.Constant(I64, u), t)), typ=F32, align=4)
                        b.store(value, self._at(b, dst, b.add(out, ir.Constant(I64, u))), align=4)
                else:
                    for j in range(2):
                        offset = ir.Constant(I64, j * blk.width)
                        value = b.load(self._at(b, src, index(first, offset, t)), typ=self.vec, align=4)
                        b.store(value, self._at(b, dst, b.add(out, offset)), align=4)
                return []

            loops.count(across, line)
            return []

        loops.count(full_panels, full)
        first = b.mul(full_panels, size)
        valid = b.sub(along, first)
        has_partial = b.icmp_signed(">", valid, ir.Constant(I64, 0))
        partial = b.append_basic_block("partial")
        done = b.append_basic_block("done")
        b.cbranch(has_partial, partial, done)
        b.position_at_end(partial)

        def line(t: ir.Value, _: list) -> list:
            out = b.mul(b.add(b.mul(full_panels, across), t), size)

            def element(u: ir.Value, _: list) -> list:
                inside = b.icmp_signed("<", u, valid)
                safe = b.select(inside, index(first, u, t), ir.Constant(I64, 0))
                value = b.load(self._at(b, src, safe), typ=F32, align=4)
                b.store(b.select(inside, value, ir.Constant(F32, 0.0)), self._at(b, dst, b.add(out, u)), align=4)
                return []

            loops.run(panel, element)
            return []

        loops.count(across, line)
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        return fn

    # -- the micro-kernel ----------------------------------------------------------
    def micro(self, packed: bool) -> ir.Function:
        """``micro(kc, a, b, c, ldc, rows, cols, accumulate, tile, lda)``: the ``mr x nr``
        tile of panels ``a`` and ``b`` over ``kc`` steps, into ``c`` (``rows x cols`` of
        it valid; through ``tile`` when partial), added to it if ``accumulate``. ``b`` is
        packed; ``a`` is packed (``packed``) or ``A`` itself, rows ``lda`` apart (a row
        past ``rows`` reads the last valid one)."""
        blk = self.block
        mr, nr, w = blk.mr, blk.nr, blk.width
        name = f"{self.name}_micro" if packed else f"{self.name}_micro_rows"
        fn = self._function(name, [I64, PTR, PTR, PTR, I64, I64, I64, I1, PTR, I64], True)
        kc, pa, pb, pc, ldc, rows, cols, accumulate, tile, lda = fn.args
        for arg in (pb, pc, tile):
            arg.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        if not packed:
            last = b.sub(rows, ir.Constant(I64, 1))
            row_at = [self._at(b, pa, b.mul(self._min(b, ir.Constant(I64, r), last), lda)) for r in range(mr)]
        vec = self.vec
        zero = ir.Constant(vec, [0.0] * w)
        undef = ir.Constant(vec, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w)
        loops = Loops(b)

        def step(k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            brow = b.mul(k, ir.Constant(I64, nr))
            bv = [b.load(self._at(b, pb, b.add(brow, ir.Constant(I64, j * w))), typ=vec, align=4) for j in range(2)]
            arow = b.mul(k, ir.Constant(I64, mr))
            out = []
            for r in range(mr):
                at = self._at(b, pa, b.add(arow, ir.Constant(I64, r))) if packed else self._at(b, row_at[r], k)
                scalar = b.load(at, typ=F32, align=4)
                splat = b.shuffle_vector(
                    b.insert_element(undef, scalar, ir.Constant(ir.IntType(32), 0)), undef, splat_mask
                )
                for j in range(2):
                    out.append(b.call(self.fma, [splat, bv[j], accs[r * 2 + j]]))
            return out

        accs = loops.count(kc, step, [zero] * (mr * 2))
        full = b.and_(b.icmp_signed("==", rows, ir.Constant(I64, mr)), b.icmp_signed("==", cols, ir.Constant(I64, nr)))
        direct = b.append_basic_block("direct")
        partial = b.append_basic_block("partial")
        b.cbranch(full, direct, partial)

        def write(target: ir.Value, ld: ir.Value, add: ir.Value) -> None:
            for r in range(mr):
                for j in range(2):
                    at = self._at(b, target, b.add(b.mul(ir.Constant(I64, r), ld), ir.Constant(I64, j * w)))
                    value = accs[r * 2 + j]
                    if add is not None:
                        old = b.load(at, typ=vec, align=4)
                        value = b.select(add, b.fadd(old, value), value)
                    b.store(value, at, align=4)

        b.position_at_end(direct)
        write(pc, ldc, accumulate)
        b.ret_void()
        b.position_at_end(partial)
        # Full columns, fewer rows (the last panel of rows): the valid rows' vectors.
        short = b.append_basic_block("short")
        ragged = b.append_basic_block("ragged")
        b.cbranch(b.icmp_signed("==", cols, ir.Constant(I64, nr)), short, ragged)
        b.position_at_end(short)
        for r in range(1, mr):  # rows < mr here, and row 0 is always valid
            with b.if_then(b.icmp_signed("<", ir.Constant(I64, r - 1), rows)):
                for j in range(2):
                    at = self._at(b, pc, b.add(b.mul(ir.Constant(I64, r - 1), ldc), ir.Constant(I64, j * w)))
                    old = b.load(at, typ=vec, align=4)
                    value = accs[(r - 1) * 2 + j]
                    b.store(b.select(accumulate, b.fadd(old, value), value), at, align=4)
        b.ret_void()
        b.position_at_end(ragged)
        write(tile, ir.Constant(I64, nr), None)

        def copy_row(r: ir.Value, _: list) -> list:
            def copy(c: ir.Value, _: list) -> list:
                value = b.load(self._at(b, tile, b.add(b.mul(r, ir.Constant(I64, nr)), c)), typ=F32, align=4)
                at = self._at(b, pc, b.add(b.mul(r, ldc), c))
                old = b.load(at, typ=F32, align=4)
                b.store(b.select(accumulate, b.fadd(old, value), value), at, align=4)
                return []

            loops.count(cols, copy)
            return []

        loops.count(rows, copy_row)
        b.ret_void()
        return fn

    # -- the product ---------------------------------------------------------------
    def gemm(self) -> ir.Function:
        blk = self.block
        mr, nr = blk.mr, blk.nr
        pack_a, pack_b, micro, micro_rows = self.pack(True), self.pack(False), self.micro(True), self.micro(False)
        fn = self._function(self.name, [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I1, PTR, PTR], False)
        m, n, k, a, lda, bm, ldb, c, ldc, accumulate, pack_a_buf, pack_b_buf = fn.args
        for arg in (a, bm, c, pack_a_buf, pack_b_buf):
            arg.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tile = b.alloca(ir.ArrayType(F32, mr * nr), name="tile")
        tile = b.bitcast(tile, PTR)

        def over_n(q: ir.Value) -> None:
            nc = self._min(b, ir.Constant(I64, blk.nc), b.sub(n, q))

            def over_k(p: ir.Value) -> None:
                kc = self._min(b, ir.Constant(I64, blk.kc), b.sub(k, p))
                add = b.or_(accumulate, b.icmp_signed(">", p, ir.Constant(I64, 0)))
                b.call(pack_b, [self._at(b, bm, b.add(b.mul(p, ldb), q)), ldb, kc, nc, pack_b_buf])

                def over_m(r: ir.Value) -> None:
                    mc = self._min(b, ir.Constant(I64, blk.mc), b.sub(m, r))
                    block_a = self._at(b, a, b.add(b.mul(r, lda), p))

                    def tiles(packed: bool) -> None:
                        def over_j(j: ir.Value) -> None:
                            cols = self._min(b, ir.Constant(I64, nr), b.sub(nc, j))
                            panel_b = self._at(b, pack_b_buf, b.mul(j, kc))  # panel j / nr: (j / nr) * kc * nr

                            def over_i(i: ir.Value) -> None:
                                rows = self._min(b, ir.Constant(I64, mr), b.sub(mc, i))
                                if packed:
                                    panel_a = self._at(b, pack_a_buf, b.mul(i, kc))
                                else:
                                    panel_a = self._at(b, block_a, b.mul(i, lda))
                                target = self._at(b, c, b.add(b.mul(b.add(r, i), ldc), b.add(q, j)))
                                call = [kc, panel_a, panel_b, target, ldc, rows, cols, add, tile, lda]
                                b.call(micro if packed else micro_rows, call)

                            self._stepped(b, ir.Constant(I64, 0), mc, mr, over_i)

                        self._stepped(b, ir.Constant(I64, 0), nc, nr, over_j)

                    # Few column panels use each row of A few times: read A where it is.
                    with b.if_else(b.icmp_signed("<=", nc, ir.Constant(I64, blk.direct_n))) as (direct, packing):
                        with direct:
                            tiles(False)
                        with packing:
                            b.call(pack_a, [block_a, lda, mc, kc, pack_a_buf])
                            tiles(True)

                self._stepped(b, ir.Constant(I64, 0), m, blk.mc, over_m)

            self._stepped(b, ir.Constant(I64, 0), k, blk.kc, over_k)

        self._stepped(b, ir.Constant(I64, 0), n, blk.nc, over_n)
        b.ret_void()
        return fn


def gemm_function(
    module: ir.Module, name: str, block: Blocking, vector_bits: int | None, internal: bool = False
) -> ir.Function:
    """Declares ``name`` (see the module docstring) and its helpers in ``module``
    (``internal``: only the module's own code calls it)."""
    fn = _Emit(module, name, block, vector_bits).gemm()
    if internal:
        fn.linkage = "internal"
    return fn


def gemm_kernel(block: Blocking, vector_bits: int | None) -> SharedKernel:
    """:func:`gemm_function` for ``block`` as a shared kernel
    (:class:`~ember.backend.kernel.llvm.shared.SharedKernel`): compiled once per process
    (and kept in the object cache: its IR depends on the blocking alone) instead of in
    every plan that multiplies with it."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    signature = ir.FunctionType(ir.VoidType(), [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I1, PTR, PTR])

    def build(own: ir.Module, name: str) -> ir.Function:
        return gemm_function(own, name, block, vector_bits)

    return SharedKernel("ember_sgemm", ("sgemm", block, vector_bits), signature, build)


__all__ = ["Blocking", "blocking", "gemm_function", "pack_a_floats", "pack_b_floats", "gemm_kernel"]

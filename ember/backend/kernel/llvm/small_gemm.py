"""A float32 matrix product for small, fixed shapes, emitted inline as register-tiled
vector loops: ``C = A @ B`` (plus an addend ``D``, which may be ``C`` itself).

The recurrent sequences run one ``[batch, n] x [n, 4n]`` product per step (and its
transpose in the backward pass), 64 and more times with the same weight. Through
BLAS each call pays its set-up and packs the weight again, and the BLAS a process
loads may not use the host's widest vectors (an ``OPENBLAS_CORETYPE`` pinned to AVX2
kernels on an AVX-512 machine). Here the sizes are constants of the emitted code, the
weight's rows are read in place (a ``[k, v * width]`` panel stays in cache across the
row tiles), and each tile of ``rows x v * width`` outputs accumulates in registers over
the whole ``k`` loop with one fused multiply-add per vector and step.

``emit_gemm`` emits the product where it applies (``n`` a multiple of the vector width)
and returns ``False`` otherwise, so the caller keeps its BLAS call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.mathlib import I64

if TYPE_CHECKING:
    from ember.backend.kernel.llvm.shared import SharedKernel

_F32 = ir.FloatType()
#: Rows of a register tile and vectors per row: 8 x 2 accumulators, 2 weight loads and
#: 8 broadcasts per 16 multiply-adds.
ROWS, VECTORS = 8, 2
#: Rows of a register tile where ``A`` is read transposed (a weight gradient ``X^T dY``:
#: each step's ``A`` values are adjacent) on a host with 32 vector registers (16 float32
#: lanes): 12 x 2 accumulators. [128, 2048] x [2048, 512] 1244 -> 1153 us, [32, 2048] x
#: [2048, 512] 316 -> 291 us (CPU time, medians of 9 alternating rounds); the row-major
#: products measured the same with either tile. Each output's sum is the same either way.
WIDE_ROWS = 12
#: Reductions longer than ``LONG`` run in blocks of ``BLOCK`` (each block's ``A`` and
#: ``B`` rows stay in the core's cache while its column tiles read them), each block
#: after the first adding into ``C``.
LONG, BLOCK = 512, 256


class Operand(NamedTuple):
    """A float32 matrix at ``ptr``: element ``(i, j)`` at ``i * row + j * col``."""

    ptr: ir.Value
    row: int
    col: int = 1


#: ``EMBER_GEMM=blas`` (fusion's setting for ember's own product, ``fusion/llvm/sgemm.py``)
#: keeps every float32 product on BLAS, these loops included.
INLINE_ENV = "EMBER_GEMM"


def enabled() -> bool:
    """Whether float32 products may run as these loops (where they apply)."""
    return os.environ.get(INLINE_ENV, "auto").strip().lower() != "blas"


def lanes(vector_bits: int | None) -> int:
    """float32 lanes of the host's preferred vectors (8 without AVX-512)."""
    return (vector_bits or 256) // 32


def applies(n: int, width: int) -> bool:
    """Whether :func:`emit_gemm` handles ``n`` output columns with ``width`` lanes."""
    return n > 0 and n % width == 0


def _takes(m: int, n: int, k: int, b_rows: Operand, c: Operand, width: int) -> bool:
    """Whether :func:`emit_gemm` emits the product (``n`` whole vectors, dense rows)."""
    return applies(n, width) and m > 0 and k > 0 and b_rows.col == 1 and c.col == 1


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _fma(module: ir.Module, vec: ir.VectorType) -> ir.Function:
    name = f"llvm.fma.v{vec.count}f32"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), name=name)


def emit_gemm(
    kb: KernelBuilder,
    m: int,
    n: int,
    k: int,
    a: Operand,
    b_rows: Operand,
    c: Operand,
    width: int,
    addend: Operand | None = None,
) -> bool:
    """``C[m, n] = A[m, k] @ B[k, n] (+ D)``: ``B`` and ``C`` (and ``D``) with unit column
    strides, ``A`` with any strides (a transposed ``A`` is ``Operand(ptr, 1, lda)``).
    ``False`` (nothing emitted) where ``n`` is not a multiple of ``width``."""
    if not _takes(m, n, k, b_rows, c, width):
        return False
    if k <= LONG:
        _emit_block(kb, m, n, k, a, b_rows, c, width, addend)
        return True
    b = kb.b

    def block(k0: ir.Value, size: int, add: Operand | None) -> None:
        a_k0 = Operand(b.gep(a.ptr, [b.mul(k0, _c(a.col))], source_etype=_F32), a.row, a.col)
        b_k0 = Operand(b.gep(b_rows.ptr, [b.mul(k0, _c(b_rows.row))], source_etype=_F32), b_rows.row)
        _emit_block(kb, m, n, size, a_k0, b_k0, c, width, add)

    blocks, tail = divmod(k, BLOCK)
    block(_c(0), BLOCK, addend)
    if blocks > 1:

        def later(q: ir.Value, _: list) -> list:
            block(b.mul(b.add(q, _c(1)), _c(BLOCK)), BLOCK, c)
            return []

        kb.loops.run(blocks - 1, later)
    if tail:
        block(_c(blocks * BLOCK), tail, c)
    return True


def emit_shared_gemm(
    kb: KernelBuilder,
    m: int,
    n: int,
    k: int,
    a: Operand,
    b_rows: Operand,
    c: Operand,
    width: int,
    addend: Operand | None = None,
) -> bool:
    """:func:`emit_gemm` as a call of a function compiled once per process for the
    shape and layout (:func:`gemm_kernel`), which flex's eager products
    (:mod:`ember.backend.flex.native_gemm`) call too. An ``addend`` that is ``C`` itself
    (a product accumulating into its output) is emitted inline instead."""
    if not _takes(m, n, k, b_rows, c, width):
        return False
    if addend is not None and addend.ptr is c.ptr:
        return emit_gemm(kb, m, n, k, a, b_rows, c, width, addend)
    shared = gemm_kernel(m, n, k, (a.row, a.col), b_rows.row, c.row, width, None if addend is None else addend.row)
    null = ir.Constant(ir.PointerType(), None)
    kb.b.call(shared.declare(kb.b.module), [a.ptr, b_rows.ptr, c.ptr, null if addend is None else addend.ptr])
    return True


def gemm_kernel(
    m: int, n: int, k: int, a: tuple[int, int], b_row: int, c_row: int, width: int, addend_row: int | None
) -> SharedKernel:
    """``gemm(a, b, c, d)`` as a shared kernel
    (:class:`~ember.backend.kernel.llvm.shared.SharedKernel`): :func:`emit_gemm` of ``A``
    (element strides ``a``), ``B`` (row stride ``b_row``) into ``C`` (row stride
    ``c_row``), plus ``D`` (row stride ``addend_row``; ``None``: no addend, ``d`` unread)."""
    from ember.backend.kernel.llvm.shared import SharedKernel

    ptr = ir.PointerType()

    def build(module: ir.Module, name: str) -> ir.Function:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 4), name=name)
        fn.attributes.add("nounwind")
        if width == 16:
            set.add(fn.attributes, '"prefer-vector-width"="512"')
        for arg in fn.args:
            arg.add_attribute("noalias")
        pa, pb, pc, pd = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        add = None if addend_row is None else Operand(pd, addend_row)
        emit_gemm(KernelBuilder(b), m, n, k, Operand(pa, *a), Operand(pb, b_row), Operand(pc, c_row), width, add)
        b.ret_void()
        return fn

    recipe = ("small_gemm", m, n, k, a, b_row, c_row, width, addend_row)
    return SharedKernel("ember_small_gemm", recipe, ir.FunctionType(ir.VoidType(), [ptr] * 4), build)


def _emit_block(
    kb: KernelBuilder,
    m: int,
    n: int,
    k: int,
    a: Operand,
    b_rows: Operand,
    c: Operand,
    width: int,
    addend: Operand | None,
) -> None:
    """:func:`emit_gemm` over one block of the reduction (its operands as given)."""
    b = kb.b
    vec = ir.VectorType(_F32, width)
    fma = _fma(b.module, vec)
    zero = ir.Constant(vec, [0.0] * width)
    groups = n // width  # vectors per output row
    tile_rows = WIDE_ROWS if a.col != 1 and width >= 16 and m >= WIDE_ROWS else ROWS

    def tile(row0: ir.Value, col0: ir.Value, rows: int, vectors: int) -> None:
        def step(p: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            base_b = b.add(b.mul(p, _c(b_rows.row)), col0)
            ws = [_load(b, b_rows.ptr, b.add(base_b, _c(v * width)), vec) for v in range(vectors)]
            out: list[ir.Value] = []
            for r in range(rows):
                at = b.add(b.mul(b.add(row0, _c(r)), _c(a.row)), b.mul(p, _c(a.col)))
                x = kb.load(a.ptr, at, np.dtype(np.float32))
                splat = b.shuffle_vector(
                    b.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0)),
                    ir.Constant(vec, ir.Undefined),
                    ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width),
                )
                out.extend(b.call(fma, [splat, ws[v], accs[r * vectors + v]]) for v in range(vectors))
            return out

        accs = kb.loops.run(k, step, [zero] * (rows * vectors))
        for r in range(rows):
            row = b.add(row0, _c(r))
            for v in range(vectors):
                col = b.add(col0, _c(v * width))
                value = accs[r * vectors + v]
                if addend is not None:
                    value = b.fadd(value, _load(b, addend.ptr, b.add(b.mul(row, _c(addend.row)), col), vec))
                _store(b, value, c.ptr, b.add(b.mul(row, _c(c.row)), col))

    def columns(col_lo: int, count: int, vectors: int) -> None:
        """Column tiles of ``vectors`` vectors from column ``col_lo``, ``count`` of them."""
        if count <= 0:
            return

        def over_cols(j: ir.Value, _: list) -> list:
            col0 = b.add(_c(col_lo), b.mul(j, _c(vectors * width)))
            full, rest = divmod(m, tile_rows)
            if full:

                def row_tile(i: ir.Value, _: list) -> list:
                    tile(b.mul(i, _c(tile_rows)), col0, tile_rows, vectors)
                    return []

                kb.loops.run(full, row_tile)
            if rest:
                tile(_c(full * tile_rows), col0, rest, vectors)
            return []

        kb.loops.run(count, over_cols)

    full_tiles, rest_vectors = divmod(groups, VECTORS)
    columns(0, full_tiles, VECTORS)
    columns(full_tiles * VECTORS * width, 1 if rest_vectors else 0, rest_vectors)


def panel(width: int) -> int:
    """Columns of one packed panel of ``B``: one register tile's width."""
    return VECTORS * width


def applies_packed(n: int, width: int) -> bool:
    """Whether :func:`emit_pack` and :func:`emit_gemm_packed` handle ``n`` columns."""
    return n > 0 and n % panel(width) == 0


def packed_floats(k: int, n: int) -> int:
    """Floats of ``B`` ``[k, n]`` packed by :func:`emit_pack`."""
    return k * n


def emit_pack(kb: KernelBuilder, k: int, n: int, b_rows: Operand, dst: ir.Value, width: int) -> None:
    """``B`` ``[k, n]`` (any strides) copied into ``dst`` as panels of :func:`panel`
    columns, each panel's ``k`` rows one after another: ``dst[(j k + p) P + q] = B[p, j P +
    q]``. A weight read by many products (the recurrences' per-step ``h @ w_hh``) is
    packed once: a panel's rows are then adjacent, so the register tiles reread it from
    the core's cache (a row stride of 2 KiB maps a panel's rows onto a few cache sets,
    and each row tile fetched it again: [32, 128] x [128, 512] 23.8 -> 19.4 us)."""
    b = kb.b
    width_p = panel(width)
    f32 = np.dtype(np.float32)

    def row(q: ir.Value, _: list) -> list:  # q = j * k + p
        j, p = b.udiv(q, _c(k)), b.urem(q, _c(k))
        src = b.add(b.mul(p, _c(b_rows.row)), b.mul(b.mul(j, _c(width_p)), _c(b_rows.col)))
        out = b.mul(q, _c(width_p))

        def col(x: ir.Value, _: list) -> list:
            kb.store(kb.load(b_rows.ptr, b.add(src, b.mul(x, _c(b_rows.col))), f32), dst, b.add(out, x), f32)
            return []

        kb.loops.run(width_p, col)
        return []

    kb.loops.run(k * (n // width_p), row)


def emit_gemm_packed(
    kb: KernelBuilder,
    m: int,
    n: int,
    k: int,
    a: Operand,
    packed: ir.Value,
    c: Operand,
    width: int,
    addend: Operand | None = None,
) -> None:
    """:func:`emit_gemm` with ``B`` packed by :func:`emit_pack`: one panel of columns at a
    time (``n`` as :func:`applies_packed` allows)."""
    b = kb.b
    width_p = panel(width)

    def at(ptr: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(ptr, [offset], source_etype=_F32)

    def one(j: ir.Value, _: list) -> list:
        col0 = b.mul(j, _c(width_p))
        b_j = Operand(at(packed, b.mul(j, _c(k * width_p))), width_p)
        c_j = Operand(at(c.ptr, col0), c.row)
        add_j = None if addend is None else Operand(at(addend.ptr, col0), addend.row)
        emit_gemm(kb, m, width_p, k, a, b_j, c_j, width, add_j)
        return []

    kb.loops.run(n // width_p, one)


#: The dot-product form's tile: 6 rows of ``A`` by 4 rows of ``B^T`` (24 accumulators; 4 x 4
#: measured 0.7x as fast at [2048, 512] x [512, 128]^T).
DOT_ROWS, DOT_COLS = 6, 4


def applies_nt(k: int, width: int) -> bool:
    """Whether :func:`emit_gemm_nt` handles a reduction of length ``k``."""
    return k > 0 and k % width == 0


def emit_gemm_nt(kb: KernelBuilder, m: int, n: int, k: int, a: Operand, b_t: Operand, c: Operand, width: int) -> bool:
    """``C[m, n] = A[m, k] @ B^T`` with ``B^T`` ``[n, k]`` given by its rows: each output a
    dot product of two dense rows, ``DOT_ROWS x DOT_COLS`` of them accumulated as vectors
    over ``k`` and summed across lanes at the end (the products ``dY W^T`` of a linear
    layer's backward, whose ``B`` is the weight transposed). ``False`` (nothing emitted)
    where ``k`` is not a multiple of ``width`` or a row is not dense."""
    if not applies_nt(k, width) or m <= 0 or n <= 0 or a.col != 1 or b_t.col != 1 or c.col != 1:
        return False
    b = kb.b
    vec = ir.VectorType(_F32, width)
    fma = _fma(b.module, vec)
    zero = ir.Constant(vec, [0.0] * width)
    reduce_name = f"llvm.vector.reduce.fadd.v{width}f32"
    found = b.module.globals.get(reduce_name)
    reduce = (
        found
        if isinstance(found, ir.Function)
        else ir.Function(b.module, ir.FunctionType(_F32, [_F32, vec]), name=reduce_name)
    )

    def tile(row0: ir.Value, col0: ir.Value, rows: int, cols: int) -> None:
        def step(p: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            at = b.mul(p, _c(width))
            xs = [_load(b, a.ptr, b.add(b.mul(b.add(row0, _c(r)), _c(a.row)), at), vec) for r in range(rows)]
            ws = [_load(b, b_t.ptr, b.add(b.mul(b.add(col0, _c(j)), _c(b_t.row)), at), vec) for j in range(cols)]
            return [b.call(fma, [xs[r], ws[j], accs[r * cols + j]]) for r in range(rows) for j in range(cols)]

        accs = kb.loops.run(k // width, step, [zero] * (rows * cols))
        for r in range(rows):
            for j in range(cols):
                total = b.call(reduce, [ir.Constant(_F32, 0.0), accs[r * cols + j]], fastmath=("reassoc",))
                index = b.add(b.mul(b.add(row0, _c(r)), _c(c.row)), b.add(col0, _c(j)))
                b.store(total, b.gep(c.ptr, [index], source_etype=_F32), align=4)

    def cols_of(row0: ir.Value, rows: int) -> None:
        """The column tiles of one row tile (its ``A`` rows stay in cache, ``B^T`` streams)."""
        full, rest = divmod(n, DOT_COLS)
        if full:

            def col_tile(j: ir.Value, _: list) -> list:
                tile(row0, b.mul(j, _c(DOT_COLS)), rows, DOT_COLS)
                return []

            kb.loops.run(full, col_tile)
        if rest:
            tile(row0, _c(full * DOT_COLS), rows, rest)

    full_rows, rest_rows = divmod(m, DOT_ROWS)
    if full_rows:

        def row_tile(i: ir.Value, _: list) -> list:
            cols_of(b.mul(i, _c(DOT_ROWS)), DOT_ROWS)
            return []

        kb.loops.run(full_rows, row_tile)
    if rest_rows:
        cols_of(_c(full_rows * DOT_ROWS), rest_rows)
    return True


def _load(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, vec: ir.VectorType) -> ir.Value:
    return b.load(b.gep(ptr, [index], source_etype=_F32), typ=vec, align=4)


def _store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, index: ir.Value) -> None:
    b.store(value, b.gep(ptr, [index], source_etype=_F32), align=4)


__all__ = [
    "Operand",
    "applies",
    "applies_nt",
    "applies_packed",
    "emit_gemm",
    "emit_shared_gemm",
    "gemm_kernel",
    "emit_gemm_nt",
    "emit_gemm_packed",
    "emit_pack",
    "enabled",
    "lanes",
    "packed_floats",
    "panel",
]

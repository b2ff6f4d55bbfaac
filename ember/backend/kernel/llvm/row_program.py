"""The LLVM printer of :class:`~ember.backend.kernel.steps.RowProgram`: kernels whose
sizes are arguments, walked row by row with several passes over each row.

One function per program (see :class:`RowProgram` for its arguments): a counted loop
over the rows (:meth:`~ember.backend.kernel.llvm.loops.Loops.count`, a run-time trip
count), and in it one counted loop per pass over the columns. Each expression is
computed at the outermost level it can be: at entry (constants, scalar arguments,
sizes), once per row before the pass that first needs it (reductions' results,
per-row loads), or per element. The elementwise ops are the kernel IR's
(:class:`~ember.backend.kernel.llvm.ops.OpEmitter`, the op table's functions).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import I32, I64, MathLib, const, kernel_function, mem_type, reg_type
from ember.backend.kernel.llvm.ops import OpEmitter
from ember.backend.kernel.steps import Pass, Reduction, RowProgram, RowStore, RowView
from ember.backend.ops import ReduceOp

_REASSOC = ("reassoc",)
_F32 = np.dtype(np.float32)
_ENTRY, _ROW, _ELEMENT = 0, 1, 2


def _level(e: Expr, memo: dict[int, int]) -> int:
    """Where ``e`` varies: at entry, per row, or per element."""
    hit = memo.get(id(e))
    if hit is not None:
        return hit
    if e.kind == "load":
        view = e.args[0]
        out = _ELEMENT if view.col_step else (_ROW if view.row_cols or view.row_step else _ENTRY)
    elif e.kind == "acc":
        out = _ROW
    else:
        out = max((_level(a, memo) for a in e.args if type(a) is Expr), default=_ENTRY)
    memo[id(e)] = out
    return out


class RowPrinter:
    """Prints row programs into one module (see the module docstring)."""

    def __init__(self, module: ir.Module, vector_width: int | None = None):
        self.module = module
        self.math = MathLib(module)
        self.ops = OpEmitter(self.math)
        self.vector_width = vector_width

    def print(self, program: RowProgram) -> None:
        _Function(self, program).emit()


class _Function:
    """One program's function being built."""

    def __init__(self, printer: RowPrinter, program: RowProgram):
        self.printer = printer
        self.ops = printer.ops
        self.program = program
        ptr = ir.PointerType()
        sizes = [I64, I64] if program.by_rows else [I64]
        types = [ptr] * len(program.buffers) + sizes + [reg_type(d) for d in program.scalars]
        fn = kernel_function(printer.module, program.name, types, printer.vector_width)
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = list(fn.args)
        n = len(program.buffers)
        self.buffers = args[:n]
        self.sizes = args[n : n + len(sizes)] if program.by_rows else [ir.Constant(I64, 1), args[n]]
        self.scalars = args[n + len(sizes) :]
        self.loops = Loops(self.b)
        self._r: ir.Value = ir.Constant(I64, 0)  # the row index, in the row loop
        self.levels: dict[int, int] = {}
        self.entry: dict[int, ir.Value] = {}  # values computed at entry
        self.row: dict[int, ir.Value] = {}  # this row's values
        self.accs: dict[tuple[int, int], ir.Value] = {}  # this row's reductions' results
        self.row_bases: dict[tuple[int, int, int], ir.Value] = {}  # this row's start per buffer and row stride

    # ---------------------------------------------------------------- values
    def value(self, e: Expr, element: dict[int, ir.Value], c: ir.Value | None) -> ir.Value:
        """``e`` at column ``c`` (``None`` above the element level), memoised at its level."""
        level = _level(e, self.levels)
        memo = self.entry if level == _ENTRY else self.row if level == _ROW else element
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        b, kind = self.b, e.kind
        if kind == "load":
            out = self._load(e, c)
        elif kind == "const":
            out = const(e.dtype, e.op)
        elif kind == "scalar":
            out = self.scalars[e.op]
        elif kind == "size":
            out = self.sizes[e.op]
        elif kind == "acc":
            out = self.accs[e.op]
        else:
            args = [self.value(a, element, c) if type(a) is Expr else None for a in e.args]
            out = self.ops.apply(b, e, args)
        memo[id(e)] = out
        return out

    def _base(self, buffer: int, view: RowView) -> ir.Value:
        """The address of this row's start in ``buffer`` for ``view``'s row stride
        (computed once per row; the column offset goes with the column index)."""
        key = (buffer, view.row_cols, view.row_step)
        hit = self.row_bases.get(key)
        if hit is None:
            base = self.buffers[buffer]
            if not (view.row_cols or view.row_step):
                hit = base
            else:
                b, cols = self.b, self.sizes[1]
                stride: ir.Value = ir.Constant(I64, view.row_step)
                if view.row_cols:
                    scaled = cols if view.row_cols == 1 else b.mul(cols, ir.Constant(I64, view.row_cols))
                    stride = scaled if not view.row_step else b.add(scaled, stride)
                t = mem_type(self.program.buffers[buffer])
                hit = b.gep(base, [b.mul(self._r, stride)], source_etype=t)
            self.row_bases[key] = hit
        return hit

    def _address(self, buffer: int, view: RowView, c: ir.Value | None) -> ir.Value:
        b = self.b
        base = self._base(buffer, view)
        index: ir.Value | None = None
        if view.col_step:
            assert c is not None, "an element's value is computed in a column loop"
            index = c if view.col_step == 1 else b.mul(c, ir.Constant(I64, view.col_step))
        if view.offset_cols:
            shift = b.mul(self.sizes[1], ir.Constant(I64, view.offset_cols))
            index = shift if index is None else b.add(shift, index)
        if index is None:
            return base
        return b.gep(base, [index], source_etype=mem_type(self.program.buffers[buffer]))

    def _load(self, e: Expr, c: ir.Value | None) -> ir.Value:
        dtype = self.program.buffers[e.op]
        assert dtype == e.dtype and dtype.kind in "fi", "row programs load ints and floats as stored"
        return self.b.load(self._address(e.op, e.args[0], c), typ=mem_type(dtype), align=dtype.itemsize)

    def _store(self, store: RowStore, element: dict[int, ir.Value], c: ir.Value | None) -> None:
        value = self.value(store.expr, element, c)
        dtype = self.program.buffers[store.buffer]
        self.b.store(value, self._address(store.buffer, store.view, c), align=dtype.itemsize)

    def _hoist(self, exprs: list[Expr]) -> None:
        """Computes the entry- and row-level nodes of ``exprs`` now (so that they
        dominate every later use in the row)."""
        for expr in exprs:
            for node in expr.walk():
                if _level(node, self.levels) < _ELEMENT:
                    self.value(node, {}, None)
                elif node.kind == "load":
                    self._base(node.op, node.args[0])

    # ---------------------------------------------------------------- reductions
    def _key(self, v: ir.Value) -> ir.Value:
        """An int32 key ordered as the float32 ``v`` (see :class:`RowProgram`)."""
        b = self.b
        bits = b.bitcast(v, I32)
        flip = b.and_(b.ashr(bits, ir.Constant(I32, 31)), ir.Constant(I32, 0x7FFFFFFF))
        return b.xor(bits, flip)

    def _from_key(self, key: ir.Value) -> ir.Value:
        b = self.b
        flip = b.and_(b.ashr(key, ir.Constant(I32, 31)), ir.Constant(I32, 0x7FFFFFFF))
        return b.bitcast(b.xor(key, flip), reg_type(_F32))

    def _init(self, r: Reduction) -> ir.Value:
        if r.op == ReduceOp.SUM:
            return const(r.dtype, 0)
        if r.op == ReduceOp.MAX and r.dtype == _F32:
            return ir.Constant(I32, -0x80000000)
        raise NotImplementedError(f"a row program's {r.op} of {r.dtype}")

    def _combine(self, r: Reduction, acc: ir.Value, x: ir.Value) -> ir.Value:
        b = self.b
        if r.op == ReduceOp.SUM:
            return b.fadd(acc, x, flags=_REASSOC) if r.dtype.kind == "f" else b.add(acc, x)
        key = self._key(x)
        return b.select(b.icmp_signed(">", key, acc), key, acc)

    # ---------------------------------------------------------------- loops
    def _pass(self, index: int, step: Pass) -> None:
        b = self.b
        self._hoist(step.order + [r.expr for r in step.reductions] + [s.expr for s in step.stores])
        for store in step.stores:
            self._base(store.buffer, store.view)
        cols = self.sizes[1]

        def body(c: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            element: dict[int, ir.Value] = {}
            for value in step.order:
                self.value(value, element, c)
            new = [self._combine(r, acc, self.value(r.expr, element, c)) for r, acc in zip(step.reductions, carried)]
            for store in step.stores:
                self._store(store, element, c)
            return new

        def run() -> None:
            finals = self.loops.count(cols, body, [self._init(r) for r in step.reductions])
            for k, (r, acc) in enumerate(zip(step.reductions, finals)):
                self.accs[(index, k)] = self._from_key(acc) if r.op == ReduceOp.MAX else acc

        if step.when is None:
            run()
            return
        assert not step.reductions, "a conditional pass's results would not reach later passes"
        with b.if_then(self.value(step.when, {}, None)):
            run()

    def emit(self) -> None:
        program, b = self.program, self.b
        exprs = [r.expr for p in program.passes for r in p.reductions]
        exprs += [s.expr for p in program.passes for s in p.stores] + [s.expr for s in program.row_stores]
        exprs += [p.when for p in program.passes if p.when is not None]
        for expr in exprs:  # values of the whole call, before the loops
            for node in expr.walk():
                if _level(node, self.levels) == _ENTRY:
                    self.value(node, {}, None)

        def row(r: ir.Value, _: list) -> list:
            self._r = r
            self.row, self.accs, self.row_bases = {}, {}, {}
            self._hoist([p.when for p in program.passes if p.when is not None])
            for index, step in enumerate(program.passes):
                self._pass(index, step)
            for store in program.row_stores:
                self._store(store, {}, None)
            return []

        if program.by_rows:
            self.loops.count(self.sizes[0], row)
        else:
            row(ir.Constant(I64, 0), [])
        b.ret_void()


def print_programs(module: ir.Module, programs: list[RowProgram], vector_width: int | None = None) -> RowPrinter:
    """Prints ``programs`` into ``module``; returns the printer (its math library)."""
    printer = RowPrinter(module, vector_width)
    for program in programs:
        printer.print(program)
    return printer


__all__ = ["RowPrinter", "print_programs"]

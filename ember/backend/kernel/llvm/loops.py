"""Loop nests in LLVM IR: counted loops, a kernel's simplified iteration space, and
the emitter that turns one :class:`~ember.backend.kernel.steps.Kernel` into loops.

A kernel's space is simplified first (:func:`ember.backend.kernel.space.simplify`,
which the CUDA C printer shares): size-1 dims are dropped and neighbouring dims that
every access walks as one run are merged, so a dense elementwise kernel is one flat
loop. Loop-invariant subexpressions (constants, run-time scalars, one-element
loads) are computed once before the loops. A reduction keeps its dim apart: along
the innermost dim its accumulators live in registers (float32 sums accumulate in
float64, reassociated so they vectorise); along an outer dim they accumulate a row
in scratch memory, which vectorises over the inner dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.kernel.exprs import ACCESSES, Expr
from ember.backend.kernel.llvm import philox, philox_fill
from ember.backend.kernel.llvm.mathlib import F64, I8, I64, REDUCE_FLAGS, MathLib, const, mem_type
from ember.backend.kernel.llvm.ops import OpEmitter
from ember.backend.kernel.space import Space, simplify
from ember.backend.kernel.steps import Kernel
from ember.backend.kernel.views import View, size_of
from ember.backend.ops import ReduceOp

_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


def _acc_dtype(op: ReduceOp, src: np.dtype, out: np.dtype) -> np.dtype:
    """The accumulator's dtype: float64 for float sums, the result's otherwise."""
    if op in (ReduceOp.SUM, ReduceOp.MEAN) and src.kind == "f":
        return _F64
    if op in (ReduceOp.ANY, ReduceOp.ALL):
        return _BOOL
    return out


def _identity(op: ReduceOp, dtype: np.dtype) -> Any:
    kind = dtype.kind
    if op in (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.ANY):
        return 0
    if op in (ReduceOp.PROD, ReduceOp.ALL):
        return 1
    if kind == "f":
        return -math.inf if op == ReduceOp.MAX else math.inf
    if kind == "b":
        return 0 if op == ReduceOp.MAX else 1
    bits = dtype.itemsize * 8
    if kind == "u":
        return 0 if op == ReduceOp.MAX else (1 << bits) - 1
    return -(1 << (bits - 1)) if op == ReduceOp.MAX else (1 << (bits - 1)) - 1


class Loops:
    """Counted loops with carried values, in a function being built."""

    def __init__(self, builder: ir.IRBuilder):
        self.b = builder

    def run(
        self,
        n: int | ir.Value,
        body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
        carry: list[ir.Value] | None = None,
    ) -> list[ir.Value]:
        """Emits ``for i in range(n)``; ``body(i, carried) -> new carried``; returns the
        carried values after the loop. ``n`` (a constant or an ``i64`` value) is at least 1."""
        b = self.b
        head = b.function.append_basic_block("loop")
        done = b.function.append_basic_block("done")
        b.branch(head)
        bound = ir.Constant(I64, n) if isinstance(n, int) else n
        new, _, _ = self._loop(head, done, body, carry or [], lambda step: b.icmp_unsigned("<", step, bound))
        return new

    def count(
        self,
        count: ir.Value,
        body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
        carry: list[ir.Value] | None = None,
    ) -> list[ir.Value]:
        """:meth:`run` for a run-time ``count`` (an ``i64`` value, maybe 0 or negative:
        then the body never runs and the carried values keep their initial ones)."""
        b = self.b
        carry = carry or []
        head = b.append_basic_block("loop")
        done = b.append_basic_block("done")
        b.cbranch(b.icmp_signed("<=", count, ir.Constant(I64, 0)), done, head)
        new, pre, latch = self._loop(head, done, body, carry, lambda step: b.icmp_signed("<", step, count))
        results = []
        for init, value in zip(carry, new):
            merged = b.phi(init.type)
            merged.add_incoming(init, pre)
            merged.add_incoming(value, latch)
            results.append(merged)
        return results

    def _loop(
        self,
        head: ir.Block,
        done: ir.Block,
        body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
        carry: list[ir.Value],
        more: Callable[[ir.Value], ir.Value],
    ) -> tuple[list[ir.Value], ir.Block, ir.Block]:
        """The loop's header and latch, entered from the current block (which the caller
        has branched to ``head``): the index and carried values as phis, ``body``, the
        step and ``more(step)`` as the back edge's condition; positioned at ``done``.
        Returns the new carried values, the entry block and the latch block."""
        b = self.b
        pre = b.block
        b.position_at_end(head)
        index = b.phi(I64, "i")
        index.add_incoming(ir.Constant(I64, 0), pre)
        phis = []
        for value in carry:
            phi = b.phi(value.type)
            phi.add_incoming(value, pre)
            phis.append(phi)
        new = body(index, list(phis))
        step = b.add(index, ir.Constant(I64, 1))
        latch = b.block
        index.add_incoming(step, latch)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, latch)
        b.cbranch(more(step), head, done)
        b.position_at_end(done)
        return list(new), pre, latch

    def nest(
        self,
        sizes: list[int],
        body: Callable[[list[ir.Value]], None],
        prefix: list[ir.Value] | None = None,
        extent: ir.Value | None = None,
    ) -> None:
        """Nested loops over ``sizes`` (outermost first); ``body(indices)``. A given
        ``extent`` (an ``i64`` value equal to ``sizes[0]``) bounds the outermost loop."""
        prefix = list(prefix or [])
        if not sizes:
            body(prefix)
            return

        def inner(i: ir.Value, _: list) -> list:
            self.nest(sizes[1:], body, prefix + [i])
            return []

        self.run(sizes[0] if extent is None else extent, inner)


class KernelEmitter:
    """Emits one kernel's loop nest into a function."""

    def __init__(
        self,
        math_lib: MathLib,
        ops: OpEmitter,
        b: ir.IRBuilder,
        kernel: Kernel,
        base: dict[int, ir.Value],
        scratch: ir.Value | None,
        scalars: ir.Value,
        scalar_base: int = 0,
        extent: ir.Value | None = None,
    ):
        """``scalars`` points at run-time scalar slot ``scalar_base`` (see
        :func:`scalar_base`); ``extent``, where :func:`outer_extent` allows it, is the
        outermost loop's trip count as a value instead of a constant."""
        self.math = math_lib
        self.b = b
        self.kernel = kernel
        self.base = base
        self.scratch = scratch
        self.scalars = scalars
        self.scalar_base = scalar_base
        self.extent = extent
        self.ops = ops
        self.loops = Loops(b)
        stores = kernel.stores
        reductions = kernel.reductions
        # Every access: loads (by expression) and stores (by position), as views.
        exprs = [s.expr for s in stores] + [r.expr for r in reductions]
        self.loads: list[Expr] = []
        seen = set()
        for e in exprs:
            for node in e.walk():
                if node.kind in ACCESSES and id(node) not in seen:
                    seen.add(id(node))
                    self.loads.append(node)
        red_space = kernel.reduced_space
        self.store_views = [View.contiguous(red_space if s.reduced else kernel.space) for s in stores]
        views = [ld.args[0] for ld in self.loads] + self.store_views
        self.space = simplify(tuple(kernel.space), kernel.dim, views)
        assert extent is None or (self.space.sizes and self.space.red != 0), (
            "a run-time extent where outer_extent allows"
        )
        self.n_loads = len(self.loads)
        self.load_index = {id(e): i for i, e in enumerate(self.loads)}
        self.invariant: dict[int, ir.Value] = {}

    # -------------------------------------------------------------- expressions
    def is_invariant(self, e: Expr, memo: dict[int, bool]) -> bool:
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        if e.kind in ACCESSES:
            out = (e.args[0].shape == () or e.args[0].size == 1) and all(self.is_invariant(a, memo) for a in e.args[1:])
        elif e.kind == "acc":
            out = False
        else:
            out = all(self.is_invariant(a, memo) for a in e.args if type(a) is Expr)
        memo[id(e)] = out
        return out

    def address(self, access: int, indices: list[ir.Value]) -> ir.Value:
        b = self.b
        total: ir.Value = ir.Constant(I64, self.space.offsets[access])
        for index, stride in zip(indices, self.space.strides[access]):
            if stride and index is not None:
                total = b.add(total, b.mul(index, ir.Constant(I64, stride)))
        return total

    def value(
        self, e: Expr, indices: list[ir.Value], memo: dict[int, ir.Value], accs: list[ir.Value] | None = None
    ) -> ir.Value:
        hit = self.invariant.get(id(e))
        if hit is not None:
            return hit
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        b = self.b
        kind = e.kind
        if kind == "load":
            view = e.args[0]
            if view.shape == () or view.size == 1:
                offset = ir.Constant(I64, view.offset)
            else:
                offset = self.address(self._load_index(e), indices)
            out = self._load(self.base[e.op], offset, e.dtype)
        elif kind == "random":
            raise AssertionError("a draw is stored by a kernel of its own, one call of the fill (see filled_draw)")
        elif kind == "const":
            out = const(e.dtype, e.op)
        elif kind == "scalar":
            slot = b.gep(self.scalars, [ir.Constant(I64, e.op - self.scalar_base)], source_etype=F64)
            out = self.ops.from_double(b, b.load(slot, typ=F64, align=8), e.dtype)
        elif kind == "acc":
            assert accs is not None, "an epilogue reads a reduction's result: the caller gives the accumulators"
            out = accs[e.op[1]]
        else:
            args = [self.value(a, indices, memo, accs) if type(a) is Expr else None for a in e.args]
            out = self.ops.apply(b, e, args)
        memo[id(e)] = out
        return out

    def _load_index(self, e: Expr) -> int:
        return self.load_index[id(e)]

    def _load(self, base: ir.Value, offset: ir.Value, dtype: np.dtype) -> ir.Value:
        b = self.b
        t = mem_type(dtype)
        value = b.load(b.gep(base, [offset], source_etype=t), typ=t, align=dtype.itemsize)
        if dtype.kind == "b":
            value = b.icmp_unsigned("!=", value, ir.Constant(I8, 0))
        return value

    def _store(self, buffer: int, offset: ir.Value, value: ir.Value, dtype: np.dtype) -> None:
        b = self.b
        t = mem_type(dtype)
        if dtype.kind == "b":
            value = b.zext(value, I8)
        b.store(value, b.gep(self.base[buffer], [offset], source_etype=t), align=dtype.itemsize)

    def store(
        self,
        position: int,
        indices: list[ir.Value],
        memo: dict,
        accs: list | None = None,
        value: ir.Value | None = None,
    ) -> None:
        s = self.kernel.stores[position]
        if value is None:
            value = self.value(s.expr, indices, memo, accs)
        self._store(s.buffer, self.address(self.n_loads + position, indices), value, s.expr.dtype)

    def store_all(self, positions: Any, indices: list[ir.Value], memo: dict, accs: list | None = None) -> None:
        """Stores ``positions``: every value first, then the stores, since a store may
        write a buffer the kernel also reads (a donated input, see
        :func:`ember.backend.fusion.memory.donate`)."""
        values = [self.value(self.kernel.stores[s].expr, indices, memo, accs) for s in positions]
        for s, value in zip(positions, values):
            self.store(s, indices, memo, value=value)

    # -------------------------------------------------------------- loop nests
    def emit(self) -> None:
        kernel = self.kernel
        draw = filled_draw(kernel)
        if draw is not None:
            self.fill(draw)
            return
        memo: dict[int, bool] = {}
        # Loop-invariant subexpressions, once, before the loops.
        for e in [s.expr for s in kernel.stores] + [r.expr for r in kernel.reductions]:
            for node in e.walk():
                if node.kind not in ("const",) and self.is_invariant(node, memo) and id(node) not in self.invariant:
                    self.invariant[id(node)] = self.value(node, [], {})
        if kernel.dim is None:
            stores = range(len(kernel.stores))

            def body(indices: list[ir.Value]) -> None:
                # Every value first, then the stores: a store may write a buffer the
                # kernel also reads (a donated input, see fusion.memory.donate).
                self.store_all(stores, indices, {})

            self.loops.nest(self.space.sizes, body, extent=self.extent)
            return
        red = self.space.red
        if red == len(self.space.sizes) - 1:
            self.registers()
        else:
            self.rows()

    def fill(self, draw: Expr) -> None:
        """A kernel that stores a draw (see :func:`filled_draw`): one call of the shared
        Philox fill (:mod:`ember.backend.kernel.llvm.philox_fill`), which flex's eager
        draws run too."""
        b = self.b
        kind, a, c = draw.op
        fill = philox_fill.fill_kernel(kind, draw.dtype).declare(b.module)
        key_lo, key_hi, counter_lo, counter_hi = (self.value(x, [], {}) for x in draw.args[1:])
        thirty_two = ir.Constant(I64, 32)
        key = b.or_(b.shl(key_hi, thirty_two), key_lo)
        counter = b.or_(b.shl(counter_hi, thirty_two), counter_lo)
        n: ir.Value = ir.Constant(I64, size_of(self.kernel.space))
        if self.extent is not None:  # the outermost trip count is an argument
            inner = size_of(tuple(self.space.sizes[1:]))
            n = b.mul(self.extent, ir.Constant(I64, inner)) if inner != 1 else self.extent
        params = [ir.Constant(F64, p) for p in philox_fill.parameters(kind, a, c, draw.dtype)]
        b.call(fill, [self.base[self.kernel.stores[0].buffer], n, key, counter, *params])

    def _reductions(self) -> list[int]:
        """The reductions some stored value reads (others are dead)."""
        used = set()
        for s in self.kernel.stores:
            for node in s.expr.walk():
                if node.kind == "acc":
                    used.add(node.op[1])
        return sorted(used)

    def combine(self, op: ReduceOp, acc: ir.Value, x: ir.Value, src: np.dtype, acc_dtype: np.dtype) -> ir.Value:
        b = self.b
        m = self.math
        if op in (ReduceOp.ANY, ReduceOp.ALL):
            x = m.nonzero(b, x)
            return b.or_(acc, x) if op == ReduceOp.ANY else b.and_(acc, x)
        x = self.ops.cast(b, x, src, acc_dtype)
        kind = acc_dtype.kind
        if op in (ReduceOp.SUM, ReduceOp.MEAN):
            return b.fadd(acc, x, flags=REDUCE_FLAGS) if kind == "f" else b.add(acc, x)
        if op == ReduceOp.PROD:
            return b.fmul(acc, x, flags=REDUCE_FLAGS) if kind == "f" else b.mul(acc, x)
        if kind == "f":
            return m.fmax(b, acc, x) if op == ReduceOp.MAX else m.fmin(b, acc, x)
        if kind == "b":
            return b.or_(acc, x) if op == ReduceOp.MAX else b.and_(acc, x)
        cmp = b.icmp_signed if kind == "i" else b.icmp_unsigned
        return b.select(cmp(">" if op == ReduceOp.MAX else "<", acc, x), acc, x)

    def finish(self, index: int, acc: ir.Value) -> ir.Value:
        """An accumulator as the reduction's result (mean divides by the count)."""
        r = self.kernel.reductions[index]
        src = r.expr.dtype
        acc_dtype = _acc_dtype(r.op, src, r.dtype)
        if r.op == ReduceOp.MEAN:
            acc = self.b.fdiv(acc, ir.Constant(acc.type, float(r.count)))
        return self.ops.cast(self.b, acc, acc_dtype, r.dtype)

    def _full_stores(self) -> list[int]:
        return [i for i, s in enumerate(self.kernel.stores) if not s.reduced]

    def _red_stores(self) -> list[int]:
        return [i for i, s in enumerate(self.kernel.stores) if s.reduced]

    def registers(self) -> None:
        """Reduction along the innermost dim: accumulators in registers."""
        sizes = self.space.sizes
        used = self._reductions()
        reductions = self.kernel.reductions
        full, reduced = self._full_stores(), self._red_stores()

        def outer(indices: list[ir.Value]) -> None:
            inits = []
            for j in used:
                r = reductions[j]
                acc_dtype = _acc_dtype(r.op, r.expr.dtype, r.dtype)
                inits.append(const(acc_dtype, _identity(r.op, acc_dtype)))

            def inner(i: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                point = indices + [i]
                m: dict[int, ir.Value] = {}
                new = []
                for j, acc in zip(used, accs):
                    r = reductions[j]
                    x = self.value(r.expr, point, m)
                    new.append(self.combine(r.op, acc, x, r.expr.dtype, _acc_dtype(r.op, r.expr.dtype, r.dtype)))
                self.store_all(full, point, m)
                return new

            finals = self.loops.run(sizes[-1], inner, inits)
            values = [None] * len(reductions)
            for j, acc in zip(used, finals):
                values[j] = self.finish(j, acc)
            point = indices + [None]
            m: dict[int, ir.Value] = {}
            self.store_all(reduced, point, m, values)

        self.loops.nest(sizes[:-1], outer, extent=self.extent)

    def rows(self) -> None:
        """Reduction along an outer dim: a row of accumulators per reduction in scratch."""
        b = self.b
        sizes, red = self.space.sizes, self.space.red
        assert red is not None, "the kernel reduces along a dim, which simplify keeps"
        outer_sizes, inner_sizes = sizes[:red], sizes[red + 1 :]
        row = size_of(tuple(inner_sizes))
        used = self._reductions()
        reductions = self.kernel.reductions
        full, reduced = self._full_stores(), self._red_stores()
        acc_types = {j: _acc_dtype(reductions[j].op, reductions[j].expr.dtype, reductions[j].dtype) for j in used}
        # Each reduction's row, 8-byte slots.
        rows = {j: b.gep(self.scratch, [ir.Constant(I64, n * row * 8)], source_etype=I8) for n, j in enumerate(used)}

        def linear(indices: list[ir.Value]) -> ir.Value:
            total: ir.Value = ir.Constant(I64, 0)
            step = 1
            for index, size in zip(reversed(indices), reversed(inner_sizes)):
                total = b.add(total, b.mul(index, ir.Constant(I64, step)))
                step *= size
            return total

        def slot(j: int, indices: list[ir.Value]) -> ir.Value:
            return b.gep(rows[j], [linear(indices)], source_etype=mem_type(acc_types[j]))

        def outer(o: list[ir.Value]) -> None:
            def init(k: list[ir.Value]) -> None:
                for j in used:
                    value = const(acc_types[j], _identity(reductions[j].op, acc_types[j]))
                    if acc_types[j].kind == "b":
                        value = b.zext(value, I8)
                    b.store(value, slot(j, k))

            self.loops.nest(inner_sizes, init)

            def over_dim(t: ir.Value, _: list) -> list:
                def update(k: list[ir.Value]) -> None:
                    point = o + [t] + k
                    m: dict[int, ir.Value] = {}
                    for j in used:
                        r = reductions[j]
                        ptr = slot(j, k)
                        acc = b.load(ptr, typ=mem_type(acc_types[j]))
                        if acc_types[j].kind == "b":
                            acc = b.icmp_unsigned("!=", acc, ir.Constant(I8, 0))
                        new = self.combine(r.op, acc, self.value(r.expr, point, m), r.expr.dtype, acc_types[j])
                        if acc_types[j].kind == "b":
                            new = b.zext(new, I8)
                        b.store(new, ptr)
                    self.store_all(full, point, m)

                self.loops.nest(inner_sizes, update)
                return []

            self.loops.run(sizes[red], over_dim)

            def epilogue(k: list[ir.Value]) -> None:
                values = [None] * len(reductions)
                for j in used:
                    acc = b.load(slot(j, k), typ=mem_type(acc_types[j]))
                    if acc_types[j].kind == "b":
                        acc = b.icmp_unsigned("!=", acc, ir.Constant(I8, 0))
                    values[j] = self.finish(j, acc)
                m: dict[int, ir.Value] = {}
                self.store_all(reduced, o + [None] + k, m, values)

            self.loops.nest(inner_sizes, epilogue)

        self.loops.nest(outer_sizes, outer, extent=self.extent)


def _space(kernel: Kernel) -> Space:
    """A kernel's simplified iteration space (as :class:`KernelEmitter` loops over it)."""
    views = [e.args[0] for s in kernel.stores for e in s.expr.walk() if e.kind in ACCESSES]
    views += [e.args[0] for r in kernel.reductions for e in r.expr.walk() if e.kind in ACCESSES]
    views += [View.contiguous(kernel.reduced_space if s.reduced else kernel.space) for s in kernel.stores]
    return simplify(tuple(kernel.space), kernel.dim, views)


def outer_extent(kernel: Kernel) -> int | None:
    """The trip count of a kernel's outermost loop, which its function may take as an
    argument (so kernels that differ only in it share one function), or ``None``
    where the kernel reduces along that dim. Only that loop's bound reads it: the
    strides and offsets are those of the inner dims and the views, a reduction along
    an inner dim (and its scratch row) spans inner dims only, and each element's
    value does not depend on how many there are, so the results are the same."""
    space = _space(kernel)
    if not space.sizes or space.red == 0:
        return None
    return space.sizes[0]


def filled_draw(kernel: Kernel) -> Expr | None:
    """The draw a kernel stores whole, in order (a uniform or bernoulli draw of float32
    or float64: the scheduler gives each draw such a kernel), which it runs as one call
    of the shared fill; else ``None``."""
    if kernel.reductions or len(kernel.stores) != 1 or kernel.stores[0].reduced:
        return None
    expr = kernel.stores[0].expr
    if expr.kind != "random" or expr.dtype not in philox_fill.DTYPES or expr.op[0] not in philox.KINDS:
        return None
    view = expr.args[0]
    if view.offset != 0 or view.size != size_of(kernel.space) or not view.is_contiguous():
        return None
    return expr


def scalar_base(kernel: Kernel) -> int:
    """The lowest run-time scalar slot a kernel reads (0 when it reads none): its
    function is given a pointer to that slot, and reads the others relative to it, so
    kernels that differ only in where their scalars are share one function."""
    slots = [e.op for x in kernel.stores for e in x.expr.walk() if e.kind == "scalar"]
    slots += [e.op for r in kernel.reductions for e in r.expr.walk() if e.kind == "scalar"]
    return min(slots, default=0)


def scratch_bytes(kernel: Kernel) -> int:
    """Scratch a kernel needs: a row of 8-byte accumulators per reduction when it
    reduces along a dim that is not innermost (after simplification)."""
    if kernel.dim is None or not kernel.reductions:
        return 0
    space = _space(kernel)
    red = space.red
    assert red is not None, "the kernel reduces along a dim, which simplify keeps"
    if red == len(space.sizes) - 1:
        return 0
    row = size_of(tuple(space.sizes[red + 1 :]))
    return row * 8 * len(kernel.reductions)


__all__ = ["KernelEmitter", "Loops", "filled_draw", "outer_extent", "scalar_base", "scratch_bytes"]

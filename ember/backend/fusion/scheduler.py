"""Fusion analysis: a lowered graph grouped into kernels, matmuls and eager calls.

This is the target-independent half of every lowering (LLVM on the CPU today;
WGSL and CUDA C use the same schedule). :func:`schedule` walks the nodes of an
expanded graph (:mod:`ember.backend.fusion.primitive_graph`) in program order and produces
a list of *steps*:

* :class:`Kernel`: one loop nest over an iteration space. Its outputs are
  expression trees (:mod:`ember.backend.kernel.exprs`) whose leaves read buffers
  through strided views (:mod:`ember.backend.kernel.views`), constants and
  run-time scalars.
  A kernel may carry reductions along one dim: then its *prologue* (expressions
  over the full space, such as ``x * x`` or ``exp(x - max)``) feeds accumulators,
  and its *epilogue* (expressions over the reduced space, such as ``log(sum)``)
  reads them; values of both spaces may be stored, all in one pass.
* :class:`Matmul`: a (batched) matrix product of two strided operands.
* :class:`Call`: a node the target does not lower, run by the eager backend.

(The step types live in :mod:`ember.backend.fusion.steps`.)

Grouping. Each elementwise node joins the open kernel of its operands when its
iteration space has the same element count (row-major "flat identity": reshapes
between members cost nothing); otherwise the operand's kernel is closed and the
value stored. A kernel is closed (sealed) as soon as a value of it is read by a
node outside it, so that kernels, matmuls and calls run in a valid order; the
values that are stored are exactly those read outside the kernel or returned.
Layout ops (reshape, permute, expand, slice, flip) become views of stored values;
a reshape of a value inside an open kernel is free. Element-count-one expressions
without reductions, and constants, are *free*: inlined into every reader, where a
loop hoists them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.fusion.graph import Node, Ref
from ember.backend.fusion.primitive_graph import Expanded
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.steps import Call, Library, Schedule, Step, Target
from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.steps import Buffer, Kernel, Matmul, Reduction, Store
from ember.backend.kernel.views import View, size_of

#: Deepest expression a kernel inlines; a longer chain of ops is stored and read back
#: (it bounds the recursion of analysis and code generation, and costs one pass per
#: this many ops).
MAX_DEPTH = 200
_TWO_32 = 1 << 32
_I64 = np.dtype(np.int64)
LAYOUT_OPS = frozenset({"reshape", "permute", "expand", "slice", "flip"})
ELEMENTWISE_OPS = frozenset({"unary", "binary", "where", "clamp", "cast", "full"})


class _Group:
    """An open (or sealed) kernel under construction."""

    __slots__ = ("space", "dim", "reductions", "members", "values", "sealed", "order")

    def __init__(self, space: tuple[int, ...], order: int):
        self.space = space
        self.dim: int | None = None
        self.reductions: list[Reduction] = []
        self.members: set[int] = set()  # node indices
        self.values: dict[int, tuple[Expr, bool]] = {}  # value -> (expr, reduced)
        self.sealed = False
        self.order = order

    def space_of(self, reduced: bool) -> tuple[int, ...]:
        if not reduced or self.dim is None:
            return self.space
        return self.space[: self.dim] + (1,) + self.space[self.dim + 1 :]


# A value's location: ("buf", buffer, view) | ("free", expr) | ("virt", group, expr, reduced)
Loc = tuple


class _Scheduler:
    """One pass over the nodes, in program order (see the module docstring)."""

    def __init__(self, expanded: Expanded, target: Target):
        self.expanded = expanded
        self.graph = expanded.graph
        self.target = target
        self.avals = self.graph.avals
        self.x = Exprs()
        self.steps: list[Step] = []
        self.buffers: list[Buffer] = []
        self.loc: dict[int, Loc] = {}
        self.groups: list[_Group] = []
        self.open: list[_Group] = []
        self.scalar_slots: dict[Any, int] = {}
        self.producer: dict[int, int] = {}
        self.consumers: dict[int, list[int]] = {}
        for i, node in enumerate(self.graph.nodes):
            for r in set(node.refs()):
                self.consumers.setdefault(r, []).append(i)
        self.returned = set(self.graph.outputs)
        self.layout_out: dict[int, int] = {}  # layout node index -> its output value

    # -------------------------------------------------------------- buffers
    def new_buffer(self, shape: tuple[int, ...], dtype: np.dtype, kind: str, value: int = -1) -> int:
        self.buffers.append(Buffer(len(self.buffers), tuple(shape), np.dtype(dtype), kind, value))
        return len(self.buffers) - 1

    def emit(self, step: Step) -> None:
        for b in step.writes():
            self.producer[b] = len(self.steps)
        self.steps.append(step)

    # -------------------------------------------------------------- scalars
    def scalar(self, value: Any, dtype: np.dtype) -> Expr:
        """A scalar argument as an expression of ``dtype``."""
        if type(value) is SymScalar:
            slot = self.scalar_slots.setdefault(value, len(self.scalar_slots))
            return self.x.make("scalar", slot, (), dtype)
        if dtype.kind == "b":
            return self.x.const(bool(value), dtype)
        if dtype.kind in "iu":
            return self.x.const(int(value), dtype)
        return self.x.const(float(value), dtype)

    # -------------------------------------------------------------- locations
    def shape(self, v: int) -> tuple[int, ...]:
        return self.avals[v].shape

    def dtype(self, v: int) -> np.dtype:
        return self.avals[v].dtype

    def materialize(self, v: int) -> tuple[int, View]:
        """The buffer and view holding ``v``, storing it first if it is not stored."""
        loc = self.loc[v]
        if loc[0] == "virt":
            self.seal(loc[1])
            loc = self.loc[v]
        elif loc[0] == "free":
            shape = self.shape(v)
            buf = self.new_buffer(shape, self.dtype(v), "temp")
            self.emit(Kernel(shape, None, [], [Store(buf, loc[1], False)]))
            loc = self.loc[v] = ("buf", buf, View.contiguous(shape))
        return loc[1], loc[2]

    def operand(self, v: int, shape: tuple[int, ...]) -> Loc:
        """``v`` read over ``shape`` (broadcast): a load expression for stored values, or
        its location when it is free or inside an open kernel."""
        loc = self.loc[v]
        if loc[0] == "buf":
            _, buf, view = loc
            if view.size == 1:
                return ("free", self.x.load(buf, View((), (), view.offset), self.dtype(v)))
            return ("load", buf, view.expand(shape))
        return loc

    def as_free(self, expr: Expr) -> Expr | None:
        """An element-count-one expression as a free one (loads read one element)."""
        if expr.has("acc"):
            return None
        return self.x.map_loads(expr, lambda e: self.x.reviewed(e, View((), (), e.args[0].offset)), {})

    # -------------------------------------------------------------- sealing
    def needed(self, v: int, group: _Group) -> bool:
        """Whether ``v`` (inside ``group``) must be stored: it is returned, or a node
        outside the kernel reads it (directly or through reshapes inside it)."""
        if v in self.returned:
            return True
        for c in self.consumers.get(v, ()):
            if c in group.members:
                continue
            out = self.layout_out.get(c)
            if (
                out is not None
                and self.loc.get(out, (None,))[0] == "virt"
                and self.loc[out][1] is group
                and self.graph.nodes[c].op == "reshape"
            ):
                if self.needed(out, group):
                    return True
                continue
            return True
        return False

    def seal(self, group: _Group) -> None:
        """Closes a kernel: stores its needed values (once per expression) and emits it."""
        if group.sealed:
            return
        group.sealed = True
        self.open.remove(group)
        stores: list[Store] = []
        stored: dict[tuple[int, bool], int] = {}
        for v, (expr, reduced) in group.values.items():
            if not self.needed(v, group):
                del self.loc[v]
                continue
            key = (id(expr), reduced)
            buf = stored.get(key)
            if buf is None:
                space = group.space_of(reduced)
                buf = stored[key] = self.new_buffer(space, expr.dtype, "temp")
                stores.append(Store(buf, expr, reduced))
            self.loc[v] = ("buf", buf, View.contiguous(self.shape(v)))
        if not stores:
            return
        kernel = Kernel(group.space, group.dim, group.reductions, stores)
        self.emit(kernel)

    # -------------------------------------------------------------- re-expressing groups
    def respace(self, group: _Group, space: tuple[int, ...]) -> bool:
        """Re-expresses a plain group's expressions over ``space`` (same element count)."""
        if group.space == space:
            return True
        memo: dict[int, Expr | None] = {}

        def reshape(load: Expr) -> Expr | None:
            view = load.args[0].reshape(space) if load.args[0].shape else None
            if load.args[0].shape == ():
                return load
            return None if view is None else self.x.reviewed(load, view)

        new = {}
        for v, (expr, reduced) in group.values.items():
            e = self.x.map_loads(expr, reshape, memo)
            if e is None:
                return False
            new[v] = (e, reduced)
        group.values = new
        group.space = space
        for v, (e, reduced) in new.items():
            self.loc[v] = ("virt", group, e, reduced)
        return True

    def read(self, loc: Loc, shape: tuple[int, ...], space: tuple[int, ...], dtype: np.dtype) -> Expr | None:
        """An operand location as an expression over ``space`` (the node's own shape is
        ``shape``, of the same element count); ``None`` if a load cannot be re-viewed."""
        kind = loc[0]
        if kind == "free":
            return loc[1]
        if kind == "virt":
            return loc[2]
        _, buf, view = loc
        if view.shape != space:
            view = view.reshape(space)
            if view is None:
                return None
        return self.x.load(buf, view, dtype)

    # -------------------------------------------------------------- nodes
    def run(self) -> Schedule:
        graph = self.graph
        for v in graph.inputs:
            buf = self.new_buffer(self.shape(v), self.dtype(v), "input", v)
            self.loc[v] = ("buf", buf, View.contiguous(self.shape(v)))
        for v in graph.consts:
            buf = self.new_buffer(self.shape(v), self.dtype(v), "const", v)
            self.loc[v] = ("buf", buf, View.contiguous(self.shape(v)))
        for i, node in enumerate(graph.nodes):
            op = node.op
            if self.target.library(graph, node):
                self.library(i, node)
            elif not self.target.lowers(graph, node):
                self.call(i, node)
            elif op in LAYOUT_OPS:
                self.layout(i, node)
            elif op == "reduce" and self.shape(node.args[1])[node.args[2]] == 1:
                # Reducing one element: the element itself, in the result's dtype.
                self.elementwise(i, Node("cast", (node.args[1], None), (), node.outs))
            elif op == "reduce":
                self.reduce(i, node)
            elif op == "matmul":
                self.matmul(i, node)
            elif op == "random":
                self.random(i, node)
            else:
                self.elementwise(i, node)
        for group in list(self.open):
            self.seal(group)
        outputs = [self.materialize(v) for v in graph.outputs]
        scalars = [None] * len(self.scalar_slots)
        for s, slot in self.scalar_slots.items():
            scalars[slot] = s
        return Schedule(graph, self.expanded, self.steps, self.buffers, outputs, scalars, self.producer)

    def call(self, i: int, node: Node) -> None:
        args: dict[int, tuple[int, View]] = {}
        for r in set(node.refs()):
            args[r] = self.materialize(r)
        outs = [self.new_buffer(self.shape(o), self.dtype(o), "call", o) for o in node.outs]
        self.emit(Call(node, self.expanded.origin[i], args, outs))
        for o, buf in zip(node.outs, outs):
            self.loc[o] = ("buf", buf, View.contiguous(self.shape(o)))

    def library(self, i: int, node: Node) -> None:
        """A node with a hand-written lowering: its operands stored densely (a view
        that is not contiguous is copied first), its outputs fresh buffers."""
        args: dict[int, tuple[int, View]] = {}
        strided = {node.args[p] for p in self.target.library_views(self.graph, node)}
        for r in dict.fromkeys(node.refs()):
            buf, view = self.materialize(r)
            if not view.is_contiguous() and r not in strided:
                dense = self.new_buffer(view.shape, self.dtype(r), "temp")
                self.emit(Kernel(view.shape, None, [], [Store(dense, self.x.load(buf, view, self.dtype(r)), False)]))
                buf, view = dense, View.contiguous(view.shape)
            args[r] = (buf, view)
        outs = [self.new_buffer(self.shape(o), self.dtype(o), "temp") for o in node.outs]
        slots = self.scalar_slots
        scalars = {a: slots.setdefault(a, len(slots)) for a in node.args if type(a) is SymScalar}
        self.emit(Library(node, args, outs, scalars))
        for o, buf in zip(node.outs, outs):
            self.loc[o] = ("buf", buf, View.contiguous(self.shape(o)))

    def layout(self, i: int, node: Node) -> None:
        op, src, arg = node.op, node.args[0], node.args[1]
        (out,) = node.outs
        self.layout_out[i] = out
        loc = self.loc[src]
        shape = self.shape(out)
        if loc[0] == "free":
            self.loc[out] = loc
            return
        if loc[0] == "virt":
            if op == "reshape":
                self.loc[out] = loc
                loc[1].values[out] = (loc[2], loc[3])
                return
            if size_of(self.shape(src)) == 1:
                free = self.as_free(loc[2])
                if free is not None:
                    self.loc[out] = ("free", free)
                    return
            self.seal(loc[1])
            loc = self.loc[src]
        _, buf, view = loc
        if op == "reshape":
            new = view.reshape(shape)
            if new is None:  # a copy: a kernel over the source's space, stored row-major
                group = self.new_group(view.shape)
                expr = self.x.load(buf, view, self.dtype(src))
                group.values[out] = (expr, False)
                self.loc[out] = ("virt", group, expr, False)
                return
        elif op == "permute":
            new = view.permute(tuple(arg))
        elif op == "expand":
            new = view.expand(tuple(arg))
        elif op == "slice":
            new = view.slice(tuple(arg))
        else:
            new = view.flip(tuple(arg))
        self.loc[out] = ("buf", buf, new)

    def new_group(self, space: tuple[int, ...]) -> _Group:
        group = _Group(tuple(space), len(self.groups))
        self.groups.append(group)
        self.open.append(group)
        return group

    def matmul(self, i: int, node: Node) -> None:
        a, b = node.args
        (out,) = node.outs
        dtype = self.dtype(out)
        shape = self.shape(out)
        work = size_of(shape) * self.shape(a)[-1]
        operands = []
        for r in (a, b):
            buf, view = self.materialize(r)
            if self.target.matmul_needs_packing(view, dtype, work):
                dense = self.new_buffer(view.shape, dtype, "temp")
                self.emit(Kernel(view.shape, None, [], [Store(dense, self.x.load(buf, view, dtype), False)]))
                buf, view = dense, View.contiguous(view.shape)
            operands.append((buf, view))
        buf = self.new_buffer(shape, dtype, "temp")
        self.emit(Matmul(operands[0], operands[1], buf, dtype))
        self.loc[out] = ("buf", buf, View.contiguous(shape))

    # -------------------------------------------------------------- elementwise
    def elementwise(self, i: int, node: Node) -> None:
        (out,) = node.outs
        shape = self.shape(out)
        count = size_of(shape)
        refs: list[int] = list(dict.fromkeys(node.refs()))
        # Operands from open kernels of another element count are stored first.
        locs: dict[int, Loc] = {}
        for r in refs:
            loc = self.operand(r, shape)
            if loc[0] == "virt" and size_of(self.shape(r)) != count:
                free = self.as_free(loc[2]) if size_of(self.shape(r)) == 1 else None
                if free is not None:
                    loc = ("free", free)
                else:
                    self.seal(loc[1])
                    loc = self.operand(r, shape)
            locs[r] = loc
        # Sealing a kernel stores its values: operands read from it are loads now.
        locs = {r: self.operand(r, shape) if loc[0] == "virt" and loc[1].sealed else loc for r, loc in locs.items()}
        groups = list(dict.fromkeys(loc[1] for loc in locs.values() if loc[0] == "virt"))
        if all(loc[0] == "free" for loc in locs.values()):
            expr = self.build(node, {r: loc[1] for r, loc in locs.items()})
            self.loc[out] = ("free", expr)
            if expr.depth >= MAX_DEPTH:
                self.materialize(out)
            return
        target, reduced = self.pick(groups, locs)
        if target is not None:
            space = target.space_of(reduced)
            if not self.join(target, groups, reduced, space):
                target = None
        if target is None:
            for g in groups:
                self.seal(g)
            locs = {r: self.operand(r, shape) for r in refs}
            target, reduced = self.new_group(shape), False
        space = target.space_of(reduced)
        # Merged kernels were re-expressed over the target's space: read them anew.
        locs = {r: self.loc[r] if loc[0] == "virt" else loc for r, loc in locs.items()}
        operands: dict[int, Expr] = {}
        for r, loc in locs.items():
            e = self.read(loc, shape, space, self.dtype(r))
            if e is None:  # a load that cannot follow the kernel's space: start over
                self.seal(target)
                return self.elementwise(i, node)
            operands[r] = e
        expr = self.build(node, operands)
        target.members.add(i)
        target.values[out] = (expr, reduced)
        self.loc[out] = ("virt", target, expr, reduced)
        if expr.depth >= MAX_DEPTH:
            self.seal(target)

    def pick(self, groups: list[_Group], locs: dict[int, Loc]) -> tuple[_Group | None, bool]:
        """The open kernel a node joins and in which space, or ``(None, False)``."""
        if not groups:
            return None, False
        with_reduction = [g for g in groups if g.reductions]
        target = with_reduction[0] if with_reduction else groups[0]
        kinds = {loc[3] for loc in locs.values() if loc[0] == "virt" and loc[1] is target}
        if len(kinds) != 1:
            return None, False
        return target, kinds.pop()

    def join(self, target: _Group, groups: list[_Group], reduced: bool, space: tuple[int, ...]) -> bool:
        """Merges the other open operand kernels into ``target`` (in the space of
        ``reduced``). Kernels that cannot merge are sealed instead."""
        for g in groups:
            if g is target:
                continue
            if g.reductions or size_of(g.space) != size_of(space) or not self.respace(g, space):
                self.seal(g)
                continue
            for v, (e, _) in g.values.items():
                target.values[v] = (e, reduced)
                self.loc[v] = ("virt", target, e, reduced)
            target.members |= g.members
            g.sealed = True
            self.open.remove(g)
        return True

    def build(self, node: Node, operands: dict[int, Expr]) -> Expr:
        """The expression of one elementwise node."""
        x = self.x
        op = node.op
        (out,) = node.outs
        out_dtype = self.dtype(out)
        args = node.args

        def arg(a: Any, dtype: np.dtype) -> Expr:
            return operands[a] if type(a) is Ref else self.scalar(a, dtype)

        if op == "full":
            return self.scalar(args[1], out_dtype)
        if op == "unary":
            return x.make("unary", args[0], (operands[args[1]],), out_dtype)
        if op == "binary":
            a = operands[args[1]]
            return x.make("binary", args[0], (a, arg(args[2], a.dtype)), out_dtype)
        if op == "where":
            return x.make(
                "where", None, (operands[args[0]], arg(args[1], out_dtype), arg(args[2], out_dtype)), out_dtype
            )
        if op == "clamp":
            v = operands[args[0]]
            low = None if args[1] is None else arg(args[1], out_dtype)
            high = None if args[2] is None else arg(args[2], out_dtype)
            return x.make("clamp", None, (v, low, high), out_dtype)
        if op == "cast":
            v = operands[args[0]]
            return v if v.dtype == out_dtype else x.make("cast", None, (v,), out_dtype)
        raise AssertionError(op)

    def random(self, i: int, node: Node) -> None:
        """A random draw the target lowers: a kernel of its own that stores it (the LLVM
        target runs it as one call of the Philox fill flex's eager draws share,
        :mod:`ember.backend.kernel.llvm.philox_fill`), which its readers load."""
        shape, distribution, _, key, counter = node.args
        (out,) = node.outs
        shape = tuple(shape)
        expr = self.x.random(
            (distribution.kind, float(distribution.a), float(distribution.b)),
            View.contiguous(shape),
            self.halves(key),
            self.halves(counter),
            self.dtype(out),
        )
        buf = self.new_buffer(shape, self.dtype(out), "temp")
        self.emit(Kernel(shape, None, [], [Store(buf, expr, False)]))
        self.loc[out] = ("buf", buf, View.contiguous(shape))

    def halves(self, value: Any) -> tuple[Expr, Expr]:
        """A 64-bit integer argument (a Philox key or counter, maybe a run-time scalar)
        as its low and high 32-bit halves: int64 expressions, which a run-time scalar
        slot (a double) holds exactly."""
        low, high = value % _TWO_32, value // _TWO_32  # a SymScalar records both
        return self.scalar(low, _I64), self.scalar(high, _I64)

    # -------------------------------------------------------------- reductions
    def reduce(self, i: int, node: Node) -> None:
        op, src, dim = node.args
        (out,) = node.outs
        space = self.shape(src)
        out_dtype = self.dtype(out)
        loc = self.operand(src, space)
        group = None
        if loc[0] == "virt":
            g, expr, reduced = loc[1], loc[2], loc[3]
            if not reduced and size_of(g.space) == size_of(space):
                if not g.reductions and g.dim is None and self.respace(g, space):
                    group = g
                    g.dim = dim
                elif g.reductions and g.space == space and g.dim == dim:
                    group = g
            if group is None:
                self.seal(g)
                loc = self.operand(src, space)
        if group is None:
            group = self.new_group(space)
            group.dim = dim
        expr = self.read(self.loc[src] if loc[0] == "virt" else loc, space, space, self.dtype(src))
        if expr is None:
            raise AssertionError("a load over its own shape always re-views")
        group.reductions.append(Reduction(op, expr, out_dtype, space[dim]))
        # The reduction's result; ``op`` is (kernel, index), unique across kernels.
        acc = self.x.make("acc", (group.order, len(group.reductions) - 1), (), out_dtype)
        group.members.add(i)
        group.values[out] = (acc, True)
        self.loc[out] = ("virt", group, acc, True)


def schedule(expanded: Expanded, target: Target) -> Schedule:
    """Groups an expanded graph's nodes into kernels, matmuls and eager calls."""
    return _Scheduler(expanded, target).run()


__all__ = [
    "ELEMENTWISE_OPS",
    "LAYOUT_OPS",
    "MAX_DEPTH",
    "Buffer",
    "Call",
    "Expr",
    "Kernel",
    "Library",
    "Matmul",
    "Reduction",
    "Schedule",
    "Step",
    "Store",
    "Target",
    "schedule",
]

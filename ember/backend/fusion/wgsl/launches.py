"""A schedule's steps as cube launches.

:func:`lower` turns each step of a :class:`~ember.backend.fusion.steps.Schedule`
into an object whose ``run(backend, values, scalars)`` makes its launches:

* :class:`Elementwise`: a kernel without reductions, all its stores from one
  generated kernel (:func:`ember.backend.cube.kernels.elementwise.run_many`);
* :class:`Reduction`: a kernel with reductions, prologue, full-space stores and
  epilogue in one generated kernel (:mod:`ember.backend.cube.kernels.fused_reduce`);
* :class:`Product`: a matmul through cube's templates. An elementwise kernel that is
  the product's only reader becomes the template's *epilogue* (``linear``'s bias and
  activation, the gradient mask of a ReLU, an optimizer's update of a weight from its
  gradient: every store of the kernel is an output of the template) when everything
  else it reads exists when the product runs;
* :class:`Eager`: a call of the cube backend (a conv, a gather, a random draw).

``values`` maps each schedule buffer to the :class:`~ember.backend.cube.buffer.CubeTensor`
holding it (its shape the buffer's); a step reads a buffer through a schedule view
by re-viewing that tensor (:func:`view`), and stores fresh tensors. ``scalars``
holds the variant's run-time scalar values by slot, then those of eager calls.
A launch that would bind more buffers or parameter words than the adapter allows
is split into one kernel per store, and a store still too wide has parts of its
expression stored first (:func:`_split`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.dtypes import storage_for
from ember.backend.cube.ir import Launch
from ember.backend.cube.kernels import elementwise, fused_reduce, layout
from ember.backend.cube.kernels import gemm_common as gc
from ember.backend.cube.kernels import matmul as cube_matmul
from ember.backend.cube.runtime import INFO_WORDS
from ember.backend.dtype import DType
from ember.backend.fusion.decompose import call_node
from ember.backend.fusion.graph import Ref
from ember.backend.fusion.replay import ReplayError
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.steps import Call, Schedule
from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.steps import Buffer, Kernel, Matmul, Store
from ember.backend.kernel.views import View

_F32 = np.dtype(np.float32)
#: Info words of an elementwise launch: numel, rank, shape, then per operand a block.
_EW_HEAD = 2 + 8
_EW_BLOCK = 9


def storage(dtype: np.dtype, native_f16: bool = False) -> Any:
    return storage_for(DType.from_numpy(dtype), native_f16)


def view(backend: Any, values: list[Any], buf: int, v: View) -> CubeTensor:
    """Buffer ``buf``'s tensor read through the schedule view ``v`` (positions in the
    row-major order of the buffer's shape). A tensor that is not dense is copied
    first (once: the copy replaces it in ``values``)."""
    base = values[buf]
    if not layout.is_dense(base):
        base = values[buf] = layout.copy(backend, base)
    return CubeTensor(base.buffer, v.shape, base.storage, v.strides, v.offset + base.offset, base.bounds)


def _scalar_values(scalars: list[Any], wanted: list[tuple[int, str]]) -> tuple[list[Any], list[str]]:
    return [scalars[slot] for slot, _ in wanted], [ct for _, ct in wanted]


class Elementwise:
    """Stores of a kernel without reductions, from one launch."""

    def __init__(self, space: tuple[int, ...], stores: list[Store], buffers: list[Any]):
        self.space = space
        tr = Launch()
        self.exprs = tuple(tr(s.expr) for s in stores)
        self.operands = tr.operands
        self.scalars = tr.scalars
        self.outs = [s.buffer for s in stores]
        self.storages = tuple(storage(buffers[b].dtype) for b in self.outs)

    def run(self, backend: Any, values: list[Any], scalars: list[Any]) -> None:
        inputs = [view(backend, values, b, v) for b, v in self.operands]
        words, types = _scalar_values(scalars, self.scalars)
        outs = elementwise.run_many(backend, self.exprs, inputs, self.storages, self.space, words, types)
        for b, t in zip(self.outs, outs):
            values[b] = t


class Reduction:
    """A kernel with reductions along one dim, from one launch."""

    def __init__(self, kernel: Kernel, buffers: list[Any]):
        assert kernel.dim is not None, "a kernel with reductions reduces along a dim"
        self.space, self.dim = kernel.space, kernel.dim
        tr = Launch()
        reductions = tuple((r.op, tr(r.expr)) for r in kernel.reductions)
        stores = tuple((tr(s.expr), storage(buffers[s.buffer].dtype), s.reduced) for s in kernel.stores)
        self.operands = tr.operands
        self.scalars = tr.scalars
        self.spec = fused_reduce.FusedReduction(
            reductions, stores, tuple(storage(buffers[b].dtype) for b, _ in tr.operands)
        )
        self.outs = [s.buffer for s in kernel.stores]

    def run(self, backend: Any, values: list[Any], scalars: list[Any]) -> None:
        inputs = [view(backend, values, b, v) for b, v in self.operands]
        words, types = _scalar_values(scalars, self.scalars)
        outs = fused_reduce.run(backend, self.spec, inputs, self.space, self.dim, words, types)
        for b, t in zip(self.outs, outs):
            values[b] = t


class Product:
    """A matmul, maybe with an elementwise kernel as its epilogue (its stores: the
    first is the template's output, the others its further outputs)."""

    def __init__(
        self, step: Matmul, buffers: list[Any], epilogue: tuple[list[Store], list[Expr], tuple[int, ...]] | None = None
    ):
        self.a, self.b = step.a, step.b
        self.outs = [step.out]
        self.epilogue = None
        self.scalars: list[tuple[int, str]] = []
        if epilogue is not None:
            stores, exprs, shape = epilogue
            tr = Launch()
            tr.operand(step.out, View.contiguous(shape).normalized())
            translated = [tr(e) for e in exprs]
            self.epilogue = translated[0]
            self.operands = tr.operands[1:]
            self.scalars = tr.scalars
            self.outs = [s.buffer for s in stores]
            self.out_storage = storage(buffers[stores[0].buffer].dtype)
            self.more = tuple((e, storage(buffers[s.buffer].dtype)) for e, s in zip(translated[1:], stores[1:]))

    def run(self, backend: Any, values: list[Any], scalars: list[Any]) -> None:
        a = view(backend, values, *self.a)
        b = view(backend, values, *self.b)
        if self.epilogue is None:
            values[self.outs[0]] = cube_matmul.matmul(backend, a, b)
            return
        extra = tuple(view(backend, values, buf, v) for buf, v in self.operands)
        words, types = _scalar_values(scalars, self.scalars)
        epilogue = cube_matmul.Epilogue(self.epilogue, extra, tuple(words), tuple(types), self.more)
        outs = cube_matmul.matmul_many(backend, a, b, epilogue=epilogue, out_storage=self.out_storage)
        for buf, t in zip(self.outs, outs):
            values[buf] = t


class Eager:
    """A node run by the cube backend (as the replay executor runs it)."""

    scalars: list[tuple[int, str]] = []  # none of its parameter words are patched (see .tape)

    def __init__(self, call: Call, avals: list[Any], positions: dict[int, int]):
        self.call = call
        self.avals = avals
        self.positions = positions  # id(SymScalar) -> index in the run's scalars
        #: whether run-time scalars reach its parameter words (a tape reruns it dry)
        self.dynamic = bool(symbols((call.node.args, call.node.kwargs)))
        self.reads = sorted({buf for buf, _ in call.args.values()})

    def run(self, backend: Any, values: list[Any], scalars: list[Any]) -> None:
        call = self.call
        node = call.node
        positions = self.positions

        def ref_value(ref: Ref) -> Any:
            buf, v = call.args[ref]
            return view(backend, values, buf, v)

        leaves = call_node(backend, node, ref_value, lambda s: scalars[positions[id(s)]])
        for value, buf, leaf in zip(node.outs, call.outs, leaves):
            aval = self.avals[value]
            if tuple(leaf.shape) != aval.shape or leaf.dtype != aval.dtype:
                raise ReplayError(
                    f"ember: fusion: {node.op} gave {list(leaf.shape)} {leaf.dtype}, but the graph inferred "
                    f"{list(aval.shape)} {aval.dtype}; this is a bug in ember's shape rules"
                )
            values[buf] = leaf


def symbols(args: Any) -> list[SymScalar]:
    """The run-time scalars in a nested argument structure."""
    kind = type(args)
    if kind is SymScalar:
        return [args]
    if kind is tuple or kind is list:
        return [s for a in args for s in symbols(a)]
    return []


# ---------------------------------------------------------------------- lowering
def lower(schedule: Schedule, max_bindings: int, positions: dict[int, int]) -> list[tuple[Any, list[int]]]:
    """The launches of ``schedule`` in order, each with the schedule steps it runs.

    Kernels too wide for the adapter are split first (:func:`_split`). Consecutive
    elementwise kernels over one space where the second reads nothing the first writes
    (independent chains over the same elements) become one kernel. Then each matmul
    whose only reader is an elementwise kernel takes it as its epilogue
    (:func:`_epilogue`)."""
    buffers = schedule.buffers
    avals = schedule.graph.avals
    items: list[list[Any]] = []  # [step, schedule step indices]
    for index, step in enumerate(schedule.steps):
        if not isinstance(step, Kernel):
            items.append([step, [index]])
            continue
        for kernel in _split(step, max_bindings, buffers):
            last = items[-1][0] if items else None
            if (
                not kernel.reductions
                and isinstance(last, Kernel)
                and not last.reductions
                and last.space == kernel.space
                and not kernel.reads() & last.writes()
            ):
                merged = Kernel(kernel.space, None, [], last.stores + kernel.stores)
                if _fits(merged, max_bindings):
                    items[-1] = [merged, items[-1][1] + [index]]
                    continue
            items.append([kernel, [index]])
    returned = {buf for buf, _ in schedule.outputs}
    readers: dict[int, list[int]] = {}
    made: dict[int, int] = {}
    for i, (step, _) in enumerate(items):
        for buf in step.reads():
            readers.setdefault(buf, []).append(i)
        for buf in step.writes():
            made[buf] = i
    absorbed: set[int] = set()
    out: list[tuple[Any, list[int]]] = []
    for i, (step, indices) in enumerate(items):
        if i in absorbed:
            continue
        if isinstance(step, Matmul):
            fused = None
            users = readers.get(step.out, [])
            if step.out not in returned and len(users) == 1 and isinstance(items[users[0]][0], Kernel):
                kernel = items[users[0]][0]
                early = all(made.get(b, -1) < i for b in kernel.reads() if b != step.out)
                fused = _epilogue(step, kernel, buffers, max_bindings) if early else None
            if fused is None:
                out.append((Product(step, buffers), indices))
            else:
                absorbed.add(users[0])
                out.append((Product(step, buffers, fused), sorted(indices + items[users[0]][1])))
        elif isinstance(step, Kernel):
            launch = Reduction(step, buffers) if step.reductions else Elementwise(step.space, step.stores, buffers)
            out.append((launch, sorted(set(indices))))
        else:
            out.append((Eager(step, avals, positions), indices))
    return out


def _epilogue(
    step: Matmul, kernel: Kernel, buffers: list[Buffer], max_bindings: int
) -> tuple[list[Store], list[Expr], tuple[int, ...]] | None:
    """``kernel`` (the product's only reader, reading nothing made after the product)
    as the matmul's epilogue: its stores, their expressions over the product's shape
    and that shape; ``None`` where it cannot be one (reductions, a load that does not
    re-view over the product's shape, the product read other than densely, more
    bindings or parameter words than a launch may have)."""
    if kernel.reductions or buffers[step.out].dtype != _F32:
        return None
    shape = buffers[step.out].shape
    dense = View.contiguous(shape).normalized()
    x = Exprs()

    def respace(load: Expr) -> Expr | None:
        v = load.args[0]
        if v.shape == ():
            return load if load.op != step.out else None
        new = v if v.shape == shape else v.reshape(shape)
        if new is None or (load.op == step.out and new.normalized() != dense):
            return None
        return x.load(load.op, new, load.dtype)

    memo: dict[int, Expr | None] = {}
    exprs: list[Expr] = []
    for s in kernel.stores:
        e = x.map_loads(s.expr, respace, memo)
        if e is None:
            return None
        exprs.append(e)
    nodes = [e for expr in exprs for e in expr.walk()]
    n_extra = len({(e.op, e.args[0]) for e in nodes if e.kind == "load"}) - 1
    n_scalars = len({e.op for e in nodes if e.kind == "scalar"})
    if n_extra + 2 + len(exprs) > max_bindings or gc.HEAD + (2 + n_extra) * gc.BLOCK + 2 * n_scalars > INFO_WORDS:
        return None
    return kernel.stores, exprs, shape


def _split(kernel: Kernel, max_bindings: int, buffers: list[Buffer]) -> list[Kernel]:
    """``kernel`` as launches within the adapter's bindings and parameter words: whole,
    else one per store; a store (or a reduction's prologue) still too wide has its
    widest part that fits stored first, by a kernel of its own, until it fits
    (:func:`_narrow`). A reduction's epilogue too wide raises :class:`TooWide` (the
    plan then replays its graph call by call)."""
    if _fits(kernel, max_bindings):
        return [kernel]
    parts = [kernel]
    if not kernel.reductions and len(kernel.stores) > 1:
        parts = [Kernel(kernel.space, None, [], [s]) for s in kernel.stores]
    out: list[Kernel] = []
    for part in parts:
        out += _narrow(part, max_bindings, buffers) if not _fits(part, max_bindings) else [part]
    return out


def _narrow(kernel: Kernel, max_bindings: int, buffers: list[Buffer]) -> list[Kernel]:
    """Kernels storing subexpressions of ``kernel``'s full-space expressions, then
    ``kernel`` reading them, each within the limits."""
    x = Exprs()
    before: list[Kernel] = []
    space = kernel.space
    while not _fits(kernel, max_bindings):
        exprs = [r.expr for r in kernel.reductions] + [s.expr for s in kernel.stores if not s.reduced]
        best, best_loads = None, 0
        for root in exprs:
            loads_of: dict[int, frozenset] = {}
            for e in root.walk():
                if e.kind == "load":
                    loads_of[id(e)] = frozenset([(e.op, e.args[0])])
                else:
                    loads_of[id(e)] = frozenset().union(*(loads_of[id(a)] for a in e.args if type(a) is Expr))
                n = len(loads_of[id(e)])
                if e is not root and e.kind not in ("load", "acc") and 1 < n < max_bindings and n > best_loads:
                    part = Kernel(space, None, [], [Store(-1, e, False)])
                    if _fits(part, max_bindings):
                        best, best_loads = e, n
        if best is None:
            raise TooWide(
                f"ember: fusion: a kernel over {list(space)} reads more buffers than a WGSL kernel may "
                f"bind here ({max_bindings}) or passes more than {INFO_WORDS} parameter words"
            )
        buf = len(buffers)
        buffers.append(Buffer(buf, space, best.dtype, "temp"))
        before.append(Kernel(space, None, [], [Store(buf, best, False)]))
        load = x.load(buf, View.contiguous(space), best.dtype)
        memo: dict[int, Expr] = {}
        kernel = Kernel(
            space,
            kernel.dim,
            [type(r)(r.op, _replace(x, r.expr, best, load, memo), r.dtype, r.count) for r in kernel.reductions],
            [Store(s.buffer, _replace(x, s.expr, best, load, memo), s.reduced) for s in kernel.stores],
        )
    return before + [kernel]


def _replace(x: Exprs, expr: Expr, target: Expr, new: Expr, memo: dict[int, Expr]) -> Expr:
    """``expr`` with the subexpression ``target`` replaced by ``new``."""
    for e in expr.walk():
        if id(e) in memo:
            continue
        if e is target:
            memo[id(e)] = new
        elif not e.args:
            memo[id(e)] = e
        else:
            args = tuple(memo[id(a)] if type(a) is Expr else a for a in e.args)
            memo[id(e)] = x.make(e.kind, e.op, args, e.dtype)
    return memo[id(expr)]


class TooWide(Exception):
    """A kernel the adapter cannot bind in one launch."""


def _fits(kernel: Kernel, max_bindings: int) -> bool:
    exprs = [s.expr for s in kernel.stores] + [r.expr for r in kernel.reductions]
    nodes = [e for expr in exprs for e in expr.walk()]
    loads = len({(e.op, e.args[0]) for e in nodes if e.kind == "load"})
    scalars = len({e.op for e in nodes if e.kind == "scalar"})
    if kernel.reductions:
        full = sum(1 for s in kernel.stores if not s.reduced)
        words = fused_reduce.info_words(loads, full, scalars)
    else:
        words = _EW_HEAD + (loads + 1) * _EW_BLOCK + 2 * scalars
    return loads + len(kernel.stores) <= max_bindings and words <= INFO_WORDS


__all__ = ["Eager", "Elementwise", "Product", "Reduction", "TooWide", "lower", "symbols", "view"]

"""The LLVM executor: plans that run a graph as compiled code plus eager calls.

``LLVMExecutor().plan(graph)`` takes a graph whose run-time scalars are
:class:`~ember.backend.fusion.graph.Sc` placeholders (``Graph.abstract_scalars``).
On its first run a plan compiles a *variant*: it expands the graph's composites
for the scalars given (:mod:`~ember.backend.fusion.expand`), groups it into kernels
(:mod:`~ember.backend.fusion.kernels`), places its buffers in an arena
(:mod:`~ember.backend.fusion.memory`), generates one LLVM function per run of
compiled steps (:mod:`~ember.backend.fusion.llvm.codegen`) and JIT-compiles them.
``plan.run(flex, inputs, scalars)`` then computes the variant's scalars from the
run's (a decomposition's truth test on one, such as ``if weight_decay:``, is a
guard: other answers compile another variant), makes each compiled segment one
ctypes call, and runs the nodes left to flex between segments, as replay does.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import time
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.decompose import DECOMPOSITIONS
from ember.backend.fusion.expand import expand
from ember.backend.fusion.graph import Graph, Ref, flatten
from ember.backend.fusion.kernels import Buffer, Call, Kernel, schedule
from ember.backend.fusion.llvm import arrays, jit
from ember.backend.fusion.llvm.codegen import ModuleBuilder
from ember.backend.fusion.llvm.loops import scratch_bytes
from ember.backend.fusion.llvm.support import BLAS_THRESHOLD, LLVMTarget
from ember.backend.fusion.memory import ALIGN, plan_memory
from ember.backend.fusion.replay import PartialRun, Replay, ReplayError
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.views import View, size_of

_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_PLAN_IDS = itertools.count()
_HANDLE = arrays.handle


def _symbols(args: Any) -> list[SymScalar]:
    """The run-time scalars in a nested argument structure."""
    kind = type(args)
    if kind is SymScalar:
        return [args]
    if kind is tuple or kind is list:
        return [s for a in args for s in _symbols(a)]
    return []


class LLVMExecutor:
    """Compiles fusion graphs for the CPU. Plans are cached by structure, in-process."""

    name = "llvm"
    #: Plans kept (least recently used are dropped first).
    MAX_PLANS = 512

    def __init__(self, blas_threshold: int = BLAS_THRESHOLD) -> None:
        self.blas = blas_mod.load()
        self.target = LLVMTarget(self.blas, blas_threshold)
        self._plans: OrderedDict[tuple, LLVMPlan] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"plans": 0, "compile_s": 0.0, "compile_cpu_s": 0.0}

    def plan(self, graph: Graph) -> LLVMPlan:
        # A structure leaves out constant values: graphs with other constants (another
        # trace's) get their own plan. The plan keeps its constants alive, so ids stay unique.
        key = (graph.structure(), tuple(id(v) for v in graph.consts.values()))
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        plan = LLVMPlan(graph, self)
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.MAX_PLANS:
                self._plans.popitem(last=False)
        return plan

    def _compiled(self, variant: Variant) -> None:
        with self._lock:
            self.stats["plans"] += 1
            self.stats["compile_s"] += variant.compile_s
            self.stats["compile_cpu_s"] += variant.compile_cpu_s

    def cache_size(self) -> int:
        """Plans cached (each may hold several compiled variants)."""
        return len(self._plans)


class _Segment:
    """A compiled function (one ctypes call) or the eager calls between two of them."""

    __slots__ = ("calls", "entry")

    def __init__(self, entry: Any = None, calls: list[Call] | None = None):
        self.entry = entry
        self.calls = calls


class LLVMPlan:
    """A graph structure for the CPU: its compiled variants, one per answer to the
    truth tests its decompositions make on run-time scalars (usually one)."""

    #: Variants kept per plan (a graph whose scalars keep flipping zero-ness).
    MAX_VARIANTS = 8

    def __init__(self, graph: Graph, executor: LLVMExecutor):
        self.graph = graph
        self.executor = executor
        self.variants: list[Variant] = []
        self.replay: Replay | None = None  # set if compiling failed
        self._lock = threading.Lock()

    def run(self, backend: Any, inputs: list[Any], scalars: list[Any] = ()) -> list[Any]:
        """The outputs of the graph for its ``inputs`` (flex arrays) and run-time
        ``scalars``. One run at a time: a variant's arena and pointer table are its own."""
        with self._lock:
            if self.replay is not None:
                return self.replay.run(backend, inputs, scalars)
            for variant in self.variants:
                values = variant.scalars(scalars)
                if values is not None:
                    return variant.run(backend, inputs, values)
            try:
                variant = Variant(self.graph, scalars, self.executor)
            except Exception as error:  # a lowering bug must not lose the user's computation
                warnings.warn(
                    f"ember: fusion: the LLVM executor could not compile a graph of {len(self.graph.nodes)} "
                    f"nodes ({type(error).__name__}: {error}); it runs op by op instead. Please report this "
                    "with the graph (str(graph)).",
                    RuntimeWarning,
                    stacklevel=4,
                )
                self.replay = Replay(self.graph)
                return self.replay.run(backend, inputs, scalars)
            self.executor._compiled(variant)
            if len(self.variants) >= self.MAX_VARIANTS:
                self.variants.pop(0)
            self.variants.append(variant)
            return variant.run(backend, inputs, variant.scalars(scalars))

    # The latest variant's parts, for inspection (tests, benchmarks).
    @property
    def schedule(self) -> Any:
        return self.variants[-1].schedule

    @property
    def memory(self) -> Any:
        return self.variants[-1].memory


class Variant:
    """One compiled expansion of a plan's graph (see the module docstring)."""

    def __init__(self, graph: Graph, scalars: list[Any], executor: LLVMExecutor):
        start, start_cpu = time.perf_counter(), time.process_time()
        target = executor.target
        self.expanded = expand(graph, list(scalars), target.expands)
        sched = self.schedule = schedule(self.expanded, target)
        buffers = sched.buffers
        # Scratch rows of reductions along outer dims: private buffers of their step.
        extra: dict[int, int] = {}
        scratch: dict[int, int] = {}
        for index, step in enumerate(sched.steps):
            if isinstance(step, Kernel):
                nbytes = scratch_bytes(step)
                if nbytes:
                    buffers.append(Buffer(len(buffers), (nbytes,), np.dtype(np.uint8), "temp", scratch=True))
                    extra[len(buffers) - 1] = index
                    scratch[index] = len(buffers) - 1
        memory = self.memory = plan_memory(sched, extra)
        self.arena = np.zeros(memory.arena_bytes + ALIGN, np.uint8)
        base = self.arena.ctypes.data
        self._arena_shift = (-base) % ALIGN
        self._arena_addr = base + self._arena_shift

        # Segments: runs of compiled steps, and the eager calls between them.
        groups: list[tuple[bool, list[int]]] = []
        for index, step in enumerate(sched.steps):
            compiled = not isinstance(step, Call)
            if groups and groups[-1][0] == compiled:
                groups[-1][1].append(index)
            else:
                groups.append((compiled, [index]))
        # Buffers compiled code reaches through the ext table: all but the arena's.
        ext: dict[int, int] = {}
        for compiled, steps in groups:
            if compiled:
                for index in steps:
                    step = sched.steps[index]
                    for buf in sorted(step.reads() | step.writes()):
                        if buf not in memory.offsets and buf not in ext:
                            ext[buf] = len(ext)
        self._ext = ext
        self._ptrs = np.zeros(max(len(ext), 1), np.uint64)
        self._ptrs_addr = self._ptrs.ctypes.data
        prefix = f"ember_p{next(_PLAN_IDS)}"
        names: list[str] = []
        self.optimize_s = self.codegen_s = 0.0
        self._compiled = None
        if any(compiled for compiled, _ in groups):
            builder = ModuleBuilder(sched, prefix, memory.offsets, ext, scratch, executor.blas, arrays.DATA_OFFSET,
                                    target.blas_threshold)
            for n, (compiled, steps) in enumerate(groups):
                if compiled:
                    names.append(f"{prefix}_s{n}")
                    builder.segment(names[-1], steps)
            self.ir = builder.build()
            self._compiled = jit.compile_module(self.ir, names)
            self.optimize_s, self.codegen_s = self._compiled.optimize_s, self._compiled.codegen_s
        self._segments: list[_Segment] = []
        self._segment_steps: list[list[int]] = []
        names_iter = iter(names)
        for compiled, steps in groups:
            if compiled:
                self._segments.append(_Segment(entry=_ENTRY(self._compiled.addresses[next(names_iter)])))
            else:
                self._segments.append(_Segment(calls=[sched.steps[i] for i in steps]))
            self._segment_steps.append(steps)

        # Run-time scalars: the kernels' slots, then those the eager calls take.
        self._n_slots = len(sched.scalars)
        wanted = [sym.index for sym in sched.scalars]
        self._call_scalars: dict[int, int] = {}
        for step in sched.steps:
            if isinstance(step, Call):
                for sym in _symbols((step.node.args, step.node.kwargs)):
                    if id(sym) not in self._call_scalars:
                        self._call_scalars[id(sym)] = len(wanted)
                        wanted.append(sym.index)
        self.scalars = self.expanded.program.compile(wanted)
        self._scalar_values = np.zeros(max(self._n_slots, 1), np.float64)
        self._scalars_addr = self._scalar_values.ctypes.data
        self._source_outputs = list(graph.outputs)
        graph_inputs = {v: k for k, v in enumerate(self.expanded.graph.inputs)}
        self._inputs = [(b.id, graph_inputs[b.value], ext.get(b.id, -1)) for b in buffers if b.kind == "input"]
        self._consts = [(b.id, b.value, ext.get(b.id, -1)) for b in buffers if b.kind == "const"]
        # Fresh buffers take the shape of the (first) output they hold, sparing a reshape.
        fresh_shape = {b.id: b.shape for b in buffers if b.id in memory.outputs}
        for buf, view in reversed(sched.outputs):
            if buf in fresh_shape and view.offset == 0 and view.size == size_of(buffers[buf].shape) \
                    and view.is_contiguous():
                fresh_shape[buf] = view.shape
        self._fresh = [(b, shape, buffers[b].dtype, ext.get(b, -1), []) for b, shape in fresh_shape.items()]
        self._n_buffers = len(buffers)
        self._views: dict[tuple[int, View], np.ndarray] = {}
        # How each output is read from its buffer: the array itself, a reshape, or a view.
        self._outputs = []
        for buf, view in sched.outputs:
            shape = fresh_shape.get(buf, buffers[buf].shape)
            dense = view.offset == 0 and view.size == size_of(shape) and view.is_contiguous()
            if dense and view.shape == shape:
                self._outputs.append(("same", buf, None))
            elif dense:
                self._outputs.append(("reshape", buf, view.shape))
            else:
                self._outputs.append(("view", buf, view))
        self.compile_s = time.perf_counter() - start
        self.compile_cpu_s = time.process_time() - start_cpu

    # ------------------------------------------------------------------ running
    def run(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any]:
        """The outputs for ``inputs`` and this variant's ``scalars`` (the values
        :attr:`scalars` computed from the run's). The plan runs one at a time."""
        n = self._n_slots
        if n:
            self._scalar_values[:] = scalars[:n] if len(scalars) > n else scalars
        values: list[Any] = [None] * self._n_buffers
        ptrs = self._ptrs
        handle = _HANDLE
        keep = []  # contiguous copies the table points to
        for buf, k, slot in self._inputs:
            a = inputs[k]
            values[buf] = a
            if slot >= 0:
                if not a.flags.c_contiguous:
                    a = np.ascontiguousarray(a)
                    keep.append(a)
                ptrs[slot] = handle(a)
        for buf, value, slot in self._consts:
            a = self.expanded.graph.consts[value]
            values[buf] = a
            if slot >= 0:
                a = np.ascontiguousarray(a)
                keep.append(a)
                ptrs[slot] = handle(a)
        for buf, shape, dtype, slot, pool in self._fresh:
            a = values[buf] = _recycle(pool, shape, dtype)
            if slot >= 0:
                ptrs[slot] = handle(a)
        done = 0
        try:
            for segment in self._segments:
                if segment.entry is not None:
                    segment.entry(self._arena_addr, self._ptrs_addr, self._scalars_addr)
                else:
                    for call in segment.calls:
                        self._call(backend, call, values, scalars, keep)
                done += 1
        except Exception as error:
            raise PartialRun(error, self._computed(values, done)) from error
        return [self._output(values, recipe) for recipe in self._outputs]

    def _output(self, values: list[Any], recipe: tuple) -> np.ndarray:
        kind, buf, arg = recipe
        if kind == "same":
            return values[buf]
        if kind == "reshape":
            return values[buf].reshape(arg)
        return self._array(values, buf, arg)

    def _computed(self, arrays: list[Any], done: int) -> dict[int, Any]:
        """The outputs whose values exist after ``done`` whole segments (and the calls
        of the failing segment before the failing one)."""
        finished = {i for steps in self._segment_steps[:done] for i in steps}
        producer = self.schedule.producer
        out = {}
        for ref, (buf, view) in zip(self._source_outputs, self.schedule.outputs):
            kind = self.schedule.buffers[buf].kind
            if kind in ("input", "const") or producer.get(buf) in finished or (kind == "call" and arrays[buf] is not None):
                out[ref] = self._array(arrays, buf, view)
        return out

    def _call(self, backend: Any, call: Call, arrays: list[Any], scalars: list[Any], keep: list) -> None:
        node = call.node
        positions = self._call_scalars

        def arg(a: Any) -> Any:
            kind = type(a)
            if kind is Ref:
                buf, view = call.args[a]
                return self._array(arrays, buf, view)
            if kind is SymScalar:
                return scalars[positions[id(a)]]
            if kind is tuple:
                return tuple(arg(x) for x in a)
            if kind is list:
                return [arg(x) for x in a]
            return a

        args = arg(node.args)
        kwargs = {k: arg(v) for k, v in node.kwargs}
        result = getattr(backend, node.op)(*args, **kwargs)
        if result is NotImplemented:
            result = DECOMPOSITIONS[node.op](backend, *args, **kwargs)
        leaves, _ = flatten(result)
        avals = self.expanded.graph.avals
        lo, hi = self._arena_addr, self._arena_addr + self.memory.arena_bytes
        for value, buf, leaf in zip(node.outs, call.outs, leaves):
            aval = avals[value]
            if tuple(leaf.shape) != aval.shape or leaf.dtype != aval.dtype:
                raise ReplayError(
                    f"ember: fusion: {node.op} gave {list(leaf.shape)} {leaf.dtype}, but the graph inferred "
                    f"{list(aval.shape)} {aval.dtype}; this is a bug in ember's shape rules"
                )
            if leaf.size and lo <= leaf.ctypes.data < hi:
                leaf = leaf.copy()  # a view of the arena would be overwritten by a later run
            arrays[buf] = leaf
            slot = self._ext.get(buf, -1)
            if slot >= 0:
                if not leaf.flags.c_contiguous:
                    leaf = np.ascontiguousarray(leaf)
                    keep.append(leaf)
                self._ptrs[slot] = _HANDLE(leaf)

    def _array(self, arrays: list[Any], buf: int, view: View) -> np.ndarray:
        """A buffer's values through ``view`` as a numpy array."""
        base = arrays[buf]
        if base is None:  # an arena buffer: views of it are built once
            key = (buf, view)
            cached = self._views.get(key)
            if cached is None:
                b = self.schedule.buffers[buf]
                offset = self._arena_shift + self.memory.offsets[buf]
                region = self.arena[offset:offset + b.nbytes].view(b.dtype)
                cached = self._views[key] = _strided(region, view)
            return cached
        if view.shape == base.shape and view.offset == 0 and (base.flags.c_contiguous and view.is_contiguous()):
            return base
        if view.offset == 0 and view.size == base.size and view.is_contiguous() and base.flags.c_contiguous:
            return base.reshape(view.shape)
        return _strided(np.ascontiguousarray(base).reshape(-1), view)


#: Arrays kept per returned buffer for reuse (see :func:`_recycle`).
POOL = 4


def _recycle(pool: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A fresh array for a returned value: one this buffer returned before that
    nothing references any more (its only references are ``pool``'s and this call's:
    no tensor, view or base holds it), else a new one. Reusing memory spares the page
    faults of a new large allocation on every run (a training step returns every
    parameter and moment) and never overwrites a value still in use."""
    for i in range(len(pool)):
        if sys.getrefcount(pool[i]) == 2:
            return pool[i]
    array = np.empty(shape, dtype)
    if len(pool) < POOL:
        pool.append(array)
    else:
        pool[len(pool) - 1] = array
    return array


def _strided(flat: np.ndarray, view: View) -> np.ndarray:
    """``view`` over the dense rank-1 array ``flat``."""
    if view.size == 0:
        return np.empty(view.shape, flat.dtype)
    item = flat.dtype.itemsize
    return np.ndarray(view.shape, flat.dtype, buffer=flat, offset=view.offset * item,
                      strides=tuple(s * item for s in view.strides))

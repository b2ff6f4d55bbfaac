"""The cuda executor: captured steps (``ember.compile``) replayed as CUDA Graphs.

``CudaExecutor().plan(graph)`` gives a :class:`CudaPlan`; ``plan.run(backend,
inputs, scalars)`` computes the graph's outputs (the executor interface of
:mod:`ember.backend.fusion.executors`).

A plan *expands* the graph's composites (Adam, linear, softmax, ... over float
operands) for the run's scalars (:func:`ember.backend.fusion.primitive_graph.expand`), so
every run-time scalar (a learning rate, a bias correction computed from the step
count) is an entry of the expansion's scalar program. Its first run replays the
expanded graph eagerly (compiling every kernel); its second *captures* it: the
inputs are copied to buffers the plan owns, the scalars live in a device array
that kernels read (:class:`DeviceScalar`), every allocation comes from a private
memory pool that outlives the capture, and the stream's work becomes one CUDA
Graph. Later runs compute the scalars on the host (one small copy), copy the
inputs in, launch the graph (one call, however many kernels) and copy the outputs
out to fresh tensors.

A graph that cannot be captured (an op reads a value back, such as an index
bounds check, or takes a run-time scalar where a kernel cannot read one from
memory) replays op by op from then on: the same results, with one launch per op.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend.cuda.runtime import CaptureUnsupported, DeviceScalar
from ember.backend.fusion.decompose import call_node
from ember.backend.fusion.graph import Graph, Ref
from ember.backend.fusion.plan import Executor, Plan
from ember.backend.fusion.primitive_graph import FLOAT_EXPANSIONS, expand, float_operands
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.steps import Call
from ember.backend.kernel.steps import Kernel, Matmul
from ember.errors import FallbackWarning


def _wants(graph: Graph, node: Any) -> bool:
    """The composites the CUDA lowering expands (``CudaTarget.expands``'s rule)."""
    return node.op in FLOAT_EXPANSIONS and float_operands(graph, node)


def _symbols(args: Any, out: dict[int, SymScalar]) -> None:
    kind = type(args)
    if kind is SymScalar:
        out.setdefault(id(args), args)
    elif kind is tuple or kind is list:
        for a in args:
            _symbols(a, out)


class CudaExecutor(Executor):
    """Plans for cuda devices (see the module docstring). ``graphs=False`` never
    captures (every run replays op by op). ``fuse=True`` lowers the expanded graph
    through the fusion analysis first (:class:`_FusedVariant`: fused CUDA C kernels,
    cuBLAS matmuls, eager calls for the rest), captured the same way. Its plans are
    not cached (a cuda device's fusion backend and ``ember.compile`` keep theirs) and
    take their fixed scalars on every run."""

    name = "cuda"

    def __init__(self, graphs: bool = True, fuse: bool = False) -> None:
        super().__init__()
        self.graphs = graphs
        self.fuse = fuse
        self.stats = {"plans": 0, "captures": 0, "graph_launches": 0, "replays": 0, "capture_failures": 0}

    def plan(self, graph: Graph) -> CudaPlan:  # type: ignore[override]  # no fixed scalars
        self.count("plans")
        return CudaPlan(graph, self)


class _Variant:
    """One expansion of the graph for the truth tests its scalars answered."""

    offered: tuple = ()  # no donations (see CudaPlan)
    donated: tuple = ()

    def __init__(self, graph: Graph, scalars: Sequence[Any]) -> None:
        self.expanded = expand(graph, list(scalars), _wants)
        found: dict[int, SymScalar] = {}
        for node in self.expanded.graph.nodes:
            _symbols((node.args, tuple(v for _, v in node.kwargs)), found)
        self.symbols = list(found.values())
        self.slot = {id(s): i for i, s in enumerate(self.symbols)}
        self.program = self.expanded.program.compile([s.index for s in self.symbols])
        self.graph_exec: Any = None
        self.failed = False
        self.runs = 0
        self.static_inputs: list[Any] = []
        self.static_outputs: list[Any] = []
        self.table: Any = None
        self.pool: Any = None

    def values(self, scalars: Sequence[Any]) -> list[Any] | None:
        return self.program(list(scalars))

    def replay(self, backend: Any, inputs: list[Any], scalar_of: Any) -> list[Any]:
        """The expanded graph's outputs, node by node; ``scalar_of(sym)`` gives the value
        (or :class:`DeviceScalar`) of each run-time scalar."""
        graph = self.expanded.graph
        values: dict[int, Any] = dict(zip(graph.inputs, inputs))
        values.update(graph.consts)

        for node in graph.nodes:
            leaves = call_node(backend, node, values.__getitem__, scalar_of)
            for out, leaf in zip(node.outs, leaves):
                values[out] = leaf
        return [values[o] for o in graph.outputs]


class _FusedVariant(_Variant):
    """An expansion grouped into fused kernels (:mod:`.target`): each kernel step is one
    launch of generated CUDA C with static geometry, reading run-time scalars from the
    plan's scalar table; matmuls and the steps the target leaves out run on the backend."""

    def __init__(self, graph: Graph, scalars: Sequence[Any]) -> None:
        from ember.backend.fusion.cuda.target import CudaTarget, schedule_kernels
        from ember.backend.fusion.scheduler import schedule

        target = CudaTarget()
        self.expanded = expand(graph, list(scalars), target.expands)
        self.schedule = schedule(self.expanded, target)
        self.codes = schedule_kernels(self.schedule, prefix=f"p{id(self) & 0xFFFFFFFF:x}")
        found: dict[int, SymScalar] = {id(s): s for s in self.schedule.scalars}
        for step in self.schedule.steps:
            if isinstance(step, Call):
                _symbols((step.node.args, tuple(v for _, v in step.node.kwargs)), found)
        self.symbols = list(found.values())
        self.slot = {id(s): i for i, s in enumerate(self.symbols)}
        self.program = self.expanded.program.compile([s.index for s in self.symbols])
        self.graph_exec = None
        self.failed = False
        self.runs = 0
        self.static_inputs, self.static_outputs = [], []
        self.table = self.pool = None
        self.functions: dict[str, Any] | None = None

    def replay(self, backend: Any, inputs: list[Any], scalar_of: Any) -> list[Any]:
        from ember.backend.cuda.codegen import BLOCK

        sched, graph = self.schedule, self.expanded.graph
        rt = backend.runtime
        if self.functions is None and self.codes:
            codes = self.codes
            self.functions = rt.functions(
                ("plan", id(self)),
                lambda: ([c.name for c in codes.values()], "\n".join(c.source for c in codes.values())),
            )
        functions = self.functions or {}  # None only when there is no kernel to launch
        n_kernel_scalars = len(sched.scalars)
        values = [scalar_of(s) for s in self.symbols]
        table = None
        if n_kernel_scalars:
            if type(values[0]) is DeviceScalar:
                table = values[0].table
            else:
                table = backend.from_numpy(np.asarray([float(v) for v in values[:n_kernel_scalars]], np.float64))
        position = {v: k for k, v in enumerate(graph.inputs)}
        buffers: list[Any] = [None] * len(sched.buffers)
        for b in sched.buffers:
            if b.kind == "input":
                buffers[b.id] = backend.contiguous(inputs[position[b.value]])
            elif b.kind == "const":
                buffers[b.id] = backend.contiguous(graph.consts[b.value])
        produced = {s.out for s in sched.steps if isinstance(s, Matmul)} | {
            o for s in sched.steps if isinstance(s, Call) for o in s.outs
        }
        for b in sched.buffers:
            if b.kind == "temp" and b.id not in produced:
                buffers[b.id] = backend.empty(b.shape, b.dtype)
        for index, step in enumerate(sched.steps):
            if isinstance(step, Kernel):
                code = self.codes.get(index)
                if code is None:
                    continue
                args = [np.uint64(buffers[b].mem.ptr) for b in code.buffers]
                args.append(np.uint64(table.mem.ptr if table is not None else 0))
                rt.launch(functions[code.name], code.grid, BLOCK, tuple(args))
            elif isinstance(step, Matmul):
                a = buffers[step.a[0]].with_view(step.a[1])
                b = buffers[step.b[0]].with_view(step.b[1])
                buffers[step.out] = backend.contiguous(backend.matmul(a, b))
            else:
                self._call(backend, step, buffers, scalar_of)
        return [buffers[buf].with_view(view) for buf, view in sched.outputs]

    @staticmethod
    def _call(backend: Any, step: Any, buffers: list[Any], scalar_of: Any) -> None:
        def ref_value(ref: Ref) -> Any:
            buf, view = step.args[ref]
            return buffers[buf].with_view(view)

        node = step.node
        leaves = call_node(backend, node, ref_value, scalar_of)
        for buf, leaf in zip(step.outs, leaves):
            buffers[buf] = backend.contiguous(leaf)


class CudaPlan(Plan):
    """A graph for a cuda backend: its variants and their CUDA Graphs. It takes no
    donations (``ember.compile`` offers them): every output is a fresh buffer."""

    target = "CUDA"
    executor: CudaExecutor

    def lower(self, backend: Any, scalars: Sequence[Any], donated: tuple) -> _Variant:
        return (_FusedVariant if self.executor.fuse else _Variant)(self.graph, scalars)

    def lowered(self, variant: Any) -> None:
        pass  # the executor counts plans, not variants

    def run_variant(self, variant: Any, backend: Any, inputs: list[Any], scalars: Sequence[Any]) -> list[Any] | None:
        values = variant.values(scalars)
        return None if values is None else self._run(variant, backend, inputs, values)

    def _run(self, v: _Variant, backend: Any, inputs: list[Any], values: list[Any]) -> list[Any]:
        v.runs += 1
        if v.graph_exec is None and (
            v.failed
            or not self.executor.graphs
            or v.runs < 2
            or not getattr(getattr(backend, "runtime", None), "graphs", False)
        ):
            self.executor.stats["replays"] += 1
            return v.replay(backend, inputs, lambda s: values[v.slot[id(s)]])
        if v.graph_exec is None:
            try:
                self._capture(v, backend, inputs)
            except Exception as error:
                if not isinstance(error, CaptureUnsupported):  # expected: an op reads back (module docstring)
                    warnings.warn(
                        f"ember: fusion: the CUDA executor could not capture a graph of {len(self.graph.nodes)} nodes "
                        f"as a CUDA Graph ({type(error).__name__}: {error}); it launches op by op instead.",
                        FallbackWarning,
                        stacklevel=4,
                    )
                v.failed = True
                self.executor.count("capture_failures")
                self.executor.count("replays")
                return v.replay(backend, inputs, lambda s: values[v.slot[id(s)]])
        return self._launch(v, backend, inputs, values)

    # ------------------------------------------------------------------ graphs
    def _capture(self, v: _Variant, backend: Any, inputs: list[Any]) -> None:
        rt = backend.runtime
        cupy = rt.cupy
        rt.sync()
        v.pool = cupy.cuda.MemoryPool()
        rt._capture_pool = v.pool
        try:
            v.table = backend.empty((max(len(v.symbols), 1),), np.dtype(np.float64))
            v.static_inputs = [backend.empty(x.shape, x.dtype) for x in inputs]
            for dst, src in zip(v.static_inputs, inputs):
                _copy(backend, dst, src)
            rt.sync()
            scalars = [DeviceScalar(v.table, i) for i in range(len(v.symbols))]
            rt.capturing = True
            with rt.device:
                rt.stream.begin_capture()
                try:
                    outs = v.replay(backend, v.static_inputs, lambda s: scalars[v.slot[id(s)]])
                finally:
                    graph = rt.stream.end_capture()
            v.static_outputs = outs
            v.graph_exec = graph
            self.executor.stats["captures"] += 1
        finally:
            rt.capturing = False
            rt._capture_pool = None

    def _launch(self, v: _Variant, backend: Any, inputs: list[Any], values: list[Any]) -> list[Any]:
        rt = backend.runtime
        if v.symbols:
            host = np.asarray([float(x) for x in values], np.float64)
            with rt.device:
                v.table.mem.copy_from_host_async(ctypes.c_void_p(host.ctypes.data), host.nbytes, rt.stream)
        for dst, src in zip(v.static_inputs, inputs):
            if src.mem is not dst.mem:
                _copy(backend, dst, src)
        with rt.device:
            v.graph_exec.launch(rt.stream)
        self.executor.stats["graph_launches"] += 1
        rt.stats["graph_launches"] += 1
        outs = []
        for out in v.static_outputs:
            fresh = backend.empty(out.shape, out.dtype)
            _copy(backend, fresh, out)
            outs.append(fresh)
        return outs


def _copy(backend: Any, dst: Any, src: Any) -> None:
    """``src`` into the contiguous ``dst``: one device-to-device copy when ``src`` is dense."""
    view = src.view
    if view.is_contiguous() and view.size:
        item = src.dtype.itemsize
        backend.runtime.copy(dst.mem, src.mem + view.offset * item, view.size * item)
    else:
        backend._write(dst, dst.view, src)


__all__ = ["CaptureUnsupported", "CudaExecutor", "CudaPlan", "DeviceScalar"]

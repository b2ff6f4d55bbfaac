"""Control flow: ``If`` with its two subgraphs; ``Loop``, ``Scan`` and ``SequenceMap``
with their bodies.

A condition known at load (a constant) inlines the taken branch into the program. A
condition computed at ``forward`` (from shapes, or a tensor read back to the host) plans
both branches as blocks of steps over the program's slots; the ``If`` step runs the
taken one. Either way the branch's operators run on ember's tensors, so the result is
differentiable through the taken branch on an autodiff device.

A ``Loop`` plans its body once as a block; the ``Loop`` step runs it eagerly, iteration
after iteration (the trip count and the condition read on the host), carrying its values
and stacking its scan outputs; gradients flow through every iteration. ``Scan`` runs its
body once per position along its inputs' scan axes, ``SequenceMap`` once per element.

Under ``ember.compile`` (``load(..., compile=True)``) the blocks run while the forward
is traced, so what they decide on the host is decided at trace time, once per input
shapes: an ``If`` whose condition is a constant or computed from shapes traces the taken
branch only; a ``Loop`` whose trip count and condition are constants or computed from
shapes unrolls (up to ``UNROLL_LIMIT`` iterations); a ``Scan`` unrolls along its inputs'
scan axis. A condition or trip count read from a tensor's values cannot be traced: the
node raises a graph break naming itself, and ``ember.compile`` runs the model eagerly for
those input shapes, with one ``CompileWarning`` (the results are the same).

A subgraph reads values of the enclosing graph by name (ONNX's outer scope). Its own
initializers follow the weight rule of :mod:`ember.onnx.trainable` as the main graph's
do: a weight (a ``Conv`` weight, a ``MatMul`` operand of rank >= 2...) is a ``Param``
read from the enclosing scope, anything else a constant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.fusion.scalars import GraphBreak
from ember.errors import OnnxError
from ember.onnx import proto
from ember.onnx.program import DEVICE_SLOT, Step, host_to_tensor
from ember.onnx.support import check_node, unsupported_error
from ember.tensor import Tensor
from ember.tensor.capture_hook import capturing

if TYPE_CHECKING:
    from ember.onnx.plan import Planner, Value

CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
UNROLL_LIMIT = 1024  # the most iterations of a Loop that ember.compile unrolls


def add_control(planner: Planner, node: Any) -> None:
    if node.op_type == "If":
        add_if(planner, node)
    else:
        add_loop(planner, node)


def add_if(planner: Planner, node: Any) -> None:
    """Plan an ``If`` node (see the module's docstring)."""
    from ember.onnx.plan import CONST, HOST, TENSOR, Value, outputs_of

    where = f"{planner.label}: If node {node.name!r}"
    cond = planner.values.get(node.input[0])
    if cond is None:
        raise OnnxError(f"ember: {where} reads {node.input[0]!r}, which no earlier node, input or initializer defines")
    attrs = proto.attributes(node, where)
    graphs = {True: attrs.get("then_branch"), False: attrs.get("else_branch")}
    if graphs[True] is None or graphs[False] is None:
        raise OnnxError(f"ember: {where} needs both then_branch and else_branch")
    names = outputs_of(node)
    if cond.kind == CONST:
        assert cond.const is not None  # a CONST value holds its array
        taken = plan_branch(planner, graphs[bool(np.asarray(cond.const).reshape(-1)[0])], where)
        for name, value in zip(names, taken):
            if name:
                planner.values[name] = value
        return
    blocks: dict[bool, tuple[list[Step], list[int]]] = {}
    kinds: list[set[str]] = [set() for _ in names]
    for flag in (True, False):
        saved = planner.steps, dict(planner.to_tensor_slot), dict(planner.to_host_slot)
        planner.steps = []
        try:
            results = plan_branch(planner, graphs[flag], where)
            steps = planner.steps
        finally:
            planner.steps, planner.to_tensor_slot, planner.to_host_slot = saved
        if len(results) != len(node.output):
            raise OnnxError(f"ember: {where}: a branch has {len(results)} outputs, the node {len(node.output)}")
        slots = []
        for i, value in enumerate(results[: len(names)]):
            kinds[i].add(value.kind)
            slots.append(planner.new_slot(value.const) if value.kind == CONST else value.slot)
        blocks[flag] = (steps, slots)
    produced = {s for steps, _ in blocks.values() for step in steps for s in _slots(step.outs)}
    read = {i for steps, outs in blocks.values() for step in steps for i in step.ins} | {
        s for _, outs in blocks.values() for s in outs
    }
    outer = sorted((read - produced) | {DEVICE_SLOT})
    tensor = [TENSOR in k for k in kinds]
    out_slots = []
    for i, name in enumerate(names):
        if not name:  # an omitted output
            out_slots.append(-1)
            continue
        slot = planner.new_slot()
        planner.values[name] = Value(TENSOR if tensor[i] else HOST, slot, None, None)
        out_slots.append(slot)
    run = Branches(blocks, outer, tensor, len(names) > 1, f"{where}'s condition")
    outs: int | tuple[int, ...] = tuple(out_slots) if len(names) > 1 else out_slots[0]
    label = f"node {node.name!r} (If)" if node.name else "node (unnamed) (If)"
    planner.steps.append(Step(run, (cond.slot, *outer), outs, False, label))
    if cond.kind == TENSOR:
        planner.data_dependent = True


def add_loop(planner: Planner, node: Any) -> None:
    """Plan a ``Loop`` node (see the module's docstring)."""
    from ember.onnx.plan import HOST, TENSOR, Value, outputs_of

    scan = node.op_type in ("Scan", "SequenceMap")  # no trip count nor condition inputs
    where = f"{planner.label}: {node.op_type} node {node.name!r}"
    attrs = proto.attributes(node, where)
    body = attrs.get("body")
    if body is None:
        raise OnnxError(f"ember: {where} has no body")
    firsts = 0 if scan else 2  # Loop: the trip count and the condition come first
    carried = len(node.input) - firsts
    if len(body.input) != carried + firsts or (not scan and len(body.output) < carried + 1):
        raise OnnxError(f"ember: {where}: the body takes {len(body.input)} inputs for {carried} value(s)")
    limits = []
    for i in range(firsts):  # read on the host
        name = node.input[i] if i < len(node.input) else ""
        value = planner.values.get(name) if name else None
        if name and value is None:
            raise OnnxError(f"ember: {where} reads {name!r}, which no earlier node, input or initializer defines")
        limits.append(1 if value is None else planner.host_input(value, True))
    initial = []
    for name in node.input[firsts:]:
        value = planner.values.get(name)
        if value is None:
            raise OnnxError(f"ember: {where} reads {name!r}, which no earlier node, input or initializer defines")
        initial.append(planner.tensor_input(name, value))
    formal = []
    saved = planner.steps, dict(planner.to_tensor_slot), dict(planner.to_host_slot)
    planner.steps = []
    try:
        entries = {}
        for i, info in enumerate(body.input):
            slot = planner.new_slot()
            formal.append(slot)
            entries[info.name] = Value(HOST if i < firsts else TENSOR, slot, None, None)
        results = plan_branch(planner, body, where, entries)
        steps = planner.steps
    finally:
        planner.steps, planner.to_tensor_slot, planner.to_host_slot = saved
    outs = [planner.new_slot(v.const) if v.kind == "const" else v.slot for v in results]
    produced = {s for step in steps for s in _slots(step.outs)} | set(formal)
    read = {i for step in steps for i in step.ins} | set(outs)
    outer = sorted((read - produced) | {DEVICE_SLOT})
    names = outputs_of(node)
    out_slots = []
    for name in names:
        if not name:
            out_slots.append(-1)
            continue
        slot = planner.new_slot()
        planner.values[name] = Value(TENSOR, slot, None, None)
        out_slots.append(slot)
    run: Any
    if node.op_type == "SequenceMap":
        run = Mapper(steps, formal, outs, outer, len(names))
    elif scan:
        run = Scanner(steps, formal, outs, outer, attrs, carried, len(names), where)
    else:
        run = Iterations(steps, formal, outs, outer, carried, len(names), where)
    label = f"node {node.name!r} ({node.op_type})" if node.name else f"node (unnamed) ({node.op_type})"
    result: int | tuple[int, ...] = tuple(out_slots) if len(names) > 1 else out_slots[0]
    planner.steps.append(Step(run, (*limits, *initial, *outer), result, False, label))
    planner.data_dependent = True


def plan_branch(planner: Planner, graph: Any, where: str, entries: dict[str, Value] | None = None) -> list[Value]:
    """Plan a subgraph's nodes (into ``planner.steps``) and return its outputs' values; the
    names it defines (and its formal inputs, ``entries``) are dropped from the planner's
    scope afterwards."""
    from ember.onnx.plan import CONST, Value

    scope = dict(planner.values)
    planner.values.update(entries or {})
    try:
        for tensor in graph.initializer:
            if tensor.name in planner.params:  # a weight (the rule of ember.onnx.trainable): a Param
                continue
            array = proto.to_array(tensor, f"{where}: initializer {tensor.name!r}")
            planner.values[tensor.name] = Value(CONST, -1, array, array.shape)
        found = []
        for sub in graph.node:
            opdef, version, problem = check_node(sub, planner.opsets)
            if problem is not None:
                found.append(problem)
                continue
            if found:
                continue
            assert opdef is not None  # check_node finds no problem only with an OpDef
            planner.add_node(sub, opdef, version)
        if found:
            raise unsupported_error(found, planner.label)
        results = []
        for out in graph.output:
            value = planner.values.get(out.name)
            if value is None:
                raise OnnxError(f"ember: {where}: the subgraph's output {out.name!r} is computed by no node")
            results.append(value)
        return results
    finally:
        planner.retired.extend(v for k, v in planner.values.items() if scope.get(k) is not v)
        planner.values = scope


class Branches:
    """The run-time ``If``: the condition, then the taken block's steps over a private scope."""

    def __init__(
        self,
        blocks: dict[bool, tuple[list[Step], list[int]]],
        outer: list[int],
        tensor: list[bool],
        multi: bool,
        what: str,
    ):
        self.blocks = {flag: ([(s.fn, s.ins, s.outs) for s in steps], outs) for flag, (steps, outs) in blocks.items()}
        self.outer = outer
        self.tensor = tensor
        self.multi = multi
        self.what = what

    def __call__(self, cond: Any, *values: Any) -> Any:
        flag = bool(_host(cond, self.what))
        steps, outs = self.blocks[flag]
        env = dict(zip(self.outer, values))
        _run(steps, env)
        device = env[DEVICE_SLOT]
        results = [
            host_to_tensor(np.asarray(env[s]), device, "an If output")
            if wants and not isinstance(env[s], (Tensor, list))
            else env[s]
            for s, wants in zip(outs, self.tensor)
        ]
        return tuple(results) if self.multi else results[0]


class Iterations:
    """The run-time ``Loop``: the body's steps, once per iteration, over a private scope."""

    def __init__(
        self,
        steps: list[Step],
        formal: list[int],
        outs: list[int],
        outer: list[int],
        carried: int,
        wanted: int,
        where: str,
    ):
        self.steps = [(s.fn, s.ins, s.outs) for s in steps]
        self.formal, self.outs, self.outer = formal, outs, outer
        self.carried, self.wanted, self.where = carried, wanted, where

    def __call__(self, trips: Any, cond: Any, *rest: Any) -> Any:
        values = list(rest[: self.carried])
        base = dict(zip(self.outer, rest[self.carried :]))
        device = base[DEVICE_SLOT]
        limit = None if trips is None else int(_host(trips, f"{self.where}'s trip count M"))
        go = True if cond is None else bool(_host(cond, f"{self.where}'s condition"))
        traced = capturing()
        scans: list[list[Any]] = [[] for _ in self.outs[1 + self.carried :]]
        i = 0
        while go and (limit is None or i < limit):
            env = dict(base)
            env[self.formal[0]] = np.array(i, np.int64)
            env[self.formal[1]] = np.array(go)
            env.update(zip(self.formal[2:], values))
            _run(self.steps, env)
            got = [env[s] for s in self.outs]
            go = bool(_host(got[0], f"{self.where}'s body condition"))
            values = [_tensor(v, device) for v in got[1 : 1 + self.carried]]
            for scan, value in zip(scans, got[1 + self.carried :]):
                scan.append(_tensor(value, device))
            i += 1
            if traced and i > UNROLL_LIMIT and go and (limit is None or i < limit):
                raise GraphBreak(
                    f"ember: {self.where} runs more than {UNROLL_LIMIT} iterations: ember.compile unrolls a Loop "
                    "up to that many, so the model runs eagerly for these input shapes"
                )
        stacked = []
        for scan in scans:
            if not scan:
                raise OnnxError(f"ember: {self.where}: a scan output of a loop that ran no iteration has no shape")
            stacked.append(Tensor.stack(scan, 0))
        return _outputs([*values, *stacked], self.wanted)


class Scanner:
    """The run-time ``Scan`` (opset 9+): the body once per position along each scan input's
    axis (forward or reverse), carrying the states and stacking the scan outputs."""

    def __init__(
        self,
        steps: list[Step],
        formal: list[int],
        outs: list[int],
        outer: list[int],
        attrs: dict[str, Any],
        values: int,
        wanted: int,
        where: str,
    ):
        self.steps = [(s.fn, s.ins, s.outs) for s in steps]
        self.formal, self.outs, self.outer, self.wanted, self.where = formal, outs, outer, wanted, where
        m = int(attrs.get("num_scan_inputs", 0))
        self.n = values - m
        self.in_axes = list(attrs.get("scan_input_axes") or [0] * m)
        self.in_reverse = [bool(d) for d in (attrs.get("scan_input_directions") or [0] * m)]
        k = len(outs) - self.n
        self.out_axes = list(attrs.get("scan_output_axes") or [0] * k)
        self.out_reverse = [bool(d) for d in (attrs.get("scan_output_directions") or [0] * k)]

    def __call__(self, *rest: Any) -> Any:
        n = self.n
        states = list(rest[:n])
        xs = list(rest[n : len(self.formal)])
        base = dict(zip(self.outer, rest[len(self.formal) :]))
        axes = [a + x.rank if a < 0 else a for a, x in zip(self.in_axes, xs)]
        length = xs[0].dims()[axes[0]] if xs else 0
        scans: list[list[Any]] = [[] for _ in self.outs[n:]]
        for t in range(length):
            env = dict(base)
            env.update(zip(self.formal[:n], states))
            for slot, x, a, back in zip(self.formal[n:], xs, axes, self.in_reverse):
                env[slot] = x.select_dim(a, length - 1 - t if back else t)
            _run(self.steps, env)
            got = [env[s] for s in self.outs]
            states = [_tensor(v, base[DEVICE_SLOT]) for v in got[:n]]
            for scan, value in zip(scans, got[n:]):
                scan.append(_tensor(value, base[DEVICE_SLOT]))
        stacked = []
        for scan, a, back in zip(scans, self.out_axes, self.out_reverse):
            if not scan:
                raise OnnxError(f"ember: {self.where}: a scan output over an empty sequence has no shape")
            items = scan[::-1] if back else scan
            stacked.append(Tensor.stack(items, a + items[0].rank + 1 if a < 0 else a))
        return _outputs([*states, *stacked], self.wanted)


class Mapper:
    """The run-time ``SequenceMap``: the body once per element of the input sequence (and
    of the other sequence inputs; tensor inputs are passed whole to every call), each
    output collected into a sequence."""

    def __init__(self, steps: list[Step], formal: list[int], outs: list[int], outer: list[int], wanted: int):
        self.steps = [(s.fn, s.ins, s.outs) for s in steps]
        self.formal, self.outs, self.outer, self.wanted = formal, outs, outer, wanted

    def __call__(self, *rest: Any) -> Any:
        inputs = rest[: len(self.formal)]
        base = dict(zip(self.outer, rest[len(self.formal) :]))
        results: list[list[Any]] = [[] for _ in self.outs]
        for i in range(len(inputs[0])):
            env = dict(base)
            env.update((slot, v[i] if isinstance(v, list) else v) for slot, v in zip(self.formal, inputs))
            _run(self.steps, env)
            for result, slot in zip(results, self.outs):
                result.append(_tensor(env[slot], base[DEVICE_SLOT]))
        return _outputs(results, self.wanted)


def _run(steps: list[Any], env: dict[int, Any]) -> None:
    """A block's steps (``(fn, input slots, output slot or slots)``) run over ``env``
    (slot -> value), each result stored in its slot (``-1``: an output no one reads)."""
    for fn, ins, out in steps:
        result = fn(*[env[j] for j in ins])
        if isinstance(out, tuple):
            for slot, value in zip(out, result):
                if slot >= 0:
                    env[slot] = value
        else:
            env[out] = result


def _outputs(values: list[Any], wanted: int) -> Any:
    """The node's first ``wanted`` outputs: a tuple, or the value itself for one."""
    return tuple(values[:wanted]) if wanted > 1 else values[0]


def _host(value: Any, what: str) -> Any:
    """A control value (a condition, a trip count) on the host. One held by a tensor is
    a graph break while ``ember.compile`` traces (a choice made on data cannot be traced)."""
    if isinstance(value, Tensor):
        if capturing():
            raise GraphBreak(
                f"ember: {what} is a tensor's value, known only when the model runs: ember.compile cannot "
                "trace a choice made on data, so the model runs eagerly for these input shapes (a condition "
                "or trip count that is a constant or computed from shapes compiles)"
            )
        return value.to_numpy().reshape(-1)[0]
    return np.asarray(value).reshape(-1)[0]


def _tensor(value: Any, device: Any) -> Any:
    if isinstance(value, (Tensor, list)):
        return value
    return host_to_tensor(np.asarray(value), device, "a Loop value")


def _slots(outs: int | tuple[int, ...]) -> list[int]:
    return [s for s in outs if s >= 0] if isinstance(outs, tuple) else [outs]

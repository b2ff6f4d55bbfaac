"""The steady-state runner of a compiled function: straight-line Python generated from
an :class:`~ember.capture.entry.Entry`'s typed sources and writes.

After its first runs, an entry assumes the structure the last run left (the module
argument is the module it returned; each optimizer state read is the object it last
wrote) and builds one function that reads the inputs, runs the plan and stores the
outputs, with no loop over tables and no per-input dispatch. Anything else (another
module, a state replaced or of another shape) takes the entry's generic path.

Generated code, not a list of bound steps, because it measures faster
(``benchmarks/capture_runner.py``, the W1 step of ``benchmarks/compile.py``, median CPU
time over 7 alternating rounds): the Python around the plan costs 2.9 us per call
generated against 6.9 us as bound steps (a closure per input read and per store, run in
loops), on a 3.0 us plan.

Where the plan accepted donations, the runner holds those inputs in a
:class:`~ember.backend.fusion.llvm.executor.Binding` (the parameters and moments are
updated in place, so nothing is read or written back for them); a generic run, which
may replace them, drops the binding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ember.capture.arrays import given, pack_contiguous
from ember.capture.leaves import module_leaves
from ember.capture.pytree import spec_expr, unflatten
from ember.capture.sources import RETRACE, Parameter, Running
from ember.capture.writes import (
    ModuleResult,
    NumberField,
    ScalarResult,
    StateWrite,
    StaticField,
    TensorField,
    TensorResult,
    ValueResult,
)
from ember.device import Device
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol
    from ember.capture.entry import Entry


class RunnerCode:
    """The source of one runner being written: its lines, and the globals (``env``)
    its constants are bound to. Sources and writes ask it for names."""

    def __init__(self, entry: Entry, leaves: list[Any]) -> None:
        self.entry = entry
        self.leaves = leaves
        self.lines = ["def run(leaves):"]
        self.env: dict[str, Any] = {}
        self.returns_model = entry.model_out is not None
        self.n_params = len(module_leaves(entry.model_out)[0]) if entry.model_out is not None else 0
        self.slot_names = [self.const(holder, "slot") for _, holder in entry.model_slots]
        self.slot_attr = ["inner" if kind == "autodiff" else "_primitive" for kind, _ in entry.model_slots]
        self.states: dict[tuple[int, Any], str] = {}

    def add(self, line: str) -> None:
        self.lines.append(line)

    def const(self, value: Any, prefix: str) -> str:
        """A global of the runner bound to ``value``, named ``prefix`` and a number."""
        name = f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def slot(self, j: int) -> str:
        """The holder of value ``j`` of the returned module (parameters, then running
        states): its tensor's primitive, or its autodiff wrapper's inner array."""
        return f"{self.slot_names[j]}.{self.slot_attr[j]}"

    def module_params(self, position: int) -> str:
        """The parameter list of the module argument at ``position`` (read per call)."""
        return f"params{position}"

    def state_var(self, owner: Any, key: Any) -> str:
        """The local holding ``owner[key]`` (read once, on first use)."""
        ident = (id(owner), key)
        name = self.states.get(ident)
        if name is None:
            name = self.states[ident] = f"state{len(self.states)}"
            self.add(f"    {name} = dict_get({self.const(owner, 'owner')}, {self.const(key, 'key')})")
        return name

    def tensor(self, value: str, device: Device) -> str:
        """An expression building a tensor of ``device`` around the array ``value``."""
        if device.is_autodiff():
            wrap = self.const(cast("AutodiffProtocol", device._backend).wrap, "autodiff_wrap")
            return f"Tensor({wrap}({value}), {self.const(device, 'device')})"
        return f"Tensor({value}, {self.const(device, 'device')})"


def build_runner(entry: Entry, leaves: list[Any]) -> Callable[[list[Any]], Any]:
    """The steady-state runner of ``entry`` (see the module docstring), or its generic
    path where the call's structure does not allow one."""
    gen = RunnerCode(entry, leaves)
    env, add, const = gen.env, gen.add, gen.const
    env.update(
        RETRACE=RETRACE,
        Tensor=Tensor,
        dict_get=dict.get,
        dict_set=dict.__setitem__,
        generic=entry.run_generic,
        plan_run=entry.plan.run,
        backend=entry.backend,
        scalar_program=entry.scalar_program,
        literals=entry.literals,
        unflatten=unflatten,
        result_spec=entry.result_spec,
        entry=entry,
        reserve=entry.reserve,
        release=entry.release,
        OWNED=entry.owned,
        DONATED=entry.donated,
    )
    fusion = entry.fusion is not None
    if fusion:
        # A fusion device: its queued ops run first (they may read the arrays this run
        # updates in place); inputs are read ready, outputs wrapped as lazy tensors.
        env.update(ready=entry.ready, wrap_lazy=entry.wrap, flush=entry.fusion.flush)
        add("    flush()")
    model_leaves = sorted({s.module for s in entry.sources if type(s) is Parameter or type(s) is Running})
    # A module this entry reads but does not return (a decode step's model): the same
    # module as now (by identity, held weakly) has the same parameters, read per call;
    # another one takes the generic path.
    read_only = {} if gen.returns_model else entry.read_only_modules(leaves, model_leaves)
    if read_only is None:
        return entry.run_generic
    env["leaves_of"] = module_leaves
    for i in model_leaves:
        if not gen.returns_model:
            add(f"    if leaves[{i}] is not {const(read_only[i], 'module_ref')}(): return generic(leaves)")
            add(f"    {gen.module_params(i)} = leaves_of(leaves[{i}])[0]")
            continue
        env["MODEL"] = entry.model_out  # built once, kept for the entry's life
        add(f"    if leaves[{i}] is not MODEL:")
        add("        return generic(leaves)")
    # Each state read must be the object the last run left there (with the structure
    # the trace read, see Entry.own_states).
    read_templates: dict[tuple[int, Any], Any] = {}
    for k, read in enumerate(entry.state_reads):
        var = gen.state_var(read.owner, read.key)
        read_templates[(id(read.owner), read.key)] = read.template
        add(f"    if {var} is not OWNED[{k}]: return generic(leaves)")
    inputs = [s.code(gen) for s in entry.tensor_sources]
    scalar_inputs = [s.code(gen) for s in entry.sources if s.scalar]
    places = list(inputs)  # where each input is held (assigned when packed)
    if fusion:
        inputs = [f"ready({expr})" for expr in inputs]
    # The inputs the plan holds, if it binds them (see the module docstring).
    plan = entry.plan
    accepts = getattr(plan, "accepts_donations", False) is True
    accepted = plan.donated(entry.donated) if accepts and not entry.bind_failed else ()
    binding = bool(accepted)
    written: dict[int, int] = {}  # output index -> position in the plan's result (-1 - i: held array i)
    if binding:
        env["bind"] = plan.bind
        held = sorted(i for _, i in accepted)
        held_set = set(held)
        held_of = {k: held.index(i) for k, i in accepted}
        position = 0
        for k in range(len(entry.graph.outputs)):
            if k in held_of:
                written[k] = -1 - held_of[k]
            else:
                written[k] = position
                position += 1
        free = [expr for i, expr in enumerate(inputs) if i not in held_set]
        env["pack"] = pack_contiguous
        add("    binding = entry.binding")
        add("    if binding is None:")
        # The held arrays (parameters, moments) move into one block per dtype first,
        # their owners rebound to the views: the state a step updates is contiguous.
        add(f"        held = pack([{', '.join(inputs[i] for i in held)}])")
        for n, i in enumerate(held):
            add(f"        {places[i]} = {f'wrap_lazy(held[{n}])' if fusion else f'held[{n}]'}")
        add("        binding = entry.binding = bind(DONATED, held)")
        add("        if binding is None:")
        add("            entry.bind_failed = True")
        add("            entry.drop_runner()")
        add("            return generic(leaves)")
    if entry.draws:
        add("    drawn = reserve()")
    add(f"    scalars = scalar_program([{', '.join(scalar_inputs)}])")
    if entry.draws:
        add("    if scalars is None:")
        add("        release(drawn)")
        add("        return RETRACE")
    else:
        add("    if scalars is None: return RETRACE")
    run_scalars = "scalars + literals" if entry.literals else "scalars"
    if binding:
        add(f"    outputs = binding.run(backend, [{', '.join(free)}], {run_scalars})")
        add("    if outputs is None:")
        if entry.draws:
            add("        release(drawn)")
        add("        entry.drop_runner()")
        add("        return generic(leaves)")
    elif entry.arg_donated:
        # The given-up arguments' arrays, made fit for in-place writes (see arrays.given).
        env["given"] = given
        env["ALL_DONATED"] = entry.donated + entry.arg_donated
        positions = [i for _, i in entry.arg_donated]
        add(f"    given_arrays = given([{', '.join(inputs[i] for i in positions)}])")
        for n, i in enumerate(positions):
            inputs[i] = f"given_arrays[{n}]"
        add(f"    outputs = plan_run(backend, [{', '.join(inputs)}], {run_scalars}, ALL_DONATED)")
    else:
        add(f"    outputs = plan_run(backend, [{', '.join(inputs)}], {run_scalars}, DONATED)")

    def out_array(k: int) -> str:
        """The expression of output ``k`` (a primitive of the device): for a held
        one, the held array."""
        if not binding:
            expr = f"outputs[{k}]"
        elif written[k] >= 0:
            expr = f"outputs[{written[k]}]"
        else:
            expr = f"binding.arrays[{-1 - written[k]}]"
        return f"wrap_lazy({expr})" if fusion else expr

    def out(k: int) -> str | None:
        """The expression of output ``k``; ``None`` for a held one (updated in place)."""
        return None if binding and written[k] < 0 else out_array(k)

    numbers: dict[tuple[type, int], str] = {}

    def number(kind: type, slot: int) -> str:
        """A run-time scalar as a Python number of ``kind``, converted once."""
        name = numbers.get((kind, slot))
        if name is None:
            name = numbers[(kind, slot)] = f"number{len(numbers)}"
            add(f"    {name} = {const(kind, 'kind')}(scalars[{slot}])")
        return name

    for write in entry.state_writes:
        template = read_templates.get((id(write.owner), write.key))
        if template is not None and template[0] is write.cls and write.cls is not Tensor and _in_place(template, write):
            _store_owned_state(gen, write, template, gen.states[(id(write.owner), write.key)], out, number)
        else:
            _store_state(gen, write, out_array)
    for running in entry.running_writes:
        # The module argument is the returned module (checked above).
        value = out(running.output)
        if value is not None:
            add(f"    {gen.slot(gen.n_params + running.source.index)} = {value}")
    out_exprs = []
    for result in entry.results:
        if type(result) is TensorResult:
            out_exprs.append(gen.tensor(out_array(result.output), result.device))
        elif type(result) is ModuleResult:
            for j in range(len(gen.slot_names)):
                value = out(result.first + j)
                if value is not None:
                    add(f"    {gen.slot(j)} = {value}")
            out_exprs.append("MODEL")
        elif type(result) is ScalarResult:
            out_exprs.append(f"{const(result.kind, 'kind')}(scalars[{result.slot}])")
        else:
            assert isinstance(result, ValueResult)
            out_exprs.append(const(result.value, "value"))
    add(f"    return {spec_expr(entry.result_spec, out_exprs, const)}")
    entry.code = "\n".join(gen.lines)
    exec(entry.code, env)  # code generated above from the entry's sources and writes
    return env["run"]


def _store_owned_state(
    gen: RunnerCode,
    write: StateWrite,
    template: Any,
    var: str,
    out: Callable[[int], str | None],
    number: Callable[[type, int], str],
) -> None:
    """The owned state object read above (``var``) updated in place: its tensors take
    the new arrays (nothing to do for the held ones: updated in place)."""
    read = dict(template[1])
    for field in write.fields:
        if type(field) is TensorField:
            value = out(field.output)
            if value is not None:
                inner = "._primitive.inner" if field.device.is_autodiff() else "._primitive"
                gen.add(f"    {var}.{field.name}{inner} = {value}")
        elif type(field) is NumberField:
            gen.add(f"    {var}.{field.name} = {number(field.kind, field.slot)}")
        else:
            assert type(field) is StaticField
            if not _same_static(read.get(field.name), field.value):
                gen.add(f"    {var}.{field.name} = {gen.const(field.value, 'value')}")


def _store_state(gen: RunnerCode, write: StateWrite, out_array: Callable[[int], str]) -> None:
    """``owner[key]`` written: the state object this entry wrote last time is updated
    in place (its tensors get the new values, when no two fields share one tensor
    object), anything else replaced by a new one."""
    const, add = gen.const, gen.add
    values = []
    for field in write.fields:
        if type(field) is TensorField:
            values.append((field.name, gen.tensor(out_array(field.output), field.device)))
        elif type(field) is NumberField:
            values.append((field.name, f"{const(field.kind, 'kind')}(scalars[{field.slot}])"))
        else:
            assert type(field) is StaticField
            values.append((field.name, const(field.value, "value")))
    owner, key = const(write.owner, "owner"), const(write.key, "key")
    if write.cls is Tensor:
        add(f"    dict_set({owner}, {key}, {values[0][1]})")
        return
    add(f"    current = dict_get({owner}, {key})")
    tensors = [field for field in write.fields if type(field) is TensorField]
    distinct = " and ".join(
        f"current.{a.name} is not current.{b.name}" for i, a in enumerate(tensors) for b in tensors[i + 1 :]
    )
    fields_ok = " and ".join([f"type(current.{f.name}) is Tensor" for f in tensors] + ([distinct] if distinct else []))
    cls = const(write.cls, "cls")
    add(f"    if type(current) is {cls}{' and ' + fields_ok if fields_ok else ''}:")
    add("        pass")
    by_name = dict(values)
    for field in write.fields:
        if type(field) is TensorField:
            inner = "._primitive.inner" if field.device.is_autodiff() else "._primitive"
            add(f"        current.{field.name}{inner} = {out_array(field.output)}")
        elif type(field) is NumberField:
            add(f"        current.{field.name} = {by_name[field.name]}")
    add("    else:")
    add(f"        dict_set({owner}, {key}, {cls}({', '.join(f'{n}={e}' for n, e in values)}))")


def _in_place(template: Any, write: StateWrite) -> bool:
    """Whether ``write`` can update the state object read with ``template`` in place:
    each tensor field was read as a tensor, and no field of another kind is written
    (static fields may be rewritten)."""
    read = dict(template[1])
    for field in write.fields:
        was = read.get(field.name)
        if type(field) is TensorField and not (type(was) is tuple and was[0] == "tensor"):
            return False
        if type(field) is NumberField and was != "number":
            return False
    return set(read) == {field.name for field in write.fields}


def _same_static(read: Any, value: Any) -> bool:
    """Whether a state field read with template kind ``read`` already holds ``value``."""
    if read == "none":
        return value is None
    return type(read) is tuple and read[0] == "static" and read[1] is value

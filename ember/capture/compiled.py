"""``ember.compile``: a Python function traced once into a graph, then replayed.

The first call with a new *guard key* (the arguments' shapes, dtypes and devices,
the modules' parameter ids, the Python values that are not floats) runs the
function under a trace (:mod:`ember.backend.fusion.trace`): everything it computes
on its devices — forward, the backward that autodiff's rules emit, the optimizer
update — becomes one graph, which an executor plans once. Later calls replay the
plan: no Python per op. Float arguments and optimizer step counts are run-time
scalars; a comparison on one becomes a guard, checked per call.

Parameters are *donated*: the model a compiled step returns holds its parameters
in buffers the next call updates in place (as ``jax.jit(donate_argnums=...)`` and
PyTorch's in-place ``optimizer.step()`` do); the model passed in is read, not
changed. Keep a copy (``model.fork(device)``) of a model you want to keep. The
optimizer's states are updated in place too: the moments a step writes back are
written into the arrays it read. Where the executor can (the LLVM executor over
flex, see ``LLVMPlan.run(donated=...)``), the new values are computed straight into
those arrays; the steady state holds them in a ``Binding`` and passes only the
other inputs per call. A call with a model this entry did not return, or with
states it did not write, first copies them (the caller's arrays stay untouched).

On a fusion device (``Device.flex().fusion()``, ``Device.wgpu().fusion()``, with or
without autodiff) a compiled function is whole-step fusion: it is traced for the
backend under the fusion decorator and planned by the device's executor (LLVM over
flex, WGSL over wgpu). Each call first runs the ops the device has queued, reads its
inputs as their ready values and returns the device's lazy tensors, holding the
results; which of these steps a call takes is chosen when it is traced, so other
devices pay nothing for them.

When the function cannot be traced (it reads a tensor's value, calls an op with no
graph rule, ...), that guard key runs eagerly from then on, with a one-time warning
naming the cause; results are the same either way.
"""

from __future__ import annotations

import operator
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from ember.backend.fusion.backend import LazyTensor
from ember.backend.fusion.executors import ReplayExecutor
from ember.backend.fusion.replay import PartialRun, Replay
from ember.backend.fusion.scalars import GraphBreak, SymScalar
from ember.backend.fusion.trace import Trace, capture
from ember.device import Device
from ember.errors import GraphError
from ember.module import Module, Param, RunningState
from ember.module.visitor import ParamCollector
from ember.tensor import Tensor, autocast

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol

_T = TypeVar("_T")
_RETRACE = object()
_NOT_OWNED = object()


def _same_static(read: Any, value: Any) -> bool:
    """Whether a state field read with template kind ``read`` already holds ``value``."""
    if read == "none":
        return value is None
    return type(read) is tuple and read[0] == "static" and read[1] is value


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name``."""
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _accepts_donations(plan: Any) -> bool:
    """Whether ``plan`` may write outputs into donated inputs (a fusion plan whose
    target says so, ``Plan.accepts_donations``; a custom executor's plan does not)."""
    return getattr(plan, "accepts_donations", False) is True


class CompileWarning(UserWarning):
    """A compiled function fell back to eager execution."""


# ---------------------------------------------------------------------- argument trees
@dataclass(frozen=True, slots=True)
class _Leaf:
    """A position in the flattened arguments holding a tensor, module or float."""

    kind: str  # "tensor", "module", "scalar"
    index: int


@dataclass(frozen=True, slots=True)
class _Node:
    """A registered dataclass in an argument or result structure: called with its
    fields' values (in declaration order), it builds the instance again."""

    cls: type
    names: tuple[str, ...]

    def __call__(self, children: Any) -> Any:
        return self.cls(*children)


_NODES: dict[type, _Node] = {}


@dataclass(frozen=True, slots=True)
class _CustomNode:
    """A class registered with :func:`register_pytree_node` in a structure: called with
    its children's values, it builds the instance again from them and ``aux``."""

    cls: type
    unflatten: Callable[[Any, tuple[Any, ...]], Any]
    aux: Any

    def __call__(self, children: Any) -> Any:
        return self.unflatten(self.aux, tuple(children))


_CUSTOM: dict[type, tuple[Callable[[Any], tuple[Any, Any]], Callable[[Any, tuple[Any, ...]], Any]]] = {}


def register_pytree_node(
    cls: type[_T],
    flatten: Callable[[_T], tuple[Any, Any]],
    unflatten: Callable[[Any, tuple[Any, ...]], _T],
) -> type[_T]:
    """Let instances of ``cls`` pass into and out of compiled functions as structures
    (JAX's ``register_pytree_node``): ``flatten(obj) -> (children, aux)`` gives the
    values to trace (tensors, modules, floats, or structures of them) and a hashable
    ``aux`` that identifies the structure (a new ``aux`` traces again);
    ``unflatten(aux, children)`` builds the instance again. ``GradientsParams`` is
    registered this way, so a compiled step may return the gradients."""
    _CUSTOM[cls] = (flatten, unflatten)
    return cls


def register_dataclass(cls: type[_T]) -> type[_T]:
    """Let instances of the dataclass ``cls`` pass into and out of compiled functions
    as structures: their fields are flattened like a tuple's (tensors become graph
    inputs and outputs) and the class is built again from them, by position. Use as a
    class decorator (the KV cache of :mod:`ember.nn.attention.cache` is one). A
    dataclass instance that holds tensors is registered on first sight; registering
    says so up front, and makes instances without tensors structures too."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        raise GraphError(f"ember: compile: register_dataclass needs a dataclass, got {cls!r}")
    _NODES[cls] = _Node(cls, tuple(f.name for f in dataclasses.fields(cls) if f.init))
    return cls


def _holds_tensors(value: Any) -> bool:
    """Whether ``value`` (a field's value) is or holds a tensor or module (one level of
    containers deep): what makes an unregistered dataclass a structure, not a constant."""
    if isinstance(value, (Tensor, Module)):
        return True
    if type(value) in (tuple, list):
        return any(isinstance(v, (Tensor, Module)) for v in value)
    if type(value) is dict:
        return any(isinstance(v, (Tensor, Module)) for v in value.values())
    return type(value) in _NODES or type(value) in _CUSTOM


def _auto_node(value: Any) -> _Node | None:
    """A dataclass instance that holds tensors in its fields (a batch, a step's output) is
    a structure even when not registered: registered on first sight. One with tensors in
    a field ``__init__`` does not take cannot be rebuilt, and stays a constant."""
    import dataclasses

    cls = type(value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type) or cls in _NODES:
        return _NODES.get(cls)
    fields = dataclasses.fields(value)
    if not any(_holds_tensors(getattr(value, f.name)) for f in fields):
        return None
    if any(not f.init and _holds_tensors(getattr(value, f.name)) for f in fields):
        return None
    register_dataclass(cls)
    return _NODES[cls]


def _flatten(value: Any, leaves: list[Any]) -> Any:
    """The structure of ``value`` with tensors, modules and floats moved to ``leaves``."""
    if isinstance(value, (Tensor, Module)) or (type(value) is float):
        leaves.append(value)
        kind = "tensor" if isinstance(value, Tensor) else "module" if isinstance(value, Module) else "scalar"
        return _Leaf(kind, len(leaves) - 1)
    if type(value) in (tuple, list):
        return (type(value), tuple(_flatten(v, leaves) for v in value))
    node = _NODES.get(type(value)) or _auto_node(value)
    if node is not None:
        return (node, tuple(_flatten(getattr(value, name), leaves) for name in node.names))
    custom = _CUSTOM.get(type(value))
    if custom is not None:
        children, aux = custom[0](value)
        return (_CustomNode(type(value), custom[1], aux), tuple(_flatten(v, leaves) for v in children))
    if type(value) is dict:
        return (dict, tuple((k, _flatten(v, leaves)) for k, v in value.items()))
    return ("static", value)


def _static_key(spec: Any) -> Any:
    """The hashable part of an argument structure (static values by value or identity)."""
    if type(spec) is _Leaf:
        return spec
    kind, items = spec
    if kind == "static":
        try:
            hash(items)
            return ("static", type(items), items)
        except TypeError:
            return ("static-id", id(items))
    if kind is dict:
        return (dict, tuple((k, _static_key(v)) for k, v in items))
    return (kind, tuple(_static_key(v) for v in items))


def _unflatten(spec: Any, leaves: list[Any]) -> Any:
    if type(spec) is _Leaf:
        return leaves[spec.index]
    kind, items = spec
    if kind == "static":
        return items
    if kind is dict:
        return {k: _unflatten(v, leaves) for k, v in items}
    return kind(_unflatten(v, leaves) for v in items)


def _module_leaves(module: Module) -> tuple[list[Param], list[RunningState]]:
    """The parameters and running states of ``module``, in visit order. A walk of the
    module tree costs a Python call per field (about a millisecond for a small
    transformer): the last few modules' results are kept, by identity (a built module
    is a value: its fields cannot be assigned), so a compiled function called with a
    module it does not return (a decode step's model) walks it once, not per call. A
    list field changed in place is not seen: build a new module (``replace``, ``map``)
    instead, as optimizers do."""
    for i, (ref, found) in enumerate(_LEAVES):
        if ref() is module:
            if i:
                _LEAVES.insert(0, _LEAVES.pop(i))
            return found
    collector = ParamCollector(states=True)
    module.visit(collector)
    params = [p for _, p in collector.items if isinstance(p, Param)]
    states = [s for _, s in collector.items if isinstance(s, RunningState)]
    found = (params, states)
    _LEAVES.insert(0, (weakref.ref(module), found))
    del _LEAVES[_LEAVES_KEPT:]
    return found


#: Modules whose leaves are kept (see :func:`_module_leaves`): (module, (params,
#: states)), most recent first.
_LEAVES: list[tuple[weakref.ref, tuple[list[Param], list[RunningState]]]] = []
_LEAVES_KEPT = 4


def _innermost(tensor: Tensor) -> Any:
    device = tensor._device
    # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per input).
    return device._backend.unwrap(tensor._primitive) if device.is_autodiff() else tensor._primitive  # type: ignore[attr-defined]


def _tensor_key(t: Tensor) -> tuple:
    p = t._primitive
    d = t._device
    # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per argument).
    tracked = d.is_autodiff() and d._backend.is_tracked(p)  # type: ignore[attr-defined]
    return (tuple(p.shape), p.dtype.str, d, tracked)


def _module_key(module: Module) -> tuple:
    params, states = _module_leaves(module)
    return (
        type(module),
        tuple((p.id, p._shape, p.dtype, p.device, p.require_grad) for p in params),
        tuple(
            (s.id, tuple(s.value()._primitive.shape), s.value()._primitive.dtype.str, s.value()._device) for s in states
        ),
    )


# ---------------------------------------------------------------------- one trace
class _Entry:
    """A traced function for one guard key: the plan, where its inputs come from, and
    how its outputs go back into tensors, modules and optimizer states."""

    def __init__(
        self,
        compiled: CompiledFunction,
        trace: Trace,
        spec: Any,
        result_spec: Any,
        result_leaves: list[Any],
        backend: Any,
        leaves: list[Any],
        fusion: Any = None,
    ) -> None:
        self.backend = backend
        # On a fusion device (``fusion``, its FusionBackend) the plan runs on the backend
        # under it: inputs are read as ready values, outputs wrapped as lazy tensors.
        self.fusion = fusion
        self.ready: Callable[[Any], Any] | None = None if fusion is None else fusion._ready
        self.wrap: Callable[[Any], Any] | None = None if fusion is None else fusion._wrap
        graph = trace.graph
        self.sources = trace.input_sources
        self.state_reads = trace.state_reads
        self.draws = trace.draws  # (device generator, blocks) per random draw, in program order
        # Outputs: the result's tensors and modules, then state writes.
        outputs: list[int] = []
        self.result_spec = result_spec
        self.result_plan: list[Any] = []
        for leaf in result_leaves:
            if isinstance(leaf, Tensor):
                self.result_plan.append(("tensor", len(outputs), leaf._device))
                outputs.append(_output_ref(trace, _innermost(leaf)))
            elif isinstance(leaf, Module):
                params, states = _module_leaves(leaf)
                first = len(outputs)
                for p in params:
                    outputs.append(_output_ref(trace, _innermost(p.val())))
                for s in states:
                    outputs.append(_output_ref(trace, _innermost(s.value())))
                self.result_plan.append(("module", first, leaf))
            elif type(leaf) is SymScalar:
                self.result_plan.append(("scalar", trace.scalar_slot(leaf), type(leaf.value)))
            else:
                self.result_plan.append(("value", leaf))
        self.state_plan: list[Any] = []
        for owner, key, value in trace.state_writes.values():
            fields = _writable_fields(value)
            layout: list[
                tuple
            ] = []  # (name, "tensor", output, device) | (name, "scalar", slot, type) | (name, "static", value)
            for name, item in fields:
                if isinstance(item, Tensor):
                    layout.append((name, "tensor", len(outputs), item._device))
                    outputs.append(_output_ref(trace, _innermost(item)))
                elif type(item) is SymScalar:
                    layout.append((name, "scalar", trace.scalar_slot(item), type(item.value)))
                else:
                    layout.append((name, "static", item))
            self.state_plan.append((owner, key, type(value), layout))
        self.running_plan: list[tuple[int, int, int, Device]] = []
        for state, value in trace.running_writes.values():
            i, j = trace.running_index[id(state)]
            self.running_plan.append((i, j, len(outputs), value._device))
            outputs.append(_output_ref(trace, _innermost(value)))
        graph.outputs = outputs
        graph = graph.prune()
        n_sym = len(trace.scalar_wanted)
        abstract, literals = graph.abstract_scalars(offset=n_sym)
        self.scalar_program = trace.scalars.compile(trace.scalar_wanted)
        self.graph = abstract
        executor = compiled.executor_for(backend, fusion)
        # The trace's literals (betas, epsilon, a loss's scale) never change: constants.
        fixed = {n_sym + i: value for i, value in enumerate(literals)}
        self.literals: list[Any] = []
        self._donations_offered = self._donations(leaves, result_leaves)
        self._arg_offered = self._arg_donations(compiled.donate, spec, leaves, result_leaves)
        self._deferred: Callable[[], Any] | None = None
        if not _takes(executor.plan, "fixed_scalars"):  # such an executor gets them on every run
            self.plan = executor.plan(abstract)
            self.literals = literals
        elif isinstance(executor, ReplayExecutor):
            self.plan = executor.plan(abstract, fixed_scalars=fixed)
        else:
            # A compiling executor plans from the second run on: the first one replays
            # the recorded calls (an entry that runs once, such as the first step of an
            # optimizer whose states do not exist yet, is never compiled).
            self.plan = Replay(abstract, fixed=fixed)
            self._deferred = lambda: executor.plan(abstract, fixed_scalars=fixed)
        self.donated = self._donations_offered if _accepts_donations(self.plan) else ()
        self.arg_donated = self._arg_offered if _accepts_donations(self.plan) else ()
        self.owned: list[Any] = []  # per state read: the object a replay may update in place
        self.binding: Any = None  # the plan's Binding of the donated inputs (see _specialize)
        self.bind_failed = False
        self.model_out: Module | None = None  # the module this entry returns, kept across calls
        self.model_out_key: Any = None
        self.model_slots: list[Any] = []
        self._runner: Callable[[list[Any]], Any] | None = None
        self.code = ""

    def _donations(self, leaves: list[Any], result_leaves: list[Any]) -> tuple[tuple[int, int], ...]:
        """(output, input) pairs where an output replaces an input: the returned
        module's parameters (by id) and running states, and each written-back field of
        an optimizer state that was read. The plan writes the new values into the old
        arrays where its schedule allows (``LLVMPlan.run(donated=...)``)."""
        index: dict[Any, int] = {}
        n = 0
        params_of: dict[int, list[Param]] = {}
        for source in self.sources:
            kind = source[0]
            if kind == "scalar":
                continue
            if kind == "param":
                params = params_of.get(source[1])
                if params is None:
                    params = params_of[source[1]] = _module_leaves(leaves[source[1]])[0]
                index[("param", params[source[2]].id)] = n
            elif kind == "running":
                index[("running", source[1], source[2])] = n
            elif kind == "state":
                index[("state", id(source[1]), source[2], source[3])] = n
            n += 1
        pairs: list[tuple[int, int]] = []
        for item, leaf in zip(self.result_plan, result_leaves):
            if item[0] == "module":
                for j, p in enumerate(_module_leaves(leaf)[0]):
                    i = index.get(("param", p.id))
                    if i is not None:
                        pairs.append((item[1] + j, i))
        for i, j, out, _device in self.running_plan:
            if ("running", i, j) in index:
                pairs.append((out, index[("running", i, j)]))
        for owner, key, _cls, layout in self.state_plan:
            for name, kind, *rest in layout:
                if kind == "tensor" and ("state", id(owner), key, name) in index:
                    pairs.append((rest[0], index[("state", id(owner), key, name)]))
        taken: set[int] = set()
        unique = []
        for k, i in sorted(pairs):
            if i not in taken:
                taken.add(i)
                unique.append((k, i))
        return tuple(unique)

    def _own_states(self) -> None:
        """Remembers the state objects a specialized replay may update in place: each
        read state as it is now when it has the structure the trace read, else a
        marker no state is (the replay then takes the generic path and its checks)."""
        owned = []
        for owner, key, template in self.state_reads:
            state = dict.get(owner, key)
            owned.append(state if _state_template(state) == template else _NOT_OWNED)
        self.owned[:] = owned  # the list generated code reads

    def _specialize(self, leaves: list[Any]) -> Callable[[list[Any]], Any]:
        """Straight-line Python for the steady state (the module argument is the module
        this entry returned, each state read is the object the last run left): read
        the inputs, run the plan, write the outputs back. Anything else (another
        module, a state replaced or of another shape) takes the generic path.

        Where the plan accepted donations, the runner holds those inputs in a
        :class:`~ember.backend.fusion.llvm.executor.Binding` (the parameters and
        moments are updated in place, so nothing is read or written back for them);
        a generic run, which may replace them, drops the binding."""
        env: dict[str, Any] = {
            "RETRACE": _RETRACE,
            "Tensor": Tensor,
            "dget": dict.get,
            "dset": dict.__setitem__,
            "generic": self._run_generic,
            "plan_run": self.plan.run,
            "backend": self.backend,
            "program": self.scalar_program,
            "literals": self.literals,
            "unflatten": _unflatten,
            "spec": self.result_spec,
            "E": self,
            "reserve": self._reserve,
            "release": self._release,
            "OWNED": self.owned,
            "DONATED": self.donated,
        }
        lines = ["def run(leaves):"]
        add = lines.append
        fusion = self.fusion is not None
        if fusion:
            # A fusion device: its queued ops run first (they may read the arrays this run
            # updates in place); inputs are read ready (RD), outputs wrapped (WR).
            env["RD"], env["WR"], env["FLUSH"] = self.ready, self.wrap, self.fusion.flush
            add("    FLUSH()")

        def const(value: Any, prefix: str) -> str:
            name = f"{prefix}{len(env)}"
            env[name] = value
            return name

        model_leaves = sorted({src[1] for src in self.sources if src[0] in ("param", "running")})
        returns_model = self.model_out is not None
        # A module this entry reads but does not return (a decode step's model): the
        # same module as now (by identity, held weakly) has the same parameters, read
        # per call; another one takes the generic path.
        read_only = {} if returns_model else self._read_only_modules(leaves, model_leaves)
        if read_only is None:
            return self._run_generic
        env["leaves_of"] = _module_leaves
        for i in model_leaves:
            if not returns_model:
                add(f"    if leaves[{i}] is not {const(read_only[i], 'R')}(): return generic(leaves)")
                add(f"    m{i} = leaves_of(leaves[{i}])[0]")
                continue
            env["MODEL"] = self.model_out  # built once, kept for the entry's life
            add(f"    if leaves[{i}] is not MODEL:")
            add("        return generic(leaves)")
        n_params = len(_module_leaves(self.model_out)[0]) if self.model_out is not None else 0
        slot_names = [const(holder, "slot") for _, holder in self.model_slots]
        slot_attr = ["inner" if kind == "autodiff" else "_primitive" for kind, _ in self.model_slots]
        states: dict[tuple[int, Any], str] = {}

        def state_var(owner: Any, key: Any) -> str:
            ident = (id(owner), key)
            name = states.get(ident)
            if name is None:
                name = states[ident] = f"s{len(states)}"
                add(f"    {name} = dget({const(owner, 'O')}, {const(key, 'K')})")
            return name

        # Each state read must be the object the last run left there (with the structure
        # the trace read, see _own_states).
        read_templates: dict[tuple[int, Any], Any] = {}
        for k, (owner, key, template) in enumerate(self.state_reads):
            var = state_var(owner, key)
            read_templates[(id(owner), key)] = template
            add(f"    if {var} is not OWNED[{k}]: return generic(leaves)")
        inputs, scalars = [], []
        for source in self.sources:
            kind = source[0]
            if kind == "arg":
                leaf = leaves[source[1]]
                inner = ".inner" if leaf._device.is_autodiff() else ""
                inputs.append(f"leaves[{source[1]}]._primitive{inner}")
            elif kind == "param" and not returns_model:
                inputs.append(f"m{source[1]}[{source[2]}]._value._primitive")
            elif kind in ("param", "running"):
                j = source[2] + (n_params if kind == "running" else 0)
                inputs.append(f"{slot_names[j]}.{slot_attr[j]}")
            elif kind == "state":
                _, owner, key, name = source
                var = state_var(owner, key)
                inputs.append(f"{var}._primitive" if name == "" else f"{var}.{name}._primitive")
            else:
                inner = source[1]
                if inner[0] == "arg":
                    scalars.append(f"leaves[{inner[1]}]")
                elif inner[0] == "rng":
                    scalars.append(f"drawn[{inner[1]}][{inner[2]}]")
                else:
                    scalars.append(f"{state_var(inner[1], inner[2])}.{inner[3]}")
        places = list(inputs)  # where each input is held (assigned when packed)
        if fusion:
            inputs = [f"RD({expr})" for expr in inputs]
        # The inputs the plan holds, if it binds them (see the docstring).
        accepted = self.plan.donated(self.donated) if _accepts_donations(self.plan) and not self.bind_failed else ()
        binding = bool(accepted)
        written: dict[int, int] = {}  # output index -> position in the plan's result (-1 - i: held array i)
        if binding:
            env["bind"] = self.plan.bind
            held = sorted(i for _, i in accepted)
            held_exprs = f"[{', '.join(inputs[i] for i in held)}]"
            held_set = set(held)
            held_outputs = {k for k, _ in accepted}
            n_outputs = len(self.graph.outputs)
            position = 0
            held_of = {k: held.index(i) for k, i in accepted}
            for k in range(n_outputs):
                if k in held_outputs:
                    written[k] = -1 - held_of[k]
                else:
                    written[k] = position
                    position += 1
            free = [expr for i, expr in enumerate(inputs) if i not in held_set]
            env["pack"] = pack_contiguous
            add("    B = E.binding")
            add("    if B is None:")
            # The held arrays (parameters, moments) move into one block per dtype first,
            # their owners rebound to the views: the state a step updates is contiguous.
            add(f"        H = pack({held_exprs})")
            for n, i in enumerate(held):
                add(f"        {places[i]} = {'WR(H[' + str(n) + '])' if fusion else 'H[' + str(n) + ']'}")
            add("        B = E.binding = bind(DONATED, H)")
            add("        if B is None:")
            add("            E.bind_failed = True")
            add("            E._runner = None")
            add("            return generic(leaves)")
        if self.draws:
            add("    drawn = reserve()")
        add(f"    sc = program([{', '.join(scalars)}])")
        if self.draws:
            add("    if sc is None:")
            add("        release(drawn)")
            add("        return RETRACE")
        else:
            add("    if sc is None: return RETRACE")
        run_scalars = "sc + literals" if self.literals else "sc"
        if binding:
            add(f"    outs = B.run(backend, [{', '.join(free)}], {run_scalars})")
            add("    if outs is None:")
            if self.draws:
                add("        release(drawn)")
            add("        E.binding = E._runner = None")
            add("        return generic(leaves)")
        elif self.arg_donated:
            # The given-up arguments' arrays, made fit for in-place writes (see _given).
            env["given"] = _given
            env["ALL_DONATED"] = self.donated + self.arg_donated
            positions = [i for _, i in self.arg_donated]
            add(f"    G = given([{', '.join(inputs[i] for i in positions)}])")
            for n, i in enumerate(positions):
                inputs[i] = f"G[{n}]"
            add(f"    outs = plan_run(backend, [{', '.join(inputs)}], {run_scalars}, ALL_DONATED)")
        else:
            add(f"    outs = plan_run(backend, [{', '.join(inputs)}], {run_scalars}, DONATED)")

        def out_array(k: int) -> str:
            """The expression of output ``k`` (a primitive of the device): for a held
            one, the held array."""
            if not binding:
                expr = f"outs[{k}]"
            elif written[k] >= 0:
                expr = f"outs[{written[k]}]"
            else:
                expr = f"B.arrays[{-1 - written[k]}]"
            return f"WR({expr})" if fusion else expr

        def out(k: int) -> str | None:
            """The expression of output ``k``; ``None`` for a held one (updated in place)."""
            return None if binding and written[k] < 0 else out_array(k)

        scalar_vars: dict[tuple[type, int], str] = {}

        def scalar_var(kind: type, slot: int) -> str:
            """A run-time scalar as a Python number of ``kind``, converted once."""
            name = scalar_vars.get((kind, slot))
            if name is None:
                name = scalar_vars[(kind, slot)] = f"n{len(scalar_vars)}"
                add(f"    {name} = {const(kind, 'T')}(sc[{slot}])")
            return name

        for owner, key, cls, layout in self.state_plan:
            template = read_templates.get((id(owner), key))
            if template is not None and template[0] is cls and cls is not Tensor and self._in_place(template, layout):
                # The owned state object read above: its tensors take the new arrays
                # (nothing to do for the held ones: updated in place).
                var = states[(id(owner), key)]
                for name, kind, *rest in layout:
                    if kind == "tensor":
                        value = out(rest[0])
                        if value is not None:
                            inner = "._primitive.inner" if rest[1].is_autodiff() else "._primitive"
                            add(f"    {var}.{name}{inner} = {value}")
                    elif kind == "scalar":
                        add(f"    {var}.{name} = {scalar_var(rest[1], int(rest[0]))}")
                    elif not _same_static(dict(template[1]).get(name), rest[0]):
                        add(f"    {var}.{name} = {const(rest[0], 'V')}")
                continue
            values = []
            for name, kind, *rest in layout:
                if kind == "tensor":
                    values.append((name, self._tensor_expr(out_array(rest[0]), rest[1], const)))
                elif kind == "scalar":
                    values.append((name, f"{const(rest[1], 'T')}(sc[{int(rest[0])}])"))
                else:
                    values.append((name, const(rest[0], "V")))
            o, kk = const(owner, "O"), const(key, "K")
            if cls is Tensor:
                add(f"    dset({o}, {kk}, {values[0][1]})")
                continue
            add(f"    cur = dget({o}, {kk})")
            # The state object this entry wrote last time is updated in place: its
            # tensors get the new values (when no two fields share one tensor object).
            tensors = [(name, rest[0]) for name, kind, *rest in layout if kind == "tensor"]
            distinct = " and ".join(
                f"cur.{a} is not cur.{b}" for i, (a, _) in enumerate(tensors) for b, _ in tensors[i + 1 :]
            )
            fields_ok = " and ".join(
                [f"type(cur.{name}) is Tensor" for name, _ in tensors] + ([distinct] if distinct else [])
            )
            add(f"    if type(cur) is {const(cls, 'C')}{' and ' + fields_ok if fields_ok else ''}:")
            add("        pass")
            for name, kind, *rest in layout:
                if kind == "tensor":
                    inner = "._primitive.inner" if rest[1].is_autodiff() else "._primitive"
                    add(f"        cur.{name}{inner} = {out_array(rest[0])}")
                elif kind == "scalar":
                    add(f"        cur.{name} = {dict(values)[name]}")
            add("    else:")
            add(f"        dset({o}, {kk}, {env_name(env, cls)}({', '.join(f'{n}={e}' for n, e in values)}))")
        for _i, j, index, _device in self.running_plan:
            slot = n_params + j  # the module argument is the returned module (checked above)
            value = out(index)
            if value is not None:
                add(f"    {slot_names[slot]}.{slot_attr[slot]} = {value}")
        out_exprs = []
        for item in self.result_plan:
            kind = item[0]
            if kind == "tensor":
                out_exprs.append(self._tensor_expr(out_array(item[1]), item[2], const))
            elif kind == "module":
                first = item[1]
                for j, (name, attr) in enumerate(zip(slot_names, slot_attr)):
                    value = out(first + j)
                    if value is not None:
                        add(f"    {name}.{attr} = {value}")
                out_exprs.append("MODEL")
            elif kind == "scalar":
                out_exprs.append(f"{const(item[2], 'T')}(sc[{int(item[1])}])")
            else:
                out_exprs.append(const(item[1], "V"))
        add(f"    return {_spec_expr(self.result_spec, out_exprs, const)}")
        self.code = "\n".join(lines)
        exec(self.code, env)  # code generated above from this entry's tables
        return env["run"]

    def _arg_donations(
        self, donate: frozenset[int], spec: Any, leaves: list[Any], result_leaves: list[Any]
    ) -> tuple[tuple[int, int], ...]:
        """(output, input) pairs for the arguments at positions ``donate`` (see
        :func:`compile`): each tensor of those arguments, in order, with the first result
        tensor not yet paired of its shape and dtype (a cache passed in and returned
        updated pairs field by field)."""
        if not donate:
            return ()
        arg_specs = spec[1][0][1]  # spec of ((args...), {kwargs})
        wanted: list[int] = []

        def collect(item: Any) -> None:
            if type(item) is _Leaf:
                if item.kind == "tensor":
                    wanted.append(item.index)
                return
            kind, items = item
            if kind == "static":
                return
            for child in items:
                collect(child[1] if kind is dict else child)

        for position in sorted(donate):
            if position < len(arg_specs):
                collect(arg_specs[position])
        index: dict[int, int] = {}
        n = 0
        for source in self.sources:
            if source[0] == "scalar":
                continue
            if source[0] == "arg":
                index[source[1]] = n
            n += 1
        outputs = [
            (item[1], leaf)
            for item, leaf in zip(self.result_plan, result_leaves)
            if item[0] == "tensor" and not leaf._device.is_autodiff()
        ]
        used: set[int] = set()
        pairs: list[tuple[int, int]] = []
        for leaf_index in wanted:
            i = index.get(leaf_index)
            tensor = leaves[leaf_index]
            if i is None or tensor._device.is_autodiff():
                continue
            shape, dtype = tensor.dims(), tensor.dtype
            for k, out in outputs:
                if k not in used and out.dims() == shape and out.dtype == dtype:
                    used.add(k)
                    pairs.append((k, i))
                    break
        return tuple(pairs)

    def _read_only_modules(self, leaves: list[Any], model_leaves: list[int]) -> dict[int, Any] | None:
        """Weak references to the modules at ``model_leaves`` of an entry that returns no
        module, when a specialized run can read their parameters straight from the
        ``Param`` objects: no running states, every value a plain (not autodiff) tensor,
        none donated (a donated parameter is copied first: the generic path does it).
        ``None`` otherwise."""
        if any(src[0] == "running" for src in self.sources):
            return None
        positions = []
        n = 0
        for src in self.sources:
            if src[0] == "scalar":
                continue
            if src[0] == "param":
                positions.append(n)
            n += 1
        if set(positions) & {i for _, i in self.donated}:
            return None
        refs = {}
        for i in model_leaves:
            for p in _module_leaves(leaves[i])[0]:
                if p._value is None or p._value._device.is_autodiff():
                    return None
            refs[i] = weakref.ref(leaves[i])
        return refs

    @staticmethod
    def _in_place(template: Any, layout: list[Any]) -> bool:
        """Whether a state written with ``layout`` can update the state object read
        with ``template`` in place: each tensor field was read as a tensor, and no
        field of another kind is written (static fields may be rewritten)."""
        read = dict(template[1])
        for name, kind, *_ in layout:
            was = read.get(name)
            if kind == "tensor" and not (type(was) is tuple and was[0] == "tensor"):
                return False
            if kind == "scalar" and was != "number":
                return False
        return set(read) == {name for name, *_ in layout}

    @staticmethod
    def _tensor_expr(value: str, device: Device, const: Callable[[Any, str], str]) -> str:
        if device.is_autodiff():
            return (
                f"Tensor({const(cast('AutodiffProtocol', device._backend).wrap, 'W')}({value}), {const(device, 'D')})"
            )
        return f"Tensor({value}, {const(device, 'D')})"

    # ------------------------------------------------------------------ replay
    def run(self, leaves: list[Any]) -> Any:
        try:
            runner = self._runner
            if runner is not None:
                return runner(leaves)
            out = self._run_generic(leaves)
        except PartialRun as partial:  # an executor's error, with what it computed: the error itself
            raise partial.error from None
        if out is not _RETRACE:
            if self._deferred is not None:  # the first run replayed: compile for the next ones
                self.plan = self._deferred()
                self._deferred = None
                self.donated = self._donations_offered if _accepts_donations(self.plan) else ()
                self.arg_donated = self._arg_offered if _accepts_donations(self.plan) else ()
            else:
                self._runner = self._specialize(leaves)
        return out

    def _reserve(self) -> list[tuple[int, int]]:
        """The Philox ``(key, counter)`` of each random draw, taken from each device's
        current generator in program order (as the eager function would)."""
        return [rng.current().reserve(blocks) for rng, blocks in self.draws]

    def _release(self, drawn: list[tuple[int, int]]) -> None:
        """Give back the draws of a call that retraces instead of running."""
        for (rng, blocks), (key, counter) in reversed(list(zip(self.draws, drawn))):
            rng.current().release(key, counter, blocks)

    def _run_generic(self, leaves: list[Any]) -> Any:
        self.binding = None  # this run may replace the arrays a binding holds
        ready, wrap = self.ready, self.wrap
        if self.fusion is not None:  # see _specialize
            self.fusion.flush()
        inputs: list[Any] = []
        scalar_inputs: list[Any] = []
        module_cache: dict[int, tuple[list[Param], list[RunningState]]] = {}
        for source in self.sources:
            if source[0] == "scalar" and source[1][0] == "rng":
                scalar_inputs.append(source[1])  # filled once the guards below pass
                continue
            value = _read_source(source, leaves, module_cache, self)
            if value is _RETRACE:
                return _RETRACE
            if source[0] == "scalar":
                scalar_inputs.append(value)
            else:
                inputs.append(value if ready is None else ready(value))
        for owner, key, template in self.state_reads:
            if _state_template(dict.get(owner, key)) != template:
                return _RETRACE
        drawn: list[tuple[int, int]] = []
        if self.draws:
            drawn = self._reserve()
            scalar_inputs = [drawn[v[1]][v[2]] if type(v) is tuple and v[:1] == ("rng",) else v for v in scalar_inputs]
        scalars = self.scalar_program(scalar_inputs)
        if scalars is None:
            self._release(drawn)
            return _RETRACE
        # Donated inputs are copied first: the arrays passed in are read, not changed
        # (a model that is not the one this entry returned, states written elsewhere).
        for _, i in self.donated:
            inputs[i] = np.array(inputs[i], order="C", copy=True)
        donated = self.donated
        if self.arg_donated:  # the caller gave these up (compile(donate=...)): no copy
            positions = [i for _, i in self.arg_donated]
            for i, array in zip(positions, _given([inputs[i] for i in positions])):
                inputs[i] = array
            donated = donated + self.arg_donated
        values = self.plan.run(self.backend, inputs, scalars + self.literals, donated)
        for owner, key, cls, layout in self.state_plan:
            current = dict.get(owner, key)
            fields = {}
            for name, kind, *rest in layout:
                if kind == "tensor":
                    fields[name] = _tensor_on(values[rest[0]], rest[1], wrap)
                elif kind == "scalar":
                    fields[name] = rest[1](scalars[rest[0]])
                else:
                    fields[name] = rest[0]
            if type(current) is cls and cls is not Tensor and hasattr(current, "__dataclass_fields__"):
                for name, item in fields.items():
                    setattr(current, name, item)
            else:
                dict.__setitem__(owner, key, fields[""] if cls is Tensor else cls(**fields))
        for i, j, index, device in self.running_plan:
            if leaves[i] is self.model_out and self.model_out is not None:
                continue  # the module this entry returned: _module_out updates its states' tensors
            found = module_cache.get(i) or _module_leaves(leaves[i])
            found[1][j]._value = _tensor_on(values[index], device, wrap)
        self._own_states()
        out_leaves: list[Any] = []
        for item in self.result_plan:
            kind = item[0]
            if kind == "tensor":
                out_leaves.append(_tensor_on(values[item[1]], item[2], wrap))
            elif kind == "module":
                out_leaves.append(self._module_out(item[2], values, item[1]))
            elif kind == "scalar":
                out_leaves.append(item[2](scalars[item[1]]))
            else:
                out_leaves.append(item[1])
        return _unflatten(self.result_spec, out_leaves)

    def _module_out(self, traced: Module, values: list[Any], first: int) -> Module:
        """The returned module: built once, then its buffers updated in place."""
        wrap = self.wrap
        if self.model_out is None:
            params, states = _module_leaves(traced)
            arrays = iter(values[first:])
            new_params = {p.id: Param(p.id, _tensor_on(next(arrays), p.device, wrap), p.require_grad) for p in params}
            new_states = {id(s): RunningState(_tensor_on(next(arrays), s.value()._device, wrap), s.id) for s in states}
            from ember.module.visitor import FnMapper

            self.model_out = traced.map(FnMapper(lambda p, path: new_params[p.id], lambda s, path: new_states[id(s)]))
            self.model_out_key = _module_key(self.model_out)
            # What a replay updates in place: each value's autodiff wrapper or tensor.
            out_params, out_states = _module_leaves(self.model_out)
            values_out = [p.val() for p in out_params] + [s.value() for s in out_states]
            self.model_slots = [
                ("autodiff", t._primitive) if t._device.is_autodiff() else ("plain", t) for t in values_out
            ]
            return self.model_out
        for (kind, holder), array in zip(self.model_slots, values[first : first + len(self.model_slots)]):
            if wrap is not None:
                array = wrap(array)
            if kind == "autodiff":
                holder.inner = array
            else:
                holder._primitive = array
        return self.model_out


def _spec_expr(spec: Any, leaves: list[str], const: Callable[[Any, str], str]) -> str:
    """A Python expression building the result of structure ``spec`` from the
    expressions ``leaves`` (generated code's counterpart of :func:`_unflatten`)."""
    if type(spec) is _Leaf:
        return leaves[spec.index]
    kind, items = spec
    if kind == "static":
        return const(items, "V")
    if kind is dict:
        return "{" + ", ".join(f"{const(k, 'K')}: {_spec_expr(v, leaves, const)}" for k, v in items) + "}"
    inner = ", ".join(_spec_expr(v, leaves, const) for v in items)
    if kind is tuple:
        return f"({inner}{',' if len(items) == 1 else ''})"
    if kind is list:
        return f"[{inner}]"
    return f"{const(kind, 'S')}(({inner}{',' if len(items) == 1 else ''}))"


def pack_contiguous(arrays: list[Any]) -> list[Any]:
    """Copies of ``arrays`` as views into one block per dtype, each view starting on a
    64-byte boundary (what a compiled step binds: its parameters and optimizer moments
    then lie together in memory). Arrays that are not distinct C-contiguous numpy
    arrays are returned as they are (the binding refuses them)."""
    if len({id(a) for a in arrays}) != len(arrays) or not all(
        type(a) is np.ndarray and a.flags.c_contiguous for a in arrays
    ):
        return arrays
    out: list[Any] = list(arrays)
    groups: dict[np.dtype, list[int]] = {}
    for n, a in enumerate(arrays):
        groups.setdefault(a.dtype, []).append(n)
    for dtype, members in groups.items():
        step = max(1, 64 // dtype.itemsize)
        offsets, total = [], 0
        for n in members:
            offsets.append(total)
            total += -(-arrays[n].size // step) * step
        raw = np.empty(total * dtype.itemsize + 64, np.uint8)
        start = -raw.ctypes.data % 64
        block = raw[start : start + total * dtype.itemsize].view(dtype)
        for n, offset in zip(members, offsets):
            view = block[offset : offset + arrays[n].size].reshape(arrays[n].shape)
            view[...] = arrays[n]
            out[n] = view
    return out


def _given(arrays: list[Any]) -> list[Any]:
    """The arrays of given-up arguments (``compile(donate=...)``) as a plan may write
    them in place: a copy of one that is not a writable C-contiguous numpy array, or
    whose memory (its base array's) another of them holds too."""
    seen: set[int] = set()
    out = []
    for a in arrays:
        owner = id(a if type(a) is not np.ndarray or a.base is None else a.base)
        if type(a) is not np.ndarray or not a.flags.c_contiguous or not a.flags.writeable or owner in seen:
            a = np.array(a, order="C", copy=True)
            owner = id(a)
        seen.add(owner)
        out.append(a)
    return out


def env_name(env: dict[str, Any], value: Any) -> str:
    """The name under which ``value`` is in a generated function's globals."""
    for name, item in env.items():
        if item is value:
            return name
    raise KeyError(value)  # pragma: no cover


def _output_ref(trace: Trace, primitive: Any) -> int:
    if type(primitive) is LazyTensor:
        if primitive.value is None:
            ref = primitive.ref
            assert ref is not None, "a LazyTensor without a value is pending in a stream"
            return ref
        primitive = primitive.value
    return trace.lift(primitive)


def _writable_fields(value: Any) -> list[tuple[str, Any]]:
    import dataclasses

    if isinstance(value, Tensor):
        return [("", value)]
    if dataclasses.is_dataclass(value):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    raise GraphBreak(f"ember: compile: cannot write back a state of type {type(value).__name__}")


def _state_template(value: Any) -> Any:
    from ember.backend.fusion.trace import _state_fields

    if value is None:
        return None
    return _state_fields(value)[1]


def _tensor_on(array: Any, device: Device, wrap: Callable[[Any], Any] | None = None) -> Tensor:
    """A tensor of ``device`` holding ``array`` (a plan's output; wrapped by ``wrap``,
    a fusion device's ``_wrap``, first)."""
    if wrap is not None:
        array = wrap(array)
    if device.is_autodiff():
        # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per output).
        return Tensor(device._backend.wrap(array), device)  # type: ignore[attr-defined]
    return Tensor(array, device)


def _read_source(source: Any, leaves: list[Any], cache: dict, entry: _Entry) -> Any:
    kind = source[0]
    if kind == "arg":
        return _innermost(leaves[source[1]])
    if kind in ("param", "running"):
        leaf = source[1]
        module = leaves[leaf]
        found = cache.get(leaf)
        if found is None:
            found = cache[leaf] = _module_leaves(module)
        items = found[0] if kind == "param" else found[1]
        value = items[source[2]].val() if kind == "param" else items[source[2]].value()
        return _innermost(value)
    if kind == "state":
        _, owner, key, name = source
        state = dict.get(owner, key)
        if state is None:
            return _RETRACE
        item = state if name == "" else getattr(state, name, None)
        return _innermost(item) if isinstance(item, Tensor) else _RETRACE
    if kind == "scalar":
        inner = source[1]
        if inner[0] == "arg":
            return leaves[inner[1]]
        _, owner, key, name = inner
        state = dict.get(owner, key)
        return _RETRACE if state is None else getattr(state, name)
    raise GraphError(f"ember: compile: unknown input source {source!r}")  # pragma: no cover


# ---------------------------------------------------------------------- the function
class CompiledFunction:
    """A function traced per guard key and replayed (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], max_traces: int = 8, executor: Any = None, donate: tuple[int, ...] = ()):
        self.fn = fn
        self.donate = frozenset(donate)
        self.max_traces = max_traces
        self.executor = executor
        self._entries: dict[Any, _Entry] = {}
        self._eager: dict[Any, str] = {}
        self._last: tuple[tuple, Any, _Entry, Any] | None = None  # the fast path (see __call__)
        self._module_keys: list[tuple[weakref.ref, Any]] = []  # see _module_key
        self.stats = {"calls": 0, "traces": 0, "replays": 0, "eager": 0, "evictions": 0, "retraces": 0}
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "compiled")

    def executor_for(self, backend: Any, fusion: Any = None) -> Any:
        """The executor of this function's plans: the one given, else the fusion
        layer's default for the backend (LLVM over flex, WGSL tapes over wgpu, CUDA
        Graphs over cuda, replay elsewhere); on a fusion device (``fusion``, its
        FusionBackend, over ``backend``), the device's own executor."""
        if self.executor is not None:
            return self.executor
        from ember.backend.fusion.executors import default_executor

        executor = fusion.executor if fusion is not None else default_executor(backend)
        return _ReplayExecutor() if isinstance(executor, ReplayExecutor) else executor

    def cache_size(self) -> int:
        """How many traces are kept."""
        return len(self._entries)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stats = self.stats
        stats["calls"] += 1
        # Fast path: the same tensors and modules as the last call (a training loop's
        # steady state; the module being the one the last call returned), floats
        # anywhere: the key is the last call's.
        last = self._last
        if not kwargs and last is not None and len(args) == len(last[0]) and last[3] == autocast.state_key():
            prev = last[0]
            # Identical arguments (checked in C), or identical but for floats.
            if all(map(_is, args, prev)) or all(
                a is b or (type(a) is float and type(b) is float) for a, b in zip(args, prev)
            ):
                result = last[2].run(list(args))
                if result is not _RETRACE:
                    # The arguments are last call's (floats aside), and so is the module
                    # the next call will pass: the fast path stays armed as it is.
                    stats["replays"] += 1
                    return result
                self._last = None
        leaves: list[Any] = []
        spec = _flatten((args, kwargs), leaves)
        key = self._key(spec, leaves)
        if key in self._eager:
            self.stats["eager"] += 1
            return self.fn(*args, **kwargs)
        entry = self._entries.get(key)
        if entry is not None:
            result = entry.run(leaves)
            if result is not _RETRACE:
                self.stats["replays"] += 1
                self._remember(args, kwargs, key, entry, result)
                return result
            self.stats["retraces"] += 1
            del self._entries[key]
        self._last = None
        return self._trace_and_run(key, spec, leaves, args, kwargs)

    def _remember(self, args: tuple, kwargs: dict, key: Any, entry: _Entry, result: Any) -> None:
        """Arms the fast path when the arguments are flat (tensors, modules, numbers):
        identical objects next time mean an identical key."""
        if kwargs or not all(type(a) in _FLAT_KINDS or isinstance(a, (Tensor, Module)) for a in args):
            self._last = None
            return
        self._last = (_fast_args(args, result, entry), key, entry, autocast.state_key())

    def _key(self, spec: Any, leaves: list[Any]) -> tuple:
        parts: list[Any] = [_static_key(spec), autocast.state_key()]
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                parts.append(_tensor_key(leaf))
            elif isinstance(leaf, Module):
                parts.append(self._module_key(leaf))
            else:
                parts.append("scalar")
        return tuple(parts)

    def _module_key(self, module: Module) -> Any:
        for entry in self._entries.values():
            if entry.model_out is module:  # the module a replay returned: its key is known
                return entry.model_out_key
        # A module passed again (a decode step's model): a built module is a value, so
        # its key is the one computed last time (kept weakly, as _module_leaves keeps
        # walks), unless it has running states (their values are replaced per step).
        if _module_leaves(module)[1]:
            return _module_key(module)
        keys = self._module_keys
        for i, (ref, key) in enumerate(keys):
            if ref() is module:
                if i:
                    keys.insert(0, keys.pop(i))
                return key
        key = _module_key(module)
        keys.insert(0, (weakref.ref(module), key))
        del keys[_LEAVES_KEPT:]
        return key

    def _trace_and_run(self, key: Any, spec: Any, leaves: list[Any], args: tuple, kwargs: dict) -> Any:
        devices = _devices(leaves)
        if len(devices) != 1:
            return self._fall_back(key, args, kwargs, f"the arguments live on {len(devices)} devices, not one")
        device = devices[0]
        for leaf in leaves:
            if isinstance(leaf, Module):
                for p in _module_leaves(leaf)[0]:
                    p.val()  # lazy parameters draw their values now, not in the trace
        try:
            with capture([device]) as trace:
                traced_leaves = self._trace_inputs(trace, leaves)
                t_args, t_kwargs = _unflatten(spec, traced_leaves)
                result = self.fn(*t_args, **t_kwargs)
                result_leaves: list[Any] = []
                result_spec = _flatten_result(result, result_leaves)
                tracer = trace.backends[0]
                entry = _Entry(self, trace, spec, result_spec, result_leaves, tracer.inner, leaves, tracer.fusion)
        except GraphBreak as error:
            return self._fall_back(key, args, kwargs, str(error))
        self.stats["traces"] += 1
        if len(self._entries) >= self.max_traces:
            self._entries.pop(next(iter(self._entries)))
            self.stats["evictions"] += 1
        out = entry.run(leaves)
        if out is _RETRACE:  # pragma: no cover - the trace just read these states
            raise GraphError("ember: compile: a fresh trace failed its own guards")
        # The key of the returned module is its identity from now on.
        self._entries[key] = entry
        return out

    def _trace_inputs(self, trace: Trace, leaves: list[Any]) -> list[Any]:
        traced: list[Any] = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, Tensor):
                trace.add_input(_innermost(leaf), ("arg", i))
                traced.append(leaf)
            elif isinstance(leaf, Module):
                params, states = _module_leaves(leaf)
                for j, p in enumerate(params):
                    trace.add_input(_innermost(p.val()), ("param", i, j))
                for j, s in enumerate(states):
                    trace.add_input(_innermost(s.value()), ("running", i, j))
                    trace.running_index[id(s)] = (i, j)
                traced.append(leaf)
            else:
                traced.append(trace.scalar_input(leaf, ("arg", i)))
        return traced

    def _fall_back(self, key: Any, args: tuple, kwargs: dict, reason: str) -> Any:
        self._eager[key] = reason
        warnings.warn(
            f"ember: compile: {self.__name__} runs eagerly for these arguments: {reason}",
            CompileWarning,
            stacklevel=3,
        )
        self.stats["eager"] += 1
        return self.fn(*args, **kwargs)


_FLAT_KINDS = frozenset({float, int, bool, str, type(None)})
_is = operator.is_


def _fast_args(args: tuple, result: Any, entry: _Entry) -> tuple:
    """The arguments the next call must repeat for the fast path: these, with a module
    argument replaced by the module this call returned (what a loop passes next)."""
    out = entry.model_out
    if out is None:
        return args
    return tuple(out if isinstance(a, Module) else a for a in args)


class _ReplayExecutor:
    def plan(self, graph: Any) -> Replay:
        return Replay(graph, check=False)


def _flatten_result(result: Any, leaves: list[Any]) -> Any:
    if isinstance(result, (Tensor, Module)) or type(result) is SymScalar:
        leaves.append(result)
        return _Leaf("out", len(leaves) - 1)
    if type(result) in (tuple, list):
        return (type(result), tuple(_flatten_result(v, leaves) for v in result))
    node = _NODES.get(type(result)) or _auto_node(result)
    if node is not None:
        return (node, tuple(_flatten_result(getattr(result, name), leaves) for name in node.names))
    custom = _CUSTOM.get(type(result))
    if custom is not None:
        children, aux = custom[0](result)
        return (_CustomNode(type(result), custom[1], aux), tuple(_flatten_result(v, leaves) for v in children))
    if type(result) is dict:
        return (dict, tuple((k, _flatten_result(v, leaves)) for k, v in result.items()))
    return ("static", result)


def _devices(leaves: list[Any]) -> list[Device]:
    found: list[Device] = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            candidates = [leaf._device]
        elif isinstance(leaf, Module):
            candidates = [p.device for p in _module_leaves(leaf)[0]]
        else:
            continue
        for d in candidates:
            inner = d.inner()
            if inner not in found:
                found.append(inner)
    return found


def compile(
    fn: Callable[..., Any] | None = None, *, max_traces: int = 8, executor: Any = None, donate: tuple[int, ...] = ()
) -> Any:
    """Trace ``fn`` once per guard key and replay it without Python per op.

    >>> step = ember.compile(train_step)           # doctest: +SKIP
    >>> model, loss = step(model, x, y)            # doctest: +SKIP

    ``max_traces`` bounds the traces kept (the oldest is dropped first). Use as a
    decorator too (``@ember.compile`` or ``@ember.compile(max_traces=4)``).

    ``donate`` names positional arguments whose tensors the caller gives up (as
    ``jax.jit(donate_argnums=...)``): a result tensor of the same shape and dtype (the
    first not yet paired, in order) may be computed into one's array, where the
    executor can (LLVM over flex). A decode step passing its KV cache and getting the
    new one back then updates it in place; the tensors passed there must not be read
    after the call (they may hold the new values).
    """
    if fn is None:
        return lambda f: CompiledFunction(f, max_traces, executor, donate)
    return CompiledFunction(fn, max_traces, executor, donate)


__all__ = ["CompileWarning", "CompiledFunction", "compile", "register_dataclass", "register_pytree_node"]

"""A variant's run as one generated Python function.

:func:`generate` writes the plain runner (``run(backend, inputs, scalars) ->
outputs``, or ``None`` when the scalars fail the variant's guards); it computes the
scalars straight into the buffer compiled code reads, binds each input to the
pointer table only when it is not the array bound last time (a training loop passes
the same arrays), allocates the returned buffers that are not donated (small ones
fresh, large ones recycled: :func:`recycle`), and calls each compiled segment without
arguments. :func:`runner_code` also writes the runner of a
:class:`~ember.backend.fusion.llvm.executor.Binding`, whose held inputs stay bound.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.fusion.replay import PartialRun
from ember.backend.fusion.scheduler import Buffer, Call
from ember.backend.kernel.llvm import arrays
from ember.backend.kernel.views import size_of

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.executor import Binding
    from ember.backend.fusion.llvm.variant import Variant

#: Unique names: of generated functions and of compiled modules' symbols.
UNIQUE = itertools.count()
_HANDLE = arrays.handle


def unbound() -> None:
    """A weak reference to nothing: no array is bound yet."""
    return None


#: Returned buffers of at most this many bytes are allocated fresh on each run;
#: larger ones are recycled (see :func:`recycle`).
SMALL_OUTPUT = 4096


def generate(variant: Variant, buffers: list[Buffer], memory: Any, aliases: dict[int, int]) -> tuple[str, Any]:
    """The run function of ``variant``, as straight-line Python (see the module
    docstring): ``run(backend, inputs, scalars) -> outputs``, or ``None`` when the
    scalars fail this variant's guards."""
    env: dict[str, Any] = {
        "V": variant,
        "P": variant._ptrs,
        "program": variant._program,
        "empty": np.empty,
        "recycle": recycle,
        "PartialRun": PartialRun,
        "ident": _HANDLE,
        "wref": weakref.ref,
        "HOLDER": None,
        "STATUS": variant._status,
    }
    variant._env = env
    variant._fresh_shape = fresh_shape = {b.id: b.shape for b in buffers if b.id in memory.outputs}
    # Fresh buffers take the shape of the (first) output they hold, sparing a reshape.
    for buf, view in reversed(variant.schedule.outputs):
        if (
            buf in fresh_shape
            and view.offset == 0
            and view.size == size_of(buffers[buf].shape)
            and view.is_contiguous()
        ):
            fresh_shape[buf] = view.shape
    for b in buffers:
        if b.kind == "const":
            array_ = np.ascontiguousarray(variant.expanded.graph.consts[b.value])
            env[f"c{b.id}"] = array_
            slot = variant._ext.get(b.id, -1)
            if slot >= 0:
                variant._ptrs[slot] = _HANDLE(array_)
    # Per input position: its buffer's pointer-table slot (-1: none) and whether a
    # donated output is written into it.
    graph = variant.expanded.graph
    position = {v: k for k, v in enumerate(graph.inputs)}
    sources = set(aliases.values())
    variant._input_slots = {}
    for b in buffers:
        if b.kind == "input":
            variant._input_slots[position[b.value]] = (variant._ext.get(b.id, -1), b.id in sources)
    return runner_code(variant, "run", None)


def runner_code(
    variant: Variant, fn_name: str, held: dict[int, int] | None, binding: Binding | None = None
) -> tuple[str, Any]:
    """Generates ``fn_name``: the plain runner (``held is None``) or the runner of a
    :class:`Binding` (``held``: input position -> index in the binding's arrays),
    which takes the other inputs and returns the outputs not written into held
    arrays."""
    sched = variant.schedule
    graph = variant.expanded.graph
    buffers = sched.buffers
    aliases = variant.memory.aliases
    env = variant._env
    tag = ""
    if binding is not None:  # a binding's names, apart from other bindings' in the same globals
        tag = str(next(UNIQUE))
        env.update({f"B{tag}": binding, "LOCK": binding.plan._lock, f"MISS{tag}": binding._miss})
    fresh_shape = variant._fresh_shape
    positions = [k for k in range(len(graph.inputs)) if held is None or k not in held]
    args = "backend, inputs, scalars" if held is None else "backend, inputs, scalars, miss=True"
    lines = [f"def {fn_name}({args}):"]
    add = lines.append
    add("    global HOLDER")
    if held is not None:
        add("    LOCK.acquire()")
        add("    try:")
    start = len(lines)
    if variant._free is None:
        add("    rest = program(scalars)")
    else:
        env["FREE"] = variant._free
        add("    rest = program([scalars[i] for i in FREE])")
    if held is None:
        add("    if rest is None: return None")
        add("    HOLDER = None")  # a plain run may rebind any slot a binding held
    else:
        add(f"    if rest is None: return MISS{tag}(backend, inputs, scalars) if miss else None")
        add(f"    if B{tag} is not HOLDER: V._hold(B{tag})")
    names: dict[int, str] = {}
    rebound: list[str] = []  # the weak references of bound inputs the runner sets
    if positions:
        add(f"    {''.join(f'i{k}, ' for k in positions)}= inputs")
    for b in buffers:
        if b.kind == "const":
            names[b.id] = f"c{b.id}"
        if b.kind != "input":
            continue
        k = graph.inputs.index(b.value)
        if held is not None and k in held:
            names[b.id] = f"B{tag}.arrays[{held[k]}]"
            continue
        name = names[b.id] = f"i{k}"
        slot, donated = variant._input_slots[k]
        if slot < 0 and not donated:
            continue
        env.setdefault(f"l{k}", unbound)
        add(f"    if {name} is not l{k}():")
        if donated:
            add(f"        {name} = V._bind({k}, {name}, {slot}, True)")
            continue
        # Variant._bind's common case inline (a training step's parameters and
        # moments are new arrays on every run): a dense array is bound as it is.
        rebound.append(f"l{k}")
        add(f"        if {name}.flags.c_contiguous:")
        add(f"            P[{slot}] = ident({name})")
        add(f"            l{k} = wref({name})")
        add("        else:")
        add(f"            {name} = V._bind({k}, {name}, {slot}, False)")
    for buf, source in aliases.items():
        names[buf] = names[source]
    for buf, shape in fresh_shape.items():
        name = names[buf] = f"f{buf}"
        dtype = buffers[buf].dtype
        env[f"s{buf}"], env[f"d{buf}"] = shape, dtype
        if buffers[buf].nbytes <= SMALL_OUTPUT:
            add(f"    {name} = empty(s{buf}, d{buf})")
        else:
            env.setdefault(f"pool{buf}", [])
            add(f"    {name} = recycle(pool{buf}, s{buf}, d{buf})")
        slot = variant._ext.get(buf, -1)
        if slot >= 0:
            add(f"    P[{slot}] = ident({name})")
    mixed = any(not compiled for compiled, _ in variant._groups)
    if mixed:
        add(f"    values = [None] * {len(buffers)}")
        for buf, name in names.items():
            add(f"    values[{buf}] = {name}")
        add("    keep = []")
    entry = 0
    for n, (compiled, steps) in enumerate(variant._groups):
        if compiled:
            env[f"e{entry}"] = variant._entries[entry]
            add(f"    e{entry}()")
            if variant._checks[n]:
                known = ", ".join(
                    f"{buf}: {name}" for buf, name in names.items() if not name.startswith(("values", "B"))
                )
                add(f"    if STATUS[0]: raise V._failure({{{known}}}, {steps[-1]})")
            entry += 1
            continue
        add("    try:")
        for index in steps:
            add(f"        V._call(backend, V.schedule.steps[{index}], values, rest, keep)")
        add("    except Exception as error:")
        add(f"        raise PartialRun(error, V._computed(values, {n})) from error")
        for index in steps:
            call = sched.steps[index]
            assert isinstance(call, Call), "a group that is not compiled holds eager calls"
            for buf in call.outs:
                names[buf] = f"values[{buf}]"
    skipped = {k for k, i in variant.donated if held is not None and i in held}
    outs = []
    for k, (buf, view) in enumerate(sched.outputs):
        if k in skipped:
            continue  # written into a held array: the caller holds it
        base = names.get(buf)
        if base is None:  # an arena buffer cannot be returned: the memory plan makes outputs fresh
            raise AssertionError(f"output {k} lives in the arena")
        shape = fresh_shape.get(buf, buffers[buf].shape)
        dense = view.offset == 0 and view.size == size_of(shape) and view.is_contiguous()
        if dense and view.shape == shape and buffers[buf].kind not in ("input", "call", "const"):
            outs.append(base)
        else:
            env[f"view{k}"] = view
            outs.append(f"V._view({base}, view{k})")
    add(f"    return [{', '.join(outs)}]")
    if held is not None:  # the body inside the lock's try
        lines[start:] = ["    " + line for line in lines[start:]]
        add("    finally:")
        add("        LOCK.release()")
    if rebound:
        lines[1] = f"    global HOLDER, {', '.join(rebound)}"
    code = "\n".join(lines)
    exec(code, env)  # code generated above from this variant's tables
    return code, env[fn_name]


#: Arrays kept per returned buffer for reuse (see :func:`recycle`).
POOL = 4


def recycle(pool: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A fresh array for a returned value: one this buffer returned before that
    nothing references any more (its only references are ``pool``'s and this call's:
    no tensor, view or base holds it), else a new one. Reusing memory spares the page
    faults of a new large allocation on every run (a training step returns every
    parameter and moment) and never overwrites a value still in use."""
    for i in range(len(pool)):
        if sys.getrefcount(pool[i]) == 2:
            return pool[i]
    array_ = np.empty(shape, dtype)
    if len(pool) < POOL:
        pool.append(array_)
    else:
        pool[len(pool) - 1] = array_
    return array_

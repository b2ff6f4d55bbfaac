"""The memory plan: every buffer a schedule owns, placed in one arena.

A plan's intermediate buffers live in one byte arena allocated once per plan and
reused by every run. Each buffer is live from the step that writes it to the last
step that reads it; buffers whose lives do not overlap share bytes. Placement is
greedy by size (largest first, each at the lowest aligned offset free for its
whole life), which is close to optimal for the chain-like lives of a training step.

Values a run returns never live in the arena: their buffers are allocated fresh on
every run (``outputs``), so a returned tensor is never overwritten by a later run.

*Donation.* A caller may offer pairs ``(output k, input i)``: output ``k`` replaces
input ``i`` (a training step's new parameters and optimizer moments replace the
ones it read), so it may be written into input ``i``'s buffer instead of a fresh
one, as ``jax.jit(donate_argnums=...)`` does. :func:`donate` accepts a pair when
the schedule proves that writing early loses nothing: the output is stored whole
and dense by one elementwise kernel, every read of the input happens in an earlier
step or in that kernel at the element it writes, and the input is not returned
itself. An accepted output buffer *aliases* the input's (``MemoryPlan.aliases``):
it has no storage of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ember.backend.fusion.scheduler import Kernel, Schedule
from ember.backend.kernel.views import View, size_of

#: Byte alignment of every arena buffer (a cache line; enough for any vector load).
ALIGN = 64


@dataclass
class MemoryPlan:
    arena_bytes: int
    offsets: dict[int, int]  # arena buffer id -> byte offset
    outputs: set[int]  # buffers allocated fresh per run (returned values)
    lives: dict[int, tuple[int, int]]  # arena buffer id -> (first step, last step)
    aliases: dict[int, int] = field(default_factory=dict)  # buffer -> the input buffer it is written into
    donated: tuple[tuple[int, int], ...] = ()  # the accepted (output, input) pairs


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def donate(schedule: Schedule, pairs: Iterable[tuple[int, int]]) -> dict[int, tuple[int, tuple[int, int]]]:
    """The donations of ``pairs`` (graph output index, graph input index) that are
    safe (see the module docstring): output buffer -> (its input buffer, the pair)."""
    graph = schedule.graph
    buffers = schedule.buffers
    input_buffer = {b.value: b.id for b in buffers if b.kind == "input"}
    returned = {buf for buf, _ in schedule.outputs}
    readers: dict[int, list[int]] = {}
    for index, step in enumerate(schedule.steps):
        for buf in step.reads():
            readers.setdefault(buf, []).append(index)
    accepted: dict[int, tuple[int, tuple[int, int]]] = {}
    taken: set[int] = set()
    for k, i in pairs:
        if not (0 <= k < len(schedule.outputs) and 0 <= i < len(graph.inputs)):
            continue
        buf, view = schedule.outputs[k]
        source = input_buffer.get(graph.inputs[i])
        if source is None or source in taken or source in returned or buf in accepted:
            continue
        out, src = buffers[buf], buffers[source]
        if out.kind != "temp" or out.scratch or out.dtype != src.dtype or out.nbytes != src.nbytes:
            continue
        if view.offset != 0 or view.size != size_of(out.shape) or not view.is_contiguous():
            continue
        writer = schedule.producer.get(buf)
        if writer is None:
            continue
        kernel = schedule.steps[writer]
        if not isinstance(kernel, Kernel) or not _reads_in_place(kernel, source, buf):
            continue
        if any(r > writer for r in readers.get(source, ())):
            continue
        accepted[buf] = (source, (k, i))
        taken.add(source)
    return accepted


def _reads_in_place(kernel: Kernel, source: int, out: int) -> bool:
    """Whether a kernel that stores ``out`` may store it into ``source``: every load
    of ``source`` in the kernel reads the element the store writes at the same point
    of the loop nest. That is a dense view of the kernel's space for a store over the
    full space; for a store of a reduction's epilogue (over the reduced space), a
    dense view of the reduced space, read in the epilogue or broadcast along the
    reduced dim in the prologue (a row's reads come before its epilogue's store).
    Any load of one element is read before the loops (it is loop-invariant)."""
    reduced = [s.reduced for s in kernel.stores if s.buffer == out]
    if len(reduced) != 1:
        return False
    if kernel.dim is not None and not reduced[0]:
        allowed = {View.contiguous(kernel.space).normalized()}
    elif kernel.dim is not None:
        dense = View.contiguous(kernel.reduced_space).normalized()
        allowed = {dense, View(kernel.space, dense.strides, 0)}
    elif size_of(kernel.space) <= 1:
        return True
    else:
        allowed = {View.contiguous(kernel.space).normalized()}
    exprs = [s.expr for s in kernel.stores] + [r.expr for r in kernel.reductions]
    for expr in exprs:
        for e in expr.walk():
            # A one-element load is loop-invariant: read once, before the loops.
            if e.kind == "load" and e.op == source and e.args[0] not in allowed and e.args[0].size != 1:
                return False
    return True


def plan_memory(
    schedule: Schedule, extra: dict[int, int] | None = None, donated: Iterable[tuple[int, int]] = ()
) -> MemoryPlan:
    """Places the schedule's ``temp`` buffers. ``extra`` adds private buffers of a
    target (buffer id -> its step): scratch that lives only during that step.
    ``donated`` offers (output, input) pairs (see :func:`donate`)."""
    accepted = donate(schedule, donated) if donated else {}
    aliases = {buf: source for buf, (source, _) in accepted.items()}
    returned = {buf for buf, _ in schedule.outputs}
    lives: dict[int, list[int]] = {}
    for index, step in enumerate(schedule.steps):
        for buf in step.writes() | step.reads():
            if schedule.buffers[buf].kind != "temp" or buf in returned or buf in aliases:
                continue
            life = lives.setdefault(buf, [index, index])
            life[0] = min(life[0], index)
            life[1] = max(life[1], index)
    for buf, index in (extra or {}).items():
        lives[buf] = [index, index]
    outputs = {buf for buf in returned if schedule.buffers[buf].kind == "temp" and buf not in aliases}
    order = sorted(lives, key=lambda b: (-schedule.buffers[b].nbytes, b))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    top = 0
    for buf in order:
        size = _align(max(schedule.buffers[buf].nbytes, 1))
        first, last = lives[buf]
        busy = sorted((o, e) for o, e, f, end in placed if f <= last and first <= end)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[buf] = offset
        placed.append((offset, offset + size, first, last))
        top = max(top, offset + size)
    return MemoryPlan(
        top,
        offsets,
        outputs,
        {b: (f, la) for b, (f, la) in lives.items()},
        aliases,
        tuple(sorted(pair for _, pair in accepted.values())),
    )

"""The memory plan: every buffer a schedule owns, placed in one arena.

A plan's intermediate buffers live in one byte arena allocated once per plan and
reused by every run. Each buffer is live from the step that writes it to the last
step that reads it; buffers whose lives do not overlap share bytes. Placement is
greedy by size (largest first, each at the lowest aligned offset free for its
whole life), which is close to optimal for the chain-like lives of a training step.

Values a run returns never live in the arena: their buffers are allocated fresh on
every run (``outputs``), so a returned tensor is never overwritten by a later run.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.backend.fusion.kernels import Schedule

#: Byte alignment of every arena buffer (a cache line; enough for any vector load).
ALIGN = 64


@dataclass
class MemoryPlan:
    arena_bytes: int
    offsets: dict[int, int]          # arena buffer id -> byte offset
    outputs: set[int]                # buffers allocated fresh per run (returned values)
    lives: dict[int, tuple[int, int]]  # arena buffer id -> (first step, last step)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(schedule: Schedule, extra: dict[int, int] | None = None) -> MemoryPlan:
    """Places the schedule's ``temp`` buffers. ``extra`` adds private buffers of a
    target (buffer id -> its step): scratch that lives only during that step."""
    returned = {buf for buf, _ in schedule.outputs}
    lives: dict[int, list[int]] = {}
    for index, step in enumerate(schedule.steps):
        for buf in step.writes() | step.reads():
            if schedule.buffers[buf].kind != "temp" or buf in returned:
                continue
            life = lives.setdefault(buf, [index, index])
            life[0] = min(life[0], index)
            life[1] = max(life[1], index)
    for buf, index in (extra or {}).items():
        lives[buf] = [index, index]
    outputs = {buf for buf in returned if schedule.buffers[buf].kind == "temp"}
    order = sorted(lives, key=lambda b: (-schedule.buffers[b].nbytes, b))
    placed: list[tuple[int, int, int, int]] = []   # (offset, end, first, last)
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
    return MemoryPlan(top, offsets, outputs, {b: (f, la) for b, (f, la) in lives.items()})

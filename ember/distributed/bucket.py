"""Gradient buckets: the parameters' gradients packed into a few flat buffers, each
all-reduced with one non-blocking collective as soon as it is full.

A :class:`BucketPlan` is fixed per model (the same on every rank): parameters in
reverse field order (roughly the order backward finishes them), grouped by the dtype
they travel as, cut into buckets of about ``cap_bytes``. Each bucket's buffer ends
with one presence flag per parameter, so that a gradient some rank did not produce
(an unused parameter) is still reduced consistently: the result has a gradient for
a parameter when any rank had one, and none when no rank had.

A :class:`GradSync` is one step's reduction. ``put`` copies a gradient into its
slot; a bucket whose slots are all filled starts its ``Iallreduce`` (buckets start in
plan order on every rank, as MPI requires); ``finish`` starts what is left, waits,
and returns the reduced gradients as views of the buffers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ember.distributed.communicator import Communicator, ReduceOp
from ember.distributed.staging import divide_in_place, wire_dtype


@dataclass(frozen=True)
class Slot:
    """Where one parameter's gradient lives in its bucket."""

    param_id: int
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype  # the parameter's own dtype
    offset: int
    size: int
    index: int  # position within the bucket (its presence flag)


@dataclass(frozen=True)
class Bucket:
    dtype: np.dtype  # the wire dtype
    slots: tuple[Slot, ...]
    numel: int

    @property
    def nbytes(self) -> int:
        return (self.numel + len(self.slots)) * self.dtype.itemsize


class BucketPlan:
    """The buckets for a list of ``(param_id, path, shape, dtype)`` in field order."""

    def __init__(self, entries: list[tuple[int, str, tuple[int, ...], np.dtype]], cap_bytes: int):
        self.cap_bytes = int(cap_bytes)
        open_buckets: dict[np.dtype, list] = {}
        built: list[tuple[np.dtype, list]] = []
        for param_id, path, shape, dtype in reversed(entries):
            wire = wire_dtype(dtype)
            size = int(np.prod(shape, dtype=np.int64))
            current = open_buckets.get(wire)
            if current is not None and (current[1] + size) * wire.itemsize > self.cap_bytes and current[0]:
                current = None
            if current is None:
                current = [[], 0]
                open_buckets[wire] = current
                built.append((wire, current))
            current[0].append((param_id, path, tuple(shape), np.dtype(dtype), size))
            current[1] += size
        self.buckets: list[Bucket] = []
        self.where: dict[int, tuple[int, Slot]] = {}
        for wire, (items, numel) in built:
            slots, offset = [], 0
            for index, (param_id, path, shape, dtype, size) in enumerate(items):
                slot = Slot(param_id, path, shape, dtype, offset, size, index)
                slots.append(slot)
                self.where[param_id] = (len(self.buckets), slot)
                offset += size
            self.buckets.append(Bucket(wire, tuple(slots), numel))

        self._buffers: list[np.ndarray] = []

    def take_buffers(self) -> list[np.ndarray]:
        """One flat buffer per bucket (its values, then one presence flag per slot):
        the previous step's again once nothing refers to them any more (no gradient
        view of them is alive), so a step does not pay page faults for fresh ones."""
        held = self._buffers
        if held:
            for buffer in held:
                # This list, the loop variable and getrefcount's argument: no view of it is alive.
                if sys.getrefcount(buffer) > 3:
                    break
            else:
                return held
        self._buffers = [np.empty(b.numel + len(b.slots), dtype=b.dtype) for b in self.buckets]
        return self._buffers

    def __len__(self) -> int:
        return len(self.buckets)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{b.nbytes / 1e6:.2f} MB" for b in self.buckets)
        return f"BucketPlan({len(self.buckets)} buckets: {sizes})"


class GradSync:
    """One step's gradient reduction over ``comm`` with ``plan``'s buckets."""

    def __init__(self, plan: BucketPlan, comm: Communicator, mean: bool):
        self.plan = plan
        self.comm = comm
        self.mean = mean
        self.buffers = list(plan.take_buffers())  # its own references: not reused while it lives
        self.present = [np.zeros(len(b.slots), dtype=bool) for b in plan.buckets]
        self.remaining = [len(b.slots) for b in plan.buckets]
        self.requests: list = [None] * len(plan.buckets)
        self.next_start = 0  # buckets start in plan order on every rank

    def has(self, param_id: int) -> bool:
        """Whether the gradient of ``param_id`` is already in its slot (or is not planned)."""
        found = self.plan.where.get(param_id)
        return found is None or bool(self.present[found[0]][found[1].index])

    def put(self, param_id: int, array: np.ndarray) -> bool:
        """Copies a parameter's gradient into its slot; ``False`` if the plan has no
        such parameter (the gradient is then not reduced)."""
        found = self.plan.where.get(param_id)
        if found is None:
            return False
        b, slot = found
        if self.present[b][slot.index]:
            return True
        buffer = self.buffers[b]
        np.copyto(buffer[slot.offset : slot.offset + slot.size], array.reshape(-1), casting="unsafe")
        self.present[b][slot.index] = True
        self.remaining[b] -= 1
        if self.remaining[b] == 0:
            self._start_ready()
        return True

    def _start(self, b: int) -> None:
        bucket = self.plan.buckets[b]
        buffer = self.buffers[b]
        present = self.present[b]
        for slot in bucket.slots:
            if not present[slot.index]:
                buffer[slot.offset : slot.offset + slot.size] = 0
        buffer[bucket.numel :] = present
        self.requests[b] = self.comm.all_reduce_start(buffer, ReduceOp.SUM, f"gradient bucket {b}")

    def _start_ready(self) -> None:
        while self.next_start < len(self.requests) and self.remaining[self.next_start] == 0:
            self._start(self.next_start)
            self.next_start += 1
        for request in self.requests[: self.next_start]:
            request.test()  # drives the progress of those in flight

    def finish(self) -> dict[int, np.ndarray]:
        """Waits for every bucket; the reduced gradients of the parameters that some
        rank had a gradient for, each a view of its bucket's buffer."""
        while self.next_start < len(self.requests):
            self._start(self.next_start)
            self.next_start += 1
        out: dict[int, np.ndarray] = {}
        size = self.comm.size
        for b, bucket in enumerate(self.plan.buckets):
            self.requests[b].wait()
            buffer = self.buffers[b]
            data = buffer[: bucket.numel]
            if self.mean and size > 1:
                divide_in_place(data, size)
            flags = buffer[bucket.numel :]
            for slot in bucket.slots:
                if flags[slot.index] > 0:
                    out[slot.param_id] = data[slot.offset : slot.offset + slot.size].reshape(slot.shape)
        return out

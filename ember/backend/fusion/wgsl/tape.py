"""Tapes: a plan's launches recorded once, replayed with no Python per launch.

A variant that runs again records its launches (``Runtime.capture``): every kernel,
the buffers bound to it, its parameter words and its grid. :meth:`Tape.build` sorts
the buffers into *slots*:

* **input** slots: the buffers of the graph's inputs. A replay binds the caller's
  tensors' buffers directly (nothing is copied; a tape never writes an input), after
  checking that each input has the recorded layout (shape, strides, offset, dtype)
  and, where the tape holds cube calls, that integer inputs have bounds within the
  recorded ones (an index check that the recording could skip must stay skippable);
* **output** slots: the buffers of returned values. The tape owns a few buffers per
  slot and hands one out per replay, wrapped in a fresh block whose finaliser gives
  it back to the tape: a replay writes only buffers nobody holds. A training loop
  that passes the returned parameters back in alternates between two (the step
  reads one, writes the other); a loss the caller drops is written into the same one
  again;
* **fixed** slots: constants and intermediates, owned by the tape for its life
  (persistent: never back in the pool while the tape lives).

Bind groups are built once per combination of the slots' buffers and cached (a
training loop has two). The run-time scalars are patched into the recorded
parameter words: the positions of a fused kernel's scalars are known (its
:class:`~ember.backend.cube.ir.Launch` appends them after its
layout words); a cube call given run-time scalars (a random draw's Philox key and
counter, an optimizer step the target does not expand) is run again *dry* at each
replay (``Runtime.capture(dry=True)``: its Python computes the parameter words,
nothing is dispatched) and its words replace the recorded ones. Then the
dispatches go into the open compute pass (``Runtime.replay``), submitted with
whatever comes next, at the next read-back.

A recording that read anything back (a mid-step sync, an index check that needed
the data) gives no tape: the plan keeps running its launches one by one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.dtypes import scalar_words
from ember.backend.cube.runtime import Block

#: Bind-group sets kept per tape (one per combination of input and output buffers).
MAX_CONFIGS = 8
#: Buffers a tape owns per output slot; beyond them (a caller keeping every result)
#: outputs go to plain pool buffers.
MAX_OWNED = 4
_INT = ("i32", "i64")


class _Returns:
    """The pool of a tape's handed-out blocks: their finalisers give buffers back here
    (any thread, no lock); once the tape is gone, to the runtime's pool."""

    __slots__ = ("queue", "forward")

    def __init__(self) -> None:
        self.queue: deque[Any] = deque()
        self.forward: Any = None

    def put(self, gpu: Any) -> None:
        forward = self.forward
        if forward is not None:
            forward.put(gpu)
        else:
            self.queue.append(gpu)


class _Output:
    """An output slot: the buffers the tape owns for it, and which are free."""

    __slots__ = ("size", "owned", "free")

    def __init__(self, size: int) -> None:
        self.size = size
        self.owned: list[Any] = []
        self.free: list[Any] = []


class Recording:
    """What a variant notes while its launches are captured: per variant launch, the
    captured launches it made and how its scalars reach them."""

    def __init__(self) -> None:
        self.patches: list[tuple[int, int, int, str]] = []  # (launch, word, scalar index, ctype)
        self.dynamic: list[tuple[int, int, Any, dict[int, Any]]] = []  # (first, end, eager launch, its values)


class Tape:
    """A recorded run of a variant (see the module docstring)."""

    # Set by :meth:`build` once the launches' layout is known.
    _words: np.ndarray  # every launch's info words, patched per run
    _offsets: Any  # cffi uint32_t[]: each launch's byte offset into the info buffer
    _info: Any  # the GPU buffer the words are written to

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._returns = _Returns()
        self._checks: list[tuple[int, tuple, Any]] = []  # (input, its layout, its bounds)
        self._shared: list[tuple[int, int]] = []  # (input, the earlier input sharing its buffer)
        self._outputs: list[tuple[str, Any, tuple]] = []  # per output: where it lives, its layout
        self._output_slots: list[_Output] = []
        self._owner: dict[int, _Output] = {}  # id(owned buffer) -> its slot
        self._fixed: list[Any] = []
        self._pipelines: list[Any] = []
        self._grids: list[tuple[int, int, int]] = []
        self._bindings: list[tuple[int, int, list[Any]]] = []
        self._patches: list[tuple[str, np.ndarray, list[int]]] = []
        self._dynamic: list[tuple[Any, dict[int, Any], list[tuple]]] = []
        self._static_groups: dict[int, Any] = {}
        self._configs: OrderedDict[tuple, tuple[list[Any], list[Any]]] = OrderedDict()

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        runtime: Any,
        capture: Any,
        recording: Recording,
        inputs: list[Any],
        consts: list[Any],
        outputs: list[Any],
        scalars: list[Any],
        calls: bool = True,
    ) -> Tape | None:
        """A tape of ``capture`` (the launches of one run with these ``inputs``,
        constants, returned ``outputs`` and scalar values), or ``None`` where the run
        cannot be replayed. ``calls``: whether the run made cube calls (only they
        consult the known bounds of integer inputs)."""
        if capture.read_back or not capture.launches or not runtime.tapes:
            return None
        tape = cls(runtime)
        launches = capture.launches
        # Slots: one per distinct block.
        slot_of: dict[int, int] = {}
        blocks: list[Any] = []
        for _, bufs, _, _ in launches:
            for b in bufs:
                if id(b) not in slot_of:
                    slot_of[id(b)] = len(blocks)
                    blocks.append(b)
        kinds: list[Any] = ["fixed"] * len(blocks)
        input_slot: dict[int, int] = {}  # id(block) -> the first input holding it
        for k, x in enumerate(inputs):
            bounds = x.bounds if calls and x.storage.compute in _INT else None
            tape._checks.append((k, (x.shape, x.strides, x.offset, x.storage), bounds))
            first = input_slot.setdefault(id(x.buffer), k)
            if first != k:
                tape._shared.append((k, first))
            slot = slot_of.get(id(x.buffer))
            if slot is not None:
                kinds[slot] = ("input", first)
        const_blocks = {id(c.buffer) for c in consts}
        for t in outputs:
            layout = (t.shape, t.storage, t.strides, t.offset)
            b = t.buffer
            if id(b) in input_slot:
                tape._outputs.append(("input", input_slot[id(b)], layout))
                continue
            if id(b) in const_blocks:
                tape._outputs.append(("fixed", b, layout))
                continue
            slot = slot_of.get(id(b))
            if slot is None:
                slot = slot_of[id(b)] = len(blocks)
                blocks.append(b)
                kinds.append("fixed")
            if kinds[slot] == "fixed":
                kinds[slot] = ("output", len(tape._output_slots))
                tape._output_slots.append(_Output(b.size))
            tape._outputs.append(("output", kinds[slot][1], layout))
        # An output no launch writes (data from the host inside a call) cannot be replayed.
        written = {id(b) for kernel, bufs, _, _ in launches for b in bufs[kernel.n_in :]}
        for t in outputs:
            if t.size and not (id(t.buffer) in written or id(t.buffer) in input_slot or id(t.buffer) in const_blocks):
                return None
        tape._fixed = [b for b, kind in zip(blocks, kinds) if kind == "fixed"]  # kept alive: persistent
        # Per launch: pipeline, bindings (a fixed block, or a variable slot), grid, words.
        align = runtime.info_align
        offsets, position = [], 0
        for kernel, bufs, info, grid in launches:
            tape._pipelines.append(kernel.pipeline._internal)
            tape._grids.append(grid)
            bindings = []
            for b in bufs:
                kind = kinds[slot_of[id(b)]]
                bindings.append(b if kind == "fixed" else kind)
            tape._bindings.append((kernel.n_in, kernel.n_out, bindings))
            offsets.append(position)
            position += -(-max(len(info) * 4, 4) // align) * align
        tape._words = np.zeros(max(position // 4, 1), np.uint32)
        for (_, _, info, _), offset in zip(launches, offsets):
            tape._words[offset // 4 : offset // 4 + len(info)] = info
        tape._offsets = runtime._raw.ffi.new("uint32_t[]", offsets)
        tape._info = runtime.info_buffer(position)
        # Scalars: patched words (checked against the recording's values) and dry reruns.
        patches: dict[str, list[tuple[int, int]]] = {}
        for launch, word, index, ctype in recording.patches:
            at = offsets[launch] // 4 + word
            low, high = scalar_words(scalars[index], ctype)
            if tape._words[at] != low or (ctype == "i64" and tape._words[at + 1] != high):
                return None  # the words are not where the kernel's layout says: do not guess
            patches.setdefault(ctype, []).append((at, index))
        tape._patches = [
            (ctype, np.array([a for a, _ in p], np.intp), [i for _, i in p]) for ctype, p in patches.items()
        ]
        dummy = runtime.alloc(16) if recording.dynamic else None
        for first, end, eager, values in recording.dynamic:
            spans = [(offsets[j] // 4, launches[j][0], launches[j][3], len(launches[j][2])) for j in range(first, end)]
            # Stand-ins of the call's operands (a dry rerun reads layouts, never data).
            stand_ins = {
                buf: CubeTensor(dummy, t.shape, t.storage, t.strides, t.offset, t.bounds) for buf, t in values.items()
            }
            tape._dynamic.append((eager, stand_ins, spans))
        return tape

    # ------------------------------------------------------------------ replaying
    def replay(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any] | None:
        """The outputs of a run with ``inputs`` and ``scalars``, or ``None`` when these
        inputs do not fit the recording (the caller runs the plan's launches instead)."""
        for k, layout, bounds in self._checks:
            x = inputs[k]
            if (x.shape, x.strides, x.offset, x.storage) != layout:
                return None
            if bounds is not None and (x.bounds is None or x.bounds[0] < bounds[0] or x.bounds[1] > bounds[1]):
                return None
        for k, first in self._shared:
            if inputs[k].buffer is not inputs[first].buffer:
                return None
        with self._lock:
            words = self._words
            for ctype, at, indices in self._patches:
                values = [scalars[i] for i in indices]
                if ctype == "f32":
                    words[at] = np.array(values, np.float32).view(np.uint32)
                elif ctype == "i32":
                    words[at] = np.array([int(v) & 0xFFFF_FFFF for v in values], np.uint32)
                elif ctype == "bool":
                    words[at] = np.array([1 if v else 0 for v in values], np.uint32)
                else:
                    bits = [int(v) & 0xFFFF_FFFF_FFFF_FFFF for v in values]
                    words[at] = np.array([b & 0xFFFF_FFFF for b in bits], np.uint32)
                    words[at + 1] = np.array([b >> 32 for b in bits], np.uint32)
            if self._dynamic and not self._rerun(backend, scalars):
                return None
            handed = self._choose()
            groups = self._groups(tuple([x.buffer.gpu for x in inputs] + [b.gpu for b in handed]))
            self.runtime.replay(self._info, words, self._pipelines, groups, self._offsets, self._grids)
        out = []
        for kind, where, (shape, storage, strides, offset) in self._outputs:
            if kind == "output":
                block = handed[where]
            elif kind == "input":
                block = inputs[where].buffer
            else:
                block = where
            out.append(CubeTensor(block, shape, storage, strides, offset))
        return out

    def _rerun(self, backend: Any, scalars: list[Any]) -> bool:
        """The words of the calls given run-time scalars, from dry reruns."""
        words = self._words
        for eager, values, spans in self._dynamic:
            with self.runtime.capture(dry=True) as capture:
                eager.run(backend, dict(values), scalars)
            if capture.read_back or len(capture.launches) != len(spans):
                return False
            for (at, kernel, grid, n), (kernel2, _, info, grid2) in zip(spans, capture.launches):
                if kernel2 is not kernel or grid2 != grid or len(info) != n:
                    return False
                words[at : at + n] = info
        return True

    def _choose(self) -> list[Block]:
        """A block per output slot over a buffer nobody holds (see the module
        docstring): an owned buffer given back, a new one the tape keeps, or (past
        :data:`MAX_OWNED`) a plain pool block."""
        queue = self._returns.queue
        owner = self._owner
        while queue:
            gpu = queue.popleft()
            owner[id(gpu)].free.append(gpu)
        handed = []
        returns = self._returns
        for slot in self._output_slots:
            if slot.free:
                handed.append(Block(slot.free.pop(), returns))
                continue
            block = self.runtime.alloc(slot.size)
            if len(slot.owned) < MAX_OWNED:
                gpu = block.gpu
                block._pool = None  # the tape's from now on
                slot.owned.append(gpu)
                owner[id(gpu)] = slot
                block = Block(gpu, returns)
            handed.append(block)
        return handed

    def _groups(self, buffers: tuple[Any, ...]) -> list[Any]:
        """The bind group of each launch for these buffers (the inputs', then the
        outputs'), cached per combination."""
        entry = self._configs.get(buffers)
        if entry is not None:
            self._configs.move_to_end(buffers)
            return entry[0]
        n_inputs = len(self._checks)
        groups, made = [], []
        runtime = self.runtime
        for i, (n_in, n_out, bindings) in enumerate(self._bindings):
            if all(type(b) is not tuple for b in bindings):
                group = self._static_groups.get(i)
                if group is None:
                    group = self._static_groups[i] = runtime.bind_group(n_in, n_out, bindings)
            else:
                bound = [
                    b if type(b) is not tuple else buffers[b[1] if b[0] == "input" else n_inputs + b[1]]
                    for b in bindings
                ]
                group = runtime.bind_group(n_in, n_out, bound)
                made.append(group)
            groups.append(group)
        # The key holds the buffers it binds: they outlive the entry.
        self._configs[buffers] = (groups, made)
        while len(self._configs) > MAX_CONFIGS:
            _, (_, old) = self._configs.popitem(last=False)
            runtime.release(old)
        return groups

    def __del__(self) -> None:
        try:
            runtime = self.runtime
            for _, made in self._configs.values():
                runtime.release(made)
            runtime.release(list(self._static_groups.values()))
            self._returns.forward = runtime.pool
            for slot in self._output_slots:
                for gpu in slot.free:
                    runtime.pool.put(gpu)
            queue = self._returns.queue
            while queue:
                runtime.pool.put(queue.popleft())
        except Exception:  # pragma: no cover - at interpreter shutdown
            pass

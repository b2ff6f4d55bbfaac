"""A device's random generator: a Philox stream, shared by threads, with scoped forks.

A :class:`Generator` is a 64-bit key and the counter of its next free block; a draw
reserves the blocks it needs (``ember.backend.philox.blocks_for``) and the backend
computes the values from ``(key, counter)`` alone, so the same state gives the same
bits on every backend. Reserving is atomic: threads sharing a device's generator never
get the same blocks, but which thread gets which blocks follows the scheduler. A
thread that needs its own reproducible stream forks one (:meth:`DeviceGenerator.fork`,
``Device.fork_rng``): inside the block its draws on that device come from the fork,
and the shared stream does not move.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ember.backend import philox
from ember.errors import ValueRangeError

ALGORITHM = "philox4x32-10"


class Generator:
    """A Philox stream: ``key`` and the ``counter`` of the next free block."""

    __slots__ = ("key", "counter", "_lock")

    def __init__(self, key: int, counter: int = 0) -> None:
        self.key = int(key) & philox.MASK64
        self.counter = int(counter) & philox.MASK64
        self._lock = threading.Lock()

    def reserve(self, blocks: int) -> tuple[int, int]:
        """Take ``blocks`` counters: returns ``(key, first counter)``."""
        with self._lock:
            first = self.counter
            self.counter = (first + blocks) & philox.MASK64
            key = self.key
        return key, first

    def release(self, key: int, first: int, blocks: int) -> bool:
        """Give back the last reservation (``reserve(blocks)`` returned ``(key, first)``)
        if nothing was reserved since; returns whether it was given back."""
        with self._lock:
            if self.key == key and self.counter == (first + blocks) & philox.MASK64:
                self.counter = first
                return True
        return False

    def next_key(self) -> int:
        """A 64-bit key for a new stream (a parameter's, a fork's): one block of this one."""
        key, counter = self.reserve(1)
        w = philox.block(key, counter)
        return w[0] | (w[1] << 32)

    def reseed(self, seed: int) -> None:
        with self._lock:
            self.key = int(seed) & philox.MASK64
            self.counter = 0

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"algorithm": ALGORITHM, "seed": self.key, "offset": self.counter}

    def restore(self, state: Any) -> None:
        key, counter = _parse_state(state)
        with self._lock:
            self.key, self.counter = key, counter

    def __repr__(self) -> str:
        return f"Generator(key={self.key:#018x}, counter={self.counter})"


def is_legacy_state(state: Any) -> bool:
    """Whether ``state`` is flex's former numpy PCG64 state (checkpoints of older ember)."""
    return isinstance(state, dict) and state.get("bit_generator") == "PCG64"


def legacy_seed(state: Any) -> int:
    """A 64-bit seed derived from a former PCG64 state, the same for the same state."""
    inner = state.get("state", {}) if isinstance(state, dict) else {}
    value = int(inner.get("state", 0)) ^ (int(inner.get("inc", 0)) << 1)
    key = 0
    while value:
        key ^= value & philox.MASK64
        value >>= 64
    return key


def _parse_state(state: Any) -> tuple[int, int]:
    if is_legacy_state(state):
        raise ValueRangeError(
            "ember: set_rng_state: this state is from the PCG64 generator flex used before every backend "
            "moved to Philox4x32-10; it cannot be restored. Start a reproducible stream with "
            "device.seed(n) (a Learner resuming such a checkpoint does this itself, with a warning)"
        )
    if not isinstance(state, dict) or state.get("algorithm") != ALGORITHM:
        raise ValueRangeError(
            f"ember: set_rng_state: expected a state from device.rng_state() "
            f"({{'algorithm': {ALGORITHM!r}, 'seed': ..., 'offset': ...}}), got {state!r:.80}"
        )
    values = []
    for name in ("seed", "offset"):
        value = state.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= philox.MASK64:
            raise ValueRangeError(f"ember: set_rng_state: {name!r} must be an int in [0, 2**64), got {value!r:.40}")
        values.append(value)
    return values[0], values[1]


class _Forks(threading.local):
    """A thread's stack of forked generators (``None`` until the first fork: the class
    default makes the common read a plain attribute lookup)."""

    stack: list | None = None


class DeviceGenerator:
    """The generator of one device (and its autodiff wrapper): a shared stream, and
    per thread a stack of forks that replace it inside ``with fork(...)`` blocks."""

    __slots__ = ("shared", "_local", "guard")

    def __init__(self, seed: int | None = None) -> None:
        self.shared = Generator(secrets.randbits(64) if seed is None else seed)
        self._local = _Forks()
        #: Called with the operation's name before a seed, a state read or write, or a
        #: fork; ``ember.compile`` sets it while it traces, to refuse what a replay
        #: could not repeat.
        self.guard: Callable[[str], None] | None = None

    def check(self, what: str) -> None:
        guard = self.guard
        if guard is not None:
            guard(what)

    def current(self) -> Generator:
        """The calling thread's generator: its innermost fork, else the shared stream."""
        stack = self._local.stack
        return stack[-1] if stack else self.shared

    @contextmanager
    def fork(self, seed: int | None = None) -> Iterator[Generator]:
        """A new stream for this thread while the block runs: seeded with ``seed``, or
        with a key drawn from the current generator when ``seed`` is None."""
        self.check("fork_rng")
        key = self.current().next_key() if seed is None else seed
        generator = Generator(key)
        stack = self._local.stack
        if stack is None:
            stack = self._local.stack = []
        stack.append(generator)
        try:
            yield generator
        finally:
            stack.pop()

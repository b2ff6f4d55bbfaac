"""The capture hook: what modules, optimizers and layers call so that ``ember.compile``
can trace them. The trace itself lives in :mod:`ember.capture`; this small module sits
low enough (in ``ember.tensor``) for every layer above to import it.

Code that runs inside a compiled function needs it in four places, and nowhere else:

- **Numbers that change per call.** A float argument of a compiled function (a learning
  rate) and the numbers an optimizer keeps in its state (a step count) are *run-time
  scalars* while tracing: arithmetic on them (``lr / (1 - beta ** t)``) is recorded,
  ``float()``/``int()`` on them raise a graph break. Compute with them arithmetically,
  and take square roots with :func:`scalar_sqrt`, never ``math.sqrt``;
  :func:`is_symbolic` tells one apart from a number.
- **Per-key state** (an optimizer's per-parameter moments) lives in a
  :class:`StateDict`: under a trace its reads become inputs of the graph and its writes
  outputs, so a compiled step reads and updates the same states an eager step would.
- **Running state** (batch-norm statistics, :class:`~ember.module.RunningState`) asks
  :func:`current_capture` for the value the trace last wrote and records its writes
  there.
- **Checks that read a tensor's values** (a position that must be in range) skip
  themselves while :func:`capturing`: reading a value would break the trace.

>>> capturing()
False
>>> scalar_sqrt(4.0)
2.0
>>> states = StateDict()
>>> states["w"] = 1.0
>>> states.get("w")
1.0
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ember.backend.composites.registry import scalar_sqrt
from ember.tensor.checks import is_symbolic


class CaptureHook(Protocol):
    """What a capture in progress (:class:`ember.capture.trace.Trace`) answers."""

    def read_state(self, owner: StateDict, key: Any, value: Any) -> Any:
        """``owner[key]`` (``value``, ``None`` if absent) as the trace sees it: its
        tensors inputs of the graph, its numbers run-time scalars."""

    def write_state(self, owner: StateDict, key: Any, value: Any) -> None:
        """Records ``owner[key] = value``; each replay writes the real values."""

    def state_written(self, owner: StateDict, key: Any) -> Any:
        """The value this capture wrote to ``owner[key]``, or ``None``."""

    def running_value(self, state: Any) -> Any:
        """The value the capture wrote to a running state, or ``None``."""

    def write_running(self, state: Any, value: Any) -> None:
        """Records a running state's update; each replay writes the real value."""


class _Local(threading.local):
    """Per-thread capture state; the class default makes the common read (no capture)
    a plain attribute lookup instead of a failed one."""

    hook: CaptureHook | None = None


_local = _Local()


def current_capture() -> CaptureHook | None:
    """The capture in progress on this thread (``ember.compile`` tracing), if any."""
    return _local.hook


def capturing() -> bool:
    """Whether ``ember.compile`` is tracing on this thread: reading a tensor's value now
    would break the trace."""
    return _local.hook is not None


@contextmanager
def active(hook: CaptureHook) -> Iterator[None]:
    """Makes ``hook`` this thread's capture for the duration (``ember.capture`` only)."""
    _local.hook = hook
    try:
        yield
    finally:
        _local.hook = None


class StateDict(dict):
    """A dict of per-key state (an optimizer's per-parameter states) that a trace can
    follow: reads become graph inputs, writes graph outputs, so a compiled step reads
    and updates the same states an eager step would. Outside a trace it is a dict.

    A state is a tensor or a dataclass of tensors and numbers (its numbers are run-time
    scalars under a trace)."""

    __slots__ = ()

    def get(self, key: Any, default: Any = None) -> Any:
        hook = _local.hook
        if hook is None:
            return dict.get(self, key, default)
        written = hook.state_written(self, key)
        if written is not None:  # written earlier in this trace
            return written
        return hook.read_state(self, key, dict.get(self, key, default))

    def get_many(self, keys: Iterable[Any]) -> list[Any]:
        """``[self.get(key) for key in keys]`` (one C-level pass outside a trace)."""
        if _local.hook is None:
            return list(map(dict.get.__get__(self), keys))
        return [self.get(key) for key in keys]

    def __setitem__(self, key: Any, value: Any) -> None:
        hook = _local.hook
        if hook is None:
            dict.__setitem__(self, key, value)
        else:  # held by the trace; the replay writes the real values
            hook.write_state(self, key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        hook = _local.hook
        if hook is None:  # an eager step: one C-level update
            dict.update(self, *args, **kwargs)
            return
        for key, value in dict(*args, **kwargs).items():
            hook.write_state(self, key, value)


__all__ = ["CaptureHook", "StateDict", "active", "capturing", "current_capture", "is_symbolic", "scalar_sqrt"]

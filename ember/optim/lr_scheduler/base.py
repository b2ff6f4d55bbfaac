"""The learning-rate scheduler protocol (Burn's ``LrScheduler``) and its config base."""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError, RecordError
from ember.module import Config


class LrScheduler:
    """A learning-rate schedule: each :meth:`step` advances it and returns the rate to
    use for the next optimizer step (the first call gives the initial rate).

    >>> scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, 100).init()  # doctest: +SKIP
    >>> for batch in batches:  # doctest: +SKIP
    ...     model = optim.step(scheduler.step(), model, grads)
    """

    def step(self) -> float:
        raise NotImplementedError

    def to_record(self) -> dict[str, Any]:
        """The schedule's position as a plain JSON-able dict."""
        raise NotImplementedError

    def load_record(self, record: dict[str, Any]) -> LrScheduler:
        """Restores the position saved by :meth:`to_record`; returns ``self``."""
        raise NotImplementedError

    def _fields(self, record: Any, expected: dict[str, type]) -> dict[str, Any]:
        """The values of ``record``, checked against ``expected`` (name -> type)."""
        name = type(self).__name__
        if not isinstance(record, dict):
            raise RecordError(
                f"ember: {name}.load_record: expected a dict from to_record(), got {type(record).__name__}"
            )
        if set(record) != set(expected):
            raise RecordError(
                f"ember: {name}.load_record: the record has fields {sorted(record)}, expected {sorted(expected)}; "
                "was it saved from another kind of scheduler?"
            )
        for key, kind in expected.items():
            value = record[key]
            valid = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
            if isinstance(value, bool) or not valid:
                raise RecordError(f"ember: {name}.load_record: {key} must be {kind.__name__}, got {value!r}")
        return record

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_record()})"


class LrSchedulerConfig(Config):
    """Base of scheduler configs: ``init()`` returns the :class:`LrScheduler`."""

    def init(self) -> LrScheduler:
        raise NotImplementedError


def check_lr(name: str, field: str, value: float, *, allow_zero: bool) -> None:
    """Burn's range for learning rates given to schedulers: ``(0, 1]`` (``[0, 1]`` with ``allow_zero``)."""
    low_ok = value >= 0.0 if allow_zero else value > 0.0
    if not (math.isfinite(value) and low_ok and value <= 1.0):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ConfigError(f"ember: {name}: {field} must lie in {interval}, got {value}")


def check_count(name: str, field: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise ConfigError(f"ember: {name}: {field} must be an integer >= {minimum}, got {value}")

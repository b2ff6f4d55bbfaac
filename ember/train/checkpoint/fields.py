"""Checks of a checkpoint's ``state.json``, field by field, before anything is
restored: a file with a valid checksum may still hold a value of the wrong type
(edited by hand, written by a bug, or by another program), and a resume must then
raise a ``RecordError`` naming the field, never a raw ``AttributeError`` from deep
inside the loop.

A check is a function ``(value, path) -> None`` raising :class:`FieldError`;
:func:`check_fields` runs a table of them over a JSON object and turns the first
failure into a ``RecordError`` that names the file, the field's path
(``history.train.loss``) and what it should hold.

>>> check_fields({"step": 3}, {"step": (integer(0), True)}, "state.json")
>>> check_fields({"step": "3"}, {"step": (integer(0), True)}, "state.json")
Traceback (most recent call last):
ember.errors.RecordError: ember: state.json is corrupt: its field 'step' is a str ('3'), expected an int >= 0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ember.errors import RecordError

Check = Callable[[Any, str], None]


class FieldError(Exception):
    """A field's value does not fit its check (turned into a RecordError by :func:`check_fields`)."""

    def __init__(self, path: str, value: Any, expected: str, *, key: bool = False):
        super().__init__(path)
        self.path, self.expected = path, expected
        self.problem = (
            f"has the key {_shown(value)}" if key else f"is a {type(value).__name__} ({_shown(value)})"
        ) + f", expected {expected}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_fields(state: Any, table: dict[str, tuple[Check, bool]], where: str, advice: str = "") -> None:
    """Checks every field of ``table`` (``{name: (check, required)}``) in the JSON
    object ``state``; fields not in the table are ignored (a newer ember's)."""
    if not isinstance(state, dict):
        raise RecordError(f"ember: {where} is corrupt: it holds a {type(state).__name__}, not a JSON object{advice}")
    for name, (check, required) in table.items():
        if name not in state:
            if required:
                raise RecordError(f"ember: {where} is corrupt: its field {name!r} is missing{advice}")
            continue
        try:
            check(state[name], name)
        except FieldError as error:
            raise RecordError(f"ember: {where} is corrupt: its field {error.path!r} {error.problem}{advice}") from None


# ---------------------------------------------------------------------- checks
def integer(low: int | None = None) -> Check:
    """An int (not a bool), at least ``low``."""
    expected = "an int" + (f" >= {low}" if low is not None else "")

    def check(value: Any, path: str) -> None:
        if type(value) is not int or (low is not None and value < low):
            raise FieldError(path, value, expected)

    return check


def number(value: Any, path: str) -> None:
    """A JSON number (NaN and infinities included: checkpoints write them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(path, value, "a number")


def string(value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise FieldError(path, value, "a string")


def one_of(choices: Iterable[Any]) -> Check:
    options = tuple(choices)

    def check(value: Any, path: str) -> None:
        if value not in options or type(value) is bool:
            raise FieldError(path, value, f"one of {', '.join(map(repr, options))}")

    return check


def optional(inner: Check) -> Check:
    """``None`` (JSON ``null``) or what ``inner`` accepts."""

    def check(value: Any, path: str) -> None:
        if value is not None:
            inner(value, path)

    return check


def table(values: Check, keys: Check | None = None, what: str = "an object") -> Check:
    """A JSON object whose values pass ``values`` (and whose keys pass ``keys``)."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise FieldError(path, value, what)
        for key, item in value.items():
            if keys is not None:
                try:
                    keys(key, path)
                except FieldError as error:
                    raise FieldError(path, key, f"keys that are {error.expected}", key=True) from None
            values(item, f"{path}.{key}")

    return check


def record(fields: dict[str, Check], what: str) -> Check:
    """A JSON object with exactly these fields, each passing its check."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict) or set(value) != set(fields):
            raise FieldError(path, value, what)
        for name, inner in fields.items():
            inner(value[name], f"{path}.{name}")

    return check


def any_json(value: Any, path: str) -> None:
    """Any JSON value (numbers, strings, booleans, null, lists and objects of them)."""


def numbers(value: Any, path: str) -> None:
    """A number or (nested) lists of numbers: a metric's running state."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            numbers(item, f"{path}[{i}]")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(path, value, "a number or a list of numbers")


def epoch_key(value: Any, path: str) -> None:
    if not isinstance(value, str) or not value.isdigit():
        raise FieldError(path, value, "an epoch number (decimal digits)")


# ---------------------------------------------------------------------- the history
HISTORY = table(
    table(table(number, keys=epoch_key, what="{epoch: value}"), keys=string, what="{metric name: {epoch: value}}"),
    keys=one_of(("train", "valid")),
    what="{split: {metric name: {epoch: value}}} (MetricHistory.to_dict)",
)

"""Replacing sub-modules of a module tree (what :meth:`Module.map` does for leaves)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.module import Module


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def replace_modules(root: Module, fn: Callable[[str, Module], Module | None]) -> Module:
    """A new tree where each module for which ``fn(path, module)`` returns a module is
    replaced by it (its fields are not visited); ``None`` descends into its fields.
    Paths are those of :meth:`Module.modules` (``""`` for the root). Unchanged subtrees
    are shared, as by :meth:`Module.map`; parameters and their ids are untouched."""
    return _replace(root, fn, "")


def _replace(value: Any, fn: Callable[[str, Module], Module | None], path: str) -> Any:
    if isinstance(value, Module):
        replaced = fn(path, value)
        if replaced is not None:
            return replaced
        cls = type(value)
        current = value.__dict__
        values = None
        for name in cls._fields:
            old = current.get(name)
            new = _replace(old, fn, _join(path, name))
            if new is not old:
                if values is None:
                    values = dict(current)
                values[name] = new
        if values is None:
            return value
        out = object.__new__(cls)  # as Module.map: the fields are already checked values
        object.__setattr__(out, "__dict__", values)
        return out
    if isinstance(value, (list, tuple)):
        items = [_replace(item, fn, _join(path, str(i))) for i, item in enumerate(value)]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        mapped = {key: _replace(item, fn, _join(path, str(key))) for key, item in value.items()}
        if all(mapped[key] is item for key, item in value.items()):
            return value
        return mapped
    return value

"""Checks, at construction, the fields of a module annotated with a module type.

Two mistakes are caught where they are made instead of at the first forward: a
config given where its module belongs (``head=LinearConfig(128, 65)``, a forgotten
``.init(device)``), and a module of another type than the annotation names
(``act=Gelu()`` for ``act: Relu``). Lists, tuples and dicts of modules are checked
element by element. Annotations that cannot be resolved (names imported only for
type checking) are not checked; values that are neither configs nor modules are
left alone.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from typing import TYPE_CHECKING, Any

from ember.errors import ModuleError
from ember.module.config import Config

if TYPE_CHECKING:
    from ember.module.module import Module

_CACHE_ATTR = "_ember_field_checks"
_CONTAINERS = (list, tuple, dict)


def _resolve(cls: type, name: str) -> Any:
    """The annotation of field ``name`` as an object (``None`` when it cannot be)."""
    for base in cls.__mro__:
        annotations = inspect.get_annotations(base)
        if name in annotations:
            hint = annotations[name]
            if isinstance(hint, str):
                namespace = dict(getattr(sys.modules.get(base.__module__), "__dict__", {}))
                namespace.setdefault(base.__name__, base)
                try:
                    hint = eval(hint, namespace, {})  # the class's own annotation
                except Exception:
                    return None
            return hint
    return None


def _module_types(hint: Any, module_cls: type) -> tuple[tuple[type, ...], bool] | None:
    """``(module classes the hint allows, whether configs are allowed too)`` for a hint
    that names module types, else ``None``."""
    if isinstance(hint, type):
        if issubclass(hint, module_cls):
            return (hint,), False
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        modules, other, config = [], False, False
        for arg in typing.get_args(hint):
            if arg is type(None):
                continue
            if isinstance(arg, type) and issubclass(arg, module_cls):
                modules.append(arg)
            else:
                other = True
                config = config or (isinstance(arg, type) and issubclass(arg, Config)) or arg is Any
        if not modules:
            return None
        return tuple(modules), config or other
    return None


def _spec(hint: Any, module_cls: type) -> tuple[str, tuple[type, ...], bool] | None:
    """``(container kind, module classes, configs allowed)`` for a checkable hint."""
    direct = _module_types(hint, module_cls)
    if direct is not None:
        return "one", *direct
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _CONTAINERS and args:
        element = args[-1] if origin is not tuple else args[0]
        inner = _module_types(element, module_cls)
        if inner is not None:
            return ("values" if origin is dict else "items"), *inner
    return None


def _checks(cls: type[Module], module_cls: type) -> dict[str, tuple[str, tuple[type, ...], bool]]:
    cached = cls.__dict__.get(_CACHE_ATTR)
    if cached is None:
        cached = {}
        for name in cls._fields:
            spec = _spec(_resolve(cls, name), module_cls)
            if spec is not None:
                cached[name] = spec
        setattr(cls, _CACHE_ATTR, cached)
    return cached


def _names(types_: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types_)


def _check_value(
    owner: str, field: str, value: Any, expected: tuple[type, ...], configs_ok: bool, module_cls: type
) -> None:
    if isinstance(value, Config) and not configs_ok:
        kind = type(value).__name__
        raise ModuleError(
            f"ember: {owner}(): field '{field}' is a {_names(expected)} but got a {kind}, its config; "
            f"build the module with .init(device): {field}={kind}(...).init(device)"
        )
    if isinstance(value, module_cls) and not isinstance(value, expected):
        raise ModuleError(
            f"ember: {owner}(): field '{field}' is declared as {_names(expected)} but got a {type(value).__name__}; "
            f"pass a {_names(expected)}, or declare the field with a common base (e.g. `{field.split('[')[0]}: Module`) "
            "to accept any module"
        )


def check_fields(module: Module, module_cls: type) -> None:
    """Raises a :class:`ModuleError` for a config or a module of the wrong type in a
    field annotated with a module type."""
    cls = type(module)
    values = module.__dict__
    for field, (kind, expected, configs_ok) in _checks(cls, module_cls).items():
        value = values.get(field)
        if kind == "one":
            _check_value(cls.__name__, field, value, expected, configs_ok, module_cls)
        elif kind == "items" and isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                _check_value(cls.__name__, f"{field}[{i}]", item, expected, configs_ok, module_cls)
        elif kind == "values" and isinstance(value, dict):
            for key, item in value.items():
                _check_value(cls.__name__, f"{field}[{key!r}]", item, expected, configs_ok, module_cls)

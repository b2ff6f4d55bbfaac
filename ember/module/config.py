"""``Config``: dataclass-based configurations, saved and loaded as JSON.

A config class lists its fields with annotations; required fields come first and
are positional, fields with defaults are keywords. Instances are immutable:
``with_<field>(value)`` returns a changed copy. ``validate`` runs at construction.

>>> class MlpConfig(Config):
...     d_input: int
...     d_hidden: int = 64
...     def validate(self):
...         if self.d_hidden <= 0:
...             raise ConfigError("d_hidden must be positive")
>>> MlpConfig(4).with_d_hidden(16)
MlpConfig(d_input=4, d_hidden=16)
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ember.errors import ConfigError
from ember.module.atomic import atomic_write_text
from ember.module.dataclass_transform import dataclass_transform

if TYPE_CHECKING:
    from typing import Self

_REGISTRY: dict[str, type[Config]] = {}


def _copier(default: Any) -> Callable[[], Any]:
    """A default factory: a fresh copy of a mutable default (list, dict, set) per instance."""
    return lambda: type(default)(default)


def _with_method(name: str) -> Callable[[Config, Any], Config]:
    def with_field(self: Config, value: Any) -> Config:
        return dataclasses.replace(self, **{name: value})

    with_field.__name__ = with_field.__qualname__ = f"with_{name}"
    with_field.__doc__ = f"A copy with ``{name}`` changed."
    return with_field


# For the checker: fields with a default are keyword-only at run time (required ones
# stay positional), which PEP 681 cannot say per kind; it sees them all as positional.
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
class Config:
    """Base class of configurations (see the module docstring)."""

    _registry_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        annotations = inspect.get_annotations(cls)
        for name in annotations:
            if name.startswith("_") or "ClassVar" in str(annotations[name]):
                continue
            if name in cls.__dict__:
                default = cls.__dict__[name]
                if isinstance(default, dataclasses.Field):
                    continue
                if isinstance(default, (list, dict, set)):
                    setattr(cls, name, dataclasses.field(default_factory=_copier(default), kw_only=True))
                else:
                    setattr(cls, name, dataclasses.field(default=default, kw_only=True))
        dataclasses.dataclass(frozen=True, eq=True, repr=True)(cls)
        for field in dataclasses.fields(cls):
            method = f"with_{field.name}"
            if not hasattr(cls, method):  # a class may write its own (a base's generated one is shared)
                setattr(cls, method, _with_method(field.name))
        cls._registry_name = f"{cls.__module__}.{cls.__qualname__}"
        _REGISTRY[cls._registry_name] = cls
        _REGISTRY.setdefault(cls.__qualname__, cls)

    def __post_init__(self) -> None:
        self._check_types()
        self.validate()

    def validate(self) -> None:
        """Raise :class:`~ember.errors.ConfigError` for invalid values (override)."""

    def _check_types(self) -> None:
        try:
            hints = typing.get_type_hints(type(self))
        except Exception:
            return
        for field in dataclasses.fields(self):
            hint = hints.get(field.name)
            value = getattr(self, field.name)
            if hint is not None and not _matches(value, hint):
                raise ConfigError(
                    f"ember: {type(self).__name__}.{field.name} must be {_hint_name(hint)}, got {value!r}"
                )

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

        # ``with_<field>(value)`` is generated for every field at class creation; the
        # checker cannot see generated methods, so it reads them through this.
        def __getattr__(self, name: str) -> Callable[[Any], Self]: ...

    def replace(self, **changes: Any) -> Self:
        """A copy with several fields changed."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        if not isinstance(data, dict):
            raise ConfigError(f"ember: {cls.__name__}.from_dict needs a dict, got {type(data).__name__}")
        try:
            hints = typing.get_type_hints(cls)
        except Exception:
            hints = {}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"ember: {cls.__name__}: unknown fields {sorted(unknown)} in the saved config")
        values = {k: _decode(v, hints.get(k)) for k, v in data.items()}
        try:
            return cls(**values)
        except TypeError as error:
            raise ConfigError(f"ember: {cls.__name__}: cannot build from the saved config: {error}") from None

    @classmethod
    def from_json(cls, text: str) -> Self:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as error:
            raise ConfigError(f"ember: {cls.__name__}: the config is not valid JSON: {error}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the config as JSON (atomically: a temporary file, then a rename)."""
        atomic_write_text(Path(path), self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise ConfigError(f"ember: {cls.__name__}.load: cannot read {path}: {error}") from None
        return cls.from_json(text)


def _encode(value: Any) -> Any:
    if isinstance(value, Config):
        return {"__config__": type(value)._registry_name, **value.to_dict()}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any, hint: Any) -> Any:
    if isinstance(value, dict) and "__config__" in value:
        name = value["__config__"]
        cls = _REGISTRY.get(name) or _REGISTRY.get(name.rsplit(".", 1)[-1])
        if cls is None:
            raise ConfigError(f"ember: the saved config names an unknown config class {name!r}")
        return cls.from_dict({k: v for k, v in value.items() if k != "__config__"})
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum) and isinstance(value, str):
        try:
            return hint[value]
        except KeyError:
            raise ConfigError(f"ember: {value!r} is not a member of {hint.__name__}") from None
    if origin is tuple and isinstance(value, list):
        inner = args[0] if args else None
        return tuple(_decode(v, inner) for v in value)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for arg in args:
            if arg is type(None):
                continue
            decoded = _decode(value, arg)
            if _matches(decoded, arg):
                return decoded
    if origin is list and isinstance(value, list):
        inner = args[0] if args else None
        return [_decode(v, inner) for v in value]
    return value


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args))
    if origin in (list, dict, typing.Literal):
        if origin is typing.Literal:
            return value in args
        return isinstance(value, origin)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")

"""Argument and result structures of a compiled function (JAX's pytrees): tuples,
lists, dicts, dataclasses and registered classes, flattened to their *leaves* (tensors,
modules, floats) and a hashable structure that builds them again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ember.backend.fusion.scalars import SymScalar
from ember.errors import GraphError
from ember.module import Module
from ember.tensor import Tensor

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Leaf:
    """A position in the flattened arguments holding a tensor, module or float."""

    kind: str  # "tensor", "module", "scalar"
    index: int


@dataclass(frozen=True, slots=True)
class _Node:
    """A registered dataclass in an argument or result structure: called with its
    fields' values (in declaration order), it builds the instance again."""

    cls: type
    names: tuple[str, ...]

    def __call__(self, children: Any) -> Any:
        return self.cls(*children)


_NODES: dict[type, _Node] = {}


@dataclass(frozen=True, slots=True)
class _CustomNode:
    """A class registered with :func:`register_pytree_node` in a structure: called with
    its children's values, it builds the instance again from them and ``aux``."""

    cls: type
    unflatten: Callable[[Any, tuple[Any, ...]], Any]
    aux: Any

    def __call__(self, children: Any) -> Any:
        return self.unflatten(self.aux, tuple(children))


_CUSTOM: dict[type, tuple[Callable[[Any], tuple[Any, Any]], Callable[[Any, tuple[Any, ...]], Any]]] = {}


def register_pytree_node(
    cls: type[_T],
    flatten: Callable[[_T], tuple[Any, Any]],
    unflatten: Callable[[Any, tuple[Any, ...]], _T],
) -> type[_T]:
    """Let instances of ``cls`` pass into and out of compiled functions as structures
    (JAX's ``register_pytree_node``): ``flatten(obj) -> (children, aux)`` gives the
    values to trace (tensors, modules, floats, or structures of them) and a hashable
    ``aux`` that identifies the structure (a new ``aux`` traces again);
    ``unflatten(aux, children)`` builds the instance again. ``GradientsParams`` is
    registered this way, so a compiled step may return the gradients."""
    _CUSTOM[cls] = (flatten, unflatten)
    return cls


def register_dataclass(cls: type[_T]) -> type[_T]:
    """Let instances of the dataclass ``cls`` pass into and out of compiled functions
    as structures: their fields are flattened like a tuple's (tensors become graph
    inputs and outputs) and the class is built again from them, by position. Use as a
    class decorator (the KV cache of :mod:`ember.nn.attention.cache` is one). A
    dataclass instance that holds tensors is registered on first sight; registering
    says so up front, and makes instances without tensors structures too."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        raise GraphError(f"ember: compile: register_dataclass needs a dataclass, got {cls!r}")
    _NODES[cls] = _Node(cls, tuple(f.name for f in dataclasses.fields(cls) if f.init))
    return cls


def _holds_tensors(value: Any) -> bool:
    """Whether ``value`` (a field's value) is or holds a tensor or module (one level of
    containers deep): what makes an unregistered dataclass a structure, not a constant."""
    if isinstance(value, (Tensor, Module)):
        return True
    if type(value) in (tuple, list):
        return any(isinstance(v, (Tensor, Module)) for v in value)
    if type(value) is dict:
        return any(isinstance(v, (Tensor, Module)) for v in value.values())
    return type(value) in _NODES or type(value) in _CUSTOM


def _auto_node(value: Any) -> _Node | None:
    """A dataclass instance that holds tensors in its fields (a batch, a step's output) is
    a structure even when not registered: registered on first sight. One with tensors in
    a field ``__init__`` does not take cannot be rebuilt, and stays a constant."""
    import dataclasses

    cls = type(value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type) or cls in _NODES:
        return _NODES.get(cls)
    fields = dataclasses.fields(value)
    if not any(_holds_tensors(getattr(value, f.name)) for f in fields):
        return None
    if any(not f.init and _holds_tensors(getattr(value, f.name)) for f in fields):
        return None
    register_dataclass(cls)
    return _NODES[cls]


def flatten(value: Any, leaves: list[Any]) -> Any:
    """The structure of ``value`` with tensors, modules and floats moved to ``leaves``."""
    if isinstance(value, (Tensor, Module)) or (type(value) is float):
        leaves.append(value)
        kind = "tensor" if isinstance(value, Tensor) else "module" if isinstance(value, Module) else "scalar"
        return Leaf(kind, len(leaves) - 1)
    if type(value) in (tuple, list):
        return (type(value), tuple(flatten(v, leaves) for v in value))
    node = _NODES.get(type(value)) or _auto_node(value)
    if node is not None:
        return (node, tuple(flatten(getattr(value, name), leaves) for name in node.names))
    custom = _CUSTOM.get(type(value))
    if custom is not None:
        children, aux = custom[0](value)
        return (_CustomNode(type(value), custom[1], aux), tuple(flatten(v, leaves) for v in children))
    if type(value) is dict:
        return (dict, tuple((k, flatten(v, leaves)) for k, v in value.items()))
    return ("static", value)


def static_key(spec: Any) -> Any:
    """The hashable part of an argument structure (static values by value or identity)."""
    if type(spec) is Leaf:
        return spec
    kind, items = spec
    if kind == "static":
        try:
            hash(items)
            return ("static", type(items), items)
        except TypeError:
            return ("static-id", id(items))
    if kind is dict:
        return (dict, tuple((k, static_key(v)) for k, v in items))
    return (kind, tuple(static_key(v) for v in items))


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    if type(spec) is Leaf:
        return leaves[spec.index]
    kind, items = spec
    if kind == "static":
        return items
    if kind is dict:
        return {k: unflatten(v, leaves) for k, v in items}
    return kind(unflatten(v, leaves) for v in items)


def flatten_result(result: Any, leaves: list[Any]) -> Any:
    if isinstance(result, (Tensor, Module)) or type(result) is SymScalar:
        leaves.append(result)
        return Leaf("out", len(leaves) - 1)
    if type(result) in (tuple, list):
        return (type(result), tuple(flatten_result(v, leaves) for v in result))
    node = _NODES.get(type(result)) or _auto_node(result)
    if node is not None:
        return (node, tuple(flatten_result(getattr(result, name), leaves) for name in node.names))
    custom = _CUSTOM.get(type(result))
    if custom is not None:
        children, aux = custom[0](result)
        return (_CustomNode(type(result), custom[1], aux), tuple(flatten_result(v, leaves) for v in children))
    if type(result) is dict:
        return (dict, tuple((k, flatten_result(v, leaves)) for k, v in result.items()))
    return ("static", result)


def spec_expr(spec: Any, leaves: list[str], const: Callable[[Any, str], str]) -> str:
    """A Python expression building the result of structure ``spec`` from the
    expressions ``leaves`` (generated code's counterpart of :func:`unflatten`)."""
    if type(spec) is Leaf:
        return leaves[spec.index]
    kind, items = spec
    if kind == "static":
        return const(items, "V")
    if kind is dict:
        return "{" + ", ".join(f"{const(k, 'K')}: {spec_expr(v, leaves, const)}" for k, v in items) + "}"
    inner = ", ".join(spec_expr(v, leaves, const) for v in items)
    if kind is tuple:
        return f"({inner}{',' if len(items) == 1 else ''})"
    if kind is list:
        return f"[{inner}]"
    return f"{const(kind, 'S')}(({inner}{',' if len(items) == 1 else ''}))"

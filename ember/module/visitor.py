"""Visitors read every parameter of a module; mappers return new parameters."""

from __future__ import annotations

from typing import Any

from ember.module.param import Param, RunningState


class ModuleVisitor:
    """Read-only traversal: override the hooks you need. ``path`` is dotted
    (``"l1.weight"``, ``"blocks.0.attn.query.weight"``)."""

    def visit_float(self, param: Param, path: str) -> None:
        """A float parameter."""

    def visit_int(self, param: Param, path: str) -> None:
        """An int parameter."""

    def visit_bool(self, param: Param, path: str) -> None:
        """A bool parameter."""

    def visit_state(self, state: RunningState, path: str) -> None:
        """A running state (buffer); not a parameter."""

    def enter_module(self, path: str, module: Any) -> None:
        """Before the fields of a sub-module (``path`` is ``""`` for the root)."""

    def exit_module(self, path: str, module: Any) -> None:
        """After the fields of a sub-module."""


class ModuleMapper:
    """Traversal that builds a new module: each hook returns the new leaf
    (keep the id with ``Param.from_mapped_value`` or ``param.map``)."""

    def map_float(self, param: Param, path: str) -> Param:
        return param

    def map_int(self, param: Param, path: str) -> Param:
        return param

    def map_bool(self, param: Param, path: str) -> Param:
        return param

    def map_state(self, state: RunningState, path: str) -> RunningState:
        return state


class FnMapper(ModuleMapper):
    """Applies one function to every parameter (and, optionally, state)."""

    def __init__(self, fn: Any, state_fn: Any = None):
        self.fn = fn
        self.state_fn = state_fn

    def map_float(self, param: Param, path: str) -> Param:
        return self.fn(param, path)

    map_int = map_float
    map_bool = map_float

    def map_state(self, state: RunningState, path: str) -> RunningState:
        return state if self.state_fn is None else self.state_fn(state, path)


class ParamCollector(ModuleVisitor):
    """Collects ``(path, param)`` pairs in traversal order."""

    def __init__(self, states: bool = False):
        self.items: list[tuple[str, Any]] = []
        self.states = states

    def visit_float(self, param: Param, path: str) -> None:
        self.items.append((path, param))

    visit_int = visit_float
    visit_bool = visit_float

    def visit_state(self, state: RunningState, path: str) -> None:
        if self.states:
            self.items.append((path, state))

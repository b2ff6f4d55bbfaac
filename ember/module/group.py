"""``ParamGroup``: a selection of parameters by id, path, substring or regex."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ember.module.param import ParamId


class ParamGroup:
    """Selects parameters, for ``Module.freeze`` and optimizer groups.

    >>> group = ParamGroup.contains("bias") | ParamGroup.paths(["l1.weight"])
    >>> group.matches(ParamId(1), "l2.bias")
    True
    """

    def __init__(self, predicate: Callable[[ParamId, str], bool], description: str):
        self._predicate = predicate
        self.description = description

    @staticmethod
    def all() -> ParamGroup:
        return ParamGroup(lambda pid, path: True, "all")

    @staticmethod
    def ids(ids: Iterable[ParamId]) -> ParamGroup:
        chosen = frozenset(ids)
        return ParamGroup(lambda pid, path: pid in chosen, f"ids({len(chosen)})")

    @staticmethod
    def paths(paths: Iterable[str]) -> ParamGroup:
        chosen = frozenset(paths)
        return ParamGroup(lambda pid, path: path in chosen, f"paths({sorted(chosen)})")

    @staticmethod
    def contains(text: str) -> ParamGroup:
        return ParamGroup(lambda pid, path: text in path, f"contains({text!r})")

    @staticmethod
    def prefix(text: str) -> ParamGroup:
        """Parameters under a sub-module: ``ParamGroup.prefix("encoder.")``."""
        return ParamGroup(lambda pid, path: path.startswith(text), f"prefix({text!r})")

    @staticmethod
    def regex(pattern: str) -> ParamGroup:
        compiled = re.compile(pattern)
        return ParamGroup(lambda pid, path: compiled.search(path) is not None, f"regex({pattern!r})")

    def matches(self, param_id: ParamId, path: str) -> bool:
        return bool(self._predicate(param_id, path))

    def __or__(self, other: ParamGroup) -> ParamGroup:
        return ParamGroup(
            lambda pid, path: self.matches(pid, path) or other.matches(pid, path),
            f"{self.description} | {other.description}",
        )

    def __and__(self, other: ParamGroup) -> ParamGroup:
        return ParamGroup(
            lambda pid, path: self.matches(pid, path) and other.matches(pid, path),
            f"{self.description} & {other.description}",
        )

    def __invert__(self) -> ParamGroup:
        return ParamGroup(lambda pid, path: not self.matches(pid, path), f"~{self.description}")

    def __repr__(self) -> str:
        return f"ParamGroup({self.description})"

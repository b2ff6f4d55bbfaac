"""The reference executor: a graph replayed call by call on any backend.

Every node is the backend call it recorded, so replaying it on the backend the
graph was traced over gives the eager result exactly (same kernels, same order).
A fused call the backend declines (``NotImplemented``) runs its decomposition.

A :class:`Replay` turns the graph into one straight-line Python function (one line
per node, static arguments bound as constants, each value dropped after its last
use), so a replay costs one Python call per node and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.backend.fusion.decompose import DECOMPOSITIONS
from ember.backend.fusion.graph import LEAF, Graph, Ref, Sc, flatten
from ember.errors import EmberError


class ReplayError(EmberError, RuntimeError):
    """A backend's result disagreed with the graph's inferred shape or dtype."""


class PartialRun(Exception):
    """A node raised; ``computed`` maps the outputs computed before it to their values."""

    def __init__(self, error: BaseException, computed: dict[int, Any]):
        super().__init__(str(error))
        self.error = error
        self.computed = computed


class Replay:
    """A graph prepared for replay. Its run-time scalars are
    :class:`~ember.backend.fusion.graph.Sc` placeholders (see
    ``Graph.abstract_scalars``), given per run; ``check`` compares every result with
    the inferred shape and dtype (tests use it; a mismatch is a bug in the rules);
    placeholders in ``fixed`` (slot -> value) are constants."""

    def __init__(self, graph: Graph, check: bool = False, fixed: dict[int, Any] | None = None):
        self.graph = graph
        self.check = check
        self.code, self._fn = _generate(graph, check, fixed or {})

    def run(self, backend: Any, inputs: list[Any], scalars: Sequence[Any] = (), donated: tuple = ()) -> list[Any]:
        """The graph's outputs, given its inputs (primitives of ``backend``) and
        run-time scalars. A replay takes no donations (``donated`` is ignored): its
        outputs are the backend's fresh results."""
        return self._fn(backend, inputs, scalars)


def _generate(graph: Graph, check: bool, fixed: dict[int, Any]) -> tuple[str, Any]:
    env: dict[str, Any] = {"NotImplemented": NotImplemented, "PartialRun": PartialRun, "_check": _check_result}
    consts = {ref: f"k{int(ref)}" for ref in graph.consts}
    for ref, value in graph.consts.items():
        env[f"k{int(ref)}"] = value

    def name(ref: int) -> str:
        return consts.get(ref) or f"v{int(ref)}"

    def expr(arg: Any) -> str:
        kind = type(arg)
        if kind is Ref:
            return name(arg)
        if kind is Sc:
            if int(arg) in fixed:
                key = f"c{len(env)}"
                env[key] = fixed[int(arg)]
                return key
            return f"sc[{int(arg)}]"
        if kind is tuple:
            return "(" + "".join(expr(a) + ", " for a in arg) + ")"
        if kind is list:
            return "[" + ", ".join(expr(a) for a in arg) + "]"
        if arg is None or kind in (bool, int, str):
            return repr(arg)
        key = f"c{len(env)}"
        env[key] = arg
        return key

    last_use: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for ref in node.refs():
            last_use[ref] = i
    keep = set(graph.outputs) | set(graph.consts)

    lines = ["def run(backend, inputs, sc):"]
    if graph.inputs:
        lines.append(f"    {''.join(name(r) + ', ' for r in graph.inputs)}= inputs")
    lines.append("    done = {}")
    frees: list[list[int]] = [[] for _ in graph.nodes]
    for ref, i in last_use.items():
        if ref not in keep:
            frees[i].append(ref)
    for i, node in enumerate(graph.nodes):
        env[f"m_{node.op}"] = node.op
        args = ", ".join([expr(a) for a in node.args] + [f"{k}={expr(v)}" for k, v in node.kwargs])
        lines.append("    try:")
        lines.append(f"        r = getattr(backend, m_{node.op})({args})")
        lines.append("        if r is NotImplemented:")
        env[f"d_{node.op}"] = DECOMPOSITIONS.get(node.op)
        lines.append(f"            r = d_{node.op}(backend, {args})")
        lines.append("    except Exception as error:")
        lines.append("        raise PartialRun(error, done)")
        outs = [name(o) for o in node.outs]
        if node.tree is None:
            lines.append(f"    {outs[0]} = r")
        else:
            lines.append(f"    {''.join(o + ', ' for o in outs)}= {_unpack('r', node.tree)}")
        if check:
            for o in node.outs:
                aval = graph.avals[o]
                env[f"a{int(o)}"] = aval
                lines.append(f"    _check({node.op!r}, {name(o)}, a{int(o)})")
        for o in node.outs:
            if o in graph.outputs:
                lines.append(f"    done[{int(o)}] = {name(o)}")
        if frees[i]:
            lines.append(f"    del {', '.join(name(r) for r in frees[i])}")
    lines.append(f"    return [{', '.join(name(o) for o in graph.outputs)}]")
    code = "\n".join(lines)
    exec(code, env)  # code generated above from the graph's nodes
    return code, env["run"]


def _unpack(var: str, tree: Any) -> str:
    """An expression of the tensor leaves of result ``var`` with structure ``tree``."""
    parts: list[str] = []

    def walk(path: str, t: Any) -> None:
        if t is None:
            return
        if t == LEAF:
            parts.append(path)
            return
        _, items = t
        for i, item in enumerate(items):
            walk(f"{path}[{i}]", item)

    walk(var, tree)
    return "(" + "".join(p + ", " for p in parts) + ")"


def _check_result(op: str, value: Any, aval: Any) -> None:
    if tuple(value.shape) != aval.shape or value.dtype != aval.dtype:
        raise ReplayError(
            f"ember: fusion: {op} gave {list(value.shape)} {value.dtype}, but the graph inferred "
            f"{list(aval.shape)} {aval.dtype}; this is a bug in ember's shape rules"
        )


__all__ = ["PartialRun", "Replay", "ReplayError", "flatten"]

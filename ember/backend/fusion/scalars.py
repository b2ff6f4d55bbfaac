"""Run-time scalars of a captured function: a learning rate passed as an argument,
an optimizer's step count, and everything Python computes from them.

While a function is traced, such a number is a :class:`SymScalar`: it supports the
arithmetic an optimizer does (``lr / (1 - beta_1 ** t)``, ``t + 1``, ``v ** 0.5``)
by recording it. A comparison or truth test (``if t > 1:``, ``a.time == b.time``)
answers with the traced value and records a *guard*: a replay whose scalars would
answer differently traces again. ``float()``/``int()`` would freeze the value
silently, so they raise a :class:`GraphBreak`. A :class:`ScalarProgram` replays
the recorded arithmetic and guards on each call, as straight-line Python.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable
from typing import Any

from ember.errors import GraphError


class GraphBreak(GraphError):
    """The traced function did something a graph cannot hold (read a tensor's value,
    branch on a run-time scalar, call an op without a graph rule)."""


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
}
_UNARY: dict[str, Callable[[Any], Any]] = {"neg": operator.neg, "abs": abs, "sqrt": math.sqrt, "truth": bool}
#: Python's operator for each binary op and comparison (generated code writes ``a + b``,
#: which is ``operator.add(a, b)`` without the call).
_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}


class SymScalar:
    """A number known only when the captured function runs. ``value`` is the number
    seen while tracing (for messages); ``expr`` is how it is computed."""

    __slots__ = ("program", "index", "value")

    #: Read by the tensor layer (``ember.tensor.checks.is_symbolic``): a float-like scalar.
    symbolic_scalar = True

    def __init__(self, program: ScalarProgram, index: int, value: Any):
        self.program = program
        self.index = index
        self.value = value

    # ------------------------------------------------------------------ arithmetic
    def _binary(self, op: str, other: Any, reverse: bool = False) -> Any:
        if not isinstance(other, (SymScalar, int, float)) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        return self.program.apply(op, a, b)

    def __add__(self, other: Any) -> Any:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Any:
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> Any:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Any:
        return self._binary("sub", other, True)

    def __mul__(self, other: Any) -> Any:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Any:
        return self._binary("mul", other, True)

    def __truediv__(self, other: Any) -> Any:
        return self._binary("truediv", other)

    def __rtruediv__(self, other: Any) -> Any:
        return self._binary("truediv", other, True)

    def __floordiv__(self, other: Any) -> Any:
        return self._binary("floordiv", other)

    def __mod__(self, other: Any) -> Any:
        return self._binary("mod", other)

    def __pow__(self, other: Any) -> Any:
        return self._binary("pow", other)

    def __rpow__(self, other: Any) -> Any:
        return self._binary("pow", other, True)

    def __neg__(self) -> Any:
        return self.program.apply("neg", self)

    def __pos__(self) -> SymScalar:
        return self

    def __abs__(self) -> Any:
        return self.program.apply("abs", self)

    def sqrt(self) -> Any:
        return self.program.apply("sqrt", self)

    # ------------------------------------------------------------------ what breaks a graph
    def _break(self, what: str) -> GraphBreak:
        return GraphBreak(
            f"ember: compile: {what} of a run-time scalar (traced as {self.value!r}) would freeze its value "
            "into the graph; compute with it arithmetically instead (e.g. x ** 0.5, not math.sqrt(x))"
        )

    def __float__(self) -> float:
        raise self._break("float()")

    def __int__(self) -> int:
        raise self._break("int()")

    def __index__(self) -> int:
        raise self._break("use as an index")

    def __bool__(self) -> bool:
        return self.program.guard("truth", self)

    def _compare(self, op: str, other: Any) -> Any:
        if not isinstance(other, (SymScalar, int, float)):
            return NotImplemented
        return self.program.guard(op, self, other)

    def __lt__(self, other: Any) -> Any:
        return self._compare("lt", other)

    def __le__(self, other: Any) -> Any:
        return self._compare("le", other)

    def __gt__(self, other: Any) -> Any:
        return self._compare("gt", other)

    def __ge__(self, other: Any) -> Any:
        return self._compare("ge", other)

    def __eq__(self, other: object) -> Any:
        if other is self:
            return True
        return self._compare("eq", other)

    def __ne__(self, other: object) -> Any:
        if other is self:
            return False
        return self._compare("ne", other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"SymScalar(${self.index}, traced as {self.value!r})"


class ScalarProgram:
    """The scalar arithmetic of a trace, replayed per call as generated Python.

    Each entry is an input (numbered in order of declaration) or one recorded
    operation. :meth:`compile` returns ``f(inputs) -> [values of the requested entries]``.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[str, tuple]] = []
        self.n_inputs = 0
        self.guards: list[tuple[int, bool]] = []  # (entry, the answer the trace took)
        self._interned: dict[tuple, tuple[int, Any]] = {}  # (op, operands) -> (entry, value)

    def input(self, value: Any) -> SymScalar:
        """Input number ``n_inputs`` (inputs may be declared between operations)."""
        self.entries.append(("input", (self.n_inputs,)))
        self.n_inputs += 1
        return SymScalar(self, len(self.entries) - 1, value)

    def apply(self, op: str, *args: Any) -> SymScalar:
        """One recorded operation; the same operation on the same operands is recorded
        once (an optimizer computes its bias corrections once per parameter)."""
        operands: tuple[tuple, ...] = tuple(
            ("$", a.index) if type(a) is SymScalar else ("k", type(a), repr(a), a) for a in args
        )
        key = (op, operands)
        hit = self._interned.get(key)
        if hit is not None:
            return SymScalar(self, hit[0], hit[1])
        values = [a.value if type(a) is SymScalar else a for a in args]
        fn: Callable[..., Any] = _BINARY.get(op) or _UNARY.get(op) or _COMPARE[op]
        value = fn(*values)
        self.entries.append((op, tuple(o if o[0] == "$" else ("k", o[3]) for o in operands)))
        self._interned[key] = (len(self.entries) - 1, value)
        return SymScalar(self, len(self.entries) - 1, value)

    def guard(self, op: str, *args: Any) -> bool:
        """The traced answer of a comparison (or truth test), kept as a guard."""
        result = self.apply(op, *args)
        answer = bool(result.value)
        if (result.index, answer) not in self.guards:
            self.guards.append((result.index, answer))
        return answer

    def compile(self, wanted: list[int], pack: tuple[Any, int] | None = None) -> Any:
        """``f(inputs)`` computing the entries ``wanted`` (in order), as Python code; it
        returns ``None`` when a guard answers differently than while tracing. Entries
        neither wanted nor guarded are left out.

        Generated Python rather than a list of bound steps: on the W1 Adam step's program
        (9 entries) a call costs 0.19 us against 2.0 us for one closure per entry run in a
        loop (``benchmarks/capture_runner.py``).

        With ``pack=(buffer, count)`` the first ``count`` wanted values are written into
        ``buffer`` as native doubles (``struct.pack_into``: compiled code reads them
        there) and ``f`` returns the others."""
        needed = set(wanted) | {entry for entry, _ in self.guards}
        for i in range(len(self.entries) - 1, -1, -1):
            op, operands = self.entries[i]
            if i in needed and op != "input":
                needed.update(value for kind, value in operands if kind == "$")
        lines = ["def scalar_program(inputs):"]
        names = {**_BINARY, **_UNARY, **_COMPARE}
        env: dict[str, Any] = {}
        guards = dict(self.guards)  # checked as soon as computed: a later entry may rely on the answer

        def check(entry: int) -> None:
            if entry in guards:
                lines.append(f"    if {'not ' if guards[entry] else ''}v{entry}:")
                lines.append("        return None")

        for i, (op, operands) in enumerate(self.entries):
            if i not in needed:
                continue
            if op == "input":
                lines.append(f"    v{i} = inputs[{operands[0]}]")
                check(i)
                continue
            args = []
            for kind, value in operands:
                if kind == "$":
                    args.append(f"v{value}")
                else:
                    env[f"k{i}_{len(args)}"] = value
                    args.append(f"k{i}_{len(args)}")
            infix = _INFIX.get(op)
            if infix is not None and len(args) == 2:
                lines.append(f"    v{i} = {args[0]} {infix} {args[1]}")
            else:
                env[f"f_{op}"] = names[op]
                lines.append(f"    v{i} = f_{op}({', '.join(args)})")
            check(i)
        if pack is not None:
            buffer, count = pack
            if count:
                env["pack_into"], env["PACKED"] = struct.pack_into, buffer
                values = ", ".join(f"v{w}" for w in wanted[:count])
                lines.append(f"    pack_into('={count}d', PACKED, 0, {values})")
            wanted = wanted[count:]
        lines.append(f"    return [{', '.join(f'v{w}' for w in wanted)}]")
        self.source = "\n".join(lines)
        exec(self.source, env)  # code generated above from the recorded entries
        return env["scalar_program"]

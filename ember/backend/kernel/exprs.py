"""Kernel expressions: the DAG a fused kernel computes per element.

An :class:`Expr` is a load through a strided view, a constant, a run-time scalar,
an elementwise op of other expressions, or a reduction's result (in an epilogue).
:class:`Exprs` builds them interned, so equal subexpressions are one object and a
code generator computes each once. Every target lowers these same trees.

An :class:`Expr` is also a value: equal and hashed by its structure (kind, op,
operands, dtype), with the hash computed once, so a tree built anywhere in the
process keys a kernel cache (cube's eager kernels build theirs one op at a time,
:mod:`ember.backend.cube.ir`). A launch's trees may number their leaves instead of
naming buffers: ``load`` with op ``j`` and no view reads the launch's operand ``j``,
``acc`` with op ``k`` is its reduction ``k``, and ``index`` is the element's linear
index. A row program (:class:`~ember.backend.kernel.steps.RowProgram`, whose sizes are
known only at run time) loads through a :class:`~ember.backend.kernel.steps.RowView`
instead of a view, and reads its sizes as ``size`` leaves (op 0: rows, 1: columns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.kernel.views import View


class Expr:
    """A node of a kernel's expression DAG. Built through :class:`Exprs`, which
    interns them, so equal subexpressions are one object (computed once)."""

    __slots__ = ("kind", "op", "args", "dtype", "depth", "_hash", "__weakref__")

    def __init__(self, kind: str, op: Any, args: tuple, dtype: np.dtype):
        self.kind = kind  # load | const | scalar | unary | binary | where | clamp | cast | acc | index | size | random
        self.op = op  # load: buffer id; const: value; scalar: slot; acc: (kernel, reduction); else op
        self.args = args  # load: (View,); random: (View, key lo, key hi, counter lo, counter hi); clamp: (x, low, high)
        self.dtype = dtype  # the value's numpy dtype
        self.depth: int = 1 + max((a.depth for a in args if type(a) is Expr), default=0)
        self._hash: int | None = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash((self.kind, op_key(self.kind, self.op), self.args, self.dtype.str))
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not Expr or hash(self) != hash(other):
            return False
        return (
            self.kind == other.kind
            and self.dtype == other.dtype
            and op_key(self.kind, self.op) == op_key(other.kind, other.op)
            and self.args == other.args
        )

    def __repr__(self) -> str:
        if self.kind == "load" and self.args and type(self.args[0]) is View:
            v = self.args[0]
            return f"B{self.op}[{list(v.shape)}:{list(v.strides)}+{v.offset}]"
        if self.kind in ("const", "scalar", "acc", "load", "index", "size"):
            return f"{self.kind}({self.op})"
        return f"{self.kind}.{self.op}({', '.join(map(repr, self.args))})"

    def walk(self) -> list[Expr]:
        """Every node of the DAG once, operands before users."""
        seen: dict[int, Expr] = {}
        stack: list[tuple[Expr, bool]] = [(self, False)]
        while stack:
            e, expanded = stack.pop()
            if id(e) in seen:
                continue
            if expanded:
                seen[id(e)] = e
                continue
            stack.append((e, True))
            stack.extend((a, False) for a in reversed(e.args) if type(a) is Expr and id(a) not in seen)
        return list(seen.values())

    def has(self, kind: str) -> bool:
        return any(e.kind == kind for e in self.walk())


#: The kinds of leaf that read through a view (a kernel's accesses): every pass that
#: re-views a kernel's loads re-views these too (:meth:`Exprs.map_loads`).
ACCESSES = frozenset({"load", "random"})


def op_key(kind: str, op: Any) -> Any:
    """``op`` as compared in a structural key: a constant by its type and, for a float,
    its bits (so ``-0.0`` and ``0.0`` stay apart and NaN equals itself)."""
    if kind != "const":
        return op
    if isinstance(op, (float, np.floating)):
        return (type(op), float(op).hex())
    return (type(op), op)


class Exprs:
    """The interning factory of one schedule's expressions."""

    def __init__(self) -> None:
        self._table: dict[tuple, Expr] = {}

    def make(self, kind: str, op: Any, args: tuple, dtype: np.dtype) -> Expr:
        key = (
            kind,
            op_key(kind, op),
            tuple(a if type(a) is not Expr else id(a) for a in args),
            dtype.str,
        )
        e = self._table.get(key)
        if e is None:
            e = self._table[key] = Expr(kind, op, args, dtype)
        return e

    def load(self, buffer: int, view: View, dtype: np.dtype) -> Expr:
        return self.make("load", buffer, (view.normalized(),), dtype)

    def const(self, value: Any, dtype: np.dtype) -> Expr:
        return self.make("const", value, (), dtype)

    def random(
        self, op: tuple, view: View, key: tuple[Expr, Expr], counter: tuple[Expr, Expr], dtype: np.dtype
    ) -> Expr:
        """Element ``view``'s offset of the Philox draw ``op`` at ``key`` and ``counter``
        (each as its 32-bit halves, low first)."""
        return self.make("random", op, (view.normalized(), *key, *counter), dtype)

    def reviewed(self, access: Expr, view: View) -> Expr:
        """An access (a load or a draw's element) read through ``view`` instead."""
        return self.make(access.kind, access.op, (view.normalized(), *access.args[1:]), access.dtype)

    def map_loads(self, expr: Expr, fn: Callable[[Expr], Expr | None], memo: dict[int, Expr | None]) -> Expr | None:
        """``expr`` with each access (a load or a draw's element, see :data:`ACCESSES`)
        replaced by ``fn(access)``; ``None`` if ``fn`` fails on one."""
        if id(expr) in memo:
            return memo[id(expr)]
        if expr.kind in ACCESSES:
            out = fn(expr)
        elif not expr.args:
            out = expr
        else:
            args = []
            out = None
            for a in expr.args:
                if type(a) is Expr:
                    a = self.map_loads(a, fn, memo)
                    if a is None:
                        break
                args.append(a)
            else:
                out = self.make(expr.kind, expr.op, tuple(args), expr.dtype)
        memo[id(expr)] = out
        return out

"""A small IR for elementwise kernels: expressions over typed inputs and scalars.

An :class:`Expr` is a hashable tree whose nodes carry their compute type (``f32``,
``i32`` or ``bool``); it is part of a kernel's cache key, and :func:`emit` turns it
into WGSL statements. Leaves read input ``i`` at the current element (through its
broadcasting strides), scalar ``k`` from the launch's parameter block, a constant
(exact: written into the kernel's source by its bits), the element's linear index,
or accumulator ``k`` of a fused reduction (in its epilogue).

>>> x = load(0, "f32")
>>> expr = binary("mul", unary("exp", x), scalar(0, "f32"))
>>> expr.type
'f32'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ember.backend.cube import wgsl


@dataclass(frozen=True)
class Expr:
    """A node; the builders below are memoised, so equal trees are usually one object."""

    op: str
    args: tuple
    type: str
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.op, self.args, self.type)))

    def __hash__(self) -> int:
        return self._hash


@lru_cache(maxsize=4096)
def load(i: int, ctype: str) -> Expr:
    """Input ``i`` (already converted to its compute type ``ctype``)."""
    return Expr("load", (i,), ctype)


@lru_cache(maxsize=4096)
def scalar(k: int, ctype: str) -> Expr:
    """Scalar parameter ``k`` of the launch, as ``ctype``."""
    return Expr("scalar", (k,), ctype)


@lru_cache(maxsize=4096)
def const(value: int | float | bool, ctype: str) -> Expr:
    """A constant of compute type ``ctype`` (part of the kernel's source and key)."""
    if ctype == "bool":
        value = bool(value)
    elif ctype in ("i32", "i64"):
        value = int(value)
    elif ctype == "c64":
        value = complex(value)  # type: ignore[assignment]
    else:
        value = float(value)
    return Expr("const", (value,), ctype)


@lru_cache(maxsize=4096)
def acc(k: int, ctype: str) -> Expr:
    """The result of reduction ``k`` of a fused reduction kernel (read in its epilogue)."""
    return Expr("acc", (k,), ctype)


@lru_cache(maxsize=4096)
def index() -> Expr:
    """The element's linear index in the output, as ``i32``."""
    return Expr("index", (), "i32")


@lru_cache(maxsize=4096)
def unary(op: str, a: Expr) -> Expr:
    if a.type not in wgsl.UNARY[op]:
        raise TypeError(f"ember: cube: {op} has no {a.type} kernel")
    return Expr("unary", (op, a), "bool" if op in wgsl.BOOL_RESULT else wgsl.RESULT_TYPE.get(op, a.type))


@lru_cache(maxsize=4096)
def binary(op: str, a: Expr, b: Expr) -> Expr:
    if a.type != b.type or a.type not in wgsl.BINARY[op]:
        raise TypeError(f"ember: cube: {op} has no ({a.type}, {b.type}) kernel")
    return Expr("binary", (op, a, b), "bool" if op in wgsl.BOOL_RESULT else wgsl.RESULT_TYPE.get(op, a.type))


@lru_cache(maxsize=4096)
def select(cond: Expr, a: Expr, b: Expr) -> Expr:
    """``a`` where ``cond`` holds, else ``b``."""
    if cond.type != "bool" or a.type != b.type:
        raise TypeError("ember: cube: select needs a bool condition and operands of one type")
    return Expr("select", (cond, a, b), a.type)


@lru_cache(maxsize=4096)
def convert(a: Expr, ctype: str) -> Expr:
    return a if a.type == ctype else Expr("convert", (a,), ctype)


def num_inputs(expr: Expr) -> int:
    """One more than the largest input index ``expr`` reads (0 for none)."""
    if expr.op == "load":
        return expr.args[0] + 1
    return max((num_inputs(a) for a in expr.args if isinstance(a, Expr)), default=0)


class Emitter:
    """Turns expressions into ``let`` statements, each node once."""

    def __init__(
        self,
        loads: dict[int, str],
        scalars: dict[int, int],
        index: str = "i32(gi)",
        prefix: str = "v",
        accs: dict[int, str] | None = None,
    ) -> None:
        self.loads = loads  # input index -> WGSL expression of its value
        self.scalars = scalars  # scalar index -> info position
        self.accs = accs or {}  # accumulator index -> WGSL expression of its value
        self.index = index  # WGSL expression of the element's linear index (i32)
        self.prefix = prefix  # of the names of the emitted values
        self.lines: list[str] = []
        self._names: dict[Expr, str] = {}

    def emit(self, expr: Expr) -> str:
        name = self._names.get(expr)
        if name is not None:
            return name
        op, args = expr.op, expr.args
        if op == "load":
            code = self.loads[args[0]]
        elif op == "scalar":
            code = wgsl.info_scalar(self.scalars[args[0]], expr.type)
        elif op == "index":
            code = self.index
        elif op == "const":
            code = wgsl.literal(args[0], expr.type)
        elif op == "acc":
            code = self.accs[args[0]]
        elif op == "unary":
            code = wgsl.UNARY[args[0]][args[1].type].format(a=self.emit(args[1]))
        elif op == "binary":
            code = wgsl.BINARY[args[0]][args[1].type].format(a=self.emit(args[1]), b=self.emit(args[2]))
        elif op == "select":
            c, a, b = (self.emit(x) for x in args)
            code = f"select({b}, {a}, {c})"
        elif op == "convert":
            code = wgsl.convert(self.emit(args[0]), args[0].type, expr.type)
        else:  # pragma: no cover - the builders above make every node
            raise ValueError(op)
        name = f"{self.prefix}{len(self._names)}"
        self._names[expr] = name
        self.lines.append(f"    let {name}: {expr.type} = {code};")
        return name

"""One fusion :class:`~ember.backend.kernel.steps.Kernel` as a CUDA C ``__global__`` function.

A kernel's iteration space is simplified first by the kernel layer's
:func:`~ember.backend.kernel.space.simplify` (size-1 dims dropped, neighbouring dims
that every access walks as one run merged, the reduced dim kept apart; the LLVM loops
share it), so a dense elementwise kernel is one flat grid-stride loop with no index
arithmetic.

Two ways to give the geometry (sizes, strides, offsets):

* ``static``: as literals (a fusion plan's kernel: one compile per plan, constants
  folded);
* dynamic: as kernel parameters (the eager backend: one compile per expression,
  dtypes, rank and layout class, whatever the shape).

Reductions along the kept dim run one of two schedules: *rows*, when the reduced
dim is innermost (a warp, or a block of 256 threads for long rows, per output;
lanes stride along the row, combine by warp shuffles and shared memory), or
*columns* (one thread per output walks the reduced dim; neighbouring threads read
neighbouring elements). Float sums accumulate in double, as the CPU lowering does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.backend.cuda.dtypes import (
    UNSIGNED,
    compute_type,
    dtype_of,
    family,
    literal,
    load_code,
    storage_type,
    store_code,
)
from ember.backend.cuda.lowering import CExpr, cast_code, scalar_code
from ember.backend.dtype import DType
from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.space import Space, simplify
from ember.backend.kernel.steps import Kernel, Reduction
from ember.backend.kernel.views import View, size_of
from ember.backend.ops import ReduceOp

#: Threads per block of every generated kernel.
BLOCK = 256
#: Rows at least this long are reduced by a whole block instead of one warp.
LONG_ROW = 1024
#: Most blocks a launch asks for (grid-stride loops cover the rest).
MAX_GRID = 1 << 20

_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


# ---------------------------------------------------------------------- accumulators
def acc_dtype(r: Reduction) -> np.dtype:
    src = r.expr.dtype
    if r.op in (ReduceOp.ANY, ReduceOp.ALL):
        return _BOOL
    if r.op in (ReduceOp.SUM, ReduceOp.MEAN):
        return _F64 if dtype_of(src).is_float or r.op == ReduceOp.MEAN else np.dtype(r.dtype)
    if r.op == ReduceOp.PROD:
        return (
            np.dtype(np.float32)
            if dtype_of(src) in (DType.FLOAT16, DType.BFLOAT16)
            else (src if dtype_of(src).is_float else np.dtype(r.dtype))
        )
    return np.dtype(np.float32) if dtype_of(src) in (DType.FLOAT16, DType.BFLOAT16) else src


def _identity(op: ReduceOp, dtype: np.dtype) -> str:
    d = dtype_of(dtype)
    if op in (ReduceOp.SUM, ReduceOp.MEAN):
        return literal(0, d)
    if op == ReduceOp.PROD:
        return literal(1, d)
    if op == ReduceOp.ANY:
        return "false"
    if op == ReduceOp.ALL:
        return "true"
    if d.is_float:
        return literal(-math.inf if op == ReduceOp.MAX else math.inf, d)
    if d is DType.BOOL:
        return "false" if op == ReduceOp.MAX else "true"
    lo, hi = d.int_range
    return literal(lo if op == ReduceOp.MAX else hi, d)


def _combine(op: ReduceOp, acc: str, x: str, dtype: np.dtype) -> str:
    """C code of ``acc (op) x`` in the accumulator's type."""
    t = compute_type(dtype)
    fam = family(dtype)
    if op in (ReduceOp.ANY,):
        return f"({acc} || {x})"
    if op == ReduceOp.ALL:
        return f"({acc} && {x})"
    if op in (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.PROD):
        sym = "*" if op == ReduceOp.PROD else "+"
        if fam == "f":
            return f"({acc} {sym} {x})"
        u = UNSIGNED.get(t, "unsigned int")
        return f"(({t})(({u}){acc} {sym} ({u}){x}))"
    if fam == "f":
        return f"nan_{'max' if op == ReduceOp.MAX else 'min'}<{t}>({acc}, {x})"
    if fam == "b":
        return f"({acc} || {x})" if op == ReduceOp.MAX else f"({acc} && {x})"
    return f"int_{'max' if op == ReduceOp.MAX else 'min'}<{t}>({acc}, {x})"


def _shuffle_type(dtype: np.dtype) -> str:
    t = compute_type(dtype)
    return "int" if t in ("bool", "unsigned char") else t


# ---------------------------------------------------------------------- the kernel
@dataclass
class KernelCode:
    """A generated kernel: its name, source (without the prelude), the parameters it
    takes, and how to launch it."""

    name: str
    source: str
    params: list[tuple[str, str]]  # (C type, name)
    grid: int
    block: int
    geometry_args: list[int] = field(default_factory=list)  # dynamic geometry values, in param order
    buffers: list[int] = field(default_factory=list)  # buffer ids, in param order
    scalar_slots: list[int] = field(default_factory=list)  # scalar slots, in param order (eager)


class KernelBuilder:
    """Builds one kernel's code (see the module docstring).

    ``dtypes`` maps buffer ids to their numpy dtype. ``scalars`` is ``"param"`` (each
    scalar slot a kernel parameter, typed by ``scalar_types[slot]``: ``"double"`` or
    ``"long long"``) or ``"array"`` (``const double* sc``, as a captured plan passes them).
    """

    def __init__(
        self,
        kernel: Kernel,
        dtypes: dict[int, np.dtype],
        *,
        static: bool,
        scalars: str = "param",
        scalar_types: dict[int, str] | None = None,
        name: str = "k",
        store_views: list[View] | None = None,
    ):
        self.kernel = kernel
        self.dtypes = dtypes
        self.static = static
        self.scalar_mode = scalars
        self.scalar_types = scalar_types or {}
        self.name = name
        exprs = [s.expr for s in kernel.stores] + [r.expr for r in kernel.reductions]
        self.loads: list[Expr] = []
        seen: set[int] = set()
        for e in exprs:
            for node in e.walk():
                if node.kind == "load" and id(node) not in seen:
                    seen.add(id(node))
                    self.loads.append(node)
        self.load_index = {id(e): i for i, e in enumerate(self.loads)}
        red_space = kernel.reduced_space
        self.store_views = store_views or [
            View.contiguous(red_space if s.reduced else kernel.space) for s in kernel.stores
        ]
        views = [ld.args[0] for ld in self.loads] + self.store_views
        self.geo = simplify(tuple(kernel.space), kernel.dim, views)
        self.n_loads = len(self.loads)
        self.used_slots = sorted({n.op for e in exprs for n in e.walk() if n.kind == "scalar"})
        n = size_of(kernel.space)
        span = max(
            [n]
            + [
                abs(o) + sum(abs(s) * (z - 1) for s, z in zip(st, self.geo.sizes))
                for st, o in zip(self.geo.strides, self.geo.offsets)
            ]
        )
        self.index = "int" if span < 2**31 - 1 and n * 2 < 2**31 else "long long"

    # -------------------------------------------------------------- keys
    def key(self) -> tuple:
        """What the dynamic source depends on (shapes and strides are parameters)."""
        g = self.geo
        parts: list[Any] = [
            self.index,
            len(g.sizes),
            g.red,
            self._row_threads(),
            "".join(g.mode(a) for a in range(len(g.strides))),
            tuple(self.scalar_types.get(s, "double") for s in self.used_slots),
            self.scalar_mode,
        ]
        ids: dict[int, int] = {}
        for e in [s.expr for s in self.kernel.stores] + [r.expr for r in self.kernel.reductions]:
            for node in e.walk():
                if id(node) in ids:
                    continue
                ids[id(node)] = len(ids)
                if node.kind == "load":
                    op: Any = ("L", node.op, self.dtypes[node.op].str)
                elif node.kind == "const":
                    op = ("C", repr(node.op))
                elif node.kind == "acc":
                    op = ("A", node.op[1])
                else:
                    op = node.op
                parts.append(
                    (
                        node.kind,
                        op,
                        tuple(ids.get(id(a), -1) if type(a) is Expr else None for a in node.args),
                        node.dtype.str,
                    )
                )
        for s in self.kernel.stores:
            parts.append(("S", s.buffer, ids[id(s.expr)], s.reduced, self.dtypes[s.buffer].str))
        for r in self.kernel.reductions:
            parts.append(("R", str(r.op), ids[id(r.expr)], np.dtype(r.dtype).str, r.count if self.static else None))
        return tuple(parts)

    def _row_threads(self) -> int:
        g = self.geo
        if g.red is None or g.red != len(g.sizes) - 1:
            return 0
        return BLOCK if g.sizes[g.red] >= LONG_ROW else 32

    # -------------------------------------------------------------- pieces
    def _num(self, value: int, param: str, params: list, args: list) -> str:
        if self.static:
            return str(int(value)) if self.index == "int" else f"{int(value)}ll"
        params.append((self.index, param))
        args.append(int(value))
        return param

    def build(self) -> KernelCode:
        kernel, g = self.kernel, self.geo
        params: list[tuple[str, str]] = []
        geo_args: list[int] = []
        buffers = sorted({ld.op for ld in self.loads} | {s.buffer for s in kernel.stores})
        written = {s.buffer for s in kernel.stores}
        for b in buffers:
            const = "" if b in written else "const "
            params.append((f"{const}{storage_type(self.dtypes[b])}* __restrict__", f"b{b}"))
        ix = self.index
        sizes = [self._num(z, f"z{d}", params, geo_args) for d, z in enumerate(g.sizes)]
        strides = [
            [
                None if (self.static and st == 0) else self._num(st, f"t{a}_{d}", params, geo_args)
                for d, st in enumerate(row)
            ]
            for a, row in enumerate(g.strides)
        ]
        offsets = [self._num(o, f"o{a}", params, geo_args) for a, o in enumerate(g.offsets)]
        modes = [g.mode(a) for a in range(len(g.strides))]
        if self.scalar_mode == "array":
            params.append(("const double* __restrict__", "sc"))
        else:
            for s in self.used_slots:
                params.append((self.scalar_types.get(s, "double"), f"s{s}"))

        def scalar(e: Expr) -> str:
            raw = f"sc[{e.op}]" if self.scalar_mode == "array" else f"s{e.op}"
            is_float = self.scalar_mode == "array" or self.scalar_types.get(e.op, "double") == "double"
            return scalar_code(raw, is_float, e.dtype)

        body: list[str] = []
        rank = len(g.sizes)

        def address(access: int, coords: Sequence[str | None], linear: str | None) -> str:
            if modes[access] == "z":
                return offsets[access]
            if linear is not None and modes[access] == "f":
                return f"({offsets[access]} + {linear})"
            terms = [offsets[access]]
            for d in range(rank):
                st = strides[access][d]
                if st is not None and coords[d] is not None:
                    terms.append(f"{coords[d]} * {st}")
            return "(" + " + ".join(terms) + ")"

        def emitter(coords: Sequence[str | None], linear: str | None, prefix: str, accs: dict | None = None) -> CExpr:
            def load(e: Expr) -> str:
                a = self.load_index[id(e)]
                return load_code(self.dtypes[e.op], f"b{e.op}[{address(a, coords, linear)}]")

            if accs is None:
                return CExpr(load, scalar, None, prefix)

            def acc(e: Expr) -> str:
                return accs[e.op[1]]

            return CExpr(load, scalar, acc, prefix)

        def decompose(var: str, dims: list[int], names: list[str]) -> list[str]:
            lines = [f"{ix} r_ = {var};"]
            for j in range(len(dims) - 1, -1, -1):
                d = dims[j]
                if j == 0:
                    lines.append(f"const {ix} {names[j]} = r_;")
                else:
                    lines.append(f"const {ix} {names[j]} = r_ % {sizes[d]}; r_ /= {sizes[d]};")
            return lines

        def stores(cx: CExpr, reduced: bool, coords: list, linear: str | None) -> list[str]:
            out = []
            for p, s in enumerate(kernel.stores):
                if s.reduced != reduced:
                    continue
                v = cx.value(s.expr)
                addr = address(self.n_loads + p, coords, linear)
                out.append(f"b{s.buffer}[{addr}] = {store_code(self.dtypes[s.buffer], v)};")
            return out

        if g.red is None:
            n_expr = " * ".join(sizes) if sizes else "1"
            coords = [f"c{d}" for d in range(rank)]
            body.append(f"const {ix} n_ = {n_expr};")
            body.append(
                f"for ({ix} i = ({ix})blockIdx.x * blockDim.x + threadIdx.x; i < n_; "
                f"i += ({ix})gridDim.x * blockDim.x) {{"
            )
            if "g" in modes:
                body += ["  " + x for x in decompose("i", list(range(rank)), coords)]
            cx = emitter(coords if rank else [], "i", "v")
            store_lines = stores(cx, False, coords, "i")
            body += ["  " + x for x in cx.lines + store_lines]
            body.append("}")
        else:
            body = self._reduction_body(g, sizes, emitter, stores, decompose)
        sig = ", ".join(f"{t} {n}" for t, n in params)
        source = (
            f'extern "C" __global__ void __launch_bounds__({BLOCK}) {self.name}({sig}) {{\n'
            + "\n".join("  " + line for line in body)
            + "\n}\n"
        )
        return KernelCode(self.name, source, params, self.grid(), BLOCK, geo_args, buffers, list(self.used_slots))

    def buffers(self) -> list[int]:
        """Buffer ids in parameter order."""
        return sorted({ld.op for ld in self.loads} | {s.buffer for s in self.kernel.stores})

    def grid(self) -> int:
        """Blocks to launch for this kernel's shape."""
        g = self.geo
        if g.red is None:
            work = size_of(self.kernel.space)
        else:
            threads = self._row_threads()
            if threads:
                work = math.prod(g.sizes[: g.red]) * threads
            else:
                work = math.prod(g.sizes[: g.red]) * math.prod(g.sizes[g.red + 1 :])
        return min(max(-(-work // BLOCK), 1), MAX_GRID)

    def _reduction_body(self, g: Space, sizes, emitter, stores, decompose) -> list[str]:
        kernel = self.kernel
        ix = self.index
        rank = len(g.sizes)
        red = g.red
        assert red is not None  # called for kernels with a reduced dim only
        outer_dims = list(range(red))
        inner_dims = list(range(red + 1, rank))
        reductions = kernel.reductions
        acc_types = [acc_dtype(r) for r in reductions]
        length = sizes[red]
        o_expr = " * ".join(sizes[d] for d in outer_dims) or "1"
        i_expr = " * ".join(sizes[d] for d in inner_dims) or "1"
        coords = [f"c{d}" for d in range(rank)]
        lines: list[str] = []
        threads = self._row_threads()

        def accumulate(cx: CExpr) -> list[str]:
            out = []
            for j, (r, at) in enumerate(zip(reductions, acc_types)):
                x = cast_code(cx.value(r.expr), r.expr.dtype, at)
                if r.op in (ReduceOp.ANY, ReduceOp.ALL):
                    x = f"({cx.value(r.expr)} != 0)"
                out.append(f"acc{j} = {_combine(r.op, f'acc{j}', x, at)};")
            return out

        def finals() -> tuple[list[str], dict[int, str]]:
            out, names = [], {}
            for j, (r, at) in enumerate(zip(reductions, acc_types)):
                value = f"acc{j}"
                if r.op == ReduceOp.MEAN:
                    value = f"(acc{j} / (double){r.count if self.static else length})"
                code = cast_code(value, at, r.dtype)
                if dtype_of(r.dtype) in (DType.FLOAT16, DType.BFLOAT16):
                    code = f"rn_{'f16' if dtype_of(r.dtype) is DType.FLOAT16 else 'bf16'}({code})"
                out.append(f"const {compute_type(r.dtype)} red{j} = {code};")
                names[j] = f"red{j}"
            return out, names

        inits = [
            f"{compute_type(at)} acc{j} = {_identity(r.op, at)};"
            for j, (r, at) in enumerate(zip(reductions, acc_types))
        ]
        if threads:
            rows_per_block = BLOCK // threads
            lines.append(f"const {ix} rows_ = {o_expr};")
            lines.append(f"const {ix} len_ = {length};")
            lines.append(f"const int lane_ = threadIdx.x % {threads};")
            if threads > 32:
                for j, at in enumerate(acc_types):
                    lines.append(f"__shared__ {_shuffle_type(at)} sm{j}[{BLOCK // 32}];")
            lines.append(
                f"for ({ix} row = ({ix})blockIdx.x * {rows_per_block} + threadIdx.x / {threads}; row < rows_; "
                f"row += ({ix})gridDim.x * {rows_per_block}) {{"
            )
            inner = []
            if outer_dims:
                inner += decompose("row", outer_dims, [coords[d] for d in outer_dims])
            inner += inits
            inner.append(f"for ({ix} {coords[red]} = lane_; {coords[red]} < len_; {coords[red]} += {threads}) {{")
            cx = emitter(coords, None, "v")
            body = cx.lines  # filled below
            acc_lines = accumulate(cx)
            full_stores = stores(cx, False, coords, None)
            inner += ["  " + x for x in body + full_stores + acc_lines]
            inner.append("}")
            # Combine the lanes of a row: within warps, then across them.
            for j, (r, at) in enumerate(zip(reductions, acc_types)):
                st = _shuffle_type(at)
                inner.append("for (int o_ = 16; o_ > 0; o_ >>= 1) {")
                inner.append(
                    f"  const {compute_type(at)} y_ = ({compute_type(at)})__shfl_xor_sync(0xffffffffu, "
                    f"({st})acc{j}, o_);"
                )
                inner.append(f"  acc{j} = {_combine(r.op, f'acc{j}', 'y_', at)};")
                inner.append("}")
            if threads > 32:
                inner.append("if ((threadIdx.x & 31) == 0) {")
                inner += [f"  sm{j}[threadIdx.x >> 5] = ({_shuffle_type(at)})acc{j};" for j, at in enumerate(acc_types)]
                inner.append("}")
                inner.append("__syncthreads();")
                for j, (r, at) in enumerate(zip(reductions, acc_types)):
                    t = compute_type(at)
                    inner.append(
                        f"acc{j} = threadIdx.x < {BLOCK // 32} ? ({t})sm{j}[threadIdx.x] : {_identity(r.op, at)};"
                    )
                    inner.append("for (int o_ = 16; o_ > 0; o_ >>= 1) {")
                    inner.append(
                        f"  const {t} y_ = ({t})__shfl_xor_sync(0xffffffffu, ({_shuffle_type(at)})acc{j}, o_);"
                    )
                    inner.append(f"  acc{j} = {_combine(r.op, f'acc{j}', 'y_', at)};")
                    inner.append("}")
                inner.append("__syncthreads();")
            inner.append("if (lane_ == 0) {")
            inner.append(f"  const {ix} {coords[red]} = 0;")
            fin, names = finals()
            ecx = emitter(coords, None, "e", names)
            epi = stores(ecx, True, coords, None)
            inner += ["  " + x for x in fin + ecx.lines + epi]
            inner.append("}")
            lines += ["  " + x for x in inner]
            lines.append("}")
            return lines
        # Columns: one thread per output position walks the reduced dim.
        lines.append(f"const {ix} outs_ = ({o_expr}) * ({i_expr});")
        lines.append(f"const {ix} len_ = {length};")
        lines.append(
            f"for ({ix} t_ = ({ix})blockIdx.x * blockDim.x + threadIdx.x; t_ < outs_; "
            f"t_ += ({ix})gridDim.x * blockDim.x) {{"
        )
        inner = []
        other = outer_dims + inner_dims
        if other:
            inner += decompose("t_", other, [coords[d] for d in other])
        inner += inits
        inner.append(f"for ({ix} {coords[red]} = 0; {coords[red]} < len_; ++{coords[red]}) {{")
        cx = emitter(coords, None, "v")
        acc_lines = accumulate(cx)
        full_stores = stores(cx, False, coords, None)
        inner += ["  " + x for x in cx.lines + full_stores + acc_lines]
        inner.append("}")
        inner.append("{")
        inner.append(f"  const {ix} {coords[red]} = 0;")
        fin, names = finals()
        ecx = emitter(coords, None, "e", names)
        epi = stores(ecx, True, coords, None)
        inner += ["  " + x for x in fin + ecx.lines + epi]
        inner.append("}")
        lines += ["  " + x for x in inner]
        lines.append("}")
        return lines


__all__ = ["BLOCK", "KernelBuilder", "KernelCode", "acc_dtype"]

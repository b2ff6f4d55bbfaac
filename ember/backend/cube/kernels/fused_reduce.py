"""Fused reductions: one kernel that folds any number of expressions along one dim
(the *prologue*: ``x * x``, ``exp(x - m)``...), stores values of the full space on the
way, and evaluates expressions of the results (the *epilogue*: ``log(sum)``,
``sum / n``...) into the reduced space.

This is what the fusion executor (:mod:`ember.backend.fusion.wgsl`) makes of a
schedule's reduction kernel. Every operand is read through its strides: the outer
dims (all but the reduced one) are coalesced over every operand and every
full-space output, and each has its own stride along the reduced dim. Two modes,
chosen as for :mod:`.reduce`: a thread per output (``lane``) for short rows, a
workgroup per output (``tree``, combined through subgroups or workgroup memory,
:mod:`.rows`) for long ones.

Expressions are kernel-IR trees (:class:`~ember.backend.kernel.exprs.Expr`, printed by
:mod:`ember.backend.cube.ir`): ``load(j)`` reads
operand ``j`` at the current element (in the epilogue: at the row's first element,
so an epilogue operand has stride 0 along the reduced dim), ``acc(k)`` is
reduction ``k``'s result (epilogue only), ``scalar(k)`` a launch scalar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, broadcast_strides, coalesce, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage, scalar_words
from ember.backend.cube.ir import Emitter, Expr, type_of
from ember.backend.cube.kernels import rows
from ember.backend.cube.kernels.reduce import _COMBINE, _INIT
from ember.backend.ops import ReduceOp
from ember.errors import ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_MR = wgsl.MAX_RANK
_HEAD = 2 + _MR  # n_out, rank, outer shape
_BLOCK = 1 + _MR  # per operand: offset, outer strides
_LANE_WG = wgsl.WORKGROUP


@dataclass(frozen=True)
class FusedReduction:
    """The generation-time description of a fused reduction kernel."""

    reductions: tuple[tuple[ReduceOp, Expr], ...]  # (op, prologue expression)
    stores: tuple[tuple[Expr, Storage, bool], ...]  # (expression, storage, over the reduced space)
    ins: tuple[Storage, ...]

    @property
    def n_full(self) -> int:
        return sum(1 for _, _, reduced in self.stores if not reduced)


def info_words(n_in: int, n_full: int, n_scalars: int) -> int:
    """Parameter words of a kernel with these operand counts."""
    blocks = n_in + n_full
    return _HEAD + blocks * _BLOCK + 1 + blocks + 2 * n_scalars


def source(spec: FusedReduction, mode: str, wg: int, subgroups: bool) -> KernelSource:
    ins = spec.ins
    n_in = len(ins)
    full = [j for j, (_, _, reduced) in enumerate(spec.stores) if not reduced]
    blocks = n_in + len(full)
    rows_at = _HEAD + blocks * _BLOCK  # n, then the dim stride of each block
    scalar_at = rows_at + 1 + blocks
    names = [f"o{j}" for j in range(blocks)]
    offsets = wgsl.strided_offsets("row", "info[1]", 2, [(names[j], _HEAD + j * _BLOCK) for j in range(blocks)])
    lines = [offsets, f"    let n = info[{rows_at}u];"]
    for j in range(blocks):
        lines.append(f"    let rs{j} = bitcast<i32>(info[{rows_at + 1 + j}u]);")
    slots = {k: scalar_at + 2 * k for k in range(64)}
    decls: list[str] = []
    # Prologue: every reduction's expression (and the full-space stores) per element.
    types = [type_of(expr) for _, expr in spec.reductions]
    body = [f"    var acc{k}: {ct} = {_INIT[op][ct]};" for k, ((op, _), ct) in enumerate(zip(spec.reductions, types))]
    step = "1u" if mode == "lane" else f"{wg}u"
    start = "0u" if mode == "lane" else "lid"
    body.append(f"    for (var r = {start}; r < n; r += {step}) {{")
    body.append("        let ri = i32(r);")
    loads = {j: wgsl.load(ins[j], f"in{j}", f"u32(o{j} + ri * rs{j})") for j in range(n_in)}
    emitter = Emitter(loads, slots, prefix="p")
    values = [emitter.emit(expr) for _, expr in spec.reductions]
    stored = []
    for slot, j in enumerate(full):
        expr, st, _ = spec.stores[j]
        value = emitter.emit(expr)
        block = n_in + slot
        stored.append(
            f"        out{j}[u32(o{block} + ri * rs{block})] = {wgsl.store(st, wgsl.convert(value, type_of(expr), st.compute))};"
        )
    body += ["    " + line for line in emitter.lines]
    for k, ((op, expr), value) in enumerate(zip(spec.reductions, values)):
        body.append(f"        acc{k} = {_COMBINE[op][type_of(expr)].format(a=f'acc{k}', b=value)};")
    body += stored
    body.append("    }")
    finals: dict[int, str] = {}
    if mode == "tree":
        for k, ((op, _), ct) in enumerate(zip(spec.reductions, types)):
            more, decl = rows.combine_lines(f"acc{k}", op, _COMBINE[op][ct], _INIT[op][ct], ct, wg, subgroups, f"a{k}")
            body += more
            decls.append(decl)
            finals[k] = f"acc{k}_all"
    else:
        finals = {k: f"acc{k}" for k in range(len(spec.reductions))}
    for k, (op, _) in enumerate(spec.reductions):
        if op == ReduceOp.MEAN:
            body.append(f"    let mean{k} = {finals[k]} / f32(n);")
            finals[k] = f"mean{k}"
    # Epilogue: the reduced-space stores, at the row's first element.
    epi_loads = {j: wgsl.load(ins[j], f"in{j}", f"u32(o{j})") for j in range(n_in)}
    epilogue = Emitter(epi_loads, slots, prefix="e", accs=finals)
    tail = []
    for j, (expr, st, reduced) in enumerate(spec.stores):
        if reduced:
            value = epilogue.emit(expr)
            tail.append(f"out{j}[row] = {wgsl.store(st, wgsl.convert(value, type_of(expr), st.compute))};")
    epi_lines = [line.strip() for line in epilogue.lines]
    if mode == "tree":
        body.append("    if (lid == 0u) {")
        body += [f"        {line}" for line in epi_lines + tail]
        body.append("    }")
        head = ["    if (wid >= info[0]) { return; }", "    let row = wid;"]
        main = rows.main("\n".join(head + lines + body), wg, subgroups)
    else:
        body += [f"    {line}" for line in epi_lines + tail]
        head = ["    if (gi >= info[0]) { return; }", "    let row = gi;"]
        main = wgsl.main_linear("\n".join(head + lines + body))
    code = "\n".join(decls + [main])
    outs = [st for _, st, _ in spec.stores]
    helper_names = "".join(s.store + s.load for s in (*ins, *outs))
    text = "\n".join([wgsl.bindings(list(ins), outs), wgsl.helpers_for(code + helper_names), code])
    name = f"fused_reduce_{mode}_{len(spec.reductions)}x{len(spec.stores)}"
    return KernelSource(name, text, n_in, len(outs))


def run(
    backend: KernelContext,
    spec: FusedReduction,
    inputs: Sequence[CubeTensor],
    space: tuple[int, ...],
    dim: int,
    scalars: Sequence[int | float | bool] = (),
    scalar_types: Sequence[str] = (),
) -> list[CubeTensor]:
    """Runs the kernel of ``spec`` over ``space`` reducing ``dim``; each input is read
    broadcast to ``space``. Returns a new tensor per store (of ``space`` or of the
    reduced space, with 1 at ``dim``)."""
    reduced_space = space[:dim] + (1,) + space[dim + 1 :]
    outs = [backend.empty(reduced_space if reduced else space, st) for _, st, reduced in spec.stores]
    n = space[dim]
    n_out = math.prod(reduced_space)
    if n_out == 0 or n == 0:
        return outs
    full = [o for o, (_, _, reduced) in zip(outs, spec.stores) if not reduced]
    strides = [broadcast_strides(x, space) for x in inputs] + [contiguous_strides(space)] * len(full)
    outer = space[:dim] + space[dim + 1 :]
    cshape, cstrides = coalesce(outer, *[s[:dim] + s[dim + 1 :] for s in strides])
    if len(cshape) > _MR:
        raise ShapeError(
            f"ember: cube: a fused reduction over shape {list(space)} needs {len(cshape)} strided "
            f"dims; the GPU kernels take at most {_MR}"
        )
    offsets = [x.offset for x in inputs] + [0] * len(full)
    lead = inputs[0] if inputs else None
    contiguous_rows = lead is not None and abs(strides[0][dim]) == 1
    mode = "tree" if n > 64 and (n_out < 8192 or contiguous_rows) else "lane"
    runtime = backend.runtime
    wg = rows.workgroup_size(n, runtime.cpu) if mode == "tree" else _LANE_WG
    subgroups = runtime.subgroups and mode == "tree"
    key = ("fused_reduce", spec, mode, wg, subgroups)
    kernel = backend.cache.get(key, lambda: source(spec, mode, wg, subgroups))
    rank = len(cshape)
    info = [n_out, rank, *cshape] + [0] * (_MR - rank)
    for offset, s in zip(offsets, cstrides):
        info += [offset & 0xFFFF_FFFF, *(x & 0xFFFF_FFFF for x in s)] + [0] * (_MR - rank)
    info.append(n)
    info += [s[dim] & 0xFFFF_FFFF for s in strides]
    info += [w for v, t in zip(scalars, scalar_types) for w in scalar_words(v, t)]
    groups = n_out if mode == "tree" else -(-n_out // _LANE_WG)
    runtime.launch(kernel, [x.buffer for x in inputs] + [o.buffer for o in outs], info, groups)
    return outs

"""Elementwise kernels: one generated kernel per (expression, storages, layout classes).

Any kernel-IR tree (:class:`~ember.backend.kernel.exprs.Expr`, printed by :mod:`ember.backend.cube.ir`) (a single op or a fused chain) over
inputs of any layout becomes one kernel; :func:`run_many` stores several trees over
one iteration space from one kernel (the fusion executor's multi-output kernels). When every operand is dense or uniform and the
sizes are whole quads, the kernel reads and writes ``vec4`` words, four elements per
invocation (:func:`_source_vec4`); otherwise one element per invocation.

Each operand is read through its broadcasting strides after :func:`coalesce`
merged the dims every operand walks densely. Its layout class picks the cheapest
index: ``z`` (dense like the output, at offset 0: ``i``), ``c`` (dense: ``offset + i``),
``u`` (one value for all: ``offset``) or ``s`` (strided: an offset from the element's
coordinates). The
output is ``c`` for a fresh tensor or ``s`` when writing into a strided region
(``slice_assign``, ``cat``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, broadcast_strides, coalesce, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage, scalar_words
from ember.backend.cube.ir import Emitter, Expr, type_of
from ember.errors import ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_HEAD = 2 + wgsl.MAX_RANK  # numel, rank, shape


def _class(strides: tuple[int, ...], shape: tuple[int, ...]) -> str:
    if all(s == 0 for s in strides):
        return "u"
    if strides == contiguous_strides(shape):
        return "c"
    return "s"


def _slots(classes: Sequence[str]) -> list[int]:
    """The info position of each operand's ``[offset, strides...]`` block."""
    positions, pos = [], _HEAD
    for c in classes:
        positions.append(pos)
        pos += 1 + wgsl.MAX_RANK if c == "s" else 1
    return positions + [pos]


class _ScalarSlots(dict):
    """Scalar ``k``'s info position (two words per scalar, after the operand blocks)."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self.first = first

    def __missing__(self, k: int) -> int:
        return self.first + 2 * k


def _source(
    expr: Expr, ins: tuple[Storage, ...], out: Storage, classes: tuple[str, ...], vec: bool = False
) -> KernelSource:
    """One output: see :func:`source`."""
    return source((expr,), ins, (out,), classes, vec)


def source(
    exprs: tuple[Expr, ...],
    ins: tuple[Storage, ...],
    outs: tuple[Storage, ...],
    classes: tuple[str, ...],
    vec: bool = False,
) -> KernelSource:
    """A kernel storing ``exprs[j]`` into ``out{j}`` at every element (shared
    subexpressions computed once). ``classes`` holds the layout class of each input,
    then one for the outputs (all of them dense like each other, or, with one output,
    strided)."""
    if vec:
        return _source_vec4(exprs, ins, outs, classes)
    slots = _slots(classes)
    n = len(ins)
    emitter = Emitter({}, _ScalarSlots(slots[-1]))
    strided = [(f"o{j}", slots[j]) for j, c in enumerate(classes) if c == "s"]
    lines = ["    if (gi >= info[0]) { return; }"]
    if strided:
        lines.append(wgsl.strided_offsets("gi", "info[1]", 2, strided))
    for j in range(n):
        index = {"z": "gi", "c": f"info[{slots[j]}u] + gi", "u": f"info[{slots[j]}u]", "s": f"u32(o{j})"}[classes[j]]
        emitter.loads[j] = wgsl.load(ins[j], f"in{j}", index)
    target = {"z": "gi", "c": "gi", "s": f"u32(o{n})"}[classes[n]]
    for k, (expr, out) in enumerate(zip(exprs, outs)):
        value = emitter.emit(expr)
        lines.extend(emitter.lines)
        emitter.lines = []
        lines.append(f"    out{k}[{target}] = {wgsl.store(out, wgsl.convert(value, type_of(expr), out.compute))};")
    body = wgsl.main_linear("\n".join(lines))
    helper_names = "".join(s.store for s in (*ins, *outs))
    text = "\n".join([wgsl.bindings(list(ins), list(outs)), wgsl.helpers_for(body + helper_names), body])
    return KernelSource(f"elementwise_{_name(exprs)}", text, n, len(outs))


def _name(exprs: tuple[Expr, ...]) -> str:
    return exprs[0].kind if len(exprs) == 1 else f"{exprs[0].kind}_x{len(exprs)}"


#: Storage words that WGSL has ``vec4`` of (int64's two-word elements are not among them).
_VEC_WORDS = ("f32", "i32", "u32", "f16")


def _source_vec4(
    exprs: tuple[Expr, ...], ins: tuple[Storage, ...], outs: tuple[Storage, ...], classes: tuple[str, ...]
) -> KernelSource:
    """Four elements per invocation: each dense operand is one ``vec4`` load, each
    uniform one a scalar load, and each expression is evaluated once per lane (any
    expression: the helpers take scalars), the four results stored as one ``vec4``.
    ``info[0]`` counts quads; offsets are in elements (multiples of 4). A dense operand
    at offset 0 (class ``z``) is indexed without reading its offset: that read, once per
    invocation, cost a quarter of an add's time on lavapipe."""
    slots = _slots(classes)
    n = len(ins)
    lines = ["    if (gi >= info[0]) { return; }"]
    for j in range(n):
        if classes[j] == "z":
            lines.append(f"    let x{j} = in{j}[gi];")
        elif classes[j] == "c":
            lines.append(f"    let x{j} = in{j}[(info[{slots[j]}u] >> 2u) + gi];")
        else:
            lines.append(f"    let x{j} = {wgsl.load(ins[j], f'in{j}', f'info[{slots[j]}u]')};")
    stored: list[list[str]] = [[] for _ in exprs]
    for lane, x in enumerate("xyzw"):
        loads = {j: ins[j].load.format(x=f"x{j}.{x}") if classes[j] in "cz" else f"x{j}" for j in range(n)}
        emitter = Emitter(loads, _ScalarSlots(slots[-1]), f"i32(gi * 4u + {lane}u)", f"v{x}")
        for k, (expr, out) in enumerate(zip(exprs, outs)):
            value = emitter.emit(expr)
            stored[k].append(wgsl.store(out, wgsl.convert(value, type_of(expr), out.compute)))
        lines.extend(emitter.lines)
    for k, out in enumerate(outs):
        lines.append(f"    out{k}[gi] = vec4<{out.wgsl}>({', '.join(stored[k])});")
    body = wgsl.main_linear("\n".join(lines))
    in_types = [f"vec4<{st.wgsl}>" if c in "cz" else st.wgsl for st, c in zip(ins, classes)]
    helper_names = "".join(s.store for s in (*ins, *outs))
    text = "\n".join(
        [wgsl.bindings(in_types, [f"vec4<{out.wgsl}>" for out in outs]), wgsl.helpers_for(body + helper_names), body]
    )
    return KernelSource(f"elementwise4_{_name(exprs)}", text, n, len(outs))


def _vectorisable(
    classes: tuple[str, ...], ins: tuple[Storage, ...], outs: tuple[Storage, ...], numel: int, offsets: list[int]
) -> bool:
    """Whether the vec4 kernel applies: every operand dense or uniform, the outputs dense,
    whole quads (``numel`` and dense offsets multiples of 4) of words WGSL has vec4 of."""
    if numel % 4 or classes[-1] != "c" or any(out.wgsl not in _VEC_WORDS for out in outs):
        return False
    for cls, st, offset in zip(classes, ins, offsets):
        if cls == "s" or (cls == "c" and (st.wgsl not in _VEC_WORDS or offset % 4)):
            return False
    return True


def run(
    backend: KernelContext,
    expr: Expr,
    inputs: Sequence[CubeTensor],
    out_storage: Storage,
    shape: tuple[int, ...],
    scalars: Sequence[int | float | bool] = (),
    scalar_types: Sequence[str] = (),
    dest: CubeTensor | None = None,
) -> CubeTensor:
    """Evaluate ``expr`` at every element of ``shape``; a new tensor, or written into
    the strided view ``dest`` (whose buffer the caller owns)."""
    if dest is None:
        return run_many(backend, (expr,), inputs, (out_storage,), shape, scalars, scalar_types)[0]
    out = dest
    if math.prod(shape) == 0:
        return out
    kernel, info, groups = _plan(backend, (expr,), inputs, (out_storage,), shape, dest.strides, dest.offset, True)
    if scalars:
        info = info + [w for v, t in zip(scalars, scalar_types) for w in scalar_words(v, t)]
    backend.runtime.launch(kernel, [x.buffer for x in inputs] + [out.buffer], info, groups)
    return out


def run_many(
    backend: KernelContext,
    exprs: tuple[Expr, ...],
    inputs: Sequence[CubeTensor],
    out_storages: tuple[Storage, ...],
    shape: tuple[int, ...],
    scalars: Sequence[int | float | bool] = (),
    scalar_types: Sequence[str] = (),
) -> list[CubeTensor]:
    """Evaluate each of ``exprs`` at every element of ``shape`` in one kernel: a new
    tensor per expression (of the storage in ``out_storages`` at its position)."""
    outs = [backend.empty(shape, st) for st in out_storages]
    if math.prod(shape) == 0:
        return outs
    key = (exprs, out_storages, shape, *[(x.storage, x.shape, x.strides, x.offset) for x in inputs])
    plans = backend.plans
    plan = plans.get(key)
    if plan is None:
        plan = _plan(backend, exprs, inputs, out_storages, shape, outs[0].strides, 0, False)
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[key] = plan
    kernel, info, groups = plan
    if scalars:
        info = info + [w for v, t in zip(scalars, scalar_types) for w in scalar_words(v, t)]
    backend.runtime.launch(kernel, [x.buffer for x in inputs] + [o.buffer for o in outs], info, groups)
    return outs


# A backend keeps launch plans (kernel and parameter block) by operand layout in
# ``backend.plans``: a training loop repeats its shapes, so coalescing and classing
# run once per layout.
_MAX_PLANS = 4096


def _plan(backend, exprs, inputs, out_storages, shape, out_strides, out_offset, strided_dest):
    numel = math.prod(shape)
    all_strides = [out_strides] + [broadcast_strides(x, shape) for x in inputs]
    cshape, cstrides = coalesce(shape, *all_strides)
    rank = len(cshape)
    if rank > wgsl.MAX_RANK:
        raise ShapeError(
            f"ember: cube: an elementwise op over shape {list(shape)} needs {rank} strided dims; the GPU "
            f"kernels take at most {wgsl.MAX_RANK}; make the operands contiguous or merge dims with reshape"
        )
    out_class = "c"
    if strided_dest and not (_class(cstrides[0], cshape) == "c" and out_offset == 0):
        out_class = "s"
    classes = tuple(_class(s, cshape) for s in cstrides[1:]) + (out_class,)
    ins = tuple(x.storage for x in inputs)
    offsets = [x.offset for x in inputs] + [out_offset]
    vec = _vectorisable(classes, ins, out_storages, numel, offsets)
    classes = tuple("z" if c == "c" and o == 0 else c for c, o in zip(classes, offsets))
    key = (
        "ew",
        exprs[0] if len(exprs) == 1 else exprs,
        ins,
        out_storages[0] if len(out_storages) == 1 else out_storages,
        classes,
        vec,
    )
    kernel = backend.cache.get(key, lambda: source(exprs, ins, out_storages, classes, vec))
    count = numel // 4 if vec else numel
    info = [count, rank] + list(cshape) + [0] * (wgsl.MAX_RANK - rank)
    for offset, strides, cls in zip(offsets, cstrides[1:] + cstrides[:1], classes):
        info.append(offset & 0xFFFF_FFFF)
        if cls == "s":
            info.extend(s & 0xFFFF_FFFF for s in strides)
            info.extend([0] * (wgsl.MAX_RANK - rank))
    return kernel, info, -(-count // wgsl.WORKGROUP)

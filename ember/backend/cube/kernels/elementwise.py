"""Elementwise kernels: one generated kernel per (expression, storages, layout classes).

Each operand is read through its broadcasting strides after :func:`coalesce`
merged the dims every operand walks densely. Its layout class picks the cheapest
index: ``c`` (dense like the output: ``offset + i``), ``u`` (one value for all:
``offset``) or ``s`` (strided: an offset from the element's coordinates). The
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
from ember.backend.cube.ir import Emitter, Expr
from ember.errors import ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.backend import CubeBackend

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


def _source(expr: Expr, ins: tuple[Storage, ...], out: Storage, classes: tuple[str, ...]) -> KernelSource:
    slots = _slots(classes)
    n = len(ins)
    emitter = Emitter({}, {k: slots[-1] + 2 * k for k in range(16)})  # two words per scalar
    strided = [(f"o{j}", slots[j]) for j, c in enumerate(classes) if c == "s"]
    lines = ["    if (gi >= info[0]) { return; }"]
    if strided:
        lines.append(wgsl.strided_offsets("gi", "info[1]", 2, strided))
    for j in range(n):
        index = {"c": f"info[{slots[j]}u] + gi", "u": f"info[{slots[j]}u]", "s": f"u32(o{j})"}[classes[j]]
        emitter.loads[j] = wgsl.load(ins[j], f"in{j}", index)
    value = emitter.emit(expr)
    lines.extend(emitter.lines)
    target = {"c": "gi", "s": f"u32(o{n})"}[classes[n]]
    lines.append(f"    out0[{target}] = {wgsl.store(out, wgsl.convert(value, expr.type, out.compute))};")
    body = wgsl.main_linear("\n".join(lines))
    helper_names = "".join(s.store for s in (*ins, out))
    source = "\n".join(
        [wgsl.bindings(list(ins), [out]), wgsl.helpers_for(body + helper_names), body]
    )
    return KernelSource(f"elementwise_{expr.op}", source, n, 1)


def run(
    backend: CubeBackend,
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
    numel = math.prod(shape)
    if dest is None:
        out = backend.empty(shape, out_storage)
        if numel == 0:
            return out
        key = (expr, out_storage, shape, *[(x.storage, x.shape, x.strides, x.offset) for x in inputs])
        plans = backend.plans
        plan = plans.get(key)
        if plan is None:
            plan = _plan(backend, expr, inputs, out_storage, shape, out.strides, 0, False)
            if len(plans) >= _MAX_PLANS:
                plans.clear()
            plans[key] = plan
    else:
        out = dest
        if numel == 0:
            return out
        plan = _plan(backend, expr, inputs, out_storage, shape, dest.strides, dest.offset, True)
    kernel, info = plan
    if scalars:
        info = info + [w for v, t in zip(scalars, scalar_types) for w in scalar_words(v, t)]
    backend.runtime.launch(kernel, [x.buffer for x in inputs] + [out.buffer], info, -(-numel // wgsl.WORKGROUP))
    return out


# A backend keeps launch plans (kernel and parameter block) by operand layout in
# ``backend.plans``: a training loop repeats its shapes, so coalescing and classing
# run once per layout.
_MAX_PLANS = 4096


def _plan(backend, expr, inputs, out_storage, shape, out_strides, out_offset, strided_dest):
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
    key = ("ew", expr, ins, out_storage, classes)
    kernel = backend.cache.get(key, lambda: _source(expr, ins, out_storage, classes))
    info = [numel, rank] + list(cshape) + [0] * (wgsl.MAX_RANK - rank)
    offsets = [x.offset for x in inputs] + [out_offset]
    for offset, strides, cls in zip(offsets, cstrides[1:] + cstrides[:1], classes):
        info.append(offset & 0xFFFF_FFFF)
        if cls == "s":
            info.extend(s & 0xFFFF_FFFF for s in strides)
            info.extend([0] * (wgsl.MAX_RANK - rank))
    return kernel, info

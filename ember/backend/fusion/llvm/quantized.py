"""``quantized_linear`` for decode's few rows as a hand-written lowering (see
:mod:`.library`): the plan calls flex's compiled quantized kernels
(:mod:`ember.backend.flex.quant_kernels`) directly, where each call used to leave the
compiled code for Python (the fusion executor's host call, then flex's
``quantized_linear``: about 10-20 us a call, 48 calls a token for a 12-layer decoder).

It applies where flex itself would run those kernels on the same arguments, so the
values are flex's: fewer than :data:`~ember.backend.flex.quantized.TILE_GEMM_ROWS` rows
of float32 input, per-row or per-block scales (not one per tensor), and either

* a weight-only scheme with groups a multiple of 32 (the weight-only kernels, over
  flex's tiling :func:`~ember.backend.flex.quantized.plan`), or
* symmetric int4 in blocks of 32 with dynamic int8 activations and K a multiple of 128
  (:mod:`ember.backend.flex.quant_int4_dynamic`'s one-call entry: the rows quantized and
  laid out in the step's scratch, then the ``vpdpbusd`` tiles).

A ReLU folded into the call (:mod:`ember.backend.fusion.quant_epilogue`) runs as one
pass over the step's output after the kernels.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.binding as llvm_binding
import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp
from ember.backend.fusion.quant_epilogue import FOLDED
from ember.backend.kernel.llvm.mathlib import F32, I64

PTR = ir.PointerType()
VOID = ir.VoidType()
_F32 = np.dtype(np.float32)


def _kernels() -> Any:
    from ember.backend.flex.quant_kernels import quant_kernels

    return quant_kernels()


def _form(graph: Graph, node: Node) -> str | None:
    """``"int4_dynamic"``, ``"weight_only"`` or ``None`` (the host call keeps the node)."""
    from ember.backend.flex.quant_int4_dynamic import CHUNK
    from ember.backend.flex.quantized import TILE_GEMM_ROWS

    x, values, scales, zero_points, _bias, input_scale, value, group, activations = node.args
    if any(key != "activation" or act not in FOLDED for key, act in node.kwargs):
        return None
    avals = graph.avals
    if type(x) is not Ref or len(avals[x].shape) < 2 or avals[x].dtype != _F32:
        return None
    m, k = _rows(graph, x)
    n = avals[values].shape[0]
    if not 0 < m < TILE_GEMM_ROWS or avals[scales].shape != (n, k // group) or group % 32:
        return None
    if _kernels() is None:
        return None
    if activations == "dynamic" and value == "int4":
        fits = zero_points is None and input_scale is None and group == 32 and k % CHUNK == 0
        return "int4_dynamic" if fits else None
    return "weight_only" if not activations else None


def _rows(graph: Graph, x: Any) -> tuple[int, int]:
    """``x [..., k]`` as ``(rows, k)``."""
    shape = graph.avals[x].shape
    return int(np.prod(shape[:-1])), shape[-1]


def _supports(graph: Graph, node: Node, target: Any) -> bool:
    return _form(graph, node) is not None


def _scratch(graph: Graph, node: Node) -> dict[str, int]:
    from ember.backend.flex.quant_int4_dynamic import scratch_bytes

    if _form(graph, node) != "int4_dynamic":
        return {}
    return {"work": 0, "size": scratch_bytes(*_rows(graph, node.args[0]))}


def _declare(e: Emitter, fn: Any, name: str, args: list[Any]) -> ir.Function:
    """The compiled kernel ``fn`` (a ctypes function) as a function of the plan's module."""
    symbol = f"ember_plan_{name}"
    module = e.module.module
    if symbol in module.globals:
        return module.globals[symbol]
    address = ctypes.cast(fn, ctypes.c_void_p).value
    assert address, "a compiled quantized kernel has an address"
    llvm_binding.add_symbol(symbol, address)
    return ir.Function(module, ir.FunctionType(VOID, args), name=symbol)


def _quantized_linear(e: Emitter) -> None:
    from ember.backend.flex.quant_kernels import WEIGHT_ONLY_TILES
    from ember.backend.flex.quant_weight_only import weight_only_name
    from ember.backend.flex.quantized import plan

    x, values, scales, zero_points, bias, _input_scale, value, group, _activations = e.node.args
    kernels = _kernels()
    m, k = _rows(e.graph, x)
    n = e.shape(values)[0]
    b = e.b
    i8 = ir.IntType(8)
    null = ir.Constant(PTR, None)
    bias_at = null if bias is None else e.args[bias]
    y = e.outs[0]

    def at(pointer: Any, elements: int, etype: Any) -> Any:
        return b.gep(pointer, [ir.Constant(I64, elements)], source_etype=etype) if elements else pointer

    def i64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    f32 = F32
    if _form(e.graph, e.node) == "int4_dynamic":
        kind = "vnni" if kernels.vnni else "portable"
        fn = _declare(e, kernels.int4_linear[kind], f"q4i8_{kind}_linear", [PTR] * 6 + [I64] * 3 + [f32])
        args = [e.args[x], e.regions["work"], e.args[values], e.args[scales], bias_at, y]
        b.call(fn, args + [i64(m), i64(n), i64(k), ir.Constant(f32, 0.0)])
        _activate(e, y, m * n)
        return
    if value == "int4":
        kind = "u4" if zero_points is None else "u4z"
    else:
        kind = "s8" if e.dtype(values) == np.dtype(np.int8) else "u8"
    g32 = group == 32 and kind.startswith("u4")
    row_bytes = e.shape(values)[1]
    groups = k // group
    zp_at = null if zero_points is None else e.args[zero_points]
    for m0, mc, n0, nc, mr, nr in plan(m, n, WEIGHT_ONLY_TILES):
        name = weight_only_name(kind, mr, nr, g32)
        fn = _declare(e, kernels.weight_only[(kind, g32, mr, nr)], name, [PTR] * 6 + [I64] * 5)
        args = [
            at(e.args[x], m0 * k, f32),
            at(e.args[values], n0 * row_bytes, i8),
            at(e.args[scales], n0 * groups, f32),
            zp_at if zero_points is None else at(zp_at, n0 * groups, i8),
            bias_at if bias is None else at(bias_at, n0, f32),
            at(y, m0 * n + n0, f32),
        ]
        b.call(fn, args + [i64(mc), i64(nc), i64(k), i64(group), i64(n)])
    _activate(e, y, m * n)


def _activate(e: Emitter, y: Any, size: int) -> None:
    """The folded activation (fusion/quant_epilogue.py) over the ``size`` results at
    ``y``: ReLU as flex's ``activate`` computes it (NaN stays NaN); nothing without one."""
    if dict(e.node.kwargs).get("activation") != "relu":
        return
    b = e.b
    zero = ir.Constant(F32, 0.0)

    def body(i: ir.Value, carried: list) -> list:
        at = b.gep(y, [i], source_etype=F32)
        v = b.load(at, typ=F32)
        b.store(b.select(b.fcmp_ordered("<", v, zero), zero, v), at)
        return carried

    e.loops.run(size, body)


#: op -> its lowering.
QUANTIZED_OPS: dict[str, LibraryOp] = {"quantized_linear": LibraryOp(_supports, _scratch, _quantized_linear)}

"""A convolution chain (:class:`~ember.backend.fusion.steps.ConvChain`) as LLVM IR.

Per sample: the convolution's ``?gemm`` per group (:func:`.library.conv_core`) into
the sample's block (in scratch when no other step reads the convolution's output,
else the output buffer's block), the epilogue kernel over that sample
(:class:`~.loops.KernelEmitter`, with each buffer's pointer moved to the sample),
then the max pooling of the sample's planes (:func:`.library.max_pool_rows`).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from ember.backend.fusion.graph import Graph
from ember.backend.fusion.llvm.library import Emitter, Scratch, conv_core, conv_geometry, max_pool_rows
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.llvm.loops import KernelEmitter
from ember.backend.kernel.llvm.mathlib import I64, mem_type
from ember.backend.kernel.steps import Buffer
from ember.backend.kernel.views import size_of


def chain_scratch(graph: Graph, step: ConvChain, buffers: list[Buffer]) -> dict[str, int]:
    """Scratch regions of a chain: the convolution's, then one sample's block of each
    buffer that lives per sample (``"local<buffer>"``); ``"size"`` is the total."""
    regions = conv_geometry(graph, step.conv.node).regions()
    scratch = Scratch()
    scratch.size = regions.pop("size")
    per_sample = size_of(step.sample.space)
    for buf in sorted(step.local):
        regions[f"local{buf}"] = scratch.add(per_sample * buffers[buf].dtype.itemsize)
    regions["size"] = scratch.size
    return regions


def emit_chain(
    module: Any,
    b: ir.IRBuilder,
    graph: Graph,
    step: ConvChain,
    buffers: list[Buffer],
    pointers: dict[int, ir.Value],
    regions: dict[str, ir.Value],
    scalars: ir.Value,
) -> None:
    """The chain's loop over samples (see the module docstring). ``pointers``: each
    buffer the step reads or writes; ``regions``: its scratch regions."""
    conv = step.conv
    node = conv.node
    x, weight = node.args[:2]
    args = {}
    for ref, (buf, view) in conv.args.items():
        pointer = pointers[buf]
        if view.offset:
            pointer = b.gep(pointer, [ir.Constant(I64, view.offset)], source_etype=mem_type(buffers[buf].dtype))
        args[ref] = pointer
    c = conv_geometry(graph, node)
    dtype = graph.avals[x].dtype
    (out,) = conv.outs
    e = Emitter(module, b, graph, node, args, [], regions, None, 0)

    def at(buf: int, i: ir.Value, shift: int) -> ir.Value:
        """``buf``'s pointer moved to sample ``i`` (its block in scratch if local)."""
        if buf in step.local:
            return regions[f"local{buf}"]
        if not shift:
            return pointers[buf]
        return b.gep(pointers[buf], [b.mul(i, ir.Constant(I64, shift))], source_etype=mem_type(buffers[buf].dtype))

    per_sample = size_of(step.sample.space)

    def epilogue(i: ir.Value, block: ir.Value) -> None:
        base = {buf: block if buf == out else at(buf, i, shift) for buf, shift in step.shifts.items()}
        KernelEmitter(module.math, module.ops, b, step.sample, base, None, scalars).emit()
        pool = step.pool
        if pool is None:
            return
        ((source, _),) = pool.args.values()
        pooled = graph.avals[pool.node.outs[0]].shape
        rows, out_plane = pooled[1], size_of(pooled[1:])
        p = Emitter(module, b, graph, pool.node, {}, [], {}, None, 0)
        values, *indices = (at(buf, i, out_plane) for buf in pool.outs)  # max_pool: no indices
        max_pool_rows(p, at(source, i, per_sample), values, indices[0] if indices else None, rows)

    conv_core(e, c, args[x], args[weight], None, None, dtype, lambda i: at(out, i, per_sample), epilogue)


__all__ = ["chain_scratch", "emit_chain"]

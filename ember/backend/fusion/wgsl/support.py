"""What the WGSL lowering compiles: the :class:`~ember.backend.fusion.steps.Target`
answers of the cube backend.

Compiled: elementwise ops whose cube kernels exist for the operands' compute type
(:data:`ember.backend.cube.wgsl.UNARY` / ``BINARY``), casts, ``where``, ``clamp``,
``full``, layout ops, reductions cube's kernels define, and float32 matmuls, over
the dtypes float32, int32, int64, uint8 and bool. Everything else (module ops,
indexing, sorting, scans, ``cat``, random draws, float16/bfloat16) runs as a call of
the cube backend, in order between the compiled steps.
"""

from __future__ import annotations

import numpy as np

from ember.backend.cube import ir, wgsl
from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.primitive_graph import FLOAT_EXPANSIONS, float_operands
from ember.backend.fusion.scheduler import ELEMENTWISE_OPS, LAYOUT_OPS, Target
from ember.backend.ops import BOOL_REDUCE_OPS, ReduceOp

#: The dtypes the lowering compiles, each to the WGSL compute type its cube storage
#: computes in (complex64, which cube's eager kernels compute as ``c64``, runs as calls).
CTYPES = {dtype: ct for dtype, ct in ir.CTYPES.items() if ct != "c64"}
_F32 = np.dtype(np.float32)

#: Composite calls expanded into primitives (float32 only), as on the CPU: their
#: pieces fuse with their neighbours (a bias and an activation into the matmul's
#: epilogue, an optimizer update into one kernel per tensor). softmax and
#: log_softmax stay calls: cube's row kernel does in one launch what their
#: decomposition needs three for (a max, a sum of exponentials, the quotient).
EXPANDED = FLOAT_EXPANSIONS - {"softmax", "log_softmax"}

_REDUCE = {
    ReduceOp.SUM: ("f32", "i32", "i64"),
    ReduceOp.PROD: ("f32", "i32", "i64"),
    ReduceOp.MEAN: ("f32",),
    ReduceOp.MAX: ("f32", "i32", "i64"),
    ReduceOp.MIN: ("f32", "i32", "i64"),
    ReduceOp.ANY: ("bool",),
    ReduceOp.ALL: ("bool",),
}


class CubeTarget(Target):
    """The WGSL lowering's capabilities."""

    def expands(self, graph: Graph, node: Node) -> bool:
        """Whether a composite node is replaced by its decomposition."""
        return (
            node.op in EXPANDED
            and float_operands(graph, node)
            and all(graph.avals[r].dtype == _F32 for r in node.refs())
        )

    def lowers(self, graph: Graph, node: Node) -> bool:
        avals = graph.avals
        if any(avals[r].dtype not in CTYPES for r in node.refs()) or any(
            avals[o].dtype not in CTYPES for o in node.outs
        ):
            return False
        op = node.op
        if op in LAYOUT_OPS:
            return True
        if op in ELEMENTWISE_OPS:
            return self._elementwise(graph, node)
        if op == "reduce":
            reduce_op, x, dim = node.args
            src, out = avals[x], avals[node.outs[0]]
            if src.shape[dim] == 0:
                return False
            if reduce_op in BOOL_REDUCE_OPS:
                return src.dtype.kind == "b"
            return out.dtype == src.dtype and CTYPES[src.dtype] in _REDUCE.get(reduce_op, ())
        if op == "matmul":
            a, b = node.args
            return (
                avals[a].dtype == _F32
                and avals[b].dtype == _F32
                and len(avals[a].shape) >= 2
                and len(avals[b].shape) >= 2
            )
        return False

    def _elementwise(self, graph: Graph, node: Node) -> bool:
        avals = graph.avals
        op, args = node.op, node.args
        if op == "full":
            return True
        if op == "unary":
            return args[1] is not None and CTYPES[avals[args[1]].dtype] in wgsl.UNARY.get(args[0], {})
        if op == "binary":
            dtype = avals[args[1]].dtype
            if type(args[2]) is Ref and avals[args[2]].dtype != dtype:
                return False
            return CTYPES[dtype] in wgsl.BINARY.get(args[0], {})
        if op == "cast":
            return True
        if op == "where":
            out = avals[node.outs[0]].dtype
            return avals[args[0]].dtype.kind == "b" and all(avals[a].dtype == out for a in args[1:] if type(a) is Ref)
        return op == "clamp"

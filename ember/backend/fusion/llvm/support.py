"""What the LLVM lowering compiles: the :class:`~ember.backend.fusion.scheduler.Target`
answers of the CPU backend.

Compiled: elementwise ops (per dtype, see :mod:`ember.backend.kernel.llvm.ops`),
``full``, layout ops, reductions, and matmuls of float32/float64, over the dtypes
float64, float32, int64, int32, uint8 and bool; convolutions (``conv_transpose``
with stride 1), max pooling with its backward, ``gather`` (``embedding`` expands to one) and ``scatter_add`` as
hand-written loops (:mod:`ember.backend.fusion.llvm.library`), a convolution with its
elementwise epilogue and max pooling as one step per sample (:mod:`ember.backend.fusion.chains`,
:mod:`ember.backend.fusion.llvm.chains`). Everything else
(other module ops, indexing, sorting, scans, ``cat``, normal draws and draws of
other dtypes, float16/bfloat16) runs on flex. Uniform and bernoulli draws of float32
and float64 are written to memory by the Philox fill flex's eager draws share
(:mod:`ember.backend.kernel.llvm.philox_fill`), and the kernels that read them load them.
"""

from __future__ import annotations

import numpy as np

from ember.backend import philox
from ember.backend.flex.memory import physical_memory
from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.library import LIBRARY
from ember.backend.fusion.llvm.linear import expanded_instead as linear_expanded_instead
from ember.backend.fusion.primitive_graph import FLOAT_EXPANSIONS, float_operands
from ember.backend.fusion.scheduler import ELEMENTWISE_OPS, LAYOUT_OPS, Target
from ember.backend.kernel.llvm import philox as philox_ir
from ember.backend.kernel.llvm.ops import LOWERED_BINARY, LOWERED_UNARY, lowers_cast
from ember.backend.kernel.views import View
from ember.backend.ops import ReduceOp
from ember.errors import ValueRangeError

DTYPES = frozenset(np.dtype(t) for t in (np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_))
_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})

#: Matmuls of at least this many multiply-adds (``M * N * K``) call BLAS; smaller
#: ones run as generated loops. Measured with ``python benchmarks/compile.py
#: --matmul-threshold`` (one plan per matmul, AVX-512 host, 1 BLAS thread): BLAS
#: and loops tie around 512-1024 multiply-adds (8x8x8: loops 1.10x BLAS's time,
#: 64x16x1: 0.96x), and BLAS wins from 4096 on (64x4x16: loops 1.4x, 32x32x32: 2.5x,
#: 128x128x128: 5.3x).
BLAS_THRESHOLD = 2048

#: Composite calls the LLVM path expands into primitives (float32/float64 only).
EXPANDED = FLOAT_EXPANSIONS

_REDUCE_INT = frozenset(ReduceOp) - {ReduceOp.MEAN}
#: A value larger than the machine's memory is left to flex, which names the problem.
_MEMORY = physical_memory()


class LLVMTarget(Target):
    """The CPU lowering's capabilities. ``blas`` is ``None`` where no BLAS was found:
    then matmuls above the threshold stay on flex (numpy's matmul)."""

    def __init__(self, blas: object | None, blas_threshold: int = BLAS_THRESHOLD):
        self.blas = blas
        self.blas_threshold = blas_threshold

    def expands(self, graph: Graph, node: Node) -> bool:
        """Whether a composite node is replaced by its decomposition."""
        if node.op == "embedding":  # a gather loop (float rows, int64 indices: the library's)
            weights, indices = node.args
            avals = graph.avals
            return avals[weights].dtype in _FLOATS and avals[indices].dtype == np.dtype(np.int64)
        if node.op not in EXPANDED or not float_operands(graph, node):
            return False
        if node.op in LIBRARY and self.library(graph, node):  # a row kernel (softmax) instead
            return node.op == "linear" and linear_expanded_instead(graph, node)
        if node.op in ("linear", "linear_backward"):
            # Expanded into matmuls: only when those compile (BLAS, or small enough).
            return self.blas is not None or _work(graph, node) < self.blas_threshold
        return True

    def lowers(self, graph: Graph, node: Node) -> bool:
        avals = graph.avals
        refs = list(node.refs())
        if any(avals[r].dtype not in DTYPES for r in refs) or any(avals[o].dtype not in DTYPES for o in node.outs):
            return False
        if _MEMORY is not None and any(avals[o].nbytes > _MEMORY for o in node.outs):
            return False
        op = node.op
        if op in LAYOUT_OPS:
            return True
        if op in ELEMENTWISE_OPS:
            return self._elementwise(graph, node)
        if op == "reduce":
            reduce_op, x, dim = node.args
            dtype = avals[x].dtype
            if avals[x].shape[dim] == 0:
                return False
            return dtype.kind == "f" or reduce_op in _REDUCE_INT
        if op == "random":
            return _random(graph, node)
        if op == "matmul":
            a, b = node.args
            if avals[a].dtype not in _FLOATS or len(avals[a].shape) < 2 or len(avals[b].shape) < 2:
                return False
            return self.blas is not None or _work(graph, node) < self.blas_threshold
        return False

    def _elementwise(self, graph: Graph, node: Node) -> bool:
        avals = graph.avals
        op, args = node.op, node.args
        if op == "full":
            return True
        if op == "unary":
            return args[0] in LOWERED_UNARY[avals[args[1]].dtype.kind]
        if op == "binary":
            dtype = avals[args[1]].dtype
            if type(args[2]) is Ref and avals[args[2]].dtype != dtype:
                return False
            return args[0] in LOWERED_BINARY[dtype.kind]
        if op == "cast":
            return lowers_cast(avals[args[0]].dtype, avals[node.outs[0]].dtype)
        if op == "where":
            out = avals[node.outs[0]].dtype
            return all(avals[a].dtype == out for a in args[1:] if type(a) is Ref)
        return op == "clamp"

    def library(self, graph: Graph, node: Node) -> bool:
        """Convolutions, max pooling and gather/scatter-add run as hand-written loops
        (:mod:`ember.backend.fusion.llvm.library`) where their arguments allow."""
        op = LIBRARY.get(node.op)
        if op is None:
            return False
        avals = graph.avals
        if _MEMORY is not None and any(avals[o].nbytes > _MEMORY for o in node.outs):
            return False
        return op.supports(graph, node, self)

    def library_views(self, graph: Graph, node: Node) -> frozenset[int]:
        op = LIBRARY.get(node.op)
        return frozenset() if op is None else op.views

    def matmul_needs_packing(self, view: View, dtype: np.dtype, work: int) -> bool:
        if self.blas is None or work < self.blas_threshold:
            return False
        return blas_layout(view) is None


def _random(graph: Graph, node: Node) -> bool:
    """Whether a random draw is computed inside the kernels that read it: uniform and
    bernoulli draws of float32 and float64 (:mod:`ember.backend.kernel.llvm.philox`);
    a float32 range too wide for float32 stays a call, which names the problem."""
    distribution = node.args[1]
    if distribution.kind not in philox_ir.KINDS or graph.avals[node.outs[0]].dtype not in philox_ir.DTYPES:
        return False
    if graph.avals[node.outs[0]].dtype == np.float32:
        try:
            philox.check_float32(distribution)
        except ValueRangeError:
            return False
    return True


def _work(graph: Graph, node: Node) -> int:
    """Multiply-adds of a matmul or of the largest matmul a linear op expands into."""
    avals = graph.avals
    if node.op == "matmul":
        a = node.args[0]
        out = avals[node.outs[0]].shape
        n = 1
        for s in out:
            n *= s
        return n * avals[a].shape[-1]
    shapes = [avals[r].shape for r in node.refs()]
    n = 1
    for shape in shapes:
        m = 1
        for s in shape:
            m *= s
        n = max(n, m)
    return n * max(s[-1] for s in shapes)


def blas_layout(view: View) -> tuple[bool, int] | None:
    """How BLAS reads the last two dims of ``view`` as a row-major matrix:
    ``(transposed, leading dimension)``, or ``None`` if it cannot (a copy is needed)."""
    rows, cols = view.shape[-2], view.shape[-1]
    rs, cs = view.strides[-2], view.strides[-1]
    if (cols == 1 or cs == 1) and (rows == 1 or rs >= max(cols, 1)):
        return False, rs if rows > 1 else max(cols, 1)
    if (rows == 1 or rs == 1) and (cols == 1 or cs >= max(rows, 1)):
        return True, cs if cols > 1 else max(rows, 1)
    return None


def gemv_args(
    a_view: View, b_view: View, la: tuple[bool, int] | None, lb: tuple[bool, int] | None, m: int, n: int, k: int
) -> tuple[bool, int, int, int, int, int, bool] | None:
    """``cblas_?gemv``'s arguments for ``a @ b`` with one row (``m == 1``: ``c = b^T
    a``) or one column (``n == 1``: ``c = a b``): ``(transposed, rows, cols, ld,
    x_inc, y_inc, matrix_is_a)``, the matrix being stored row-major as BLAS reads it;
    ``None`` when the vector's stride is 0 (a broadcast row) and gemm is called."""
    if m == 1 and lb is not None:
        inc = a_view.strides[-1]
        if inc <= 0:
            return None
        trans, ld = lb
        # b is [k, n]: stored as is (gemv of its transpose) or as [n, k] (plain gemv).
        return (False, n, k, ld, inc, 1, False) if trans else (True, k, n, ld, inc, 1, False)
    if n == 1 and la is not None:
        inc = b_view.strides[-2]
        if inc <= 0:
            return None
        trans, ld = la
        # a is [m, k]: stored as is (plain gemv) or as [k, m] (gemv of its transpose).
        return (True, k, m, ld, inc, 1, True) if trans else (False, m, k, ld, inc, 1, True)
    return None


def folds(a: View, b: View, layout: tuple[bool, int] | None, m: int) -> bool:
    """Whether a batched product is one product with the batches' rows stacked: ``b``
    the same matrix in every batch, ``a`` untransposed with each batch's rows right
    after the previous batch's (its batch dims walk rows at the row stride)."""
    rank = len(a.shape) - 2
    if layout is None or layout[0] or m < 1 or any(s != 0 for s in b.strides[:rank]):
        return False
    expected = m * layout[1]
    for d in range(rank - 1, -1, -1):
        if a.shape[d] != 1 and a.strides[d] != expected:
            return False
        expected *= a.shape[d]
    return True

"""Which dim of each graph value holds a bucketed call's rows, and whether padding is exact.

A bucketed compiled function (``ember.compile(fn, buckets=...)``) pads a dim of some
arguments (the *rows*: a batch, a set of independent sequences) up to a bucket size
and slices the results back. That is exact when every real row of every result is
computed from the same row of the inputs only, never from a padded row: the padded
rows are then computed beside the real ones and dropped. :func:`row_dims` checks it on
the traced graph, node by node: it follows the rows' dim through each op (elementwise
ops broadcast it, ``linear`` and the norms work within a row, a matmul keeps a row of
its left operand, reshapes and permutes move it) and refuses, with
:class:`BucketError`, any op that mixes rows: a reduction or softmax along them, a
matmul that contracts them, a slice or flip of them, an op it has no rule for.

A value's rows are a :class:`RowDim`: dim ``dim`` of its shape holds ``pre * rows *
post`` elements with the row index in the middle (a reshape may merge the rows' dim
with its neighbours: ``[rows, seq, d] -> [rows * seq, d]`` gives ``RowDim(0, 1, seq)``).
A value without one does not depend on the padded rows (a parameter, a constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.backend.fusion.graph import Graph, Node, Ref, iter_refs
from ember.errors import EmberError


class BucketError(EmberError, ValueError):
    """A bucketed compiled function whose results would not be exact with padded rows
    (see :mod:`ember.capture.row_flow`), or bucketed arguments that do not agree."""


@dataclass(frozen=True, slots=True)
class RowDim:
    """Dim ``dim`` of a value holds the rows, as ``pre * rows * post`` elements."""

    dim: int
    pre: int = 1
    post: int = 1


Rows = dict[int, RowDim]

#: Ops computed element by element (operands broadcast, numpy's rules).
ELEMENTWISE = frozenset(
    {
        "unary",
        "binary",
        "where",
        "clamp",
        "cast",
        "relu",
        "sigmoid",
        "gelu",
        "gelu_backward",
        "complex_unary",
        "complex",
    }
)
#: Ops that mix values only along the last dim of their tensor operands (a row's
#: features): the rows' dim is kept, unless it is the last.
LAST_DIM = frozenset(
    {"linear", "quantized_linear", "layer_norm", "rms_norm", "lstm_cell", "gru_cell", "cross_entropy", "mse_loss"}
)
#: Ops along one dim (its position in the arguments): the rows' dim must be another.
ALONG = {"reduce": 2, "arg_reduce": 2, "cumulative": 2, "argsort": 1, "softmax": 1, "log_softmax": 1}
#: Ops over the samples of their first operand (``[N, C, ...]``: convolutions, pooling).
PER_SAMPLE = frozenset(
    {
        "conv",
        "conv_transpose",
        "quantized_conv",
        "max_pool",
        "max_pool_with_indices",
        "avg_pool",
        "adaptive_avg_pool",
        "stft_frames",
    }
)
#: Ops that create values from nothing but their arguments' numbers.
CREATION = frozenset({"full", "arange"})


def row_dims(graph: Graph, inputs: dict[int, int], sizes: tuple[int, int]) -> tuple[Rows, set[int]]:
    """The rows of every value of ``graph`` reached from the input values ``inputs``
    (value -> the dim holding the rows), and the values created with a dim of the
    padded size (``sizes``: the padded and the real number of rows; see
    :func:`check_outputs`). Raises :class:`BucketError` at the first node that mixes rows."""
    rows: Rows = {value: RowDim(dim) for value, dim in inputs.items()}
    sized: set[int] = set()
    padded = sizes[0]
    for node in graph.nodes:
        refs = list(node.refs())
        tagged = [r for r in refs if r in rows]
        made = node.op in CREATION or (node.op == "expand" and padded not in graph.avals[refs[0]].shape)
        # A value made with the padded size, and what is computed from it alone (a value
        # with rows has its rows' dim followed instead).
        if not tagged and (any(r in sized for r in refs) or (made and _has_size(graph, node, padded))):
            _check_sized(graph, node, sized, padded)
            sized.update(node.outs)
        if node.op == "random":
            raise BucketError(
                _refusal(
                    graph,
                    node,
                    "draws random numbers (dropout in training mode?): a padded call "
                    "draws for the padded rows too, so the real rows' draws would differ",
                )
            )
        if not tagged:
            continue
        out = _rule(graph, node, rows)
        for value, row in zip(node.outs, out):
            if row is not None:
                shape = graph.avals[value].shape
                if row.dim >= len(shape) or shape[row.dim] != row.pre * padded * row.post:
                    raise BucketError(_refusal(graph, node, "changes the number of rows"))
                rows[value] = row
    return rows, sized


def _check_sized(graph: Graph, node: Node, sized: set[int], padded: int) -> None:
    """Refuses a sum (or another op along a dim, or a product contracting one) over a
    tensor made with the padded size: ``Tensor.ones([x.dims()[0]]).sum()`` counts the
    padded rows. Where the summed dim only happens to have that size, this refuses too."""
    op = node.op
    if op in ALONG or op == "matmul":
        x = node.args[0] if op in ("argsort", "softmax", "log_softmax", "matmul") else node.args[1]
        shape = graph.avals[x].shape
        dims = (len(shape) - 1,) if op == "matmul" else (_dim(node.args[ALONG[op]], len(shape)),)
        if x in sized and any(shape[d] == padded for d in dims):
            raise BucketError(_refusal(graph, node, "sums over a tensor created with the padded size"))


def _has_size(graph: Graph, node: Node, size: int) -> bool:
    return any(size in graph.avals[o].shape for o in node.outs)


def _refusal(graph: Graph, node: Node, why: str) -> str:
    shapes = ", ".join(str(list(graph.avals[r].shape)) for r in node.refs())
    return (
        f"ember: compile: buckets: {node.op}({shapes}) {why}; padded rows would change the real rows' results. "
        "Bucket only a dim whose rows are computed independently (a batch in inference), or compile without "
        "buckets (each new shape traces once)"
    )


def _rule(graph: Graph, node: Node, rows: Rows) -> list[RowDim | None]:
    """The rows of ``node``'s outputs (one per output), or a :class:`BucketError`."""
    op = node.op
    avals = graph.avals
    if op in ELEMENTWISE:
        return _broadcast(graph, node, rows, list(node.refs()))
    if op in LAST_DIM:
        return _within_rows(graph, node, rows)
    if op in ALONG:
        x = node.args[1] if op in ("reduce", "arg_reduce", "cumulative") else node.args[0]
        return [_along(graph, node, rows, x, (node.args[ALONG[op]],))]
    if op == "flip":
        return [_along(graph, node, rows, node.args[0], tuple(node.args[1]))]
    if op == "fft":
        return [_along(graph, node, rows, node.args[1], tuple(node.args[3]))]
    if op == "matmul":
        return [_matmul(graph, node, rows)]
    if op == "attention":
        return _attention(graph, node, rows)
    if op == "permute":
        row = _plain(graph, node, rows, node.args[0])
        return [RowDim(tuple(node.args[1]).index(row.dim), row.pre, row.post)]
    if op == "reshape":
        return [_reshape(graph, node, rows[node.args[0]], avals[node.args[0]].shape, avals[node.outs[0]].shape)]
    if op == "expand":
        x = node.args[0]
        row = _plain(graph, node, rows, x)
        at = row.dim + len(avals[node.outs[0]].shape) - len(avals[x].shape)
        if avals[node.outs[0]].shape[at] != avals[x].shape[row.dim]:
            raise BucketError(_refusal(graph, node, "broadcasts the rows' dim"))
        return [RowDim(at, row.pre, row.post)]
    if op in ("slice", "slice_assign"):
        return [_slice(graph, node, rows)]
    if op == "cat":
        xs = [r for r in node.args[0] if r in rows]
        dims = {rows[r] for r in xs}
        if len(dims) != 1 or next(iter(dims)).dim == _dim(node.args[1], len(avals[node.outs[0]].shape)):
            raise BucketError(_refusal(graph, node, "concatenates along the rows"))
        return [next(iter(dims))]
    if op in ("gather", "scatter_add", "select", "select_add"):
        return [_indexed(graph, node, rows)]
    if op == "embedding":
        if node.args[0] in rows:
            raise BucketError(_refusal(graph, node, "looks up a table computed from the rows"))
        return [rows[node.args[1]]]
    if op in ("lstm_sequence", "gru_sequence"):
        return _sequence(graph, node, rows)
    if op in PER_SAMPLE:
        if any(r in rows for r in list(node.refs())[1:]) or rows.get(node.args[0]) != RowDim(0):
            raise BucketError(_refusal(graph, node, "needs the rows as its first dim (the samples)"))
        return [RowDim(0)] * len(node.outs)
    raise BucketError(_refusal(graph, node, "has no rule for padded rows in ember.capture.row_flow"))


def _sequence(graph: Graph, node: Node, rows: Rows) -> list[RowDim | None]:
    """A recurrent layer over time-major ``[S, B, F]`` sequences: the rows are the
    batch, dim 1 of the sequences and dim 0 of the ``[B, H]`` states; the weights
    (``[H, G]``, ``[G]``) must not hold them."""
    weights = node.args[1:3] if node.op == "gru_sequence" else node.args[1:2]
    for r in node.refs():
        row, rank = rows.get(r), len(graph.avals[r].shape)
        if row is not None and (rank not in (2, 3) or row != RowDim(rank - 2) or r in weights):
            raise BucketError(_refusal(graph, node, "runs its recurrence across the rows (they are not the batch)"))
    return [RowDim(len(graph.avals[o].shape) - 2) for o in node.outs]


def _dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _plain(graph: Graph, node: Node, rows: Rows, x: Any) -> RowDim:
    row = rows.get(x)
    if row is None:
        raise BucketError(_refusal(graph, node, "reads the rows in an operand it has no rule for"))
    return row


def _broadcast(graph: Graph, node: Node, rows: Rows, operands: list[Ref]) -> list[RowDim | None]:
    """Every output of an elementwise node: operands aligned at their last dims."""
    out_shape = graph.avals[node.outs[0]].shape
    found: set[RowDim] = set()
    for r in operands:
        row = rows.get(r)
        if row is None:
            continue
        shape = graph.avals[r].shape
        at = row.dim + len(out_shape) - len(shape)
        if out_shape[at] != shape[row.dim]:
            raise BucketError(_refusal(graph, node, "broadcasts the rows' dim"))
        found.add(RowDim(at, row.pre, row.post))
    if len(found) != 1:
        raise BucketError(_refusal(graph, node, "combines operands whose rows sit at different dims"))
    return [next(iter(found))] * len(node.outs)


def _within_rows(graph: Graph, node: Node, rows: Rows) -> list[RowDim | None]:
    """An op mixing values along its operands' last dim only: every tagged operand's
    rows at one dim that is not the last; each output keeps them."""
    found = {rows[r] for r in node.refs() if r in rows}
    if len(found) != 1:
        raise BucketError(_refusal(graph, node, "combines operands whose rows sit at different dims"))
    row = next(iter(found))
    first = next(r for r in node.refs() if r in rows)
    rank = len(graph.avals[first].shape)
    for r in node.refs():  # the operands of the first's rank hold features in their last dim
        if r in rows and len(graph.avals[r].shape) == rank and row.dim >= rank - 1:
            raise BucketError(_refusal(graph, node, "mixes values along the rows' dim (its last)"))
    size = graph.avals[first].shape[row.dim]
    for o in node.outs:
        shape = graph.avals[o].shape
        if len(shape) <= row.dim or shape[row.dim] != size:
            raise BucketError(_refusal(graph, node, "reduces over the rows"))
    return [row] * len(node.outs)


def _along(graph: Graph, node: Node, rows: Rows, x: Any, dims: tuple[int, ...]) -> RowDim | None:
    row = _plain(graph, node, rows, x)
    rank = len(graph.avals[x].shape)
    along = {_dim(d, rank) for d in dims}
    if row.dim in along:
        raise BucketError(_refusal(graph, node, "computes along the rows' dim (a sum, mean, softmax... over them)"))
    if len(graph.avals[node.outs[0]].shape) == rank:
        return row
    return RowDim(row.dim - sum(d < row.dim for d in along), row.pre, row.post)


def _matmul(graph: Graph, node: Node, rows: Rows) -> RowDim:
    a, b = node.args[0], node.args[1]
    ra, rb = len(graph.avals[a].shape), len(graph.avals[b].shape)
    rank = len(graph.avals[node.outs[0]].shape)
    row_a, row_b = rows.get(a), rows.get(b)
    if min(ra, rb) < 2:
        raise BucketError(_refusal(graph, node, "is a matrix-vector product over the rows"))
    if (row_a is not None and row_a.dim == ra - 1) or (row_b is not None and row_b.dim == rb - 2):
        raise BucketError(_refusal(graph, node, "contracts the rows (a product summing over them)"))
    out_a = None if row_a is None else RowDim(row_a.dim + rank - ra, row_a.pre, row_a.post)
    out_b = None if row_b is None else RowDim(row_b.dim + rank - rb, row_b.pre, row_b.post)
    if out_a is not None and out_b is not None:
        if out_a != out_b or out_a.dim >= rank - 2:
            raise BucketError(_refusal(graph, node, "multiplies rows by other rows"))
        return out_a
    found = out_a if out_a is not None else out_b
    assert found is not None
    return found


def _attention(graph: Graph, node: Node, rows: Rows) -> list[RowDim | None]:
    """Attention's rows: a batch dim (before the queries' and keys' dims) of every
    operand that has them; a key or query dim mixes rows."""
    rank = len(graph.avals[node.outs[0]].shape)
    found: set[RowDim] = set()
    for r in node.refs():
        row = rows.get(r)
        if row is not None:
            found.add(RowDim(row.dim + rank - len(graph.avals[r].shape), row.pre, row.post))
    if len(found) != 1 or next(iter(found)).dim >= rank - 2:
        raise BucketError(_refusal(graph, node, "attends across the rows (they are queries or keys)"))
    return [next(iter(found))] * len(node.outs)


def _reshape(graph: Graph, node: Node, row: RowDim, shape: tuple[int, ...], new: tuple[int, ...]) -> RowDim:
    """Where the rows land in ``new``: the dim whose elements hold the whole row block,
    or a refusal when a reshape splits the rows across dims."""
    outer = row.pre
    for s in shape[: row.dim]:
        outer *= s
    rows_n = shape[row.dim] // (row.pre * row.post)
    before = 1
    for j, s in enumerate(new):
        if outer % before == 0 and (before * s) % (outer * rows_n) == 0 and before * s >= outer * rows_n:
            pre = outer // before
            post = (before * s) // (outer * rows_n)
            if pre * rows_n * post == s:
                return RowDim(j, pre, post)
        before *= s
    raise BucketError(_refusal(graph, node, f"splits the rows' dim across dims (to {list(new)})"))


def _slice(graph: Graph, node: Node, rows: Rows) -> RowDim:
    x, slices = node.args[0], node.args[1]
    shape = graph.avals[x].shape
    value: Any = node.args[2] if node.op == "slice_assign" else None
    row = rows.get(x)
    if row is None:  # slice_assign of rows into a value without them: only all of it
        row = rows[value]
        if len(graph.avals[value].shape) != len(shape) or graph.avals[value].shape[row.dim] != shape[row.dim]:
            raise BucketError(_refusal(graph, node, "writes the rows into part of another value"))
    elif value is not None and value in rows and rows[value] != row:
        raise BucketError(_refusal(graph, node, "writes rows into another dim"))
    if row.dim < len(slices) and tuple(slices[row.dim]) != (0, shape[row.dim], 1):
        raise BucketError(_refusal(graph, node, "takes part of the rows (a slice of the bucketed dim)"))
    return row


def _indexed(graph: Graph, node: Node, rows: Rows) -> RowDim:
    """gather/scatter_add/select/select_add: along a dim other than the rows', with
    the rows in the indexed operand (and in the indices or values, when they have them)."""
    x, dim = node.args[0], node.args[1]
    rank = len(graph.avals[x].shape)
    row = rows.get(x)
    others = [rows[r] for r in list(node.refs())[1:] if r in rows]
    if row is None:
        if node.op == "select" and others and len(graph.avals[node.args[2]].shape) == 1:
            return RowDim(_dim(dim, rank), others[0].pre, others[0].post)  # rows of indices pick rows of a table
        raise BucketError(_refusal(graph, node, "indexes a value without rows by the rows"))
    if row.dim == _dim(dim, rank):
        raise BucketError(_refusal(graph, node, "indexes along the rows' dim"))
    if node.op in ("select", "select_add") and any(r in rows for r in iter_refs(node.args[2])):
        raise BucketError(_refusal(graph, node, "picks indices computed from the rows"))
    if any(o != row for o in others if node.op in ("gather", "scatter_add")) or (
        node.op == "select_add" and others and others[-1] != row
    ):
        raise BucketError(_refusal(graph, node, "combines operands whose rows sit at different dims"))
    return row


def check_outputs(graph: Graph, rows: Rows, sized: set[int], results: list[int | None]) -> list[int | None]:
    """The dim to slice each result at (``results``: per result leaf its graph output
    index, ``None`` for a leaf that is not a tensor result), or a :class:`BucketError`
    where an output cannot be sliced back: rows merged with other dims, a state written
    from the rows, a tensor created with the padded size."""
    tensor_outputs = {i for i in results if i is not None}
    slices: list[int | None] = []
    for i in results:
        if i is None:
            slices.append(None)
            continue
        value = graph.outputs[i]
        row = rows.get(value)
        if row is not None and (row.pre, row.post) != (1, 1):
            raise BucketError(
                f"ember: compile: buckets: result {len(slices)} ({list(graph.avals[value].shape)}) holds the rows "
                f"merged with another dim (dim {row.dim}); reshape it back before returning it"
            )
        if row is None and value in sized:
            raise BucketError(
                f"ember: compile: buckets: result {len(slices)} ({list(graph.avals[value].shape)}) was created with "
                "the padded size (a tensor made from x.dims() of a bucketed argument); compute it from the "
                "arguments' values instead, or compile without buckets"
            )
        slices.append(None if row is None else row.dim)
    for i, value in enumerate(graph.outputs):
        if i not in tensor_outputs and value in rows:
            raise BucketError(
                "ember: compile: buckets: the function updates a state (an optimizer's moments, a running "
                "statistic, a returned module) from the padded rows; bucket only functions without such updates "
                "(inference, evaluation)"
            )
    return slices

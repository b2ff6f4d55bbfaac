"""A quantized product's ReLU folded into its call: a graph pass of the CPU plans.

A recorded ``quantized_linear`` or ``quantized_conv`` runs as a call of the wrapped
backend inside a plan (its kernels keep the weight packed, so the lowering does not
expand it), and the elementwise ops after it run as a compiled kernel: one more pass
over the product's output. :func:`fold_activations` gives the call a ReLU that reads
nothing else, as the keyword ``activation="relu"``: flex's kernels apply it to each
block of the output right after computing it (with the bias, while the block is in
cache; :func:`ember.backend.flex.quantized.activate`), and where a backend declines,
the op's composite applies the same fused op after the product. An epilogue with more
(a residual add, GELU, SiLU) stays one compiled kernel over the output, after the
call.
"""

from __future__ import annotations

from ember.backend.fusion.graph import Graph, Node

__all__ = ["FOLDED", "QUANTIZED", "fold_activations"]

#: The calls that take an activation, and the activations they take.
QUANTIZED = frozenset({"quantized_linear", "quantized_conv"})
FOLDED = frozenset({"relu"})


def fold_activations(graph: Graph) -> Graph:
    """``graph`` with each ReLU that is the only reader of a quantized call's result
    (which is no output) folded into that call; ``graph`` itself where there is none
    (it is never changed)."""
    reads: dict[int, int] = {}
    for node in graph.nodes:
        for ref in node.refs():
            reads[ref] = reads.get(ref, 0) + 1
    outputs = set(graph.outputs)
    producer = {node.outs[0]: i for i, node in enumerate(graph.nodes) if node.op in QUANTIZED}
    nodes: list[Node | None] = list(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.op not in FOLDED or node.kwargs or len(node.args) != 1:
            continue
        source = node.args[0]
        j = producer.get(source)
        if j is None or reads.get(source) != 1 or source in outputs:
            continue
        call = nodes[j]
        assert call is not None
        if any(key == "activation" for key, _ in call.kwargs):
            continue
        nodes[j] = Node(call.op, call.args, (*call.kwargs, ("activation", node.op)), node.outs, call.tree)
        nodes[i] = None
    if all(node is not None for node in nodes):
        return graph
    kept = [node for node in nodes if node is not None]
    return Graph(graph.avals, kept, graph.inputs, graph.consts, graph.outputs)

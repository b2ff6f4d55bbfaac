"""Where a compiled plan runs attention in the flash form (:mod:`.flash`): an
``attention`` node whose weights nothing reads but the ``attention_backward`` of its
context (a training step) or nothing at all (an inference) becomes ``flash_attention``,
which saves each row's softmax statistics (its maximum and ``1 / sum``: the logsumexp
in two numbers) instead of the ``[L, S]`` weights, and its backward
``flash_attention_backward``, which recomputes the weights block by block.

The old steps (:mod:`.attention`) stay where the flash form does not apply:

* the weights are read (a model that returns them, ``need_weights``) or are an output;
* the scores' gradient is wanted (a bias that requires a gradient: it is ``[L, S]``);
* dropout's keep mask is not a Philox bernoulli draw of the scores' shape (times a
  scalar) that the kernels can draw themselves (a mask given as a tensor);
* the fill or the scale is a run-time scalar, the operands are not float32/float64 of
  one dtype, or no BLAS was found (the old steps' conditions).

The keep mask's draw and its scaling, when nothing else reads them, leave the graph.
``EMBER_FLASH`` (read per plan) chooses: ``auto`` (the default) for training from 256
keys and wherever the weights are large (:func:`worth_it`), ``1`` wherever the form
applies, ``0`` never.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ember.backend.fusion.graph import Aval, Graph, Node, Ref
from ember.backend.fusion.llvm.attention import ATTENTION_OPS
from ember.backend.fusion.primitive_graph import Expanded
from ember.backend.ops import BinaryOp

_TWO_32 = 1 << 32
_NO_DROPOUT = (None,) * 6
#: The setting: ``auto`` (the default: where the weights are large, see :func:`worth_it`),
#: ``1`` (wherever the form applies) or ``0`` (never).
ENV = "EMBER_FLASH"
#: ``auto`` runs a training step's attention in the flash form from this many keys...
AUTO_KEYS = 256
#: ... and any attention whose weights ``[..., L, S]`` would take this many bytes.
AUTO_BYTES = 16 << 20


def mode() -> str:
    """``"auto"``, ``"on"`` or ``"off"`` (``EMBER_FLASH``, read when a plan is made)."""
    value = os.environ.get(ENV, "auto").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "off"
    return "on" if value in ("1", "on", "true", "yes") else "auto"


def worth_it(graph: Graph, node: Node, training: bool) -> bool:
    """Where ``auto`` uses the flash form: a training step from :data:`AUTO_KEYS` keys, any
    step whose weights would take :data:`AUTO_BYTES`. Below, the stored weights are small
    and the old steps compile faster for the same or better speed; an inference runs
    them about 5% faster at every length, so it takes the flash form for memory only
    (``benchmarks/attention.py --sections compiled``, causal ``[1, 4, L, 64]`` float32,
    flash / old steps: train 0.81-0.85x at L=64, 0.72-0.85x from 256; inference
    0.89-0.93x at 64, 1.01-1.12x from 256; W4's plan, with three attention layers of 64
    keys, compiles about 1 s CPU slower in the flash form)."""
    aq = graph.avals[node.args[0]]
    keys = graph.avals[node.args[1]].shape[-2]
    rows = math.prod(aq.shape[:-1])
    return (training and keys >= AUTO_KEYS) or rows * keys * aq.dtype.itemsize >= AUTO_BYTES


def _readers(graph: Graph) -> dict[int, list[int]]:
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in dict.fromkeys(node.refs()):
            readers.setdefault(ref, []).append(index)
    return readers


def _scalar(value: Any) -> bool:
    return type(value) is not Ref and not isinstance(value, (tuple, list)) and value is not None


def _philox_keep(graph: Graph, keep: int, producers: dict[int, int], full: tuple, dtype: Any) -> tuple | None:
    """``(keep_p, scale, key_lo, key_hi, counter_lo, counter_hi)`` where ``keep`` is a
    bernoulli draw of ``full`` (times a scalar ``scale``; ``None``: 1), else ``None``."""
    node = graph.nodes[producers[keep]] if keep in producers else None
    scale = None
    if node is not None and node.op == "binary" and node.args[0] is BinaryOp.MUL and type(node.args[1]) is Ref:
        if not _scalar(node.args[2]):
            return None
        scale = node.args[2]
        node = graph.nodes[producers[node.args[1]]] if node.args[1] in producers else None
    if node is None or node.op != "random":
        return None
    shape, distribution, _, key, counter = node.args
    out = graph.avals[node.outs[0]]
    if distribution.kind != "bernoulli" or tuple(shape) != full or out.dtype != dtype:
        return None
    return (float(distribution.a), scale, key % _TWO_32, key // _TWO_32, counter % _TWO_32, counter // _TWO_32)


def _applies(graph: Graph, node: Node, users: list[Node], target: Any) -> bool:
    if not ATTENTION_OPS["attention"].supports(graph, node, target):
        return False
    q, k, v, mask, _, _, scale, causal, keep = node.args
    probs = node.outs[1]
    for user in users:
        if user.op != "attention_backward" or user.args[3] != probs or user.args[12]:
            return False
        if user.args[:3] != (q, k, v) or user.args[4] != mask or user.args[5] != keep:
            return False
        if user.args[7] != scale or user.args[8] != causal:
            return False
        if not ATTENTION_OPS["attention_backward"].supports(graph, user, target):
            return False
    return True


def use_flash(expanded: Expanded, target: Any, everywhere: bool = False) -> int:
    """Rewrites ``expanded``'s graph in place (see the module docstring) where the flash
    form applies and, unless ``everywhere``, is :func:`worth_it`; returns how many
    attention nodes now run in the flash form."""
    graph = expanded.graph
    if not any(node.op == "attention" for node in graph.nodes):
        return 0
    readers = _readers(graph)
    producers = {out: index for index, node in enumerate(graph.nodes) for out in node.outs}
    outputs = set(graph.outputs)
    count = 0
    dropped: set[int] = set()  # values the rewritten nodes no longer read
    for index, node in enumerate(list(graph.nodes)):
        if node.op != "attention":
            continue
        context, probs = node.outs
        if probs in outputs:
            continue
        users = [graph.nodes[u] for u in readers.get(probs, [])]
        if not (everywhere or worth_it(graph, node, training=bool(users))):
            continue
        if not _applies(graph, node, users, target):
            continue
        q, k, v, mask, bias, fill, scale, causal, keep = node.args
        aq = graph.avals[q]
        drop: tuple = _NO_DROPOUT
        if keep is not None:
            full = aq.shape[:-1] + (graph.avals[k].shape[-2],)
            drawn = _philox_keep(graph, keep, producers, full, aq.dtype)
            if drawn is None:
                continue
            drop = drawn
            dropped.add(keep)
        stats = graph.new_value(Aval(aq.shape[:-1] + (2,), aq.dtype))  # each row's (max, 1 / sum)
        graph.nodes[index] = Node(
            "flash_attention", (q, k, v, mask, bias, fill, scale, causal, *drop), (), (context, stats), node.tree
        )
        for u in readers.get(probs, []):
            back = graph.nodes[u]
            _, _, _, _, _, _, grad, _, _, need_q, need_k, need_v, _ = back.args
            args = (q, k, v, context, stats, mask, bias, fill, grad, scale, causal, need_q, need_k, need_v, *drop)
            graph.nodes[u] = Node("flash_attention_backward", args, (), back.outs, back.tree)
        count += 1
    if dropped:
        _drop_unread(expanded, dropped)
    return count


def _drop_unread(expanded: Expanded, values: set[int]) -> None:
    """Removes the nodes that made ``values`` (and what only they read) where nothing
    reads them any more."""
    graph = expanded.graph
    outputs = set(graph.outputs)
    while True:
        readers = _readers(graph)
        dead = [
            i
            for i, node in enumerate(graph.nodes)
            if node.op in ("binary", "random")
            and any(o in values for o in node.outs)
            and not any(o in outputs or readers.get(o) for o in node.outs)
        ]
        if not dead:
            return
        for i in reversed(dead):
            values.update(r for r in graph.nodes[i].refs())
            del graph.nodes[i]
            del expanded.origin[i]


__all__ = ["use_flash"]

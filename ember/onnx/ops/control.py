"""Operators with subgraphs: ``If``, ``Loop``, ``Scan`` and ``SequenceMap``, planned by
:mod:`ember.onnx.control` (an ``If`` on a constant condition is inlined, otherwise a
run-time choice), and ``ai.onnx.preview.FlexAttention``, planned by
:mod:`ember.onnx.flex_attention`; the entries here register the operators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.registry import Node, op


@op(["If", "Loop"])
def control_flow(node: Node) -> Callable[..., Any]:
    raise node.error(f"{node.op_type} is planned with its subgraphs by ember.onnx.control, not built as one step")


@op("SequenceMap", since=17, eager=True)
def sequence_map(node: Node) -> Callable[..., Any]:
    return control_flow(node)


@op("Scan", since=9)  # opset 8's Scan (a batch axis and sequence_lens) is not implemented
def scan(node: Node) -> Callable[..., Any]:
    return control_flow(node)


@op("FlexAttention", domain="ai.onnx.preview")
def flex_attention(node: Node) -> Callable[..., Any]:
    return control_flow(node)  # planned with its score_mod/prob_mod subgraphs by ember.onnx.flex_attention

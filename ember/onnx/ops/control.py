"""Control-flow operators: ``If``, ``Loop`` and ``Scan``. Its subgraphs are planned by :mod:`ember.onnx.control`
(inlined when the condition is a constant, a run-time choice otherwise); the entry here
registers the operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.registry import Node, op


@op(["If", "Loop"])
def control_flow(node: Node) -> Callable[..., Any]:
    raise node.error(f"{node.op_type} is planned with its subgraphs by ember.onnx.control, not built as one step")


@op("Scan", since=9)  # opset 8's Scan (a batch axis and sequence_lens) is not implemented
def scan(node: Node) -> Callable[..., Any]:
    return control_flow(node)

"""Control-flow operators: ``If``. Its subgraphs are planned by :mod:`ember.onnx.control`
(inlined when the condition is a constant, a run-time choice otherwise); the entry here
registers the operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.registry import Node, op


@op("If")
def if_(node: Node) -> Callable[..., Any]:
    raise node.error("If is planned with its subgraphs by ember.onnx.control, not built as one step")

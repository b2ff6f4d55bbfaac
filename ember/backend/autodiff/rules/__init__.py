"""Backward rules, one module per op family.

A step ``step(ops, g, saved, ctx)`` is written over the backend protocol ``ops``. A
first-order backward passes the inner backend (plain primitives); a
``backward(create_graph=True)`` passes the autodiff backend itself, so every op a step
runs is recorded and the gradients can be differentiated again. Steps that call a
fused kernel with no rule of its own (``linear_backward``, ``conv_weight_grad``, the
pooling and embedding backward ops) then take the backend protocol's defaults, written
over differentiable primitives; a step that cannot be differentiated (a move between
devices) raises a ``GraphError`` naming the op.
"""

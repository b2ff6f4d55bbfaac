"""The input projections of a recurrent layer, hoisted out of its time loop.

``x_t W_ih + b`` does not depend on the state, so every step's product is one GEMM over
the whole sequence (as cuDNN and PyTorch's CPU LSTM do): one product forward and one
``linear`` backward in place of one per step, and the weight's gradient is a single
product over all steps instead of a sum of per-step ones. The steps are then handed
out by :class:`_Steps`, one autodiff node whose backward concatenates the steps'
gradients (slicing each step with ``narrow`` would make every step's backward a zero
tensor of the whole sequence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.autograd import Function
from ember.tensor import Tensor
from ember.tensor.layer_ops import linear


class _Steps(Function):
    """``x`` ``[n * k, ...]`` as ``n`` consecutive pieces along dim 0; the backward
    concatenates the pieces' gradients (zeros where none reached a piece)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, n: int) -> tuple[Tensor, ...]:
        k = x.dims()[0] // n
        return tuple(x.narrow(0, t * k, k) for t in range(n))

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor, None]:
        return Tensor.cat(list(grads), 0), None


def input_projections(xs: Sequence[Tensor], w: Tensor, b: Tensor | None) -> list[Tensor]:
    """``linear(x, w, b)`` for every step ``x`` of ``xs``: one GEMM over the sequence when
    the steps share a shape, else one per step."""
    if len(xs) < 2 or any(x.dims() != xs[0].dims() for x in xs) or xs[0].rank == 0:
        return [linear(x, w, b) for x in xs]
    return list(_Steps.apply(linear(Tensor.cat(list(xs), 0), w, b), len(xs)))

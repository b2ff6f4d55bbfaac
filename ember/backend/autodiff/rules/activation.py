"""Fused activations: forward recording and backward steps side by side.

Each wraps the inner backend's fused kernel; when the inner backend has none, the
rule returns ``NotImplemented`` and the tensor layer runs the composite
(:mod:`ember.backend.composites`) over this backend's primitives, which differentiates it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.composites import run
from ember.backend.composites.activation import softmax_backward
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp


def _relu_step(ops, g, saved, ctx):
    (out,) = saved
    return (run(ops, "relu_backward", out, g),)


def _sigmoid_step(ops, g, saved, ctx):
    (out,) = saved
    one_minus = ops.binary(BinaryOp.ADD, ops.unary(UnaryOp.NEG, out), 1.0)
    return (ops.binary(BinaryOp.MUL, g, ops.binary(BinaryOp.MUL, out, one_minus)),)


def _softmax_step(ops, g, saved, dim):
    (out,) = saved
    return (softmax_backward(ops, out, g, dim),)


def _log_softmax_step(ops, g, saved, dim):
    (out,) = saved
    total = ops.reduce(ReduceOp.SUM, g, dim)
    return (ops.binary(BinaryOp.SUB, g, ops.binary(BinaryOp.MUL, ops.unary(UnaryOp.EXP, out), total)),)


def _gelu_step(ops, g, saved, ctx):
    (x,) = saved
    return (run(ops, "gelu_backward", x, g),)


class ActivationRules(RecordMixin):
    """Recording of fused activations (relu, sigmoid and gelu memory-bound; softmax kept)."""

    def _fused(self, name: str, x: AutodiffTensor, step: Any, memory_bound: bool, *args: Any) -> Any:
        kernel = getattr(self.inner, name)
        out = kernel(x.inner, *args)
        if out is NotImplemented:
            return NotImplemented
        if x.node is None:
            return AutodiffTensor(out, None)
        recompute = (partial(_call, kernel, args), (self._keep(x),)) if (memory_bound and self._balanced) else None
        ctx = args[0] if args else None
        return self._record(out, (x.node,), step, (self._out(out, memory_bound),), ctx, recompute)

    def relu(self, x: AutodiffTensor) -> Any:
        return self._fused("relu", x, _relu_step, True)

    def sigmoid(self, x: AutodiffTensor) -> Any:
        return self._fused("sigmoid", x, _sigmoid_step, True)

    def gelu(self, x: AutodiffTensor) -> Any:
        kernel = self.inner.gelu
        out = kernel(x.inner)
        if out is NotImplemented:
            return NotImplemented
        if x.node is None:
            return AutodiffTensor(out, None)
        # The backward needs the input only: under balanced checkpointing the output is
        # recomputable and nothing of it is kept.
        recompute = (partial(_call, kernel, ()), (self._keep(x),)) if self._balanced else None
        return self._record(out, (x.node,), _gelu_step, (self._keep(x),), None, recompute)

    def softmax(self, x: AutodiffTensor, dim: int) -> Any:
        return self._fused("softmax", x, _softmax_step, False, dim)

    def log_softmax(self, x: AutodiffTensor, dim: int) -> Any:
        return self._fused("log_softmax", x, _log_softmax_step, False, dim)


def _call(kernel, args, x):
    return kernel(x, *args)

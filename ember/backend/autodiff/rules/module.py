"""Module ops (conv, pooling, embedding): forward recording and backward steps side
by side. Each step is written with the inner backend's module ops, so a backend's
fast kernels serve its backward too:

* conv: input gradient by conv-transpose, weight gradient by ``conv_weight_grad``;
* conv-transpose: input gradient by conv, weight gradient by ``conv_weight_grad``
  with the roles of input and gradient swapped;
* max-pool: the gradient scattered to the indices of the maxima;
* avg-pool, adaptive avg-pool, embedding: their ``*_backward`` ops.

Convolutions are compute-bound: their inputs are kept (under balanced checkpointing,
recomputed when they are outputs of memory-bound ops).
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.module_ops import conv_transpose_output_size
from ember.backend.ops import ReduceOp


def _bias_grad(ops: Any, g: Any) -> Any:
    """Sum over every dim but the channels (dim 1)."""
    channels = g.shape[1]
    g = ops.reduce(ReduceOp.SUM, g, 0)
    for dim in range(2, len(g.shape)):
        g = ops.reduce(ReduceOp.SUM, g, dim)
    return ops.reshape(g, (channels,))


def _fit(ops: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """``g`` cut to ``shape`` (a conv may reach past an input whose output_padding
    is at least the stride)."""
    if tuple(g.shape) == tuple(shape):
        return g
    return ops.slice(g, tuple((0, n, 1) for n in shape))


def _conv_step(ops, g, saved, ctx):
    x, w = saved
    x_shape, w_shape, stride, padding, dilation, groups, (tx, tw, tb) = ctx
    gx = gw = gb = None
    if tx:
        kernel = w_shape[2:]
        output_padding = tuple(
            size - conv_transpose_output_size(o, k, s, p, 0, d)
            for size, o, k, s, p, d in zip(x_shape[2:], g.shape[2:], kernel, stride, padding, dilation)
        )
        gx = ops.conv_transpose(g, w, None, stride, padding, output_padding, dilation, groups)
    if tw:
        gw = ops.conv_weight_grad(x, g, w_shape, stride, padding, dilation, groups)
    if tb:
        gb = _bias_grad(ops, g)
    return (gx, gw, gb)


def _conv_transpose_step(ops, g, saved, ctx):
    x, w = saved
    x_shape, w_shape, stride, padding, dilation, groups, (tx, tw, tb) = ctx
    gx = gw = gb = None
    if tx:
        gx = _fit(ops, ops.conv(g, w, None, stride, padding, dilation, groups), x_shape)
    if tw:
        gw = ops.conv_weight_grad(g, x, w_shape, stride, padding, dilation, groups)
    if tb:
        gb = _bias_grad(ops, g)
    return (gx, gw, gb)


def _max_pool_step(ops, g, saved, input_shape):
    (indices,) = saved
    return (ops.max_pool_backward(g, indices, input_shape),)


def _avg_pool_step(ops, g, saved, ctx):
    input_shape, kernel, stride, padding, count_include_pad, ceil_mode = ctx
    return (ops.avg_pool_backward(g, input_shape, kernel, stride, padding, count_include_pad, ceil_mode),)


def _adaptive_avg_pool_step(ops, g, saved, input_shape):
    return (ops.adaptive_avg_pool_backward(g, input_shape),)


def _embedding_step(ops, g, saved, num_embeddings):
    (indices,) = saved
    return (ops.embedding_backward(g, indices, num_embeddings),)


class ModuleRules(RecordMixin):
    """Recording of the module ops."""

    def _conv_like(
        self, kernel_op: Any, step: Any, x: Any, weight: Any, bias: Any, args: tuple, ctx_args: tuple
    ) -> Any:
        out = kernel_op(x.inner, weight.inner, None if bias is None else bias.inner, *args)
        nx, nw = x.node, weight.node
        nb = None if bias is None else bias.node
        if nx is None and nw is None and nb is None:
            return AutodiffTensor(out, None)
        saved = (self._keep(x) if nw is not None else None, self._keep(weight) if nx is not None else None)
        ctx = (x.shape, weight.shape, *ctx_args, (nx is not None, nw is not None, nb is not None))
        return self._record(out, (nx, nw, nb), step, saved, ctx)

    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        args = (stride, padding, dilation, groups)
        return self._conv_like(self.inner.conv, _conv_step, x, weight, bias, args, args)

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        args = (stride, padding, output_padding, dilation, groups)
        ctx_args = (stride, padding, dilation, groups)
        return self._conv_like(self.inner.conv_transpose, _conv_transpose_step, x, weight, bias, args, ctx_args)

    def max_pool(self, x, kernel, stride, padding, dilation, ceil_mode):
        if x.node is None:
            return AutodiffTensor(self.inner.max_pool(x.inner, kernel, stride, padding, dilation, ceil_mode), None)
        return self.max_pool_with_indices(x, kernel, stride, padding, dilation, ceil_mode)[0]

    def max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode):
        out, indices = self.inner.max_pool_with_indices(x.inner, kernel, stride, padding, dilation, ceil_mode)
        indices_t = AutodiffTensor(indices, None)
        if x.node is None:
            return AutodiffTensor(out, None), indices_t
        return self._record(out, (x.node,), _max_pool_step, (indices_t,), x.shape), indices_t

    def avg_pool(self, x, kernel, stride, padding, count_include_pad, ceil_mode):
        out = self.inner.avg_pool(x.inner, kernel, stride, padding, count_include_pad, ceil_mode)
        if x.node is None:
            return AutodiffTensor(out, None)
        ctx = (x.shape, kernel, stride, padding, count_include_pad, ceil_mode)
        return self._record(out, (x.node,), _avg_pool_step, (), ctx)

    def adaptive_avg_pool(self, x, output_size):
        out = self.inner.adaptive_avg_pool(x.inner, output_size)
        if x.node is None:
            return AutodiffTensor(out, None)
        return self._record(out, (x.node,), _adaptive_avg_pool_step, (), x.shape)

    def embedding(self, weights, indices):
        out = self.inner.embedding(weights.inner, indices.inner)
        if weights.node is None:
            return AutodiffTensor(out, None)
        return self._record(out, (weights.node,), _embedding_step, (indices,), weights.shape[0])

"""Shape and dtype inference: the abstract value of every backend call's result.

``infer(op, args, kwargs)`` takes a call's arguments with tensors replaced by
:class:`~ember.backend.fusion.graph.Aval` s (anything with ``shape`` and ``dtype``)
and returns the result's structure with an ``Aval`` per tensor (``None`` where the
call returns ``None``). The rules follow the backend protocol's contract
(``ember/backend/base.py``); the replay executor checks every result against them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.fusion.graph import Aval
from ember.backend.module_ops import conv_output_size, conv_transpose_output_size, pool_output_size
from ember.backend.ops import BOOL_REDUCE_OPS, BOOL_RESULT_BINARY, BOOL_RESULT_UNARY, LinalgOp, ReduceOp

_BOOL = np.dtype(np.bool_)
_I64 = np.dtype(np.int64)


class NotTraceable(Exception):
    """The call's result cannot be known without running it (data-dependent shape)."""


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of ``shapes`` (the tensor layer has checked they broadcast)."""
    first = shapes[0]
    if all(s == first for s in shapes):  # the common case, cheaply
        return first
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        size = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j >= 0 and s[j] != 1:
                size = s[j]
        out.append(size)
    return tuple(out)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else ()


def _same(x: Any, *_: Any, **__: Any) -> Aval:
    return Aval(tuple(x.shape), x.dtype)


def _unary(op: Any, x: Any) -> Aval:
    return Aval(tuple(x.shape), _BOOL if op in BOOL_RESULT_UNARY else x.dtype)


def _binary(op: Any, a: Any, b: Any) -> Aval:
    shape = tuple(a.shape)
    if hasattr(b, "shape"):
        other = tuple(b.shape)
        if other != shape:
            shape = broadcast(shape, other)
    return Aval(shape, _BOOL if op in BOOL_RESULT_BINARY else a.dtype)


def _where(cond: Any, a: Any, b: Any) -> Aval:
    dtype = a.dtype if hasattr(a, "shape") else b.dtype
    return Aval(broadcast(tuple(cond.shape), _shape(a), _shape(b)), dtype)


def _matmul(a: Any, b: Any) -> Aval:
    batch = broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return Aval(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _kept(shape: tuple[int, ...], dim: int) -> tuple[int, ...]:
    return shape[:dim] + (1,) + shape[dim + 1 :]


def _reduce(op: Any, x: Any, dim: int) -> Aval:
    dtype = x.dtype
    if op in BOOL_REDUCE_OPS:
        dtype = _BOOL
    elif dtype == _BOOL and op in (ReduceOp.SUM, ReduceOp.PROD):
        dtype = _I64
    return Aval(_kept(tuple(x.shape), dim), dtype)


def _slice_len(start: int, stop: int, step: int) -> int:
    return len(range(start, stop if stop >= 0 else -1, step))


def _slice(x: Any, slices: tuple) -> Aval:
    shape = tuple(_slice_len(a, b, s) for a, b, s in slices) + tuple(x.shape[len(slices) :])
    return Aval(shape, x.dtype)


def _cat(xs: list, dim: int) -> Aval:
    first = tuple(xs[0].shape)
    return Aval(first[:dim] + (sum(x.shape[dim] for x in xs),) + first[dim + 1 :], xs[0].dtype)


def _select(x: Any, dim: int, indices: Any) -> Aval:
    shape = tuple(x.shape)
    return Aval(shape[:dim] + (indices.shape[0],) + shape[dim + 1 :], x.dtype)


def _argwhere(x: Any) -> Aval:
    raise NotTraceable("argwhere's result size depends on the values")


def _linear(x: Any, weight: Any, bias: Any) -> Aval:
    return Aval(tuple(x.shape[:-1]) + (weight.shape[1],), x.dtype)


def _linear_backward(x, weight, grad, need_x, need_weight, need_bias):
    # x is given only when need_weight, weight only when need_x.
    d_out = grad.shape[-1]
    return (
        Aval(tuple(grad.shape[:-1]) + (weight.shape[0],), grad.dtype) if need_x else None,
        Aval((x.shape[-1], d_out), grad.dtype) if need_weight else None,
        Aval((d_out,), grad.dtype) if need_bias else None,
    )


def _layer_norm(x, gamma, beta, epsilon):
    stats = Aval(tuple(x.shape[:-1]) + (1,), x.dtype)
    return (Aval(tuple(x.shape), x.dtype), stats, stats)


def _layer_norm_backward(x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta):
    d = (x.shape[-1],)
    return (
        Aval(tuple(x.shape), grad.dtype) if need_x else None,
        Aval(d, grad.dtype) if need_gamma and gamma is not None else None,
        Aval(d, grad.dtype) if need_beta else None,
    )


def _rms_norm(x, gamma, epsilon):
    return (Aval(tuple(x.shape), x.dtype), Aval(tuple(x.shape[:-1]) + (1,), x.dtype))


def _rms_norm_backward(x, gamma, rstd, grad, need_x, need_gamma):
    return (
        Aval(tuple(x.shape), grad.dtype) if need_x else None,
        Aval((x.shape[-1],), grad.dtype) if need_gamma and gamma is not None else None,
    )


def _attention(query, key, value, mask, bias, fill, scale, causal, keep):
    lead = tuple(query.shape[:-1])
    return Aval(lead + (value.shape[-1],), query.dtype), Aval(lead + (key.shape[-2],), query.dtype)


def _attention_backward(query, key, value, probs, mask, keep, grad, scale, causal, *needs):
    shapes = (query.shape, key.shape, value.shape, probs.shape)
    return tuple(Aval(tuple(s), grad.dtype) if need else None for s, need in zip(shapes, needs))


def _lstm_sequence(proj, w_hh, h0, c0, valid, reverse):
    steps, dt = (proj.shape[0], proj.shape[1], h0.shape[-1]), proj.dtype
    state = Aval(tuple(h0.shape), dt)
    return (Aval(steps, dt), state, state, Aval(steps, dt), Aval(steps, dt), Aval(tuple(proj.shape), dt))


def _lstm_sequence_backward(w_hh, valid, reverse, h_in, c_in, c_n, z, *grads):
    state, dt = Aval(tuple(c_n.shape), z.dtype), z.dtype
    return (Aval(tuple(z.shape), dt), Aval(tuple(w_hh.shape), dt), state, state)


def _gru_sequence(proj, w_hh, b_hh, h0, valid, reverse):
    steps, dt = (proj.shape[0], proj.shape[1], h0.shape[-1]), proj.dtype
    return (Aval(steps, dt), Aval(tuple(h0.shape), dt), Aval(steps, dt), Aval(tuple(proj.shape), dt))


def _gru_sequence_backward(w_hh, valid, reverse, proj, h_in, hp, *grads):
    dt = proj.dtype
    g = proj.shape[-1]
    return (Aval(tuple(proj.shape), dt), Aval(tuple(w_hh.shape), dt), Aval((g,), dt), Aval(tuple(h_in.shape[1:]), dt))


def _adam_step_many(params, grads, moments_1, moments_2, max_moments_2, **options):
    avals = [Aval(tuple(p.shape), p.dtype) for p in params]
    return (avals, list(avals), list(avals), list(avals) if options["amsgrad"] else None)


def _spatial_out(x_shape, kernel, stride, padding, dilation, ceil_mode):
    return tuple(
        pool_output_size(s, k, st, p, d, ceil_mode)
        for s, k, st, p, d in zip(x_shape[2:], kernel, stride, padding, dilation)
    )


def _conv(x, weight, bias, stride, padding, dilation, groups):
    kernel = tuple(weight.shape[2:])
    out = tuple(
        conv_output_size(s, k, st, p, d) for s, k, st, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
    )
    return Aval((x.shape[0], weight.shape[0]) + out, x.dtype)


def _conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
    kernel = tuple(weight.shape[2:])
    out = tuple(
        conv_transpose_output_size(s, k, st, p, op, d)
        for s, k, st, p, op, d in zip(x.shape[2:], kernel, stride, padding, output_padding, dilation)
    )
    return Aval((x.shape[0], weight.shape[1] * groups) + out, x.dtype)


def _max_pool(x, kernel, stride, padding, dilation, ceil_mode):
    return Aval(tuple(x.shape[:2]) + _spatial_out(x.shape, kernel, stride, padding, dilation, ceil_mode), x.dtype)


def _max_pool_with_indices(x, kernel, stride, padding, dilation, ceil_mode):
    value = _max_pool(x, kernel, stride, padding, dilation, ceil_mode)
    return (value, Aval(value.shape, _I64))


def _avg_pool(x, kernel, stride, padding, count_include_pad, ceil_mode):
    dilation = (1,) * len(kernel)
    return Aval(tuple(x.shape[:2]) + _spatial_out(x.shape, kernel, stride, padding, dilation, ceil_mode), x.dtype)


_I32 = np.dtype(np.int32)


def _linalg(op: Any, inputs: tuple, options: tuple = ()) -> tuple:
    """The results of ``Backend.linalg`` (see ``ember.backend.linalg_host``): a LAPACK
    call, run by a plan as a call of the wrapped backend."""
    a = inputs[0]
    shape, dtype = tuple(a.shape), a.dtype
    real = np.dtype(dtype).type(0).real.dtype  # singular values, eigenvalues, log|det|, residuals
    batch, (m, n) = shape[:-2], shape[-2:]
    k = min(m, n)
    if op in (LinalgOp.SOLVE, LinalgOp.SOLVE_TRIANGULAR):
        b = inputs[1]
        out = broadcast(batch, tuple(b.shape[:-2])) + tuple(b.shape[-2:])
        if op is LinalgOp.SOLVE_TRIANGULAR:
            return (Aval(out, dtype),)
        return (Aval(out, dtype), Aval(out[:-2], _I32))
    if op in (LinalgOp.INV, LinalgOp.CHOLESKY):
        return (Aval(shape, dtype), Aval(batch, _I32))
    if op is LinalgOp.DET:
        return (Aval(batch, dtype),)
    if op is LinalgOp.SLOGDET:
        return (Aval(batch, dtype), Aval(batch, real))
    if op is LinalgOp.QR:
        mode = options[0]
        if mode == "r":
            return (Aval((0,), dtype), Aval(batch + (k, n), dtype))
        q = m if mode == "complete" else k
        return (Aval(batch + (m, q), dtype), Aval(batch + (q, n), dtype))
    if op is LinalgOp.SVD:
        left, right = (m, n) if options[0] else (k, k)
        return (Aval(batch + (m, left), dtype), Aval(batch + (k,), real), Aval(batch + (right, n), dtype))
    if op is LinalgOp.SVDVALS:
        return (Aval(batch + (k,), real),)
    if op is LinalgOp.EIGH:
        return (Aval(batch + (n,), real), Aval(shape, dtype))
    if op is LinalgOp.EIGVALSH:
        return (Aval(batch + (n,), real),)
    if op is LinalgOp.PINV:
        return (Aval(batch + (n, m), dtype),)
    if op is LinalgOp.MATRIX_EXP:
        return (Aval(shape, dtype),)
    if op is LinalgOp.LSTSQ and len(options) > 1 and options[1]:  # static residuals (see TraceBackend.linalg)
        b = inputs[1]
        out = broadcast(batch, tuple(b.shape[:-2]))
        q = b.shape[-1]
        residuals = out + (q,) if m > n else (0,)
        return (
            Aval(out + (n, q), dtype),
            Aval(residuals, real),
            Aval(out, np.dtype(np.int64)),
            Aval(out + (k,), real),
        )
    # lstsq with eager residuals: whether it gives them depends on the ranks it finds.
    raise NotTraceable(f"linalg.{op}'s result shapes depend on its values")


def _to_input_shape(grad, input_shape, *_: Any) -> Aval:
    return Aval(tuple(input_shape), grad.dtype)


_C64, _C128 = np.dtype(np.complex64), np.dtype(np.complex128)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_REAL_OF: dict[np.dtype, np.dtype] = {_C64: _F32, _C128: _F64}
_COMPLEX_OF: dict[np.dtype, np.dtype] = {_F32: _C64, _F64: _C128}


def _complex_unary(op: Any, x: Any) -> Aval:
    return Aval(tuple(x.shape), x.dtype if op == "conj" else _REAL_OF[x.dtype])


def _fft(op: Any, x: Any, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> Aval:
    shape = list(x.shape)
    for d, n in zip(dims, sizes):
        shape[d] = n
    dtype = x.dtype
    if op == "rfft":
        shape[dims[-1]] = sizes[-1] // 2 + 1
        dtype = _COMPLEX_OF[x.dtype]
    elif op == "irfft":
        dtype = _REAL_OF[x.dtype]
    return Aval(tuple(shape), dtype)


_RULES: dict[str, Callable[..., Any]] = {
    "full": lambda shape, value, dtype: Aval(tuple(shape), dtype.np),
    "arange": lambda start, stop, step, dtype: Aval((len(range(start, stop, step)),), dtype.np),
    "random": lambda shape, distribution, dtype, key, counter: Aval(tuple(shape), dtype.np),
    "unary": _unary,
    "binary": _binary,
    "where": _where,
    "clamp": _same,
    "cast": lambda x, dtype: Aval(tuple(x.shape), dtype.np),
    "matmul": _matmul,
    "reduce": _reduce,
    "arg_reduce": lambda op, x, dim: Aval(_kept(tuple(x.shape), dim), _I64),
    "cumulative": lambda op, x, dim: Aval(tuple(x.shape), x.dtype),
    "argsort": lambda x, dim, descending: Aval(tuple(x.shape), _I64),
    "reshape": lambda x, shape: Aval(_resolve_reshape(tuple(x.shape), tuple(shape)), x.dtype),
    "permute": lambda x, axes: Aval(tuple(x.shape[a] for a in axes), x.dtype),
    "flip": _same,
    "expand": lambda x, shape: Aval(tuple(shape), x.dtype),
    "slice": _slice,
    "slice_assign": _same,
    "cat": _cat,
    "gather": lambda x, dim, indices: Aval(tuple(indices.shape), x.dtype),
    "scatter_add": _same,
    "select": _select,
    "select_add": _same,
    "argwhere": _argwhere,
    "relu": _same,
    "relu_backward": _same,
    "sigmoid": _same,
    "softmax": _same,
    "log_softmax": _same,
    "gelu": _same,
    "gelu_backward": _same,
    "layer_norm": _layer_norm,
    "layer_norm_backward": _layer_norm_backward,
    "rms_norm": _rms_norm,
    "rms_norm_backward": _rms_norm_backward,
    "linear": _linear,
    "linear_backward": _linear_backward,
    "attention": _attention,
    "attention_backward": _attention_backward,
    # The packed weight stays packed: the plan calls the wrapped backend's kernel (flex's
    # never materialises the float weight), its composite where that declines.
    "quantized_linear": lambda x, values, *rest: Aval(tuple(x.shape[:-1]) + (values.shape[0],), np.dtype(np.float32)),
    "quantized_conv": lambda x, values, *rest: Aval(
        (x.shape[0], values.shape[0]) + tuple(rest[-2]), np.dtype(np.float32)
    ),
    "adam_step_many": _adam_step_many,
    "lstm_sequence": _lstm_sequence,
    "lstm_sequence_backward": _lstm_sequence_backward,
    "gru_sequence": _gru_sequence,
    "gru_sequence_backward": _gru_sequence_backward,
    "mse_loss": lambda pred, target, mean: Aval((1,), pred.dtype),
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "conv_weight_grad": lambda x, grad, weight_shape, *rest: Aval(tuple(weight_shape), grad.dtype),
    "max_pool": _max_pool,
    "max_pool_with_indices": _max_pool_with_indices,
    "max_pool_backward": lambda grad, indices, input_shape: Aval(tuple(input_shape), grad.dtype),
    "avg_pool": _avg_pool,
    "avg_pool_backward": _to_input_shape,
    "adaptive_avg_pool": lambda x, output_size: Aval(tuple(x.shape[:2]) + tuple(output_size), x.dtype),
    "adaptive_avg_pool_backward": _to_input_shape,
    "embedding": lambda weights, indices: Aval(tuple(indices.shape) + (weights.shape[1],), weights.dtype),
    "embedding_backward": lambda grad, indices, n: Aval((n, grad.shape[-1]), grad.dtype),
    "linalg": _linalg,
    "complex_unary": _complex_unary,
    "complex": lambda real, imag: Aval(tuple(real.shape), _COMPLEX_OF[real.dtype]),
    "fft": _fft,
}

#: The backend calls a graph can record.
TRACEABLE = frozenset(_RULES) - {"argwhere"}

#: Calls with a dim argument: op -> (the dim's position, the position of the tensor
#: (for ``cat``, the list of tensors) whose dims it counts).
DIM_ARGS: dict[str, tuple[int, int]] = {
    "reduce": (2, 1),
    "arg_reduce": (2, 1),
    "cumulative": (2, 1),
    "argsort": (1, 0),
    "softmax": (1, 0),
    "log_softmax": (1, 0),
    "gather": (1, 0),
    "scatter_add": (1, 0),
    "select": (1, 0),
    "select_add": (1, 0),
    "cat": (1, 0),
}


def normalize_dim(op: str, args: tuple) -> tuple:
    """``args`` of a call in :data:`DIM_ARGS` with a negative dim counted from the front
    (the protocol takes numpy's negative dims; the shape rules and the lowerings index
    shapes with the dim, so a graph records it non-negative)."""
    at, of = DIM_ARGS[op]
    dim = args[at]
    if type(dim) is not int or dim >= 0:
        return args
    x = args[of][0] if op == "cat" else args[of]
    return (*args[:at], dim + len(x.shape), *args[at + 1 :])


def _resolve_reshape(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    if -1 not in new:
        return new
    known = math.prod(s for s in new if s != -1)
    total = math.prod(old)
    return tuple((total // known if known else 0) if s == -1 else s for s in new)


def infer(op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    """The abstract result of ``backend.<op>(*args, **kwargs)``."""
    rule = _RULES.get(op)
    if rule is None:
        raise NotTraceable(f"no shape rule for the backend call {op!r}")
    return rule(*args, **kwargs)

"""``flex``: the eager CPU backend. Its primitive is a numpy array."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ember.backend import linalg_host, philox
from ember.backend.base import Backend, Slices
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.flex import blas, malloc, native_gemm, native_random
from ember.backend.flex import cross_entropy as _cross_entropy
from ember.backend.flex import gelu as _gelu
from ember.backend.flex import grid_sample as _grid_sample
from ember.backend.flex import gru_cell as _gru_cell
from ember.backend.flex import layer_norm as _layer_norm
from ember.backend.flex import lstm_cell as _lstm_cell
from ember.backend.flex import relu as _relu
from ember.backend.flex import rnn_sequence as _rnn_sequence
from ember.backend.flex.adam import FlexAdam
from ember.backend.flex.attention import attention as _attention
from ember.backend.flex.attention import attention_backward as _attention_backward
from ember.backend.flex.attention import softmax_last_dim
from ember.backend.flex.memory import check_fits, memory_error
from ember.backend.flex.module_ops import FlexModuleOps
from ember.backend.flex.quant_conv import quantized_conv as _quantized_conv
from ember.backend.flex.quantized import ACTIVATIONS as QUANT_ACTIVATIONS
from ember.backend.flex.quantized import quantized_linear as _quantized_linear
from ember.backend.flex.quiet import quiet_reset, quiet_set, quietly
from ember.backend.flex.special import erf
from ember.backend.flex.spectral import FlexSpectral
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, LinalgOp, ReduceOp, UnaryOp
from ember.errors import IndexOutOfBoundsError

_F32 = np.dtype(np.float32)
_HALF = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
_NDARRAY = np.ndarray


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _recip(x):
    return np.reciprocal(x) if x.dtype.kind == "f" else 1.0 / x


def _log10(x):
    # numpy's float32 log10 is off by an ulp at most powers of ten (log10(100) = 2.0000002);
    # through float64 it is correctly rounded, as PyTorch's.
    if x.dtype == _F32:
        return np.log10(x.astype(np.float64)).astype(_F32)
    return np.log10(x)


def _sign(x):
    out = np.asarray(np.sign(x))
    if out.dtype.kind not in "biu":
        out[np.isnan(out)] = 0  # Burn's and PyTorch's sign of NaN
    return out


_UNARY: dict[UnaryOp, Callable[..., Any]] = {
    UnaryOp.NEG: np.negative,
    UnaryOp.ABS: np.abs,
    UnaryOp.EXP: np.exp,
    UnaryOp.LOG: np.log,
    UnaryOp.LOG1P: np.log1p,
    UnaryOp.EXPM1: np.expm1,
    UnaryOp.SQRT: np.sqrt,
    UnaryOp.RSQRT: _rsqrt,
    UnaryOp.RECIP: _recip,
    UnaryOp.SIN: np.sin,
    UnaryOp.COS: np.cos,
    UnaryOp.TAN: np.tan,
    UnaryOp.TANH: np.tanh,
    UnaryOp.SINH: np.sinh,
    UnaryOp.COSH: np.cosh,
    UnaryOp.ASIN: np.arcsin,
    UnaryOp.ACOS: np.arccos,
    UnaryOp.ATAN: np.arctan,
    UnaryOp.ERF: erf,
    UnaryOp.LOG2: np.log2,
    UnaryOp.LOG10: _log10,
    UnaryOp.EXP2: np.exp2,
    UnaryOp.ASINH: np.arcsinh,
    UnaryOp.ACOSH: np.arccosh,
    UnaryOp.ATANH: np.arctanh,
    UnaryOp.SIGN: _sign,
    UnaryOp.ROUND: np.round,
    UnaryOp.FLOOR: np.floor,
    UnaryOp.CEIL: np.ceil,
    UnaryOp.TRUNC: np.trunc,
    UnaryOp.SQUARE: np.square,
    UnaryOp.IS_NAN: np.isnan,
    UnaryOp.IS_INF: np.isinf,
    UnaryOp.IS_FINITE: np.isfinite,
    UnaryOp.LOGICAL_NOT: np.logical_not,
    UnaryOp.BITWISE_NOT: np.invert,
}
# Ops computed in float32 for float16/bfloat16 inputs (numpy or ml_dtypes lack them
# or lose accuracy), then rounded back.
_UPCAST_UNARY = frozenset(
    {
        UnaryOp.ERF,
        UnaryOp.EXP,
        UnaryOp.LOG,
        UnaryOp.LOG1P,
        UnaryOp.EXPM1,
        UnaryOp.SQRT,
        UnaryOp.RSQRT,
        UnaryOp.SIN,
        UnaryOp.COS,
        UnaryOp.TAN,
        UnaryOp.TANH,
        UnaryOp.SINH,
        UnaryOp.COSH,
        UnaryOp.ASIN,
        UnaryOp.ACOS,
        UnaryOp.ATAN,
        UnaryOp.LOG2,
        UnaryOp.LOG10,
        UnaryOp.EXP2,
        UnaryOp.ASINH,
        UnaryOp.ACOSH,
        UnaryOp.ATANH,
    }
)

_UPCAST_BINARY = frozenset({BinaryOp.POW, BinaryOp.ATAN2, BinaryOp.REMAINDER, BinaryOp.FLOOR_DIV, BinaryOp.COPYSIGN})

_BINARY = {
    BinaryOp.ADD: np.add,
    BinaryOp.SUB: np.subtract,
    BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: np.true_divide,
    BinaryOp.REMAINDER: np.remainder,
    BinaryOp.FLOOR_DIV: np.floor_divide,
    BinaryOp.POW: np.power,
    BinaryOp.ATAN2: np.arctan2,
    BinaryOp.COPYSIGN: np.copysign,
    BinaryOp.MAXIMUM: np.maximum,
    BinaryOp.MINIMUM: np.minimum,
    BinaryOp.EQ: np.equal,
    BinaryOp.NE: np.not_equal,
    BinaryOp.GT: np.greater,
    BinaryOp.GE: np.greater_equal,
    BinaryOp.LT: np.less,
    BinaryOp.LE: np.less_equal,
    BinaryOp.LOGICAL_AND: np.logical_and,
    BinaryOp.LOGICAL_OR: np.logical_or,
    BinaryOp.LOGICAL_XOR: np.logical_xor,
    BinaryOp.BITWISE_AND: np.bitwise_and,
    BinaryOp.BITWISE_OR: np.bitwise_or,
    BinaryOp.BITWISE_XOR: np.bitwise_xor,
    BinaryOp.LEFT_SHIFT: np.left_shift,
    BinaryOp.RIGHT_SHIFT: np.right_shift,
}

_REDUCE_UFUNC = {
    ReduceOp.SUM: np.add,
    ReduceOp.MEAN: np.add,
    ReduceOp.PROD: np.multiply,
    ReduceOp.MAX: np.maximum,
    ReduceOp.MIN: np.minimum,
    ReduceOp.ANY: np.logical_or,
    ReduceOp.ALL: np.logical_and,
}
_CUMULATIVE: dict[CumulativeOp, Callable[..., Any]] = {
    CumulativeOp.CUMSUM: np.cumsum,
    CumulativeOp.CUMPROD: np.cumprod,
    CumulativeOp.CUMMAX: np.maximum.accumulate,
    CumulativeOp.CUMMIN: np.minimum.accumulate,
    CumulativeOp.LOGCUMSUMEXP: np.logaddexp.accumulate,
}


def _arr(value) -> np.ndarray:
    """numpy returns scalars from ops on 0-d arrays; keep primitives arrays."""
    return value if type(value) is _NDARRAY else np.asarray(value)


def _index(slices: Slices) -> tuple[slice, ...]:
    """Normalised ``(start, stop, step)`` triples as numpy slices (a negative stop
    after a negative step means "through index 0")."""
    return tuple(slice(a, b if b >= 0 else None, s) for a, b, s in slices)


def _check_indices(op: str, indices: np.ndarray, size: int, dim: int) -> None:
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise IndexOutOfBoundsError(
            f"ember: {op}: index {int(bad)} is out of bounds for dim {dim} of size {size} "
            f"(indices must lie in [0, {size}))"
        )


_SELECT_MIN = 4096
_BITS_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bitwise_select(cond: np.ndarray, a, b, dtype: np.dtype) -> np.ndarray:
    """``np.where(cond, a, b)`` without branches: numpy's ``where`` branches per element
    and runs ~15x slower on random masks. The values are selected bit for bit through an
    all-ones/all-zeros mask, so NaNs, infinities and signed zeros pass through untouched."""
    bits = _BITS_OF_SIZE[dtype.itemsize]

    def as_bits(value):
        if type(value) is _NDARRAY:
            return (value if value.dtype == dtype else value.astype(dtype)).view(bits)
        return np.asarray(value, dtype=dtype).view(bits)

    mask = np.negative(cond.astype(bits))  # True -> all ones, False -> all zeros
    out = np.bitwise_and(as_bits(a), mask)
    b_bits = as_bits(b)
    if type(b) is _NDARRAY or b_bits != 0:  # +0.0 has no bits set: nothing to add
        np.invert(mask, out=mask)
        out = np.bitwise_or(out, np.bitwise_and(b_bits, mask))
    return out.view(dtype)


class FlexBackend(FlexSpectral, FlexModuleOps, Backend):
    """Eager CPU backend over numpy. float16/bfloat16 are stored narrow and computed
    in float32 where numpy would lose accuracy or lacks the kernel. Creating one sets
    numpy's BLAS thread count (``EMBER_NUM_THREADS``, default 1; see ``flex.blas``) and
    lets the C heap keep freed activation-sized blocks (``EMBER_MALLOC_TUNE``; see
    ``flex.malloc``)."""

    name = "flex"
    fusion_target = "llvm"  # compiled by llvmlite when it imports

    def __init__(self) -> None:
        blas.load()
        malloc.tune()
        self._adam = FlexAdam()

    # ------------------------------------------------------------------ data boundary
    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def to_numpy(self, x: np.ndarray) -> np.ndarray:
        return x

    # ------------------------------------------------------------------ creation
    def full(self, shape, value, dtype: DType) -> np.ndarray:
        np_dtype = dtype.np
        check_fits(shape, dtype, np_dtype.itemsize)
        try:
            return np.full(shape, value, dtype=np_dtype)
        except MemoryError:
            raise memory_error(tuple(shape), dtype, math.prod(shape) * np_dtype.itemsize) from None

    def arange(self, start, stop, step, dtype: DType) -> np.ndarray:
        check_fits((len(range(start, stop, step)),), dtype, dtype.itemsize)
        return np.arange(start, stop, step, dtype=dtype.np)

    def random(self, shape, distribution: Distribution, dtype: DType, key: int, counter: int) -> np.ndarray:
        check_fits(shape, dtype, max(dtype.itemsize, 4))
        drawn = native_random.random(tuple(shape), distribution, dtype, key, counter)
        if drawn is not None:
            return drawn
        return philox.sample(tuple(shape), distribution, dtype, key, counter)

    # ------------------------------------------------------------------ elementwise
    def unary(self, op: UnaryOp, x: np.ndarray) -> np.ndarray:
        token = quiet_set()
        try:
            if x.dtype in _HALF and op in _UPCAST_UNARY:
                return _arr(_UNARY[op](x.astype(_F32))).astype(x.dtype)
            return _arr(_UNARY[op](x))
        finally:
            quiet_reset(token)

    def binary(self, op: BinaryOp, a: np.ndarray, b) -> np.ndarray:
        token = quiet_set()
        try:
            if a.dtype in _HALF:
                if type(b) is not _NDARRAY or op in _UPCAST_BINARY:
                    # In float32 with the scalar unrounded (as PyTorch and cube), then
                    # rounded back: a scalar keeps the tensor's dtype.
                    b32 = b.astype(_F32) if type(b) is _NDARRAY else b
                    out = _arr(_BINARY[op](a.astype(_F32), b32))
                    return out.astype(a.dtype) if out.dtype.kind == "f" else out
                return _arr(_BINARY[op](a, b))
            return _arr(_BINARY[op](a, b))
        finally:
            quiet_reset(token)

    def where(self, cond, a, b) -> np.ndarray:
        dtype = a.dtype if type(a) is _NDARRAY else b.dtype
        if cond.size >= _SELECT_MIN and dtype.itemsize in _BITS_OF_SIZE and dtype != np.bool_:
            return _bitwise_select(cond, a, b, dtype)
        out = np.where(cond, a, b)
        return out if out.dtype == dtype else out.astype(dtype)

    def clamp(self, x, low, high) -> np.ndarray:
        if x.dtype in _HALF:  # bounds unrounded, as PyTorch
            return _arr(np.clip(x.astype(_F32), low, high)).astype(x.dtype)
        return _arr(np.clip(x, low, high))

    def cast(self, x, dtype: DType) -> np.ndarray:
        token = quiet_set()
        try:
            if x.dtype.kind == "c" and not dtype.is_complex:
                x = x.real  # complex to real keeps the real part (as PyTorch), without numpy's warning
            return x.astype(dtype.np)
        finally:
            quiet_reset(token)

    # ------------------------------------------------------------------ matmul
    def matmul(self, a, b) -> np.ndarray:
        token = quiet_set()
        try:
            if a.dtype in _HALF:
                return np.matmul(a.astype(_F32), b.astype(_F32)).astype(a.dtype)
            return np.matmul(a, b)
        finally:
            quiet_reset(token)

    def linalg(self, op: LinalgOp, inputs: tuple, options: tuple = ()) -> tuple:
        """numpy's LAPACK on the arrays themselves (no copy in or out)."""
        return linalg_host.HOST[op](*inputs, *options)

    # ------------------------------------------------------------------ reductions
    def reduce(self, op: ReduceOp, x, dim: int) -> np.ndarray:
        n = x.shape[dim]
        if op == ReduceOp.MEAN and n == 0:
            return np.full(x.shape[:dim] + (1,) + x.shape[dim + 1 :], np.nan, dtype=x.dtype)
        token = quiet_set()
        try:
            dtype = x.dtype
            if dtype in _HALF and op in (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.PROD):
                out = _REDUCE_UFUNC[op].reduce(x, axis=dim, keepdims=True, dtype=_F32)
                return (out / n if op == ReduceOp.MEAN else out).astype(dtype)
            if op == ReduceOp.MEAN:
                return np.true_divide(np.add.reduce(x, axis=dim, keepdims=True), n, dtype=dtype)
            if op in (ReduceOp.SUM, ReduceOp.PROD) and dtype.kind in "bui":
                return _REDUCE_UFUNC[op].reduce(
                    x, axis=dim, keepdims=True, dtype=dtype if dtype.kind != "b" else np.int64
                )
            return _arr(_REDUCE_UFUNC[op].reduce(x, axis=dim, keepdims=True))
        finally:
            quiet_reset(token)

    def arg_reduce(self, op: ArgReduceOp, x, dim: int) -> np.ndarray:
        fn = np.argmax if op == ArgReduceOp.ARGMAX else np.argmin
        return _arr(fn(x, axis=dim, keepdims=True)).astype(np.int64, copy=False)

    @quietly
    def cumulative(self, op: CumulativeOp, x, dim: int) -> np.ndarray:
        if x.dtype in _HALF and op in (CumulativeOp.CUMSUM, CumulativeOp.CUMPROD, CumulativeOp.LOGCUMSUMEXP):
            return _CUMULATIVE[op](x.astype(_F32), axis=dim).astype(x.dtype)
        if op in (CumulativeOp.CUMSUM, CumulativeOp.CUMPROD):
            return _CUMULATIVE[op](x, axis=dim, dtype=x.dtype)
        return _CUMULATIVE[op](x, axis=dim)

    def argsort(self, x, dim: int, descending: bool) -> np.ndarray:
        if x.dtype in _HALF:
            x = x.astype(_F32)
        if not descending:
            return np.argsort(x, axis=dim, kind="stable").astype(np.int64, copy=False)
        # Stable descending: sort the reversed tensor ascending, reverse back, remap.
        n = x.shape[dim]
        order = np.argsort(np.flip(x, dim), axis=dim, kind="stable")
        return (n - 1 - np.flip(order, dim)).astype(np.int64, copy=False)

    # ------------------------------------------------------------------ layout
    def reshape(self, x, shape) -> np.ndarray:
        return x.reshape(shape)

    def permute(self, x, axes) -> np.ndarray:
        return x.transpose(axes)

    def flip(self, x, axes) -> np.ndarray:
        return np.flip(x, axes)

    def expand(self, x, shape) -> np.ndarray:
        return np.broadcast_to(x, shape)

    def slice(self, x, slices: Slices) -> np.ndarray:
        return x[_index(slices)]

    def slice_assign(self, x, slices: Slices, value) -> np.ndarray:
        out = x.copy()
        out[_index(slices)] = value
        return out

    def cat(self, xs: Sequence[np.ndarray], dim: int) -> np.ndarray:
        return np.concatenate(xs, axis=dim)

    # ------------------------------------------------------------------ indexing
    def gather(self, x, dim: int, indices) -> np.ndarray:
        _check_indices("gather", indices, x.shape[dim], dim)
        if indices.shape[:dim] + indices.shape[dim + 1 :] != x.shape[:dim] + x.shape[dim + 1 :]:
            x = x[tuple(slice(0, n) for n in indices.shape[:dim])]
            x = x[(slice(None),) * (dim + 1) + tuple(slice(0, n) for n in indices.shape[dim + 1 :])]
        return np.take_along_axis(x, indices, axis=dim)

    def scatter_add(self, x, dim: int, indices, values) -> np.ndarray:
        _check_indices("scatter", indices, x.shape[dim], dim)
        out = x.copy()
        index = list(np.ogrid[tuple(slice(0, n) for n in indices.shape)])
        index[dim] = indices
        np.add.at(out, tuple(index), values)
        return out

    def select(self, x, dim: int, indices) -> np.ndarray:
        _check_indices("select", indices, x.shape[dim], dim)
        return np.take(x, indices, axis=dim)

    def select_add(self, x, dim: int, indices, values) -> np.ndarray:
        _check_indices("select_assign", indices, x.shape[dim], dim)
        out = x.copy()
        np.add.at(out, (slice(None),) * dim + (indices,), values)
        return out

    def argwhere(self, x) -> np.ndarray:
        return np.argwhere(x).astype(np.int64, copy=False)

    # ------------------------------------------------------------------ fused
    def relu(self, x):
        return np.maximum(x, x.dtype.type(0))

    def relu_backward(self, out, grad):
        return _relu.relu_backward(out, grad)

    def sigmoid(self, x):
        if x.dtype in _HALF:
            return self.sigmoid(x.astype(_F32)).astype(x.dtype)
        # exp of a non-positive argument only: no overflow for large |x|.
        e = np.exp(-np.abs(x))
        positive, negative = 1.0 / (1.0 + e), e / (1.0 + e)
        return _arr(self.where(x >= 0, positive, negative).astype(x.dtype, copy=False))

    @quietly
    def softmax(self, x, dim: int):
        if x.dtype in _HALF:
            return self.softmax(x.astype(_F32), dim).astype(x.dtype)
        if x.dtype == _F32 and dim == x.ndim - 1 and x.size:
            out = softmax_last_dim(x)
            if out is not None:
                return out
        e = np.exp(x - x.max(axis=dim, keepdims=True))
        e /= e.sum(axis=dim, keepdims=True)
        return e

    @quietly
    def log_softmax(self, x, dim: int):
        if x.dtype in _HALF:
            return self.log_softmax(x.astype(_F32), dim).astype(x.dtype)
        shifted = x - x.max(axis=dim, keepdims=True)
        shifted -= np.log(np.exp(shifted).sum(axis=dim, keepdims=True))
        return shifted

    def linear(self, x, weight, bias):
        if x.dtype in _HALF:
            return NotImplemented
        token = quiet_set()  # inline rather than @quietly: a layer's kernel on every step
        try:
            # one [rows, d_in] @ [d_in, d_out] GEMM instead of one per leading index
            rows = x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x
            out = native_gemm.matmul(rows, weight, bias)
            if out is not None:
                return out if x.ndim == 2 else out.reshape(x.shape[:-1] + weight.shape[-1:])
            out = np.matmul(rows, weight)
            if x.ndim > 2:
                out = out.reshape(x.shape[:-1] + weight.shape[-1:])
            if bias is not None:
                out += bias
            return out
        finally:
            quiet_reset(token)

    def quantized_linear(
        self, x, values, scales, zero_points, bias, input_scale, value, group, activations, activation=""
    ):  # fmt: skip
        if x.dtype != np.float32 or activation not in QUANT_ACTIVATIONS:
            return NotImplemented
        return _quantized_linear(
            x, values, scales, zero_points, bias, input_scale, value, group, activations, activation=activation
        )

    def quantized_conv(
        self, x, values, scales, zero_points, bias, input_scale, value, group, activations, *geometry, activation=""
    ):  # fmt: skip
        """Compiled im2col, then the packed-weight GEMM (:mod:`.quant_conv`; ``geometry``:
        kernel, stride, padding pairs, dilation, output size, groups); ``NotImplemented``
        where it does not apply (the composite then runs)."""
        if activation not in QUANT_ACTIVATIONS:
            return NotImplemented
        y = _quantized_conv(
            x, values, scales, zero_points, bias, input_scale, value, group, activations, *geometry, activation
        )
        return NotImplemented if y is None else y

    def linear_backward(self, x, weight, grad, need_x, need_weight, need_bias):
        if grad.dtype in _HALF:
            return NotImplemented
        token = quiet_set()  # inline rather than @quietly: a layer's kernel on every step
        try:
            g2 = grad if grad.ndim == 2 else grad.reshape(-1, grad.shape[-1])
            gx = None
            if need_x:
                gx = native_gemm.matmul(g2, weight.T)
                gx = (gx if gx is not None else np.matmul(g2, weight.T)).reshape(grad.shape[:-1] + weight.shape[:1])
            gw = None
            if need_weight:
                x2 = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])
                gw = native_gemm.matmul(x2.T, g2)
                gw = gw if gw is not None else np.matmul(x2.T, g2)
            gb = np.add.reduce(g2, axis=0) if need_bias else None
            return gx, gw, gb
        finally:
            quiet_reset(token)

    def adam_step_many(self, params, grads, moments_1, moments_2, max_moments_2, **options):
        return self._adam.step_many(params, grads, moments_1, moments_2, max_moments_2, **options)

    def attention(self, query, key, value, mask, bias, fill, scale, causal, keep):
        return _attention(query, key, value, mask, bias, fill, scale, causal, keep)

    def attention_backward(
        self, query, key, value, probs, mask, keep, grad, scale, causal, need_query, need_key, need_value, need_scores
    ):
        return _attention_backward(
            query, key, value, probs, mask, keep, grad, scale, causal, need_query, need_key, need_value, need_scores
        )

    def mse_loss(self, pred, target, mean: bool):
        if pred.dtype in _HALF:
            return NotImplemented
        token = quiet_set()  # inline rather than @quietly: a loss kernel on every step
        try:
            diff = (pred - target).reshape(-1)
            total = np.dot(diff, diff)
            if mean:
                total = total / diff.size if diff.size else np.nan
            return np.array([total], dtype=pred.dtype)
        finally:
            quiet_reset(token)

    def gelu(self, x):
        return _gelu.gelu(x)

    def gelu_backward(self, x, grad):
        return _gelu.gelu_backward(x, grad)

    def lstm_cell(self, gates, c):
        return _lstm_cell.lstm_cell(gates, c)

    def lstm_cell_backward(self, gates, c, c_new, grad_h, grad_c):
        return _lstm_cell.lstm_cell_backward(gates, c, c_new, grad_h, grad_c)

    def gru_cell(self, xp, hp, h):
        return _gru_cell.gru_cell(xp, hp, h)

    def gru_cell_backward(self, xp, hp, h, grad):
        return _gru_cell.gru_cell_backward(xp, hp, h, grad)

    def lstm_sequence(self, proj, w_hh, h0, c0, valid, reverse):
        return _rnn_sequence.lstm_sequence(proj, w_hh, h0, c0, valid, reverse)

    def lstm_sequence_backward(self, w_hh, valid, reverse, h_in, c_in, c_n, z, grad_y, grad_h, grad_c):
        return _rnn_sequence.lstm_sequence_backward(w_hh, valid, reverse, h_in, c_in, c_n, z, grad_y, grad_h, grad_c)

    def gru_sequence(self, proj, w_hh, b_hh, h0, valid, reverse):
        return _rnn_sequence.gru_sequence(proj, w_hh, b_hh, h0, valid, reverse)

    def gru_sequence_backward(self, w_hh, valid, reverse, proj, h_in, hp, grad_y, grad_h):
        return _rnn_sequence.gru_sequence_backward(w_hh, valid, reverse, proj, h_in, hp, grad_y, grad_h)

    def layer_norm(self, x, gamma, beta, epsilon):
        return _layer_norm.layer_norm(x, gamma, beta, epsilon)

    def layer_norm_backward(self, x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta):
        return _layer_norm.layer_norm_backward(x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta)

    def rms_norm(self, x, gamma, epsilon):
        return _layer_norm.rms_norm(x, gamma, epsilon)

    def rms_norm_backward(self, x, gamma, rstd, grad, need_x, need_gamma):
        return _layer_norm.rms_norm_backward(x, gamma, rstd, grad, need_x, need_gamma)

    def grid_sample(self, x, grid, mode, padding_mode, align_corners):
        return _grid_sample.grid_sample(x, grid, mode, padding_mode, align_corners)

    def grid_sample_backward(self, grad, x, grid, mode, padding_mode, align_corners, need_x, need_grid):
        return _grid_sample.grid_sample_backward(grad, x, grid, mode, padding_mode, align_corners, need_x, need_grid)

    def cross_entropy(self, logits, targets):
        return _cross_entropy.cross_entropy(logits, targets)

    def cross_entropy_backward(self, log_probs, targets, grad):
        return _cross_entropy.cross_entropy_backward(log_probs, targets, grad)

"""Functional module ops (Burn's ``burn::tensor::module``): the layer math, written
once over the tensor ops, using a backend's fused kernel when it has one.

Convolution and pooling take channels-first input ``[batch, channels, *spatial]``
(an unbatched ``[channels, *spatial]`` works too). Per-dim arguments (``stride``,
``dilation``, ``kernel_size``...) are an int or a tuple with one int per spatial dim.
``padding`` is an int, a tuple of ints (symmetric per dim), a tuple of
``(before, after)`` pairs, ``"valid"`` (none) or ``"same"`` (the output keeps
``ceil(size / stride)``; an odd total puts the extra element at the end, as Burn and
ONNX do).

>>> from ember import Tensor
>>> from ember.tensor.layer_ops import conv2d, max_pool2d
>>> x = Tensor.ones([1, 1, 4, 4])
>>> conv2d(x, Tensor.ones([2, 1, 3, 3]), padding="same").dims()
[1, 2, 4, 4]
>>> max_pool2d(x, 2).dims()
[1, 1, 2, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.backend.distribution import Distribution
from ember.backend.module_ops import conv_output_size, conv_transpose_output_size, pool_output_size
from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor import autocast
from ember.tensor.checks import FLOAT_NP, INT_NP, check_device
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor

Pairs = tuple[tuple[int, int], ...]
IntOrTuple = int | Sequence[int]
Padding = str | int | Sequence[int] | Sequence[Sequence[int]]
Pads = int | Sequence[int] | Sequence[Sequence[int]]  # Padding without the "same"/"valid" names


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight + bias`` with ``weight`` of shape ``[d_input, d_output]`` (Burn's
    layout) and ``bias`` of shape ``[d_output]``; ``x`` is ``[..., d_input]``."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: linear: the input must be a Tensor, got {type(x).__name__}")
    if autocast.ACTIVE:
        x, weight, bias = autocast.cast_inputs("linear", x, weight, bias)
    wshape = weight._primitive.shape
    xshape = x._primitive.shape
    if len(wshape) != 2:
        raise ShapeError(f"ember: linear: the weight must have rank 2 [d_input, d_output], got {list(wshape)}")
    if not xshape or xshape[-1] != wshape[0]:
        raise ShapeError(
            f"ember: linear: the input's last dim must be d_input={wshape[0]}, got input shape {list(xshape)}; "
            f"reshape the input or build the layer with d_input={xshape[-1] if xshape else '?'}"
        )
    d = x._device
    if weight._device is not d:
        check_device("linear", x, weight)
    if bias is not None:
        if bias._primitive.shape != (wshape[1],):
            raise ShapeError(
                f"ember: linear: the bias must have shape [{wshape[1]}], got {list(bias._primitive.shape)}"
            )
        if bias._device is not d:
            check_device("linear", x, bias)
    if x._primitive.dtype != weight._primitive.dtype:
        x = x.cast(weight.dtype)
    b = None if bias is None else bias._primitive
    if len(xshape) > 1:
        return Tensor(fused(FusedOp.LINEAR, d, x._primitive, weight._primitive, b), d)
    # A vector goes in as one row: the backends' linear, its backward and the fusion's
    # decomposition take matmul operands of rank >= 2.
    rows = x.reshape([1, xshape[0]])
    return Tensor(fused(FusedOp.LINEAR, d, rows._primitive, weight._primitive, b), d).reshape([wshape[1]])


# ---------------------------------------------------------------------- argument checks
def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and hasattr(value, "__index__")


def _per_dim(op: str, name: str, value: Any, rank: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``rank`` ints, each ``>= minimum``, as a tuple."""
    values = (value,) * rank if _is_int(value) else value
    if (
        isinstance(values, str)
        or not isinstance(values, Sequence)
        or len(values) != rank
        or not all(_is_int(v) for v in values)
    ):
        raise ValueRangeError(f"ember: {op}: {name} must be an int or {rank} ints, got {value!r}")
    values = tuple(int(v) for v in values)
    if any(v < minimum for v in values):
        raise ValueRangeError(f"ember: {op}: {name} must be >= {minimum}, got {value!r}")
    return values


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """The ``(before, after)`` padding that gives ``ceil(size / stride)`` outputs; an odd
    total puts the extra element after (Burn's and ONNX's ``SAME_UPPER``)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _padding(
    op: str,
    padding: Any,
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
) -> Pairs:
    rank = len(spatial)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return ((0, 0),) * rank
        if mode == "same":
            return tuple(same_padding(*a) for a in zip(spatial, kernel, stride, dilation))
        raise ValueRangeError(
            f"ember: {op}: padding must be 'valid', 'same', an int or per-dim values, got {padding!r}"
        )
    if _is_int(padding):
        pairs = ((int(padding), int(padding)),) * rank
    elif isinstance(padding, Sequence) and len(padding) == rank and all(_is_int(p) for p in padding):
        pairs = tuple((int(p), int(p)) for p in padding)
    elif (
        isinstance(padding, Sequence)
        and len(padding) == rank
        and all(isinstance(p, Sequence) and len(p) == 2 and all(_is_int(v) for v in p) for p in padding)
    ):
        pairs = tuple((int(a), int(b)) for a, b in padding)
    else:
        raise ValueRangeError(
            f"ember: {op}: padding must be 'valid', 'same', an int, {rank} ints or {rank} (before, after) "
            f"pairs, got {padding!r}"
        )
    if any(a < 0 or b < 0 for a, b in pairs):
        raise ValueRangeError(f"ember: {op}: padding must be >= 0, got {padding!r}")
    return pairs


def _input(op: str, x: Any, rank: int) -> tuple[Tensor, bool]:
    """``x`` as a batched float tensor, and whether it was unbatched."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: {op}: the input must be a Tensor, got {type(x).__name__}")
    names = ["length"] if rank == 1 else ["height", "width"] if rank == 2 else ["depth", "height", "width"]
    layout = ", ".join(["batch", "channels", *names])
    if x._primitive.dtype not in FLOAT_NP:
        raise DTypeError(f"ember: {op}: the input must be a float tensor, got {x.dtype}; convert with .float()")
    if x.rank == rank + 1:
        return x.unsqueeze_dim(0), True
    if x.rank != rank + 2:
        raise ShapeError(
            f"ember: {op}: the input must have rank {rank + 2} [{layout}] (or {rank + 1} without the batch), "
            f"got shape {x.dims()}"
        )
    return x, False


def _out(y: Any, x: Tensor, unbatched: bool) -> Tensor:
    out = Tensor(y, x._device)
    return out.squeeze_dim(0) if unbatched else out


def _weight(op: str, x: Tensor, weight: Any, bias: Any, rank: int) -> tuple[Tensor, Tensor, Tensor | None]:
    if not isinstance(weight, Tensor):
        raise DTypeError(f"ember: {op}: the weight must be a Tensor, got {type(weight).__name__}")
    if weight._primitive.dtype not in FLOAT_NP:
        raise DTypeError(f"ember: {op}: the weight must be a float tensor, got {weight.dtype}")
    if autocast.ACTIVE:
        kind = "conv_transpose" if op.startswith("conv_transpose") else "conv"
        x, weight, bias = autocast.cast_inputs(kind, x, weight, bias)
    if weight.rank != rank + 2:
        raise ShapeError(f"ember: {op}: the weight must have rank {rank + 2}, got shape {weight.dims()}")
    if weight._device is not x._device:
        check_device(op, x, weight)
    if x._primitive.dtype != weight._primitive.dtype:
        x = x.cast(weight.dtype)
    if bias is not None:
        if not isinstance(bias, Tensor):
            raise DTypeError(f"ember: {op}: the bias must be a Tensor or None, got {type(bias).__name__}")
        if bias._device is not x._device:
            check_device(op, x, bias)
        if bias._primitive.dtype != weight._primitive.dtype:
            bias = bias.cast(weight.dtype)
    return x, weight, bias


def _groups(op: str, groups: Any) -> int:
    if not _is_int(groups) or int(groups) < 1:
        raise ValueRangeError(f"ember: {op}: groups must be an int >= 1, got {groups!r}")
    return int(groups)


def _check_bias(op: str, bias: Tensor | None, channels: int) -> None:
    if bias is not None and bias._primitive.shape != (channels,):
        raise ShapeError(
            f"ember: {op}: the bias must have shape [{channels}] (one per output channel), got {bias.dims()}"
        )


def _check_output(op: str, x: Tensor, out: tuple[int, ...], what: str) -> None:
    if any(o < 1 for o in out):
        raise ShapeError(
            f"ember: {op}: {what} for input shape {x.dims()} (output size {list(out)}); use a smaller kernel, "
            "more padding, a smaller dilation or a larger input"
        )


# ---------------------------------------------------------------------- convolution
def _conv(
    op: str, rank: int, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any
) -> Tensor:
    x, unbatched = _input(op, x, rank)
    x, weight, bias = _weight(op, x, weight, bias, rank)
    groups = _groups(op, groups)
    stride = _per_dim(op, "stride", stride, rank, 1)
    dilation = _per_dim(op, "dilation", dilation, rank, 1)
    c_out, c_per_group = weight._primitive.shape[:2]
    kernel = tuple(weight._primitive.shape[2:])
    channels = x._primitive.shape[1]
    if channels % groups or c_out % groups:
        raise ShapeError(
            f"ember: {op}: channels must be divisible by groups={groups}: the input has {channels} channels "
            f"and the weight {list(weight._primitive.shape)} has {c_out} output channels"
        )
    if channels != c_per_group * groups:
        raise ShapeError(
            f"ember: {op}: the input has {channels} channels but the weight {list(weight._primitive.shape)} expects "
            f"{c_per_group * groups} ({c_per_group} per group x {groups} groups); input shape {x.dims()}"
        )
    _check_bias(op, bias, c_out)
    spatial = tuple(x._primitive.shape[2:])
    pads = _padding(op, padding, spatial, kernel, stride, dilation)
    out = tuple(conv_output_size(*a) for a in zip(spatial, kernel, stride, pads, dilation))
    _check_output(op, x, out, f"the kernel {list(kernel)} (dilation {list(dilation)}) is larger than the padded input")
    y = x._device._backend.conv(
        x._primitive, weight._primitive, None if bias is None else bias._primitive, stride, pads, dilation, groups
    )
    return _out(y, x, unbatched)


def conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """1-d convolution: ``x`` ``[batch, channels_in, length]``, ``weight``
    ``[channels_out, channels_in / groups, kernel]``, ``bias`` ``[channels_out]``."""
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution: ``x`` ``[batch, channels_in, height, width]``, ``weight``
    ``[channels_out, channels_in / groups, kernel_h, kernel_w]``, ``bias`` ``[channels_out]``."""
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


def conv3d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """3-d convolution: ``x`` ``[batch, channels_in, depth, height, width]``."""
    return _conv("conv3d", 3, x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(
    op: str,
    rank: int,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    output_padding: Any,
    dilation: Any,
    groups: Any,
) -> Tensor:
    x, unbatched = _input(op, x, rank)
    x, weight, bias = _weight(op, x, weight, bias, rank)
    groups = _groups(op, groups)
    stride = _per_dim(op, "stride", stride, rank, 1)
    dilation = _per_dim(op, "dilation", dilation, rank, 1)
    output_padding = _per_dim(op, "output_padding", output_padding, rank, 0)
    if isinstance(padding, str):
        raise ValueRangeError(f"ember: {op}: padding must be an int or per-dim values, got {padding!r}")
    pads = _padding(op, padding, tuple(x._primitive.shape[2:]), (1,) * rank, stride, dilation)
    c_in, c_per_group = weight._primitive.shape[:2]
    kernel = tuple(weight._primitive.shape[2:])
    channels = x._primitive.shape[1]
    if channels != c_in:
        raise ShapeError(
            f"ember: {op}: the input has {channels} channels but the weight {list(weight._primitive.shape)} "
            f"[channels_in, channels_out / groups, *kernel] expects {c_in}; input shape {x.dims()}"
        )
    if c_in % groups:
        raise ShapeError(f"ember: {op}: channels_in={c_in} must be divisible by groups={groups}")
    for op_, s, d in zip(output_padding, stride, dilation):
        if op_ >= max(s, d):
            raise ValueRangeError(
                f"ember: {op}: output_padding {list(output_padding)} must be smaller than the stride "
                f"{list(stride)} or the dilation {list(dilation)} in each dim"
            )
    _check_bias(op, bias, c_per_group * groups)
    out = tuple(
        conv_transpose_output_size(*a)
        for a in zip(x._primitive.shape[2:], kernel, stride, pads, output_padding, dilation)
    )
    _check_output(op, x, out, f"the padding {list(pads)} removes the whole output")
    y = x._device._backend.conv_transpose(
        x._primitive,
        weight._primitive,
        None if bias is None else bias._primitive,
        stride,
        pads,
        output_padding,
        dilation,
        groups,
    )
    return _out(y, x, unbatched)


def conv_transpose1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Pads = 0,
    output_padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """1-d transposed convolution: ``weight`` ``[channels_in, channels_out / groups, kernel]``;
    output length ``(length - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1 + output_padding``."""
    return _conv_transpose("conv_transpose1d", 1, x, weight, bias, stride, padding, output_padding, dilation, groups)


def conv_transpose2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Pads = 0,
    output_padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """2-d transposed convolution: ``weight`` ``[channels_in, channels_out / groups, kernel_h, kernel_w]``."""
    return _conv_transpose("conv_transpose2d", 2, x, weight, bias, stride, padding, output_padding, dilation, groups)


def conv_transpose3d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrTuple = 1,
    padding: Pads = 0,
    output_padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
) -> Tensor:
    """3-d transposed convolution."""
    return _conv_transpose("conv_transpose3d", 3, x, weight, bias, stride, padding, output_padding, dilation, groups)


# ---------------------------------------------------------------------- pooling
def _pool_args(
    op: str, rank: int, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool
) -> tuple[Tensor, bool, tuple, tuple, Pairs, tuple, tuple]:
    x, unbatched = _input(op, x, rank)
    kernel = _per_dim(op, "kernel_size", kernel_size, rank, 1)
    stride = kernel if stride is None else _per_dim(op, "stride", stride, rank, 1)
    dilation = _per_dim(op, "dilation", dilation, rank, 1)
    spatial = tuple(x._primitive.shape[2:])
    pads = _padding(op, padding, spatial, kernel, stride, dilation)
    for (lo, hi), k, d in zip(pads, kernel, dilation):
        half = (d * (k - 1) + 1) // 2
        if lo > half or hi > half:
            raise ValueRangeError(
                f"ember: {op}: padding {list(pads)} must be at most half the kernel {list(kernel)} "
                f"(dilation {list(dilation)}) in each dim, so that every window holds an input element"
            )
    out = tuple(pool_output_size(*a, bool(ceil_mode)) for a in zip(spatial, kernel, stride, pads, dilation))
    _check_output(op, x, out, f"the kernel {list(kernel)} (dilation {list(dilation)}) is larger than the padded input")
    return x, unbatched, kernel, stride, pads, dilation, out


def _int_pool(x: Any) -> Any:
    """For an int input: the float dtype that pools it exactly (float64, or float32 on
    devices without it), else ``None``."""
    if not isinstance(x, Tensor) or x._primitive.dtype not in INT_NP:
        return None
    return "float32" if x.device.backend_name == "cube" else "float64"


def _max_pool(op: str, rank: int, x, kernel_size, stride, padding, dilation, ceil_mode, with_indices: bool) -> Any:
    work = _int_pool(x)
    if work is not None:  # ints: pooled in a float that holds them exactly (|x| < 2^53, 2^24 on cube)
        out = _max_pool(op, rank, x.cast(work), kernel_size, stride, padding, dilation, ceil_mode, with_indices)
        return (out[0].cast(x.dtype), out[1]) if with_indices else out.cast(x.dtype)
    x, unbatched, kernel, stride, pads, dilation, _ = _pool_args(
        op, rank, x, kernel_size, stride, padding, dilation, ceil_mode
    )
    b = x._device._backend
    if not with_indices:
        return _out(b.max_pool(x._primitive, kernel, stride, pads, dilation, bool(ceil_mode)), x, unbatched)
    y, indices = b.max_pool_with_indices(x._primitive, kernel, stride, pads, dilation, bool(ceil_mode))
    return _out(y, x, unbatched), _out(indices, x, unbatched)


def max_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """The maximum over windows of ``x`` ``[batch, channels, length]``; ``stride``
    defaults to the kernel size; padding never wins."""
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode, False)


def max_pool1d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """:func:`max_pool1d` and the int64 input position of each maximum."""
    return _max_pool("max_pool1d", 1, x, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """The maximum over windows of ``x`` ``[batch, channels, height, width]``."""
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, dilation, ceil_mode, False)


def max_pool2d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """:func:`max_pool2d` and the int64 flat position (``row * width + col``) of each maximum."""
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, dilation, ceil_mode, True)


def _avg_pool(op: str, rank: int, x, kernel_size, stride, padding, count_include_pad, ceil_mode) -> Tensor:
    work = _int_pool(x)
    if work is not None:  # ints: the mean truncated toward zero, as PyTorch
        out = _avg_pool(op, rank, x.cast(work), kernel_size, stride, padding, count_include_pad, ceil_mode)
        return out.trunc().cast(x.dtype)
    x, unbatched, kernel, stride, pads, _, _ = _pool_args(op, rank, x, kernel_size, stride, padding, 1, ceil_mode)
    y = x._device._backend.avg_pool(x._primitive, kernel, stride, pads, bool(count_include_pad), bool(ceil_mode))
    return _out(y, x, unbatched)


def avg_pool1d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    count_include_pad: bool = True,
    ceil_mode: bool = False,
) -> Tensor:
    """The mean over windows of ``x`` ``[batch, channels, length]``; the divisor counts
    padded positions when ``count_include_pad``."""
    return _avg_pool("avg_pool1d", 1, x, kernel_size, stride, padding, count_include_pad, ceil_mode)


def avg_pool2d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    count_include_pad: bool = True,
    ceil_mode: bool = False,
) -> Tensor:
    """The mean over windows of ``x`` ``[batch, channels, height, width]``."""
    return _avg_pool("avg_pool2d", 2, x, kernel_size, stride, padding, count_include_pad, ceil_mode)


def _adaptive_avg_pool(op: str, rank: int, x: Any, output_size: Any) -> Tensor:
    x, unbatched = _input(op, x, rank)
    out = _per_dim(op, "output_size", output_size, rank, 1)
    y = x._device._backend.adaptive_avg_pool(x._primitive, out)
    return _out(y, x, unbatched)


def adaptive_avg_pool1d(x: Tensor, output_size: IntOrTuple) -> Tensor:
    """Average pooling of ``[batch, channels, length]`` to ``output_size`` windows
    (PyTorch's window bounds ``floor(i * L / out)`` to ``ceil((i + 1) * L / out)``)."""
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, x, output_size)


def adaptive_avg_pool2d(x: Tensor, output_size: IntOrTuple) -> Tensor:
    """Average pooling of ``[batch, channels, height, width]`` to ``output_size``."""
    return _adaptive_avg_pool("adaptive_avg_pool2d", 2, x, output_size)


# ---------------------------------------------------------------------- embedding, dropout
def embedding(weights: Tensor, indices: Tensor) -> Tensor:
    """The rows of ``weights`` ``[n_embedding, d_model]`` at the int ``indices`` (any
    shape): ``[*indices.shape, d_model]``."""
    if not isinstance(weights, Tensor) or not isinstance(indices, Tensor):
        raise DTypeError("ember: embedding: weights and indices must be Tensors")
    if weights.rank != 2:
        raise ShapeError(f"ember: embedding: the weights must have rank 2 [n_embedding, d_model], got {weights.dims()}")
    if indices._primitive.dtype not in INT_NP:
        raise DTypeError(
            f"ember: embedding: the indices must be an int tensor, got {indices.dtype}; convert with .int()"
        )
    if indices._device is not weights._device:
        if indices._device.inner() == weights._device.inner():
            indices = indices.to_device(weights._device)
        else:
            check_device("embedding", weights, indices)
    if indices._primitive.dtype.itemsize != 8:
        indices = indices.int()
    return Tensor(weights._device._backend.embedding(weights._primitive, indices._primitive), weights._device)


def dropout(x: Tensor, prob: float, training: bool = True) -> Tensor:
    """Zeroes each element with probability ``prob`` (drawn with the device's
    generator) and scales the rest by ``1 / (1 - prob)``; the identity when not
    ``training`` or when ``prob`` is 0."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: dropout: the input must be a Tensor, got {type(x).__name__}")
    if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0.0 <= prob <= 1.0:
        raise ValueRangeError(f"ember: dropout: prob must lie in [0, 1], got {prob!r}")
    if not training or prob == 0.0:
        return x
    x = x.float()
    if prob == 1.0:
        return x.mul_scalar(0.0)
    keep = Tensor.random(x._primitive.shape, Distribution.bernoulli(1.0 - prob), device=x._device, dtype=x.dtype)
    return x.mul(keep.mul_scalar(1.0 / (1.0 - prob)))

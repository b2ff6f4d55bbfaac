"""Sliding blocks: ``unfold4d`` (Burn's name; PyTorch's ``nn.functional.unfold``, "im2col")
and its adjoint ``fold`` ("col2im").

``unfold4d`` turns ``[batch, channels, height, width]`` into ``[batch, channels *
kh * kw, blocks]``: column ``l`` holds block ``l`` (row-major over the block grid),
channel-major then kernel row then kernel column, as PyTorch orders them. It is one
strided slice per kernel position of the zero-padded input, stacked: no arithmetic,
so exact, and differentiable through ``slice``. ``fold`` sums each column back into
place (overlaps add), one strided slice-add per kernel position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.tensor import Tensor


def _pair(name: str, value: Any, minimum: int) -> tuple[int, int]:
    values = (value, value) if isinstance(value, int) else tuple(value)
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values):
        raise ValueRangeError(f"ember: unfold4d: {name} must be an int >= {minimum} or two of them, got {value!r}")
    return values


def _grid(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def unfold4d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """The sliding ``kernel_size`` blocks of ``x`` ``[batch, channels, height, width]`` as
    columns: ``[batch, channels * kh * kw, blocks]``."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: unfold4d: the input must be a Tensor, got {type(x).__name__}")
    unbatched = x.rank == 3
    if unbatched:
        x = x.unsqueeze_dim(0)
    if x.rank != 4:
        raise ShapeError(f"ember: unfold4d: the input must be [batch, channels, height, width], got {x.dims()}")
    (kh, kw), (sh, sw) = _pair("kernel_size", kernel_size, 1), _pair("stride", stride, 1)
    (ph, pw), (dh, dw) = _pair("padding", padding, 0), _pair("dilation", dilation, 1)
    n, c, h, w = x.dims()
    oh, ow = _grid(h, kh, sh, ph, dh), _grid(w, kw, sw, pw, dw)
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"ember: unfold4d: the kernel ({kh}, {kw}) (dilation ({dh}, {dw})) does not fit the padded input {x.dims()}"
        )
    padded = x.pad((pw, pw, ph, ph)) if ph or pw else x
    blocks = []
    for i in range(kh):
        for j in range(kw):
            rows = (i * dh, i * dh + (oh - 1) * sh + 1, sh)
            cols = (j * dw, j * dw + (ow - 1) * sw + 1, sw)
            blocks.append(padded.slice([None, None, rows, cols]))
    out = Tensor.stack(blocks, 2).reshape([n, c * kh * kw, oh * ow])
    return out.squeeze_dim(0) if unbatched else out


def fold(
    x: Tensor,
    output_size: int | Sequence[int],
    kernel_size: int | Sequence[int],
    dilation: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    stride: int | Sequence[int] = 1,
) -> Tensor:
    """The adjoint of :func:`unfold4d` (``torch.nn.functional.fold``): columns
    ``[batch, channels * kh * kw, blocks]`` summed back into ``[batch, channels, *output_size]``."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: fold: the input must be a Tensor, got {type(x).__name__}")
    unbatched = x.rank == 2
    if unbatched:
        x = x.unsqueeze_dim(0)
    (h, w), (kh, kw) = _pair("output_size", output_size, 1), _pair("kernel_size", kernel_size, 1)
    (sh, sw), (ph, pw), (dh, dw) = (
        _pair("stride", stride, 1),
        _pair("padding", padding, 0),
        _pair("dilation", dilation, 1),
    )
    oh, ow = _grid(h, kh, sh, ph, dh), _grid(w, kw, sw, pw, dw)
    if x.rank != 3 or x.dims()[1] % (kh * kw) or x.dims()[2] != oh * ow:
        raise ShapeError(
            f"ember: fold: the input must be [batch, channels * {kh * kw}, {oh * ow}] for output {h}x{w}, got {x.dims()}"
        )
    n, ckk, _ = x.dims()
    c = ckk // (kh * kw)
    cols = x.reshape([n, c, kh, kw, oh, ow])
    out = Tensor.zeros([n, c, h + 2 * ph, w + 2 * pw], device=x.device, dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            region = [None, None, (i * dh, i * dh + (oh - 1) * sh + 1, sh), (j * dw, j * dw + (ow - 1) * sw + 1, sw)]
            out = out.slice_assign(region, out.slice(region).add(cols.select_dim(2, i).select_dim(2, j)))
    out = out.slice([None, None, (ph, ph + h), (pw, pw + w)])
    return out.squeeze_dim(0) if unbatched else out

"""Max unpooling: the inverse of max pooling with indices (``torch.nn.functional.max_unpool1d/2d``).

Each pooled value goes back to the input position its index names (the flat
position in the spatial plane, as ``max_pool2d_with_indices`` gives it); every other
output element is zero. One ``scatter`` with the ``"assign"`` rule per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import INT_NP
from ember.tensor.shape import numel
from ember.tensor.tensor import Tensor


def _ints(name: str, value: Any, rank: int, minimum: int) -> tuple[int, ...]:
    values = (value,) * rank if isinstance(value, int) else tuple(value)
    if len(values) != rank or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values):
        raise ValueRangeError(f"ember: max_unpool: {name} must be an int >= {minimum} or {rank} of them, got {value!r}")
    return values


def _max_unpool(
    rank: int, x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any, output_size: Any
) -> Tensor:
    op = f"max_unpool{rank}d"
    if not isinstance(x, Tensor) or not isinstance(indices, Tensor):
        raise DTypeError(f"ember: {op}: the input and the indices must be Tensors")
    if indices._primitive.dtype not in INT_NP:
        raise DTypeError(f"ember: {op}: the indices must be an int tensor, got {indices.dtype}")
    if x.dims() != indices.dims():
        raise ShapeError(f"ember: {op}: the input {x.dims()} and the indices {indices.dims()} must have one shape")
    unbatched = x.rank == rank + 1
    if unbatched:
        x, indices = x.unsqueeze_dim(0), indices.unsqueeze_dim(0)
    if x.rank != rank + 2:
        raise ShapeError(f"ember: {op}: the input must be [batch, channels, *{rank} spatial dims], got {x.dims()}")
    kernel = _ints("kernel_size", kernel_size, rank, 1)
    stride = kernel if stride is None else _ints("stride", stride, rank, 1)
    padding = _ints("padding", padding, rank, 0)
    n, c, *spatial = x.dims()
    if output_size is None:
        out = [(s - 1) * st - 2 * p + k for s, st, p, k in zip(spatial, stride, padding, kernel)]
    else:
        out = list(output_size)[-rank:]
        if len(out) != rank:
            raise ValueRangeError(f"ember: {op}: output_size must name the {rank} spatial sizes, got {output_size!r}")
    zeros = Tensor.zeros([n, c, numel(out)], device=x.device, dtype=x.dtype)
    index, values = indices.reshape([n, c, -1]), x.reshape([n, c, -1])
    flat = zeros.scatter(2, index, values.detach(), "assign")
    if values.is_require_grad():
        # PyTorch's gradient is the output gradient gathered at every index, repeated
        # ones included (they come from overlapping windows and hold equal values): a
        # zero-valued scatter-add carries it.
        finite = values.mask_fill(values.is_finite().bool_not(), 0.0)
        flat = flat.add(zeros.scatter(2, index, finite.sub(finite.detach())))
    result = flat.reshape([n, c, *out])
    return result.squeeze_dim(0) if unbatched else result


def max_unpool1d(
    x: Tensor,
    indices: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The values of ``x`` ``[batch, channels, length]`` put back at ``indices``, zeros
    elsewhere; the output length is ``(length - 1) * stride - 2 * padding + kernel_size``
    unless ``output_size`` says otherwise."""
    return _max_unpool(1, x, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(
    x: Tensor,
    indices: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """The values of ``x`` ``[batch, channels, height, width]`` put back at ``indices``
    (flat positions ``row * width + col`` in the output plane), zeros elsewhere."""
    return _max_unpool(2, x, indices, kernel_size, stride, padding, output_size)

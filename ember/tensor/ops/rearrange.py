"""Rearranging ops written over the layout primitives: rolls, repeats, diagonals,
sliding windows, and the ways to walk a dim (``select_dim``, ``iter_dim``, ``unbind``).

All of them are views, slices, concatenations or index selections, so autodiff
differentiates them and every backend runs them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.shape import normalize_dim, normalize_dims, numel

if TYPE_CHECKING:
    from typing import Self


def _int(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueRangeError(f"ember: {op}: {name} must be an int, got {value!r}")
    return int(value)


class RearrangeOps(TensorOpsBase):
    """Rolls, repeats, diagonals, windows and dim walks (mixed into ``Tensor``)."""

    __slots__ = ()

    # ------------------------------------------------------------------ rolls and rotations
    def roll_dim(self, shift: int, dim: int) -> Self:
        """Elements shifted by ``shift`` along ``dim``, wrapping around (Burn's ``roll_dim``)."""
        shape = self._primitive.shape
        dim = normalize_dim("roll_dim", dim, len(shape))
        n = shape[dim]
        shift = _int("roll_dim", "shift", shift)
        if n == 0 or shift % n == 0:
            return self.__class__(self._primitive, self._device)
        s = shift % n
        return self.__class__.cat([self.narrow(dim, n - s, s), self.narrow(dim, 0, n - s)], dim)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Elements shifted along ``dims`` by ``shifts`` (one per dim), wrapping around;
        without ``dims`` the flattened tensor is rolled and reshaped back (``torch.roll``)."""
        if dims is None:
            if not isinstance(shifts, int):
                if len(shifts) != 1:
                    raise ShapeError(f"ember: roll: without dims, give one shift, got {list(shifts)}")
                shifts = shifts[0]
            return self.reshape((-1,)).roll_dim(shifts, 0).reshape(self._primitive.shape)
        shifts = [shifts] if isinstance(shifts, int) else list(shifts)
        dims = [dims] if isinstance(dims, int) else list(dims)
        if len(shifts) != len(dims):
            raise ShapeError(f"ember: roll: shifts {shifts} and dims {dims} must have one length")
        out = self
        for shift, dim in zip(shifts, dims):
            out = out.roll_dim(shift, dim)
        return out

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Self:
        """Rotated by ``k`` quarter turns in the plane of ``dims`` (from the first toward
        the second, as ``torch.rot90``)."""
        if len(dims) != 2:
            raise ShapeError(f"ember: rot90: dims must name two dims, got {list(dims)}")
        d0, d1 = normalize_dims("rot90", dims, len(self._primitive.shape))
        k = _int("rot90", "k", k) % 4
        if k == 0:
            return self.__class__(self._primitive, self._device)
        if k == 2:
            return self.flip((d0, d1))
        if k == 1:
            return self.flip(d1).swap_dims(d0, d1)
        return self.flip(d0).swap_dims(d0, d1)

    # ------------------------------------------------------------------ repeats and shapes
    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Dim ``dim`` split into ``sizes`` (one may be -1), as ``torch.unflatten``."""
        shape = self._primitive.shape
        dim = normalize_dim("unflatten", dim, len(shape))
        sizes = [_int("unflatten", "sizes", s) for s in sizes]
        if not sizes:
            raise ShapeError("ember: unflatten: sizes must not be empty")
        if -1 in sizes:
            known = numel(s for s in sizes if s != -1)
            if sizes.count(-1) > 1 or known == 0 or shape[dim] % known:
                raise ShapeError(f"ember: unflatten: cannot split dim {dim} of size {shape[dim]} into {sizes}")
            sizes[sizes.index(-1)] = shape[dim] // known
        if numel(sizes) != shape[dim]:
            raise ShapeError(f"ember: unflatten: sizes {sizes} do not multiply to dim {dim}'s size {shape[dim]}")
        return self.reshape(shape[:dim] + tuple(sizes) + shape[dim + 1 :])

    def repeat_interleave(self, repeats: Any, dim: int | None = None) -> Self:
        """Each element (slice) repeated ``repeats`` times in place along ``dim``
        (``[a, b]`` -> ``[a, a, b, b]``); ``repeats`` an int or one count per element;
        without ``dim`` the flattened tensor (``torch.repeat_interleave``)."""
        x = self
        if dim is None:
            x, dim = self.reshape((-1,)), 0
        shape = x._primitive.shape
        dim = normalize_dim("repeat_interleave", dim, len(shape))
        n = shape[dim]
        if isinstance(repeats, int) and not isinstance(repeats, bool):
            if repeats < 0:
                raise ValueRangeError(f"ember: repeat_interleave: repeats must be >= 0, got {repeats}")
            stretched = x.unsqueeze_dim(dim + 1).expand(shape[: dim + 1] + (repeats,) + shape[dim + 1 :])
            return stretched.reshape(shape[:dim] + (n * repeats,) + shape[dim + 1 :])
        counts = repeats.to_numpy() if hasattr(repeats, "_primitive") else np.asarray(repeats)
        if counts.dtype.kind not in "iu" and counts.size:
            raise ValueRangeError(f"ember: repeat_interleave: repeats must be ints, got dtype {counts.dtype}")
        counts = counts.reshape(-1).astype(np.int64)
        if counts.size == 1:
            counts = np.repeat(counts, n)
        if counts.size != n or (counts < 0).any():
            raise ShapeError(
                f"ember: repeat_interleave: repeats must hold one count >= 0 per element of dim {dim} "
                f"(size {n}), got {counts.size} counts"
            )
        index = self.__class__.from_data(np.repeat(np.arange(n, dtype=np.int64), counts), device=self._device)
        return x.select(dim, index)

    def tile(self, reps: Sequence[int]) -> Self:
        """The tensor tiled ``reps[i]`` times along each dim; fewer reps than dims apply
        to the last dims (``torch.tile``)."""
        reps = [reps] if isinstance(reps, int) else list(reps)
        rank = len(self._primitive.shape)
        return self.repeat([1] * (rank - len(reps)) + reps)

    def pixel_shuffle(self, upscale_factor: int) -> Self:
        """``[..., C * r^2, H, W]`` to ``[..., C, H * r, W * r]`` (``torch.pixel_shuffle``)."""
        r = _int("pixel_shuffle", "upscale_factor", upscale_factor)
        rank = len(self._primitive.shape)
        *batch, c, h, w = self._primitive.shape if rank >= 3 else (0, 0, 0)
        if rank < 3 or r < 1 or c % (r * r):
            raise ShapeError(
                f"ember: pixel_shuffle: needs [..., C * {r}^2, H, W], got shape {list(self._primitive.shape)}"
            )
        n = len(batch)
        x = self.reshape(tuple(batch) + (c // (r * r), r, r, h, w))
        x = x.permute(list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
        return x.reshape(tuple(batch) + (c // (r * r), h * r, w * r))

    def pixel_unshuffle(self, downscale_factor: int) -> Self:
        """The inverse of :meth:`pixel_shuffle`: ``[..., C, H * r, W * r]`` to ``[..., C * r^2, H, W]``."""
        r = _int("pixel_unshuffle", "downscale_factor", downscale_factor)
        rank = len(self._primitive.shape)
        *batch, c, h, w = self._primitive.shape if rank >= 3 else (0, 0, 0)
        if rank < 3 or r < 1 or h % r or w % r:
            raise ShapeError(
                f"ember: pixel_unshuffle: needs [..., C, H * {r}, W * {r}], got shape {list(self._primitive.shape)}"
            )
        n = len(batch)
        x = self.reshape(tuple(batch) + (c, h // r, r, w // r, r))
        x = x.permute(list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
        return x.reshape(tuple(batch) + (c * r * r, h // r, w // r))

    # ------------------------------------------------------------------ diagonals
    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal ``offset`` (above the main one when positive) of the planes
        spanned by ``dim1`` and ``dim2``, as a new last dim (``torch.diagonal``)."""
        rank = len(self._primitive.shape)
        if rank < 2:
            raise ShapeError(f"ember: diagonal: needs rank >= 2, got shape {list(self._primitive.shape)}")
        d1, d2 = normalize_dims("diagonal", (dim1, dim2), rank)
        offset = _int("diagonal", "offset", offset)
        rest = [d for d in range(rank) if d not in (d1, d2)]
        x = self.permute(rest + [d1, d2])
        *batch, rows, cols = x._primitive.shape
        length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        flat = x.reshape(tuple(batch) + (rows * cols,))
        if length == 0:
            return flat.narrow(-1, 0, 0)
        start = offset if offset >= 0 else -offset * cols
        ranges: list[Any] = [None] * len(batch) + [(start, start + (length - 1) * (cols + 1) + 1, cols + 1)]
        return flat.slice(ranges)

    def diag(self, diagonal: int = 0) -> Self:
        """``torch.diag``: a rank-1 tensor becomes the square matrix with it on diagonal
        ``diagonal``; a matrix gives its diagonal ``diagonal`` as a rank-1 tensor."""
        rank = len(self._primitive.shape)
        diagonal = _int("diag", "diagonal", diagonal)
        if rank == 2:
            return self.diagonal(diagonal, 0, 1)
        if rank != 1:
            raise ShapeError(f"ember: diag: needs a rank-1 or rank-2 tensor, got shape {list(self._primitive.shape)}")
        n = self._primitive.shape[0]
        size = n + abs(diagonal)
        out = self.__class__.zeros((size * size,), device=self._device, dtype=self.dtype)
        if n:
            start = diagonal if diagonal >= 0 else -diagonal * size
            out = out.slice_assign([(start, start + (n - 1) * (size + 1) + 1, size + 1)], self)
        return out.reshape((size, size))

    # ------------------------------------------------------------------ windows
    def unfold(self, dim: int, size: int, step: int) -> Self:
        """Sliding windows of ``size`` elements every ``step`` along ``dim``: that dim
        becomes the window count and a new last dim holds each window
        (``torch.Tensor.unfold``, Burn's ``unfold``)."""
        shape = self._primitive.shape
        dim = normalize_dim("unfold", dim, len(shape)) if shape else 0
        size, step = _int("unfold", "size", size), _int("unfold", "step", step)
        n = shape[dim] if shape else 1
        if size < 0 or step < 1 or size > n:
            raise ValueRangeError(
                f"ember: unfold: size must lie in [0, {n}] (dim {dim}'s size) and step be >= 1, got size {size}, step {step}"
            )
        x = self if shape else self.reshape((1,))
        windows = (n - size) // step + 1
        index = (np.arange(windows, dtype=np.int64)[:, None] * step + np.arange(size, dtype=np.int64)[None, :]).reshape(
            -1
        )
        picked = x.select(dim, self.__class__.from_data(index, device=self._device, dtype=DType.INT64))
        s = x._primitive.shape
        picked = picked.reshape(s[:dim] + (windows, size) + s[dim + 1 :])
        out = picked.movedim(dim + 1, -1)
        return out if shape else out.reshape((size,))

    # ------------------------------------------------------------------ walking a dim
    def select_dim(self, dim: int, index: int) -> Self:
        """The slice at ``index`` along ``dim``, that dim removed (Burn's ``select_dim``,
        PyTorch's ``Tensor.select``); a negative index counts from the end."""
        shape = self._primitive.shape
        dim = normalize_dim("select_dim", dim, len(shape))
        index = _int("select_dim", "index", index)
        if not -shape[dim] <= index < shape[dim]:
            raise IndexOutOfBoundsError(
                f"ember: select_dim: index {index} is out of bounds for dim {dim} of size {shape[dim]}"
            )
        return self.narrow(dim, index % shape[dim], 1).squeeze_dim(dim)

    def iter_dim(self, dim: int) -> Iterator[Any]:
        """The slices along ``dim`` one by one, each keeping ``dim`` with size 1 (Burn's)."""
        dim = normalize_dim("iter_dim", dim, len(self._primitive.shape))
        for i in range(self._primitive.shape[dim]):
            yield self.narrow(dim, i, 1)

    def unbind(self, dim: int = 0) -> list[Any]:
        """The slices along ``dim`` with that dim removed (``torch.unbind``)."""
        dim = normalize_dim("unbind", dim, len(self._primitive.shape))
        return [self.narrow(dim, i, 1).squeeze_dim(dim) for i in range(self._primitive.shape[dim])]

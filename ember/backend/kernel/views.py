"""Strided views: the layout ops of the protocol as index arithmetic, with no copy.

A :class:`View` says where each element of a tensor of ``shape`` sits in a buffer:
element ``(i0, i1, ...)`` is at ``offset + i0 * strides[0] + i1 * strides[1] + ...``
(in elements, not bytes; strides may be zero, for broadcasting, or negative, for
flips). ``reshape``, ``permute``, ``expand``, ``slice`` and ``flip`` map a view to a
view; ``reshape`` returns ``None`` where the new shape cannot be expressed over the
old strides (numpy would copy). Every target reads its operands through views.
"""

from __future__ import annotations

from dataclasses import dataclass


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def size_of(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@dataclass(frozen=True, slots=True)
class View:
    """Element positions of a tensor of ``shape`` in a buffer."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple[int, ...], offset: int = 0) -> View:
        return View(tuple(shape), contiguous_strides(tuple(shape)), offset)

    @property
    def size(self) -> int:
        return size_of(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major and dense (size-1 dims may have any stride)."""
        step = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != step:
                return False
            step *= size
        return True

    def normalized(self) -> View:
        """The same view with stride 0 on size-1 dims (a canonical form for keys)."""
        return View(self.shape, tuple(0 if n == 1 else s for n, s in zip(self.shape, self.strides)), self.offset)

    def span(self) -> tuple[int, int]:
        """The lowest and one past the highest element position the view touches."""
        if self.size == 0:
            return self.offset, self.offset
        low = high = self.offset
        for n, s in zip(self.shape, self.strides):
            if s > 0:
                high += (n - 1) * s
            else:
                low += (n - 1) * s
        return low, high + 1

    # ------------------------------------------------------------------ layout ops
    def permute(self, axes: tuple[int, ...]) -> View:
        return View(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes), self.offset)

    def expand(self, shape: tuple[int, ...]) -> View:
        """numpy's ``broadcast_to``: new leading dims and size-1 dims get stride 0."""
        shape = tuple(shape)
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for size, (old, stride) in zip(shape[lead:], zip(self.shape, self.strides)):
            strides.append(stride if old == size else 0)
        return View(shape, tuple(strides), self.offset)

    def slice(self, slices: tuple[tuple[int, int, int], ...]) -> View:
        """``x[start:stop:step, ...]`` for the leading dims (normalised bounds)."""
        shape, strides, offset = list(self.shape), list(self.strides), self.offset
        for dim, (start, stop, step) in enumerate(slices):
            n = len(range(start, stop if stop >= 0 else -1, step))
            if n:
                offset += start * strides[dim]
            shape[dim] = n
            strides[dim] *= step
        return View(tuple(shape), tuple(strides), offset)

    def flip(self, axes: tuple[int, ...]) -> View:
        strides, offset = list(self.strides), self.offset
        for a in axes:
            if self.shape[a] > 0:
                offset += (self.shape[a] - 1) * strides[a]
            strides[a] = -strides[a]
        return View(self.shape, tuple(strides), offset)

    def reshape(self, shape: tuple[int, ...]) -> View | None:
        """The same elements in row-major order with ``shape``, or ``None`` where that
        needs a copy. Dims are matched in groups of equal size; each group of old dims
        must be laid out as one strided run."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        if size_of(shape) == 0 or self.size <= 1:
            return View(shape, contiguous_strides(shape), self.offset)
        old = [(n, s) for n, s in zip(self.shape, self.strides) if n != 1]
        new_dims = [i for i, n in enumerate(shape) if n != 1]
        new_strides = [0] * len(shape)
        i = j = 0
        while i < len(old) and j < len(new_dims):
            # Grow the two groups until their sizes agree.
            oi, nj = i, j
            o_size, n_size = old[i][0], shape[new_dims[j]]
            while o_size != n_size:
                if o_size < n_size:
                    oi += 1
                    o_size *= old[oi][0]
                else:
                    nj += 1
                    n_size *= shape[new_dims[nj]]
            for k in range(i, oi):  # the old group must be one strided run
                if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                    return None
            stride = old[oi][1]
            for k in range(nj, j - 1, -1):
                new_strides[new_dims[k]] = stride
                stride *= shape[new_dims[k]]
            i, j = oi + 1, nj + 1
        return View(shape, tuple(new_strides), self.offset)

"""Padding, as ``torch.nn.functional.pad``: constant, reflect, replicate and circular
modes, and negative widths (which crop)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.errors import IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.tensor.checks import as_scalar
from ember.tensor.ops.base import TensorOpsBase

if TYPE_CHECKING:
    from typing import Self

_MODES = ("constant", "reflect", "replicate", "edge", "circular")


class PadOps(TensorOpsBase):
    """``pad`` (mixed into ``Tensor``)."""

    __slots__ = ()

    def pad(self, padding: Sequence[int], value: Any = 0, mode: str = "constant") -> Self:
        """Padding as ``torch.nn.functional.pad``: ``(left, right, top, bottom, ...)``
        pairs from the last dim backward. ``mode`` is ``"constant"`` (with ``value``),
        ``"reflect"`` (mirror, edge not repeated), ``"replicate"`` (or ``"edge"``: the edge
        repeated) or ``"circular"`` (wrap around). A negative width crops that side
        first and the padding then reads the cropped tensor, except for reflect and replicate,
        which read the uncropped one (both as PyTorch)."""
        widths = []
        for p in padding:
            if isinstance(p, bool) or not hasattr(p, "__index__"):
                raise IndexOutOfBoundsError(f"ember: pad: expected ints, got {p!r}")
            widths.append(int(p))
        shape = self._primitive.shape
        if len(widths) % 2 or len(widths) // 2 > len(shape):
            raise ShapeError(f"ember: pad: padding {widths} must be pairs for at most {len(shape)} dims")
        if mode not in _MODES:
            raise ValueRangeError(f"ember: pad: mode must be one of {', '.join(_MODES)}, got {mode!r}")
        out = self
        for i in range(len(widths) // 2):
            dim = len(shape) - 1 - i
            before, after = widths[2 * i], widths[2 * i + 1]
            n = out._primitive.shape[dim]
            if (before < 0 or after < 0) and mode in ("reflect", "replicate", "edge"):
                out = out._pad_from_uncropped(dim, before, after, mode)
                continue
            if before < 0 or after < 0:
                cut_before, cut_after = max(-before, 0), max(-after, 0)
                if cut_before + cut_after > n:
                    raise ValueRangeError(
                        f"ember: pad: the negative padding ({before}, {after}) crops more than dim {dim}'s {n} elements"
                    )
                out = out.narrow(dim, cut_before, n - cut_before - cut_after)
                before, after = max(before, 0), max(after, 0)
            if before or after:
                out = out._pad_dim(dim, before, after, value, mode)
        return out

    def _pad_from_uncropped(self, dim: int, before: int, after: int, mode: str) -> Self:
        """Reflect or replicate padding with a negative width: output ``j`` reads the
        uncropped input at ``j - before``, mirrored or clamped into it (PyTorch's rule;
        cropping first would mirror the cropped tensor instead)."""
        n = self._primitive.shape[dim]
        size = n + before + after
        if size < 0:
            raise ValueRangeError(
                f"ember: pad: the negative padding ({before}, {after}) crops more than dim {dim}'s {n} elements"
            )
        if mode == "reflect" and (before >= n or after >= n):
            raise ValueRangeError(
                f"ember: pad: reflect padding ({before}, {after}) must be smaller than dim {dim} of size {n}"
            )
        if n == 0 and size:
            raise ValueRangeError(f"ember: pad: {mode} padding of an empty dim {dim}")
        source = np.arange(size, dtype=np.int64) - before
        if mode == "reflect":
            period = max(2 * n - 2, 1)
            source = source % period
            source = np.where(source >= n, period - source, source)
        else:
            source = np.clip(source, 0, max(n - 1, 0))
        return self.select(dim, self.__class__.from_data(source, device=self._device))

    def _pad_dim(self, dim: int, before: int, after: int, value: Any, mode: str) -> Self:
        n = self._primitive.shape[dim]
        cls = self.__class__
        if mode == "constant":
            shape = list(self._primitive.shape)
            shape[dim] = n + before + after
            out = cls.full(tuple(shape), as_scalar("pad", value), self._device, self.dtype)
            ranges: list[Any] = [None] * dim + [(before, before + n)]
            return out.slice_assign(ranges, self)
        pieces = []
        if mode == "reflect":
            if before >= n or after >= n:
                raise ValueRangeError(
                    f"ember: pad: reflect padding ({before}, {after}) must be smaller than dim {dim} of size {n}"
                )
            if before:
                pieces.append(self.narrow(dim, 1, before).flip(dim))
            pieces.append(self)
            if after:
                pieces.append(self.narrow(dim, n - 1 - after, after).flip(dim))
        elif mode == "circular":
            if before > n or after > n:
                raise ValueRangeError(
                    f"ember: pad: circular padding ({before}, {after}) must be at most dim {dim}'s size {n} "
                    "(it wraps around once)"
                )
            if before:
                pieces.append(self.narrow(dim, n - before, before))
            pieces.append(self)
            if after:
                pieces.append(self.narrow(dim, 0, after))
        else:
            if n == 0:
                raise ValueRangeError(f"ember: pad: replicate padding of an empty dim {dim}")
            if before:
                pieces.append(self.narrow(dim, 0, 1).repeat_dim(dim, before))
            pieces.append(self)
            if after:
                pieces.append(self.narrow(dim, n - 1, 1).repeat_dim(dim, after))
        return cls.cat(pieces, dim)

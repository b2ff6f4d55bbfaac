"""Shape buckets: a compiled function whose rows vary traces once per bucket, not per size.

``ember.compile(fn, buckets={"x": 0})`` names a dim of some arguments (by name or
position; in a structure, that dim of each of its tensors) that holds independent rows:
a batch in inference. A call with ``n`` rows pads those tensors to the bucket ``n``
falls in (the next power of two from 2, or the next of ``bucket_sizes``) by repeating their
last row, runs the trace of that bucket, and slices the results' rows back to ``n``.
When the function is traced for a bucket, :mod:`ember.capture.row_flow` checks on the
graph that no op mixes rows; when one does, the call raises
:class:`~ember.capture.row_flow.BucketError` naming it. Results are then those of an
unpadded call: the real rows go through the same kernels beside the padded ones
(bit-identical where the executor computes a row the same way at both sizes; a matrix
product may block rows differently, so expect float rounding there).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.capture.pytree import flatten, flatten_result, unflatten
from ember.capture.row_flow import BucketError
from ember.errors import ConfigError
from ember.tensor import Tensor


class Buckets:
    """Which arguments' dim holds the rows, and the sizes a call's rows are padded to."""

    def __init__(self, fn: Callable[..., Any], dims: Mapping[str | int, int], sizes: Sequence[int] | None) -> None:
        if not isinstance(dims, Mapping) or not dims:
            raise ConfigError(
                f"ember: compile: buckets must map arguments (names or positions) to a dim, e.g. {{'x': 0}}; got {dims!r}"
            )
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            names = []
        self.dims: dict[int | str, int] = {}
        for arg, dim in dims.items():
            if isinstance(dim, bool) or not isinstance(dim, int) or not isinstance(arg, (int, str)):
                raise ConfigError(f"ember: compile: buckets[{arg!r}] must be an int dim, got {dim!r}")
            if isinstance(arg, str) and arg not in names:
                raise ConfigError(
                    f"ember: compile: buckets names {arg!r}, which is not an argument of "
                    f"{getattr(fn, '__name__', fn)} ({', '.join(names) or 'no named arguments'})"
                )
            self.dims[arg] = dim
            if isinstance(arg, str):  # the same argument passed by position
                self.dims[names.index(arg)] = dim
            elif 0 <= arg < len(names):
                self.dims[names[arg]] = dim
        if sizes is not None:
            sizes = sorted(set(sizes))
            if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 2 for s in sizes):
                raise ConfigError(
                    f"ember: compile: bucket_sizes must be ints >= 2 (one row cannot be told from a broadcast "
                    f"dim), got {sizes!r}"
                )
        self.sizes: list[int] | None = sizes
        self._indices: dict[tuple[int, int, Any], Tensor] = {}  # (rows, bucket, device) -> the rows to read

    def size(self, n: int) -> int:
        """The bucket of ``n`` rows: the next power of two from 2, or the next of the
        sizes (``n`` itself past the largest). A trace never has one row: a dim of size
        1 cannot be told from a broadcast one, so the rows could not be followed."""
        if self.sizes is None:
            return max(2, 1 << max(n - 1, 0).bit_length())
        for s in self.sizes:
            if s >= n:
                return s
        return n

    def pad(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, dict[int, int], int, int]:
        """The arguments with the rows' dim padded to its bucket, the padded tensors
        (``id`` -> dim), and the real and padded numbers of rows (0, 0 without rows)."""
        found: list[tuple[Any, int, str]] = []  # (tensor, dim, where)
        for i, arg in enumerate(args):
            if i in self.dims:
                _tensors(arg, self.dims[i], f"argument {i}", found)
        for name, arg in kwargs.items():
            if name in self.dims:
                _tensors(arg, self.dims[name], f"argument {name!r}", found)
        if not found:
            return args, kwargs, {}, 0, 0
        counts = {t.dims()[d] for t, d, _ in found}
        if len(counts) != 1:
            listed = ", ".join(f"{where} {t.dims()} (dim {d})" for t, d, where in found)
            raise BucketError(f"ember: compile: buckets: the bucketed dims disagree on the number of rows: {listed}")
        n = counts.pop()
        size = self.size(n)
        if size == n:
            return args, kwargs, {id(t): d for t, d, _ in found}, n, n
        padded = {id(t): self._pad(t, d, n, size) for t, d, _ in found}
        swap = lambda value: _replace(value, padded)  # noqa: E731
        new_args = tuple(swap(a) if i in self.dims else a for i, a in enumerate(args))
        new_kwargs = {k: swap(v) if k in self.dims else v for k, v in kwargs.items()}
        rows = {id(p): d for (t, d, _) in found for p in (padded[id(t)],)}
        return new_args, new_kwargs, rows, n, size

    def _pad(self, x: Tensor, dim: int, n: int, size: int) -> Tensor:
        """``x`` with its last row along ``dim`` repeated up to ``size`` rows (real values:
        no infinities from zeros, valid indices for token ids): one ``select`` of rows
        ``0, 1, ..., n - 1, n - 1, ...`` (an index tensor kept per sizes and device)."""
        if n == 0:
            raise BucketError(f"ember: compile: buckets: an argument of shape {x.dims()} has no rows to pad from")
        key = (n, size, x.device)
        index = self._indices.get(key)
        if index is None:
            if len(self._indices) >= 64:
                self._indices.clear()
            index = Tensor.from_data(np.minimum(np.arange(size), n - 1), device=x.device)
            self._indices[key] = index
        return x.select(dim, index)


def _tensors(value: Any, dim: int, where: str, found: list[tuple[Any, int, str]]) -> None:
    leaves: list[Any] = []
    flatten(value, leaves)
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            rank = len(leaf.dims())
            d = dim + rank if dim < 0 else dim
            if not 0 <= d < rank:
                raise BucketError(
                    f"ember: compile: buckets: {where} has a tensor of shape {leaf.dims()}, with no dim {dim}"
                )
            found.append((leaf, d, where))


def _replace(value: Any, padded: dict[int, Tensor]) -> Any:
    leaves: list[Any] = []
    spec = flatten(value, leaves)
    return unflatten(spec, [padded.get(id(leaf), leaf) for leaf in leaves])


def unpad(result: Any, slices: list[int | None], n: int) -> Any:
    """The results with their rows (``slices``: per result leaf, the dim or ``None``)
    cut back to the call's ``n``."""
    leaves: list[Any] = []
    spec = flatten_result(result, leaves)
    cut = [leaf if d is None else leaf.narrow(d, 0, n) for leaf, d in zip(leaves, slices)]
    return unflatten(spec, cut)


__all__ = ["BucketError", "Buckets", "unpad"]

"""Layout ops: reshape, permute, slicing, concatenation, padding, triangles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.backend.dtype import DType, promote
from ember.errors import DTypeError, IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.tensor.checks import NP_TO_DTYPE, as_scalar, check_device
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.rank0 import rank0_as_vector
from ember.tensor.shape import broadcast_shapes, check_addressable, normalize_dim, normalize_dims, numel

if TYPE_CHECKING:
    from typing import Self


def _index_value(op: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise IndexOutOfBoundsError(f"ember: {op}: expected an int, got {value!r}")
    return int(value)


class LayoutOps(TensorOpsBase):
    """Ops that move or select values without arithmetic."""

    __slots__ = ()

    # ------------------------------------------------------------------ shape changes
    def reshape(self, shape: Any) -> Self:
        """The same values with a new shape; one dim may be -1 (inferred)."""
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        dims = [_index_value("reshape", d) for d in shape]
        old = self._primitive.shape
        n = numel(old)
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise ShapeError(f"ember: reshape: shape {dims} may hold one -1 and no other negative dim")
        if -1 in dims:
            known = numel(d for d in dims if d != -1)
            if known == 0 or n % known:
                raise ShapeError(
                    f"ember: reshape: cannot infer the -1 in {dims} for a tensor of shape {list(old)} ({n} elements)"
                )
            dims[dims.index(-1)] = n // known
        new = tuple(dims)
        if numel(new) != n:
            raise ShapeError(
                f"ember: reshape: shape {list(old)} ({n} elements) cannot become {list(new)} "
                f"({numel(new)} elements); the element counts must match"
            )
        if new == old:
            return self.__class__(self._primitive, self._device)
        if not n:
            check_addressable("reshape", new, self.dtype.itemsize)
        return self.__class__(self._device._backend.reshape(self._primitive, new), self._device)

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Dims ``start_dim..=end_dim`` merged into one."""
        shape = self._primitive.shape
        if not shape:
            return self.reshape((1,))
        s = normalize_dim("flatten", start_dim, len(shape))
        e = normalize_dim("flatten", end_dim, len(shape))
        if s > e:
            raise ShapeError(f"ember: flatten: start_dim {start_dim} is after end_dim {end_dim}")
        return self.reshape(shape[:s] + (numel(shape[s : e + 1]),) + shape[e + 1 :])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Self:
        """Without size-1 dims: all of them, or those of ``dim`` (an int or a sequence)
        that have size 1; a named dim of another size stays, as PyTorch's ``squeeze``
        (Burn's :meth:`squeeze_dim` and :meth:`squeeze_dims` raise there)."""
        if dim is None:
            return self.reshape(tuple(d for d in self._primitive.shape if d != 1))
        shape = self._primitive.shape
        named = normalize_dims("squeeze", [dim] if isinstance(dim, int) else dim, len(shape), wrap_scalar=True)
        if not shape:
            return self.__class__(self._primitive, self._device)
        return self.reshape(tuple(n for i, n in enumerate(shape) if i not in named or n != 1))

    def squeeze_dim(self, dim: int) -> Self:
        """Without dim ``dim``, which must have size 1 (Burn's rule; PyTorch's
        :meth:`squeeze` keeps a dim of another size). Dims 0 and -1 of a 0-d tensor
        give it unchanged, as PyTorch."""
        shape = self._primitive.shape
        dim = normalize_dim("squeeze_dim", dim, len(shape), wrap_scalar=True)
        if not shape:
            return self.__class__(self._primitive, self._device)
        if shape[dim] != 1:
            raise ShapeError(
                f"ember: squeeze_dim: dim {dim} of shape {list(shape)} has size {shape[dim]}, not 1; "
                "x.squeeze(dim) keeps such a dim (PyTorch's rule)"
            )
        return self.reshape(shape[:dim] + shape[dim + 1 :])

    def squeeze_dims(self, dims: Sequence[int]) -> Self:
        """Without the size-1 dims ``dims``; an empty ``dims`` squeezes every size-1 dim
        (Burn's rule; PyTorch's ``squeeze(x, ())`` squeezes none)."""
        if not len(dims):
            return self.squeeze()
        shape = self._primitive.shape
        ds = normalize_dims("squeeze_dims", dims, len(shape), wrap_scalar=True)
        if not shape:
            return self.__class__(self._primitive, self._device)
        for d in ds:
            if shape[d] != 1:
                raise ShapeError(
                    f"ember: squeeze_dims: dim {d} of shape {list(shape)} has size {shape[d]}, not 1; "
                    "x.squeeze(dims) keeps such dims (PyTorch's rule)"
                )
        return self.reshape(tuple(n for i, n in enumerate(shape) if i not in ds))

    def unsqueeze_dim(self, dim: int) -> Self:
        """A new size-1 dim at ``dim`` (negative counts from the end of the result)."""
        shape = self._primitive.shape
        dim = normalize_dim("unsqueeze_dim", dim, len(shape), extra=1)
        return self.reshape(shape[:dim] + (1,) + shape[dim:])

    def unsqueeze(self, dim: int = 0) -> Self:
        """A new size-1 dim at ``dim`` (default: in front)."""
        return self.unsqueeze_dim(dim)

    def unsqueeze_dims(self, dims: Sequence[int]) -> Self:
        rank = len(self._primitive.shape) + len(dims)
        ds = normalize_dims("unsqueeze_dims", dims, rank)
        it = iter(self._primitive.shape)
        return self.reshape(tuple(1 if i in ds else next(it) for i in range(rank)))

    # ------------------------------------------------------------------ dim order
    def permute(self, *axes: Any) -> Self:
        """Dims reordered: result dim ``i`` is dim ``axes[i]`` of this tensor."""
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = tuple(axes[0])
        rank = len(self._primitive.shape)
        if len(axes) != rank:
            raise ShapeError(f"ember: permute: {list(axes)} must name each of the {rank} dims once")
        axes = normalize_dims("permute", axes, rank)
        if axes == tuple(range(rank)):
            return self.__class__(self._primitive, self._device)
        return self.__class__(self._device._backend.permute(self._primitive, axes), self._device)

    @rank0_as_vector("dim1", "dim2")
    def swap_dims(self, dim1: int, dim2: int) -> Self:
        rank = len(self._primitive.shape)
        a = normalize_dim("swap_dims", dim1, rank)
        b = normalize_dim("swap_dims", dim2, rank)
        axes = list(range(rank))
        axes[a], axes[b] = axes[b], axes[a]
        return self.permute(axes)

    def transpose(self, dim1: int | None = None, dim2: int | None = None) -> Self:
        """The last two dims swapped (or ``dim1`` and ``dim2``); rank < 2 is unchanged."""
        if dim1 is not None or dim2 is not None:
            return self.swap_dims(dim1 if dim1 is not None else -2, dim2 if dim2 is not None else -1)
        if len(self._primitive.shape) < 2:
            return self.__class__(self._primitive, self._device)
        return self.swap_dims(-2, -1)

    @property
    def T(self) -> Self:  # noqa: N802 - numpy's name
        return self.transpose()

    @rank0_as_vector("source", "destination")
    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
        """Dims ``source`` moved to positions ``destination`` (ints or equal-length lists);
        the other dims keep their order (``torch.movedim``)."""
        rank = len(self._primitive.shape)
        sources = [source] if isinstance(source, int) else list(source)
        targets = [destination] if isinstance(destination, int) else list(destination)
        if len(sources) != len(targets):
            raise ShapeError(f"ember: movedim: source {sources} and destination {targets} must have one length")
        sources = list(normalize_dims("movedim", sources, rank))
        targets = list(normalize_dims("movedim", targets, rank))
        axes: list[int | None] = [None] * rank
        for s, t in zip(sources, targets):
            axes[t] = s
        rest = iter(d for d in range(rank) if d not in sources)
        return self.permute([next(rest) if a is None else a for a in axes])

    moveaxis = movedim

    @rank0_as_vector("dims")
    def flip(self, dims: Sequence[int] | int) -> Self:
        """Elements reversed along ``dims``."""
        if isinstance(dims, int):
            dims = (dims,)
        axes = normalize_dims("flip", dims, len(self._primitive.shape))
        if not axes:
            return self.__class__(self._primitive, self._device)
        return self.__class__(self._device._backend.flip(self._primitive, axes), self._device)

    # ------------------------------------------------------------------ broadcast and repeat
    def expand(self, shape: Any) -> Self:
        """Broadcast to ``shape`` (size-1 dims stretch; -1 keeps a dim; new dims go in front)."""
        dims = [_index_value("expand", d) for d in (shape if not isinstance(shape, int) else (shape,))]
        old = self._primitive.shape
        if len(dims) < len(old):
            raise ShapeError(f"ember: expand: cannot expand shape {list(old)} to fewer dims {dims}")
        offset = len(dims) - len(old)
        for i, d in enumerate(dims):
            if d == -1:
                if i < offset:
                    raise ShapeError(f"ember: expand: -1 is not allowed for the new leading dim {i} in {dims}")
                dims[i] = old[i - offset]
        new = tuple(dims)
        if broadcast_shapes("expand", old, new) != new:
            raise ShapeError(f"ember: expand: shape {list(old)} cannot be broadcast to {list(new)}")
        if new == old:
            return self.__class__(self._primitive, self._device)
        check_addressable("expand", new, self.dtype.itemsize)
        return self.__class__(self._device._backend.expand(self._primitive, new), self._device)

    def broadcast_to(self, shape: Any) -> Self:
        return self.expand(shape)

    def repeat_dim(self, dim: int, times: int) -> Self:
        """The tensor repeated ``times`` times along ``dim`` (``[a, b]`` -> ``[a, b, a, b]``)."""
        shape = self._primitive.shape
        dim = normalize_dim("repeat_dim", dim, len(shape))
        times = _index_value("repeat_dim", times)
        if times < 0:
            raise ValueRangeError(f"ember: repeat_dim: times must be >= 0, got {times}")
        if times == 1:
            return self.__class__(self._primitive, self._device)
        expanded = self.unsqueeze_dim(dim).expand(shape[:dim] + (times,) + shape[dim:])
        return expanded.reshape(shape[:dim] + (shape[dim] * times,) + shape[dim + 1 :])

    def repeat(self, sizes: Sequence[int]) -> Self:
        """The tensor tiled ``sizes[i]`` times along each dim (as ``torch.Tensor.repeat``)."""
        sizes = list(sizes)
        if len(sizes) < len(self._primitive.shape):
            raise ShapeError(f"ember: repeat: {sizes} names fewer dims than the tensor's {len(self._primitive.shape)}")
        out = self.reshape((1,) * (len(sizes) - len(self._primitive.shape)) + self._primitive.shape)
        for dim, times in enumerate(sizes):
            out = out.repeat_dim(dim, times)
        return out

    # ------------------------------------------------------------------ slicing
    def _normalize_slices(self, op: str, ranges: Sequence[Any]) -> tuple[tuple[int, int, int], ...]:
        shape = self._primitive.shape
        if len(ranges) > len(shape):
            raise IndexOutOfBoundsError(f"ember: {op}: {len(ranges)} ranges for a rank-{len(shape)} tensor")
        out = []
        for dim, n in enumerate(shape):
            r = ranges[dim] if dim < len(ranges) else None
            if r is None:
                out.append((0, n, 1))
                continue
            if isinstance(r, slice):
                if r.step == 0:
                    raise ValueRangeError(f"ember: {op}: slice step must not be 0")
                out.append(r.indices(n))
                continue
            if isinstance(r, range):
                out.append(slice(r.start, r.stop, r.step).indices(n))
                continue
            if isinstance(r, (tuple, list)) and len(r) in (2, 3):
                start, stop = r[0], r[1]
                step = r[2] if len(r) == 3 else 1
                for v in (start, stop, step):
                    if v is not None:
                        _index_value(op, v)
                if step == 0:
                    raise ValueRangeError(f"ember: {op}: slice step must not be 0")
                if start is not None and not -n <= start <= n:
                    raise IndexOutOfBoundsError(
                        f"ember: {op}: range start {start} is out of bounds for dim {dim} of size {n}"
                    )
                if stop is not None and not -n <= stop <= n:
                    raise IndexOutOfBoundsError(
                        f"ember: {op}: range end {stop} is out of bounds for dim {dim} of size {n}"
                    )
                if step > 0:
                    out.append(slice(start, stop, step).indices(n))
                    continue
                # Burn's meaning: the range [start, end) walked backwards from end - 1.
                lo, hi, _ = slice(start, stop, 1).indices(n)
                walk = range(lo, max(hi, lo))[::-1][::-step]
                out.append((walk.start, walk.stop, walk.step))
                continue
            if hasattr(r, "__index__") and not isinstance(r, bool):
                i = int(r)
                if not -n <= i < n:
                    raise IndexOutOfBoundsError(f"ember: {op}: index {i} is out of bounds for dim {dim} of size {n}")
                i = i + n if i < 0 else i
                out.append((i, i + 1, 1))
                continue
            raise IndexOutOfBoundsError(f"ember: {op}: cannot read the range {r!r} for dim {dim}")
        # Canonical form: an empty range is (0, 0, 1); a non-empty one starts in bounds.
        return tuple(r if len(range(*r)) else (0, 0, 1) for r in out)

    def slice(self, ranges: Sequence[Any]) -> Self:
        """A region: one ``(start, end[, step])``, ``slice`` or ``None`` per leading dim.

        A ``(start, end, step)`` tuple has Burn's meaning: the elements of
        ``[start, end)``, walked backwards from ``end - 1`` when ``step`` is negative
        (``(0, 5, -1)`` gives indices 4, 3, 2, 1, 0). A Python ``slice`` keeps Python's
        meaning (``slice(None, None, -1)`` reverses; ``t[::-1]`` is the same). Ends
        outside ``[-size, size]`` raise (Burn clamps them).

        >>> from ember import Tensor
        >>> t = Tensor.zeros([3, 2, 3])
        >>> t.slice([(0, 2), None, (1, None)]).dims()  # t[0:2, :, 1:]
        [2, 2, 2]
        """
        slices = self._normalize_slices("slice", list(ranges))
        if all(s == (0, n, 1) for s, n in zip(slices, self._primitive.shape)):
            return self.__class__(self._primitive, self._device)
        return self.__class__(self._device._backend.slice(self._primitive, slices), self._device)

    def slice_assign(self, ranges: Sequence[Any], value: Any) -> Self:
        """A copy with the region ``ranges`` replaced by ``value`` (a tensor of the region's
        shape, or one that broadcasts to it, or a scalar)."""
        slices = self._normalize_slices("slice_assign", list(ranges))
        region = tuple(len(range(*s)) for s in slices)
        if not isinstance(value, self.__class__):
            value = self.__class__.full(region, as_scalar("slice_assign", value), self._device, self.dtype)
        if value._device is not self._device:
            check_device("slice_assign", self, value)
        if value._primitive.shape != region:
            try:
                fits = broadcast_shapes("slice_assign", value._primitive.shape, region) == region
            except ShapeError:
                fits = False
            if not fits:
                raise ShapeError(
                    f"ember: slice_assign: a value of shape {list(value._primitive.shape)} does not fit the "
                    f"region {list(region)}; give a tensor of the region's shape (or one that broadcasts to it)"
                )
            value = value.expand(region)
        if value._primitive.dtype != self._primitive.dtype:
            value = value.cast(self.dtype)
        return self.__class__(
            self._device._backend.slice_assign(self._primitive, slices, value._primitive), self._device
        )

    def slice_fill(self, ranges: Sequence[Any], value: Any) -> Self:
        """A copy with the region ``ranges`` set to the scalar ``value``."""
        return self.slice_assign(ranges, value)

    def narrow(self, dim: int, start: int, length: int) -> Self:
        """``length`` elements of ``dim`` from ``start``."""
        shape = self._primitive.shape
        dim = normalize_dim("narrow", dim, len(shape))
        start, length = _index_value("narrow", start), _index_value("narrow", length)
        if start < 0:
            start += shape[dim]
        if start < 0 or length < 0 or start + length > shape[dim]:
            raise IndexOutOfBoundsError(
                f"ember: narrow: [{start}, {start + length}) is outside dim {dim} of size {shape[dim]}"
            )
        ranges: list[Any] = [None] * dim + [(start, start + length)]
        return self.slice(ranges)

    def split_with_sizes(self, sizes: Sequence[int], dim: int = 0) -> list[Any]:
        """Consecutive pieces of the given sizes along ``dim`` (they must sum to its size);
        a zero size gives an empty piece (PyTorch's rule: one piece per size; Burn drops them)."""
        shape = self._primitive.shape
        dim = normalize_dim("split_with_sizes", dim, len(shape))
        sizes = [_index_value("split_with_sizes", s) for s in sizes]
        if sum(sizes) != shape[dim] or any(s < 0 for s in sizes):
            raise ShapeError(f"ember: split_with_sizes: sizes {sizes} must be >= 0 and sum to {shape[dim]}")
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(dim, start, s))
            start += s
        return out

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> list[Any]:
        """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the
        given sizes when ``split_size`` is a list."""
        if not isinstance(split_size, int):
            return self.split_with_sizes(split_size, dim)
        shape = self._primitive.shape
        dim = normalize_dim("split", dim, len(shape))
        if split_size <= 0:
            raise ValueRangeError(f"ember: split: split_size must be > 0, got {split_size}")
        n = shape[dim]
        sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
        return self.split_with_sizes(sizes, dim)

    def chunk(self, chunks: int, dim: int = 0) -> list[Any]:
        """At most ``chunks`` pieces of equal size (the last may be smaller), as PyTorch."""
        if chunks <= 0:
            raise ValueRangeError(f"ember: chunk: chunks must be > 0, got {chunks}")
        shape = self._primitive.shape
        dim = normalize_dim("chunk", dim, len(shape))
        n = shape[dim]
        size = max(1, -(-n // chunks))
        return self.split(size, dim) if n else [self]

    # ------------------------------------------------------------------ concatenation
    @staticmethod
    def _cat(tensors: Sequence[Any], dim: int) -> Any:
        tensors = list(tensors)
        if not tensors:
            raise ShapeError("ember: cat: needs at least one tensor")
        first = tensors[0]
        rank = len(first._primitive.shape)
        dim = normalize_dim("cat", dim, rank)
        dtype = NP_TO_DTYPE[first._primitive.dtype]
        for i, t in enumerate(tensors):
            if not hasattr(t, "_primitive"):
                raise DTypeError(f"ember: cat: element {i} is a {type(t).__name__}, not a Tensor")
            if t._device is not first._device:
                check_device("cat", first, t)
            s = t._primitive.shape
            if (
                len(s) != rank
                or s[:dim] != first._primitive.shape[:dim]
                or s[dim + 1 :] != first._primitive.shape[dim + 1 :]
            ):
                raise ShapeError(
                    f"ember: cat: tensor {i} has shape {list(s)}, but along dim {dim} every tensor must "
                    f"match {list(first._primitive.shape)} in the other dims"
                )
            dtype = promote(dtype, NP_TO_DTYPE[t._primitive.dtype])
        if len(tensors) == 1:
            return first
        prims = [
            t._primitive if t._primitive.dtype == dtype.np else t._device._backend.cast(t._primitive, dtype)
            for t in tensors
        ]
        return first.__class__(first._device._backend.cat(prims, dim), first._device)

    @staticmethod
    def _stack(tensors: Sequence[Any], dim: int) -> Any:
        tensors = list(tensors)
        if not tensors:
            raise ShapeError("ember: stack: needs at least one tensor")
        shape = tensors[0]._primitive.shape
        for i, t in enumerate(tensors):
            if t._primitive.shape != shape:
                raise ShapeError(
                    f"ember: stack: tensor {i} has shape {list(t._primitive.shape)}, expected {list(shape)}"
                )
        dim = normalize_dim("stack", dim, len(shape), extra=1)
        return LayoutOps._cat([t.unsqueeze_dim(dim) for t in tensors], dim)

    # ------------------------------------------------------------------ triangles
    def _triangle_mask(self, op: str, diagonal: int, upper: bool) -> Self:
        shape = self._primitive.shape
        if len(shape) < 2:
            raise ShapeError(f"ember: {op}: needs rank >= 2, got shape {list(shape)}")
        rows = self.__class__.arange(shape[-2], device=self._device).unsqueeze_dim(1)
        cols = self.__class__.arange(shape[-1], device=self._device).unsqueeze_dim(0)
        diff = cols.sub(rows)
        return diff.lower_elem(diagonal) if upper else diff.greater_elem(diagonal)

    def tril(self, diagonal: int = 0) -> Self:
        """The lower triangle of the last two dims (above ``diagonal`` set to zero)."""
        return self.mask_fill(self._triangle_mask("tril", diagonal, False), False if self.dtype is DType.BOOL else 0)

    def triu(self, diagonal: int = 0) -> Self:
        """The upper triangle of the last two dims (below ``diagonal`` set to zero)."""
        return self.mask_fill(self._triangle_mask("triu", diagonal, True), False if self.dtype is DType.BOOL else 0)

    def tril_mask(self, diagonal: int = 0) -> Self:
        """Bool mask, true strictly above ``diagonal`` (the positions ``tril`` zeroes)."""
        return self._triangle_mask("tril_mask", diagonal, False)

    def triu_mask(self, diagonal: int = 0) -> Self:
        """Bool mask, true strictly below ``diagonal`` (the positions ``triu`` zeroes)."""
        return self._triangle_mask("triu_mask", diagonal, True)

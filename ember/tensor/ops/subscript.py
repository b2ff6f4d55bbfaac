"""Python indexing: ``t[key]`` and ``t[key] = value`` with numpy's rules.

Basic indices (ints, slices with any step, ``None``, ``...``) become one ``slice``
and reshapes. Advanced indices (int tensors, lists and arrays of ints, bool masks)
follow numpy: a bool mask stands for the coordinates of its true elements; every
advanced index broadcasts to one shape ``B``; ints count as advanced once any other
index is; the ``B`` dims replace the indexed dims in place when the advanced indices
are next to each other, and go first otherwise. Reading is one ``select`` of the
indexed dims merged into one; writing is a ``scatter`` with the ``"assign"`` rule
(the last of repeated indices wins). Negative indices count from the end.

A bool mask needs the coordinates of its true elements, so it reads the mask back to
the host (one sync); ``t[mask] = value`` with a scalar (or a value broadcasting to one
element's slice) is a plain ``mask_where`` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import IndexOutOfBoundsError, ShapeError
from ember.tensor.checks import BOOL_NP, INT_NP
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.shape import broadcast_shapes, numel

if TYPE_CHECKING:
    from typing import Self

_FULL = slice(None)


def _index_error(message: str) -> IndexOutOfBoundsError:
    return IndexOutOfBoundsError(f"ember: indexing: {message}")


class _Key:
    """A key resolved against a shape: one entry per key element, in order.

    Entries: ``("int", i, dim)``, ``("slice", s, dim)``, ``("new",)``, ``("adv", t, dim)``
    (an int64 index tensor for ``dim``); a mask contributes one ``adv`` entry per dim.
    """

    def __init__(self, entries: list[tuple], advanced: bool) -> None:
        self.entries = entries
        self.advanced = advanced


class SubscriptOps(TensorOpsBase):
    """``__getitem__`` and ``__setitem__`` (mixed into ``Tensor``)."""

    __slots__ = ()

    # ------------------------------------------------------------------ parsing
    def _classify(self, k: Any) -> tuple[str, Any]:
        """One key element as ("int"|"slice"|"new"|"ellipsis"|"index"|"mask", value)."""
        cls = self.__class__
        if k is Ellipsis:
            return "ellipsis", None
        if k is None:
            return "new", None
        if isinstance(k, slice):
            for part in (k.start, k.stop, k.step):
                if part is not None and (isinstance(part, bool) or not hasattr(part, "__index__")):
                    raise _index_error(f"slice bounds must be ints or None, got {k!r}")
            return "slice", k
        if isinstance(k, bool):
            raise _index_error("a bare bool is not an index; use a bool tensor or list as a mask")
        if isinstance(k, cls):
            dt = k._primitive.dtype
            if dt == BOOL_NP:
                return "mask", k
            if dt not in INT_NP:
                raise _index_error(f"index tensors must be int or bool, got {k.dtype} (cast with .int() or .bool())")
            if not k._primitive.shape:
                return "int", int(k.into_scalar())
            return "index", k
        if isinstance(k, (list, tuple, np.ndarray)):
            array = np.asarray(k)
            if array.dtype == np.bool_:
                return "mask", cls.from_data(array, device=self._device)
            if array.size == 0:
                array = array.astype(np.int64)
            if array.dtype.kind not in "iu":
                raise _index_error(f"index lists must hold ints or bools, got {array.dtype} values")
            if array.ndim == 0:
                return "int", int(array)
            return "index", cls.from_data(array.astype(np.int64), device=self._device)
        if hasattr(k, "__index__"):
            return "int", int(k)
        raise _index_error(f"cannot index with {k!r}")

    def _resolve(self, key: Any) -> _Key:
        if not isinstance(key, tuple):
            key = (key,)
        shape = self._primitive.shape
        items = [self._classify(k) for k in key]
        if sum(1 for kind, _ in items if kind == "ellipsis") > 1:
            raise _index_error("at most one ... (Ellipsis)")
        used = sum(
            len(v._primitive.shape) if kind == "mask" else 1 for kind, v in items if kind not in ("new", "ellipsis")
        )
        if used > len(shape):
            raise _index_error(f"{used} indices for a rank-{len(shape)} tensor")
        advanced = any(kind in ("index", "mask") for kind, _ in items)
        entries: list[tuple] = []
        dim = 0
        for kind, value in items:
            if kind == "ellipsis":
                for _ in range(len(shape) - used):
                    entries.append(("slice", _FULL, dim))
                    dim += 1
            elif kind == "new":
                entries.append(("new",))
            elif kind == "slice":
                entries.append(("slice", value, dim))
                dim += 1
            elif kind == "int":
                n = shape[dim]
                if not -n <= value < n:
                    raise _index_error(f"index {value} is out of bounds for dim {dim} of size {n}")
                if advanced:
                    entries.append(("adv", self.__class__.full((), value % n, self._device, DType.INT64), dim))
                else:
                    entries.append(("int", value % n, dim))
                dim += 1
            elif kind == "index":
                entries.append(("adv", self._wrap_index(value, shape[dim]), dim))
                dim += 1
            else:  # mask
                k = len(value._primitive.shape)
                if value._primitive.shape != shape[dim : dim + k]:
                    raise _index_error(
                        f"the bool mask of shape {list(value._primitive.shape)} does not match dims {dim}..{dim + k - 1} "
                        f"of the tensor {list(shape)}"
                    )
                if k == 0:
                    raise _index_error("a rank-0 bool mask is not supported; use unsqueeze")
                coords = value.argwhere()
                for j in range(k):
                    entries.append(("adv", coords.select_dim(1, j), dim + j))
                dim += k
        for _ in range(len(shape) - dim):  # trailing dims
            entries.append(("slice", _FULL, dim))
            dim += 1
        return _Key(entries, advanced)

    def _wrap_index(self, index: Any, n: int) -> Self:
        """Negative indices counted from the end (bounds are checked by ``select``)."""
        if index._device is not self._device:
            index = index.to_device(self._device)
        if index.dtype is not DType.INT64:
            index = index.cast(DType.INT64)
        return index.mask_where(index.lower_elem(0), index.add_scalar(n))

    # ------------------------------------------------------------------ plans
    def _basic(self, key: _Key) -> Self:
        ranges = [None] * len(self._primitive.shape)
        drop, insert, out_dim = [], [], 0
        for entry in key.entries:
            if entry[0] == "new":
                insert.append(out_dim)
                out_dim += 1
            elif entry[0] == "slice":
                ranges[entry[2]] = entry[1]
                out_dim += 1
            else:
                ranges[entry[2]] = entry[1]
                drop.append(entry[2])
        out = self.slice(ranges)
        if drop:
            shape = out._primitive.shape
            out = out.reshape(tuple(n for i, n in enumerate(shape) if i not in drop))
        for d in insert:
            out = out.unsqueeze_dim(d)
        return out

    def _advanced_plan(self, key: _Key) -> dict:
        """How an advanced key reads the tensor: the region's slices, the permutation
        that brings the indexed dims together (at ``pos``), the linear index into them,
        the broadcast shape ``B`` and where ``None`` adds dims."""
        rank = len(self._primitive.shape)
        ranges: list[Any] = [None] * rank
        adv_dims, adv_index, positions = [], [], []
        for i, entry in enumerate(key.entries):
            if entry[0] == "slice":
                ranges[entry[2]] = entry[1]
            elif entry[0] == "adv":
                adv_dims.append(entry[2])
                adv_index.append(entry[1])
                positions.append(i)
        adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
        b_shape: tuple[int, ...] = ()
        for t in adv_index:
            b_shape = broadcast_shapes("indexing", b_shape, t._primitive.shape)
        region = self.slice(ranges)
        sizes = [region._primitive.shape[d] for d in adv_dims]
        linear = None
        for t, n in zip(adv_index, sizes):
            t = t.expand(b_shape) if t._primitive.shape != b_shape else t
            linear = t if linear is None else linear.mul_scalar(n).add(t)
        basic = [d for d in range(rank) if d not in adv_dims]
        if adjacent:
            before = [d for d in basic if d < adv_dims[0]]
            after = [d for d in basic if d > adv_dims[0]]
        else:
            before, after = [], basic
        order = before + adv_dims + after
        # Output positions of the dims None adds.
        inserts, count, placed = [], 0 if adjacent else len(b_shape), False
        for entry in key.entries:
            if entry[0] == "new":
                inserts.append(count)
                count += 1
            elif entry[0] == "slice":
                count += 1
            elif adjacent and not placed:
                count += len(b_shape)
                placed = True
        return {
            "ranges": ranges,
            "region": region,
            "order": order,
            "pos": len(before),
            "sizes": sizes,
            "linear": linear,
            "b_shape": b_shape,
            "inserts": inserts,
        }

    def _merged(self, plan: dict) -> Self:
        region = plan["region"].permute(plan["order"])
        shape = region._primitive.shape
        pos, k = plan["pos"], len(plan["sizes"])
        return region.reshape(shape[:pos] + (numel(plan["sizes"]),) + shape[pos + k :])

    def _basic_key(self, key: Any) -> tuple[list[Any], list[int], list[int]] | None:
        """The common case, quickly: a key of ints, slices, ``None`` and ``...`` only, as
        (one range per dim, dims to drop, dims to insert); ``None`` for any other key."""
        if not isinstance(key, tuple):
            key = (key,)
        shape = self._primitive.shape
        n_real = 0
        ellipsis = False
        for k in key:
            if k is None:
                continue
            if k is Ellipsis:
                if ellipsis:
                    return None
                ellipsis = True
            elif isinstance(k, slice) or (type(k) is int):
                n_real += 1
            else:
                return None
        if n_real > len(shape):
            return None
        ranges: list[Any] = []
        drop: list[int] = []
        insert: list[int] = []
        out_dim = 0
        for k in key:
            if k is Ellipsis:
                ranges.extend([None] * (len(shape) - n_real))
                out_dim += len(shape) - n_real
            elif k is None:
                insert.append(out_dim)
                out_dim += 1
            elif isinstance(k, slice):
                ranges.append(k)
                out_dim += 1
            else:
                drop.append(len(ranges))
                ranges.append(k)
        return ranges, drop, insert

    # ------------------------------------------------------------------ get and set
    def __getitem__(self, key: Any) -> Self:
        """numpy-style indexing: ints, slices with steps, ``...``, ``None``, int tensors
        and lists (several, broadcast together) and bool masks (see the module docstring)."""
        basic = self._basic_key(key)
        if basic is not None:
            ranges, drop, insert = basic
            out = self.slice(ranges)
            if drop:
                shape = out._primitive.shape
                out = out.reshape(tuple(n for i, n in enumerate(shape) if i not in drop))
            for d in insert:
                out = out.unsqueeze_dim(d)
            return out
        resolved = self._resolve(key)
        if not resolved.advanced:
            return self._basic(resolved)
        plan = self._advanced_plan(resolved)
        merged = self._merged(plan)
        pos = plan["pos"]
        picked = merged.select(pos, plan["linear"].reshape((-1,)))
        shape = picked._primitive.shape
        out = picked.reshape(shape[:pos] + plan["b_shape"] + shape[pos + 1 :])
        for d in plan["inserts"]:
            out = out.unsqueeze_dim(d)
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[key] = value`` rebinds this tensor handle to a copy with the indexed
        elements set (other handles to the old values are unaffected). ``value`` is a
        scalar or a tensor broadcasting to ``t[key]``'s shape; repeated indices keep the
        last value."""
        cls = self.__class__
        basic = self._basic_key(key)
        if basic is not None and not basic[2]:
            updated: Any = self._set_ranges(basic[0], value)
            self._primitive = updated._primitive
            return
        resolved = self._resolve(key)
        if not resolved.advanced:
            self._primitive = self._set_basic(resolved, value)._primitive
            return
        fast = self._mask_fast_path(key, value)
        if fast is not None:
            self._primitive = fast._primitive
            return
        plan = self._advanced_plan(resolved)
        merged = self._merged(plan)
        pos = plan["pos"]
        target = self._result_shape(plan, merged)
        if not isinstance(value, cls):
            value = cls.full((), value, self._device, self.dtype)
        value = self._fit_value(value, target)
        for d in reversed(plan["inserts"]):
            value = value.squeeze_dim(d)
        shape = merged._primitive.shape
        count = numel(plan["b_shape"])
        value = value.reshape(shape[:pos] + (count,) + shape[pos + 1 :])
        index_shape = (1,) * pos + (count,) + (1,) * (len(shape) - pos - 1)
        index = plan["linear"].reshape(index_shape).expand(value._primitive.shape)
        if value._primitive.dtype != merged._primitive.dtype:
            value = value.cast(merged.dtype)
        updated = merged.scatter(pos, index, value, "assign")
        region_perm = plan["region"].permute(plan["order"])._primitive.shape
        inverse = [0] * len(plan["order"])
        for i, d in enumerate(plan["order"]):
            inverse[d] = i
        region = updated.reshape(region_perm).permute(inverse)
        if all(r is None or r == _FULL for r in plan["ranges"]):
            self._primitive = region.cast(self.dtype)._primitive
        else:
            self._primitive = self.slice_assign(plan["ranges"], region)._primitive

    def _result_shape(self, plan: dict, merged: Any) -> tuple[int, ...]:
        shape = merged._primitive.shape
        pos = plan["pos"]
        out = list(shape[:pos] + plan["b_shape"] + shape[pos + 1 :])
        for d in plan["inserts"]:
            out.insert(d, 1)
        return tuple(out)

    def _fit_value(self, value: Any, target: tuple[int, ...]) -> Any:
        if value._device is not self._device:
            value = value.to_device(self._device)
        if value._primitive.dtype != self._primitive.dtype:
            value = value.cast(self.dtype)
        if value._primitive.shape == target:
            return value
        try:
            fits = broadcast_shapes("__setitem__", value._primitive.shape, target) == target
        except ShapeError:
            fits = False
        if not fits:
            if numel(value._primitive.shape) == numel(target):
                return value.reshape(target)
            raise ShapeError(
                f"ember: __setitem__: a value of shape {list(value._primitive.shape)} does not fit the indexed "
                f"region {list(target)}; give a tensor of that shape (or one that broadcasts to it)"
            )
        return value.expand(target)

    def _set_basic(self, key: _Key, value: Any) -> Self:
        ranges: list[Any] = [None] * len(self._primitive.shape)
        for entry in key.entries:
            if entry[0] == "new":
                continue
            ranges[entry[2]] = entry[1]
        return self._set_ranges(ranges, value)

    def _set_ranges(self, ranges: list[Any], value: Any) -> Self:
        if isinstance(value, self.__class__):
            slices = self._normalize_slices("__setitem__", ranges)
            region = tuple(len(range(*s)) for s in slices)
            value = self._fit_value(value, region) if value._primitive.shape != region else value
        return self.slice_assign(ranges, value)

    def _mask_fast_path(self, key: Any, value: Any) -> Self | None:
        """``t[mask] = v`` for a mask over the leading dims and a value that is a scalar
        or broadcasts to the rest of the shape: one ``mask_where``, no sync."""
        cls = self.__class__
        if isinstance(key, tuple):
            if len(key) != 1:
                return None
            key = key[0]
        if isinstance(key, cls):
            if key._primitive.dtype != BOOL_NP:
                return None
            mask = key
        elif isinstance(key, list) and key and all(isinstance(k, bool) for k in key):
            mask = cls.from_bools(key, device=self._device)
        else:
            return None
        shape = self._primitive.shape
        k = len(mask._primitive.shape)
        rest = shape[k:]
        if mask._primitive.shape != shape[:k]:
            return None
        if not isinstance(value, cls):
            value = cls.full((), value, self._device, self.dtype)
        vshape = value._primitive.shape
        try:
            if len(vshape) > len(rest) or broadcast_shapes("__setitem__", vshape, rest) != rest:
                return None
        except ShapeError:
            return None
        value = self._fit_value(value, rest).expand(shape)
        return self.mask_where(mask.reshape(mask._primitive.shape + (1,) * len(rest)), value)

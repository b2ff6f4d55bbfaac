"""Scatter with every update rule: Burn's ``scatter(dim, indices, values, update)``
(``"add"``, ``"assign"``, ``"mul"``, ``"min"``, ``"max"``) and PyTorch's
``scatter_reduce`` (``"sum"``, ``"prod"``, ``"mean"``, ``"amax"``, ``"amin"``,
``include_self``).

Only adding is a backend primitive (``scatter_add``). The other rules sort each line
by target index (stable), reduce each run of equal targets with a segmented
doubling scan (``log2(n)`` passes of ``where``/``op``), and add the last element of
each run into place: exact, deterministic, differentiable, on every backend.
Repeated targets under ``"assign"`` keep the last value along ``dim`` (numpy's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import BOOL_NP, FLOAT_NP
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.rank0 import rank0_as_vector
from ember.tensor.shape import normalize_dim

if TYPE_CHECKING:
    from typing import Self

_UPDATES = ("add", "assign", "mul", "min", "max")
_REDUCES = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "mean"}


def _combine(op: str, a: Any, b: Any) -> Any:
    if op == "mul":
        return a.mul(b)
    return a.maximum(b) if op == "max" else a.minimum(b)


def _shift(x: Any, dim: int, k: int, fill: Any) -> Any:
    """``x`` moved ``k`` places toward higher indices along ``dim``, ``fill`` in front."""
    n = x._primitive.shape[dim]
    shape = list(x._primitive.shape)
    shape[dim] = min(k, n)
    front = x.__class__.full(tuple(shape), fill, x._device, x.dtype)
    if k >= n:
        return front
    return x.__class__.cat([front, x.narrow(dim, 0, n - k)], dim)


class ScatterOps(TensorOpsBase):
    """Scatter with update rules and ``scatter_reduce`` (mixed into ``Tensor``)."""

    __slots__ = ()

    def _scatter_args(self, op: str, dim: int, indices: Any, values: Any, allow_larger: bool) -> tuple[int, Any, Any]:
        shape = self._primitive.shape
        dim = normalize_dim(op, dim, len(shape))
        indices = self._index_tensor(op, indices)
        if isinstance(values, self.__class__) and values._primitive.dtype != self._primitive.dtype:
            raise DTypeError(
                f"ember: {op}: the values ({values.dtype}) must have the tensor's dtype ({self.dtype}), as in "
                f"PyTorch; cast them first: values.cast({str(self.dtype)!r})"
            )
        values = self._like(values, op)
        ishape = indices._primitive.shape
        if len(ishape) != len(shape) or any(ishape[d] > shape[d] for d in range(len(shape)) if d != dim):
            raise ShapeError(
                f"ember: {op}: indices of shape {list(ishape)} must have the rank of the tensor "
                f"{list(shape)} and no larger dims except dim {dim}"
            )
        vshape = values._primitive.shape
        if vshape != ishape:
            if not allow_larger or len(vshape) != len(ishape) or any(v < i for v, i in zip(vshape, ishape)):
                raise ShapeError(
                    f"ember: {op}: values {list(vshape)} and indices {list(ishape)} must have one shape"
                    + (" (or values larger in every dim)" if allow_larger else "")
                )
            values = values.slice([(0, n) for n in ishape])
        return dim, indices, values

    @rank0_as_vector("dim")
    def scatter(self, dim: int, indices: Any, values: Any, update: str = "add") -> Self:
        """A copy with ``values`` written at ``indices`` along ``dim``:
        ``out[..., indices[..., i, ...], ...] <update>= values[..., i, ...]``.

        ``update`` is Burn's ``IndexingUpdateOp``: ``"add"`` (the default; repeated
        indices accumulate, ``torch.scatter_add``), ``"assign"`` (``torch.scatter``;
        the last of repeated indices wins), ``"mul"``, ``"min"`` or ``"max"``."""
        if update not in _UPDATES:
            raise ValueRangeError(f"ember: scatter: update must be one of {', '.join(_UPDATES)}, got {update!r}")
        dim, indices, values = self._scatter_args("scatter", dim, indices, values, False)
        if update == "add":
            if self._primitive.dtype == BOOL_NP:
                return self.int().scatter(dim, indices, values.int()).bool()
            return self.__class__(
                self._device._backend.scatter_add(self._primitive, dim, indices._primitive, values._primitive),
                self._device,
            )
        return self._scatter_rule(dim, indices, values, update, True)

    def scatter_add(self, dim: int, indices: Any, values: Any) -> Self:
        """``scatter(dim, indices, values, "add")``."""
        return self.scatter(dim, indices, values, "add")

    @rank0_as_vector("dim")
    def scatter_reduce(self, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Self:
        """``torch.scatter_reduce``: the values of ``src`` at ``index`` along ``dim``
        reduced into a copy with ``reduce`` (``"sum"``, ``"prod"``, ``"mean"``,
        ``"amax"``, ``"amin"``), together with the original value when
        ``include_self``. ``src`` may be larger than ``index`` (its leading part is used)."""
        if reduce not in _REDUCES:
            raise ValueRangeError(f"ember: scatter_reduce: reduce must be one of {', '.join(_REDUCES)}, got {reduce!r}")
        dim, indices, values = self._scatter_args("scatter_reduce", dim, index, src, True)
        rule = _REDUCES[reduce]
        if rule == "mean":
            return self._scatter_mean(dim, indices, values, include_self)
        if rule == "add":
            base = self if include_self else self._scatter_rule(dim, indices, values.zeros_like(), "assign", True)
            return base.scatter(dim, indices, values, "add")
        return self._scatter_rule(dim, indices, values, rule, include_self)

    def _scatter_mean(self, dim: int, indices: Any, values: Any, include_self: bool) -> Self:
        counts = self.int().zeros_like().scatter(dim, indices, indices.ones_like())
        hit = counts.greater_elem(0)
        total = self.zeros_like().scatter(dim, indices, values)
        if include_self:
            total, counts = total.add(self), counts.add_scalar(1)
        counts = counts.clamp_min(1)
        if self._primitive.dtype in FLOAT_NP:
            mean = total.div(counts.cast(self.dtype))
        else:
            mean = total.div(counts, rounding_mode="floor").cast(self.dtype)
        return self.mask_where(hit, mean)

    def _segments(self, dim: int, indices: Any, values: Any, op: str | None) -> tuple[Any, Any, Any]:
        """Per line along ``dim``: the targets sorted (stably), the values reduced with
        ``op`` over each run of equal targets (inclusive scan), and where runs end."""
        order = indices.argsort(dim)
        targets = indices.gather(dim, order)
        scanned = values.gather(dim, order)
        n = targets._primitive.shape[dim]
        if op is not None:
            # Shifted-in positions get target -1, never a real one, so their fill value
            # (0) is never combined.
            k = 1
            while k < n:
                same = targets.equal(_shift(targets, dim, k, -1))
                scanned = _combine(op, _shift(scanned, dim, k, 0), scanned).mask_where(same.bool_not(), scanned)
                k *= 2
        following = targets.narrow(dim, 1, n - 1) if n > 1 else targets.narrow(dim, 0, 0)
        last_shape = list(targets._primitive.shape)
        last_shape[dim] = 1
        sentinel = targets.__class__.full(tuple(last_shape), -1, targets._device, targets.dtype)
        ends = targets.not_equal(targets.__class__.cat([following, sentinel], dim))
        return targets, scanned, ends

    def _scatter_rule(self, dim: int, indices: Any, values: Any, op: str, include_self: bool) -> Self:
        """``assign`` / ``mul`` / ``min`` / ``max`` scatter, exact (see the module docstring)."""
        if self._primitive.dtype == BOOL_NP:
            out = self.int()._scatter_rule(dim, indices, values.int(), op, include_self)
            return out.bool()
        tracked = self.is_require_grad() or values.is_require_grad()
        if op in ("min", "max") and tracked:
            return self._scatter_extreme_tracked(dim, indices, values, op, include_self)
        targets, scanned, ends = self._segments(dim, indices, values, None if op == "assign" else op)
        zero = False if self._primitive.dtype == BOOL_NP else 0
        placed = self.zeros_like().scatter(dim, targets, scanned.mask_fill(ends.bool_not(), zero))
        hit = self.int().zeros_like().scatter(dim, targets, ends.int()).greater_elem(0)
        if op != "assign" and include_self:
            placed = _combine(op, self, placed)
        return self.mask_where(hit, placed)

    def _scatter_extreme_tracked(self, dim: int, indices: Any, values: Any, op: str, include_self: bool) -> Self:
        """min/max with PyTorch's gradient: shared evenly by every element equal to the
        result (``self`` counted too, as PyTorch does even without ``include_self``).
        The value is the exact reduction; the gradient comes from a weighted sum whose
        value is subtracted back out."""
        exact = self.detach()._scatter_rule(dim, indices.detach(), values.detach(), op, include_self)
        at_target = exact.gather(dim, indices)
        from_values = values.detach().equal(at_target).cast(self.dtype)
        from_self = self.detach().equal(exact).cast(self.dtype)
        counts = from_self.scatter(dim, indices, from_values)
        hit = self.int().zeros_like().scatter(dim, indices, indices.ones_like()).greater_elem(0)
        counts = counts.mask_fill(counts.equal_elem(0), 1.0)
        w_values = from_values.div(counts.gather(dim, indices))
        w_self = from_self.div(counts).mask_where(hit.bool_not(), self.ones_like())
        if not include_self:
            w_self = w_self.mask_fill(hit, 0.0)

        # Each term is x - x.detach() (exactly 0) times its weight: the sum adds nothing
        # to the value and carries the gradient. Non-finite inputs are left out (0 * inf).
        def moving(x: Any) -> Any:
            finite = x.mask_fill(x.is_finite().bool_not(), 0.0)
            return finite.sub(finite.detach())

        carrier = moving(self).mul(w_self).scatter(dim, indices, moving(values).mul(w_values))
        return exact.add(carrier)

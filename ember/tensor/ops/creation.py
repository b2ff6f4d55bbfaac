"""Creation ops beyond ``full``/``arange``/``eye``: evenly spaced values, grids and
the diagonal mask. ``linspace`` and float ``arange`` are computed on the host with
PyTorch's formulas (within an ulp of its values), then uploaded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.backend.flex.memory import check_fits
from ember.device import Device
from ember.errors import DeviceMemoryError, DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import check_float_range
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.shape import as_shape

if TYPE_CHECKING:
    from typing import Self


def _number(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise DTypeError(f"ember: {op}: {name} must be a number, got {value!r}")
    if isinstance(value, int) and value.bit_length() > 1023:
        check_float_range(f"{op}: {name}", value)
    return float(value)


class CreationOps(TensorOpsBase):
    """Class-level constructors (mixed into ``Tensor``)."""

    __slots__ = ()

    @classmethod
    def _float_arange(cls, start: Any, end: Any, step: Any, device: Device | None, dtype: Any) -> Self:
        """``arange`` with float bounds or step: ``ceil((end - start) / step)`` values
        ``start + i * step``, computed in float64, then cast."""
        start, end, step = (_number("arange", n, v) for n, v in (("start", start), ("end", end), ("step", step)))
        if step == 0 or not all(map(math.isfinite, (start, end, step))):
            raise ValueRangeError(
                f"ember: Tensor.arange: start, end and step must be finite and step nonzero, got {start}, {end}, {step}"
            )
        span = (end - start) / step
        if not math.isfinite(span):  # e.g. from -1e308 to 1e308: more values than any machine holds
            raise DeviceMemoryError(
                f"ember: Tensor.arange: from {start} to {end} by {step} is more values than float64 can count; "
                "use a larger step or a shorter range"
            )
        n = max(math.ceil(span), 0)
        dtype = DType.FLOAT32 if dtype is None else DType.parse(dtype)
        if dtype.is_int:
            # PyTorch's values are int(start) + i * int(step); their count comes from the
            # bounds truncated to ints for int64 (its accumulate type), from the float
            # bounds for the narrower ints.
            if int(step) == 0:
                raise ValueRangeError("ember: Tensor.arange: the step, truncated to an int for an int dtype, is 0")
            if dtype is DType.INT64:
                return cls.arange(int(start), int(end), int(step), device=device, dtype=dtype)
            start, step = int(start), int(step)
            return cls.arange(start, start + n * step, step, device=device, dtype=dtype)
        check_fits((n,), dtype, 8, "Tensor.arange")  # built in float64 on the host, then cast
        values = start + step * np.arange(n, dtype=np.float64)
        return cls.from_data(values.astype(dtype.np), device=device)

    @classmethod
    def linspace(
        cls, start: float, end: float, steps: int, device: Device | None = None, dtype: DType | str | None = None
    ) -> Self:
        """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (float32
        unless ``dtype`` says otherwise): the first half stepped from ``start``, the
        second from ``end``, so both ends are exact (PyTorch's formula)."""
        start, end = _number("linspace", "start", start), _number("linspace", "end", end)
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
            raise ValueRangeError(f"ember: Tensor.linspace: steps must be an int >= 0, got {steps!r}")
        dtype = DType.FLOAT32 if dtype is None else DType.parse(dtype)
        if dtype is DType.BOOL:
            raise DTypeError("ember: Tensor.linspace: no bool linspace (as PyTorch); make floats or ints and compare")
        check_fits((int(steps),), dtype, 8, "Tensor.linspace")  # built on the host, then cast
        work: Any = np.float64 if dtype is DType.FLOAT64 else np.float32
        if not dtype.is_float:
            work = np.float64
        index = np.arange(steps, dtype=work)
        if steps == 1:
            values = np.array([start], dtype=work)
        else:
            first, last = work(start), work(end)
            step = (last - first) / work(max(steps - 1, 1))
            halfway = steps // 2
            values = np.where(index < halfway, first + step * index, last - step * (work(steps - 1) - index))
        if dtype.is_int:
            values = np.trunc(values)
        return cls.from_data(values.astype(dtype.np), device=device)

    @staticmethod
    def meshgrid(*tensors: Any, indexing: str = "ij") -> list[Any]:
        """Coordinate grids of rank-1 tensors (a list or several arguments): output ``i``
        holds input ``i`` along its own dim, expanded over the others. ``indexing="xy"``
        swaps the first two dims (Cartesian, as numpy's default)."""
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = tuple(tensors[0])
        if not tensors:
            raise ShapeError("ember: meshgrid: needs at least one tensor")
        if indexing not in ("ij", "xy"):
            raise ValueRangeError(f"ember: meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        for i, t in enumerate(tensors):
            if not hasattr(t, "_primitive") or len(t._primitive.shape) > 1:
                raise ShapeError(f"ember: meshgrid: input {i} must be a rank-1 (or rank-0) tensor, got {t!r:.80}")
        flat = [t.reshape((-1,)) for t in tensors]
        positions = list(range(len(flat)))
        if indexing == "xy" and len(flat) >= 2:
            positions[0], positions[1] = 1, 0
        shape = [0] * len(flat)
        for t, pos in zip(flat, positions):
            shape[pos] = t._primitive.shape[0]
        out = []
        for t, pos in zip(flat, positions):
            view = [1] * len(flat)
            view[pos] = t._primitive.shape[0]
            out.append(t.reshape(tuple(view)).expand(tuple(shape)))
        return out

    @classmethod
    def diag_mask(cls, shape: Sequence[int], offset: int = 0, device: Device | None = None) -> Self:
        """Burn's ``diag_mask``: a bool ``[rows, cols]`` tensor, false on the diagonal
        ``offset`` (above the main one when positive) and true elsewhere."""
        dims = as_shape("diag_mask", shape)
        if len(dims) != 2:
            raise ShapeError(f"ember: Tensor.diag_mask: shape must be [rows, cols], got {list(dims)}")
        rows = cls.arange(dims[0], device=device).unsqueeze_dim(1)
        cols = cls.arange(dims[1], device=device).unsqueeze_dim(0)
        return cols.sub(rows).not_equal_elem(int(offset))

"""Random integers and permutations from the device's generator (Philox, as
``Tensor.random``): ``randint``, ``randint_like``, ``randperm`` (PyTorch's names).

``randint`` scales a uniform draw: float64 where the device holds it (53 bits), float32
on cube (exact for ranges up to 2^24, which it checks). ``randperm`` sorts uniform keys
(a stable sort, so a tie between two keys, rare at float64, still gives a permutation).
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, ValueRangeError
from ember.tensor.ops.base import TensorOpsBase

if TYPE_CHECKING:
    from typing import Self


def _key_dtype(device: Device, span: int, op: str) -> DType:
    if device.backend_name != "cube":
        return DType.FLOAT64
    if span > 1 << 24:
        raise ValueRangeError(
            f"ember: {op}: a range of {span} values needs float64 draws, which cube devices lack (at most 2^24)"
        )
    return DType.FLOAT32


class RandomOps(TensorOpsBase):
    """``randint``, ``randint_like``, ``randperm``."""

    __slots__ = ()

    @classmethod
    def randint(
        cls,
        low: builtins.int,
        high: builtins.int | None = None,
        size: Any = None,
        device: Device | None = None,
        dtype: DType | str | None = None,
    ) -> Self:
        """Integers drawn uniformly from ``[low, high)`` (``torch.randint(low, high, size)``;
        ``randint(high, size=...)`` draws from ``[0, high)``), int64 unless ``dtype`` says.

        >>> from ember import Device, Tensor
        >>> d = Device.flex()
        >>> d.seed(0)
        >>> x = Tensor.randint(3, 7, [1000], device=d)
        >>> sorted(set(x.tolist()))
        [3, 4, 5, 6]
        """
        if high is None:
            low, high = 0, low
        if size is None:
            raise ValueRangeError("ember: randint: size is required (a shape such as [2, 3])")
        for name, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise DTypeError(f"ember: randint: {name} must be an int, got {v!r}")
        if high <= low:
            raise ValueRangeError(f"ember: randint: needs low < high, got [{low}, {high})")
        out_dtype = DType.INT64 if dtype is None else DType.parse(dtype)
        if not out_dtype.is_int:
            raise DTypeError(f"ember: randint: dtype must be an int dtype, got {out_dtype}")
        device = Device.default() if device is None else device
        work = _key_dtype(device, high - low, "randint")
        u = cls.random(size, Distribution.uniform(0.0, 1.0), device, work)
        drawn = u.mul_scalar(high - low).floor().clamp_max(high - low - 1).cast(DType.INT64).add_scalar(low)
        return drawn.cast(out_dtype)

    def randint_like(self, low: builtins.int, high: builtins.int | None = None) -> Self:
        """:meth:`randint` with this tensor's shape, device and (int) dtype."""
        dtype = self.dtype if self.dtype.is_int else DType.INT64
        return self.__class__.randint(low, high, list(self._primitive.shape), self._device, dtype)

    @classmethod
    def randperm(cls, n: builtins.int, device: Device | None = None, dtype: DType | str | None = None) -> Self:
        """A random permutation of ``0 .. n - 1`` (``torch.randperm``), int64 by default."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueRangeError(f"ember: randperm: n must be an int >= 0, got {n!r}")
        device = Device.default() if device is None else device
        keys = cls.random([n], Distribution.uniform(0.0, 1.0), device, _key_dtype(device, 1, "randperm"))
        out = keys.argsort()
        return out if dtype is None else out.cast(dtype)

"""``Tensor``: the user's tensor. It holds a backend primitive and a device.

Every op checks its arguments, then calls the device's backend. Ops live in
mixins by family (``ember/tensor/ops``); this file holds creation and read-out.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ember.backend import philox
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType, check_int_fits
from ember.backend.flex.memory import memory_error
from ember.device import Device
from ember.errors import DeviceError, DeviceMemoryError, DTypeError, RankError, ShapeError, ValueRangeError
from ember.tensor.checks import FLOAT_NP, NP_TO_DTYPE, as_scalar, check_value_fits
from ember.tensor.data import TensorData, host_memory_error, to_array
from ember.tensor.ops.arithmetic import ArithmeticOps
from ember.tensor.ops.autodiff import AutodiffOps
from ember.tensor.ops.compare import CompareOps
from ember.tensor.ops.complex import ComplexOps
from ember.tensor.ops.creation import CreationOps
from ember.tensor.ops.indexing import IndexingOps
from ember.tensor.ops.layout import LayoutOps
from ember.tensor.ops.linalg import LinalgOps
from ember.tensor.ops.math import MathOps
from ember.tensor.ops.pad import PadOps
from ember.tensor.ops.pieces import PiecesOps
from ember.tensor.ops.pytorch_hints import attribute_error
from ember.tensor.ops.random import RandomOps
from ember.tensor.ops.rearrange import RearrangeOps
from ember.tensor.ops.reduce import ReduceOps
from ember.tensor.ops.scatter import ScatterOps
from ember.tensor.ops.search import SearchOps
from ember.tensor.ops.subscript import SubscriptOps
from ember.tensor.shape import MAX_HOST_BYTES, Shape, as_shape, check_addressable, normalize_dim, numel

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol


def _device(device: Device | None) -> Device:
    if device is None:
        return Device.default()
    if not isinstance(device, Device):
        raise DeviceError(f"ember: expected a Device (e.g. Device.flex()), got {device!r}")
    return device


def _dtype(dtype: DType | str | None, default: DType) -> DType:
    return default if dtype is None else DType.parse(dtype)


_FLOAT16 = np.dtype(np.float16)


class Tensor(
    CreationOps,
    ArithmeticOps,
    MathOps,
    CompareOps,
    LayoutOps,
    PadOps,
    PiecesOps,
    RearrangeOps,
    SubscriptOps,
    IndexingOps,
    ScatterOps,
    SearchOps,
    RandomOps,
    ReduceOps,
    LinalgOps,
    AutodiffOps,
    ComplexOps,
):
    """An n-dimensional array on a device; float, int or bool by its dtype.

    >>> from ember import Device, Tensor
    >>> t = Tensor.from_data([[1.0, 2.0], [3.0, 4.0]], device=Device.flex())
    >>> t.matmul(t).sum().into_scalar()
    54.0
    """

    __slots__ = ("_primitive", "_device")
    __array_ufunc__ = None  # numpy defers to Tensor's operators instead of converting it

    def __init__(self, primitive: Any, device: Device):
        self._primitive = primitive
        self._device = device

    if not TYPE_CHECKING:  # the checker reports a missing attribute itself

        def __getattr__(self, name: str) -> Any:
            # Only reached for a missing attribute: name ember's spelling of PyTorch's.
            raise attribute_error(name)

    # ------------------------------------------------------------------ creation
    @classmethod
    def from_data(cls, data: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        """A tensor from array-like data: nested lists, a numpy array, ``TensorData``
        or a scalar. Python floats give float32, ints int64, bools bool; numpy arrays
        keep their dtype."""
        if isinstance(data, Tensor):
            out = data.to_device(_device(device)) if device is not None else data
            return out if dtype is None else out.cast(dtype)
        device = _device(device)
        array = to_array("Tensor.from_data", data, None if dtype is None else DType.parse(dtype))
        try:
            return cls(device._backend.from_numpy(array), device)
        except MemoryError as error:
            if isinstance(error, DeviceMemoryError):  # the device's own, naming its memory
                raise
            raise host_memory_error("Tensor.from_data", array, DType.from_numpy(array.dtype)) from None

    @classmethod
    def _from_kind(cls, op: str, data: Any, device: Device | None, dtype: Any, kind: str, default: DType) -> Tensor:
        dtype = _dtype(dtype, default)
        if dtype.kind != kind:
            raise DTypeError(f"ember: {op}: dtype must be a {kind} dtype, got {dtype}")
        return cls.from_data(data, device=device, dtype=dtype)

    @classmethod
    def from_floats(cls, data: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        """A float tensor (float32 unless ``dtype`` says otherwise)."""
        return cls._from_kind("Tensor.from_floats", data, device, dtype, "float", DType.FLOAT32)

    @classmethod
    def from_ints(cls, data: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        """An int tensor (int64 unless ``dtype`` says otherwise)."""
        return cls._from_kind("Tensor.from_ints", data, device, dtype, "int", DType.INT64)

    @classmethod
    def from_bools(cls, data: Any, device: Device | None = None) -> Tensor:
        """A bool tensor."""
        return cls._from_kind("Tensor.from_bools", data, device, None, "bool", DType.BOOL)

    @classmethod
    def full(cls, shape: Any, value: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        """A tensor of ``shape`` filled with ``value`` (dtype from the value if not given)."""
        value = as_scalar("Tensor.full", value, complex_ok=True)
        if dtype is None:
            dtype = DType.BOOL if isinstance(value, bool) else DType.INT64 if isinstance(value, int) else DType.FLOAT32
            dtype = DType.COMPLEX64 if isinstance(value, complex) else dtype
        dtype = DType.parse(dtype)
        device = _device(device)
        check_value_fits("Tensor.full", value, dtype)
        shape = as_shape("Tensor.full", shape)
        check_addressable("Tensor.full", shape, dtype.itemsize)
        return cls(device._backend.full(shape, value, dtype), device)

    @classmethod
    def zeros(cls, shape: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        dtype = _dtype(dtype, DType.FLOAT32)
        return cls.full(shape, False if dtype.is_bool else 0, device, dtype)

    @classmethod
    def ones(cls, shape: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        dtype = _dtype(dtype, DType.FLOAT32)
        return cls.full(shape, True if dtype.is_bool else 1, device, dtype)

    @classmethod
    def empty(cls, shape: Any, device: Device | None = None, dtype: DType | str | None = None) -> Tensor:
        """A tensor whose values are unspecified (zeros on every current backend)."""
        return cls.zeros(shape, device, dtype)

    def zeros_like(self) -> Tensor:
        return Tensor.zeros(self._primitive.shape, self._device, self.dtype)

    def ones_like(self) -> Tensor:
        return Tensor.ones(self._primitive.shape, self._device, self.dtype)

    def full_like(self, value: Any) -> Tensor:
        return Tensor.full(self._primitive.shape, value, self._device, self.dtype)

    @classmethod
    def arange(
        cls,
        start: builtins.int,
        end: builtins.int | None = None,
        step: builtins.int = 1,
        device: Device | None = None,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """``[start, start + step, ...)`` below ``end`` (or ``[0, start)`` with one argument).
        Int bounds give int64; a float bound or step gives float32 (as PyTorch)."""
        if end is None:
            start, end = 0, start
        floats = [v for v in (start, end, step) if isinstance(v, (float, np.floating))]
        if floats or (dtype is not None and DType.parse(dtype).is_float):
            return cls._float_arange(start, end, step, device, dtype)
        for name, v in (("start", start), ("end", end), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise DTypeError(f"ember: Tensor.arange: {name} must be an int, got {v!r}")
        if step == 0:
            raise ValueRangeError("ember: Tensor.arange: step must not be 0")
        dtype = _dtype(dtype, DType.INT64)
        device = _device(device)
        start, end, step = int(start), int(end), int(step)
        n = max(0, (end - start + step - (1 if step > 0 else -1)) // step)  # len(range(...)), unbounded
        if n and dtype.is_int:
            last = start + (n - 1) * step
            check_int_fits("Tensor.arange", min(start, last), max(start, last), dtype)
        if n * dtype.itemsize > MAX_HOST_BYTES:  # past what any device (or len(range)) can count
            raise memory_error((n,), dtype, n * dtype.itemsize, "Tensor.arange")
        return cls(device._backend.arange(start, end, step, dtype), device)

    @classmethod
    def eye(
        cls,
        n: builtins.int,
        m: builtins.int | None = None,
        device: Device | None = None,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """The ``n x m`` identity matrix."""
        m = n if m is None else m
        as_shape("Tensor.eye", (n, m))
        rows = cls.arange(n, device=device).unsqueeze_dim(1)
        cols = cls.arange(m, device=device).unsqueeze_dim(0)
        return rows.equal(cols).cast(_dtype(dtype, DType.FLOAT32))

    @classmethod
    def random(
        cls,
        shape: Any,
        distribution: Distribution | None = None,
        device: Device | None = None,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """Values drawn from ``distribution`` with the device's generator (see ``Device.seed``
        and ``Device.fork_rng``): Philox4x32-10, the same bits on every backend."""
        distribution = Distribution.default() if distribution is None else distribution
        if not isinstance(distribution, Distribution):
            raise DTypeError(f"ember: Tensor.random: expected a Distribution, got {distribution!r}")
        dtype = _dtype(dtype, DType.FLOAT32)
        device = _device(device)
        shape = as_shape("Tensor.random", shape)
        check_addressable("Tensor.random", shape, dtype.itemsize)
        if dtype is not DType.FLOAT64:
            philox.check_float32(distribution)
        key, counter = device._rng.current().reserve(philox.blocks_for(numel(shape), dtype))
        return cls(device._backend.random(shape, distribution, dtype, key, counter), device)

    def random_like(self, distribution: Distribution | None = None) -> Tensor:
        return Tensor.random(self._primitive.shape, distribution, self._device, self.dtype)

    def multinomial(self, num_samples: builtins.int = 1, replacement: builtins.bool = False) -> Tensor:
        """Category indices drawn from this tensor of weights ``[C]`` or ``[R, C]`` with
        the device's generator: ``[num_samples]`` or ``[R, num_samples]`` (int64), as
        ``torch.multinomial`` (see :func:`ember.tensor.sampling.multinomial`)."""
        from ember.tensor.sampling import multinomial

        return multinomial(self, num_samples, replacement)

    # ------------------------------------------------------------------ read-out
    @property
    def shape(self) -> Shape:
        return Shape(self._primitive.shape)

    def dims(self) -> list[builtins.int]:
        return list(self._primitive.shape)

    def size(self, dim: builtins.int | None = None) -> Shape | builtins.int:
        """PyTorch's ``size()``: the shape (as :attr:`shape`), or the size of ``dim``."""
        if dim is None:
            return Shape(self._primitive.shape)
        return self._primitive.shape[normalize_dim("size", dim, len(self._primitive.shape))]

    @property
    def rank(self) -> builtins.int:
        return len(self._primitive.shape)

    ndim = rank

    def num_elements(self) -> builtins.int:
        return numel(self._primitive.shape)

    numel = num_elements

    @property
    def dtype(self) -> DType:
        return NP_TO_DTYPE[self._primitive.dtype]

    @property
    def device(self) -> Device:
        return self._device

    @property
    def primitive(self) -> Any:
        """The backend primitive (for backend authors)."""
        return self._primitive

    def is_float(self) -> builtins.bool:
        return self._primitive.dtype in FLOAT_NP

    def to_data(self) -> TensorData:
        """A copy of the values on the host."""
        return TensorData._wrap(self._host_copy("to_data"))

    def to_numpy(self) -> np.ndarray:
        """A copy of the values as a numpy array."""
        return self._host_copy("to_numpy")

    def _host_copy(self, op: str) -> np.ndarray:
        """A fresh host array of the values; a ``DeviceMemoryError`` naming the size
        when the host cannot hold it."""
        try:
            return np.array(self._device._backend.to_numpy(self._primitive), copy=True)
        except MemoryError as error:
            if isinstance(error, DeviceMemoryError):
                raise
            raise memory_error(
                self._primitive.shape, self.dtype, self.num_elements() * self.dtype.itemsize, op
            ) from None

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.to_numpy()
        return array if dtype is None else array.astype(dtype)

    def tolist(self) -> Any:
        return self.to_data().tolist()

    def into_scalar(self) -> builtins.int | builtins.float | builtins.bool:
        """The value of a one-element tensor as a Python number (a sync point)."""
        n = numel(self._primitive.shape)
        if n != 1:
            raise ShapeError(
                f"ember: into_scalar needs a tensor with exactly one element, got shape "
                f"{list(self._primitive.shape)}; reduce it first (e.g. .sum() or .mean())"
            )
        array = self._device._backend.to_numpy(self._primitive)
        dtype = array.dtype
        if dtype.kind == "V" or dtype == _FLOAT16:  # ml_dtypes' bfloat16 (and float16) as a Python float
            return float(array.reshape(-1)[0])
        return array.item()  # a training loop reads its loss this way every step: kept lean

    item = into_scalar

    def __float__(self) -> builtins.float:
        return float(self.into_scalar())

    def __int__(self) -> builtins.int:
        return int(self.into_scalar())

    def __index__(self) -> builtins.int:
        if self._primitive.dtype not in FLOAT_NP and self._primitive.dtype != np.bool_:
            return int(self.into_scalar())
        raise DTypeError(
            f"ember: only an int tensor with one element can be used as an index, got {self.dtype}; "
            "cast it with .int() first"
        )

    def __bool__(self) -> builtins.bool:
        if numel(self._primitive.shape) != 1:
            raise ShapeError(
                f"ember: the truth value of a tensor with shape {list(self._primitive.shape)} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self.into_scalar())

    def __contains__(self, element: Any) -> builtins.bool:
        """``element in t``: whether some value of ``t`` equals ``element`` (a number, or a
        tensor compared by broadcasting), as ``(t == element).any()`` (PyTorch's rule)."""
        if isinstance(element, (Tensor, builtins.bool, builtins.int, builtins.float, np.generic)):
            return builtins.bool(self.equal(element).any().into_scalar())
        raise DTypeError(
            f"ember: `in`: a tensor contains numbers or tensors (compared elementwise), got {type(element).__name__}"
        )

    def __len__(self) -> builtins.int:
        if not self._primitive.shape:
            raise RankError("ember: len() of a rank-0 tensor; it has one value (.item()) and no length")
        return self._primitive.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    __hash__ = object.__hash__

    def __reduce__(self):
        return (_rebuild, (self.to_numpy(), self._device))

    def __repr__(self) -> str:
        array = self._device._backend.to_numpy(self._primitive)
        if array.dtype.kind == "V":
            array = array.astype(np.float32)
        body = np.array2string(array, separator=", ", threshold=200, edgeitems=3, precision=6, prefix="Tensor(")
        extra = ", require_grad=True" if self.is_require_grad() else ""
        return (
            f"Tensor({body}, shape={list(self._primitive.shape)}, dtype={self.dtype}, device={self._device!r}{extra})"
        )

    # ------------------------------------------------------------------ device and dtype
    def to_device(self, device: Device) -> Tensor:
        """This tensor on ``device`` (itself if already there).

        Between a device and its autodiff wrapper this keeps the values and wraps or
        unwraps them (moving to the inner device detaches); between backends it copies.
        """
        src = self._device
        if device is src:
            return self.__class__(self._primitive, self._device)
        # The wrap/unwrap/move_from calls below run on autodiff devices' backends only.
        if device is src._inner:  # fast path: autodiff device -> its inner device
            backend: AutodiffProtocol = src._backend  # type: ignore[assignment]  # src is an autodiff device
            return Tensor(backend.unwrap(self._primitive), device)
        device = _device(device)
        if src is device._inner:  # fast path: device -> its autodiff wrapper
            return Tensor(cast("AutodiffProtocol", device._backend).wrap(self._primitive), device)
        if device.inner() is src.inner() or device.inner() == src.inner():
            prim = self._primitive
            if src.is_autodiff():
                prim = cast("AutodiffProtocol", src._backend).unwrap(prim)
            if device.is_autodiff():
                prim = cast("AutodiffProtocol", device._backend).wrap(prim)
            return Tensor(prim, device)
        prim = self._primitive
        if src.is_autodiff() and device.is_autodiff():
            return Tensor(cast("AutodiffProtocol", device._backend).move_from(prim, src._backend), device)
        if src.is_autodiff():
            prim = cast("AutodiffProtocol", src._backend).unwrap(prim)
        array = src.inner()._backend.to_numpy(prim)
        prim = device.inner()._backend.from_numpy(np.ascontiguousarray(array))
        if device.is_autodiff():
            prim = cast("AutodiffProtocol", device._backend).wrap(prim)
        return Tensor(prim, device)

    def cast(self, dtype: DType | str) -> Tensor:
        """This tensor converted to ``dtype`` (floats to ints truncate toward zero)."""
        dtype = DType.parse(dtype)
        if dtype.np == self._primitive.dtype:
            return self.__class__(self._primitive, self._device)
        return Tensor(self._device._backend.cast(self._primitive, dtype), self._device)

    def float(self) -> Tensor:
        """Cast to float32 unless already a float."""
        return (
            self.__class__(self._primitive, self._device)
            if self._primitive.dtype in FLOAT_NP
            else self.cast(DType.FLOAT32)
        )

    def int(self) -> Tensor:
        """Cast to int64."""
        return self.cast(DType.INT64)

    def bool(self) -> Tensor:
        """Cast to bool (nonzero is True)."""
        return self.cast(DType.BOOL)

    def clone(self) -> Tensor:
        """A new handle to the same values (cheap: values are immutable; item assignment
        on one handle leaves the other unchanged)."""
        return self.__class__(self._primitive, self._device)

    @staticmethod
    def stack(tensors: Sequence[Tensor], dim: builtins.int = 0) -> Tensor:
        """Tensors of equal shape joined along a new dim."""
        return LayoutOps._stack(tensors, dim)

    @staticmethod
    def cat(tensors: Sequence[Tensor], dim: builtins.int = 0) -> Tensor:
        """Tensors joined along an existing dim."""
        return LayoutOps._cat(tensors, dim)


def _rebuild(array: np.ndarray, device: Device) -> Tensor:
    return Tensor.from_data(array, device=device)

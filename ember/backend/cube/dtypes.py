"""How each ember dtype is held in GPU memory and computed with in WGSL.

WGSL has 32-bit scalars (``f32``, ``i32``, ``u32``, ``bool``) and, with the
``shader-f16`` feature, ``f16``. ember's dtypes map onto them so:

===========  ===============================  ==========  ============================
dtype        device words                     computed as  notes
===========  ===============================  ==========  ============================
float32      ``f32``                           ``f32``
float16      ``f16`` (``shader-f16``), else    ``f32``      rounded to half on store
             one ``u32`` word per element
bfloat16     one ``u32`` word per element      ``f32``      rounded to nearest even
int64        ``vec2<u32>`` (low, high word)      ``i64``      64-bit arithmetic emulated
int32        ``i32``                           ``i32``
uint8        ``i32``                           ``i32``      wraps modulo 256 on store
int8         ``i32``                           ``i32``      wraps to [-128, 127] on store
bool         ``u32`` (0 or 1)                  ``bool``
complex64    ``vec2<f32>`` (real, imaginary)    ``c64``      see :mod:`.complex64`
float64      not available                                  cast to float32, or use flex
uint64       not available                                  cast to int64, or use flex
complex128   not available                                  cast to complex64, or use flex
===========  ===============================  ==========  ============================

WGSL has no 64-bit integers; int64 is held in two 32-bit words and computed with the
helpers of :mod:`ember.backend.cube.int64` (the ``i64`` compute type), so cube matches
flex over the whole int64 range: arithmetic, comparisons, reductions, scans, casts and
int64 indices. (Burn's wgpu backend holds int64 in 32 bits instead.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ember.backend.dtype import DType
from ember.errors import DTypeError, ValueRangeError

if TYPE_CHECKING:
    import numpy  # the class has a member named np: annotations in its body spell numpy

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Storage:
    """One dtype's representation: ``wgsl`` words on the device, ``compute`` type in
    kernels, ``load``/``store`` templates (``{x}`` a word, ``{v}`` a computed value)."""

    dtype: DType
    wgsl: str
    compute: str
    host: np.dtype
    itemsize: int
    load: str = "{x}"
    store: str = "{v}"
    f16: bool = False
    helpers: tuple[str, ...] = ()

    @property
    def np(self) -> np.dtype:
        """The numpy dtype the tensor layer sees."""
        return self.dtype.np

    def to_words(self, array: numpy.ndarray) -> numpy.ndarray:
        """Host values as the device words (a C-contiguous array)."""
        if self.wgsl == "u32" and self.dtype in (DType.FLOAT16, DType.BFLOAT16):
            return np.ascontiguousarray(array).view(np.uint16).astype(np.uint32)
        return np.ascontiguousarray(array, dtype=self.host)

    def from_words(self, words: numpy.ndarray) -> numpy.ndarray:
        """Device words back as host values of :attr:`np`."""
        if self.wgsl == "u32" and self.dtype in (DType.FLOAT16, DType.BFLOAT16):
            return words.astype(np.uint16).view(self.np)
        return words.astype(self.np)


_BF16_STORE = "bf16_word({v})"
_STORAGES = {
    DType.FLOAT32: Storage(DType.FLOAT32, "f32", "f32", np.dtype(np.float32), 4),
    DType.BFLOAT16: Storage(
        DType.BFLOAT16,
        "u32",
        "f32",
        np.dtype(np.uint32),
        4,
        load="bitcast<f32>({x} << 16u)",
        store=_BF16_STORE,
        helpers=("bf16_word",),
    ),
    DType.INT64: Storage(DType.INT64, "vec2<u32>", "i64", np.dtype(np.int64), 8),
    DType.INT32: Storage(DType.INT32, "i32", "i32", np.dtype(np.int32), 4),
    DType.COMPLEX64: Storage(DType.COMPLEX64, "vec2<f32>", "c64", np.dtype(np.complex64), 8),
    DType.UINT8: Storage(DType.UINT8, "i32", "i32", np.dtype(np.int32), 4, store="({v} & 255)"),
    DType.INT8: Storage(DType.INT8, "i32", "i32", np.dtype(np.int32), 4, store="(({v} << 24u) >> 24u)"),
    DType.BOOL: Storage(
        DType.BOOL, "u32", "bool", np.dtype(np.uint32), 4, load="({x} != 0u)", store="select(0u, 1u, {v})"
    ),
}
_F16_NATIVE = Storage(DType.FLOAT16, "f16", "f32", np.dtype(np.float16), 2, load="f32({x})", store="f16({v})", f16=True)
_F16_WORD = Storage(
    DType.FLOAT16,
    "u32",
    "f32",
    np.dtype(np.uint32),
    4,
    load="unpack2x16float({x}).x",
    store="pack2x16float(vec2<f32>({v}, 0.0))",
)


def storage_for(dtype: DType, native_f16: bool) -> Storage:
    """The storage of ``dtype``; float64 raises a :class:`DTypeError` naming the fix."""
    if dtype is DType.FLOAT16:
        return _F16_NATIVE if native_f16 else _F16_WORD
    storage = _STORAGES.get(dtype)
    if storage is None and dtype.is_complex:
        raise DTypeError(
            f"ember: cube: {dtype} is not available on the GPU (WGSL has no 64-bit floats); "
            "use complex64 (.cast('complex64')) or keep the tensor on Device.flex()"
        )
    if storage is None:
        if dtype is DType.UINT64:
            raise DTypeError(
                "ember: cube: uint64 is not available on the GPU (WGSL has no 64-bit integers; ember emulates "
                "int64 only); cast to int64 first (.cast('int64')) or keep the tensor on Device.flex()"
            )
        raise DTypeError(
            f"ember: cube: {dtype} is not available on the GPU (WGSL has no 64-bit floats); "
            "cast to float32 first (.cast('float32')) or keep the tensor on Device.flex()"
        )
    return storage


def check_scalar(op: str, value: int | float | bool, storage: Storage) -> None:
    """Raise if an int scalar does not fit the words of an int storage."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    low, high = (I64_MIN, I64_MAX) if storage.compute == "i64" else (I32_MIN, I32_MAX)
    if storage.compute in ("i32", "i64") and is_int and not low <= value <= high:
        raise ValueRangeError(
            f"ember: {op}: the scalar {value} does not fit the {storage.dtype} tensor (range [{low}, {high}]); "
            "cast the tensor to a wider dtype first"
        )


def scalar_word(value: int | float | bool, compute: str) -> int:
    """A scalar as the u32 word a kernel reads with ``bitcast`` (not for ``i64``)."""
    if compute == "f32":
        return int(np.array(value, dtype=np.float32).view(np.uint32))
    if compute == "i32":
        return int(value) & 0xFFFF_FFFF
    return 1 if value else 0


def scalar_words(value: int | float | bool, compute: str) -> tuple[int, int]:
    """A scalar as the two u32 words of a launch's scalar slot (low word first for ``i64``)."""
    if compute == "i64":
        bits = int(value) & 0xFFFF_FFFF_FFFF_FFFF
        return bits & 0xFFFF_FFFF, bits >> 32
    if compute == "c64":
        z = complex(value)
        return scalar_word(z.real, "f32"), scalar_word(z.imag, "f32")
    return scalar_word(value, compute), 0

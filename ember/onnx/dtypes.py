"""ONNX element types and their ember and numpy counterparts.

ONNX names its element types by number (``TensorProto.FLOAT`` is 1). ember holds
float64/32/16, bfloat16, int64, int32, uint8 and bool; the narrow and unsigned ints
ember lacks are widened (int8, int16, uint16 to int32; uint32, uint64 to int64).

The 8-bit floats (FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ), FLOAT4E2M1
and the 4-bit and 2-bit ints (INT4, UINT4, INT2, UINT2) are held widened too: the floats
in float32 tensors, INT4/INT2 in int32 and UINT4/UINT2 in uint8, each holding exactly the
values the narrow type can (every one of them is exact in the wider type). Host values
(constants, shape arithmetic) keep the narrow type as ``ml_dtypes`` spells it. The values
enter the narrow type's set only where ONNX rounds: ``Cast``/``CastLike`` to it (round
half to even; the 8-bit floats saturate to their largest finite value unless
``saturate=0``) and ``QuantizeLinear`` (:func:`to_narrow`); every other operator ONNX
allows on them moves values without arithmetic.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

from ember.backend.dtype import DType
from ember.errors import OnnxError

#: ONNX element type number -> name (as TensorProto spells it).
ONNX_NAMES = {
    0: "UNDEFINED",
    1: "FLOAT",
    2: "UINT8",
    3: "INT8",
    4: "UINT16",
    5: "INT16",
    6: "INT32",
    7: "INT64",
    8: "STRING",
    9: "BOOL",
    10: "FLOAT16",
    11: "DOUBLE",
    12: "UINT32",
    13: "UINT64",
    14: "COMPLEX64",
    15: "COMPLEX128",
    16: "BFLOAT16",
    17: "FLOAT8E4M3FN",
    18: "FLOAT8E4M3FNUZ",
    19: "FLOAT8E5M2",
    20: "FLOAT8E5M2FNUZ",
    21: "UINT4",
    22: "INT4",
    23: "FLOAT4E2M1",
    24: "FLOAT8E8M0",
    25: "UINT2",
    26: "INT2",
    27: "FLOAT6E2M3",
    28: "FLOAT6E3M2",
}

_NUMPY = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
    16: np.dtype(ml_dtypes.bfloat16),
}

#: The narrow types held widened (see the module's docstring), as ``ml_dtypes`` spells them.
NARROW = {
    17: np.dtype(ml_dtypes.float8_e4m3fn),
    18: np.dtype(ml_dtypes.float8_e4m3fnuz),
    19: np.dtype(ml_dtypes.float8_e5m2),
    20: np.dtype(ml_dtypes.float8_e5m2fnuz),
    21: np.dtype(ml_dtypes.uint4),
    22: np.dtype(ml_dtypes.int4),
    23: np.dtype(ml_dtypes.float4_e2m1fn),
    25: np.dtype(ml_dtypes.uint2),
    26: np.dtype(ml_dtypes.int2),
}
FLOAT8 = {17, 18, 19, 20}
_NUMPY.update(NARROW)

_EMBER = {
    1: DType.FLOAT32,
    2: DType.UINT8,
    3: DType.INT32,
    4: DType.INT32,
    5: DType.INT32,
    6: DType.INT32,
    7: DType.INT64,
    9: DType.BOOL,
    10: DType.FLOAT16,
    11: DType.FLOAT64,
    12: DType.INT64,
    13: DType.INT64,
    16: DType.BFLOAT16,
    **dict.fromkeys((17, 18, 19, 20, 23), DType.FLOAT32),
    **dict.fromkeys((21, 25), DType.UINT8),
    **dict.fromkeys((22, 26), DType.INT32),
}

_WIDEN = {
    np.dtype(np.int8): DType.INT32,
    np.dtype(np.int16): DType.INT32,
    np.dtype(np.uint16): DType.INT32,
    np.dtype(np.uint32): DType.INT64,
    np.dtype(np.uint64): DType.INT64,
    **{dtype: _EMBER[elem] for elem, dtype in NARROW.items()},
}


def onnx_name(elem_type: int) -> str:
    """TensorProto's name of an element type (its number when ONNX's list has grown past ember's)."""
    return ONNX_NAMES.get(int(elem_type), str(int(elem_type)))


def onnx_type(dtype: np.dtype) -> int | None:
    """The ONNX element type of a numpy dtype that ember reads from files, else ``None``."""
    for elem, known in _NUMPY.items():
        if known == dtype:
            return elem
    return None


def numpy_dtype(elem_type: int, where: str) -> np.dtype:
    """The numpy dtype of an ONNX element type (host values keep ONNX's exact type)."""
    try:
        return _NUMPY[int(elem_type)]
    except KeyError:
        raise OnnxError(f"ember: {where}: the ONNX element type {onnx_name(elem_type)} is not supported") from None


def ember_dtype(elem_type: int, where: str) -> DType:
    """The ember dtype that holds an ONNX element type (narrow ints widened)."""
    try:
        return _EMBER[int(elem_type)]
    except KeyError:
        raise OnnxError(
            f"ember: {where}: the ONNX element type {onnx_name(elem_type)} has no ember dtype "
            "(ember holds float64/32/16, bfloat16, int64, int32, uint8 and bool; float8, float4, int4 and int2 "
            "values widened)"
        ) from None


def dtype_of_array(array: np.ndarray, where: str) -> DType:
    """The ember dtype a host array becomes on a device."""
    dt = array.dtype
    if dt in _WIDEN:
        return _WIDEN[dt]
    try:
        return DType.from_numpy(dt)
    except Exception:
        raise OnnxError(f"ember: {where}: values of numpy dtype {dt} have no ember dtype") from None


def to_narrow(array: np.ndarray, elem: int, saturate: bool = True) -> np.ndarray:
    """``array`` rounded to the narrow ONNX type ``elem`` (a key of :data:`NARROW`), as
    ONNX's ``Cast`` does: half to even; an 8-bit float with ``saturate`` clips to its
    largest finite value (infinities too), without it a value out of range becomes the
    type's infinity or NaN; FLOAT4E2M1 saturates (it has neither); ints convert as numpy
    casts. Returns an array of the ``ml_dtypes`` type."""
    dtype = NARROW[elem]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN into a type without one
        if elem in FLOAT8 and saturate and array.dtype.kind == "f":
            info = ml_dtypes.finfo(dtype)
            array = np.clip(array, float(info.min), float(info.max))
        return np.asarray(array).astype(dtype)


def widened(array: np.ndarray, elem: int) -> np.ndarray:
    """Narrow values as the ember dtype that holds them (float32, int32 or uint8)."""
    return np.asarray(array).astype(_EMBER[elem].np)

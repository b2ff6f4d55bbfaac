"""How each ember dtype is held in device memory and computed with in CUDA C.

=========  ======================  ===============  ================================
dtype      in memory               computed as      notes
=========  ======================  ===============  ================================
float64    ``double``              ``double``       native
float32    ``float``               ``float``
float16    ``unsigned short``      ``float``        IEEE half bits; rounded per op
bfloat16   ``unsigned short``      ``float``        bfloat16 bits; rounded per op
int64      ``long long``           ``long long``    native; wraps as numpy does
int32      ``int``                 ``int``          wraps (through unsigned)
uint8      ``unsigned char``       ``unsigned char``  wraps modulo 256
bool       ``unsigned char``       ``bool``         0 or 1
=========  ======================  ===============  ================================

Half-precision values are converted with PTX ``cvt`` (float16) and integer bit
operations (bfloat16), so kernels need no CUDA header: NVRTC compiles them with no
include path, on a machine without the toolkit. Each float16/bfloat16 result is
rounded to its type, as numpy rounds each op.
"""

from __future__ import annotations

import numpy as np

from ember.backend.dtype import DType

#: dtype -> (storage C type, compute C type)
_TYPES = {
    DType.FLOAT64: ("double", "double"),
    DType.FLOAT32: ("float", "float"),
    DType.FLOAT16: ("unsigned short", "float"),
    DType.BFLOAT16: ("unsigned short", "float"),
    DType.INT64: ("long long", "long long"),
    DType.INT32: ("int", "int"),
    DType.UINT8: ("unsigned char", "unsigned char"),
    DType.INT8: ("signed char", "signed char"),
    DType.UINT64: ("unsigned long long", "unsigned long long"),
    DType.BOOL: ("unsigned char", "bool"),
}
#: The unsigned type that int arithmetic wraps through.
UNSIGNED = {
    "long long": "unsigned long long",
    "int": "unsigned int",
    "unsigned char": "unsigned int",
    "signed char": "unsigned int",
    "unsigned long long": "unsigned long long",
}
#: Short names used in kernel names and keys.
SHORT = {
    DType.FLOAT64: "f64",
    DType.FLOAT32: "f32",
    DType.FLOAT16: "f16",
    DType.BFLOAT16: "bf16",
    DType.INT64: "i64",
    DType.INT32: "i32",
    DType.UINT8: "u8",
    DType.INT8: "i8",
    DType.UINT64: "u64",
    DType.BOOL: "b",
}


def dtype_of(np_dtype: np.dtype | DType) -> DType:
    return np_dtype if isinstance(np_dtype, DType) else DType.from_numpy(np_dtype)


def storage_type(dtype: np.dtype | DType) -> str:
    return _TYPES[dtype_of(dtype)][0]


def compute_type(dtype: np.dtype | DType) -> str:
    return _TYPES[dtype_of(dtype)][1]


def family(dtype: np.dtype | DType) -> str:
    """``"f"`` (floats, bfloat16 too), ``"i"`` (int32, int64), ``"u"`` (uint8) or ``"b"``."""
    d = dtype_of(dtype)
    if d.is_float:
        return "f"
    if d in (DType.UINT8, DType.UINT64):
        return "u"
    return "b" if d is DType.BOOL else "i"


def load_code(dtype: np.dtype | DType, ref: str) -> str:
    """C code reading the element ``ref`` (an lvalue of the storage type) as its compute type."""
    d = dtype_of(dtype)
    if d is DType.FLOAT16:
        return f"ld_f16({ref})"
    if d is DType.BFLOAT16:
        return f"ld_bf16({ref})"
    if d is DType.BOOL:
        return f"({ref} != 0)"
    return ref


def store_code(dtype: np.dtype | DType, value: str) -> str:
    """C code turning a computed ``value`` into its storage type."""
    d = dtype_of(dtype)
    if d is DType.FLOAT16:
        return f"st_f16({value})"
    if d is DType.BFLOAT16:
        return f"st_bf16({value})"
    if d is DType.BOOL:
        return f"(unsigned char)({value})"
    return value


def round_code(dtype: np.dtype | DType, value: str) -> str:
    """``value`` (a float) rounded to a half-precision ``dtype``; unchanged otherwise."""
    d = dtype_of(dtype)
    if d is DType.FLOAT16:
        return f"rn_f16({value})"
    if d is DType.BFLOAT16:
        return f"rn_bf16({value})"
    return value


def _hex_float(value: float) -> str:
    return float(value).hex()


def literal(value, dtype: np.dtype | DType) -> str:
    """A C literal of ``value`` in the compute type of ``dtype`` (exact)."""
    d = dtype_of(dtype)
    if d is DType.BOOL:
        return "true" if value else "false"
    if d.is_float:
        v = float(np.asarray(value, dtype=d.np).astype(np.float64)) if d is not DType.FLOAT64 else float(value)
        single = d is not DType.FLOAT64
        if v != v:
            return "__int_as_float(0x7fc00000)" if single else "__longlong_as_double(0x7ff8000000000000ll)"
        if v in (float("inf"), float("-inf")):
            sign = "-" if v < 0 else ""
            return (
                f"({sign}__int_as_float(0x7f800000))"
                if single
                else f"({sign}__longlong_as_double(0x7ff0000000000000ll))"
            )
        text = _hex_float(v)
        return f"({text}f)" if single else f"({text})"
    v = int(value)
    if d is DType.INT64:
        return f"((long long){v & 0xFFFF_FFFF_FFFF_FFFF}ull)"
    if d is DType.INT32:
        return f"((int){v & 0xFFFF_FFFF}u)"
    return f"((unsigned char){v & 0xFF}u)"


def scalar_param_type(dtype: np.dtype | DType) -> str:
    """The kernel parameter type carrying a run-time scalar for ``dtype``."""
    return "double" if dtype_of(dtype).is_float else "long long"

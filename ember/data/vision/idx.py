"""Reading and writing IDX files, the format of MNIST (LeCun et al.)."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

from ember.errors import RecordError

_CODES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODE_OF = {np.dtype(d).newbyteorder(">") if np.dtype(d).itemsize > 1 else np.dtype(d): c for c, d in _CODES.items()}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in an IDX file (``.gz`` files are decompressed).

    The header is two zero bytes, a type code, the number of dims, then each dim
    as a big-endian uint32; the values follow in row-major order, big-endian."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as error:
        raise RecordError(f"ember: read_idx: cannot read {path}: {error}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _CODES:
        raise RecordError(
            f"ember: read_idx: {path} is not an IDX file (its header is {raw[:4].hex() or 'empty'}; "
            "an IDX file starts with 00 00, a type code 08-0e and the number of dims)"
        )
    dtype, ndim = _CODES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise RecordError(f"ember: read_idx: {path} is truncated inside its header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise RecordError(
            f"ember: read_idx: {path} holds {len(raw) - header} bytes of values but its header declares "
            f"shape {list(shape)} of {dtype.name} ({expected} bytes); the file is truncated or corrupt"
        )
    array = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("=")) if dtype.itemsize > 1 else array


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Writes ``array`` (uint8, int8, int16, int32, float32 or float64) as an IDX file
    (gzip-compressed if ``path`` ends in ``.gz``)."""
    array = np.asarray(array)
    key = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    code = _CODE_OF.get(key)
    if code is None:
        raise RecordError(f"ember: write_idx: IDX cannot hold dtype {array.dtype}")
    body = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    body += np.ascontiguousarray(array, dtype=key).tobytes()
    path = Path(path)
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)

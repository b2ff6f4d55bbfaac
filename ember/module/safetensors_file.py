"""The safetensors format, read strictly and written atomically with checksums.

A file is an 8-byte little-endian header length ``n``, ``n`` bytes of JSON (``{name:
{"dtype", "shape", "data_offsets"}, "__metadata__": {str: str}}``) and the tensors'
bytes. The reader checks everything before it touches the data: the header is at most
100 MB (safetensors' own limit), valid UTF-8 JSON without duplicate keys, every entry
has a known dtype, a shape of non-negative ints and offsets whose length is the shape's
byte count, and the entries tile the data section exactly (no overlap, no gap, nothing
out of range). Any fault is a :class:`~ember.errors.RecordError` naming it.

ember adds one metadata entry, ``crc32``: the CRC-32 of each tensor's bytes (JSON
``{name: "8 hex digits"}``), verified on load; files without it (from other tools)
load unchecked. CRC-32 because the point is to catch accidental damage (bit rot, a
truncated copy), not tampering (whoever edits the file can rewrite any checksum in
it), and it is the fastest candidate: ``benchmarks/record_checksum.py`` measures
about 1 GB/s for ``zlib.crc32`` against 0.17-0.4 GB/s for blake2b, md5 and sha256,
faster than reading the file from the page cache.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ember.errors import RecordError
from ember.module.atomic import atomic_write

MAX_HEADER_BYTES = 100_000_000  # safetensors' limit
CHECKSUM_KEY = "crc32"

DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "C64": np.dtype("<c8"),
}
_FIELDS = {"dtype", "shape", "data_offsets"}


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _is_index(value: Any) -> bool:
    return type(value) is int and value >= 0


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(f"the key {key[:80]!r} appears twice")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes, what: str, path: Any) -> Any:
    """Strict JSON (no duplicate keys, no NaN/Infinity); a RecordError naming ``what``."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except RecursionError:
        raise RecordError(f"ember: {path} is corrupt: {what} nests too deeply") from None
    except (ValueError, TypeError) as error:  # includes JSONDecodeError and UnicodeDecodeError
        raise RecordError(f"ember: {path} is corrupt: {what} is not valid JSON ({str(error)[:160]})") from None


def _checksum(data: memoryview | bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def _bytes(array: np.ndarray) -> memoryview:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write a safetensors file atomically (a temporary file in the same folder, then a
    rename), with the CRC-32 of every tensor in the metadata."""
    try:
        import safetensors.numpy as st
    except ImportError:  # pragma: no cover - depends on the install
        raise RecordError("ember: records need the safetensors package: pip install safetensors") from None
    arrays = {}
    for key, value in tensors.items():
        array = np.ascontiguousarray(value).reshape(np.shape(value))  # ascontiguousarray makes 0-d arrays 1-d
        if array.dtype == np.complex128:
            raise RecordError(
                f"ember: cannot save {key[:80]!r}: safetensors has no complex128 dtype; cast the tensor to "
                "complex64, or save its view_as_real (float64 [..., 2]) instead"
            )
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        arrays[key] = array
    meta = dict(metadata)
    meta[CHECKSUM_KEY] = json.dumps({key: _checksum(_bytes(array)) for key, array in arrays.items()})
    atomic_write(path, lambda tmp: st.save_file(arrays, tmp, metadata=meta))


def _entry(path: Any, name: str, info: Any) -> tuple[np.dtype, tuple[int, ...], int, int]:
    where = f"ember: {path} is corrupt: tensor {name[:80]!r}"
    if not isinstance(info, dict):
        raise RecordError(f"{where} is described by {_short(info)}, not an object")
    if set(info) != _FIELDS:
        raise RecordError(f"{where} has fields {sorted(info)[:8]}, expected {sorted(_FIELDS)}")
    dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise RecordError(f"{where} has unknown dtype {_short(dtype_name)} (known: {', '.join(DTYPES)})")
    if not isinstance(shape, list) or len(shape) > 64 or not all(_is_index(n) for n in shape):
        raise RecordError(f"{where} has shape {_short(shape)}; a shape is a list of non-negative ints")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_index(n) for n in offsets)
        or offsets[0] > offsets[1]
    ):
        raise RecordError(f"{where} has data_offsets {_short(offsets)}; expected [begin, end] with 0 <= begin <= end")
    dtype = DTYPES[dtype_name]
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != offsets[1] - offsets[0]:
        raise RecordError(
            f"{where} has shape {shape} of {dtype_name} ({count * dtype.itemsize} bytes) but data_offsets "
            f"{offsets} span {offsets[1] - offsets[0]} bytes"
        )
    return dtype, tuple(shape), offsets[0], offsets[1]


def read_header(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, str], int, int]:
    """``(entries, metadata, data start, data length)`` of a safetensors file, checked."""
    target = Path(path)
    if not target.is_file():
        raise RecordError(f"ember: cannot load {target}: no such file")
    size = target.stat().st_size
    with open(target, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise RecordError(f"ember: {target} is truncated ({size} bytes): not a safetensors record")
        header_len = int.from_bytes(head, "little")
        if header_len == 0:
            raise RecordError(f"ember: {target} is corrupt: its header is empty")
        if header_len > MAX_HEADER_BYTES:
            raise RecordError(
                f"ember: {target} is corrupt or not a safetensors file: its header claims {header_len} bytes, over "
                f"the format's limit of {MAX_HEADER_BYTES} (100 MB)"
            )
        if 8 + header_len > size:
            raise RecordError(
                f"ember: {target} is truncated or corrupt: its header claims {header_len} bytes, the file has {size}"
            )
        raw = handle.read(header_len)
    if not raw.startswith(b"{"):
        raise RecordError(f"ember: {target} is corrupt: its header does not start with '{{'")
    header = parse_json(raw, "its header", target)
    if not isinstance(header, dict):
        raise RecordError(f"ember: {target} is corrupt: its header is {_short(header)}, not an object")
    metadata = header.pop("__metadata__", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise RecordError(
            f"ember: {target} is corrupt: __metadata__ must map strings to strings, got {_short(metadata)}"
        )
    entries = {name: _entry(target, name, info) for name, info in header.items()}
    data_len = size - 8 - header_len
    end = 0
    for name, (_, _, begin, stop) in sorted(entries.items(), key=lambda item: (item[1][2], item[1][3])):
        if begin != end:
            fault = "overlaps the tensor before it" if begin < end else f"leaves a gap of {begin - end} bytes before it"
            raise RecordError(f"ember: {target} is corrupt: tensor {name[:80]!r} (bytes {begin}..{stop}) {fault}")
        end = stop
    if end > data_len:
        raise RecordError(
            f"ember: {target} is truncated: the header describes {8 + header_len + end} bytes, the file has {size}"
        )
    if end < data_len:
        raise RecordError(f"ember: {target} is corrupt: {data_len - end} bytes follow the last tensor")
    return entries, metadata, 8 + header_len, data_len


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Tensors (read-only arrays) and metadata of a safetensors file; a RecordError
    naming the fault when the file is malformed, or when ember's checksum of a tensor
    does not match its bytes."""
    entries, metadata, start, length = read_header(path)
    expected = None
    if CHECKSUM_KEY in metadata:
        expected = parse_json(metadata[CHECKSUM_KEY], "its checksum table", path)
        if (
            not isinstance(expected, dict)
            or set(expected) != set(entries)
            or not all(isinstance(v, str) for v in expected.values())
        ):
            raise RecordError(f"ember: {path} is corrupt: its checksum table does not list exactly its tensors")
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(length)
    if len(data) != length:
        raise RecordError(f"ember: {path} is truncated: it changed while being read")
    buffer = memoryview(data)
    tensors: dict[str, np.ndarray] = {}
    for name, (dtype, shape, begin, stop) in entries.items():
        if expected is not None and _checksum(buffer[begin:stop]) != expected[name]:
            raise RecordError(
                f"ember: {path} is corrupt: tensor {name[:80]!r} does not match its checksum (the file was changed "
                "or damaged after it was written); restore it from a backup or save it again"
            )
        if stop == begin:
            array = np.zeros(0, dtype=dtype)
            array.flags.writeable = False
        else:
            array = np.frombuffer(data, dtype=dtype, count=(stop - begin) // dtype.itemsize, offset=begin)
        if dtype == np.bool_:
            array = array.view(np.uint8) != 0  # a byte other than 0 or 1 is not a valid numpy bool
            array.flags.writeable = False
        tensors[name] = array.reshape(shape)
    return tensors, metadata

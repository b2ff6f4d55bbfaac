"""Writes ``torch.save``-style archives without PyTorch, opcode by opcode, so that tests
can build the files PyTorch writes and the ones it never would (negative strides,
offsets past the end, forged storages).
"""

from __future__ import annotations

import pickle
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ITEMSIZE = {
    "FloatStorage": 4,
    "DoubleStorage": 8,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
}


def op_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def op_value(value: Any) -> bytes:
    """The opcodes that push ``value`` (ints, strings, bools, None, tuples, lists, raw bytes)."""
    if value is None:
        return b"N"
    if value is True:
        return b"\x88"
    if value is False:
        return b"\x89"
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return b"J" + struct.pack("<i", value)
        data = pickle.encode_long(value)
        return b"\x8a" + bytes([len(data)]) + data if len(data) < 256 else b"\x8b" + struct.pack("<i", len(data)) + data
    if isinstance(value, float):
        return b"G" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        return b"X" + struct.pack("<I", len(data)) + data
    if isinstance(value, bytes):  # already opcodes
        return value
    if isinstance(value, tuple):
        return b"(" + b"".join(op_value(v) for v in value) + b"t"
    if isinstance(value, list):
        return b"]" + (b"(" + b"".join(op_value(v) for v in value) + b"e" if value else b"")
    raise TypeError(type(value))


def op_ordered_dict(items: list[tuple[Any, bytes]]) -> bytes:
    """An ``OrderedDict`` built as torch.save builds one (REDUCE, then SETITEMS)."""
    out = op_global("collections", "OrderedDict") + b")R"
    if items:
        out += b"(" + b"".join(op_value(k) + v for k, v in items) + b"u"
    return out


def op_tensor(
    storage_type: str, key: Any, numel: Any, offset: Any, size: Any, stride: Any, rebuild: str = "_rebuild_tensor_v2"
) -> bytes:
    """``_rebuild_tensor_v2(persistent storage, offset, size, stride, False, OrderedDict())``."""
    pid = (
        b"("
        + op_value("storage")
        + op_global("torch", storage_type)
        + op_value(key)
        + op_value("cpu")
        + op_value(numel)
        + b"tQ"
    )
    hooks = op_global("collections", "OrderedDict") + b")R"
    return (
        op_global("torch._utils", rebuild)
        + b"("
        + pid
        + op_value(offset)
        + op_value(size)
        + op_value(stride)
        + b"\x89"
        + hooks
        + b"tR"
    )


@dataclass
class Spec:
    """One tensor of an archive: its storage and the view on it."""

    name: str
    storage_type: str = "FloatStorage"
    key: str = "0"
    numel: int = 4
    offset: int = 0
    size: tuple = (4,)
    stride: tuple = (1,)
    data: bytes | None = None  # the storage bytes (default: numel elements 0, 1, 2, ..., at most 4096)


@dataclass
class Archive:
    specs: list[Spec] = field(default_factory=list)
    prefix: str = "archive/"
    byteorder: bytes | None = b"little"
    pickle_bytes: bytes | None = None  # replaces the generated data.pkl
    extra: dict[str, bytes] = field(default_factory=dict)

    def pickle(self) -> bytes:
        if self.pickle_bytes is not None:
            return self.pickle_bytes
        items = [(s.name, op_tensor(s.storage_type, s.key, s.numel, s.offset, s.size, s.stride)) for s in self.specs]
        return b"\x80\x02" + op_ordered_dict(items) + b"."

    def storages(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for s in self.specs:
            if s.key in out:
                continue
            if s.data is not None:
                out[s.key] = s.data
            else:
                itemsize = ITEMSIZE.get(s.storage_type, 4)
                dtype = {1: np.uint8, 2: np.uint16, 4: np.float32, 8: np.float64}[itemsize]
                count = min(max(s.numel, 0), 4096) if isinstance(s.numel, int) else 0  # forged counts stay small
                out[s.key] = np.arange(count, dtype=dtype).astype(f"<{np.dtype(dtype).str[1:]}").tobytes()
        return out

    def members(self) -> dict[str, bytes]:
        out = {f"{self.prefix}data.pkl": self.pickle()}
        if self.byteorder is not None:
            out[f"{self.prefix}byteorder"] = self.byteorder
        for key, data in self.storages().items():
            out[f"{self.prefix}data/{key}"] = data
        out[f"{self.prefix}version"] = b"3\n"
        out.update(self.extra)
        return out

    def write(self, path: Path) -> Path:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
            for name, data in self.members().items():
                archive.writestr(name, data)
        return path


def write_tensor_file(path: Path, **spec: Any) -> Path:
    """An archive holding one tensor ``weight`` (see :class:`Spec`)."""
    return Archive([Spec("weight", **spec)]).write(path)

"""A reader for the zip archives ``torch.save`` writes that executes nothing from the file.

The archive holds ``<prefix>/data.pkl`` (the pickled object: dicts of tensors) and one
member ``<prefix>/data/<key>`` of raw bytes per storage. Reading it is guarded in layers,
so that no file, however crafted, can run code, read memory outside a storage, or end
the interpreter:

- the zip: unique member names, only stored or deflated members (of a plausible size),
  no encryption, and the byte order record, if present, says ``little`` or ``big``;
- the pickle is scanned opcode by opcode first (``pickletools``): opcodes that build
  arbitrary objects (``INST``, ``OBJ``, ``NEWOBJ``, extension codes, out-of-band buffers)
  are refused, and every global must be one of the few a state dict needs;
- the unpickler resolves only ``OrderedDict``, the storage types and the tensor
  rebuilders; what it hands to the pickle machine are sealed objects that no ``BUILD``
  or ``SETITEM`` can change;
- each tensor's offset, sizes and strides are checked against its storage (non-negative,
  every element inside), and numpy builds the view from those checked numbers;
- the result is walked without recursion (bounded depth, no shared or cyclic dicts).

Every failure is a :class:`~ember.errors.RecordError` naming the fault.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import re
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict
from typing import Any

import ml_dtypes
import numpy as np

from ember.errors import RecordError

_STORAGE_DTYPES: dict[str, Any] = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}

# Opcodes that build objects of arbitrary classes or read outside the pickle stream;
# a state dict never uses them.
_FORBIDDEN_OPCODES = frozenset(
    {"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"}
)
_STORAGE_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")
_MAX_DEPTH = 64  # nesting of dicts; state dicts use one or two levels
_MAX_DIM = sys.maxsize // 2
_MAX_DEFLATE_RATIO = 1100  # deflate cannot expand more than ~1032 times
# What the pickle machine may raise on a malformed stream (and numpy on a refused view).
_PICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    LookupError,
    MemoryError,
    RecursionError,
    OverflowError,
    struct.error,
)
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    struct.error,
    OverflowError,
    MemoryError,
    OSError,
)


def _fault(text: str) -> RecordError:
    return RecordError(f"ember: load_pytorch: {text}")


class _Sealed:
    """An object the pickle machine can hold but not change (no ``__dict__``, no
    ``__setstate__``, ``setattr`` refused)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise _fault(f"the pickle tries to set attribute {name[:40]!r} of a {type(self).__name__.lstrip('_')}")

    def _init(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)


class _StorageType(_Sealed):
    __slots__ = ("name", "dtype")
    name: str
    dtype: np.dtype

    def __init__(self, name: str):
        self._init(name=name, dtype=np.dtype(_STORAGE_DTYPES[name]))


class _Storage(_Sealed):
    """One storage's bytes as a 1-D array of unsigned ints of the element size, in the
    file's byte order (the element dtype is applied after the view is cut)."""

    __slots__ = ("key", "type", "raw", "big_endian")
    key: str
    type: _StorageType
    raw: np.ndarray
    big_endian: bool

    def __init__(self, key: str, storage_type: _StorageType, data: bytes, big_endian: bool):
        itemsize = storage_type.dtype.itemsize
        raw = np.frombuffer(data, dtype=np.dtype(f"{'>' if big_endian else '<'}u{itemsize}"))
        self._init(key=key, type=storage_type, raw=raw, big_endian=big_endian and itemsize > 1)


class _Tensor(_Sealed):
    __slots__ = ("array",)
    array: np.ndarray

    def __init__(self, array: np.ndarray):
        self._init(array=array)


def _index(what: str, value: Any) -> int:
    if type(value) is not int:
        raise _fault(f"a tensor's {what} has type {type(value).__name__}, not int; the file is corrupt")
    if value < 0:
        raise _fault(f"a tensor has a negative {what} ({value}); the file is corrupt or crafted")
    if value > _MAX_DIM:
        raise _fault(f"a tensor's {what} {value} is out of range (size overflow); the file is corrupt")
    return value


def _dims(what: str, values: Any) -> tuple[int, ...]:
    if type(values) not in (tuple, list):
        raise _fault(f"a tensor's {what} has type {type(values).__name__}, not tuple; the file is corrupt")
    if len(values) > 64:
        raise _fault(f"a tensor's {what} has {len(values)} dims; the file is corrupt")
    return tuple(_index(what, v) for v in values)


def _rebuild_tensor_v2(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> _Tensor:
    """PyTorch's tensor rebuilder, checked: the view must lie inside its storage."""
    if not isinstance(storage, _Storage):
        raise _fault(f"a tensor's storage is a {type(storage).__name__}, not a storage; the file is corrupt")
    offset = _index("storage offset", offset)
    size, stride = _dims("size", size), _dims("stride", stride)
    if len(size) != len(stride):
        raise _fault(f"a tensor has size {list(size)} but {len(stride)} strides; the file is corrupt")
    raw, dtype = storage.raw, storage.type.dtype
    length = raw.shape[0]
    numel = 1
    for n in size:
        numel *= n
    if numel * dtype.itemsize > _MAX_DIM:
        raise _fault(f"a tensor of size {list(size)} is too large to exist (size overflow); the file is corrupt")
    if numel == 0:
        if offset > length:
            raise _fault(
                f"a tensor's storage offset {offset} lies past the end of storage {storage.key} "
                f"({length} elements); the file is corrupt"
            )
        empty = np.zeros(size, dtype=dtype)
        empty.flags.writeable = False
        return _Tensor(empty)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= length:
        raise _fault(
            f"a tensor of size {list(size)}, stride {list(stride)} and storage offset {offset} reaches element "
            f"{last}, but storage {storage.key} holds {length} elements; the file is corrupt or crafted"
        )
    # numpy checks the extent again against the buffer it is given.
    view = np.ndarray(
        size, dtype=raw.dtype, buffer=raw, offset=offset * raw.itemsize, strides=tuple(s * raw.itemsize for s in stride)
    )
    if storage.big_endian:
        view = view.astype(view.dtype.newbyteorder("="))
    if dtype == np.bool_:
        view = view != 0  # a byte other than 0 or 1 is not a valid numpy bool
    view.flags.writeable = False
    return _Tensor(view.view(dtype))


def _rebuild_parameter(data: Any, requires_grad: Any = False, backward_hooks: Any = None) -> _Tensor:
    """A parameter is its tensor (``requires_grad`` and hooks are dropped)."""
    if not isinstance(data, _Tensor):
        raise _fault(f"a parameter holds a {type(data).__name__}, not a tensor; the file is corrupt")
    return data


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


def _refuse_global(path: Any, module: str, name: str) -> RecordError:
    """The error for a global that a plain state dict does not use."""
    qualified = f"{module}.{name}"[:200]
    if module == "torch" and name.endswith("Storage"):
        supported = ", ".join(sorted(_STORAGE_DTYPES))
        return _fault(f"{path} holds tensors of type torch.{name}, which ember cannot read (it reads {supported})")
    if module.startswith("torch.nn.") or (
        name[:1].isupper()
        and module.split(".")[0]
        not in ("torch", "collections", "builtins", "__builtin__", "numpy", "_codecs", "copyreg")
    ):
        return _fault(
            f"{path} holds a pickled Python object of class {qualified} (a whole model saved with "
            "torch.save(model)?), not a state dict. ember reads state dicts and never runs code from a file: in "
            "PyTorch, load the model and save its weights with torch.save(model.state_dict(), path)"
        )
    return _fault(
        f"{path} references {qualified}, which a state dict of tensors does not use; ember executes nothing "
        "from the file and reads only dicts of dense tensors. Save `model.state_dict()` with torch.save"
    )


_TUPLE_OPCODES = frozenset({"EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET"})
_MAX_TUPLE_DEPTH = 32  # tuples in tuples: a state dict needs 2 or 3
_MARK = -1


class _Depths:
    """The pickle machine's stack and memo, holding only each object's depth of tuples
    in tuples. Python hashes a tuple recursively without a recursion limit, so a dict
    key a million tuples deep would crash the interpreter inside the unpickler."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.memo: dict[Any, int] = {}

    def pop(self, n: int) -> list[int]:
        if n == 0:
            return []
        items = self.stack[-n:]
        if len(items) < n or _MARK in items:
            raise ValueError("stack underflow")
        del self.stack[-n:]
        return items

    def pop_mark(self) -> list[int]:
        if _MARK not in self.stack:
            raise ValueError("no mark on the stack")
        at = len(self.stack) - 1 - self.stack[::-1].index(_MARK)
        items = self.stack[at + 1 :]
        del self.stack[at:]
        return items

    def step(self, name: str, arg: Any, before: list, after: list) -> None:
        stack = self.stack
        if name == "MARK":
            stack.append(_MARK)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            if not stack or stack[-1] == _MARK:
                raise ValueError("memoizing an empty stack")
            self.memo[len(self.memo) if name == "MEMOIZE" else arg] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(self.memo.get(arg, 0))
        elif name == "DUP":
            stack.extend(self.pop(1) * 2)
        elif name == "POP" and stack and stack[-1] == _MARK:
            stack.pop()
        else:
            if pickletools.markobject in before:
                popped = self.pop_mark()
                lead = self.pop(before.index(pickletools.markobject))
            else:
                popped, lead = self.pop(len(before)), []
            if name in _TUPLE_OPCODES:
                depth = 1 + max(popped, default=0)
                if depth > _MAX_TUPLE_DEPTH:
                    raise RecordError(f"tuples nested more than {_MAX_TUPLE_DEPTH} deep")
                stack.append(depth)
            elif name == "BUILD":
                stack.append(popped[0])
            elif lead:
                stack.extend(lead[: len(after)])
            else:
                stack.extend([0] * len(after))


def _scan(path: Any, data: bytes) -> None:
    """Checks every opcode of the pickle, every global it names and the nesting of its
    tuples, without running it."""
    depths = _Depths()
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in _FORBIDDEN_OPCODES:
                raise _fault(
                    f"{path}: the pickle uses opcode {opcode.name}, which builds arbitrary objects; a state dict "
                    "never needs it (if this is a whole pickled model, save model.state_dict() instead)"
                )
            if opcode.name == "GLOBAL":
                module, _, name = str(arg).partition(" ")
                _check_global(path, module, name)
            depths.step(opcode.name, arg, opcode.stack_before, opcode.stack_after)
    except RecordError as error:
        text = str(error)
        raise error if text.startswith("ember: ") else _fault(f"{path} is corrupt or crafted: {text}") from None
    except (ValueError, EOFError, struct.error, OverflowError, MemoryError, RecursionError) as error:
        raise _fault(f"{path} is corrupt: its pickle is malformed ({type(error).__name__}: {_short(error)})") from None


def _check_global(path: Any, module: str, name: str) -> Any:
    if (module, name) in _ALLOWED:
        return _ALLOWED[(module, name)]
    if module == "torch" and name in _STORAGE_DTYPES:
        return _StorageType(name)
    raise _refuse_global(path, module, name)


def _short(error: BaseException, limit: int = 200) -> str:
    text = str(error)
    return text if len(text) <= limit else text[:limit] + "..."


class _Archive:
    """The members of a torch.save zip archive, read with bounds."""

    def __init__(self, path: Any, handle: zipfile.ZipFile):
        self.path = path
        self.handle = handle
        self.size = os.path.getsize(path)
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in handle.infolist():
            if info.filename in self.members:
                raise _fault(f"{path} is corrupt: member {info.filename[:100]!r} appears twice in the archive")
            self.members[info.filename] = info

    def read(self, name: str) -> bytes:
        info = self.members[name]
        if info.flag_bits & 0x1:
            raise _fault(f"{self.path}: member {name[:100]!r} is encrypted; torch.save never encrypts")
        if info.compress_size > self.size:
            raise _fault(
                f"{self.path} is truncated: member {name[:100]!r} claims {info.compress_size} bytes, the file has "
                f"{self.size}"
            )
        if info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > _MAX_DEFLATE_RATIO * info.compress_size + 1024:
                raise _fault(f"{self.path} is corrupt: member {name[:100]!r} claims an impossible compression ratio")
        elif info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise _fault(f"{self.path} is corrupt: stored member {name[:100]!r} has two different sizes")
        else:
            raise _fault(
                f"{self.path}: member {name[:100]!r} uses zip compression method {info.compress_type}; torch.save writes "
                "uncompressed archives (re-save the file with torch.save)"
            )
        with self.handle.open(info) as member:
            data = member.read(info.file_size + 1)
        if len(data) != info.file_size:
            raise _fault(
                f"{self.path} is corrupt: member {name[:100]!r} holds {len(data)} bytes, its header says "
                f"{info.file_size}"
            )
        return data


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: _Archive, prefix: str, big_endian: bool):
        super().__init__(io.BytesIO(data))
        self.archive = archive
        self.prefix = prefix
        self.big_endian = big_endian
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        return _check_global(self.archive.path, str(module), str(name))

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not tuple or len(pid) != 5 or pid[0] != "storage":
            raise _fault(
                f"{self.archive.path}: unsupported persistent id (a {type(pid).__name__}); torch.save "
                "writes ('storage', type, key, location, numel)"
            )
        _, storage_type, key, _, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise _fault(
                f"{self.archive.path}: a storage's type is a {type(storage_type).__name__}, not a storage type"
            )
        if type(key) is not str or not _STORAGE_KEY.fullmatch(key):
            raise _fault(f"{self.archive.path}: invalid storage key {str(key)[:70]!r}")
        if type(numel) is not int or numel < 0:
            raise _fault(f"{self.archive.path}: storage {key} declares an invalid element count")
        cached = self.storages.get(key)
        if cached is not None:
            if cached.type.name != storage_type.name or cached.raw.shape[0] != numel:
                raise _fault(
                    f"{self.archive.path} is corrupt: storage {key} is declared twice, as "
                    f"{cached.type.name} and as {storage_type.name}[{numel}]"
                )
            return cached
        name = f"{self.prefix}data/{key}"
        info = self.archive.members.get(name)
        if info is None:
            raise _fault(f"{self.archive.path} is corrupt: storage {key} is missing from the archive")
        expected = numel * storage_type.dtype.itemsize
        if info.file_size != expected:
            raise _fault(
                f"{self.archive.path} is corrupt: storage {key} holds {info.file_size} bytes, but the pickle declares "
                f"{numel} elements of {storage_type.dtype.itemsize} bytes ({expected}); the file is truncated or damaged"
            )
        storage = _Storage(key, storage_type, self.archive.read(name), self.big_endian)
        self.storages[key] = storage
        return storage


def _byte_order(archive: _Archive, prefix: str) -> bool:
    """True for a big-endian file."""
    name = prefix + "byteorder"
    if name not in archive.members:
        return False  # files before the record existed were written little-endian
    if archive.members[name].file_size > 16:
        raise _fault(f"{archive.path} is corrupt: its byteorder record is {archive.members[name].file_size} bytes")
    order = archive.read(name).strip()
    if order not in (b"little", b"big"):
        raise _fault(f"{archive.path} is corrupt: its byteorder record says {order[:16]!r}, not 'little' or 'big'")
    return order == b"big"


def _unpickle(path: Any) -> Any:
    with zipfile.ZipFile(path) as handle:
        archive = _Archive(path, handle)
        pickles = [n for n in archive.members if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise _fault(f"{path} has {len(pickles)} data.pkl members, not one; it is not a torch.save archive")
        prefix = pickles[0][: -len("data.pkl")]
        big_endian = _byte_order(archive, prefix)
        data = archive.read(pickles[0])
        _scan(path, data)
        try:
            return _RestrictedUnpickler(data, archive, prefix, big_endian).load()
        except RecordError:
            raise
        except _PICKLE_ERRORS as error:
            raise _fault(
                f"{path} is corrupt: its pickle is malformed ({type(error).__name__}: {_short(error)})"
            ) from None


def _collect(obj: Any, out: dict[str, np.ndarray]) -> None:
    """Flattens nested dicts into dotted keys (without recursion); non-tensor leaves are dropped."""
    stack: list[tuple[str, Any, int]] = [("", obj, 0)]
    seen: set[int] = set()
    while stack:
        prefix, node, depth = stack.pop()
        if isinstance(node, _Tensor):
            if prefix in out:
                raise _fault(f"two entries of the file flatten to the key {prefix!r}")
            out[prefix] = node.array
        elif isinstance(node, dict):
            if id(node) in seen:
                raise _fault("the same dict appears twice in the file (a shared or cyclic reference); not a state dict")
            seen.add(id(node))
            if depth >= _MAX_DEPTH:
                raise _fault(f"the file nests dicts more than {_MAX_DEPTH} deep; not a state dict")
            children = []
            for key, value in dict.items(node):
                if type(key) is str:
                    text = key
                elif type(key) is int:
                    text = str(key)
                else:
                    raise _fault(
                        f"a dict in the file has a key of type {type(key).__name__}; state dict keys are "
                        "strings (pick the state dict with top_level_key=...)"
                    )
                children.append((f"{prefix}.{text}" if prefix else text, value, depth + 1))
            stack.extend(reversed(children))


def read_pytorch(path: str | os.PathLike, top_level_key: str | None = None) -> dict[str, np.ndarray]:
    """The tensors of a ``torch.save``'d state dict as ``{key: numpy array}``.

    Nested dicts (e.g. ``{"model": state_dict, ...}``) are flattened with dots;
    ``top_level_key`` picks one entry first. Non-tensor values are dropped. The arrays
    are read-only views of the file's storages (copy one to change it).
    """
    if not os.path.isfile(path):
        raise _fault(f"no such file {path}")
    if not zipfile.is_zipfile(path):
        raise _fault(
            f"{path} is not a zip-format PyTorch file (torch >= 1.6 writes one by default); "
            "re-save it with torch.save(model.state_dict(), path)"
        )
    try:
        obj = _unpickle(path)
    except RecordError:
        raise
    except _ZIP_ERRORS as error:
        raise _fault(f"{path} is corrupt: {type(error).__name__}: {_short(error)}") from None
    if top_level_key is not None:
        if not isinstance(obj, dict) or top_level_key not in dict.keys(obj):
            found = (
                [k[:50] if isinstance(k, str) else type(k).__name__ for k in list(dict.keys(obj))[:20]]
                if isinstance(obj, dict)
                else type(obj).__name__
            )
            raise _fault(f"no top-level key {top_level_key!r} in {path} (found {found})")
        obj = dict.__getitem__(obj, top_level_key)
    if isinstance(obj, _Tensor):
        raise _fault(f"{path} holds a single tensor, not a state dict; save a dict of tensors (model.state_dict())")
    out: dict[str, np.ndarray] = {}
    _collect(obj, out)
    if not out:
        raise _fault(f"{path} holds no tensors")
    return out

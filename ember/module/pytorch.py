"""Import of PyTorch ``state_dict`` files (``.pt``/``.pth``) without PyTorch.

A restricted unpickler reads the zip archive ``torch.save`` writes: it rebuilds
tensors from their raw storages and refuses every other class, so nothing in the
file is executed. Keys are remapped with regex rules, and the weights of ``Linear``
layers are transposed (PyTorch stores ``[out, in]``, ember ``[in, out]``).

>>> model = Mlp.new(device).load_pytorch("mlp.pt", key_remap=[(r"^net\\.", "")])  # doctest: +SKIP
"""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ember.errors import RecordError
from ember.module.module import Module

_STORAGE_DTYPES = {
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


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(_STORAGE_DTYPES[name])


class _Storage:
    def __init__(self, array: np.ndarray):
        self.array = array


def _rebuild_tensor_v2(storage: _Storage, offset: int, size: Sequence[int], stride: Sequence[int], *_: Any) -> np.ndarray:
    flat = storage.array
    size, stride = tuple(size), tuple(stride)
    if not size:
        return flat[offset:offset + 1].reshape(()).copy()
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if extent > flat.size:
        raise RecordError("ember: load_pytorch: a tensor reaches past its storage; the file is corrupt")
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=tuple(s * flat.itemsize for s in stride), writeable=False
    )
    return np.array(view, copy=True)


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    """A parameter is its tensor (``requires_grad`` and hooks are dropped)."""
    return data


_ALLOWED = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self.archive = archive
        self.prefix = prefix
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise RecordError(
            f"ember: load_pytorch: the file references {module}.{name}; ember only reads plain state dicts "
            "(tensors in dicts) and executes nothing from the file. Save `model.state_dict()` with torch.save"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise RecordError(f"ember: load_pytorch: unsupported persistent id {pid!r}")
        storage_type, key = pid[1], str(pid[2])
        if not isinstance(storage_type, _StorageType):
            raise RecordError("ember: load_pytorch: unsupported storage type in the file")
        if key not in self.storages:
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise RecordError(f"ember: load_pytorch: storage {key} is missing from the archive") from None
            if len(raw) % storage_type.dtype.itemsize:
                raise RecordError(f"ember: load_pytorch: storage {key} is truncated")
            self.storages[key] = _Storage(np.frombuffer(raw, dtype=storage_type.dtype.newbyteorder("<")))
        return self.storages[key]


def read_pytorch(path: str | os.PathLike, top_level_key: str | None = None) -> dict[str, np.ndarray]:
    """The tensors of a ``torch.save``'d state dict as ``{key: numpy array}``.

    Nested dicts (e.g. ``{"model": state_dict, ...}``) are flattened with dots;
    ``top_level_key`` picks one entry first. Non-tensor values are dropped.
    """
    if not os.path.isfile(path):
        raise RecordError(f"ember: load_pytorch: no such file {path}")
    if not zipfile.is_zipfile(path):
        raise RecordError(
            f"ember: load_pytorch: {path} is not a zip-format PyTorch file (torch >= 1.6 writes one by default); "
            "re-save it with torch.save(model.state_dict(), path)"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(pickles) != 1:
                raise RecordError(f"ember: load_pytorch: {path} has no single data.pkl; not a torch.save archive")
            prefix = pickles[0][: -len("data.pkl")]
            byteorder = prefix + "byteorder"
            if byteorder in archive.namelist() and archive.read(byteorder).strip() not in (b"little", b""):
                raise RecordError("ember: load_pytorch: big-endian files are not supported")
            obj = _RestrictedUnpickler(archive.read(pickles[0]), archive, prefix).load()
    except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, ValueError, TypeError) as error:
        raise RecordError(f"ember: load_pytorch: {path} is corrupt: {error}") from None
    if top_level_key is not None:
        if not isinstance(obj, dict) or top_level_key not in obj:
            keys = list(obj) if isinstance(obj, dict) else type(obj).__name__
            raise RecordError(f"ember: load_pytorch: no top-level key {top_level_key!r} (found {keys})")
        obj = obj[top_level_key]
    out: dict[str, np.ndarray] = {}
    _flatten(obj, "", out)
    if not out:
        raise RecordError(f"ember: load_pytorch: {path} holds no tensors")
    return out


def _flatten(obj: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    if isinstance(obj, np.ndarray):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)


def remap_keys(arrays: dict[str, np.ndarray], rules: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """Apply regex ``(pattern, replacement)`` rules in order to every key."""
    compiled = [(re.compile(p), r) for p, r in rules]
    out: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        for pattern, replacement in compiled:
            key = pattern.sub(replacement, key)
        if key in out:
            raise RecordError(f"ember: load_pytorch: two keys map to {key!r} after remapping")
        out[key] = value
    return out


def load_pytorch(
    module: Module,
    path: str | os.PathLike,
    *,
    key_remap: Sequence[tuple[str, str]] = (),
    top_level_key: str | None = None,
    strict: bool = True,
    transpose_linear: bool = True,
    skip: Sequence[str] = (r"\.num_batches_tracked$",),
) -> Module:
    """A copy of ``module`` with the weights of a PyTorch state dict file.

    ``key_remap`` renames keys (regex rules, applied in order); keys matching a
    ``skip`` pattern are dropped (BatchNorm's counter by default); 2-D ``weight``s of
    ember ``Linear`` layers are transposed from PyTorch's ``[out, in]``.
    """
    from ember.module.record import load_arrays

    arrays = remap_keys(read_pytorch(path, top_level_key), key_remap)
    skips = [re.compile(s) for s in skip]
    arrays = {k: v for k, v in arrays.items() if not any(s.search(k) for s in skips)}
    if transpose_linear:
        for prefix in _linear_paths(module):
            key = f"{prefix}.weight" if prefix else "weight"
            if key in arrays and arrays[key].ndim == 2:
                arrays[key] = np.ascontiguousarray(arrays[key].T)
    return load_arrays(module, arrays, source=str(path), strict=strict)


def _linear_paths(module: Module) -> list[str]:
    from ember.nn.linear import Linear

    return [path for path, sub in module.modules() if isinstance(sub, Linear)]

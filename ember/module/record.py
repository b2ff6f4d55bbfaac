"""Records: modules and nested state saved in the safetensors format.

A module file holds one tensor per parameter or running state, named by its dotted
path, and metadata mapping each path to its ``ParamId``, dtype, shape and kind,
plus a format version. Writes are atomic (a temporary file, then a rename); a
missing, truncated or corrupt file raises :class:`~ember.errors.RecordError` and
never leaves a half-loaded module.

>>> model.save_file("model.safetensors")                  # doctest: +SKIP
>>> model = Mlp.new(device).load_file("model.safetensors")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, RecordError
from ember.module.atomic import atomic_write
from ember.module.module import Module
from ember.module.param import Param, ParamId, RunningState
from ember.module.visitor import FnMapper
from ember.tensor import Tensor

FORMAT = "ember-record"
FORMAT_VERSION = 1


def _safetensors():
    try:
        import safetensors.numpy as st
    except ImportError:  # pragma: no cover - depends on the install
        raise RecordError("ember: records need the safetensors package: pip install safetensors") from None
    return st


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write a safetensors file atomically (a temporary file in the same folder, then a rename)."""
    st = _safetensors()
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    atomic_write(path, lambda tmp: st.save_file(arrays, tmp, metadata=metadata))


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Tensors and metadata of a safetensors file; a clear RecordError when unreadable."""
    target = Path(path)
    if not target.is_file():
        raise RecordError(f"ember: cannot load {target}: no such file")
    size = target.stat().st_size
    with open(target, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise RecordError(f"ember: {target} is truncated ({size} bytes): not a safetensors record")
        header_len = int.from_bytes(head, "little")
        if header_len <= 0 or 8 + header_len > size:
            raise RecordError(
                f"ember: {target} is truncated or corrupt: its header claims {header_len} bytes, the file has {size}"
            )
        try:
            header = json.loads(handle.read(header_len))
        except (ValueError, UnicodeDecodeError):
            raise RecordError(f"ember: {target} is corrupt: its header is not valid JSON") from None
    if not isinstance(header, dict):
        raise RecordError(f"ember: {target} is corrupt: unexpected header")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)), default=0)
    if 8 + header_len + end > size:
        raise RecordError(
            f"ember: {target} is truncated: the header describes {8 + header_len + end} bytes, the file has {size}"
        )
    st = _safetensors()
    try:
        tensors = st.load_file(str(target))
    except Exception as error:
        raise RecordError(f"ember: {target} is corrupt: {error}") from None
    metadata = header.get("__metadata__") or {}
    return tensors, metadata


def _check_format(path: Any, metadata: dict[str, str], kind: str) -> None:
    if metadata.get("format") != FORMAT:
        raise RecordError(
            f"ember: {path} is a safetensors file but not an ember {kind} record (no ember metadata); "
            "for foreign weights use load_safetensors/load_pytorch with key remapping"
        )
    try:
        version = int(metadata.get("version", "0"))
    except ValueError:
        version = -1
    if version != FORMAT_VERSION:
        raise RecordError(f"ember: {path} has record format version {metadata.get('version')!r}; this ember reads {FORMAT_VERSION}")
    if metadata.get("kind") != kind:
        raise RecordError(f"ember: {path} holds a {metadata.get('kind')!r} record, expected a {kind!r} record")


# ---------------------------------------------------------------------- modules
def module_entries(module: Module) -> dict[str, tuple[str, Any]]:
    """``{path: ("param" | "state", leaf)}`` in traversal order."""
    entries: dict[str, tuple[str, Any]] = {path: ("param", p) for path, p in module.named_params()}
    entries.update({path: ("state", s) for path, s in module.named_states()})
    return entries


def save_file(module: Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Save every parameter and running state of ``module`` to ``path``."""
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    for key, (kind, leaf) in module_entries(module).items():
        value = leaf.val() if kind == "param" else leaf.value()
        array = value.to_numpy()
        tensors[key] = array
        entries[key] = {
            "kind": kind,
            "id": leaf.id.serialize(),
            "dtype": str(value.dtype),
            "shape": list(array.shape),
        }
        if kind == "param":
            entries[key]["require_grad"] = leaf.require_grad
    meta = {
        "format": FORMAT,
        "version": str(FORMAT_VERSION),
        "kind": "module",
        "module": type(module).__name__,
        "entries": json.dumps(entries),
    }
    if metadata:
        meta.update({f"user.{k}": str(v) for k, v in metadata.items()})
    write_safetensors(path, tensors, meta)


def load_file(
    module: Module,
    path: str | os.PathLike,
    *,
    strict: bool = True,
    dtype_policy: str = "module",
) -> Module:
    """A copy of ``module`` with the values (and ids) of the record at ``path``.

    ``strict=True`` requires the record and the module to have the same paths and
    raises listing the missing and unexpected ones; ``strict=False`` loads the paths
    both have and leaves the rest untouched. ``dtype_policy="module"`` casts values
    to the module's dtypes, ``"record"`` keeps the record's. Shapes must match.
    """
    tensors, metadata = read_safetensors(path)
    _check_format(path, metadata, "module")
    try:
        entries = json.loads(metadata["entries"])
    except (KeyError, ValueError):
        raise RecordError(f"ember: {path} is corrupt: its entry table is missing or unreadable") from None
    return _load_entries(module, path, tensors, entries, strict=strict, dtype_policy=dtype_policy)


def load_arrays(
    module: Module,
    arrays: dict[str, np.ndarray],
    *,
    source: str = "arrays",
    strict: bool = True,
    dtype_policy: str = "module",
) -> Module:
    """A copy of ``module`` with values from ``{path: array}`` (ids unchanged)."""
    return _load_entries(module, source, arrays, {}, strict=strict, dtype_policy=dtype_policy)


def _load_entries(
    module: Module,
    source: Any,
    tensors: dict[str, np.ndarray],
    entries: dict[str, Any],
    *,
    strict: bool,
    dtype_policy: str,
) -> Module:
    if dtype_policy not in ("module", "record"):
        raise RecordError(f"ember: load: dtype_policy must be 'module' or 'record', got {dtype_policy!r}")
    ours = module_entries(module)
    missing = [k for k in ours if k not in tensors]
    unexpected = [k for k in tensors if k not in ours]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing from the record: {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected in the record: {', '.join(unexpected)}")
        raise RecordError(
            f"ember: {source} does not match {type(module).__name__}: " + "; ".join(parts)
            + " (pass strict=False to load the matching paths only)"
        )
    # Validate and convert everything before building the new module: never half-loaded.
    loaded: dict[str, tuple[Tensor, ParamId | None]] = {}
    for key, (kind, leaf) in ours.items():
        if key not in tensors:
            continue
        array = tensors[key]
        expected_shape = tuple(leaf.lazy_shape()) if kind == "param" else tuple(leaf.value().dims())
        if tuple(array.shape) != expected_shape:
            raise RecordError(
                f"ember: {source}: {key!r} has shape {list(array.shape)} in the record but {list(expected_shape)} "
                "in the module; build the module with the configuration it was saved with"
            )
        try:
            record_dtype = DType.from_numpy(array.dtype)
        except DTypeError:
            raise RecordError(f"ember: {source}: {key!r} has unsupported dtype {array.dtype}") from None
        module_dtype = leaf.lazy_dtype() if kind == "param" else leaf.value().dtype
        dtype = module_dtype if dtype_policy == "module" else record_dtype
        device = leaf.lazy_device() if kind == "param" else leaf.value().device
        value = Tensor.from_data(array, device=device.inner()).cast(dtype)
        if device.is_autodiff():
            value = value.to_device(device)
        entry = entries.get(key, {})
        pid = ParamId.parse(entry["id"]) if "id" in entry else None
        loaded[key] = (value, pid)

    def map_param(param: Param, path: str) -> Param:
        if path not in loaded:
            return param
        value, pid = loaded[path]
        return Param(pid or param.id, value, param.require_grad)

    def map_state(state: RunningState, path: str) -> RunningState:
        if path not in loaded:
            return state
        value, pid = loaded[path]
        return RunningState(value, pid or state.id)

    return module.map(FnMapper(map_param, map_state))


# ---------------------------------------------------------------------- generic trees
def _flatten(tree: Any, tensors: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = tree.to_numpy()
        return {"__tensor__": key, "dtype": str(tree.dtype)}
    if isinstance(tree, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = tree
        return {"__array__": key}
    if isinstance(tree, dict):
        for k in tree:
            if not isinstance(k, str):
                raise RecordError(f"ember: save_record: dict keys must be strings, got {k!r}")
        return {"__dict__": {k: _flatten(v, tensors) for k, v in tree.items()}}
    if isinstance(tree, (list, tuple)):
        return {"__list__": [_flatten(v, tensors) for v in tree], "tuple": isinstance(tree, tuple)}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, np.generic):
        return tree.item()
    raise RecordError(
        f"ember: save_record: cannot store a {type(tree).__name__}; records hold tensors, numpy arrays, "
        "numbers, strings, None and dicts/lists of them"
    )


def _unflatten(node: Any, tensors: dict[str, np.ndarray], device: Device) -> Any:
    if isinstance(node, dict):
        if "__tensor__" in node:
            array = tensors[node["__tensor__"]]
            return Tensor.from_data(array, device=device, dtype=node.get("dtype"))
        if "__array__" in node:
            return tensors[node["__array__"]]
        if "__dict__" in node:
            return {k: _unflatten(v, tensors, device) for k, v in node["__dict__"].items()}
        if "__list__" in node:
            items = [_unflatten(v, tensors, device) for v in node["__list__"]]
            return tuple(items) if node.get("tuple") else items
        raise RecordError("ember: load_record: corrupt tree node")
    return node


def save_record(path: str | os.PathLike, tree: Any, metadata: dict[str, str] | None = None) -> None:
    """Save a nested structure of tensors, arrays, numbers and strings (atomically)."""
    tensors: dict[str, np.ndarray] = {}
    structure = _flatten(tree, tensors)
    meta = {"format": FORMAT, "version": str(FORMAT_VERSION), "kind": "tree", "tree": json.dumps(structure)}
    if metadata:
        meta.update({f"user.{k}": str(v) for k, v in metadata.items()})
    write_safetensors(path, tensors, meta)


def load_record(path: str | os.PathLike, device: Device | None = None) -> Any:
    """The structure saved by :meth:`save_record`, tensors placed on ``device``."""
    tensors, metadata = read_safetensors(path)
    _check_format(path, metadata, "tree")
    try:
        structure = json.loads(metadata["tree"])
        return _unflatten(structure, tensors, device or Device.default())
    except (KeyError, ValueError, TypeError):
        raise RecordError(f"ember: {path} is corrupt: its structure table is missing or unreadable") from None

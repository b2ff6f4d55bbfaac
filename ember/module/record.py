"""Records: modules and nested state saved in the safetensors format.

A module file holds one tensor per parameter or running state, named by its dotted
path, and metadata mapping each path to its ``ParamId``, dtype, shape and kind,
plus a format version and the CRC-32 of every tensor (see
:mod:`ember.module.safetensors_file`). Writes are atomic (a temporary file, then a
rename); a missing, truncated, corrupt or malformed file raises
:class:`~ember.errors.RecordError` naming the fault and never leaves a half-loaded module.

>>> model.save_file("model.safetensors")                  # doctest: +SKIP
>>> model = Mlp.new(device).load_file("model.safetensors")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, RecordError
from ember.module.module import Module
from ember.module.param import Param, ParamId, RunningState
from ember.module.quantize import quantization_metadata, requantize_for_record
from ember.module.safetensors_file import parse_json, read_safetensors, write_safetensors
from ember.module.visitor import FnMapper
from ember.tensor import Tensor

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "load_arrays",
    "load_file",
    "load_record",
    "module_entries",
    "read_safetensors",
    "save_file",
    "save_record",
    "write_safetensors",
]

FORMAT = "ember-record"
FORMAT_VERSION = 1


def check_format(path: Any, metadata: dict[str, str], kind: str) -> None:
    if metadata.get("format") != FORMAT:
        raise RecordError(
            f"ember: {path} is a safetensors file but not an ember {kind} record (no ember metadata); "
            "for foreign weights read the arrays with ember.module.record.read_safetensors and load them with "
            "load_arrays(module, arrays) (or Module.load_pytorch for PyTorch files)"
        )
    try:
        version = int(metadata.get("version", "0"))
    except ValueError:
        version = -1
    if version != FORMAT_VERSION:
        raise RecordError(
            f"ember: {path} has record format version {metadata.get('version')!r}; this ember reads {FORMAT_VERSION}"
        )
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
    meta.update(quantization_metadata(module))
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
    check_format(path, metadata, "module")
    if "entries" not in metadata:
        raise RecordError(f"ember: {path} is corrupt: its entry table is missing")
    entries = check_entries(path, parse_json(metadata["entries"], "its entry table", path), tensors)
    module = requantize_for_record(module, metadata, path)
    check_shared_ids(path, module, entries)
    return load_entries(module, path, tensors, entries, strict=strict, dtype_policy=dtype_policy)


def check_entries(path: Any, entries: Any, tensors: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """The entry table, checked against the tensors: one entry per tensor, each with a
    kind, a ParamId and the tensor's shape."""
    where = f"ember: {path} is corrupt: its entry table"
    if not isinstance(entries, dict):
        raise RecordError(f"{where} is not an object")
    if set(entries) != set(tensors):
        extra = sorted(set(entries) - set(tensors))[:5]
        absent = sorted(set(tensors) - set(entries))[:5]
        raise RecordError(
            f"{where} does not list exactly the file's tensors (entries without a tensor: {extra}; "
            f"tensors without an entry: {absent})"
        )
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            raise RecordError(f"{where}: {key!r} is not an object")
        if entry.get("kind") not in ("param", "state"):
            raise RecordError(f"{where}: {key!r} has kind {str(entry.get('kind'))[:40]!r}, not 'param' or 'state'")
        pid = entry.get("id")
        if not isinstance(pid, str) or len(pid) != 16 or any(c not in "0123456789abcdef" for c in pid):
            raise RecordError(f"{where}: {key!r} has ParamId {str(pid)[:40]!r}, not 16 hex digits")
        shape = entry.get("shape")
        if shape != list(tensors[key].shape):
            raise RecordError(
                f"{where}: {key!r} has shape {str(shape)[:60]} in the table but {list(tensors[key].shape)} in the data"
            )
        if "require_grad" in entry and not isinstance(entry["require_grad"], bool):
            raise RecordError(f"{where}: {key!r} has a require_grad that is not true/false")
    return entries


def check_shared_ids(path: Any, module: Module, entries: dict[str, dict[str, Any]]) -> None:
    """Entries may share a ParamId only where the module shares one parameter (tied weights)."""
    by_id: dict[str, list[str]] = {}
    for key, entry in entries.items():
        by_id.setdefault(entry["id"], []).append(key)
    ours = {key: leaf.id for key, (_, leaf) in module_entries(module).items()}
    for pid, keys in by_id.items():
        if len(keys) > 1 and len({ours.get(k, k) for k in keys}) > 1:
            raise RecordError(
                f"ember: {path} is corrupt: the entries {', '.join(keys[:6])} share one ParamId ({pid}), but they "
                f"are different parameters of {type(module).__name__}; ids must be unique (the optimizer keys its "
                "state by them)"
            )


def load_arrays(
    module: Module,
    arrays: dict[str, np.ndarray],
    *,
    source: str = "arrays",
    strict: bool = True,
    dtype_policy: str = "module",
) -> Module:
    """A copy of ``module`` with values from ``{path: array}`` (ids unchanged)."""
    return load_entries(module, source, arrays, {}, strict=strict, dtype_policy=dtype_policy)


def load_entries(
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
            f"ember: {source} does not match {type(module).__name__}: "
            + "; ".join(parts)
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
            key, dtype = node["__tensor__"], node.get("dtype")
            if not isinstance(key, str) or key not in tensors or not (dtype is None or isinstance(dtype, str)):
                raise RecordError(f"ember: load_record: a tensor node names no tensor of the file ({str(key)[:40]!r})")
            try:
                return Tensor.from_data(tensors[key], device=device, dtype=dtype)
            except (DTypeError, ValueError):
                raise RecordError(
                    f"ember: load_record: tensor {key!r} has an invalid dtype {str(dtype)[:40]!r}"
                ) from None
        if "__array__" in node:
            key = node["__array__"]
            if not isinstance(key, str) or key not in tensors:
                raise RecordError(f"ember: load_record: an array node names no tensor of the file ({str(key)[:40]!r})")
            return np.array(tensors[key])
        if isinstance(node.get("__dict__"), dict):
            return {k: _unflatten(v, tensors, device) for k, v in node["__dict__"].items()}
        if isinstance(node.get("__list__"), list):
            items = [_unflatten(v, tensors, device) for v in node["__list__"]]
            return tuple(items) if node.get("tuple") is True else items
        raise RecordError(f"ember: load_record: corrupt tree node with keys {sorted(node)[:5]}")
    if isinstance(node, list):
        raise RecordError("ember: load_record: corrupt tree node (a bare list)")
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
    check_format(path, metadata, "tree")
    if "tree" not in metadata:
        raise RecordError(f"ember: {path} is corrupt: its structure table is missing")
    structure = parse_json(metadata["tree"], "its structure table", path)
    try:
        return _unflatten(structure, tensors, device or Device.default())
    except RecordError as error:
        raise RecordError(f"ember: {path} is corrupt: {str(error).removeprefix('ember: load_record: ')}") from None
    except RecursionError:
        raise RecordError(f"ember: {path} is corrupt: its structure table nests too deeply") from None

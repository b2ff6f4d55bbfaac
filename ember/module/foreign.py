"""Weights from other frameworks: one adapter for PyTorch state dicts and safetensors.

Loading runs the same steps for every source:

1. the user's ``remap`` rules (regexes, applied in order) rename the file's keys;
2. keys matching :data:`DEFAULT_SKIP`, ``skip`` or the module's ``weight_map().ignore``
   are dropped;
3. with ``adapt="pytorch"``, the module's :class:`~ember.module.weight_map.WeightMap`
   splits fused tensors and renames paths, then each layer turns PyTorch's names for
   its fields into ember's (``Module.pytorch_names``) and PyTorch's layout into ember's
   (``Module.adapt_pytorch``: ``Linear`` transposes ``[out, in]``), except for the keys
   the map declares ``as_stored``; a layer whose PyTorch twin names and shapes its
   tensors differently first adapts the keys under its path (``Module.adapt_pytorch_keys``:
   ``Lstm`` splits ``weight_ih_l0`` into its gates); the states it declares ``computed`` are not expected;
4. the keys are checked against the module (``strict``) and the values loaded.

:func:`export_arrays` runs steps 3 backwards, so a module writes the layout it read.

>>> model = load_safetensors(Mlp.new(device), "model.safetensors", remap=[(r"^net\\.", "")])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import RecordError
from ember.module.key_mismatch import listing, mismatch_message, suggest_remap
from ember.module.module import Module
from ember.module.safetensors_file import parse_json, read_safetensors
from ember.module.weight_map import WeightMap, _split_at

__all__ = [
    "DEFAULT_SKIP",
    "adapt_arrays",
    "export_arrays",
    "load_foreign",
    "load_safetensors",
    "read_safetensors_dir",
    "remap_keys",
    "suggest_remap",
]

#: Keys always dropped: BatchNorm's step counter, which ember's BatchNorm does not keep
#: (``export_arrays`` writes it back as 0, ``BatchNorm.export_pytorch_extra``).
DEFAULT_SKIP = (r"(^|\.)num_batches_tracked$",)
ADAPTERS = ("pytorch", None)


def remap_keys(
    arrays: dict[str, np.ndarray], rules: Sequence[tuple[str, str]], op: str = "load_pytorch"
) -> dict[str, np.ndarray]:
    """Apply regex ``(pattern, replacement)`` rules in order to every key."""
    try:
        compiled = [(re.compile(p), r) for p, r in rules]
    except (re.error, TypeError, ValueError) as error:
        raise RecordError(f"ember: {op}: the remap rules must be (pattern, replacement) regex pairs: {error}") from None
    out: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        for pattern, replacement in compiled:
            key = pattern.sub(replacement, key)
        if key in out:
            raise RecordError(f"ember: {op}: two keys map to {key!r} after remapping")
        out[key] = value
    return out


def _patterns(patterns: Sequence[str], what: str, op: str) -> list[re.Pattern[str]]:
    try:
        return [re.compile(p) for p in patterns]
    except (re.error, TypeError) as error:
        raise RecordError(f"ember: {op}: {what} must be regex patterns: {error}") from None


def _rename_field(key: str, prefix: str, theirs: str, ours: str) -> str | None:
    """``key`` with the field ``prefix + theirs`` (a leaf or a sub-tree) renamed to ``ours``."""
    head = prefix + theirs
    if key == head:
        return prefix + ours
    if key.startswith(head + "."):
        return prefix + ours + key[len(head) :]
    return None


def _split_fused(arrays: dict[str, np.ndarray], weight_map: WeightMap, op: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, array in arrays.items():
        for rule in weight_map.splits:
            found = _split_at(key, rule.theirs)
            if found is None:
                continue
            prefix, leaf = found
            axis = rule.axis if array.ndim > 1 else 0
            n = array.shape[axis] if array.ndim else 0
            sizes = rule.sizes or (n // len(rule.ours),) * len(rule.ours)
            if sum(sizes) != n:
                raise RecordError(
                    f"ember: {op}: {key!r} has shape {list(array.shape)}; it was declared fused from "
                    f"{len(rule.ours)} parts of sizes {list(sizes)} along axis {axis}"
                )
            cuts = np.cumsum(sizes)[:-1]
            for part, piece in zip(rule.ours, np.split(array, cuts, axis=axis)):
                out[f"{prefix}{part}.{leaf}"] = piece
            break
        else:
            out[key] = array
    return out


def _join_fused(arrays: dict[str, np.ndarray], weight_map: WeightMap) -> dict[str, np.ndarray]:
    out = dict(arrays)
    for rule in weight_map.splits:
        for key in list(out):
            found = _split_at(key, rule.ours[0])
            if found is None:
                continue
            prefix, leaf = found
            parts = [f"{prefix}{part}.{leaf}" for part in rule.ours]
            if not all(p in out for p in parts):
                continue
            pieces = [out.pop(p) for p in parts]
            axis = rule.axis if pieces[0].ndim > 1 else 0
            out[f"{prefix}{rule.theirs}.{leaf}"] = np.concatenate(pieces, axis=axis)
    return out


def adapt_arrays(
    module: Module, arrays: dict[str, np.ndarray], *, names: bool = True, layouts: bool = True, op: str = "load"
) -> dict[str, np.ndarray]:
    """``arrays`` in the module's names and layouts: its weight map's splits and renames,
    then each layer's ``pytorch_names`` (``names``) and ``adapt_pytorch`` (``layouts``)."""
    weight_map = module.weight_map()
    arrays = _split_fused(arrays, weight_map, op)
    out = {weight_map.rename_theirs(key): value for key, value in arrays.items()}
    stored = _patterns(weight_map.as_stored, "as_stored", op)
    for path, layer in module.modules():
        cls = type(layer)
        prefix = f"{path}." if path else ""
        if cls.adapt_pytorch_keys is not Module.adapt_pytorch_keys:
            out = layer.adapt_pytorch_keys(prefix, out)
        if names:
            for theirs, ours in cls.pytorch_names.items():
                for key in [k for k in out if k.startswith(prefix + theirs)]:
                    renamed = _rename_field(key, prefix, theirs, ours)
                    if renamed is not None and renamed not in out:
                        out[renamed] = out.pop(key)
        if layouts and cls.adapt_pytorch is not Module.adapt_pytorch:
            for field in cls._fields:
                key = prefix + field
                if key in out and not any(p.search(key) for p in stored):
                    out[key] = layer.adapt_pytorch(field, out[key])
    return out


def export_arrays(module: Module, adapt: str | None = "pytorch") -> dict[str, np.ndarray]:
    """The module's parameters and states as the foreign checkpoint its weight map
    describes (``adapt="pytorch"``: PyTorch's names and layouts), or under ember's own
    paths (``adapt=None``)."""
    from ember.module.record import module_entries

    _check_adapt(adapt, "export_arrays")
    weight_map = module.weight_map()
    computed = _patterns(weight_map.computed, "computed", "export_arrays") if adapt is not None else []
    out: dict[str, np.ndarray] = {}
    for key, (kind, leaf) in module_entries(module).items():
        if not any(p.search(key) for p in computed):
            out[key] = (leaf.val() if kind == "param" else leaf.value()).to_numpy()
    if adapt is None:
        return out
    stored = _patterns(weight_map.as_stored, "as_stored", "export_arrays")
    for path, layer in module.modules():
        cls = type(layer)
        prefix = f"{path}." if path else ""
        if cls.export_pytorch is not Module.export_pytorch:
            for field in cls._fields:
                key = prefix + field
                if key in out and not any(p.search(key) for p in stored):
                    out[key] = layer.export_pytorch(field, out[key])
        for name, value in layer.export_pytorch_extra().items():
            out[prefix + name] = value
        for theirs, ours in cls.pytorch_names.items():
            for key in [k for k in out if k.startswith(prefix + ours)]:
                renamed = _rename_field(key, prefix, ours, theirs)
                if renamed is not None:
                    out[renamed] = out.pop(key)
    for path, layer in reversed(list(module.modules())):
        if type(layer).export_pytorch_keys is not Module.export_pytorch_keys:
            out = layer.export_pytorch_keys(f"{path}." if path else "", out)
    out = {weight_map.rename_ours(key): value for key, value in out.items()}
    return _join_fused(out, weight_map)


def _check_adapt(adapt: Any, op: str) -> None:
    if adapt not in ADAPTERS:
        raise RecordError(f"ember: {op}: adapt must be 'pytorch' or None, got {adapt!r}")


def load_foreign(
    module: Module,
    arrays: dict[str, np.ndarray],
    *,
    source: str,
    op: str,
    remap: Sequence[tuple[str, str]] = (),
    skip: Sequence[str] = (),
    adapt: str | None = "pytorch",
    names: bool = True,
    layouts: bool = True,
    strict: bool = True,
) -> tuple[Module, list[str], list[str]]:
    """The shared steps of every foreign loader (see the module docstring):
    ``(module with the weights, missing keys, unexpected keys)``."""
    from ember.module.record import load_arrays, module_entries

    _check_adapt(adapt, op)
    arrays = remap_keys(arrays, remap, op)
    skips = _patterns((*DEFAULT_SKIP, *skip, *module.weight_map().ignore), "skip", op)
    arrays = {k: v for k, v in arrays.items() if not any(s.search(k) for s in skips)}
    if adapt == "pytorch":
        arrays = adapt_arrays(module, arrays, names=names, layouts=layouts, op=op)
    computed = _patterns(module.weight_map().computed, "computed", op) if adapt == "pytorch" else []
    ours = {k: v for k, v in module_entries(module).items() if not any(p.search(k) for p in computed)}
    missing = [k for k in ours if k not in arrays]
    unexpected = [k for k in arrays if k not in ours]
    if strict and (missing or unexpected):
        raise RecordError(mismatch_message(module, source, missing, unexpected, op))
    _check_shapes(module, arrays, ours, source, op)
    loaded = load_arrays(module, {k: v for k, v in arrays.items() if k in ours}, source=source, strict=False)
    return loaded, missing, unexpected


def _check_shapes(module: Module, arrays: dict[str, np.ndarray], ours: dict[str, Any], source: str, op: str) -> None:
    for key, (kind, leaf) in ours.items():
        if key not in arrays:
            continue
        expected = tuple(leaf.lazy_shape()) if kind == "param" else tuple(leaf.value().dims())
        got = tuple(arrays[key].shape)
        if got == expected:
            continue
        hint = "build the module with the configuration the checkpoint was saved with"
        if len(got) == 2 and got[::-1] == expected:
            hint = (
                "the checkpoint stores this weight transposed; if it is already [in, out] (as Hugging Face's "
                "Conv1D), declare it in the module's weight_map() as_stored, or load with adapt=None"
            )
        raise RecordError(
            f"ember: {op}: {key!r} has shape {list(got)} in the record ({source}) but {list(expected)} in the "
            f"module {type(module).__name__}; {hint}"
        )


# ---------------------------------------------------------------------- safetensors
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def read_safetensors_dir(path: str | os.PathLike, op: str = "load_safetensors") -> tuple[dict[str, np.ndarray], str]:
    """``(arrays, source)`` of a safetensors checkpoint: one file, a sharded index
    (``*.safetensors.index.json``, Hugging Face's layout), or a directory holding
    ``model.safetensors`` or ``model.safetensors.index.json``."""
    target = Path(path)
    if target.is_dir():
        if (target / INDEX_NAME).is_file():
            target = target / INDEX_NAME
        elif (target / SINGLE_NAME).is_file():
            target = target / SINGLE_NAME
        else:
            raise RecordError(f"ember: {op}: {path} holds neither {SINGLE_NAME} nor {INDEX_NAME}")
    if not target.is_file():
        raise RecordError(f"ember: {op}: cannot load {path}: no such file or directory")
    if target.name.endswith(".json"):
        return _read_sharded(target, op), str(target)
    return read_safetensors(target)[0], str(target)


def _read_sharded(index: Path, op: str) -> dict[str, np.ndarray]:
    try:
        text = index.read_bytes()
    except OSError as error:
        raise RecordError(f"ember: {op}: cannot read {index}: {error}") from None
    table = parse_json(text, "its index", index)
    weight_map = table.get("weight_map") if isinstance(table, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise RecordError(f"ember: {index} is corrupt: it has no weight_map of {{tensor: shard file}}")
    arrays: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard:
            raise RecordError(f"ember: {index} is corrupt: the shard {shard[:80]!r} is not a file name in its folder")
        tensors, _ = read_safetensors(index.parent / shard)
        for key, value in tensors.items():
            if weight_map.get(key) != shard:
                raise RecordError(
                    f"ember: {index} does not match its shards: {key!r} is in {shard} but the index "
                    f"says {str(weight_map.get(key))[:80]}"
                )
            arrays[key] = value
    absent = [k for k in weight_map if k not in arrays]
    if absent:
        raise RecordError(f"ember: {index}: the index lists tensors no shard holds: {listing(absent)}")
    return arrays


def load_safetensors(
    module: Module,
    path: str | os.PathLike,
    *,
    remap: Sequence[tuple[str, str]] = (),
    adapt: str | None = "pytorch",
    strict: bool = True,
    skip: Sequence[str] = (),
) -> Module:
    """A copy of ``module`` with the weights of a foreign safetensors checkpoint (a file,
    a sharded ``*.index.json``, or a directory with either), through the same adapter as
    :func:`~ember.module.pytorch.load_pytorch`: ``remap`` regex rules, ``skip`` patterns,
    and with ``adapt="pytorch"`` the module's weight map and its layers' PyTorch names and
    layouts (``adapt=None`` loads the keys as they are). ``strict=True`` raises a
    ``RecordError`` listing missing and unexpected keys; ``strict=False`` loads the keys
    both have.

    Files saved by ember itself (``Module.save_file``) load with ``Module.load_file``.
    """
    arrays, source = read_safetensors_dir(path)
    return load_foreign(
        module, arrays, source=source, op="load_safetensors", remap=remap, skip=skip, adapt=adapt, strict=strict
    )[0]


def shard_names(n: int) -> list[str]:
    """Hugging Face's shard file names: ``model-00001-of-00003.safetensors``."""
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def index_json(shards: dict[str, list[str]], total_size: int) -> str:
    """The text of ``model.safetensors.index.json`` for ``{shard file: keys}``."""
    table = {key: shard for shard, keys in shards.items() for key in keys}
    return json.dumps({"metadata": {"total_size": total_size}, "weight_map": dict(sorted(table.items()))}, indent=2)

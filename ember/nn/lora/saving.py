"""Saving and loading only the adapters of a LoRA model (safetensors records)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ember.errors import ConfigError, ModuleError, RecordError
from ember.module import Module
from ember.module.record import (  # the module records' own checks, shared
    FORMAT,
    FORMAT_VERSION,
    check_entries,
    check_format,
    check_shared_ids,
    load_entries,
    read_safetensors,
    write_safetensors,
)
from ember.module.safetensors_file import parse_json
from ember.nn.lora.adapters import adapter_params, lora_layers

KIND = "lora-adapters"


def _config_json(model: Module) -> str | None:
    """The JSON of the config that built the first LoRA layer (``None`` when it has none
    or it has no JSON form: targets given as a ParamGroup)."""
    for _, layer in lora_layers(model):
        if layer.config is not None:
            try:
                return json.dumps(layer.config.to_dict(), sort_keys=True)
            except (ConfigError, TypeError):
                return None
    return None


def save_adapters(model: Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write ``model``'s adapters (:func:`adapter_params`) to a safetensors file,
    atomically: one tensor per adapter path (``"blocks.0.q_proj.lora_a"``) with its
    ``ParamId``, each layer's ``r`` and ``alpha``, and the ``LoraConfig`` (as JSON, when
    it has one) in the metadata; ``metadata`` adds ``user.<key>`` entries. The base
    weights are not written: save them once with ``model.save_file`` (or keep the
    pretrained file). Load with :func:`load_adapters`.

    >>> save_adapters(model, "adapters.safetensors")  # doctest: +SKIP
    """
    params = adapter_params(model)
    if not params:
        raise ModuleError(
            f"ember: lora.save_adapters: {type(model).__name__} has no LoRA adapters; "
            "apply them with LoraConfig(...).init(model) first"
        )
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    for key, param in params:
        value = param.val()
        tensors[key] = value.to_numpy()
        entries[key] = {
            "kind": "param",
            "id": param.id.serialize(),
            "dtype": str(value.dtype),
            "shape": list(param.shape),
        }
    layers = {path: {"r": layer.r, "alpha": layer.alpha} for path, layer in lora_layers(model)}
    meta = {
        "format": FORMAT,
        "version": str(FORMAT_VERSION),
        "kind": KIND,
        "module": type(model).__name__,
        "entries": json.dumps(entries),
        "layers": json.dumps(layers),
    }
    config = _config_json(model)
    if config is not None:
        meta["config"] = config
    if metadata:
        meta.update({f"user.{k}": str(v) for k, v in metadata.items()})
    write_safetensors(path, tensors, meta)


def load_adapters(model: Module, path: str | os.PathLike, *, strict: bool = True) -> Module:
    """A copy of ``model`` (to which the same LoRA was applied) with the adapters saved by
    :func:`save_adapters` at ``path``, with their saved ``ParamId``s (so optimizer states
    saved beside them match); every other parameter is kept as it is.

    ``strict=True`` requires the file and the model to have the same adapter paths and
    raises a :class:`RecordError` listing the missing and unexpected ones;
    ``strict=False`` loads the paths both have. Shapes (the rank) and each layer's
    ``alpha`` must match in either case; values are cast to the model's dtypes.

    >>> model = load_adapters(LoraConfig(r=8).init(base_model), "adapters.safetensors")  # doctest: +SKIP
    """
    tensors, metadata = read_safetensors(path)
    check_format(path, metadata, KIND)
    if "entries" not in metadata or "layers" not in metadata:
        raise RecordError(f"ember: {path} is corrupt: its entry or layer table is missing")
    entries = check_entries(path, parse_json(metadata["entries"], "its entry table", path), tensors)
    check_shared_ids(path, model, entries)
    saved_layers = parse_json(metadata["layers"], "its layer table", path)
    if not isinstance(saved_layers, dict):
        raise RecordError(f"ember: {path} is corrupt: its layer table is not an object")
    ours = dict(adapter_params(model))
    if not ours:
        config = metadata.get("config")
        hint = f" (the file's config: {config})" if config else ""
        raise ModuleError(
            f"ember: lora.load_adapters: {type(model).__name__} has no LoRA adapters; apply the LoraConfig the "
            f"adapters were saved with{hint} first: load_adapters(LoraConfig(...).init(model), path)"
        )
    missing = [k for k in ours if k not in tensors]
    unexpected = [k for k in tensors if k not in ours]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing from the file: {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected in the file: {', '.join(unexpected)}")
        raise RecordError(
            f"ember: {path} does not match the adapters of {type(model).__name__}: "
            + "; ".join(parts)
            + " (apply LoRA with the same targets, or pass strict=False to load the matching paths only)"
        )
    mismatched = []
    for layer_path, layer in lora_layers(model):
        saved = saved_layers.get(layer_path)
        if isinstance(saved, dict) and "alpha" in saved and saved["alpha"] != layer.alpha:
            mismatched.append(f"{layer_path or '<root>'} (file: {saved['alpha']}, model: {layer.alpha})")
    if mismatched:
        raise RecordError(
            f"ember: {path}: alpha differs between the file and the model for {', '.join(mismatched)}; "
            "apply LoRA with the alpha the adapters were trained with"
        )
    known = {k: v for k, v in tensors.items() if k in ours}
    return load_entries(model, path, known, entries, strict=False, dtype_policy="module")

"""``from_pretrained`` and ``save_pretrained``: models in Hugging Face's directory layout.

A checkpoint directory holds ``config.json`` (``model_type``, ``architectures`` and the
architecture's fields) and the weights: ``model.safetensors``, or shards listed by
``model.safetensors.index.json``. ember reads only local directories and never opens
a network connection: download a model first (for example with ``hf download NAME
--local-dir DIR``), then pass the directory.

>>> model = from_pretrained("checkpoints/gpt2")        # doctest: +SKIP
>>> logits = model(input_ids)                            # doctest: +SKIP
>>> model.save_pretrained("checkpoints/gpt2-tuned")      # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import typing
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.models.pretrained import PretrainedModel
from ember.module import Param
from ember.module.atomic import atomic_write_text
from ember.module.foreign import (
    export_arrays,
    index_json,
    load_foreign,
    read_safetensors_dir,
    shard_names,
)
from ember.module.record import module_entries
from ember.module.safetensors_file import parse_json, write_safetensors
from ember.module.visitor import FnMapper

__all__ = ["from_pretrained", "read_config", "save_pretrained"]

CONFIG_NAME = "config.json"


class LoadReport(UserWarning):
    """Warned by ``from_pretrained(..., strict=False)``: the keys that did not match."""


def _architectures() -> dict[str, type[PretrainedModel]]:
    from ember.models.registry import ARCHITECTURES

    return ARCHITECTURES


def _directory(path: str | os.PathLike) -> Path:
    target = Path(path)
    if target.is_dir():
        return target
    text = str(path)
    if not target.exists() and not text.startswith((".", "/", "~")) and text.count("/") <= 1:
        raise RecordError(
            f"ember: from_pretrained: {text!r} is not a local directory. ember never downloads: fetch the model's "
            f"files first (for example `hf download {text} --local-dir DIR`, or `save_pretrained(DIR)` in "
            "transformers) and pass that directory"
        )
    raise RecordError(f"ember: from_pretrained: {text} is not a directory (expected config.json and the weights)")


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The ``config.json`` of a checkpoint directory, checked to be a JSON object."""
    file = _directory(path) / CONFIG_NAME
    if not file.is_file():
        raise RecordError(f"ember: from_pretrained: {file.parent} has no {CONFIG_NAME}")
    data = parse_json(file.read_bytes(), "its JSON", file)
    if not isinstance(data, dict):
        raise RecordError(f"ember: {file} is corrupt: it is not a JSON object")
    return data


def _pick_architecture(data: dict[str, Any], file: Any) -> type[PretrainedModel]:
    known = _architectures()
    names = data.get("architectures")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f'ember: from_pretrained: {file} names no architectures (a list such as ["GPT2LMHeadModel"]); '
            f"ember builds {', '.join(sorted(known))}"
        )
    for name in names:
        if name in known:
            return known[name]
    raise ConfigError(
        f"ember: from_pretrained: {file} names the architectures {names} (model_type {data.get('model_type')!r}); "
        f"ember builds {', '.join(sorted(known))}"
    )


def _match_prefix(
    arrays: dict[str, np.ndarray], cls: type[PretrainedModel], data: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The checkpoint's keys under ``cls``'s prefix: a head over a bare checkpoint
    (``BertForSequenceClassification`` over ``"BertModel"`` weights) prefixes them with
    ``bert.``; a bare model over a head's checkpoint keeps the ``bert.`` keys, unprefixed
    (the head's own weights then count as unexpected), as transformers does."""
    known = _architectures()
    theirs = next((known[n] for n in data.get("architectures") or [] if n in known), None)
    prefix = cls.base_model_prefix or (theirs.base_model_prefix if theirs is not None else "")
    if not prefix:
        return arrays
    marker = prefix + "."
    prefixed = any(k.startswith(marker) for k in arrays)
    if cls.base_model_prefix and not prefixed:
        return {marker + k: v for k, v in arrays.items()}
    if not cls.base_model_prefix and prefixed:
        return {(k[len(marker) :] if k.startswith(marker) else k): v for k, v in arrays.items()}
    return arrays


def _cast(model: PretrainedModel, dtype: DType) -> PretrainedModel:
    def cast(param: Param, path: str) -> Param:
        if not param.dtype.is_float or param.dtype == dtype:
            return param
        return Param(param.id, param.val().cast(dtype), param.require_grad)

    return model.map(FnMapper(cast))  # type: ignore[return-value]


def from_pretrained(
    path: str | os.PathLike,
    device: Device | None = None,
    dtype: DType | str | None = None,
    *,
    strict: bool = True,
    architecture: type[PretrainedModel] | None = None,
) -> PretrainedModel:
    """The model of a local Hugging Face checkpoint directory, with its weights.

    The head is the one ``config.json``'s ``architectures`` names (``GPT2LMHeadModel``,
    ``LlamaForCausalLM``, ``BertForMaskedLM``, ...); calling it returns logits. Weights
    stored as float32, float16 or bfloat16 are cast to ``dtype`` (float32 when ``None``).
    ``strict=True`` raises a ``RecordError`` listing missing and unexpected keys;
    ``strict=False`` loads what matches and warns (``LoadReport``) with the rest.
    ``HeadClass.from_pretrained(path)`` builds that head over a checkpoint of the same
    ``model_type`` saved with another head (``BertForSequenceClassification`` over a
    ``BertForMaskedLM`` checkpoint): the shared weights load, the new head keeps its fresh
    initialisation, and a ``LoadReport`` names what was not loaded.
    """
    directory = _directory(path)
    data = read_config(directory)
    cls = architecture or _pick_architecture(data, directory / CONFIG_NAME)
    other_head = architecture is not None and cls.hf_architecture not in (data.get("architectures") or [])
    if other_head and data.get("model_type") != cls.config_class.model_type:
        raise ConfigError(
            f"ember: {cls.__name__}.from_pretrained: {directory} holds {data.get('architectures')} of model_type "
            f"{data.get('model_type')!r}, not a {cls.config_class.model_type!r} model; use "
            "ember.models.from_pretrained to build whatever it holds"
        )
    config = cls.config_class.from_hf(data)
    device = device or Device.default()
    fresh = cls.from_config(config, device)
    arrays, source = read_safetensors_dir(directory, "from_pretrained")
    if other_head:
        arrays = _match_prefix(arrays, cls, data)
    # Another head of the same model (a classifier over a masked-LM checkpoint, as
    # transformers allows): the shared trunk loads, the head keeps its fresh weights.
    loaded, missing, unexpected = load_foreign(
        fresh, arrays, source=source, op="from_pretrained", strict=strict and not other_head
    )
    model = typing.cast(PretrainedModel, loaded)
    if other_head and not set(module_entries(fresh)) - set(missing):
        raise RecordError(f"ember: {cls.__name__}.from_pretrained: no parameter of {directory} fits this model")
    if missing or unexpected:
        warnings.warn(
            LoadReport(
                f"ember: from_pretrained({directory}): {len(missing)} parameters kept their fresh initialisation "
                f"({', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''}); {len(unexpected)} keys of the "
                f"checkpoint were not used ({', '.join(unexpected[:8])}{', ...' if len(unexpected) > 8 else ''})"
            ),
            stacklevel=2,
        )
    if dtype is not None:
        model = _cast(model, DType.parse(dtype))
    return model


_HF_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}


def save_pretrained(model: PretrainedModel, path: str | os.PathLike, *, max_shard_size: int | None = None) -> None:
    """Write ``model`` as a Hugging Face checkpoint directory: ``config.json`` and the
    weights under Hugging Face's names and layouts (``model.safetensors``, or shards of
    at most ``max_shard_size`` bytes with ``model.safetensors.index.json``). Each file is
    written atomically (a temporary file, then a rename)."""
    if not isinstance(model, PretrainedModel):
        raise ConfigError(
            f"ember: save_pretrained needs a model of ember.models (GPT2LMHeadModel, ...), got {type(model).__name__}; "
            "save other modules with Module.save_file"
        )
    if max_shard_size is not None and max_shard_size <= 0:
        raise ConfigError(f"ember: save_pretrained: max_shard_size must be > 0 bytes, got {max_shard_size}")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = export_arrays(model)
    floats = [a.dtype for a in arrays.values() if a.dtype.kind == "f" or a.dtype.name == "bfloat16"]
    config = model.config.to_hf()
    config["architectures"] = [model.hf_architecture]
    config["dtype"] = _HF_DTYPES.get(floats[0].name if floats else "float32", "float32")
    shards = _shards(arrays, max_shard_size)
    meta = {"format": "pt"}
    if len(shards) == 1:
        write_safetensors(directory / "model.safetensors", arrays, meta)
        stale = directory / "model.safetensors.index.json"
    else:
        names = shard_names(len(shards))
        for name, keys in zip(names, shards):
            write_safetensors(directory / name, {k: arrays[k] for k in keys}, meta)
        total = sum(a.nbytes for a in arrays.values())
        atomic_write_text(directory / "model.safetensors.index.json", index_json(dict(zip(names, shards)), total))
        stale = directory / "model.safetensors"
    if stale.exists():
        stale.unlink()  # a checkpoint of the other kind would shadow this one
    atomic_write_text(directory / CONFIG_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _shards(arrays: dict[str, np.ndarray], limit: int | None) -> list[list[str]]:
    if limit is None:
        return [list(arrays)]
    shards: list[list[str]] = [[]]
    size = 0
    for key, array in arrays.items():
        if shards[-1] and size + array.nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += array.nbytes
    return shards

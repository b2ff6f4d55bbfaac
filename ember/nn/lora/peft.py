"""LoRA adapters in Hugging Face PEFT's directory layout: ``adapter_config.json`` and
``adapter_model.safetensors``, keyed by the base model's module paths in the foreign
checkpoint's names (``base_model.model.<module>.lora_A.weight``, ``[r, in]``, and
``lora_B.weight``, ``[out, r]``).

The module paths are translated through the model's :class:`~ember.module.WeightMap`
(the map ``from_pretrained`` loads with), so adapters trained with PEFT on a
``transformers`` model load onto the same model built by ``ember.models``, and adapters
trained in ember load into PEFT.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ember.errors import ConfigError, ModuleError, RecordError
from ember.module import Module, Param, ParamId
from ember.module.atomic import atomic_write_text
from ember.module.foreign import adapt_arrays
from ember.module.key_mismatch import listing
from ember.module.record import load_arrays, module_entries
from ember.module.safetensors_file import read_safetensors, write_safetensors
from ember.nn.dropout import Dropout
from ember.nn.linear import Linear
from ember.nn.lora.adapters import lora_layers
from ember.nn.lora.config import LoraConfig
from ember.nn.lora.linear import LoraLinear
from ember.nn.lora.tree import replace_modules
from ember.tensor import Tensor

M = TypeVar("M", bound=Module)

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>A|B)(?:\.[^.]+)?\.weight$")
# Options of PEFT's LoraConfig that change the adapted model's math; ember refuses them
# rather than loading something that computes another function.
_REFUSED = {
    "use_dora": "DoRA (weight-decomposed adapters)",
    "use_qalora": "QA-LoRA",
    "lora_bias": "trainable biases on lora_B",
    "layer_replication": "layer replication",
    "trainable_token_indices": "trainable token embeddings",
    "target_parameters": "adapters on raw parameters (target_parameters)",
}


def load_peft(model: M, path: str | os.PathLike) -> M:
    """``model`` (a base model, without adapters) with the LoRA adapters of a PEFT
    directory: each adapted layer becomes a :class:`LoraLinear` holding the saved
    ``lora_A``/``lora_B`` (transposed into ember's ``[in, out]`` layout) with PEFT's scale
    (``lora_alpha / r``, per layer with ``rank_pattern``/``alpha_pattern``;
    ``lora_alpha / sqrt(r)`` with ``use_rslora``). Every base parameter is frozen and the
    adapters train, as after :meth:`LoraConfig.init`. ``modules_to_save`` weights replace
    the base model's and train too.

    Options that change the math and that ember does not implement (DoRA, biases other
    than ``"none"``, adapters on embeddings) are refused by name.

    >>> model = load_peft(ember.models.from_pretrained("gpt2-small"), "gpt2-lora")  # doctest: +SKIP
    """
    directory = Path(path)
    config = _read_config(directory)
    arrays = _read_weights(directory)
    adapters: dict[str, dict[str, np.ndarray]] = {}
    saved: dict[str, np.ndarray] = {}
    for key, array in arrays.items():
        name = key[len(_PREFIX) :] if key.startswith(_PREFIX) else key
        if "lora_embedding_" in name or "lora_magnitude_vector" in name:
            raise RecordError(
                f"ember: load_peft: {directory / WEIGHTS_FILE} holds {key!r}: adapters on embeddings and DoRA "
                "magnitudes are not supported (ember's LoRA adapts Linear layers)"
            )
        match = _LORA_KEY.match(name)
        if match:
            adapters.setdefault(match["module"], {})[match["which"]] = array
        else:
            saved[name] = array
    if not adapters:
        raise RecordError(f"ember: load_peft: {directory / WEIGHTS_FILE} holds no lora_A/lora_B weights")
    applied = [p or "<root>" for p, m in model.modules() if isinstance(m, LoraLinear)]
    if applied:
        raise ModuleError(
            f"ember: load_peft: the model already has LoRA adapters ({listing([repr(p) for p in applied], 8)}); "
            "load PEFT adapters onto the base model"
        )
    layers = _our_layers(model, adapters, directory)
    dropout = float(config.get("lora_dropout") or 0.0)
    base_r, base_alpha = int(config.get("r", 8)), float(config.get("lora_alpha", 8))
    rslora = bool(config.get("use_rslora"))
    alpha_pattern = config.get("alpha_pattern") or {}
    record = LoraConfig(r=base_r, alpha=_scale_alpha(base_alpha, base_r, rslora), dropout=dropout)
    built: dict[str, LoraLinear] = {}
    for ours, (theirs, layer) in layers.items():
        a, b = adapters[theirs]["A"], adapters[theirs]["B"]
        r = a.shape[0]
        if (
            a.ndim != 2
            or b.ndim != 2
            or b.shape[1] != r
            or (a.shape[1], b.shape[0]) != tuple(layer.weight.lazy_shape())
        ):
            raise RecordError(
                f"ember: load_peft: the adapters of {theirs!r} have shapes lora_A {list(a.shape)} and lora_B "
                f"{list(b.shape)}; the layer {ours!r} is [{layer.d_input}, {layer.d_output}] (in, out), so they must "
                f"be [r, {layer.d_input}] and [{layer.d_output}, r]"
            )
        alpha = float(_pattern_value(alpha_pattern, theirs, base_alpha))
        built[ours] = LoraLinear(
            base=layer.freeze(),  # type: ignore[arg-type]  # freeze keeps the class
            lora_a=_param(a.T, layer),
            lora_b=_param(b.T, layer),
            dropout=Dropout(dropout),
            alpha=_scale_alpha(alpha, r, rslora),
            config=record,
        )
    out = replace_modules(model.freeze(), lambda p, m: built.get(p))
    if saved:
        out = _load_saved(out, saved, directory)
    return out  # type: ignore[return-value]  # the root's class is kept


def save_peft(
    model: Module,
    path: str | os.PathLike,
    *,
    base_model_name_or_path: str | None = None,
    task_type: str | None = None,
) -> None:
    """Write ``model``'s LoRA adapters as a PEFT directory (``adapter_config.json`` and
    ``adapter_model.safetensors``, each written atomically) under the foreign names of
    the model's weight map, so ``peft.PeftModel.from_pretrained(base, path)`` loads
    them onto the ``transformers`` model. Layers whose rank or alpha differ from the most
    common one are listed in ``rank_pattern``/``alpha_pattern``.

    >>> save_peft(model, "my-adapter", base_model_name_or_path="gpt2")  # doctest: +SKIP
    """
    layers = lora_layers(model)
    if not layers:
        raise ModuleError(
            f"ember: save_peft: {type(model).__name__} has no LoRA adapters; apply them with "
            "LoraConfig(...).init(model) or load_peft first"
        )
    weight_map = model.weight_map()
    stored = [re.compile(p) for p in weight_map.as_stored]
    tensors: dict[str, np.ndarray] = {}
    names: dict[str, LoraLinear] = {}
    fan_in_fan_out = set()
    for ours, layer in layers:
        theirs = _theirs(model, ours)
        names[theirs] = layer
        tensors[f"{_PREFIX}{theirs}.lora_A.weight"] = np.ascontiguousarray(layer.lora_a.val().to_numpy().T)
        tensors[f"{_PREFIX}{theirs}.lora_B.weight"] = np.ascontiguousarray(layer.lora_b.val().to_numpy().T)
        fan_in_fan_out.add(any(p.search(f"{ours}.weight") for p in stored))
    if len(fan_in_fan_out) > 1:
        raise ConfigError(
            "ember: save_peft: the adapted layers mix [in, out] (Conv1D) and [out, in] weights in the foreign "
            "checkpoint; PEFT's fan_in_fan_out is one flag per adapter: adapt one kind"
        )
    r = Counter(layer.r for layer in names.values()).most_common(1)[0][0]
    alpha = Counter(layer.alpha for layer in names.values()).most_common(1)[0][0]
    dropouts = {layer.dropout.prob for layer in names.values()}
    config = {
        "peft_type": "LORA",
        "task_type": task_type,
        "base_model_name_or_path": base_model_name_or_path,
        "r": r,
        "lora_alpha": _json_number(alpha),
        "lora_dropout": max(dropouts),
        "target_modules": _targets(model, sorted(names)),
        "rank_pattern": {n: layer.r for n, layer in names.items() if layer.r != r},
        "alpha_pattern": {n: _json_number(layer.alpha) for n, layer in names.items() if layer.alpha != alpha},
        "fan_in_fan_out": fan_in_fan_out.pop(),
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "init_lora_weights": True,
        "inference_mode": True,
    }
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(directory / WEIGHTS_FILE, tensors, {"format": "pt"})
    atomic_write_text(directory / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------- reading
def _read_config(directory: Path) -> dict[str, Any]:
    file = directory / CONFIG_FILE
    if not file.is_file():
        raise RecordError(
            f"ember: load_peft: {directory} has no {CONFIG_FILE}; pass the directory PEFT's save_pretrained wrote"
        )
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(f"ember: load_peft: {file} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise RecordError(f"ember: load_peft: {file} must hold a JSON object")
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(
            f"ember: load_peft: {file} is a {config.get('peft_type')} adapter; ember loads LoRA adapters only"
        )
    for key, what in _REFUSED.items():
        if config.get(key):
            raise ConfigError(
                f"ember: load_peft: {file} sets {key}={config[key]!r} ({what}), which ember does not support"
            )
    if config.get("bias", "none") != "none":
        raise ConfigError(
            f"ember: load_peft: {file} sets bias={config['bias']!r}: trained biases are not supported; "
            "train with bias='none'"
        )
    r, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    if not (isinstance(r, int) and r >= 1 and isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise RecordError(f"ember: load_peft: {file}: r={r!r} and lora_alpha={alpha!r} must be positive numbers")
    return config


def _read_weights(directory: Path) -> dict[str, np.ndarray]:
    file = directory / WEIGHTS_FILE
    if not file.is_file():
        hint = " (adapter_model.bin is a pickle: resave it with safe_serialization=True)"
        raise RecordError(
            f"ember: load_peft: {directory} has no {WEIGHTS_FILE}"
            + (hint if (directory / "adapter_model.bin").exists() else "")
        )
    arrays, _ = read_safetensors(file)
    return arrays


def _our_layers(
    model: Module, adapters: dict[str, dict[str, np.ndarray]], directory: Path
) -> dict[str, tuple[str, Linear]]:
    """Our path of each adapted module (their name), with our ``Linear`` there."""
    modules = dict(model.modules())
    out: dict[str, tuple[str, Linear]] = {}
    unknown = []
    for theirs, pair in adapters.items():
        if set(pair) != {"A", "B"}:
            raise RecordError(
                f"ember: load_peft: {directory / WEIGHTS_FILE} holds lora_{''.join(pair)} of {theirs!r} without "
                f"its lora_{'B' if 'A' in pair else 'A'}; the file is incomplete"
            )
        ours = _ours(model, theirs)
        layer = modules.get(ours)
        if not isinstance(layer, Linear):
            unknown.append(f"{theirs!r} (ours: {ours!r}, {type(layer).__name__ if layer is not None else 'absent'})")
            continue
        out[ours] = (theirs, layer)
    if unknown:
        raise RecordError(
            f"ember: load_peft: the adapters in {directory} target modules that are not Linear layers of "
            f"{type(model).__name__}: {listing(unknown, 8)}; load them onto the base model they were trained on"
        )
    return out


def _ours(model: Module, theirs: str) -> str:
    key = _rename(model, f"{theirs}.weight", ours=True)
    return key[: -len(".weight")]


def _theirs(model: Module, ours: str) -> str:
    key = _rename(model, f"{ours}.weight", ours=False)
    return key[: -len(".weight")]


def _rename(model: Module, key: str, *, ours: bool) -> str:
    weight_map = model.weight_map()
    for split in weight_map.splits:
        runs = split.ours if not ours else (split.theirs,)
        if any(f".{run}." in f".{key}" for run in runs):
            raise ConfigError(
                f"ember: PEFT adapters: {key!r} is part of a fused projection ({split.theirs!r} <-> {list(split.ours)}) "
                "in this model's weight map; LoRA on one part of it has no equivalent in the other layout"
            )
    return weight_map.rename_theirs(key) if ours else weight_map.rename_ours(key)


def _pattern_value(patterns: dict[str, Any], name: str, default: Any) -> Any:
    """PEFT's per-layer override: the first pattern that matches the end of ``name``."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", name):
            return value
    return default


def _scale_alpha(alpha: float, r: int, rslora: bool) -> float:
    """The ``alpha`` that gives ember's ``alpha / r`` the scale PEFT uses
    (``alpha / sqrt(r)`` with rank-stabilised LoRA)."""
    return alpha * math.sqrt(r) if rslora else alpha


def _param(array: np.ndarray, layer: Linear) -> Param:
    weight = layer.weight
    value = Tensor.from_data(np.ascontiguousarray(array), device=weight.lazy_device()).cast(weight.lazy_dtype())
    return Param(ParamId.new(), value, True)


def _load_saved(model: Module, saved: dict[str, np.ndarray], directory: Path) -> Module:
    """``modules_to_save``: full weights (PEFT's copies of whole layers) that replace the base's and train."""
    arrays = adapt_arrays(model, saved, op="load_peft")
    entries = module_entries(model)
    absent = [k for k in arrays if k not in entries or entries[k][0] != "param"]
    if absent:
        raise RecordError(
            f"ember: load_peft: {directory / WEIGHTS_FILE} holds weights of modules_to_save that are not parameters "
            f"of {type(model).__name__}: {listing([repr(k) for k in absent], 8)} (a head tied to the embedding has "
            "no weight of its own)"
        )
    loaded = load_arrays(model, arrays, source=str(directory / WEIGHTS_FILE), strict=False)
    keys = set(arrays)
    return loaded.map_params(lambda p, path: p.set_require_grad(True) if path in keys else p)


def _targets(model: Module, names: list[str]) -> list[str] | str:
    """PEFT's ``target_modules``: the adapted layers' last names when they select exactly
    those layers, else a regex of their full names."""
    leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
    candidates = []
    for path, module in model.modules():
        if isinstance(module, (Linear, LoraLinear)) and path and not path.endswith(".base"):
            theirs = _theirs(model, path)
            if theirs.rsplit(".", 1)[-1] in leaves:
                candidates.append(theirs)
    if sorted(candidates) == names:
        return leaves
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def _json_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value

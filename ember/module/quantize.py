"""``Module.quantize``: post-training quantization of a module tree.

Every sub-module whose class has a quantized form (its :meth:`Module.quantized` returns
a module: ``Linear``, ``Conv1d``, ``Conv2d``) and whose weight path the
:class:`ParamGroup` selects is replaced by that form; everything else is shared. The
default group is every such layer except the head (a layer whose field is named
``head``, ``lm_head`` or ``classifier``). Embeddings (a class with ``quantize_opt_in``)
are left in float unless ``include_embeddings=True``, as in Burn and torchao; then the
group selects them as any other layer, and a head tied to one reads its packed table. Under the
default group a layer the scheme cannot take (an int4 block that does not divide its
input size) stays in float, with a warning naming it; under a given group it is an error. A
``"static"`` scheme first runs the float model over ``calibration`` (an iterable of
inputs, each passed as ``model(x)``, or ``model(*x)`` for a tuple) and records each
selected layer's largest input magnitude, whose ``/ 127`` becomes the layer's fixed
activation scale.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ember.errors import ConfigError, ShapeError
from ember.module.group import ParamGroup
from ember.module.module import Module
from ember.tensor import Tensor
from ember.tensor.quant import QuantScheme

__all__ = ["DEFAULT_GROUP", "HEAD_NAMES", "quantization_metadata", "quantize_module", "schemes_of"]

#: Field names taken for a model's output layer, left in float by the default group.
HEAD_NAMES = ("head", "lm_head", "classifier")
#: Every layer but the head.
DEFAULT_GROUP = ~ParamGroup.regex(r"(^|\.)(" + "|".join(HEAD_NAMES) + r")\.weight$")
#: The metadata key of a record that holds a quantized module: ``{path: scheme}``.
METADATA_KEY = "quantization"


def quantize_module(
    module: Module,
    scheme: QuantScheme,
    group: ParamGroup | None = None,
    calibration: Iterable[Any] | None = None,
    include_embeddings: bool = False,
) -> Module:
    if not isinstance(scheme, QuantScheme):
        raise ConfigError(
            f"ember: Module.quantize: expected a QuantScheme (QuantScheme.int8(), QuantScheme.int4(block=32)), "
            f"got {type(scheme).__name__}"
        )
    explicit = group is not None
    group = DEFAULT_GROUP if group is None else group
    if not isinstance(group, ParamGroup):
        raise ConfigError(f"ember: Module.quantize: group must be a ParamGroup, got {type(group).__name__}")
    chosen = _selected(module, group, include_embeddings)
    scales: dict[str, float] = {}
    if scheme.activations == "static":
        if calibration is None:
            raise ConfigError(
                "ember: Module.quantize: a 'static' activation scheme needs calibration=, an iterable of model "
                "inputs from which each layer's input scale is measured"
            )
        # An embedding's input is indices: it is quantized weight-only, and not observed.
        layers = dict(module.modules())
        scales = _calibrate(module, {p for p in chosen if not _opt_in(layers[p])}, calibration)
    elif calibration is not None:
        raise ConfigError(
            f"ember: Module.quantize: calibration= sets static activation scales; {scheme!r} has none "
            "(use QuantScheme.int8(activations='static'))"
        )
    skipped: list[str] = []

    def convert(path: str, layer: Module) -> Module | None:
        if path not in chosen:
            return None
        try:
            return layer.quantized(scheme, scales.get(path))
        except ShapeError as error:
            if explicit:
                raise ShapeError(f"ember: Module.quantize: layer {path or '(root)'!r}: {error}") from None
            skipped.append(path)
            return None

    out = _replace(module, "", convert)
    if skipped:
        warnings.warn(
            f"ember: Module.quantize: {scheme!r} does not fit the layers {skipped[:6]} (their input size is not a "
            "multiple of the block); they stay in float. Pass a group to choose layers explicitly.",
            stacklevel=3,
        )
    return out


def _opt_in(layer: Module) -> bool:
    """Whether a layer is quantized only on request (an embedding)."""
    return bool(getattr(type(layer), "quantize_opt_in", False))


def _selected(module: Module, group: ParamGroup, include_embeddings: bool = False) -> set[str]:
    """Paths of the layers with a quantized form whose weight the group selects."""
    chosen = set()
    for path, layer in module.modules():
        if type(layer).quantized is Module.quantized or (_opt_in(layer) and not include_embeddings):
            continue
        weight = getattr(layer, "weight", None)
        if weight is None:
            continue
        if group.matches(weight.id, f"{path}.weight" if path else "weight"):
            chosen.add(path)
    return chosen


def _replace(value: Any, path: str, fn: Callable[[str, Module], Module | None]) -> Any:
    """``value`` with each sub-module for which ``fn`` gives a module replaced by it."""
    if isinstance(value, Module):
        new = fn(path, value)
        if new is not None:
            return new
        changes = {}
        for name in type(value)._fields:
            old = value.__dict__.get(name)
            out = _replace(old, f"{path}.{name}" if path else name, fn)
            if out is not old:
                changes[name] = out
        if not changes:
            return value
        # As Module.map: a new module of the same class with the changed fields. A
        # quantized layer stands where its float layer is declared (a QuantizedLinear in
        # a field annotated Linear), so the declared-type check is not run here.
        out = object.__new__(type(value))
        object.__setattr__(out, "__dict__", {**value.__dict__, **changes})
        return out
    if isinstance(value, (list, tuple)):
        items = [_replace(v, f"{path}.{i}" if path else str(i), fn) for i, v in enumerate(value)]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        mapped = {k: _replace(v, f"{path}.{k}" if path else str(k), fn) for k, v in value.items()}
        return value if all(mapped[k] is v for k, v in value.items()) else mapped
    return value


class _Observer(Module):
    """A layer wrapped during calibration: records the largest input magnitude."""

    layer: Module
    seen: list

    def __getattr__(self, name: str) -> Any:
        # The layer's own attributes (a parent may read ``output.d_output`` while it runs).
        layer = self.__dict__.get("layer")
        if layer is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(layer, name)

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(float(x.detach().abs().max().into_scalar()))
        return self.layer(x, *args, **kwargs)


def _calibrate(module: Module, chosen: set[str], calibration: Iterable[Any]) -> dict[str, float]:
    seen: dict[str, list[float]] = {path: [] for path in chosen}
    observed = _replace(
        module, "", lambda path, layer: _Observer(layer=layer, seen=seen[path]) if path in chosen else None
    )
    batches = 0
    for batch in calibration:
        observed(*batch) if isinstance(batch, tuple) else observed(batch)
        batches += 1
    if batches == 0:
        raise ConfigError("ember: Module.quantize: the calibration loader gave no batches")
    scales = {}
    for path, values in seen.items():
        if not values:
            raise ConfigError(
                f"ember: Module.quantize: calibration never ran the layer {path!r}; give inputs that reach it or "
                "leave it out of the group"
            )
        scales[path] = max(max(values), 1e-30) / 127.0
    return scales


def schemes_of(module: Module) -> dict[str, QuantScheme]:
    """``{path: scheme}`` of the quantized layers of ``module``."""
    found = {path: getattr(layer, "scheme", None) for path, layer in module.modules()}
    return {path: scheme for path, scheme in found.items() if isinstance(scheme, QuantScheme)}


def quantization_metadata(module: Module) -> dict[str, str]:
    """The record metadata naming each quantized layer's scheme (empty for a float module)."""
    schemes = schemes_of(module)
    if not schemes:
        return {}
    return {METADATA_KEY: json.dumps({path: json.loads(s.to_json()) for path, s in schemes.items()}, sort_keys=True)}


def requantize_for_record(module: Module, metadata: dict[str, str], source: Any) -> Module:
    """``module`` with the layers a record says are quantized put in that form (values
    are then loaded from the record), so a float template loads a quantized file."""
    text = metadata.get(METADATA_KEY)
    if text is None:
        return module
    try:
        saved = {path: QuantScheme.from_json(json.dumps(s)) for path, s in json.loads(text).items()}
    except (ValueError, AttributeError) as exc:
        raise ConfigError(f"ember: {source}: its quantization metadata is corrupt ({exc})") from None
    have = schemes_of(module)
    todo = {path: s for path, s in saved.items() if have.get(path) != s}
    if not todo:
        return module
    layers = dict(module.modules())
    missing = [p for p in todo if p not in layers or type(layers[p]).quantized is Module.quantized]
    if missing:
        raise ConfigError(
            f"ember: {source} holds quantized layers at {missing[:4]} which this {type(module).__name__} has no "
            "quantizable layer for; load it into the module it was saved from"
        )
    return _replace(
        module,
        "",
        lambda path, layer: (
            layer.quantized(todo[path], 1.0 if todo[path].activations == "static" else None) if path in todo else None
        ),
    )

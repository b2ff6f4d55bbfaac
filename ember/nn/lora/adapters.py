"""The adapters of a LoRA model: listing them, and folding them into the base layers."""

from __future__ import annotations

from typing import TypeVar

from ember.errors import ModuleError
from ember.module import Module, Param, ParamGroup
from ember.nn.lora.linear import LoraLinear
from ember.nn.lora.tree import replace_modules

M = TypeVar("M", bound=Module)


def lora_layers(model: Module) -> list[tuple[str, LoraLinear]]:
    """``(path, layer)`` for every :class:`LoraLinear` of ``model``, in traversal order."""
    return [(path, m) for path, m in model.modules() if isinstance(m, LoraLinear)]


def adapter_params(model: Module) -> list[tuple[str, Param]]:
    """``(path, Param)`` of every adapter (each layer's ``lora_a`` then ``lora_b``), the
    parameters a LoRA fine-tune trains.

    >>> from ember.nn import LinearConfig
    >>> from ember.nn.lora import LoraConfig
    >>> [path for path, _ in adapter_params(LoraConfig(r=2).init(LinearConfig(3, 5).init()))]
    ['lora_a', 'lora_b']
    """
    out: list[tuple[str, Param]] = []
    for path, layer in lora_layers(model):
        prefix = f"{path}." if path else ""
        out.append((prefix + "lora_a", layer.lora_a))
        out.append((prefix + "lora_b", layer.lora_b))
    return out


def adapter_group(model: Module) -> ParamGroup:
    """A :class:`ParamGroup` of ``model``'s adapters (by ``ParamId``, so it stays valid
    through optimizer steps), e.g. for ``optim.with_group(adapter_group(model), ...)``."""
    return ParamGroup.ids(p.id for _, p in adapter_params(model))


def merge(model: M) -> M:
    """``model`` with each :class:`LoraLinear` folded back into a plain ``Linear``
    (``weight + scale * lora_a @ lora_b``, see :meth:`LoraLinear.merged`): the original
    structure, paths, shapes and ``ParamId``s, so it saves and loads as the model did
    before LoRA. ``require_grad`` flags are kept (the base stays frozen:
    ``merged.unfreeze()`` to train it all).

    >>> from ember.nn import LinearConfig
    >>> from ember.nn.lora import LoraConfig
    >>> type(merge(LoraConfig(r=2).init(LinearConfig(3, 5).init()))).__name__
    'Linear'
    """
    if not lora_layers(model):
        raise ModuleError(
            f"ember: lora.merge: {type(model).__name__} has no LoRA layers to merge; "
            "apply adapters with LoraConfig(...).init(model) first"
        )

    def fold(path: str, module: Module) -> Module | None:
        return module.merged() if isinstance(module, LoraLinear) else None

    return replace_modules(model, fold)  # type: ignore[return-value]  # the root's class is kept

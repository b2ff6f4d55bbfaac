"""``LoraConfig``: which ``Linear`` layers get low-rank adapters, and their shape."""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

from ember.errors import ConfigError, ModuleError
from ember.module import Config, Module, Param, ParamGroup
from ember.module.key_mismatch import listing
from ember.nn.dropout import Dropout
from ember.nn.init import KaimingUniform, Zeros
from ember.nn.linear import Linear
from ember.nn.lora.linear import LoraLinear
from ember.nn.lora.tree import replace_modules

M = TypeVar("M", bound=Module)

# PEFT's default for lora_A, ``kaiming_uniform_(a=sqrt(5))`` over ``fan_in = d_input``:
# uniform on ``±1/sqrt(d_input)`` (the same bound as a default Linear).
_A_INIT = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)


class LoraConfig(Config):
    """Low-rank adapters (LoRA, Hu et al. 2021) as Hugging Face PEFT configures them.

    ``r`` is the rank, ``alpha`` sets the update's factor ``alpha / r``, ``dropout`` the
    probability of the dropout on the adapter's input. ``targets`` selects ``Linear``
    layers by module path (``Module.modules()``'s dotted paths):

    - ``None`` (default): every ``Linear``;
    - a regex string, matched with ``re.search`` (``r"attn\\.(query|value)$"``);
    - a list of names: a layer whose path is a name or ends with ``"." + name``
      (PEFT's ``target_modules=["q_proj", "v_proj"]``);
    - a :class:`ParamGroup`: a layer whose ``weight`` parameter the group matches
      (by id or path, e.g. ``ParamGroup.prefix("encoder.")``).

    :meth:`init` returns the model with each selected layer replaced by a
    :class:`LoraLinear` and every other parameter frozen, so only the adapters train.

    >>> from ember.nn import LinearConfig
    >>> layer = LoraConfig(r=4).init(LinearConfig(16, 32).init())
    >>> layer.lora_a.lazy_shape(), layer.lora_b.lazy_shape(), layer.scale
    (Shape([16, 4]), Shape([4, 32]), 4.0)
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: str | list[str] | tuple[str, ...] | ParamGroup | None = None

    def validate(self) -> None:
        if self.r < 1:
            raise ConfigError(f"ember: LoraConfig: r (the rank) must be >= 1, got {self.r}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ConfigError(f"ember: LoraConfig: alpha must be a finite number > 0, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"ember: LoraConfig: dropout must lie in [0, 1), got {self.dropout}")
        targets = self.targets
        if isinstance(targets, str):
            try:
                re.compile(targets)
            except re.error as error:
                raise ConfigError(f"ember: LoraConfig: targets {targets!r} is not a valid regex: {error}") from None
        elif isinstance(targets, (list, tuple)) and not (targets and all(isinstance(t, str) and t for t in targets)):
            raise ConfigError(
                f"ember: LoraConfig: targets as a list must hold one or more non-empty layer names, got {targets!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        if isinstance(self.targets, ParamGroup):
            raise ConfigError(
                f"ember: LoraConfig: targets={self.targets!r} is a ParamGroup, which has no JSON form; "
                "select the layers with a regex or a list of names to save the config"
            )
        return super().to_dict()

    # ------------------------------------------------------------------ selection
    def select(self, model: Module) -> list[str]:
        """The paths of the layers :meth:`init` adapts, in traversal order. Raises a
        :class:`ConfigError` when a selected module is not a ``Linear`` or nothing is
        selected."""
        modules = list(model.modules())
        targets = self.targets
        chosen: list[tuple[str, Module]]
        if targets is None:
            chosen = [(path, m) for path, m in modules if isinstance(m, Linear)]
            what = "every Linear"
        elif isinstance(targets, str):
            pattern = re.compile(targets)
            chosen = [(path, m) for path, m in modules if path and pattern.search(path)]
            what = f"the regex {targets!r}"
        elif isinstance(targets, ParamGroup):
            chosen = []
            for path, m in modules:
                weight = m.__dict__.get("weight")
                if isinstance(weight, Param) and targets.matches(weight.id, f"{path}.weight" if path else "weight"):
                    chosen.append((path, m))
            what = f"the group {targets!r} (matched against each layer's weight)"
        else:
            names = tuple(targets)
            chosen = [(path, m) for path, m in modules if path and any(_named(path, n) for n in names)]
            what = f"the names {list(names)}"
        wrong = [f"{path!r} ({type(m).__name__})" for path, m in chosen if not isinstance(m, Linear)]
        if wrong:
            raise ConfigError(
                f"ember: LoraConfig: targets select modules that are not Linear layers: {', '.join(wrong[:8])}; "
                "LoRA adapts Linear layers only: narrow the selector (anchor a regex with '$', e.g. r'\\.query$', "
                "or list the layers' names)"
            )
        if not chosen:
            linears = [path or "<root>" for path, m in modules if isinstance(m, Linear)]
            raise ConfigError(
                f"ember: LoraConfig: {what} selects no layer of {type(model).__name__}; its Linear layers are "
                f"{listing([repr(p) for p in linears], 8) if linears else 'none'}"
            )
        return [path for path, _ in chosen]

    # ------------------------------------------------------------------ building
    def init(self, model: M) -> M:
        """``model`` with adapters on the selected layers (see the class docstring): each
        becomes a :class:`LoraLinear` holding the original layer as ``base``; every
        parameter that was in ``model`` stops requiring grad. The adapters live on their
        layer's device with its dtype (``lora_a`` Kaiming-uniform as PEFT's, ``lora_b``
        zeros, so the model's outputs are unchanged until a step). ``model`` itself is
        untouched; its parameters keep their ``ParamId``s."""
        if not isinstance(model, Module):
            raise ModuleError(f"ember: LoraConfig.init: expected a Module, got {type(model).__name__}")
        applied = [path or "<root>" for path, m in model.modules() if isinstance(m, LoraLinear)]
        if applied:
            raise ModuleError(
                f"ember: LoraConfig.init: the model already has LoRA adapters ({listing([repr(p) for p in applied], 8)}); apply LoRA "
                "once, to the base model, or fold the adapters in first with ember.nn.lora.merge(model)"
            )
        selected = set(self.select(model))
        frozen = model.freeze()

        def adapt(path: str, module: Module) -> Module | None:
            if path in selected and isinstance(module, Linear):
                return self.adapt(module)
            return None

        return replace_modules(frozen, adapt)  # type: ignore[return-value]  # the root's class is kept

    def adapt(self, layer: Linear) -> LoraLinear:
        """One layer with fresh adapters (``layer`` is kept as it is, frozen or not)."""
        weight = layer.weight
        d_input, d_output = weight.lazy_shape()
        device, dtype = weight.lazy_device(), weight.lazy_dtype()
        lora_a = _A_INIT.lazy((d_input, self.r), d_input, self.r, device, dtype=dtype)
        lora_b = Zeros().lazy((self.r, d_output), device=device, dtype=dtype)
        return LoraLinear(
            base=layer, lora_a=lora_a, lora_b=lora_b, dropout=Dropout(self.dropout), alpha=self.alpha, config=self
        )


def _named(path: str, name: str) -> bool:
    return path == name or path.endswith("." + name)

"""The configs of the LLaMA family (``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``):
one decoder, switched by a few fields.

They differ in defaults and in three switches that :class:`LlamaFamilyConfig` reads
uniformly: the projections' biases (LLaMA: ``attention_bias``/``mlp_bias``; Mistral:
none; Qwen2: query, key and value), and which layers see only a sliding window of
keys (Mistral: every layer when ``sliding_window`` is set; Qwen2: ``layer_types``, or
the layers from ``max_window_layers`` on when ``use_sliding_window``).

Rotary position embeddings are read from ``rope_parameters`` (transformers 5:
``{"rope_theta": ..., "rope_type": "default" | "linear" | "llama3" | "yarn" |
"dynamic", ...}``) or from the older top-level ``rope_theta`` and ``rope_scaling``,
and always written back as ``rope_parameters``.

>>> LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2).d_head
8
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ember.errors import ConfigError
from ember.models.activations import check_activation
from ember.models.config import HfConfig
from ember.nn import RopeScaling

if TYPE_CHECKING:
    from typing import Self

__all__ = ["LlamaConfig", "LlamaFamilyConfig", "MistralConfig", "Qwen2Config"]

_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")
#: The keys of ``rope_parameters`` that ``RopeScaling`` reads.
_SCALING_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "attention_factor",
    "mscale",
    "mscale_all_dim",
    "truncate",
)
_LAYER_TYPES = ("full_attention", "sliding_attention")


class LlamaFamilyConfig(HfConfig):
    """The fields LLaMA, Mistral and Qwen2 share (Hugging Face's names; LLaMA's
    defaults). ``num_key_value_heads`` and ``head_dim`` default to
    ``num_attention_heads`` and ``hidden_size // num_attention_heads``."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    rope_parameters: dict = {}
    attention_dropout: float = 0.0

    @classmethod
    def from_hf(cls, data: dict[str, Any]) -> Self:
        config = super().from_hf(data)
        extra = {k: v for k, v in config.extra.items() if k not in ("rope_theta", "rope_scaling")}
        return config.replace(extra=extra)

    @classmethod
    def adapt_hf(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``rope_parameters`` merged from the old ``rope_theta``/``rope_scaling`` keys, as
        ``transformers.modeling_rope_utils.standardize_rope_params`` does."""
        rope = dict(data.get("rope_scaling") or data.get("rope_parameters") or {})
        if not isinstance(rope, dict):
            raise ConfigError(f"ember: {cls.__name__}: rope_parameters must be an object, got {rope!r:.80}")
        rope.setdefault("rope_theta", data.get("rope_theta", 10000.0))
        rope.setdefault("rope_type", rope.pop("type", "default"))
        rope.pop("type", None)
        if rope["rope_type"] in ("llama3", "yarn"):
            rope.setdefault("original_max_position_embeddings", data.get("max_position_embeddings", 2048))
        return {"rope_parameters": rope}

    def validate(self) -> None:
        name = type(self).__name__
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            if getattr(self, field) <= 0:
                raise ConfigError(f"ember: {name}: {field} must be > 0, got {getattr(self, field)}")
        if self.num_attention_heads % self.n_kv_heads:
            raise ConfigError(
                f"ember: {name}: num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.n_kv_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ember: {name}: hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads} (or give head_dim)"
            )
        if self.d_head % 2:
            raise ConfigError(f"ember: {name}: rotary embeddings need an even head_dim, got {self.d_head}")
        check_activation(f"{name}.hidden_act", self.hidden_act)
        rope_type = self.rope_parameters.get("rope_type", "default")
        if rope_type not in _ROPE_TYPES:
            raise ConfigError(
                f"ember: {name}: ember does not implement rope_type {rope_type!r}; it implements {', '.join(_ROPE_TYPES)}"
            )
        if self.rope_parameters.get("partial_rotary_factor", 1.0) != 1.0:
            raise ConfigError(f"ember: {name}: ember does not implement partial_rotary_factor < 1")
        self.rope_scaling()  # RopeScaling validates the scaling's own fields
        for layer, window in enumerate(self.layer_windows()):
            if window is not None and window <= 0:
                raise ConfigError(f"ember: {name}: layer {layer}'s sliding_window must be > 0, got {window}")

    # ------------------------------------------------------------------ derived values
    @property
    def n_kv_heads(self) -> int:
        """``num_key_value_heads`` (``num_attention_heads`` when unset)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def d_head(self) -> int:
        """``head_dim`` (``hidden_size // num_attention_heads`` when unset)."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def rope_theta(self) -> float:
        return float(self.rope_parameters.get("rope_theta", 10000.0))

    def rope_scaling(self) -> RopeScaling | None:
        """The rotary scaling ``rope_parameters`` describes (``None``: plain rotary)."""
        rope_type = self.rope_parameters.get("rope_type", "default")
        if rope_type == "default":
            return None
        values = {k: self.rope_parameters[k] for k in _SCALING_KEYS if self.rope_parameters.get(k) is not None}
        for key in ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor"):
            if isinstance(values.get(key), int) and not isinstance(values[key], bool):
                values[key] = float(values[key])
        for key in ("mscale", "mscale_all_dim"):
            if key in values:
                values[key] = float(values[key])
        if rope_type == "dynamic":
            values.setdefault("original_max_position_embeddings", self.max_position_embeddings)
        try:
            return RopeScaling(rope_type, **values)
        except TypeError as error:
            raise ConfigError(
                f"ember: {type(self).__name__}: rope_parameters {self.rope_parameters}: {error}"
            ) from None

    def biases(self) -> tuple[bool, bool, bool]:
        """``(query/key/value, output, MLP)``: which projections carry a bias."""
        return False, False, False

    def layer_windows(self) -> list[int | None]:
        """Per layer, how many keys back (the query's own included) a query sees;
        ``None``: every earlier key."""
        return [None] * self.num_hidden_layers

    def to_hf(self) -> dict[str, Any]:
        out = super().to_hf()
        for key in ("head_dim", "num_key_value_heads", "layer_types"):  # transformers computes them when absent
            if out.get(key) is None:
                out.pop(key, None)
        return out


class LlamaConfig(LlamaFamilyConfig):
    """LLaMA's ``config.json`` (``model_type`` ``"llama"``): biases on every attention
    projection with ``attention_bias``, on the MLP's with ``mlp_bias``."""

    model_type: ClassVar[str] = "llama"
    attention_bias: bool = False
    mlp_bias: bool = False

    def biases(self) -> tuple[bool, bool, bool]:
        return self.attention_bias, self.attention_bias, self.mlp_bias


class MistralConfig(LlamaFamilyConfig):
    """Mistral's ``config.json`` (``model_type`` ``"mistral"``): no biases; every layer
    sees ``sliding_window`` keys back when it is set."""

    model_type: ClassVar[str] = "mistral"
    intermediate_size: int = 14336
    num_key_value_heads: int | None = 8
    max_position_embeddings: int = 4096 * 32
    sliding_window: int | None = 4096

    def layer_windows(self) -> list[int | None]:
        return [self.sliding_window] * self.num_hidden_layers


class Qwen2Config(LlamaFamilyConfig):
    """Qwen2's ``config.json`` (``model_type`` ``"qwen2"``): biases on the query, key and
    value projections; with ``use_sliding_window``, the layers ``layer_types`` marks
    ``"sliding_attention"`` (by default those from ``max_window_layers`` on) see
    ``sliding_window`` keys back."""

    model_type: ClassVar[str] = "qwen2"
    vocab_size: int = 151936
    intermediate_size: int = 22016
    num_key_value_heads: int | None = 32
    max_position_embeddings: int = 32768
    use_sliding_window: bool = False
    sliding_window: int | None = 4096
    max_window_layers: int = 28
    layer_types: list | None = None

    def validate(self) -> None:
        if self.layer_types is not None and (
            len(self.layer_types) != self.num_hidden_layers or any(t not in _LAYER_TYPES for t in self.layer_types)
        ):
            raise ConfigError(
                f"ember: Qwen2Config: layer_types must list {self.num_hidden_layers} (num_hidden_layers) entries of "
                f"{' or '.join(_LAYER_TYPES)}, got {self.layer_types}"
            )
        super().validate()

    def biases(self) -> tuple[bool, bool, bool]:
        return True, False, False

    def layer_windows(self) -> list[int | None]:
        window = self.sliding_window if self.use_sliding_window else None
        types = self.layer_types or [
            "sliding_attention" if window is not None and i >= self.max_window_layers else "full_attention"
            for i in range(self.num_hidden_layers)
        ]
        return [window if t == "sliding_attention" else None for t in types]

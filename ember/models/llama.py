"""The LLaMA family (Touvron et al., 2023) in Hugging Face's layout:
``LlamaForCausalLM``, ``MistralForCausalLM`` and ``Qwen2ForCausalLM``.

One decoder serves the three (their configs differ in biases and sliding windows,
see :mod:`ember.models.llama_config`): pre-norm blocks of grouped-query attention
with rotary positions (Hugging Face's ``rotate_half`` layout) and a SwiGLU MLP,
``RmsNorm`` before each and at the end. The module tree carries Hugging Face's names
(``model.layers.0.self_attn``, ``model.norm``); the attention is ember's
``MultiHeadAttention``, whose ``query``/``key``/``value``/``output`` are the
checkpoint's ``q_proj``/``k_proj``/``v_proj``/``o_proj``.

>>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
...                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
>>> model = LlamaForCausalLM.from_config(config)
>>> model(Tensor.from_ints([[1, 2, 3]])).dims()
[1, 3, 64]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, ShapeError
from ember.models.activations import activation
from ember.models.config import HfConfig
from ember.models.gpt2 import _keep_last
from ember.models.llama_config import LlamaConfig, LlamaFamilyConfig, MistralConfig, Qwen2Config
from ember.models.masks import check_cache, padding_mask, window_mask
from ember.models.pretrained import PretrainedModel
from ember.module import Module, Rename, WeightMap
from ember.nn import (
    Dropout,
    Embedding,
    EmbeddingConfig,
    Linear,
    MultiHeadAttention,
    Normal,
    RmsNorm,
    RmsNormConfig,
    RotaryEncodingConfig,
    Zeros,
)
from ember.nn.attention.cache import KvCache, LayerCache
from ember.tensor import Tensor

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "LlamaDecoderLayer",
    "LlamaForCausalLM",
    "LlamaMlp",
    "LlamaModel",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
]

#: Masked attention scores (float16's lowest finite value: finite in every float dtype,
#: so a query whose keys are all hidden, a left-padding token, attends evenly).
MASKED = -65504.0


class LlamaMlp(Module):
    """SwiGLU: ``down_proj(act(gate_proj(x)) * up_proj(x))``."""

    gate_proj: Linear
    up_proj: Linear
    down_proj: Linear
    hidden_act: str = "silu"

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(activation(self.hidden_act, self.gate_proj(x)).mul(self.up_proj(x)))


class LlamaDecoderLayer(Module):
    """``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``.
    ``sliding_window``: a query sees itself and the ``sliding_window - 1`` keys before it."""

    input_layernorm: RmsNorm
    self_attn: MultiHeadAttention
    post_attention_layernorm: RmsNorm
    mlp: LlamaMlp
    sliding_window: int | None = None

    def forward(
        self,
        x: Tensor,
        mask_pad: Tensor | None = None,
        mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: LayerCache | None = None,
        cache_position: Tensor | None = None,
    ) -> tuple[Tensor, LayerCache | None]:
        """The block's output and its updated cache (``None`` without one)."""
        out = self.self_attn(
            self.input_layernorm(x),
            mask,
            mask_pad=mask_pad,
            causal=cache is None,
            position_ids=position_ids,
            cache=cache,
            cache_position=cache_position,
        )
        x = x.add(out.context)
        return x.add(self.mlp(self.post_attention_layernorm(x))), out.cache


class LlamaModel(Module):
    """The token embeddings, the decoder layers and the final norm."""

    embed_tokens: Embedding
    layers: list[LlamaDecoderLayer]
    norm: RmsNorm

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KvCache | None = None,
        cache_position: Tensor | None = None,
    ) -> tuple[Tensor, KvCache | None]:
        """Hidden states ``[batch, seq, hidden_size]`` and the updated cache."""
        if not isinstance(input_ids, Tensor) or input_ids.is_float():
            raise DTypeError(f"ember: LlamaModel: input_ids must be an int Tensor [batch, seq], got {input_ids!r:.80}")
        if input_ids.rank != 2:
            raise ShapeError(f"ember: LlamaModel: input_ids must be [batch, seq], got shape {input_ids.dims()}")
        batch, seq = input_ids.dims()
        device = input_ids.device
        if cache is not None:
            check_cache("LlamaModel", cache, len(self.layers), cache_position)
        key_len = seq if cache is None else cache.max_len
        mask_pad = padding_mask(attention_mask, batch, key_len, device, "LlamaModel")
        windows: dict[int, Tensor] = {}
        x = self.embed_tokens(input_ids)
        layers = []
        for i, layer in enumerate(self.layers):
            window = layer.sliding_window
            mask = None
            if window is not None and window < key_len:
                if window not in windows:
                    start = None if cache is None else cache_position
                    windows[window] = window_mask(seq, key_len, window, start, device)
                mask = windows[window]
            x, layer_cache = layer(x, mask_pad, mask, position_ids, None if cache is None else cache[i], cache_position)
            layers.append(layer_cache)
        new_cache = None if cache is None else KvCache(tuple(layers))
        return self.norm(x), new_cache


class LlamaForCausalLM(PretrainedModel):
    """A LLaMA-family decoder with its language-model head (``lm_head``, or the
    embeddings' transpose when ``tie_word_embeddings``).

    Calling it: ``model(input_ids)`` returns logits ``[batch, seq, vocab_size]``;
    ``attention_mask`` ``[batch, seq]`` holds 1 for tokens and 0 for padding and
    ``position_ids`` ``[batch, seq]`` the rotary positions (default ``0 .. seq - 1``;
    for a left-padded batch give ``cumsum(attention_mask) - 1``, with the padding's
    positions set to any valid one, as ``transformers``' ``generate`` does).

    Decoding with a static cache: ``cache = model.new_cache(batch, max_len)``, then
    ``logits, cache = model(input_ids, cache=cache, cache_position=pos)`` with ``pos``
    an int tensor ``[1]``: the slot of the first new token (``0`` for the prompt, then
    the number of tokens so far). The new keys and values are written at slots
    ``pos, pos + 1, ...``; positions default to the slots. ``attention_mask`` then
    covers the tokens so far (``[batch, pos + seq]``) or the whole cache (``[batch,
    max_len]``, one shape for every step of a compiled decode loop). The cache is a
    value: each call returns a new one.
    """

    hf_architecture: ClassVar[str] = "LlamaForCausalLM"
    config_class: ClassVar[type[HfConfig]] = LlamaConfig
    config: LlamaFamilyConfig
    model: LlamaModel
    lm_head: Linear | None = None

    @classmethod
    def from_config(cls, config: LlamaFamilyConfig, device: Device | None = None) -> Self:
        """The model with lazy parameters initialised as Hugging Face does: normal(0,
        ``initializer_range``) weights, zero biases, unit norms."""
        device = device or Device.default()
        weights = Normal(0.0, config.initializer_range)
        d, heads, kv_heads, head_dim = config.hidden_size, config.num_attention_heads, config.n_kv_heads, config.d_head
        qkv_bias, o_bias, mlp_bias = config.biases()

        def linear(d_in: int, d_out: int, bias: bool) -> Linear:
            return Linear(
                weight=weights.lazy((d_in, d_out), d_in, d_out, device),
                bias=Zeros().lazy((d_out,), d_in, d_out, device) if bias else None,
            )

        def norm() -> RmsNorm:
            return RmsNormConfig(d, epsilon=config.rms_norm_eps).init(device)

        # One table for every layer (the layers share the module, not copies of it).
        rotary = RotaryEncodingConfig(
            config.max_position_embeddings,
            head_dim,
            theta=config.rope_theta,
            interleaved=False,
            scaling=config.rope_scaling(),
        ).init(device)
        layers = []
        for window in config.layer_windows():
            attn = MultiHeadAttention(
                query=linear(d, heads * head_dim, qkv_bias),
                key=linear(d, kv_heads * head_dim, qkv_bias),
                value=linear(d, kv_heads * head_dim, qkv_bias),
                output=linear(heads * head_dim, d, o_bias),
                dropout=Dropout(config.attention_dropout),
                n_heads=heads,
                min_float=MASKED,
                rotary=rotary,
                n_kv_heads=kv_heads,
                head_dim=head_dim,
            )
            mlp = LlamaMlp(
                gate_proj=linear(d, config.intermediate_size, mlp_bias),
                up_proj=linear(d, config.intermediate_size, mlp_bias),
                down_proj=linear(config.intermediate_size, d, mlp_bias),
                hidden_act=config.hidden_act,
            )
            layers.append(
                LlamaDecoderLayer(
                    input_layernorm=norm(),
                    self_attn=attn,
                    post_attention_layernorm=norm(),
                    mlp=mlp,
                    sliding_window=window,
                )
            )
        model = LlamaModel(
            embed_tokens=EmbeddingConfig(config.vocab_size, d, initializer=weights).init(device),
            layers=layers,
            norm=norm(),
        )
        lm_head = None if config.tie_word_embeddings else linear(d, config.vocab_size, False)
        return cls(config=config, model=model, lm_head=lm_head)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KvCache | None = None,
        cache_position: Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> Any:
        """Logits ``[batch, seq, vocab_size]``; with a ``cache``, ``(logits, new
        cache)`` (see the class docstring); ``logits_to_keep=n > 0``: the last ``n``
        positions' logits only (``transformers``' argument)."""
        hidden, new_cache = self.model(input_ids, attention_mask, position_ids, cache, cache_position)
        hidden = _keep_last(hidden, logits_to_keep)
        if self.lm_head is not None:
            logits = self.lm_head(hidden)
        else:
            logits = self.model.embed_tokens.attend(hidden)
        return logits if cache is None else (logits, new_cache)

    def new_cache(
        self, batch: int, max_len: int, device: Device | None = None, dtype: DType | str | None = None
    ) -> KvCache:
        """An empty cache of ``max_len`` slots for ``batch`` sequences (on the
        embeddings' device and in their dtype unless given)."""
        rotary = self.model.layers[0].self_attn.rotary if self.model.layers else None
        if rotary is not None and rotary.dynamic is None and max_len > rotary.freq_complex.shape[0]:
            raise ShapeError(
                f"ember: {type(self).__name__}.new_cache: max_len={max_len} exceeds the model's "
                f"max_position_embeddings={rotary.freq_complex.shape[0]} (its rotary table ends there; a "
                "'dynamic' rope scaling extends it)"
            )
        table = self.model.embed_tokens
        return KvCache.empty(
            len(self.model.layers),
            batch,
            self.config.n_kv_heads,
            max_len,
            self.config.d_head,
            device or table.device,
            dtype or table.dtype,
        )

    def weight_map(self) -> WeightMap:
        ignore = [r"\.rotary_emb\.inv_freq$"]  # older checkpoints stored the frequencies
        if self.lm_head is None:
            ignore.append(r"^lm_head\.weight$")
        return WeightMap(
            renames=tuple(
                Rename(f"self_attn.{theirs}", f"self_attn.{ours}")
                for theirs, ours in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("o_proj", "output"))
            ),
            ignore=tuple(ignore),
            computed=(r"\.self_attn\.rotary\.freq_complex$",),
        )


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral: LLaMA without biases, every layer with ``sliding_window``."""

    hf_architecture: ClassVar[str] = "MistralForCausalLM"
    config_class: ClassVar[type[HfConfig]] = MistralConfig


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2: LLaMA with query/key/value biases and optional sliding-window layers."""

    hf_architecture: ClassVar[str] = "Qwen2ForCausalLM"
    config_class: ClassVar[type[HfConfig]] = Qwen2Config

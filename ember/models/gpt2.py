"""GPT-2 (Radford et al., 2019) in Hugging Face's layout: ``GPT2LMHeadModel``.

The module tree carries Hugging Face's names (``transformer.h.0.attn``,
``transformer.ln_f``), so the weight map only declares what differs: the fused
``c_attn`` projection is the attention's ``qkv`` (``MultiHeadAttention(fused_qkv=True)``),
``c_proj`` its output, and every ``Conv1D`` weight is stored ``[in, out]``, ember's own
layout. Decoding with a static cache follows the LLaMA family's protocol
(:class:`~ember.models.llama.LlamaForCausalLM`): ``model.new_cache(batch, max_len)``,
then ``logits, cache = model(ids, cache=cache, cache_position=pos)``.

>>> config = Gpt2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
>>> model = GPT2LMHeadModel.from_config(config)
>>> model(Tensor.from_ints([[1, 2, 3]])).dims()
[1, 3, 64]
"""

from __future__ import annotations

from typing import Any, ClassVar

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.models.activations import activation, check_activation
from ember.models.config import HfConfig
from ember.models.masks import check_cache, padding_mask
from ember.models.pretrained import PretrainedModel
from ember.module import Module, Rename, WeightMap
from ember.nn import (
    Dropout,
    Embedding,
    EmbeddingConfig,
    KvCache,
    LayerCache,
    LayerNorm,
    LayerNormConfig,
    Linear,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    Normal,
    Zeros,
)
from ember.tensor import Tensor

__all__ = ["GPT2LMHeadModel", "Gpt2Block", "Gpt2Config", "Gpt2Mlp", "Gpt2Model"]

#: The score of a hidden key: finite (float16's lowest), so that a query whose keys are
#: all hidden (a left-padding token) attends evenly instead of producing NaN.
MASKED = -65504.0


class Gpt2Config(HfConfig):
    """GPT-2's ``config.json`` fields (Hugging Face's names and defaults)."""

    model_type: ClassVar[str] = "gpt2"
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True

    def validate(self) -> None:
        if self.n_embd % self.n_head:
            raise ConfigError(f"ember: Gpt2Config: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        check_activation("Gpt2Config.activation_function", self.activation_function)
        unsupported = [
            name
            for name, value in (
                ("scale_attn_weights=false", not self.scale_attn_weights),
                ("scale_attn_by_inverse_layer_idx", self.scale_attn_by_inverse_layer_idx),
                ("add_cross_attention", self.add_cross_attention),
            )
            if value
        ]
        if unsupported:
            raise ConfigError(f"ember: Gpt2Config: ember's GPT-2 does not implement {', '.join(unsupported)}")

    @property
    def d_inner(self) -> int:
        return self.n_inner or 4 * self.n_embd


class Gpt2Mlp(Module):
    """The feed-forward block: ``c_proj(act(c_fc(x)))``, then dropout."""

    c_fc: Linear
    c_proj: Linear
    dropout: Dropout
    activation_function: str = "gelu_new"

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(activation(self.activation_function, self.c_fc(x))))


class Gpt2Block(Module):
    """A pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    ln_1: LayerNorm
    attn: MultiHeadAttention
    ln_2: LayerNorm
    mlp: Gpt2Mlp
    resid_dropout: Dropout

    def forward(
        self,
        x: Tensor,
        mask_pad: Tensor | None = None,
        cache: LayerCache | None = None,
        cache_position: Tensor | None = None,
    ) -> tuple[Tensor, LayerCache | None]:
        """The block's output and its updated cache (``None`` without one)."""
        out = self.attn(
            self.ln_1(x), mask_pad=mask_pad, causal=cache is None, cache=cache, cache_position=cache_position
        )
        x = x.add(self.resid_dropout(out.context))
        return x.add(self.mlp(self.ln_2(x))), out.cache


def _keep_last(hidden: Tensor, n: int) -> Tensor:
    """The last ``n`` positions of ``hidden`` ``[batch, seq, d]`` (all of them for ``n == 0``)."""
    if not isinstance(n, int) or n < 0:
        raise ShapeError(f"ember: logits_to_keep must be an int >= 0, got {n!r}")
    seq = hidden.dims()[1]
    return hidden if n == 0 or n >= seq else hidden.narrow(1, seq - n, n)


class Gpt2Model(Module):
    """Token and position embeddings, the blocks and the final layer norm."""

    wte: Embedding
    wpe: Embedding
    drop: Dropout
    h: list[Gpt2Block]
    ln_f: LayerNorm

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KvCache | None = None,
        cache_position: Tensor | None = None,
    ) -> tuple[Tensor, KvCache | None]:
        """Hidden states ``[batch, seq, n_embd]`` of ``input_ids`` ``[batch, seq]`` and the
        updated cache."""
        if not isinstance(input_ids, Tensor) or input_ids.rank != 2:
            raise ShapeError(f"ember: GPT2Model: input_ids must be an int Tensor [batch, seq], got {input_ids!r:.80}")
        batch, seq = input_ids.dims()
        device = input_ids.device
        if cache is not None:
            check_cache("GPT2Model", cache, len(self.h), cache_position)
        if position_ids is None:
            position_ids = Tensor.arange(seq, device=device).unsqueeze_dim(0)
            if cache_position is not None:
                position_ids = position_ids.add(cache_position.int().to_device(device))
        key_len = seq if cache is None else cache.max_len
        mask_pad = padding_mask(attention_mask, batch, key_len, device, "GPT2Model")
        x = self.drop(self.wte(input_ids).add(self.wpe(position_ids)))
        layers = []
        for i, block in enumerate(self.h):
            x, layer_cache = block(x, mask_pad, None if cache is None else cache[i], cache_position)
            layers.append(layer_cache)
        return self.ln_f(x), None if cache is None else KvCache(tuple(layers))


class GPT2LMHeadModel(PretrainedModel):
    """GPT-2 with its language-model head (tied to ``wte`` unless the config unties it).
    ``model(input_ids)`` returns logits ``[batch, seq, vocab_size]``."""

    hf_architecture: ClassVar[str] = "GPT2LMHeadModel"
    config_class: ClassVar[type[HfConfig]] = Gpt2Config
    config: Gpt2Config
    transformer: Gpt2Model
    lm_head: Linear | None = None

    @classmethod
    def from_config(cls, config: Gpt2Config, device: Device | None = None) -> GPT2LMHeadModel:
        device = device or Device.default()
        std = config.initializer_range
        weights = Normal(0.0, std)
        d = config.n_embd

        def linear(d_in: int, d_out: int, bias: bool = True) -> Linear:
            return Linear(
                weight=weights.lazy((d_in, d_out), d_in, d_out, device),
                bias=Zeros().lazy((d_out,), d_in, d_out, device) if bias else None,
            )

        def norm() -> LayerNorm:
            return LayerNormConfig(d, epsilon=config.layer_norm_epsilon).init(device)

        blocks = []
        for _ in range(config.n_layer):
            attn = MultiHeadAttentionConfig(
                d, config.n_head, dropout=config.attn_pdrop, initializer=weights, fused_qkv=True, min_float=MASKED
            ).init(device)
            blocks.append(
                Gpt2Block(
                    ln_1=norm(),
                    attn=attn,
                    ln_2=norm(),
                    mlp=Gpt2Mlp(
                        c_fc=linear(d, config.d_inner),
                        c_proj=linear(config.d_inner, d),
                        dropout=Dropout(config.resid_pdrop),
                        activation_function=config.activation_function,
                    ),
                    resid_dropout=Dropout(config.resid_pdrop),
                )
            )
        transformer = Gpt2Model(
            wte=EmbeddingConfig(config.vocab_size, d, initializer=weights).init(device),
            wpe=EmbeddingConfig(config.n_positions, d, initializer=weights).init(device),
            drop=Dropout(config.embd_pdrop),
            h=blocks,
            ln_f=norm(),
        )
        lm_head = None if config.tie_word_embeddings else linear(d, config.vocab_size, bias=False)
        return cls(config=config, transformer=transformer, lm_head=lm_head)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KvCache | None = None,
        cache_position: Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> Any:
        """Logits ``[batch, seq, vocab_size]``; with a ``cache``, ``(logits, new cache)``.
        ``attention_mask`` ``[batch, seq]`` holds 1 for tokens and 0 for padding (Hugging
        Face's convention; with a cache it covers the tokens so far or the whole cache);
        ``position_ids`` default to ``0 .. seq - 1`` (the slots, with a cache).
        ``logits_to_keep=n > 0`` computes the logits of the last ``n`` positions only
        (``transformers``' argument: ``generate``'s prefill needs the last one)."""
        hidden, new_cache = self.transformer(input_ids, attention_mask, position_ids, cache, cache_position)
        hidden = _keep_last(hidden, logits_to_keep)
        if self.lm_head is not None:
            logits = self.lm_head(hidden)
        else:
            logits = self.transformer.wte.attend(hidden)
        return logits if cache is None else (logits, new_cache)

    def new_cache(
        self, batch: int, max_len: int, device: Device | None = None, dtype: DType | str | None = None
    ) -> KvCache:
        """An empty cache of ``max_len`` slots (at most ``n_positions``) for ``batch``
        sequences, on the embeddings' device and in their dtype unless given."""
        if max_len > self.config.n_positions:
            raise ShapeError(
                f"ember: GPT2LMHeadModel.new_cache: max_len={max_len} exceeds the model's n_positions="
                f"{self.config.n_positions} (its position embeddings end there)"
            )
        table = self.transformer.wte
        d_head = self.config.n_embd // self.config.n_head
        return KvCache.empty(
            len(self.transformer.h),
            batch,
            self.config.n_head,
            max_len,
            d_head,
            device or table.device,
            dtype or table.dtype,
        )

    def weight_map(self) -> WeightMap:
        ignore = [r"(^|\.)attn\.(bias|masked_bias)$"]
        if self.lm_head is None:
            ignore.append(r"^lm_head\.weight$")
        return WeightMap(
            renames=(Rename("attn.c_attn", "attn.qkv"), Rename("attn.c_proj", "attn.output")),
            as_stored=(r"\.(attn\.(qkv|output)|mlp\.(c_fc|c_proj))\.weight$",),
            ignore=tuple(ignore),
        )

"""``MultiHeadAttention`` (Vaswani et al., 2017), with padding and attention masks,
grouped-query heads, a fused QKV projection, rotary positions and a static KV cache."""

from __future__ import annotations

import math

from ember.device import Device
from ember.errors import ConfigError, DTypeError, ShapeError, UsageError
from ember.module import Config, Module
from ember.nn.attention.cache import LayerCache, slot_offsets
from ember.nn.attention.io import MhaInput, MhaOutput, additive_bias, attn_mask, pad_mask
from ember.nn.dropout import Dropout
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.linear import Linear, LinearConfig
from ember.nn.rotary import RotaryEncoding, RotaryEncodingConfig
from ember.tensor import Tensor
from ember.tensor import activation as F
from ember.tensor.attention import attention

__all__ = ["MhaInput", "MhaOutput", "MultiHeadAttention", "MultiHeadAttentionConfig"]


class MultiHeadAttentionConfig(Config):
    """Configuration of :class:`MultiHeadAttention`. Masked scores are set to
    ``min_float`` before the softmax; ``quiet_softmax`` lets a head attend to nothing.
    ``n_kv_heads`` key/value heads (dividing ``n_heads``; 1 is multi-query) each serve
    ``n_heads / n_kv_heads`` query heads; ``head_dim`` defaults to ``d_model / n_heads``.
    ``fused_qkv`` makes one projection ``qkv`` (query, key and value along its outputs,
    as GPT-2's ``c_attn``; self-attention only, one bias flag for the three).
    ``rotary`` encodes the positions of queries and keys (its ``d_model`` may be less
    than ``head_dim``: the first features of each head rotate).

    >>> from ember import Tensor
    >>> mha = MultiHeadAttentionConfig(8, 2, dropout=0.0).init()
    >>> mha(MhaInput.self_attn(Tensor.ones([1, 3, 8]))).context.dims()
    [1, 3, 8]
    """

    d_model: int
    n_heads: int
    dropout: float = 0.1
    min_float: float = -1.0e4
    quiet_softmax: bool = False
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    output_bias: bool = True
    n_kv_heads: int | None = None
    head_dim: int | None = None
    fused_qkv: bool = False
    rotary: RotaryEncodingConfig | None = None

    def validate(self) -> None:
        name = "ember: MultiHeadAttentionConfig"
        if self.d_model <= 0 or self.n_heads <= 0:
            raise ConfigError(f"{name}: d_model and n_heads must be > 0, got {self.d_model}, {self.n_heads}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"{name}: d_model={self.d_model} must be divisible by n_heads={self.n_heads} (or give head_dim)"
            )
        if self.head_dim is not None and self.head_dim <= 0:
            raise ConfigError(f"{name}: head_dim must be > 0, got {self.head_dim}")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            raise ConfigError(f"{name}: n_kv_heads={self.n_kv_heads} must be > 0 and divide n_heads={self.n_heads}")
        if not 0.0 <= self.dropout <= 1.0:
            raise ConfigError(f"{name}: dropout must lie in [0, 1], got {self.dropout}")
        if self.fused_qkv and not self.query_bias == self.key_bias == self.value_bias:
            raise ConfigError(
                f"{name}: fused_qkv has one bias for query, key and value; query_bias, key_bias and value_bias "
                f"must agree, got {self.query_bias}, {self.key_bias}, {self.value_bias}"
            )
        head_dim = self.head_dim or self.d_model // self.n_heads
        if self.rotary is not None and self.rotary.d_model > head_dim:
            raise ConfigError(
                f"{name}: the rotary encoding's d_model={self.rotary.d_model} exceeds head_dim={head_dim}"
            )

    def init(self, device: Device | None = None) -> MultiHeadAttention:
        device = device or Device.default()
        head_dim = self.head_dim or self.d_model // self.n_heads
        kv_heads = self.n_kv_heads or self.n_heads

        def linear(d_in: int, d_out: int, bias: bool) -> Linear:
            return LinearConfig(d_in, d_out, bias=bias, initializer=self.initializer).init(device)

        q_out, kv_out = self.n_heads * head_dim, kv_heads * head_dim
        fused = self.fused_qkv
        return MultiHeadAttention(
            query=None if fused else linear(self.d_model, q_out, self.query_bias),
            key=None if fused else linear(self.d_model, kv_out, self.key_bias),
            value=None if fused else linear(self.d_model, kv_out, self.value_bias),
            output=linear(q_out, self.d_model, self.output_bias),
            dropout=Dropout(self.dropout),
            n_heads=self.n_heads,
            min_float=self.min_float,
            quiet_softmax=self.quiet_softmax,
            qkv=linear(self.d_model, q_out + 2 * kv_out, self.query_bias) if fused else None,
            rotary=None if self.rotary is None else self.rotary.init(device),
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
        )


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention with learned projections: ``query``
    ``[d_model, n_heads * head_dim]``, ``key`` and ``value`` ``[d_model, n_kv_heads *
    head_dim]`` (or one ``qkv`` holding the three), ``output`` ``[n_heads * head_dim,
    d_model]``. ``forward`` takes an :class:`MhaInput`, or a tensor for self-attention
    (``mha(x, mask=...)``, ``mha(x, causal=True)``), and returns an :class:`MhaOutput`."""

    # The projections keep their place (the parameters' visit order is as before
    # fused_qkv existed); the fields are given by keyword, so the required ones may
    # follow them (mypy's dataclass rule does not know Module's generated __init__).
    query: Linear | None = None
    key: Linear | None = None
    value: Linear | None = None
    output: Linear  # type: ignore[misc]
    dropout: Dropout  # type: ignore[misc]
    n_heads: int  # type: ignore[misc]
    min_float: float = -1.0e4
    quiet_softmax: bool = False
    qkv: Linear | None = None
    rotary: RotaryEncoding | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None

    @property
    def d_model(self) -> int:
        return self.output.d_output

    @property
    def d_k(self) -> int:
        """The size of one head (``head_dim``)."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    def forward(
        self,
        input: MhaInput | Tensor,
        mask: Tensor | None = None,
        *,
        mask_pad: Tensor | None = None,
        causal: bool = False,
        bias: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: LayerCache | None = None,
        cache_position: Tensor | None = None,
    ) -> MhaOutput:
        """Attention of ``input``'s query over its keys and values; a tensor ``x``
        ``[batch, seq, d_model]`` is self-attention (``MhaInput.self_attn(x)``), with
        ``mask`` its attention mask (``True`` hides a key, as ``mask_attn``),
        ``mask_pad`` its padding mask, and ``causal=True`` hiding each query's later
        keys (without building a mask). Masks may leave out the batch and head dims
        (``[seq_q, seq_k]``) or give them as 1. ``bias`` is a float tensor added to the
        scores, broadcasting to ``[batch, n_heads, seq_q, seq_k]`` (e.g. ``0`` and
        ``finfo.min``, as Hugging Face builds masks).

        With ``rotary``, queries and keys turn by ``position_ids`` (int ``[seq]`` or
        ``[batch, seq]``; default ``arange(seq)``, or ``cache_position + arange(seq)``
        with a cache; ignored without ``rotary``). With a ``cache`` (and
        ``cache_position``, an int tensor ``[1]``), the new keys and values are written
        at slots ``[cache_position, cache_position + seq)``, attention runs over the
        whole cache with the slots after each query's position hidden, masks and
        ``bias`` then have the cache's length as ``seq_k``, and the output carries
        the updated cache."""
        input = self._input(input, mask, mask_pad)
        q_in, k_in, v_in = input.query, input.key, input.value
        batch, seq_q, _ = q_in.dims()
        seq_k = k_in.dims()[1]
        query, key, value = self._project(q_in, k_in, v_in)
        if cache is not None and cache_position is None:
            raise UsageError("ember: MultiHeadAttention: a cache needs cache_position (an int tensor [1])")
        if self.rotary is not None:
            query, key = self._rotate(query, key, position_ids, cache_position)
        hidden = None
        if cache is not None:
            assert cache_position is not None
            cache = self._write(cache, key, value, cache_position)
            key, value, seq_k = cache.key.cast(query.dtype), cache.value.cast(query.dtype), cache.max_len
            slots = slot_offsets(cache_position, seq_k, "MultiHeadAttention", query.device)
            rows = Tensor.arange(seq_q, device=query.device).unsqueeze_dim(1)
            hidden = slots.unsqueeze_dim(0).greater(rows).reshape([1, 1, seq_q, seq_k])
            causal = False  # the cache's own mask is causal
        if input.mask_pad is not None:
            pad = pad_mask(input.mask_pad, batch, seq_k, query)
            hidden = pad if hidden is None else hidden.bool_or(pad)
        if input.mask_attn is not None:
            mask = attn_mask(input.mask_attn, batch, self.n_heads, seq_q, seq_k, query)
            hidden = mask if hidden is None else hidden.bool_or(mask)
        if hidden is not None and hidden.dims()[0] != batch:
            hidden = hidden.expand([batch] + hidden.dims()[1:])
        if bias is not None:
            bias = additive_bias(bias, batch, self.n_heads, seq_q, seq_k, query)
        context, weights = self._attend(query, key, value, hidden, bias, causal)
        context = context.swap_dims(1, 2).reshape([batch, seq_q, self.n_heads * self.d_k])
        return MhaOutput(weights=weights, context=self.output(context), cache=cache)

    def _input(self, input: MhaInput | Tensor, mask: Tensor | None, mask_pad: Tensor | None) -> MhaInput:
        """The call's :class:`MhaInput`, its operands checked."""
        if isinstance(input, Tensor):
            input = MhaInput(input, input, input, mask_pad, mask)
        elif not isinstance(input, MhaInput):
            raise DTypeError(
                f"ember: MultiHeadAttention: expected an MhaInput or a Tensor (self-attention), got {type(input).__name__}"
            )
        elif mask is not None or mask_pad is not None:
            raise DTypeError(
                "ember: MultiHeadAttention: give masks inside the MhaInput (with_mask_attn, with_mask_pad), "
                "or call mha(x, mask=...) with a tensor"
            )
        q, k, v = input.query, input.key, input.value
        d_model = self.d_model
        for name, t in (("query", q), ("key", k), ("value", v)):
            if not isinstance(t, Tensor):
                raise DTypeError(f"ember: MultiHeadAttention: {name} must be a Tensor, got {type(t).__name__}")
            if t.rank != 3 or t.dims()[2] != d_model:
                raise ShapeError(
                    f"ember: MultiHeadAttention: {name} must be [batch, seq, d_model={d_model}], got shape {t.dims()}"
                )
        if k.dims()[0] != q.dims()[0] or v.dims()[:2] != k.dims()[:2]:
            raise ShapeError(
                f"ember: MultiHeadAttention: query {q.dims()}, key {k.dims()} and value {v.dims()} must share the "
                "batch size, and key and value the sequence length"
            )
        if self.qkv is not None and not (q is k and k is v):
            raise UsageError(
                "ember: MultiHeadAttention: a fused qkv projection is self-attention only; call mha(x) or "
                "mha(MhaInput.self_attn(x)), or build the layer with fused_qkv=False for cross-attention"
            )
        return input

    def _project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``[batch, n_heads, seq_q, head_dim]``, keys and values ``[batch,
        n_kv_heads, seq_k, head_dim]``."""
        hd, kv = self.d_k, self.kv_heads
        if self.qkv is not None:
            y = self.qkv(q)
            q_out, kv_out = self.n_heads * hd, kv * hd
            return (
                self._heads(y.narrow(-1, 0, q_out), self.n_heads),
                self._heads(y.narrow(-1, q_out, kv_out), kv),
                self._heads(y.narrow(-1, q_out + kv_out, kv_out), kv),
            )
        if self.query is None or self.key is None or self.value is None:
            raise UsageError("ember: MultiHeadAttention: needs query, key and value projections, or qkv")
        return (
            self._heads(self.query(q), self.n_heads),
            self._heads(self.key(k), kv),
            self._heads(self.value(v), kv),
        )

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        """``[batch, seq, heads * head_dim]`` to ``[batch, heads, seq, head_dim]``."""
        batch, seq, _ = x.dims()
        return x.reshape([batch, seq, heads, self.d_k]).swap_dims(1, 2)

    def _rotate(
        self, query: Tensor, key: Tensor, position_ids: Tensor | None, cache_position: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        rotary = self.rotary
        assert rotary is not None
        seq = query.dims()[2]
        if key.dims()[2] != seq:
            raise ShapeError(
                f"ember: MultiHeadAttention: rotary positions need queries and keys of one length, got {seq} "
                f"and {key.dims()[2]}"
            )
        if position_ids is None:
            position_ids = Tensor.arange(seq, device=query.device)
            if cache_position is not None:
                position_ids = position_ids.add(cache_position.to_device(query.device).int())
        rot = 2 * rotary.freq_complex.shape[1]

        def turn(x: Tensor) -> Tensor:
            if rot == self.d_k:
                return rotary.apply_positions(x, position_ids)
            turned = rotary.apply_positions(x.narrow(-1, 0, rot), position_ids)
            return Tensor.cat([turned, x.narrow(-1, rot, self.d_k - rot).cast(turned.dtype)], -1)

        return turn(query), turn(key)

    def _write(self, cache: LayerCache, key: Tensor, value: Tensor, position: Tensor) -> LayerCache:
        if not isinstance(cache, LayerCache):
            raise DTypeError(f"ember: MultiHeadAttention: cache must be a LayerCache, got {type(cache).__name__}")
        b, h, _, d = cache.key.dims()
        if (b, h, d) != (key.dims()[0], self.kv_heads, self.d_k):
            raise ShapeError(
                f"ember: MultiHeadAttention: the cache {cache.key.dims()} must be [batch={key.dims()[0]}, "
                f"n_kv_heads={self.kv_heads}, max_len, head_dim={self.d_k}] "
                "(LayerCache.empty(batch, n_kv_heads, max_len, head_dim))"
            )
        return cache.update(key, value, position)

    def _attend(
        self, query: Tensor, key: Tensor, value: Tensor, hidden: Tensor | None, bias: Tensor | None, causal: bool
    ) -> tuple[Tensor, Tensor]:
        training = query.device.is_autodiff()  # Dropout's rule: active on an autodiff device
        scale = 1.0 / math.sqrt(self.d_k)
        group = self.n_heads // self.kv_heads
        if not self.quiet_softmax:
            # Masked scores are set to min_float (Burn's), not -inf: a row with every key
            # hidden attends evenly instead of to nothing.
            return attention(
                query,
                key,
                value,
                mask=hidden,
                bias=bias,
                fill=self.min_float,
                scale=scale,
                causal=causal,
                dropout=self.dropout.prob,
                training=training,
                enable_gqa=group > 1,
            )
        if group > 1:  # each key/value head repeated for its group of query heads
            b, h, s, d = key.dims()
            key = key.unsqueeze_dim(2).expand([b, h, group, s, d]).reshape([b, h * group, s, d])
            value = value.unsqueeze_dim(2).expand([b, h, group, s, d]).reshape([b, h * group, s, d])
        scores = query.matmul(key.swap_dims(2, 3)).mul_scalar(scale)
        if bias is not None:
            scores = scores.add(bias)
        if causal:
            seq_q, seq_k = scores.dims()[2], scores.dims()[3]
            later = (
                Tensor.arange(seq_k, device=scores.device)
                .unsqueeze_dim(0)
                .greater(Tensor.arange(seq_q, device=scores.device).unsqueeze_dim(1))
            )
            hidden = later if hidden is None else hidden.bool_or(later)
        if hidden is not None:
            scores = scores.mask_fill(hidden, self.min_float)
        weights = F.quiet_softmax(scores, 3)
        return self.dropout(weights).matmul(value), weights

    def extra_repr(self) -> str:
        extra = ""
        if self.kv_heads != self.n_heads:
            extra += f", n_kv_heads: {self.kv_heads}"
        if self.qkv is not None:
            extra += ", fused_qkv: True"
        return (
            f"d_model: {self.d_model}, n_heads: {self.n_heads}, d_k: {self.d_k}{extra}, dropout: {self.dropout.prob}, "
            f"min_float: {self.min_float}, quiet_softmax: {self.quiet_softmax}"
        )

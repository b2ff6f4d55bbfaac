"""``MultiHeadAttention`` (Vaswani et al., 2017), with padding and attention masks."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ember.device import Device
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.module import Config, Module
from ember.nn.dropout import Dropout
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.linear import Linear, LinearConfig
from ember.tensor import Tensor
from ember.tensor import activation as F
from ember.tensor.attention import attention


@dataclass(frozen=True)
class MhaInput:
    """The input of :class:`MultiHeadAttention`: ``query`` ``[batch, seq_q, d_model]``,
    ``key`` and ``value`` ``[batch, seq_k, d_model]``, and optional bool masks where
    ``True`` hides a key: ``mask_pad`` ``[batch, seq_k]`` (padding) and ``mask_attn``
    ``[batch, seq_q, seq_k]``, ``[seq_q, seq_k]``, or ``[batch, n_heads, seq_q, seq_k]``
    (batch and heads may be 1: broadcast)."""

    query: Tensor
    key: Tensor
    value: Tensor
    mask_pad: Tensor | None = None
    mask_attn: Tensor | None = None

    @staticmethod
    def self_attn(x: Tensor) -> MhaInput:
        """Query, key and value all ``x``."""
        return MhaInput(x, x, x)

    @staticmethod
    def new(query: Tensor, key: Tensor, value: Tensor) -> MhaInput:
        return MhaInput(query, key, value)

    def with_mask_pad(self, mask_pad: Tensor) -> MhaInput:
        """This input with a padding mask ``[batch, seq_k]``."""
        return replace(self, mask_pad=mask_pad)

    def with_mask_attn(self, mask_attn: Tensor) -> MhaInput:
        """This input with an attention mask ``[batch, seq_q, seq_k]`` or ``[seq_q, seq_k]``."""
        return replace(self, mask_attn=mask_attn)


@dataclass(frozen=True)
class MhaOutput:
    """``context`` ``[batch, seq_q, d_model]`` and the attention ``weights``
    ``[batch, n_heads, seq_q, seq_k]`` (after softmax, before dropout). Unpacks as
    PyTorch's pair: ``context, weights = mha(x)``."""

    weights: Tensor
    context: Tensor

    def __iter__(self):
        return iter((self.context, self.weights))


class MultiHeadAttentionConfig(Config):
    """Configuration of :class:`MultiHeadAttention`. Masked scores are set to
    ``min_float`` before the softmax; ``quiet_softmax`` lets a head attend to nothing.

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

    def validate(self) -> None:
        if self.d_model <= 0 or self.n_heads <= 0:
            raise ConfigError(
                f"ember: MultiHeadAttentionConfig: d_model and n_heads must be > 0, got {self.d_model}, {self.n_heads}"
            )
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"ember: MultiHeadAttentionConfig: d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if not 0.0 <= self.dropout <= 1.0:
            raise ConfigError(f"ember: MultiHeadAttentionConfig: dropout must lie in [0, 1], got {self.dropout}")

    def init(self, device: Device | None = None) -> MultiHeadAttention:
        device = device or Device.default()

        def linear(bias: bool) -> Linear:
            return LinearConfig(self.d_model, self.d_model, bias=bias, initializer=self.initializer).init(device)

        return MultiHeadAttention(
            query=linear(self.query_bias),
            key=linear(self.key_bias),
            value=linear(self.value_bias),
            output=linear(self.output_bias),
            dropout=Dropout(self.dropout),
            n_heads=self.n_heads,
            min_float=self.min_float,
            quiet_softmax=self.quiet_softmax,
        )


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention with learned projections (each a
    :class:`Linear` ``[d_model, d_model]``). ``forward`` takes an :class:`MhaInput`, or
    a tensor for self-attention (``mha(x, mask=...)``, ``mha(x, causal=True)``), and
    returns an :class:`MhaOutput`."""

    query: Linear
    key: Linear
    value: Linear
    output: Linear
    dropout: Dropout
    n_heads: int
    min_float: float = -1.0e4
    quiet_softmax: bool = False

    @property
    def d_model(self) -> int:
        return self.query.d_output

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    def forward(
        self,
        input: MhaInput | Tensor,
        mask: Tensor | None = None,
        *,
        mask_pad: Tensor | None = None,
        causal: bool = False,
    ) -> MhaOutput:
        """Attention of ``input``'s query over its keys and values; a tensor ``x``
        ``[batch, seq, d_model]`` is self-attention (``MhaInput.self_attn(x)``), with
        ``mask`` its attention mask (``True`` hides a key, as ``mask_attn``),
        ``mask_pad`` its padding mask, and ``causal=True`` hiding each query's later
        keys (without building a mask). Masks may leave out the batch and head dims
        (``[seq_q, seq_k]``) or give them as 1."""
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
        batch, seq_q, _ = q.dims()
        seq_k = k.dims()[1]
        if k.dims()[0] != batch or v.dims()[:2] != k.dims()[:2]:
            raise ShapeError(
                f"ember: MultiHeadAttention: query {q.dims()}, key {k.dims()} and value {v.dims()} must share the "
                "batch size, and key and value the sequence length"
            )
        query, key, value = self._heads(self.query(q)), self._heads(self.key(k)), self._heads(self.value(v))
        hidden = None
        if input.mask_pad is not None:
            pad = _mask("mask_pad", input.mask_pad, query)
            if pad.rank != 2 or pad.dims()[0] not in (1, batch) or pad.dims()[1] != seq_k:
                raise ShapeError(
                    f"ember: MultiHeadAttention: mask_pad must be [batch={batch}, seq_k={seq_k}] (or [1, {seq_k}]), "
                    f"got {pad.dims()}"
                )
            hidden = pad.reshape([pad.dims()[0], 1, 1, seq_k])
        if input.mask_attn is not None:
            mask = _attn_mask(input.mask_attn, batch, self.n_heads, seq_q, seq_k, query)
            hidden = mask if hidden is None else hidden.bool_or(mask)
        if hidden is not None and hidden.dims()[0] != batch:
            hidden = hidden.expand([batch] + hidden.dims()[1:])
        training = query.device.is_autodiff()  # Dropout's rule: active on an autodiff device
        if self.quiet_softmax:
            scores = query.matmul(key.swap_dims(2, 3)).mul_scalar(1.0 / math.sqrt(self.d_k))
            if causal:
                later = (
                    Tensor.arange(seq_k, device=scores.device)
                    .unsqueeze_dim(0)
                    .greater(Tensor.arange(seq_q, device=scores.device).unsqueeze_dim(1))
                )
                hidden = later if hidden is None else hidden.bool_or(later)
            if hidden is not None:
                scores = scores.mask_fill(hidden, self.min_float)
            weights = F.quiet_softmax(scores, 3)
            context = self.dropout(weights).matmul(value)
        else:
            # Masked scores are set to min_float (Burn's), not -inf: a row with every key
            # hidden attends evenly instead of to nothing.
            context, weights = attention(
                query,
                key,
                value,
                mask=hidden,
                fill=self.min_float,
                scale=1.0 / math.sqrt(self.d_k),
                causal=causal,
                dropout=self.dropout.prob,
                training=training,
            )
        context = context.swap_dims(1, 2).reshape([batch, seq_q, d_model])
        return MhaOutput(weights=weights, context=self.output(context))

    def _heads(self, x: Tensor) -> Tensor:
        """``[batch, seq, d_model]`` to ``[batch, n_heads, seq, d_k]``."""
        batch, seq, _ = x.dims()
        return x.reshape([batch, seq, self.n_heads, self.d_k]).swap_dims(1, 2)

    def extra_repr(self) -> str:
        return (
            f"d_model: {self.d_model}, n_heads: {self.n_heads}, d_k: {self.d_k}, dropout: {self.dropout.prob}, "
            f"min_float: {self.min_float}, quiet_softmax: {self.quiet_softmax}"
        )


def _mask(name: str, mask: Tensor, scores: Tensor) -> Tensor:
    if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
        raise DTypeError(
            f"ember: MultiHeadAttention: {name} must be a bool Tensor (True hides a key), got {mask!r:.80}"
        )
    return mask if mask.device is scores.device else mask.to_device(scores.device)


def _attn_mask(mask: Tensor, batch: int, heads: int, seq_q: int, seq_k: int, scores: Tensor) -> Tensor:
    """The attention mask as ``[batch or 1, heads or 1, seq_q, seq_k]``."""
    mask = _mask("mask_attn", mask, scores)
    dims = mask.dims()
    expected = f"[seq_q={seq_q}, seq_k={seq_k}], [batch={batch} or 1, {seq_q}, {seq_k}] or [batch, heads={heads} or 1, {seq_q}, {seq_k}]"
    if mask.rank == 2:
        mask = mask.reshape([1, 1] + dims)
    elif mask.rank == 3:
        mask = mask.unsqueeze_dim(1)
    elif mask.rank != 4:
        raise ShapeError(f"ember: MultiHeadAttention: mask_attn must be {expected}, got {dims}")
    b, h, q, k = mask.dims()
    if b not in (1, batch) or h not in (1, heads) or (q, k) != (seq_q, seq_k):
        raise ShapeError(f"ember: MultiHeadAttention: mask_attn must be {expected}, got {dims}")
    return mask

"""``TransformerEncoder``: a stack of self-attention and feed-forward blocks, with
post-norm (Vaswani et al., the default) or pre-norm residuals."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ember.device import Device
from ember.errors import ConfigError, DTypeError
from ember.module import Config, Module
from ember.nn.attention.mha import MhaInput, MultiHeadAttention, MultiHeadAttentionConfig
from ember.nn.dropout import Dropout
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.norm.layer_norm import LayerNorm, LayerNormConfig
from ember.nn.pwff import PositionWiseFeedForward, PositionWiseFeedForwardConfig
from ember.tensor import Tensor


@dataclass(frozen=True)
class TransformerEncoderInput:
    """The encoder's input ``[batch, seq, d_model]`` and optional masks (``True`` hides
    a key): ``mask_pad`` ``[batch, seq]``, ``mask_attn`` ``[batch, seq, seq]`` (e.g.
    :func:`~ember.nn.attention.generate_autoregressive_mask`)."""

    tensor: Tensor
    mask_pad: Tensor | None = None
    mask_attn: Tensor | None = None

    @staticmethod
    def new(tensor: Tensor) -> TransformerEncoderInput:
        return TransformerEncoderInput(tensor)

    def with_mask_pad(self, mask_pad: Tensor) -> TransformerEncoderInput:
        return replace(self, mask_pad=mask_pad)

    def with_mask_attn(self, mask_attn: Tensor) -> TransformerEncoderInput:
        return replace(self, mask_attn=mask_attn)


class TransformerEncoderConfig(Config):
    """Configuration of :class:`TransformerEncoder` (Burn's fields and defaults).

    >>> enc = TransformerEncoderConfig(8, 16, 2, 2, dropout=0.0).init()
    >>> enc(TransformerEncoderInput(Tensor.ones([1, 3, 8]))).dims()
    [1, 3, 8]
    """

    d_model: int
    d_ff: int
    n_heads: int
    n_layers: int
    dropout: float = 0.1
    norm_first: bool = False
    quiet_softmax: bool = False
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)
    activation: str = "gelu"
    layer_norm_eps: float = 1e-5

    def validate(self) -> None:
        if self.n_layers <= 0:
            raise ConfigError(f"ember: TransformerEncoderConfig: n_layers must be > 0, got {self.n_layers}")
        MultiHeadAttentionConfig(self.d_model, self.n_heads, dropout=self.dropout)
        PositionWiseFeedForwardConfig(self.d_model, self.d_ff, activation=self.activation)
        LayerNormConfig(self.d_model, epsilon=self.layer_norm_eps)

    def init(self, device: Device | None = None) -> TransformerEncoder:
        device = device or Device.default()
        return TransformerEncoder(layers=[self._layer(device) for _ in range(self.n_layers)])

    def _layer(self, device: Device) -> TransformerEncoderLayer:
        mha = MultiHeadAttentionConfig(
            self.d_model,
            self.n_heads,
            dropout=self.dropout,
            quiet_softmax=self.quiet_softmax,
            initializer=self.initializer,
        ).init(device)
        pwff = PositionWiseFeedForwardConfig(
            self.d_model, self.d_ff, dropout=self.dropout, initializer=self.initializer, activation=self.activation
        ).init(device)
        norm = LayerNormConfig(self.d_model, epsilon=self.layer_norm_eps)
        return TransformerEncoderLayer(
            mha=mha,
            pwff=pwff,
            norm_1=norm.init(device),
            norm_2=norm.init(device),
            dropout=Dropout(self.dropout),
            norm_first=self.norm_first,
        )


class TransformerEncoderLayer(Module):
    """One block. Post-norm: ``x = norm_1(x + attn(x)); x = norm_2(x + ff(x))``.
    Pre-norm (``norm_first``): ``x = x + attn(norm_1(x)); x = x + ff(norm_2(x))``
    (PyTorch's layout of the two norms)."""

    mha: MultiHeadAttention
    pwff: PositionWiseFeedForward
    norm_1: LayerNorm
    norm_2: LayerNorm
    dropout: Dropout
    norm_first: bool = False

    def forward(
        self, x: Tensor, mask_pad: Tensor | None = None, mask_attn: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            context = self.mha(MhaInput(h, h, h, mask_pad, mask_attn), causal=causal).context
            return self.dropout(context)

        def feed(h: Tensor) -> Tensor:
            return self.dropout(self.pwff(h))

        if self.norm_first:
            x = x.add(attend(self.norm_1(x)))
            return x.add(feed(self.norm_2(x)))
        x = self.norm_1(x.add(attend(x)))
        return self.norm_2(x.add(feed(x)))


class TransformerEncoder(Module):
    """A stack of :class:`TransformerEncoderLayer`; ``forward`` takes a
    :class:`TransformerEncoderInput`, or a tensor with optional masks
    (``encoder(x, mask=..., mask_pad=...)``; ``causal=True`` lets each position see
    only itself and earlier ones, as a decoder-only model needs), and returns
    ``[batch, seq, d_model]``."""

    layers: list[TransformerEncoderLayer]

    def forward(
        self,
        input: TransformerEncoderInput | Tensor,
        mask: Tensor | None = None,
        *,
        mask_pad: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        if isinstance(input, Tensor):
            input = TransformerEncoderInput(input, mask_pad, mask)
        elif mask is not None or mask_pad is not None:
            raise DTypeError(
                "ember: TransformerEncoder: give masks inside the TransformerEncoderInput, or call encoder(x, mask=...) "
                "with a tensor"
            )
        x = input.tensor
        for layer in self.layers:
            x = layer(x, input.mask_pad, input.mask_attn, causal)
        return x

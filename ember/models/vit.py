"""The Vision Transformer (Dosovitskiy et al., 2021) in Hugging Face's layout:
``ViTForImageClassification``.

The module tree carries Hugging Face's names (``vit.embeddings.patch_embeddings``,
``vit.encoder.layer.0.layernorm_before``, ``classifier``); the weight map only
declares that each layer's attention is one :class:`~ember.nn.MultiHeadAttention`,
whose query, key and value Hugging Face keeps under ``attention.attention`` and whose
output projection it calls ``attention.output.dense``. The patch embedding is a
``Conv2d`` (kernel = stride = patch size), whose weight ``[out, in, kh, kw]`` ember
stores as PyTorch does.

>>> config = ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=1,
...                    num_attention_heads=2, intermediate_size=32, num_labels=3)
>>> ViTForImageClassification.from_config(config)(Tensor.zeros([2, 3, 8, 8])).dims()
[2, 3]
"""

from __future__ import annotations

from typing import Any, ClassVar

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.models.activations import activation, check_activation
from ember.models.config import HfConfig
from ember.models.labels import num_labels_of, with_label_maps
from ember.models.pretrained import PretrainedModel
from ember.module import Module, Param, Rename, WeightMap
from ember.nn import (
    Conv2d,
    Dropout,
    LayerNorm,
    LayerNormConfig,
    Linear,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    Normal,
    Zeros,
)
from ember.tensor import Tensor

__all__ = [
    "ViTConfig",
    "ViTEmbeddings",
    "ViTEncoder",
    "ViTForImageClassification",
    "ViTIntermediate",
    "ViTLayer",
    "ViTModel",
    "ViTOutput",
    "ViTPatchEmbeddings",
]


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


class ViTConfig(HfConfig):
    """ViT's ``config.json`` fields (Hugging Face's names and defaults). ``num_labels``
    is counted from ``id2label``, as ``transformers`` does."""

    model_type: ClassVar[str] = "vit"
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    image_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    num_channels: int = 3
    qkv_bias: bool = True
    encoder_stride: int = 16
    num_labels: int = 2

    @classmethod
    def adapt_hf(cls, data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"num_labels": num_labels_of(cls.__name__, data)}
        for name in ("image_size", "patch_size"):
            if isinstance(data.get(name), list):
                out[name] = tuple(data[name])
        return out

    def to_hf(self) -> dict[str, Any]:
        return with_label_maps(super().to_hf(), self.num_labels)

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ember: ViTConfig: hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        for name in ("image_size", "patch_size"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != 2:
                raise ConfigError(f"ember: ViTConfig: {name} must be an int or [height, width], got {list(value)}")
        check_activation("ViTConfig.hidden_act", self.hidden_act)

    @property
    def grid(self) -> tuple[int, int]:
        """The patches along the image's height and width."""
        (h, w), (ph, pw) = _pair(self.image_size), _pair(self.patch_size)
        return h // ph, w // pw


class ViTPatchEmbeddings(Module):
    """The image cut into patches, each projected to ``hidden_size`` by ``projection``
    (a ``Conv2d`` with kernel = stride = patch size): ``[B, C, H, W]`` to ``[B, N, D]``."""

    projection: Conv2d

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.projection(pixel_values).flatten(2).swap_dims(1, 2)


class ViTEmbeddings(Module):
    """The CLS token, then the patch embeddings, plus the position embeddings."""

    cls_token: Param
    position_embeddings: Param
    patch_embeddings: ViTPatchEmbeddings
    dropout: Dropout
    image_size: tuple[int, int] = (224, 224)

    def forward(self, pixel_values: Tensor) -> Tensor:
        channels = self.patch_embeddings.projection.weight.lazy_shape()[1]
        if pixel_values.rank != 4 or pixel_values.dims()[1] != channels:
            raise ShapeError(
                f"ember: ViT: pixel_values must be [batch, {channels}, height, width], got shape {pixel_values.dims()}"
            )
        batch, _, height, width = pixel_values.dims()
        if (height, width) != self.image_size:
            raise ShapeError(
                f"ember: ViT: the image is {height}x{width} but the model's position embeddings are for "
                f"{self.image_size[0]}x{self.image_size[1]} (config.image_size); resize the image to that size "
                "(ember does not interpolate the position embeddings)"
            )
        patches = self.patch_embeddings(pixel_values)
        cls = self.cls_token.val().expand([batch, -1, -1])
        x = Tensor.cat([cls, patches], dim=1).add(self.position_embeddings.val())
        return self.dropout(x)


class ViTIntermediate(Module):
    """The feed-forward's first half: ``act(dense(x))``."""

    dense: Linear
    hidden_act: str = "gelu"

    def forward(self, x: Tensor) -> Tensor:
        return activation(self.hidden_act, self.dense(x))


class ViTOutput(Module):
    """The feed-forward's second half: ``dropout(dense(x))``."""

    dense: Linear
    dropout: Dropout

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.dense(x))


class ViTLayer(Module):
    """A pre-norm encoder layer: ``x + attention(layernorm_before(x))``, then
    ``x + output(intermediate(layernorm_after(x)))``."""

    attention: MultiHeadAttention
    layernorm_before: LayerNorm
    layernorm_after: LayerNorm
    intermediate: ViTIntermediate
    output: ViTOutput
    dropout: Dropout

    def forward(self, x: Tensor) -> Tensor:
        x = x.add(self.dropout(self.attention(self.layernorm_before(x)).context))
        return x.add(self.output(self.intermediate(self.layernorm_after(x))))


class ViTEncoder(Module):
    """The stack of encoder layers."""

    layer: list[ViTLayer]

    def forward(self, x: Tensor) -> Tensor:
        for block in self.layer:
            x = block(x)
        return x


class ViTModel(Module):
    """Embeddings, encoder and final layer norm (no pooler, as in the classifier)."""

    embeddings: ViTEmbeddings
    encoder: ViTEncoder
    layernorm: LayerNorm

    def forward(self, pixel_values: Tensor) -> Tensor:
        """Hidden states ``[batch, 1 + patches, hidden_size]`` (the CLS token first)."""
        return self.layernorm(self.encoder(self.embeddings(pixel_values)))


class ViTForImageClassification(PretrainedModel):
    """ViT with a linear classifier on the CLS token's final hidden state.
    ``model(pixel_values)`` (``[batch, channels, height, width]``, the config's image
    size) returns logits ``[batch, num_labels]`` (the CLS hidden state when
    ``num_labels`` is 0)."""

    hf_architecture: ClassVar[str] = "ViTForImageClassification"
    config_class: ClassVar[type[HfConfig]] = ViTConfig
    config: ViTConfig
    vit: ViTModel
    classifier: Linear | None = None

    @classmethod
    def from_config(cls, config: ViTConfig, device: Device | None = None) -> ViTForImageClassification:
        device = device or Device.default()
        weights = Normal(0.0, config.initializer_range)
        d, d_ff = config.hidden_size, config.intermediate_size

        def linear(d_in: int, d_out: int) -> Linear:
            return Linear(
                weight=weights.lazy((d_in, d_out), d_in, d_out, device),
                bias=Zeros().lazy((d_out,), d_in, d_out, device),
            )

        def norm() -> LayerNorm:
            return LayerNormConfig(d, epsilon=config.layer_norm_eps).init(device)

        layers = [
            ViTLayer(
                attention=MultiHeadAttentionConfig(
                    d,
                    config.num_attention_heads,
                    dropout=config.attention_probs_dropout_prob,
                    initializer=weights,
                    query_bias=config.qkv_bias,
                    key_bias=config.qkv_bias,
                    value_bias=config.qkv_bias,
                ).init(device),
                layernorm_before=norm(),
                layernorm_after=norm(),
                intermediate=ViTIntermediate(dense=linear(d, d_ff), hidden_act=config.hidden_act),
                output=ViTOutput(dense=linear(d_ff, d), dropout=Dropout(config.hidden_dropout_prob)),
                dropout=Dropout(config.hidden_dropout_prob),
            )
            for _ in range(config.num_hidden_layers)
        ]
        patch = _pair(config.patch_size)
        fan_in = config.num_channels * patch[0] * patch[1]
        projection = Conv2d(
            weight=weights.lazy((d, config.num_channels) + patch, fan_in, d, device),
            bias=Zeros().lazy((d,), fan_in, d, device),
            stride=patch,
        )
        rows, cols = config.grid
        embeddings = ViTEmbeddings(
            cls_token=weights.lazy((1, 1, d), d, d, device),
            position_embeddings=weights.lazy((1, rows * cols + 1, d), d, d, device),
            patch_embeddings=ViTPatchEmbeddings(projection=projection),
            dropout=Dropout(config.hidden_dropout_prob),
            image_size=_pair(config.image_size),
        )
        vit = ViTModel(embeddings=embeddings, encoder=ViTEncoder(layer=layers), layernorm=norm())
        classifier = linear(d, config.num_labels) if config.num_labels > 0 else None
        return cls(config=config, vit=vit, classifier=classifier)

    def forward(self, pixel_values: Tensor) -> Tensor:
        """Logits ``[batch, num_labels]`` of ``pixel_values`` ``[batch, channels, height, width]``."""
        cls_state = self.vit(pixel_values).select_dim(1, 0)
        return cls_state if self.classifier is None else self.classifier(cls_state)

    def weight_map(self) -> WeightMap:
        return WeightMap(
            renames=(
                Rename("attention.attention.query", "attention.query"),
                Rename("attention.attention.key", "attention.key"),
                Rename("attention.attention.value", "attention.value"),
                Rename("attention.output.dense", "attention.output"),
            )
        )

"""ResNet (He et al., 2016) in Hugging Face's layout: ``ResNetForImageClassification``.

The module tree carries Hugging Face's names (``resnet.embedder.embedder.convolution``,
``resnet.encoder.stages.0.layers.1.layer.2.normalization``, ``shortcut``); the weight
map only declares that the classifier, ``nn.Sequential(Flatten, Linear)`` in
``transformers``, is the ``Linear`` ``classifier.1``. ``BatchNorm`` layers load their
running statistics; on a device without autodiff (``model.valid()``, or a model loaded
on a plain device) they normalise with them, as ``transformers`` does in eval mode.

>>> config = ResNetConfig(embedding_size=8, hidden_sizes=(8, 16), depths=(1, 1), layer_type="basic")
>>> ResNetForImageClassification.from_config(config)(Tensor.zeros([2, 3, 32, 32])).dims()
[2, 2]
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.models.activations import activation, check_activation
from ember.models.config import HfConfig
from ember.models.labels import num_labels_of, with_label_maps
from ember.models.pretrained import PretrainedModel
from ember.module import Module, Rename, WeightMap
from ember.nn import (
    AdaptiveAvgPool2d,
    BatchNorm,
    BatchNormConfig,
    Conv2d,
    Conv2dConfig,
    KaimingNormal,
    Linear,
    LinearConfig,
    MaxPool2d,
    MaxPool2dConfig,
)
from ember.tensor import Tensor

__all__ = [
    "ResNetConfig",
    "ResNetConvLayer",
    "ResNetEmbeddings",
    "ResNetEncoder",
    "ResNetForImageClassification",
    "ResNetLayer",
    "ResNetModel",
    "ResNetShortCut",
    "ResNetStage",
]

LAYER_TYPES = ("basic", "bottleneck")


class ResNetConfig(HfConfig):
    """ResNet's ``config.json`` fields (Hugging Face's names and defaults: ResNet-50).
    ``num_labels`` is counted from ``id2label``, as ``transformers`` does; the backbone
    keys (``out_features``, ``out_indices``, ``stage_names``) are kept in ``extra``."""

    model_type: ClassVar[str] = "resnet"
    num_channels: int = 3
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    layer_type: str = "bottleneck"
    hidden_act: str = "relu"
    downsample_in_first_stage: bool = False
    downsample_in_bottleneck: bool = False
    num_labels: int = 2

    @classmethod
    def adapt_hf(cls, data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"num_labels": num_labels_of(cls.__name__, data)}
        for name in ("hidden_sizes", "depths"):
            if isinstance(data.get(name), list):
                out[name] = tuple(data[name])
        return out

    def to_hf(self) -> dict[str, Any]:
        return with_label_maps(super().to_hf(), self.num_labels)

    def validate(self) -> None:
        if self.layer_type not in LAYER_TYPES:
            raise ConfigError(f"ember: ResNetConfig: layer_type must be one of {LAYER_TYPES}, got {self.layer_type!r}")
        if not self.depths or len(self.depths) != len(self.hidden_sizes):
            raise ConfigError(
                f"ember: ResNetConfig: depths {list(self.depths)} and hidden_sizes {list(self.hidden_sizes)} must "
                "name the same (non-zero) number of stages"
            )
        if any(d < 1 for d in self.depths) or any(h < 1 for h in self.hidden_sizes):
            raise ConfigError(
                f"ember: ResNetConfig: depths {list(self.depths)} and hidden_sizes {list(self.hidden_sizes)} must "
                "be >= 1"
            )
        check_activation("ResNetConfig.hidden_act", self.hidden_act)


class ResNetConvLayer(Module):
    """``act(normalization(convolution(x)))``; no activation when ``hidden_act`` is None."""

    convolution: Conv2d
    normalization: BatchNorm
    hidden_act: str | None = "relu"

    def forward(self, x: Tensor) -> Tensor:
        x = self.normalization(self.convolution(x))
        return x if self.hidden_act is None else activation(self.hidden_act, x)


class ResNetShortCut(Module):
    """The residual's projection (a strided 1x1 convolution, then batch norm), where a
    layer changes the channels or the resolution."""

    convolution: Conv2d
    normalization: BatchNorm

    def forward(self, x: Tensor) -> Tensor:
        return self.normalization(self.convolution(x))


class ResNetEmbeddings(Module):
    """The stem: a 7x7 stride-2 convolution layer, then a 3x3 stride-2 max pool."""

    embedder: ResNetConvLayer
    pooler: MaxPool2d

    def forward(self, pixel_values: Tensor) -> Tensor:
        channels = self.embedder.convolution.weight.lazy_shape()[1]
        if pixel_values.rank != 4 or pixel_values.dims()[1] != channels:
            raise ShapeError(
                f"ember: ResNet: pixel_values must be [batch, {channels}, height, width] (config.num_channels), got "
                f"shape {pixel_values.dims()}"
            )
        return self.pooler(self.embedder(pixel_values))


class ResNetLayer(Module):
    """A residual layer: ``act(layer(x) + shortcut(x))``. ``layer`` holds two 3x3
    convolution layers (``basic``) or 1x1, 3x3, 1x1 ones (``bottleneck``); the shortcut
    is the identity when ``shortcut`` is None."""

    layer: list[ResNetConvLayer]
    shortcut: ResNetShortCut | None = None
    hidden_act: str = "relu"

    def forward(self, x: Tensor) -> Tensor:
        residual = x if self.shortcut is None else self.shortcut(x)
        for conv in self.layer:
            x = conv(x)
        return activation(self.hidden_act, x.add(residual))


class ResNetStage(Module):
    """The residual layers of one resolution (the first one may downsample)."""

    layers: list[ResNetLayer]

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class ResNetEncoder(Module):
    """The stages, in order."""

    stages: list[ResNetStage]

    def forward(self, x: Tensor) -> Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


class ResNetModel(Module):
    """Stem, stages and the global average pool."""

    embedder: ResNetEmbeddings
    encoder: ResNetEncoder
    pooler: AdaptiveAvgPool2d

    def forward(self, pixel_values: Tensor) -> Tensor:
        """Pooled features ``[batch, hidden_sizes[-1]]``."""
        return self.pooler(self.encoder(self.embedder(pixel_values))).flatten(1)


class _Builder:
    """Fresh layers initialised as ``transformers`` does: convolutions Kaiming-normal
    over fan-out (ReLU gain), batch norms 1 and 0 with running statistics 0 and 1."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.init = KaimingNormal(gain=math.sqrt(2.0), fan_out_only=True)

    def conv(
        self, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, act: str | None = "relu"
    ) -> ResNetConvLayer:
        conv = Conv2dConfig(
            (c_in, c_out), kernel, stride=stride, padding=kernel // 2, bias=False, initializer=self.init
        ).init(self.device)
        return ResNetConvLayer(convolution=conv, normalization=BatchNormConfig(c_out).init(self.device), hidden_act=act)

    def layer(self, config: ResNetConfig, c_in: int, c_out: int, stride: int) -> ResNetLayer:
        shortcut = None
        if c_in != c_out or stride != 1:
            conv = Conv2dConfig((c_in, c_out), 1, stride=stride, bias=False, initializer=self.init).init(self.device)
            shortcut = ResNetShortCut(convolution=conv, normalization=BatchNormConfig(c_out).init(self.device))
        act = config.hidden_act
        if config.layer_type == "basic":
            convs = [self.conv(c_in, c_out, stride=stride), self.conv(c_out, c_out, act=None)]
        else:
            mid = c_out // 4
            first, second = (stride, 1) if config.downsample_in_bottleneck else (1, stride)
            convs = [
                self.conv(c_in, mid, kernel=1, stride=first),
                self.conv(mid, mid, stride=second),
                self.conv(mid, c_out, kernel=1, act=None),
            ]
        return ResNetLayer(layer=convs, shortcut=shortcut, hidden_act=act)


class ResNetForImageClassification(PretrainedModel):
    """ResNet with a linear classifier on the pooled features. ``model(pixel_values)``
    (``[batch, channels, height, width]``) returns logits ``[batch, num_labels]`` (the
    pooled features when ``num_labels`` is 0)."""

    hf_architecture: ClassVar[str] = "ResNetForImageClassification"
    config_class: ClassVar[type[HfConfig]] = ResNetConfig
    config: ResNetConfig
    resnet: ResNetModel
    classifier: Linear | None = None

    @classmethod
    def from_config(cls, config: ResNetConfig, device: Device | None = None) -> ResNetForImageClassification:
        device = device or Device.default()
        build = _Builder(device)
        stages = []
        c_in = config.embedding_size
        for i, (c_out, depth) in enumerate(zip(config.hidden_sizes, config.depths)):
            stride = 2 if i > 0 or config.downsample_in_first_stage else 1
            layers = [build.layer(config, c_in, c_out, stride)]
            layers += [build.layer(config, c_out, c_out, 1) for _ in range(depth - 1)]
            stages.append(ResNetStage(layers=layers))
            c_in = c_out
        embedder = ResNetEmbeddings(
            embedder=build.conv(config.num_channels, config.embedding_size, kernel=7, stride=2, act=config.hidden_act),
            pooler=MaxPool2dConfig(3, strides=2, padding=1).init(),
        )
        resnet = ResNetModel(
            embedder=embedder, encoder=ResNetEncoder(stages=stages), pooler=AdaptiveAvgPool2d(output_size=(1, 1))
        )
        classifier = None
        if config.num_labels > 0:
            classifier = LinearConfig(config.hidden_sizes[-1], config.num_labels).init(device)
        return cls(config=config, resnet=resnet, classifier=classifier)

    def forward(self, pixel_values: Tensor) -> Tensor:
        """Logits ``[batch, num_labels]`` of ``pixel_values`` ``[batch, channels, height, width]``."""
        pooled = self.resnet(pixel_values)
        return pooled if self.classifier is None else self.classifier(pooled)

    def weight_map(self) -> WeightMap:
        return WeightMap(renames=(Rename("classifier.1", "classifier"),))

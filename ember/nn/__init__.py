"""``ember.nn``: layers, activations, losses and initializers."""

from ember.nn.activation import (
    Celu,
    Elu,
    Gelu,
    Glu,
    HardSigmoid,
    HardSwish,
    LeakyRelu,
    LeakyReluConfig,
    Mish,
    PRelu,
    PReluConfig,
    QuickGelu,
    Relu,
    Selu,
    Sigmoid,
    SiLU,
    Softplus,
    Softsign,
    SwiGlu,
    SwiGluConfig,
    Tanh,
    Tanhshrink,
    Threshold,
    ThresholdedRelu,
)
from ember.nn.attention import (
    GeneratePaddingMask,
    MhaInput,
    MhaOutput,
    MultiHeadAttention,
    MultiHeadAttentionConfig,
    generate_autoregressive_mask,
    generate_padding_mask,
)
from ember.nn.conv import (
    Conv1d,
    Conv1dConfig,
    Conv2d,
    Conv2dConfig,
    ConvTranspose1d,
    ConvTranspose1dConfig,
    ConvTranspose2d,
    ConvTranspose2dConfig,
)
from ember.nn.dropout import Dropout, DropoutConfig
from ember.nn.embedding import Embedding, EmbeddingConfig
from ember.nn.identity import Identity
from ember.nn.init import (
    Constant,
    Initializer,
    KaimingNormal,
    KaimingUniform,
    Normal,
    Ones,
    Orthogonal,
    Uniform,
    XavierNormal,
    XavierUniform,
    Zeros,
)
from ember.nn.linear import Linear, LinearConfig
from ember.nn.norm import (
    BatchNorm,
    BatchNormConfig,
    GroupNorm,
    GroupNormConfig,
    LayerNorm,
    LayerNormConfig,
    RmsNorm,
    RmsNormConfig,
)
from ember.nn.pool import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool1dConfig,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool2dConfig,
    AvgPool1d,
    AvgPool1dConfig,
    AvgPool2d,
    AvgPool2dConfig,
    MaxPool1d,
    MaxPool1dConfig,
    MaxPool2d,
    MaxPool2dConfig,
)
from ember.nn.pos_encoding import PositionalEncoding, PositionalEncodingConfig
from ember.nn.pwff import PositionWiseFeedForward, PositionWiseFeedForwardConfig
from ember.nn.rnn import GateController, Gru, GruConfig, Lstm, LstmConfig, LstmState
from ember.nn.rotary import RotaryEncoding, RotaryEncodingConfig
from ember.nn.transformer import (
    TransformerEncoder,
    TransformerEncoderConfig,
    TransformerEncoderInput,
    TransformerEncoderLayer,
)
from ember.nn.unfold import Unfold, Unfold4d, Unfold4dConfig
from ember.nn.upsample import Upsample, UpsampleConfig

__all__ = [
    "Celu", "Constant", "Elu", "Gelu", "Glu", "HardSigmoid", "HardSwish", "Initializer",
    "KaimingNormal", "KaimingUniform", "LeakyRelu", "LeakyReluConfig", "Linear", "LinearConfig",
    "Mish", "Normal", "Ones", "Orthogonal", "PRelu", "PReluConfig", "Relu", "Selu", "SiLU",
    "Sigmoid", "Softplus", "SwiGlu", "SwiGluConfig", "Tanh", "Uniform", "XavierNormal",
    "XavierUniform", "Zeros", "QuickGelu", "Softsign", "Tanhshrink", "Threshold", "ThresholdedRelu",
    # layers (issue 5)
    "AdaptiveAvgPool1d", "AdaptiveAvgPool1dConfig", "AdaptiveAvgPool2d", "AdaptiveAvgPool2dConfig", "AvgPool1d",
    "AvgPool1dConfig", "AvgPool2d", "AvgPool2dConfig", "BatchNorm", "BatchNormConfig", "Conv1d", "Conv1dConfig",
    "Conv2d", "Conv2dConfig", "ConvTranspose1d", "ConvTranspose1dConfig", "ConvTranspose2d", "ConvTranspose2dConfig",
    "Dropout", "DropoutConfig", "Embedding", "EmbeddingConfig", "GateController", "GeneratePaddingMask", "GroupNorm",
    "GroupNormConfig", "Gru", "GruConfig", "Identity", "LayerNorm", "LayerNormConfig", "Lstm", "LstmConfig",
    "LstmState", "MaxPool1d", "MaxPool1dConfig", "MaxPool2d", "MaxPool2dConfig", "MhaInput", "MhaOutput",
    "MultiHeadAttention", "MultiHeadAttentionConfig", "PositionWiseFeedForward", "PositionWiseFeedForwardConfig",
    "PositionalEncoding", "PositionalEncodingConfig", "RmsNorm", "RmsNormConfig", "RotaryEncoding",
    "RotaryEncodingConfig", "TransformerEncoder", "TransformerEncoderConfig", "TransformerEncoderInput",
    "TransformerEncoderLayer", "generate_autoregressive_mask", "generate_padding_mask",
    "Unfold", "Unfold4d", "Unfold4dConfig", "Upsample", "UpsampleConfig",
]

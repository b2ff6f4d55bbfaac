"""``Embedding``: a lookup table of learned vectors."""

from __future__ import annotations

from typing import ClassVar

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module, Param
from ember.nn.init import Initializer, Normal
from ember.nn.quantized.embedding import QuantizedEmbedding
from ember.tensor import Tensor
from ember.tensor.layer_ops import embedding
from ember.tensor.quant import QuantScheme


class EmbeddingConfig(Config):
    """Configuration of :class:`Embedding`: ``n_embedding`` vectors of size ``d_model``,
    drawn from a standard normal by default (as Burn and PyTorch).

    >>> EmbeddingConfig(10, 4).init()(Tensor.from_ints([[1, 2, 3]])).dims()
    [1, 3, 4]
    """

    n_embedding: int
    d_model: int
    initializer: Initializer = Normal(mean=0.0, std=1.0)

    def validate(self) -> None:
        if self.n_embedding <= 0 or self.d_model <= 0:
            raise ConfigError(
                f"ember: EmbeddingConfig: n_embedding and d_model must be > 0, got {self.n_embedding}, {self.d_model}"
            )

    def init(self, device: Device | None = None) -> Embedding:
        device = device or Device.default()
        shape = (self.n_embedding, self.d_model)
        return Embedding(weight=self.initializer.lazy(shape, self.n_embedding, self.d_model, device))


class Embedding(Module):
    """Maps int indices of any shape to ``[*indices.shape, d_model]``; weight
    ``[n_embedding, d_model]``. Build with :class:`EmbeddingConfig` or
    ``Embedding(weight=Param.from_tensor(w))``."""

    weight: Param
    #: ``Module.quantize`` takes an embedding only when asked (``include_embeddings=True``).
    quantize_opt_in: ClassVar[bool] = True

    def forward(self, indices: Tensor) -> Tensor:
        return embedding(self.weight.val(), indices)

    def attend(self, x: Tensor) -> Tensor:
        """``x [..., d_model] @ weight.T``: ``[..., n_embedding]``, the logits of an output
        layer tied to this embedding (Flax's ``Embed.attend``)."""
        return x.matmul(self.weight.val().transpose())

    def quantized(self, scheme: QuantScheme, input_scale: float | None = None) -> QuantizedEmbedding:
        """This table quantized by ``scheme`` along ``d_model`` (weight-only; see
        ``ember.nn.quantized.QuantizedEmbedding``)."""
        return QuantizedEmbedding.from_weight(self.weight.val(), scheme)

    @property
    def dtype(self) -> DType:
        """The dtype of the vectors it gives (the table's)."""
        return self.weight.dtype

    @property
    def device(self) -> Device:
        return self.weight.device

    def extra_repr(self) -> str:
        n, d = self.weight.lazy_shape()
        return f"n_embedding: {n}, d_model: {d}"

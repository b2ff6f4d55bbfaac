"""``QuantizedEmbedding``: an :class:`~ember.nn.Embedding` whose table is quantized.

The table ``[n_embedding, d_model]`` is quantized along ``d_model``: int8 with a scale per
row (``channel``), or int4 with a scale per block of ``d_model`` values. The forward
gathers the packed rows (and their scales) of the given indices and dequantizes only
those rows, never the whole table. A language-model head tied to the embedding
(:meth:`attend`) reads the same packed table through ``quantized_linear``: the table is
already the ``[d_output, d_input]`` layout (one row per vocabulary entry) the quantized
kernels take, so the tied head costs no second copy and never materialises a float table.

>>> from ember import Tensor
>>> from ember.nn import EmbeddingConfig
>>> from ember.tensor.quant import QuantScheme
>>> table = EmbeddingConfig(100, 64).init().quantized(QuantScheme.int4(block=32))
>>> table(Tensor.from_ints([[1, 2, 3]])).dims(), table.values.val().dims()
([1, 3, 64], [100, 32])
>>> table.attend(Tensor.zeros([2, 64])).dims()  # tied-head logits
[2, 100]
"""

from __future__ import annotations

import dataclasses

from ember.backend.dtype import DType
from ember.device import Device
from ember.module import Module, Param
from ember.nn.quantized.weight import qtensor, weight_params
from ember.tensor import Tensor
from ember.tensor.layer_ops import embedding
from ember.tensor.quant import QuantizedTensor, QuantScheme, dequantize_parts, quantized_linear


class QuantizedEmbedding(Module):
    """Maps int indices of any shape to ``[*indices.shape, d_model]`` from a packed table;
    built by ``Embedding.quantized(scheme)`` or ``model.quantize(scheme, include_embeddings=True)``.
    The scheme is weight-only (a scheme's activation quantization does not apply to a lookup)."""

    values: Param
    scales: Param
    zero_points: Param | None
    scheme: QuantScheme
    n_embedding: int
    d_model: int

    @staticmethod
    def from_weight(weight: Tensor, scheme: QuantScheme) -> QuantizedEmbedding:
        """From a float table ``[n_embedding, d_model]``."""
        scheme = weight_only(scheme)
        n_embedding, d_model = weight.dims()
        values, scales, zero_points = weight_params(weight, scheme)
        if values.device is not weight.device:
            # Keep the table on the embedding's own device (an autodiff device, where the
            # model's inputs and its first parameter live: ``generate`` picks its device so).
            values, scales = (Param.from_tensor(p.val().to_device(weight.device), False) for p in (values, scales))
            if zero_points is not None:
                zero_points = Param.from_tensor(zero_points.val().to_device(weight.device), False)
        return QuantizedEmbedding(
            values=values,
            scales=scales,
            zero_points=zero_points,
            scheme=scheme,
            n_embedding=n_embedding,
            d_model=d_model,
        )

    @property
    def weight(self) -> QuantizedTensor:
        """The quantized table ``[n_embedding, d_model]``."""
        return qtensor(self.values, self.scales, self.zero_points, self.scheme, (self.n_embedding, self.d_model))

    @property
    def dtype(self) -> DType:
        """The dtype of the vectors it gives: float32."""
        return DType.FLOAT32

    @property
    def device(self) -> Device:
        return self.values.device

    def forward(self, indices: Tensor) -> Tensor:
        """The dequantized rows at ``indices``: ``[*indices.shape, d_model]`` float32."""
        values = embedding(self.values.val(), indices)
        shape = values.dims()[:-1]
        rows = int(_prod(shape))
        scales = self.scales.val()
        zero_points = None if self.zero_points is None else self.zero_points.val()
        if self.scheme.level != "tensor":  # a scale (and zero point) per row or per block: gather them too
            scales = embedding(scales, indices).reshape([rows, -1])
            zero_points = None if zero_points is None else embedding(zero_points, indices).reshape([rows, -1])
        packed = values.reshape([rows, values.dims()[-1]])
        out = dequantize_parts(packed, scales, zero_points, self.scheme, (rows, self.d_model)).reshape(
            [*shape, self.d_model]
        )
        # The packed table never requires grad and lives on the inner device; give the rows
        # on the indices' device (an autodiff device takes them as constants).
        return out if out.device is indices.device else out.to_device(indices.device)

    def attend(self, x: Tensor) -> Tensor:
        """``x [..., d_model] @ table.T``: the logits of a head tied to this embedding,
        ``[..., n_embedding]``, by the quantized linear kernel on the packed table."""
        return quantized_linear(x, self.weight)

    def dequantize(self) -> Module:
        """The float ``Embedding`` this layer approximates."""
        from ember.nn.embedding import Embedding

        return Embedding(weight=Param.from_tensor(self.weight.dequantize()))

    def extra_repr(self) -> str:
        return f"n_embedding: {self.n_embedding}, d_model: {self.d_model}, scheme: {self.scheme!r}"


def weight_only(scheme: QuantScheme) -> QuantScheme:
    """``scheme`` without activation quantization."""
    return dataclasses.replace(scheme, activations=None) if scheme.activations else scheme


def _prod(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out

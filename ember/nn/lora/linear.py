"""``LoraLinear``: a frozen ``Linear`` plus a trainable low-rank update."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.dtype import DType
from ember.module import Module, Param
from ember.nn.dropout import Dropout
from ember.nn.linear import Linear
from ember.tensor import Tensor
from ember.tensor.layer_ops import linear

if TYPE_CHECKING:
    from ember.nn.lora.config import LoraConfig

_HALF = (DType.FLOAT16, DType.BFLOAT16)


class LoraLinear(Module):
    """``base(x) + dropout(x) @ lora_a @ lora_b * scale`` with ``scale = alpha / r``
    (Hu et al., 2021). ``base`` is the original layer (frozen by
    :meth:`LoraConfig.init <ember.nn.lora.LoraConfig.init>`, which builds this layer),
    ``lora_a`` is ``[d_input, r]`` and ``lora_b`` is ``[r, d_output]`` (ember's
    ``[in, out]`` layout: PEFT's ``lora_A.weight`` and ``lora_B.weight`` transposed).
    ``config`` is the configuration that built the layer (saved with the adapters).

    >>> from ember.nn import LinearConfig
    >>> from ember.nn.lora import LoraConfig
    >>> layer = LoraConfig(r=4, alpha=8.0).init(LinearConfig(16, 32).init())
    >>> layer.r, layer.scale, layer.num_params()  # 16 * 32 + 32 + 16 * 4 + 4 * 32
    (4, 2.0, 736)
    """

    base: Linear
    lora_a: Param
    lora_b: Param
    dropout: Dropout
    alpha: float
    config: LoraConfig | None = None

    def forward(self, x: Tensor) -> Tensor:
        """``x`` of shape ``[..., d_input]`` to ``[..., d_output]``."""
        update = linear(linear(self.dropout(x), self.lora_a.val()), self.lora_b.val())
        return self.base(x).add(update.mul_scalar(self.scale))

    @property
    def r(self) -> int:
        """The rank of the update."""
        return self.lora_a.lazy_shape()[1]

    @property
    def scale(self) -> float:
        """``alpha / r``: the factor of the low-rank update."""
        return self.alpha / self.r

    @property
    def d_input(self) -> int:
        return self.base.d_input

    @property
    def d_output(self) -> int:
        return self.base.d_output

    def merged(self) -> Linear:
        """The base layer with ``scale * lora_a @ lora_b`` added to its weight: same
        ``ParamId``s and ``require_grad`` flags, no graph (the values are detached).
        Half-precision weights are summed in float32 and rounded once."""
        weight = self.base.weight
        w = weight.val().detach()
        a, b = self.lora_a.val().detach(), self.lora_b.val().detach()
        dtype = w.dtype
        if dtype in _HALF:
            w, a, b = w.cast(DType.FLOAT32), a.cast(DType.FLOAT32), b.cast(DType.FLOAT32)
        value = w.add(a.matmul(b).mul_scalar(self.scale)).cast(dtype)
        return Linear(weight=Param(weight.id, value, weight.require_grad), bias=self.base.bias)

    def extra_repr(self) -> str:
        return f"d_input: {self.d_input}, d_output: {self.d_output}, r: {self.r}, alpha: {self.alpha}"

"""``LayerNorm``: normalisation over the last dim."""

from __future__ import annotations

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, Param
from ember.nn.init import Ones, Zeros
from ember.tensor import Tensor, autocast
from ember.tensor.norm import layer_norm


class LayerNormConfig(Config):
    """Configuration of :class:`LayerNorm`.

    >>> LayerNormConfig(8).init()(Tensor.ones([2, 8])).dims()
    [2, 8]
    """

    d_model: int
    epsilon: float = 1e-5
    bias: bool = True

    def validate(self) -> None:
        if self.d_model <= 0:
            raise ConfigError(f"ember: LayerNormConfig: d_model must be > 0, got {self.d_model}")
        if self.epsilon <= 0:
            raise ConfigError(f"ember: LayerNormConfig: epsilon must be > 0, got {self.epsilon}")

    def init(self, device: Device | None = None) -> LayerNorm:
        device = device or Device.default()
        shape = (self.d_model,)
        beta = Zeros().lazy(shape, device=device) if self.bias else None
        return LayerNorm(gamma=Ones().lazy(shape, device=device), beta=beta, epsilon=self.epsilon)


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last dim (biased variance)."""

    pytorch_names = {"weight": "gamma", "bias": "beta"}  # PyTorch calls the scale and shift weight and bias

    gamma: Param
    beta: Param | None = None
    epsilon: float = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        d_model = self.gamma.lazy_shape()[0]
        if x.rank < 1 or x.dims()[-1] != d_model:
            raise ShapeError(f"ember: LayerNorm: the input's last dim must be d_model={d_model}, got shape {x.dims()}")
        x = x.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("layer_norm", x)
        return layer_norm(x, self.gamma.val(), None if self.beta is None else self.beta.val(), self.epsilon)

    def extra_repr(self) -> str:
        return f"d_model: {self.gamma.lazy_shape()[0]}, epsilon: {self.epsilon}, bias: {self.beta is not None}"

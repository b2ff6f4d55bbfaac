"""Activations as modules (``ember.tensor.activation`` holds the functions)."""

from __future__ import annotations

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module, Param
from ember.nn.linear import Linear, LinearConfig
from ember.tensor import Tensor
from ember.tensor import activation as F


class Relu(Module):
    """``max(x, 0)``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class LeakyRelu(Module):
    """``x`` where positive, ``negative_slope * x`` elsewhere."""

    negative_slope: float = 0.01

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


class LeakyReluConfig(Config):
    negative_slope: float = 0.01

    def init(self, device: Device | None = None) -> LeakyRelu:
        return LeakyRelu(self.negative_slope)


class Gelu(Module):
    """Gaussian error linear unit; ``approximate="tanh"`` for the tanh form."""

    approximate: str = "none"

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class SiLU(Module):
    """``x * sigmoid(x)`` (swish)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Softplus(Module):
    beta: float = 1.0
    threshold: float = 20.0

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)


class Elu(Module):
    alpha: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)


class Selu(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x)


class Celu(Module):
    alpha: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)


class Mish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class HardSigmoid(Module):
    """``clamp(alpha * x + beta, 0, 1)``; Burn's defaults (0.2, 0.5). PyTorch's
    ``nn.Hardsigmoid`` is ``HardSigmoid(alpha=1/6, beta=0.5)``."""

    alpha: float = 0.2
    beta: float = 0.5

    def forward(self, x: Tensor) -> Tensor:
        return F.hard_sigmoid(x, self.alpha, self.beta)


class HardSwish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.hard_swish(x)


class Glu(Module):
    """``a * sigmoid(b)`` with ``a, b`` the halves of the input along ``dim``."""

    dim: int = -1

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)


class PReluConfig(Config):
    """A learned leaky slope: one per channel (``num_parameters``) or shared (1)."""

    num_parameters: int = 1
    alpha: float = 0.25

    def validate(self) -> None:
        if self.num_parameters <= 0:
            raise ConfigError(f"ember: PReluConfig: num_parameters must be > 0, got {self.num_parameters}")

    def init(self, device: Device | None = None) -> PRelu:
        return PRelu(alpha=Param.from_tensor(Tensor.full([self.num_parameters], self.alpha, device=device)))


class PRelu(Module):
    alpha: Param

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.alpha.val())


class SwiGluConfig(Config):
    """``silu(x W_gate + b) * (x W_up + b)`` (Burn's ``SwiGlu``)."""

    d_input: int
    d_output: int
    bias: bool = False

    def init(self, device: Device | None = None) -> SwiGlu:
        return SwiGlu(
            linear_inner=LinearConfig(self.d_input, self.d_output, bias=self.bias).init(device),
            linear_outer=LinearConfig(self.d_input, self.d_output, bias=self.bias).init(device),
        )


class SwiGlu(Module):
    linear_inner: Linear
    linear_outer: Linear

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.linear_inner(x)).mul(self.linear_outer(x))


class Softsign(Module):
    """``x / (1 + |x|)``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.softsign(x)


class Tanhshrink(Module):
    """``x - tanh(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.tanhshrink(x)


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``."""

    threshold: float
    value: float

    def forward(self, x: Tensor) -> Tensor:
        return F.threshold(x, self.threshold, self.value)


class ThresholdedRelu(Module):
    """``x`` where ``x > alpha``, else 0."""

    alpha: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return F.thresholded_relu(x, self.alpha)


class QuickGelu(Module):
    """``x * sigmoid(1.702 x)``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.quick_gelu(x)

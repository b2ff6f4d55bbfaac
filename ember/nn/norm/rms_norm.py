"""``RmsNorm``: scaling by the root mean square over the last dim."""

from __future__ import annotations

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, Param
from ember.nn.init import Ones
from ember.tensor import Tensor, autocast
from ember.tensor.norm import rms_norm

_HALF = (DType.FLOAT16, DType.BFLOAT16)


class RmsNormConfig(Config):
    """Configuration of :class:`RmsNorm`.

    >>> RmsNormConfig(8).init()(Tensor.ones([2, 8])).dims()
    [2, 8]
    """

    d_model: int
    epsilon: float = 1e-5

    def validate(self) -> None:
        if self.d_model <= 0:
            raise ConfigError(f"ember: RmsNormConfig: d_model must be > 0, got {self.d_model}")
        if self.epsilon <= 0:
            raise ConfigError(f"ember: RmsNormConfig: epsilon must be > 0, got {self.epsilon}")

    def init(self, device: Device | None = None) -> RmsNorm:
        return RmsNorm(gamma=Ones().lazy((self.d_model,), device=device or Device.default()), epsilon=self.epsilon)


class RmsNorm(Module):
    """``x / sqrt(mean(x^2) + epsilon) * gamma`` over the last dim. A float16 or
    bfloat16 input is normalised in float32 and rounded back before the scale (as
    PyTorch's ``rms_norm`` and Hugging Face's ``LlamaRMSNorm``), so the output keeps
    the input's dtype."""

    pytorch_names = {"weight": "gamma"}  # PyTorch calls the scale and shift weight and bias

    gamma: Param
    epsilon: float = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        d_model = self.gamma.lazy_shape()[0]
        if x.rank < 1 or x.dims()[-1] != d_model:
            raise ShapeError(f"ember: RmsNorm: the input's last dim must be d_model={d_model}, got shape {x.dims()}")
        x = x.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("rms_norm", x)
        dtype = x.dtype
        if dtype in _HALF:
            x = x.cast(DType.FLOAT32)
        if dtype not in _HALF:  # one fused op (a row kernel where the device has one)
            return rms_norm(x, self.gamma.val(), self.epsilon)
        rms = x.mul(x).mean_dim(-1).add_scalar(self.epsilon).rsqrt()
        return x.mul(rms).cast(dtype).mul(self.gamma.val())

    def extra_repr(self) -> str:
        return f"d_model: {self.gamma.lazy_shape()[0]}, epsilon: {self.epsilon}"

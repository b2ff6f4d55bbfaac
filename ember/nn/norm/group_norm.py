"""``GroupNorm``: normalisation over groups of channels."""

from __future__ import annotations

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, Param
from ember.nn.init import Ones, Zeros
from ember.tensor import Tensor, autocast


class GroupNormConfig(Config):
    """Configuration of :class:`GroupNorm`: ``num_channels`` split into ``num_groups``.

    >>> GroupNormConfig(2, 6).init()(Tensor.ones([3, 6, 4])).dims()
    [3, 6, 4]
    """

    num_groups: int
    num_channels: int
    epsilon: float = 1e-5
    affine: bool = True

    def validate(self) -> None:
        if self.num_groups <= 0 or self.num_channels <= 0:
            raise ConfigError(
                f"ember: GroupNormConfig: num_groups and num_channels must be > 0, got {self.num_groups}, "
                f"{self.num_channels}"
            )
        if self.num_channels % self.num_groups:
            raise ConfigError(
                f"ember: GroupNormConfig: num_channels={self.num_channels} must be divisible by "
                f"num_groups={self.num_groups}"
            )
        if self.epsilon <= 0:
            raise ConfigError(f"ember: GroupNormConfig: epsilon must be > 0, got {self.epsilon}")

    def init(self, device: Device | None = None) -> GroupNorm:
        device = device or Device.default()
        shape = (self.num_channels,)
        gamma = Ones().lazy(shape, device=device) if self.affine else None
        beta = Zeros().lazy(shape, device=device) if self.affine else None
        return GroupNorm(
            gamma=gamma, beta=beta, num_groups=self.num_groups, num_channels=self.num_channels, epsilon=self.epsilon
        )


class GroupNorm(Module):
    """Normalises ``[batch, channels, ...]`` over each group of channels and all
    trailing dims; ``gamma``/``beta`` (per channel) when affine."""

    pytorch_names = {"weight": "gamma", "bias": "beta"}  # PyTorch calls the scale and shift weight and bias

    gamma: Param | None
    beta: Param | None
    num_groups: int
    num_channels: int
    epsilon: float = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        g, c = self.num_groups, self.num_channels
        if x.rank < 2 or x.dims()[1] != c:
            raise ShapeError(f"ember: GroupNorm: the input must be [batch, {c}, ...], got shape {x.dims()}")
        x = x.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("group_norm", x)
        shape = x.dims()
        grouped = x.reshape([shape[0], g, -1])
        mean = grouped.mean_dim(2)
        centered = grouped.sub(mean)
        var = centered.mul(centered).mean_dim(2)
        out = centered.mul(var.add_scalar(self.epsilon).rsqrt()).reshape(shape)
        affine = [1, c] + [1] * (x.rank - 2)
        if self.gamma is not None:
            out = out.mul(self.gamma.val().reshape(affine))
        if self.beta is not None:
            out = out.add(self.beta.val().reshape(affine))
        return out

    def extra_repr(self) -> str:
        return (
            f"num_groups: {self.num_groups}, num_channels: {self.num_channels}, epsilon: {self.epsilon}, "
            f"affine: {self.gamma is not None}"
        )

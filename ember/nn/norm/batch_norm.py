"""``BatchNorm``: normalisation by per-channel batch statistics, with running
averages for inference."""

from __future__ import annotations

import numpy as np

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, Param, RunningState
from ember.nn.init import Ones, Zeros
from ember.tensor import Tensor


class BatchNormConfig(Config):
    """Configuration of :class:`BatchNorm` over ``num_features`` channels (dim 1).

    >>> BatchNormConfig(16).init().running_var.value().dims()
    [16]
    """

    num_features: int
    epsilon: float = 1e-5
    momentum: float = 0.1

    def validate(self) -> None:
        if self.num_features <= 0:
            raise ConfigError(f"ember: BatchNormConfig: num_features must be > 0, got {self.num_features}")
        if self.epsilon <= 0:
            raise ConfigError(f"ember: BatchNormConfig: epsilon must be > 0, got {self.epsilon}")
        if not 0.0 <= self.momentum <= 1.0:
            raise ConfigError(f"ember: BatchNormConfig: momentum must lie in [0, 1], got {self.momentum}")

    def init(self, device: Device | None = None) -> BatchNorm:
        device = device or Device.default()
        shape = (self.num_features,)
        return BatchNorm(
            gamma=Ones().lazy(shape, device=device),
            beta=Zeros().lazy(shape, device=device),
            running_mean=RunningState(Tensor.zeros(shape, device=device)),
            running_var=RunningState(Tensor.ones(shape, device=device)),
            momentum=self.momentum,
            epsilon=self.epsilon,
        )


class BatchNorm(Module):
    """Batch normalisation of ``[batch, channels, ...]`` (any rank >= 2).

    On an autodiff device (training) it normalises with the batch's statistics and
    moves the running averages by ``momentum`` (the variance's unbiased estimate, as
    PyTorch); elsewhere (after ``model.valid()``) it uses the running averages.
    """

    pytorch_names = {"weight": "gamma", "bias": "beta"}  # PyTorch calls the scale and shift weight and bias

    gamma: Param
    beta: Param
    running_mean: RunningState
    running_var: RunningState
    momentum: float = 0.1
    epsilon: float = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        channels = self.gamma.lazy_shape()[0]
        if x.rank < 2 or x.dims()[1] != channels:
            raise ShapeError(
                f"ember: BatchNorm: the input must be [batch, {channels}, ...] (channels at dim 1), got shape {x.dims()}"
            )
        x = x.float()
        stat_shape = [1, channels] + [1] * (x.rank - 2)
        dims = [0] + list(range(2, x.rank))
        if x.device.is_autodiff():
            count = x.num_elements() // channels
            if count < 2:
                raise ShapeError(
                    f"ember: BatchNorm: training needs more than one value per channel, got input shape {x.dims()}; "
                    "use a larger batch, or call model.valid() to use the running statistics"
                )
            mean = x.mean_dims(dims)
            centered = x.sub(mean)
            var = centered.mul(centered).mean_dims(dims)
            self._update(mean.detach().reshape([channels]), var.detach().reshape([channels]), count, x.device)
        else:
            mean = self.running_mean.value().to_device(x.device).reshape(stat_shape)
            var = self.running_var.value().to_device(x.device).reshape(stat_shape)
            centered = x.sub(mean)
        scale = var.add_scalar(self.epsilon).rsqrt().mul(self.gamma.val().reshape(stat_shape))
        return centered.mul(scale).add(self.beta.val().reshape(stat_shape))

    def _update(self, mean: Tensor, var: Tensor, count: int, device: Device) -> None:
        m = self.momentum
        unbiased = var.mul_scalar(count / (count - 1))
        old_mean = self.running_mean.value().to_device(device)
        old_var = self.running_var.value().to_device(device)
        self.running_mean.update(old_mean.mul_scalar(1.0 - m).add(mean.mul_scalar(m)))
        self.running_var.update(old_var.mul_scalar(1.0 - m).add(unbiased.mul_scalar(m)))

    def export_pytorch_extra(self) -> dict[str, np.ndarray]:
        """PyTorch's step counter ``num_batches_tracked`` (int64), which ember does not
        keep, written as 0 (it matters to PyTorch only with ``momentum=None``)."""
        return {"num_batches_tracked": np.zeros((), np.int64)}

    def extra_repr(self) -> str:
        return f"num_features: {self.gamma.lazy_shape()[0]}, momentum: {self.momentum}, epsilon: {self.epsilon}"

"""Parameter initializers, with Burn's fan-in/fan-out rules.

Each initializer is a (frozen) config: it serialises with the layer config that
holds it. ``init_with(shape, fan_in, fan_out, device)`` draws a tensor with the
device's generator now; ``lazy(...)`` returns an uninitialised :class:`Param` that
takes a key from the generator now and draws through it at first use (see
:class:`Param`): every draw an initializer makes, however many, comes from that
key's stream, so layers initialise the same whatever the order of first use, later
seeds or the device they are moved to.

>>> from ember import Device
>>> KaimingUniform(gain=1 / 3**0.5).init_with([4, 16], fan_in=4, device=Device.flex()).dims()
[4, 16]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError
from ember.module.config import Config
from ember.module.param import Param, ParamId
from ember.tensor import Distribution, Tensor


def _fan(name: str, fan_in: int | None, fan_out: int | None, fan_out_only: bool) -> int:
    fan = fan_out if fan_out_only else fan_in
    if fan is None:
        which = "fan_out" if fan_out_only else "fan_in"
        raise ConfigError(f"ember: {name} needs {which}; call init_with(shape, fan_in=..., fan_out=...)")
    return fan


class Initializer(Config):
    """Base class: subclasses implement :meth:`init_with`."""

    def init_with(
        self,
        shape: Any,
        fan_in: int | None = None,
        fan_out: int | None = None,
        device: Device | None = None,
        dtype: DType | str = DType.FLOAT32,
    ) -> Tensor:
        raise NotImplementedError

    def init(self, shape: Any, device: Device | None = None, dtype: DType | str = DType.FLOAT32) -> Tensor:
        """A tensor for initializers that need no fan (Constant, Uniform, Normal, ...)."""
        return self.init_with(shape, None, None, device, dtype)

    def lazy(
        self,
        shape: Any,
        fan_in: int | None = None,
        fan_out: int | None = None,
        device: Device | None = None,
        require_grad: bool = True,
        dtype: DType | str = DType.FLOAT32,
    ) -> Param:
        """An uninitialised parameter: its key is taken from ``device``'s generator now,
        the draw happens at its first ``val()``, from that key's stream."""
        device = device or Device.default()
        shape = tuple(shape)
        self._check_fans(fan_in, fan_out)

        def make(dev: Device, _require_grad: bool) -> Tensor:
            return self.init_with(shape, fan_in, fan_out, dev, dtype)

        return Param.uninitialized(ParamId(), make, device, require_grad, shape, DType.parse(dtype))

    def _check_fans(self, fan_in: int | None, fan_out: int | None) -> None:
        """Raise early (at layer init, not first use) for a missing fan."""


class Constant(Initializer):
    """Every value ``value``."""

    value: float

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        return Tensor.full(shape, float(self.value), device=device, dtype=dtype)


class Ones(Initializer):
    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        return Tensor.ones(shape, device=device, dtype=dtype)


class Zeros(Initializer):
    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        return Tensor.zeros(shape, device=device, dtype=dtype)


class Uniform(Initializer):
    """Uniform on ``[min, max)``."""

    min: float
    max: float

    def validate(self) -> None:
        if not self.min <= self.max:
            raise ConfigError(f"ember: Uniform: min {self.min} must be <= max {self.max}")

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        return Tensor.random(shape, Distribution.uniform(self.min, self.max), device=device, dtype=dtype)


class Normal(Initializer):
    """Normal with ``mean`` and ``std``."""

    mean: float
    std: float

    def validate(self) -> None:
        if self.std < 0:
            raise ConfigError(f"ember: Normal: std must be >= 0, got {self.std}")

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        return Tensor.random(shape, Distribution.normal(self.mean, self.std), device=device, dtype=dtype)


class KaimingUniform(Initializer):
    """Uniform on ``[-a, a]`` with ``a = gain * sqrt(3 / fan)`` (``fan`` = fan_in, or
    fan_out when ``fan_out_only``). ``gain = 1/sqrt(3)`` matches PyTorch's Linear."""

    gain: float = 1.0
    fan_out_only: bool = False

    def _check_fans(self, fan_in, fan_out) -> None:
        _fan("KaimingUniform", fan_in, fan_out, self.fan_out_only)

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        fan = _fan("KaimingUniform", fan_in, fan_out, self.fan_out_only)
        bound = math.sqrt(3.0) * self.gain / math.sqrt(fan)
        return Tensor.random(shape, Distribution.uniform(-bound, bound), device=device, dtype=dtype)


class KaimingNormal(Initializer):
    """Normal with ``std = gain / sqrt(fan)``."""

    gain: float = 1.0
    fan_out_only: bool = False

    def _check_fans(self, fan_in, fan_out) -> None:
        _fan("KaimingNormal", fan_in, fan_out, self.fan_out_only)

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        fan = _fan("KaimingNormal", fan_in, fan_out, self.fan_out_only)
        std = self.gain / math.sqrt(fan)
        return Tensor.random(shape, Distribution.normal(0.0, std), device=device, dtype=dtype)


def _xavier_std(name: str, fan_in: int | None, fan_out: int | None) -> float:
    if fan_in is None or fan_out is None:
        raise ConfigError(f"ember: {name} needs fan_in and fan_out; call init_with(shape, fan_in=..., fan_out=...)")
    return math.sqrt(2.0 / (fan_in + fan_out))


class XavierUniform(Initializer):
    """Uniform on ``[-a, a]`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""

    gain: float = 1.0

    def _check_fans(self, fan_in, fan_out) -> None:
        _xavier_std("XavierUniform", fan_in, fan_out)

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        bound = math.sqrt(3.0) * self.gain * _xavier_std("XavierUniform", fan_in, fan_out)
        return Tensor.random(shape, Distribution.uniform(-bound, bound), device=device, dtype=dtype)


class XavierNormal(Initializer):
    """Normal with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""

    gain: float = 1.0

    def _check_fans(self, fan_in, fan_out) -> None:
        _xavier_std("XavierNormal", fan_in, fan_out)

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        std = self.gain * _xavier_std("XavierNormal", fan_in, fan_out)
        return Tensor.random(shape, Distribution.normal(0.0, std), device=device, dtype=dtype)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times ``gain``: the Q of a QR decomposition of a
    normal draw, signs fixed by R's diagonal. Dims after the first are flattened."""

    gain: float = 1.0

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        shape = tuple(shape)
        if len(shape) < 2:
            raise ConfigError(f"ember: Orthogonal needs a shape of rank >= 2, got {list(shape)}")
        rows, cols = shape[0], int(np.prod(shape[1:]))
        # Drawn in float32 (every backend has it) with the device's generator; QR on the host.
        draw = Tensor.random([rows, cols], Distribution.normal(0.0, 1.0), device=device, dtype=DType.FLOAT32)
        matrix = draw.to_numpy().astype(np.float64)
        if rows < cols:
            matrix = matrix.T
        q, r = np.linalg.qr(matrix)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        values = (q * self.gain).reshape(shape)
        return Tensor.from_data(values, device=draw.device, dtype=dtype)

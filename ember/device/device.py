"""``Device``: which backend stack runs a tensor's ops.

A tensor carries a device, never a backend type. The device owns its backend
instance (and its caches) and its random generator (shared with its autodiff
wrapper); devices are interned, so two calls of ``Device.flex()`` give the same
object, and equal devices share their state.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Any

from ember.backend.base import Backend
from ember.device.generator import DeviceGenerator
from ember.errors import BackendUnavailableError, DeviceError

if TYPE_CHECKING:
    from ember.backend.autodiff.checkpoint import Checkpointing


class DeviceKind(Enum):
    """Which adapter a GPU device asks for (Burn's ``DeviceKind``)."""

    DEFAULT = "DefaultDevice"
    DISCRETE = "DiscreteGpu"
    INTEGRATED = "IntegratedGpu"
    CPU = "Cpu"

    def __repr__(self) -> str:
        return f"DeviceKind.{self.name}"


class Device:
    """A device: the backend stack that runs ops on the tensors that live on it.

    >>> from ember import Device
    >>> Device.flex()
    Device<Flex(Cpu)>
    >>> Device.flex().autodiff()
    Device<Autodiff { device: Flex(Cpu), checkpointing: Disabled }>
    """

    __slots__ = ("_backend", "_key", "_hash", "_inner", "_body", "_fused", "_rng", "__weakref__")

    _interned: dict[tuple, Device] = {}
    _intern_lock = threading.RLock()
    _priority: list[str] = ["flex"]

    def __init__(
        self, backend: Backend, key: tuple, body: str, inner: Device | None = None, fused: Device | None = None
    ):
        self._backend = backend
        self._key = key
        self._hash = hash(key)  # devices key compiled-function guards: hashed per call
        self._body = body
        self._inner = inner  # the device an autodiff device wraps
        self._fused = fused  # the device a fusion device wraps
        # One generator for a device and the autodiff and fusion devices stacked on it.
        wrapped = inner if inner is not None else fused
        self._rng: DeviceGenerator = wrapped._rng if wrapped is not None else DeviceGenerator()

    @classmethod
    def _intern(cls, key: tuple, make: Callable[[], Device]) -> Device:
        device = cls._interned.get(key)
        if device is None:
            with cls._intern_lock:  # two threads asking at once get one device
                device = cls._interned.get(key)
                if device is None:
                    device = cls._interned[key] = make()
        return device

    # ------------------------------------------------------------------ constructors
    @classmethod
    def flex(cls) -> Device:
        """The eager CPU backend."""

        def make() -> Device:
            from ember.backend.flex import FlexBackend

            return Device(FlexBackend(), ("flex",), "Flex(Cpu)")

        return cls._intern(("flex",), make)

    @classmethod
    def wgpu(cls, kind: DeviceKind = DeviceKind.DEFAULT) -> Device:
        """The GPU backend through wgpu, on the best native API (Metal, Vulkan, DX12)."""
        return cls._cube("wgpu", kind)

    @classmethod
    def vulkan(cls, kind: DeviceKind = DeviceKind.DEFAULT) -> Device:
        """The GPU backend pinned to Vulkan."""
        return cls._cube("vulkan", kind)

    @classmethod
    def metal(cls, kind: DeviceKind = DeviceKind.DEFAULT) -> Device:
        """The GPU backend pinned to Metal."""
        return cls._cube("metal", kind)

    @classmethod
    def cuda(cls, index: int = 0) -> Device:
        """An NVIDIA GPU through CUDA (Burn's ``Cuda`` runtime of the cube backend):
        generated CUDA C kernels compiled by NVRTC, cuBLAS for matmuls. Needs the
        ``cuda12``/``cuda13`` extra and a driver; raises
        :class:`~ember.errors.BackendUnavailableError` naming the fix otherwise.

        >>> Device.cuda(0)  # doctest: +SKIP
        Device<Cube(Cuda(CudaDevice { index: 0 }))>
        """
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise DeviceError(f"ember: Device.cuda(index): index must be a non-negative int, got {index!r}")

        def make() -> Device:
            from ember.backend.cuda.device import make_cuda_backend

            backend, body = make_cuda_backend(index)
            return Device(backend, ("cuda", index), body)

        return cls._intern(("cuda", index), make)

    @classmethod
    def _cube(cls, api: str, kind: DeviceKind) -> Device:
        if not isinstance(kind, DeviceKind):
            raise DeviceError(f"ember: Device.{api}(kind): kind must be a DeviceKind, got {kind!r}")
        try:
            from ember.backend.cube.device import make_cube_backend
        except ImportError as error:  # pragma: no cover - depends on the install
            raise BackendUnavailableError(
                f"ember: Device.{api}() needs the GPU backend's dependency: pip install wgpu ({error})"
            ) from None

        def make() -> Device:
            backend, body = make_cube_backend(api, kind.value)
            return Device(backend, ("cube", api, kind), body)

        return cls._intern(("cube", api, kind), make)

    @classmethod
    def default(cls) -> Device:
        """The default device: ``EMBER_DEVICE`` if set (``flex``, ``wgpu``, ``vulkan``,
        ``metal``, ``cuda``, optionally ``+autodiff``), else the first available entry of the
        priority list (see :meth:`set_default_priority`)."""
        spec = os.environ.get("EMBER_DEVICE", "").strip()
        if spec:
            return cls.parse(spec)
        errors = []
        for name in cls._priority:
            try:
                return cls.parse(name)
            except BackendUnavailableError as error:
                errors.append(str(error))
        raise BackendUnavailableError("ember: no device of the priority list is available: " + "; ".join(errors))

    @classmethod
    def set_default_priority(cls, names: Sequence[str]) -> None:
        """The devices ``Device.default()`` tries in order, e.g. ``["wgpu", "flex"]``."""
        names = list(names)
        if not names:
            raise DeviceError("ember: the default device priority list must not be empty")
        for name in names:
            cls._check_spec(name)
        cls._priority = names

    @classmethod
    def default_priority(cls) -> list[str]:
        return list(cls._priority)

    @classmethod
    def parse(cls, spec: str) -> Device:
        """A device from text: ``flex``, ``wgpu``, ``vulkan:discrete``, ``flex+autodiff``."""
        base, _, suffix = spec.strip().lower().partition("+")
        cls._check_spec(spec)
        name, _, kind_text = base.partition(":")
        if name == "flex":
            device = cls.flex()
        elif name == "cuda":
            device = cls.cuda(int(kind_text) if kind_text else 0)
        else:
            kind = DeviceKind[kind_text.upper()] if kind_text else DeviceKind.DEFAULT
            device = getattr(cls, name)(kind)
        if suffix == "fusion" or suffix.startswith("fusion+"):
            device = device.fusion()
            suffix = suffix[len("fusion+") :] if suffix.startswith("fusion+") else ""
        if not suffix:
            return device
        from ember.backend.autodiff.checkpoint import Checkpointing

        balanced = suffix.endswith(":balanced")
        return device.autodiff(Checkpointing.BALANCED if balanced else Checkpointing.DISABLED)

    @staticmethod
    def _check_spec(spec: str) -> None:
        base, _, suffix = spec.strip().lower().partition("+")
        name, _, kind = base.partition(":")
        kinds = {k.name.lower() for k in DeviceKind}
        if suffix == "fusion" or suffix.startswith("fusion+"):
            suffix = suffix[len("fusion+") :] if suffix.startswith("fusion+") else ""
        if name == "cuda" and (not kind or kind.isdigit()):
            kind = ""
        if (
            name not in ("flex", "wgpu", "vulkan", "metal", "cuda")
            or (kind and (name == "flex" or kind not in kinds))
            or suffix not in ("", "autodiff", "autodiff:balanced", "autodiff:disabled")
        ):
            raise DeviceError(
                f"ember: cannot read the device {spec!r}; write flex, wgpu, vulkan or metal, "
                "optionally with :default/:discrete/:integrated/:cpu, or cuda[:index], +fusion and +autodiff "
                "(e.g. EMBER_DEVICE=wgpu:discrete+fusion+autodiff)"
            )

    # ------------------------------------------------------------------ autodiff
    def autodiff(self, checkpointing: Checkpointing | None = None) -> Device:
        """This device with reverse-mode autodiff (Burn's ``Autodiff<B>``)."""
        from ember.backend.autodiff.checkpoint import Checkpointing

        if checkpointing is None:
            checkpointing = Checkpointing.DISABLED
        if not isinstance(checkpointing, Checkpointing):
            raise DeviceError(f"ember: Device.autodiff(checkpointing=...) takes a Checkpointing, got {checkpointing!r}")
        if self._inner is not None:
            raise DeviceError(
                f"ember: {self!r} is already an autodiff device; call .autodiff() once "
                "(use .inner() to get the device it wraps)"
            )

        def make() -> Device:
            from ember.backend.autodiff import AutodiffBackend

            body = f"Autodiff {{ device: {self._body}, checkpointing: {checkpointing.label} }}"
            return Device(
                AutodiffBackend(self._backend, checkpointing), self._key + ("autodiff", checkpointing), body, self
            )

        return self._intern(self._key + ("autodiff", checkpointing), make)

    # ------------------------------------------------------------------ fusion
    def fusion(self) -> Device:
        """This device with lazy fusion (Burn's ``Fusion<B>``): ops are recorded and run
        as fused kernels at sync points. Stack autodiff on top:
        ``Device.flex().fusion().autodiff()``.

        >>> Device.flex().fusion()
        Device<Fusion { device: Flex(Cpu) }>
        """
        if self._inner is not None:
            raise DeviceError(
                f"ember: {self!r} is an autodiff device; fusion goes below autodiff: "
                "write device.inner().fusion().autodiff()"
            )
        if self._fused is not None:
            raise DeviceError(f"ember: {self!r} is already a fusion device; call .fusion() once")

        def make() -> Device:
            from ember.backend.fusion import FusionBackend

            return Device(
                FusionBackend(self._backend), self._key + ("fusion",), f"Fusion {{ device: {self._body} }}", fused=self
            )

        return self._intern(self._key + ("fusion",), make)

    def is_fusion(self) -> bool:
        """Whether ops on this device (or on the device its autodiff wraps) are fused."""
        return self.inner()._fused is not None

    def base(self) -> Device:
        """The device that runs the kernels: without autodiff and fusion."""
        device = self.inner()
        return device._fused if device._fused is not None else device

    def wrappers(self) -> list[Device]:
        """The devices created so far that wrap this one (its autodiff and fusion devices)."""
        return [d for d in Device._interned.values() if d._inner is self or d._fused is self]

    def inner(self) -> Device:
        """The device an autodiff device wraps (itself for a plain device)."""
        return self._inner if self._inner is not None else self

    def is_autodiff(self) -> bool:
        return self._inner is not None

    @property
    def checkpointing(self) -> Checkpointing | None:
        """The autodiff device's checkpointing strategy (``None`` for a plain device)."""
        return getattr(self._backend, "checkpointing", None)

    # ------------------------------------------------------------------ state
    @property
    def backend(self) -> Backend:
        """The backend instance that runs this device's ops."""
        return self._backend

    @property
    def backend_name(self) -> str:
        return self.base()._backend.name

    def seed(self, seed: int) -> None:
        """Seed this device's generator (shared with its autodiff wrapper): Philox4x32-10
        keyed by ``seed``, the same stream on every backend. Inside :meth:`fork_rng`
        it seeds the calling thread's fork instead."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise DeviceError(f"ember: Device.seed takes an int, got {seed!r}")
        self._rng.check("seed")
        self._rng.current().reseed(seed & 0xFFFF_FFFF_FFFF_FFFF)

    def sync(self) -> None:
        """Wait until every op queued on this device has finished."""
        self.inner()._backend.sync()

    def rng_state(self) -> dict[str, Any]:
        """The generator state (``{"algorithm", "seed", "offset"}``, JSON-friendly), to
        save in a checkpoint; any backend's device accepts it."""
        self._rng.check("rng_state")
        return self._rng.current().state()

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`rng_state`: the following draws repeat bit for bit."""
        self._rng.check("set_rng_state")
        self._rng.current().restore(state)

    @contextmanager
    def fork_rng(self, seed: int | None = None) -> Iterator[None]:
        """A scoped generator: inside the ``with`` block, draws on *this thread* from
        this device come from a new stream seeded with ``seed`` (or, when ``seed`` is
        None, with a key drawn from the current stream); the device's own stream does
        not move, and other threads do not see the fork.

        >>> from ember import Device, Tensor
        >>> with Device.flex().fork_rng(7):
        ...     a = Tensor.random([3])
        >>> with Device.flex().fork_rng(7):
        ...     b = Tensor.random([3])
        >>> a.equal(b).all().into_scalar()
        True
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise DeviceError(f"ember: Device.fork_rng takes an int seed or None, got {seed!r}")
        with self._rng.fork(None if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF):
            yield

    # ------------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Device) and self._key == other._key)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Device<{self._body}>"

    def spec(self) -> str:
        """Text that :meth:`parse` turns back into this device, e.g. ``flex+autodiff``."""
        if self._inner is not None:
            checkpointing = self.checkpointing
            assert checkpointing is not None  # an autodiff device's backend has a strategy
            suffix = "+autodiff" + (":balanced" if checkpointing.label == "Balanced" else "")
            return self._inner.spec() + suffix
        if self._fused is not None:
            return self._fused.spec() + "+fusion"
        if self._key[0] == "flex":
            return "flex"
        if self._key[0] == "cuda":
            return f"cuda:{self._key[1]}"
        _, api, kind = self._key
        return f"{api}:{kind.name.lower()}"

    def __reduce__(self):
        return (Device.parse, (self.spec(),))

"""``Param``, ``ParamId`` and ``RunningState``: the leaves of a module tree."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ModuleError
from ember.tensor import Shape, Tensor
from ember.tensor.capture_hook import current_capture
from ember.tensor.checks import COMPLEX_NP, FLOAT_NP, NP_TO_DTYPE

_TRAINABLE_NP = FLOAT_NP | COMPLEX_NP  # the dtypes a parameter can be trained in

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol


class ParamId(int):
    """A parameter's identity: a random 64-bit value, kept across maps and saves.

    The optimizer keys its per-parameter state by it. (An ``int`` underneath, so that
    dictionaries keyed by ids hash at C speed.)
    """

    __slots__ = ()

    def __new__(cls, value: int | None = None) -> ParamId:
        return int.__new__(cls, secrets.randbits(64) if value is None else int(value) & 0xFFFF_FFFF_FFFF_FFFF)

    @property
    def value(self) -> int:
        return int(self)

    @staticmethod
    def new() -> ParamId:
        return ParamId()

    @staticmethod
    def parse(text: str | int) -> ParamId:
        """From :meth:`serialize`'s text (or an int)."""
        return ParamId(int(text, 16) if isinstance(text, str) else text)

    def serialize(self) -> str:
        return f"{int(self):016x}"

    def __repr__(self) -> str:
        return f"ParamId({self.serialize()})"


def _prepare(tensor: Tensor, require_grad: bool) -> Tensor:
    """A parameter value is a leaf: tracked when it requires grad on an autodiff device."""
    if not isinstance(tensor, Tensor):
        raise ModuleError(f"ember: Param: expected a Tensor, got {type(tensor).__name__}")
    device = tensor._device
    if device._inner is not None:  # an autodiff device: a fresh leaf (or untracked)
        backend = cast("AutodiffProtocol", device._backend)
        prim = tensor._primitive
        if require_grad and prim.dtype in _TRAINABLE_NP:
            return Tensor(backend.leaf(backend.unwrap(prim)), device)
        return Tensor(backend.detach(prim), device)
    return tensor


class Param:
    """A module parameter: a tensor with a stable :class:`ParamId`, a
    ``require_grad`` flag and optional lazy initialisation.

    A lazy parameter takes a 64-bit random *key* from its device's generator when it
    is created; its first :meth:`val` runs the initializer inside a generator forked
    at that key. Its values therefore depend only on the seed and the order in which
    parameters were *created*: not on the order they are read, on seeds set later, or
    on the device they are moved to before first use (every backend draws the same
    Philox numbers).

    >>> from ember import Tensor
    >>> p = Param.from_tensor(Tensor.zeros([2, 3]))
    >>> p.val().dims(), p.lazy_shape()
    ([2, 3], Shape([2, 3]))
    """

    __slots__ = ("id", "require_grad", "_value", "_init", "_shape", "_device", "_dtype", "_key")
    id: ParamId
    require_grad: bool
    _value: Tensor | None  # None until a lazy parameter's first val()
    _init: Callable[[Device, bool], Tensor] | None  # set exactly while _value is None
    _shape: tuple[int, ...]
    _device: Device
    _dtype: DType
    _key: int | None

    def __init__(self, param_id: ParamId, value: Tensor, require_grad: bool = True):
        self.id = param_id
        self.require_grad = require_grad = bool(require_grad)
        self._value = value = _prepare(value, require_grad)
        self._init = None
        self._key = None
        prim = value._primitive
        self._shape = prim.shape
        self._device = value._device
        self._dtype = NP_TO_DTYPE[prim.dtype]

    @staticmethod
    def from_tensor(tensor: Tensor, require_grad: bool | None = None) -> Param:
        """A parameter with a new id; float and complex tensors require grad unless told otherwise."""
        if require_grad is None:
            require_grad = isinstance(tensor, Tensor) and (tensor.is_float() or tensor.is_complex())
        return Param(ParamId(), tensor, require_grad)

    @staticmethod
    def from_mapped_value(param_id: ParamId, tensor: Tensor, require_grad: bool = True) -> Param:
        """A parameter with an existing id and a new value (what optimizers return)."""
        return Param(param_id, tensor, require_grad)

    @staticmethod
    def from_inner_value(param_id: ParamId, value: Tensor, device: Device, require_grad: bool = True) -> Param:
        """A parameter on ``device`` from a value on its inner device (what an optimizer
        computes): the autodiff leaf is made directly, without an intermediate copy."""
        if device._inner is None or value._device is not device._inner:
            return Param(param_id, value.to_device(device), require_grad)
        prim = value._primitive
        backend: AutodiffProtocol = device._backend  # type: ignore[assignment]  # device is an autodiff device
        leaf = backend.leaf(prim) if require_grad and prim.dtype in _TRAINABLE_NP else backend.wrap(prim)
        param = Param.__new__(Param)
        param.id = param_id
        param.require_grad = bool(require_grad)
        param._value = Tensor(leaf, device)
        param._init = None
        param._key = None
        param._shape = prim.shape
        param._device = device
        param._dtype = NP_TO_DTYPE[prim.dtype]
        return param

    @staticmethod
    def from_tracked_value(param_id: ParamId, tensor: Tensor, require_grad: bool = True) -> Param:
        """A parameter holding ``tensor`` as it is, its graph included (not a fresh leaf),
        as functional transforms (``ember.func``) build them: a function of the new
        module stays differentiable with respect to whatever ``tensor`` came from."""
        if not isinstance(tensor, Tensor):
            raise ModuleError(f"ember: Param: expected a Tensor, got {type(tensor).__name__}")
        prim = tensor._primitive
        param = Param.__new__(Param)
        param.id = param_id
        param.require_grad = bool(require_grad)
        param._value = tensor
        param._init = None
        param._shape = prim.shape
        param._device = tensor._device
        param._dtype = NP_TO_DTYPE[prim.dtype]
        return param

    @staticmethod
    def uninitialized(
        param_id: ParamId,
        init: Callable[[Device, bool], Tensor],
        device: Device,
        require_grad: bool,
        shape: Any,
        dtype: DType = DType.FLOAT32,
        key: int | None = None,
    ) -> Param:
        """A lazily initialised parameter: ``init(device, require_grad)`` runs at the
        first :meth:`val`, drawing from a generator forked at ``key`` (by default a key
        taken from ``device``'s generator now); shape, device and dtype are known
        without allocating."""
        if not isinstance(device, Device):
            raise ModuleError(f"ember: Param.uninitialized: expected a Device, got {device!r}")
        param = Param.__new__(Param)
        param.id = param_id
        param.require_grad = bool(require_grad)
        param._value = None
        param._init = init
        param._shape = tuple(int(d) for d in shape)
        param._device = device
        param._dtype = DType.parse(dtype)
        param._key = device._rng.current().next_key() if key is None else int(key) & 0xFFFF_FFFF_FFFF_FFFF
        return param

    def val(self) -> Tensor:
        """The value (initialising a lazy parameter on first use)."""
        value = self._value
        if value is None:
            device, init = self._device, self._init
            assert init is not None  # a lazy parameter keeps its initializer until it runs
            with device._rng.fork(self._key):
                value = init(device, self.require_grad)
            if tuple(value.dims()) != self._shape:
                raise ModuleError(
                    f"ember: Param {self.id}: the initializer made shape {value.dims()}, expected {list(self._shape)}"
                )
            value = self._value = _prepare(value, self.require_grad)
            self._init = None
        return value

    @property
    def init_key(self) -> int | None:
        """The generator key a lazy parameter initialises from (``None`` once it was
        made from a value)."""
        return self._key

    def is_initialized(self) -> bool:
        return self._value is not None

    def lazy_shape(self) -> Shape:
        """The shape, without initialising."""
        return Shape(self._shape)

    def lazy_device(self) -> Device:
        return self._device

    def lazy_dtype(self) -> DType:
        return self._dtype

    @property
    def shape(self) -> Shape:
        return Shape(self._shape)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def dtype(self) -> DType:
        return self._dtype

    def num_elements(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    def is_require_grad(self) -> bool:
        return self.require_grad

    def set_require_grad(self, require_grad: bool) -> Param:
        """The same parameter (same id) with the flag changed."""
        if self._value is None:
            return self._still_lazy(self._device, require_grad)
        return Param(self.id, self._value, require_grad)

    def map(self, fn: Callable[[Tensor], Tensor]) -> Param:
        """The same id with ``fn`` applied to the value."""
        return Param(self.id, fn(self.val()), self.require_grad)

    def to_device(self, device: Device) -> Param:
        """The parameter on ``device``. A lazy parameter stays lazy and keeps its key, so
        it initialises to the same values on ``device`` as it would have here."""
        if self._value is None:
            return self._still_lazy(device, self.require_grad)
        return Param(self.id, self._value.to_device(device), self.require_grad)

    def _still_lazy(self, device: Device, require_grad: bool) -> Param:
        """This lazy parameter (same id, initializer and key) on ``device`` with ``require_grad``."""
        assert self._init is not None  # a lazy parameter keeps its initializer until it runs
        return Param.uninitialized(self.id, self._init, device, require_grad, self._shape, self._dtype, self._key)

    def __repr__(self) -> str:
        state = "" if self._value is not None else ", uninitialized"
        return f"Param(id={self.id.serialize()}, shape={list(self._shape)}, dtype={self._dtype}{state})"


class RunningState:
    """A buffer that is saved and loaded with the module but never trained (e.g.
    batch-norm statistics). ``update`` replaces the value in place."""

    __slots__ = ("id", "_value")

    def __init__(self, value: Tensor, param_id: ParamId | None = None):
        self.id = param_id or ParamId()
        self._value = value.detach()

    def value(self) -> Tensor:
        capture = current_capture()
        if capture is not None:  # inside ember.compile: the value this trace last wrote
            written = capture.running_value(self)
            if written is not None:
                return written
        return self._value

    def update(self, value: Tensor) -> None:
        value = value.detach()
        capture = current_capture()
        if capture is not None:  # recorded; the compiled step's replays write it
            capture.write_running(self, value)
            return
        self._value = value

    @property
    def shape(self) -> Shape:
        return self._value.shape

    def to_device(self, device: Device) -> RunningState:
        return RunningState(self._value.to_device(device), self.id)

    def __repr__(self) -> str:
        return f"RunningState(shape={self._value.dims()}, dtype={self._value.dtype})"

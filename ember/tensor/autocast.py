"""Autocast: mixed precision chosen per op, as PyTorch's ``torch.autocast``.

Inside ``with autocast(device, "bfloat16"):`` the ops of an :class:`AutocastPolicy`'s
``lower`` set (matmul, linear, convolutions) run in the low dtype and those of its
``float32`` set run in float32: their float inputs (float32, float16, bfloat16; never
float64) on the device are cast first. Every other op runs in its inputs' dtype.
Parameters stay float32: the casts are ops like any other, so gradients flow back to
the float32 values (the master weights).

The policies follow PyTorch's op lists for the ops ember has:

* bfloat16: PyTorch's CPU lists. Lower: matmul, linear, conv, conv-transpose, prelu;
  float32: the losses and ``prod``. (bfloat16 has float32's exponent range, so
  softmax, norms and sums may take bfloat16 inputs; flex computes their float16 and
  bfloat16 reductions in float32 anyway.)
* float16: PyTorch's CUDA lists. The same lower set; float32 adds what overflows or
  loses too much in float16 (range up to 65504): ``sum``, ``cumsum``, ``cumprod``,
  ``softmax``, ``log_softmax``, ``logsumexp``, ``norm``, the norms layers, ``exp``,
  ``log`` and the other transcendental functions listed there, ``pow``, ``softplus``.

The ops call :func:`cast_inputs` when :data:`ACTIVE` is nonzero (a context is open on
some thread); the state itself is per thread, as PyTorch's.

>>> from ember import Device, Tensor
>>> from ember.tensor.autocast import autocast
>>> x = Tensor.ones([2, 3])
>>> with autocast(Device.flex(), "bfloat16"):
...     y = x.matmul(x.transpose())
...     y.dtype, y.sum().dtype, y.prod().dtype
(DType.BFLOAT16, DType.BFLOAT16, DType.FLOAT32)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import DTypeError

#: The number of autocast contexts open on any thread (ops skip autocast when it is 0).
ACTIVE = 0
_count_lock = threading.Lock()


class _Local(threading.local):
    state: dict | None = None  # the class default: no failed lookup on the common path


_local = _Local()

_LOWER = frozenset({"matmul", "linear", "conv", "conv_transpose", "prelu"})
_LOSSES = frozenset(
    {
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "cross_entropy",
        "kl_div",
        "cosine_embedding_loss",
    }
)
_CUDA_FLOAT32 = _LOSSES | frozenset(
    {
        "prod",
        "sum",
        "cumsum",
        "cumprod",
        "softmax",
        "log_softmax",
        "logsumexp",
        "norm",
        "layer_norm",
        "group_norm",
        "rms_norm",
        "softplus",
        "exp",
        "expm1",
        "log",
        "log1p",
        "recip",
        "rsqrt",
        "sinh",
        "cosh",
        "tan",
        "asin",
        "acos",
        "powf",
        "powf_scalar",
        "powi_scalar",
    }
)


@dataclass(frozen=True)
class AutocastPolicy:
    """Which ops run in the low ``dtype`` (``lower``) and which in float32 (``float32``),
    by the op names the tensor layer reports (``"matmul"``, ``"linear"``, ``"sum"``...)."""

    dtype: DType
    lower: frozenset[str]
    float32: frozenset[str]

    def target(self, op: str) -> DType | None:
        if op in self.lower:
            return self.dtype
        if op in self.float32:
            return DType.FLOAT32
        return None


BFLOAT16_POLICY = AutocastPolicy(DType.BFLOAT16, _LOWER, _LOSSES | frozenset({"prod"}))
FLOAT16_POLICY = AutocastPolicy(DType.FLOAT16, _LOWER, _CUDA_FLOAT32)
_POLICIES = {DType.BFLOAT16: BFLOAT16_POLICY, DType.FLOAT16: FLOAT16_POLICY}
_ELIGIBLE = frozenset({np.dtype(np.float32), DType.FLOAT16.np, DType.BFLOAT16.np})


def policy_for(dtype: DType | str) -> AutocastPolicy:
    """The policy of a low dtype (``"bfloat16"`` or ``"float16"``)."""
    dtype = DType.parse(dtype)
    policy = _POLICIES.get(dtype)
    if policy is None:
        raise DTypeError(f"ember: autocast: dtype must be bfloat16 or float16, got {dtype}")
    return policy


def _base(device: Any) -> Any:
    return device.base()


def current() -> dict[Any, AutocastPolicy | None]:
    """This thread's autocast state: base device -> policy (``None``: disabled there)."""
    return _local.state or {}


def state_key() -> tuple:
    """This thread's autocast state as a hashable key (``()`` outside autocast): what a
    traced function (``ember.compile``) guards on, since it changes the ops' dtypes."""
    state = _local.state if ACTIVE else None
    if not state:
        return ()
    return tuple(sorted(((device.spec(), policy) for device, policy in state.items()), key=lambda kv: kv[0]))


@contextmanager
def autocast(
    device: Any, dtype: DType | str = DType.BFLOAT16, enabled: bool = True, policy: AutocastPolicy | None = None
) -> Iterator[None]:
    """Mixed precision for the ops on ``device`` (and on its autodiff and fusion
    wrappers) inside the block; ``enabled=False`` turns it off inside an outer block.
    ``policy`` replaces the dtype's default op lists."""
    from ember.device import Device

    if not isinstance(device, Device):
        raise DTypeError(f"ember: autocast: expected a Device (e.g. Device.flex()), got {type(device).__name__}")
    chosen = (policy or policy_for(dtype)) if enabled else None
    previous = _local.state
    state = dict(previous or {})
    state[_base(device)] = chosen
    global ACTIVE
    with _count_lock:
        ACTIVE += 1
    _local.state = state
    try:
        yield
    finally:
        _local.state = previous
        with _count_lock:
            ACTIVE -= 1


def cast_inputs(op: str, *tensors: Any) -> tuple[Any, ...]:
    """``tensors`` (``None`` and non-tensors pass through) cast as the active policy
    of their device says for ``op``."""
    state = _local.state
    if not state:
        return tensors
    out = []
    for t in tensors:
        p = getattr(t, "_primitive", None)
        if p is not None and p.dtype in _ELIGIBLE:
            policy = state.get(_base(t._device))
            target = None if policy is None else policy.target(op)
            if target is not None and target.np != p.dtype:
                t = t.cast(target)
        out.append(t)
    return tuple(out)


def cast_input(op: str, tensor: Any) -> Any:
    """:func:`cast_inputs` for one tensor."""
    return cast_inputs(op, tensor)[0]

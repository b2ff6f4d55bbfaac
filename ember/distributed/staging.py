"""Host staging: tensors of any device to numpy buffers a communicator can send, and back.

flex tensors are numpy arrays already (no copy on the way out, none on the way
back for results the collective allocated). cube (GPU) tensors are read back to
host memory and uploaded again; a device-aware communicator (NCCL for CUDA) could
skip this step without any change to the collective API. float16 and bfloat16 travel
as float32 (MPI has no reduction for them); bools as uint8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from ember.device import Device
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol

_WIRE: dict[np.dtype, np.dtype] = {np.dtype(np.float16): np.dtype(np.float32), np.dtype(np.bool_): np.dtype(np.uint8)}


_WIRE_OF: dict[np.dtype, np.dtype] = {}  # every dtype seen so far -> its wire dtype


def wire_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a buffer of ``dtype`` travels as."""
    dtype = np.dtype(dtype)
    wire = _WIRE_OF.get(dtype)
    if wire is None:
        if dtype in _WIRE:
            wire = _WIRE[dtype]
        elif dtype.kind == "V" or dtype.name == "bfloat16":  # ml_dtypes' bfloat16
            wire = np.dtype(np.float32)
        else:
            wire = dtype
        _WIRE_OF[dtype] = wire
    return wire


def to_host(tensor: Tensor) -> np.ndarray:
    """The tensor's values as a C-contiguous numpy array in its wire dtype (a view
    where that is possible: treat it as read-only)."""
    device = tensor.device
    inner = device.inner()
    prim = tensor.primitive
    if device.is_autodiff():
        prim = cast("AutodiffProtocol", device._backend).unwrap(prim)
    array = inner._backend.to_numpy(prim)
    wire = _WIRE_OF.get(array.dtype) or wire_dtype(array.dtype)
    if wire != array.dtype:
        array = array.astype(wire)
    return np.ascontiguousarray(array)


def divide_in_place(array: np.ndarray, n: int) -> None:
    """``array /= n`` for a float array: a multiplication by ``1 / n`` where that is the
    same to the bit (``n`` a power of two: twice as fast as a division), else a division."""
    if n & (n - 1) == 0:
        np.multiply(array, 1.0 / n, out=array)
    else:
        np.divide(array, n, out=array)


def from_host(array: np.ndarray, like: Tensor) -> Tensor:
    """A tensor with ``like``'s device and dtype holding ``array`` (not tracked by
    autodiff). The array is owned by the result from now on."""
    return host_to_device(array, like.device, like.primitive.dtype)


def host_to_device(array: np.ndarray, device: Device, dtype: np.dtype) -> Tensor:
    """``array`` (cast to ``dtype``) as a tensor on ``device`` (untracked)."""
    dtype = np.dtype(dtype)
    if array.dtype != dtype:
        array = array.astype(dtype)
    inner = device.inner()
    if inner.backend_name == "flex":
        prim = np.ascontiguousarray(array)  # flex's primitive is the array itself: no copy
    else:
        prim = inner._backend.from_numpy(np.ascontiguousarray(array))
    if device.is_autodiff():
        prim = cast("AutodiffProtocol", device._backend).wrap(prim)
    return Tensor(prim, device)

"""Collectives on Tensors: :func:`all_reduce`, :func:`broadcast`, :func:`all_gather`,
:func:`reduce_scatter`, and their object forms.

Every rank calls the same collective, in the same order, with a tensor of the same
shape and dtype (checked: a mismatch raises :class:`~ember.errors.DistributedError`
on every rank, naming the ranks and their shapes). The check is one small extra
collective per call; ``check=False`` skips it where every rank is known to agree
(a mismatch is then undefined behaviour in MPI: an error, a hang until the timeout,
or wrong values). Tensors of any device work: they
are staged through host memory (see :mod:`ember.distributed.staging`); the result
lives on the input's device, with its dtype, and is not tracked by autodiff.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ember.distributed.communicator import Communicator, ReduceOp
from ember.distributed.staging import divide_in_place, from_host, to_host
from ember.distributed.world import communicator
from ember.errors import ConfigError, DistributedError, DTypeError
from ember.tensor import Tensor


def _tensor(op: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise ConfigError(f"ember.distributed.{op}: expected a Tensor, got {type(value).__name__}")
    return value


def _describe(tensor: Tensor) -> str:
    return f"{tensor.dtype} {tensor.dims()}"


_KEYS: dict[tuple[Any, tuple[int, ...]], np.ndarray] = {}  # (dtype, shape) -> its checksum, as sent


def _key(tensor: Tensor) -> np.ndarray:
    prim = tensor.primitive
    spec = (prim.dtype, tuple(prim.shape))
    key = _KEYS.get(spec)
    if key is None:
        key = np.array([zlib.crc32(_describe(tensor).encode())], dtype=np.int64)
        if len(_KEYS) < 4096:
            _KEYS[spec] = key
    return key


def check_same(op: str, tensor: Tensor, comm: Communicator) -> None:
    """Raises on every rank when the ranks' tensors differ in shape or dtype."""
    if comm.size == 1:
        return
    keys = comm.all_gather(_key(tensor))
    if (keys == keys[0]).all():
        return
    descriptions = comm.all_gather_object(_describe(tensor))
    listed = ", ".join(f"rank {r}: {d}" for r, d in enumerate(descriptions))
    raise DistributedError(
        f"ember.distributed.{op}: the ranks passed tensors of different shapes or dtypes ({listed}); every rank "
        "must call the same collective with a tensor of the same shape and dtype"
    )


def _axis(op: str, tensor: Tensor, dim: int) -> int:
    rank = len(tensor.dims())
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise ConfigError(
            f"ember.distributed.{op}: dim must be in [{-rank}, {rank}) for shape {tensor.dims()}, got {dim!r}"
        )
    return dim % rank


def all_reduce(tensor: Tensor, op: ReduceOp | str = ReduceOp.SUM, *, check: bool = True) -> Tensor:
    """The element-wise sum (or mean, max, min) of ``tensor`` over every rank.

    >>> import ember.distributed as dist
    >>> from ember import Tensor
    >>> dist.all_reduce(Tensor.from_floats([1.0, 2.0]), "mean").tolist() if dist.world_size() == 1 else None
    [1.0, 2.0]
    """
    tensor = _tensor("all_reduce", tensor)
    op = ReduceOp.parse(op)
    if op is ReduceOp.MEAN and not tensor.is_float():
        raise DTypeError(
            f"ember.distributed.all_reduce: 'mean' needs a float tensor, got {tensor.dtype}; cast it first "
            "(tensor.float()) or reduce with 'sum'"
        )
    comm = communicator()
    if check:
        check_same("all_reduce", tensor, comm)
    out = comm.all_reduce(to_host(tensor), ReduceOp.SUM if op is ReduceOp.MEAN else op)
    if op is ReduceOp.MEAN and comm.size > 1:
        divide_in_place(out, comm.size)
    return from_host(out, tensor)


def broadcast(tensor: Tensor, root: int = 0, *, check: bool = True) -> Tensor:
    """``root``'s tensor on every rank; the other ranks pass a tensor of the same shape
    and dtype (its values are ignored)."""
    tensor = _tensor("broadcast", tensor)
    comm = communicator()
    if check:
        check_same("broadcast", tensor, comm)
    return from_host(comm.broadcast(to_host(tensor), root), tensor)


def all_gather(tensor: Tensor, dim: int = 0, *, check: bool = True) -> Tensor:
    """Every rank's tensor, concatenated along ``dim`` in rank order."""
    tensor = _tensor("all_gather", tensor)
    axis = _axis("all_gather", tensor, dim)
    comm = communicator()
    if check:
        check_same("all_gather", tensor, comm)
    stacked = comm.all_gather(to_host(tensor))
    return from_host(np.concatenate(list(stacked), axis=axis), tensor)


def reduce_scatter(tensor: Tensor, op: ReduceOp | str = ReduceOp.SUM, dim: int = 0, *, check: bool = True) -> Tensor:
    """The reduction of ``tensor`` over ranks, split into ``world_size()`` equal blocks
    along ``dim``; rank ``r`` gets block ``r``."""
    tensor = _tensor("reduce_scatter", tensor)
    op = ReduceOp.parse(op)
    axis = _axis("reduce_scatter", tensor, dim)
    if op is ReduceOp.MEAN and not tensor.is_float():
        raise DTypeError(f"ember.distributed.reduce_scatter: 'mean' needs a float tensor, got {tensor.dtype}")
    comm = communicator()
    length = tensor.dims()[axis]
    if length % comm.size:
        raise ConfigError(
            f"ember.distributed.reduce_scatter: dim {axis} has length {length}, not divisible by the world size "
            f"{comm.size}; pad the tensor to a multiple of {comm.size}"
        )
    if check:
        check_same("reduce_scatter", tensor, comm)
    array = np.moveaxis(to_host(tensor), axis, 0)
    out = comm.reduce_scatter(np.ascontiguousarray(array), ReduceOp.SUM if op is ReduceOp.MEAN else op)
    if op is ReduceOp.MEAN and comm.size > 1:
        divide_in_place(out, comm.size)
    return from_host(np.ascontiguousarray(np.moveaxis(out, 0, axis)), tensor)


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's picklable object, in rank order."""
    return communicator().all_gather_object(obj)


def broadcast_object(obj: Any, root: int = 0) -> Any:
    """``root``'s picklable object on every rank."""
    return communicator().broadcast_object(obj, root)

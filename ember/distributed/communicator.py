"""The collective layer's protocol: what a world of ranks can do on host buffers.

``ember.distributed`` talks to other ranks only through a :class:`Communicator`.
Two implementations ship: :class:`~ember.distributed.MpiCommunicator` (mpi4py,
any MPI library) and :class:`~ember.distributed.LocalCommunicator` (one process,
no MPI). Tensors are staged through host memory (numpy arrays) before they reach a
communicator; a device-aware one (NCCL for CUDA tensors, say) would implement the
same methods and be chosen by :func:`~ember.distributed.init`, so user code does not
change.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ember.errors import ConfigError


class ReduceOp(Enum):
    """How :func:`~ember.distributed.all_reduce` combines the ranks' values."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"

    @staticmethod
    def parse(value: ReduceOp | str) -> ReduceOp:
        if isinstance(value, ReduceOp):
            return value
        try:
            return ReduceOp(str(value).lower())
        except ValueError:
            raise ConfigError(
                f"ember.distributed: unknown reduce op {value!r}; use 'sum', 'mean', 'max' or 'min'"
            ) from None


@runtime_checkable
class Request(Protocol):
    """A started non-blocking collective."""

    def wait(self) -> None:
        """Blocks until the collective is done (bounded by the communicator's timeout)."""

    def test(self) -> bool:
        """Whether it is done (and drives its progress)."""


@runtime_checkable
class Communicator(Protocol):
    """A world of ``size`` ranks; this process is ``rank``.

    Buffers are C-contiguous numpy arrays of a dtype the communicator accepts
    (float32, float64, int32, int64, uint8, bool); every rank passes the same shape and
    dtype, in the same order of calls. ``op`` is SUM, MAX or MIN (MEAN is a SUM that
    the caller divides). Blocking calls return within the communicator's ``timeout``
    or end the run with an error naming the rank that failed.
    """

    rank: int
    size: int
    timeout: float

    def all_reduce(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        """The element-wise reduction over ranks, as a new array."""

    def all_reduce_start(self, buffer: np.ndarray, op: ReduceOp, detail: str = "") -> Request:
        """Starts reducing ``buffer`` in place; ``wait()`` before reading it. ``detail``
        names what is reduced (e.g. a gradient bucket) in errors and timeouts. Every
        rank starts these in the same order and waits for them in the same order (a
        ring all-reduce advances only while its rank tests or waits for it)."""

    def broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        """``root``'s array on every rank (``array`` gives the shape and dtype elsewhere)."""

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        """Every rank's array, stacked on a new first axis of length ``size``."""

    def reduce_scatter(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        """Reduces ``array`` (first axis a multiple of ``size``) over ranks and gives
        rank ``r`` the ``r``-th block of the first axis."""

    def reduce_scatter_in_place(self, buffer: np.ndarray, op: ReduceOp) -> None:
        """Reduces a flat ``buffer`` (length a multiple of ``size``) over ranks in place:
        afterwards block ``rank`` of it (of ``size`` equal blocks) holds the reduction;
        the other blocks hold undefined values."""

    def all_gather_in_place(self, buffer: np.ndarray) -> None:
        """Block ``r`` of a flat ``buffer`` (length a multiple of ``size``) from rank
        ``r`` to every rank, in place."""

    def barrier(self) -> None:
        """Returns once every rank has called it."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable object, in rank order."""

    def broadcast_object(self, obj: Any, root: int) -> Any:
        """``root``'s picklable object on every rank."""

    def abort(self, message: str, code: int = 1) -> None:
        """Prints ``message`` and ends every rank of the run."""

"""``MpiCommunicator``: the collective layer over MPI, through mpi4py.

Install it with ``pip install "ember[dist]"`` (mpi4py and the ``mpich`` wheel) and
launch with ``mpiexec -n N python script.py``. Blocking collectives run as MPI's own
(the fastest algorithm the library has), watched by a
:class:`~ember.distributed.watchdog.Watchdog` that ends the run with an error
naming the culprit when one takes longer than ``timeout``.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

import numpy as np

from ember.distributed.communicator import ReduceOp
from ember.distributed.local import _check_root
from ember.distributed.ring import Ring, ring_min_chunk
from ember.errors import BackendUnavailableError, ConfigError


def import_mpi() -> Any:
    """The ``mpi4py.MPI`` module, or a clear error saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise BackendUnavailableError(
            f"ember.distributed: MPI is not available ({error}); install it with pip install 'ember[dist]' "
            "(mpi4py and an MPI library such as the mpich wheel), or run without mpiexec for a one-process world"
        ) from None
    return MPI


class _MpiRequest:
    """A started ``Iallreduce`` or ring all-reduce; ``wait`` is watched like a blocking
    collective."""

    __slots__ = ("request", "owner", "detail")

    def __init__(self, request: Any, owner: MpiCommunicator, detail: str):
        self.request = request
        self.owner = owner
        self.detail = detail

    def wait(self) -> None:
        watchdog = self.owner.watchdog
        if watchdog is None:
            self.request.Wait()
            return
        watchdog.enter("all_reduce (non-blocking)", self.detail)
        try:
            self.request.Wait()
        finally:
            watchdog.leave()

    def test(self) -> bool:
        return bool(self.request.Test())


class _ResultPool:
    """Result buffers of recent collectives, reused once nothing refers to them any
    more: a fresh large array costs page faults on every call, a reused one does not
    (what a hand-written mpi4py loop gets by preallocating)."""

    def __init__(self, slots: int = 4, min_bytes: int = 1 << 16):
        self.buffers: list[np.ndarray] = []
        self.slots = slots
        self.min_bytes = min_bytes

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype)
        for buffer in self.buffers:
            # Only this list (and getrefcount's argument) hold it: no tensor or view uses it.
            if buffer.nbytes == nbytes and sys.getrefcount(buffer) <= 3:
                return buffer.view(dtype).reshape(shape)
        buffer = np.empty(nbytes, np.uint8)
        self.buffers = [*self.buffers[-(self.slots - 1) :], buffer]
        return buffer.view(dtype).reshape(shape)


class MpiCommunicator:
    """The ranks of an MPI communicator (``MPI.COMM_WORLD`` by default).

    ``timeout`` (seconds) bounds every blocking collective: past it the run ends
    with a message naming the ranks that did not arrive. A rank's uncaught exception
    ends every rank (see :mod:`ember.distributed.watchdog`).
    """

    name = "mpi"

    def __init__(self, comm: Any = None, *, timeout: float = 60.0, watchdog: bool = True, excepthook: bool = True):
        mpi = import_mpi()
        self.MPI = mpi
        self.comm = comm if comm is not None else mpi.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {ReduceOp.SUM: mpi.SUM, ReduceOp.MAX: mpi.MAX, ReduceOp.MIN: mpi.MIN}
        self.watchdog = None
        self._timeout = float(timeout)
        self._pool = _ResultPool()
        self._ufuncs = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}
        ring_min = ring_min_chunk()
        self._ring: Ring | None = None
        self._ring_from = 0  # buffers of this many bytes and more all-reduce as a ring
        if self.size > 1 and ring_min is not None:
            self._ring = Ring(self.comm.Dup(), mpi)
            self._ring_from = self.size * ring_min
        if watchdog and self.size > 1:
            from ember.distributed.watchdog import Watchdog, install_excepthook

            self.watchdog = Watchdog(self.comm.Dup(), self._timeout)
            if excepthook:
                install_excepthook(self.watchdog)
            atexit.register(self.close)

    @property
    def timeout(self) -> float:
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._timeout = float(seconds)
        if self.watchdog is not None:
            self.watchdog.timeout = self._timeout

    # ------------------------------------------------------------------ helpers
    def _op(self, op: ReduceOp) -> Any:
        try:
            return self._ops[op]
        except KeyError:
            raise ConfigError(f"ember.distributed: the communicator reduces with sum, max or min, got {op}") from None

    def _ring_for(self, array: np.ndarray) -> Ring | None:
        """The ring that all-reduces ``array`` (see :mod:`ember.distributed.ring`), or
        ``None`` for MPI's own; every rank decides alike, from the size they share."""
        ring = self._ring
        return ring if ring is not None and array.nbytes >= self._ring_from else None

    def _enter(self, op: str, detail: str = "") -> None:
        if self.watchdog is not None:
            self.watchdog.enter(op, detail)

    def _leave(self) -> None:
        if self.watchdog is not None:
            self.watchdog.leave()

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        send = np.ascontiguousarray(array)
        out = self._pool.take(send.shape, send.dtype)
        mpi_op = self._op(op)
        self._enter("all_reduce")
        try:
            ring = self._ring_for(send)
            if ring is not None:
                ring.start(send, out, self._ufuncs[op], post=False).Wait()
            else:
                self.comm.Allreduce(send, out, op=mpi_op)
        finally:
            self._leave()
        return out

    def all_reduce_start(self, buffer: np.ndarray, op: ReduceOp, detail: str = "") -> _MpiRequest:
        if not buffer.flags.c_contiguous:
            raise ConfigError("ember.distributed: all_reduce_start needs a C-contiguous buffer")
        mpi_op = self._op(op)
        ring = self._ring_for(buffer)
        if ring is not None:
            request: Any = ring.start(buffer, buffer, self._ufuncs[op])
        else:
            request = self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=mpi_op)
        return _MpiRequest(request, self, detail)

    def broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        root = _check_root(root, self.size)
        buffer = np.array(array, copy=True, order="C")
        self._enter("broadcast")
        try:
            self.comm.Bcast(buffer, root=root)
        finally:
            self._leave()
        return buffer

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        send = np.ascontiguousarray(array)
        out = np.empty((self.size, *send.shape), dtype=send.dtype)
        ring = self._ring_for(out)
        self._enter("all_gather")
        try:
            if ring is not None:
                out[self.rank] = send
                ring.start(out, out, None, reduce=False, post=False).Wait()
            else:
                self.comm.Allgather(send, out)
        finally:
            self._leave()
        return out

    def reduce_scatter(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        send = np.ascontiguousarray(array)
        if send.ndim == 0 or send.shape[0] % self.size:
            raise ConfigError(
                f"ember.distributed: reduce_scatter needs a first dimension divisible by the world size {self.size}, "
                f"got shape {list(send.shape)}"
            )
        mpi_op = self._op(op)
        ring = self._ring_for(send)
        if ring is not None:
            # Chunk r of a ring reduce-scatter is block r (equal blocks: the length divides).
            full = self._pool.take(send.shape, send.dtype)
            self._enter("reduce_scatter")
            try:
                ring.start(send, full, self._ufuncs[op], gather=False, post=False).Wait()
            finally:
                self._leave()
            block = send.shape[0] // self.size
            return full[self.rank * block : (self.rank + 1) * block]
        out = np.empty((send.shape[0] // self.size, *send.shape[1:]), dtype=send.dtype)
        self._enter("reduce_scatter")
        try:
            self.comm.Reduce_scatter_block(send, out, op=mpi_op)
        finally:
            self._leave()
        return out

    def _blocks(self, buffer: np.ndarray, op: str) -> int:
        if buffer.ndim != 1 or not buffer.flags.c_contiguous or buffer.size % self.size:
            raise ConfigError(
                f"ember.distributed: {op} needs a flat C-contiguous buffer whose length is a multiple of the world "
                f"size {self.size}, got shape {list(buffer.shape)}"
            )
        return buffer.size // self.size

    def reduce_scatter_in_place(self, buffer: np.ndarray, op: ReduceOp) -> None:
        block = self._blocks(buffer, "reduce_scatter_in_place")
        ring = self._ring_for(buffer)
        if ring is None:  # small: MPI's, out of place
            buffer[self.rank * block : (self.rank + 1) * block] = self.reduce_scatter(buffer, op)
            return
        self._op(op)  # a clear error for MEAN
        ufunc = self._ufuncs[op]
        self._enter("reduce_scatter")
        try:
            ring.start(buffer, buffer, ufunc, gather=False, post=False).Wait()
        finally:
            self._leave()

    def all_gather_in_place(self, buffer: np.ndarray) -> None:
        block = self._blocks(buffer, "all_gather_in_place")
        ring = self._ring_for(buffer)
        if ring is None:  # small: MPI's, out of place
            mine = buffer[self.rank * block : (self.rank + 1) * block].copy()
            np.copyto(buffer, self.all_gather(mine).reshape(-1))
            return
        self._enter("all_gather")
        try:
            ring.start(buffer, buffer, None, reduce=False, post=False).Wait()
        finally:
            self._leave()

    def barrier(self) -> None:
        self._enter("barrier")
        try:
            self.comm.Barrier()
        finally:
            self._leave()

    def all_gather_object(self, obj: Any) -> list[Any]:
        self._enter("all_gather_object")
        try:
            return self.comm.allgather(obj)
        finally:
            self._leave()

    def broadcast_object(self, obj: Any, root: int) -> Any:
        root = _check_root(root, self.size)
        self._enter("broadcast_object")
        try:
            return self.comm.bcast(obj, root=root)
        finally:
            self._leave()

    def abort(self, message: str, code: int = 1) -> None:
        if self.watchdog is not None:
            self.watchdog._mpi_abort(message, code)
        print(message, file=sys.stderr, flush=True)
        self.comm.Abort(code)

    def close(self) -> None:
        """Stops the watchdog (at interpreter exit, before MPI finalizes)."""
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.stop()

    def __repr__(self) -> str:
        return f"MpiCommunicator(rank={self.rank}, size={self.size}, timeout={self._timeout:g})"

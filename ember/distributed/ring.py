"""Ring all-reduce over point-to-point messages, for large buffers.

The ``N`` ranks form a ring (rank ``r`` sends to ``r + 1`` and receives from
``r - 1``) and the buffer is cut into ``N`` chunks. In ``N - 1`` reduce steps each rank
sends one chunk to its right neighbour and adds the chunk arriving from its left
into its result (numpy's vectorised ufunc, no intermediate copy of the input); after
them rank ``r`` holds chunk ``r + 1`` reduced over every rank. In ``N - 1`` gather
steps the reduced chunks travel once more around the ring, straight into the
result. Each rank moves ``2 (N - 1) / N`` of the buffer, the bandwidth optimum, and
every element is reduced once, on one rank, so the ranks' results are bit-identical
and the same from run to run.

On one node this beats MPI's own ``Allreduce`` for buffers of a few hundred KB and
more (MPICH's out-of-place call first copies the input into the result and reduces
with a scalar loop; see ``benchmarks/distributed.py``); for small buffers MPI's
algorithms win on latency, so :class:`~ember.distributed.MpiCommunicator` uses the
ring from :data:`RING_MIN_CHUNK` bytes per rank on (``EMBER_DIST_RING``).

A :class:`RingRequest` is a started ring: ``Test()`` advances it as far as the
messages that arrived allow (so a non-blocking bucket all-reduce progresses while
backward runs), ``Wait()`` finishes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ember.errors import ConfigError

RING_MIN_CHUNK = 128 << 10  # bytes per rank from which the ring replaces MPI's Allreduce
_TAG_SPAN = 30000  # tags cycle in [1, _TAG_SPAN] (MPI guarantees at least 32767)


def ring_min_chunk() -> int | None:
    """Bytes per rank from which all-reduces run as a ring (``EMBER_DIST_RING``:
    ``auto``/unset for :data:`RING_MIN_CHUNK`, ``off`` for MPI's ``Allreduce`` always, a
    number of bytes otherwise); ``None`` when the ring is off."""
    text = os.environ.get("EMBER_DIST_RING", "auto").strip().lower()
    if text in ("", "auto"):
        return RING_MIN_CHUNK
    if text in ("off", "0", "no", "false", "mpi"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"ember.distributed: EMBER_DIST_RING must be 'auto', 'off' or a number of bytes per rank, got {text!r}"
        ) from None
    if value < 0:
        raise ConfigError(f"ember.distributed: EMBER_DIST_RING must be >= 0 bytes, got {value}")
    return value


def chunk_bounds(n: int, size: int) -> list[tuple[int, int]]:
    """``size`` contiguous chunks of ``n`` elements, the first ``n % size`` one longer."""
    base, extra = divmod(n, size)
    bounds, start = [], 0
    for r in range(size):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class RingRequest:
    """A started ring all-reduce (mpi4py's request names: ``Test``, ``Wait``).

    Each step sends one chunk right and receives one from the left. ``Test`` posts
    them as non-blocking messages and advances as far as the arrived ones allow;
    ``Wait`` finishes a posted step and runs the rest as blocking ``Sendrecv`` calls
    (fewer requests to create and poll: measurably faster on one node)."""

    __slots__ = ("_steps", "_step", "_pending", "_done_cb", "_comm", "_left", "_right", "_tag", "_mpi")

    def __init__(self, steps: Iterator[tuple[np.ndarray, np.ndarray]], ring: Ring, tag: int, done: Any, post: bool):
        self._steps = steps
        self._comm, self._mpi, self._tag = ring.comm, ring.mpi, tag
        self._left, self._right = (ring.rank - 1) % ring.size, (ring.rank + 1) % ring.size
        self._done_cb = done
        self._pending: list[Any] | None = None
        self._step: tuple[np.ndarray, np.ndarray] | None = None
        self._advance()
        if post:
            self._post()

    def _advance(self) -> None:
        """The step after the one just completed (its reduction runs in the generator)."""
        self._pending = None
        self._step = next(self._steps, None)
        if self._step is None and self._done_cb is not None:
            done, self._done_cb = self._done_cb, None
            done()

    def _post(self) -> None:
        if self._step is not None and self._pending is None:
            send, receive = self._step
            self._pending = [
                self._comm.Irecv(receive, source=self._left, tag=self._tag),
                self._comm.Isend(send, dest=self._right, tag=self._tag),
            ]

    def Test(self) -> bool:  # noqa: N802 (mpi4py's name)
        while self._step is not None:
            self._post()
            if not self._mpi.Request.Testall(self._pending):
                return False
            self._advance()
        return True

    def Wait(self) -> None:  # noqa: N802 (mpi4py's name)
        comm, left, right, tag = self._comm, self._left, self._right, self._tag
        while self._step is not None:
            if self._pending is not None:
                self._mpi.Request.Waitall(self._pending)
            else:
                send, receive = self._step
                comm.Sendrecv(send, right, tag, receive, left, tag)
            self._advance()


class Ring:
    """Ring all-reduces on ``comm`` (a communicator of their own, so that their
    point-to-point messages never meet anything else)."""

    def __init__(self, comm: Any, mpi: Any):
        self.comm = comm
        self.mpi = mpi
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._seq = 0
        self._spare: list[np.ndarray] = []  # receive buffers of finished rings

    def start(
        self,
        send: np.ndarray,
        out: np.ndarray,
        ufunc: np.ufunc | None,
        *,
        reduce: bool = True,
        gather: bool = True,
        post: bool = True,
    ) -> RingRequest:
        """Starts ``out = ufunc-reduction of send over ranks``; ``send`` may be ``out``
        (in place). Both are C-contiguous with the same shape and dtype on every rank.

        ``gather=False`` stops after the reduce steps (a reduce-scatter: chunk ``r`` of
        ``out``, of :func:`chunk_bounds`, holds the reduction on rank ``r``; the other
        chunks hold partial results). ``reduce=False`` runs only the gather steps (an
        all-gather of each rank's chunk ``r`` of ``out``, in place; ``send`` unused).
        ``post=False`` sends nothing before ``Wait`` (for a caller that waits at once)."""
        self._seq = self._seq % _TAG_SPAN + 1
        flat_send, flat_out = send.reshape(-1), out.reshape(-1)
        bounds = chunk_bounds(flat_out.size, self.size)
        longest = max(b - a for a, b in bounds)
        scratch = self._take(longest * out.dtype.itemsize)
        tmp = scratch[: longest * out.dtype.itemsize].view(out.dtype)
        # The chunk this rank holds reduced after the reduce steps: r + 1 for a full
        # all-reduce (the usual ring), r when the caller wants chunk r (reduce-scatter,
        # all-gather).
        own = (self.rank + 1) % self.size if reduce and gather else self.rank
        steps = self._steps(flat_send, flat_out, tmp, bounds, ufunc, own, reduce, gather)
        return RingRequest(steps, self, self._seq, lambda: self._spare.append(scratch), post)

    def _take(self, nbytes: int) -> np.ndarray:
        for i, buffer in enumerate(self._spare):
            if buffer.nbytes >= nbytes:
                return self._spare.pop(i)
        return np.empty(max(nbytes, 1), np.uint8)

    def _steps(
        self,
        send: np.ndarray,
        out: np.ndarray,
        tmp: np.ndarray,
        bounds: list[tuple[int, int]],
        ufunc: np.ufunc | None,
        own: int,
        reduce: bool,
        gather: bool,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The steps as ``(chunk to send right, buffer the left's chunk arrives in)``;
        the generator resumes once a step's messages are through."""
        n = self.size
        if reduce:
            assert ufunc is not None
            # Step s sends chunk own - 1 - s (this rank's own values at s = 0, the partial
            # result received at s - 1 after) and adds chunk own - 2 - s from the left,
            # so the last chunk it completes is own.
            for s in range(n - 1):
                a, b = bounds[(own - 1 - s) % n]
                source = send if s == 0 else out
                c, d = bounds[(own - 2 - s) % n]
                yield source[a:b], tmp[: d - c]
                with np.errstate(all="ignore"):  # MPI's reductions overflow silently too
                    ufunc(send[c:d], tmp[: d - c], out=out[c:d])
            if n == 1 and send is not out:
                np.copyto(out, send)
        if gather:
            # Step s sends chunk own - s (reduced here, or received at s - 1) and
            # receives chunk own - s - 1 straight into the result.
            for s in range(n - 1):
                a, b = bounds[(own - s) % n]
                c, d = bounds[(own - s - 1) % n]
                yield out[a:b], out[c:d]

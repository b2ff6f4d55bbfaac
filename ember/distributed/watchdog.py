"""Fault handling for MPI runs: a rank that raises, dies or stops answering ends the
run within the timeout, with a message naming it, instead of leaving the other ranks
blocked forever in a collective.

Every rank runs a :class:`Watchdog` thread that talks to the others on its own
duplicate of the communicator (so it never mixes with the collectives):

- the main thread marks each blocking collective (``enter``/``leave``): its name, a
  sequence number and when it started;
- when a collective has waited longer than ``timeout``, the watchdog asks every other
  rank where it is (a ``QUERY``; the other watchdogs answer even while their main
  thread is blocked), waits a short grace period, prints which ranks did not answer
  (dead, or stuck outside MPI) and where the others are, and aborts the run;
- an uncaught exception on a rank (``sys.excepthook``) prints the traceback, tells
  every other rank (``FAIL``), whose watchdogs print "rank r failed: ..." and abort,
  and then aborts.

A rank killed outright is caught by the launcher first where it cleans up (MPICH's
``mpiexec`` ends the other ranks and names the killed one); under a launcher that
does not, the survivors' watchdogs name it when their collective times out.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from typing import Any

QUERY, REPLY, FAIL = 101, 102, 103


class Watchdog:
    """Watches this rank's blocking collectives and answers the other ranks' queries."""

    def __init__(self, ctl: Any, timeout: float, *, abort: Any = None):
        from mpi4py import MPI

        self._mpi = MPI
        self.ctl = ctl
        self.rank = ctl.Get_rank()
        self.size = ctl.Get_size()
        self.timeout = float(timeout)
        self._abort = abort if abort is not None else self._mpi_abort
        self.op: str | None = None  # the collective the main thread is blocked in
        self.detail = ""
        self.seq = 0
        self.since = time.monotonic()
        self.last_op = "start"
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one thread at a time sends on ctl
        self._sends: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="ember-dist-watchdog", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ main thread
    def enter(self, op: str, detail: str = "") -> None:
        self.seq += 1
        self.detail = detail
        self.since = time.monotonic()
        self.op = op

    def leave(self) -> None:
        self.last_op = self.op or self.last_op
        self.op = None
        self.since = time.monotonic()

    def interval(self) -> float:
        return min(0.25, max(self.timeout / 20, 0.01))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    # ------------------------------------------------------------------ messages
    def status(self) -> dict[str, Any]:
        op = self.op
        return {
            "rank": self.rank,
            "op": op,
            "detail": self.detail,
            "seq": self.seq,
            "seconds": time.monotonic() - self.since,
            "last_op": self.last_op,
        }

    def _send(self, obj: Any, dest: int, tag: int) -> None:
        with self._lock:
            with contextlib.suppress(Exception):  # a dead peer: nothing to tell it
                self._sends.append(self.ctl.isend(obj, dest=dest, tag=tag))
            self._sends = [r for r in self._sends if not _done(r)]

    def _drain(self, replies: dict[int, dict] | None = None) -> None:
        """Handles every pending control message; collects REPLYs into ``replies``."""
        mpi = self._mpi
        status = mpi.Status()
        while self.ctl.iprobe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG, status=status):
            source, tag = status.Get_source(), status.Get_tag()
            message = self.ctl.recv(source=source, tag=tag)
            if tag == QUERY:
                self._send(self.status(), source, REPLY)
            elif tag == REPLY and replies is not None:
                replies[source] = message
            elif tag == FAIL:
                self._failed(source, message)

    def _failed(self, source: int, message: str) -> None:
        self._abort(
            f"ember.distributed: rank {source} failed: {message}\n"
            f"ember.distributed: rank {self.rank} stops because rank {source} failed."
        )

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval()):
                self._drain()
                op = self.op
                if op is not None and time.monotonic() - self.since > self.timeout:
                    self._diagnose(op)
        except Exception as error:  # never let the watchdog die silently
            if not self._stop.is_set():
                print(f"ember.distributed: rank {self.rank}: watchdog stopped: {error!r}", file=sys.stderr, flush=True)

    def _diagnose(self, op: str) -> None:
        waited = time.monotonic() - self.since
        seq, detail = self.seq, self.detail
        others = [r for r in range(self.size) if r != self.rank]
        for r in others:
            self._send(self.rank, r, QUERY)
        replies: dict[int, dict] = {}
        grace = min(5.0, max(1.0, self.timeout / 4))
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and len(replies) < len(others):
            self._drain(replies)
            time.sleep(0.01)
        where = f"{op} #{seq}" + (f" ({detail})" if detail else "")
        lines = [
            f"ember.distributed: rank {self.rank} waited {waited:.1f} s in {where}, longer than the "
            f"timeout of {self.timeout:g} s."
        ]
        silent = [r for r in others if r not in replies]
        if silent:
            names = ", ".join(f"rank {r}" for r in silent)
            lines.append(f"  {names}: not responding (the process died, or it is stuck outside MPI)")
        for r in sorted(replies):
            s = replies[r]
            if s["op"] is not None:
                lines.append(f"  rank {r}: waiting {s['seconds']:.1f} s in {s['op']} #{s['seq']}")
            else:
                lines.append(
                    f"  rank {r}: alive, {s['seconds']:.1f} s since its last collective ({s['last_op']} #{s['seq']})"
                )
        lines.append(
            "  Aborting every rank. If a rank legitimately works longer between collectives, raise the "
            "timeout: ember.distributed.init(timeout=...) or EMBER_DIST_TIMEOUT=seconds."
        )
        self._abort("\n".join(lines))

    # ------------------------------------------------------------------ failure
    def notify_failure(self, message: str) -> None:
        """Tells every other rank that this one failed (best effort, a few seconds at most)."""
        for r in range(self.size):
            if r != self.rank:
                self._send(message, r, FAIL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            with self._lock:
                self._sends = [r for r in self._sends if not _done(r)]
                if not self._sends:
                    break
            time.sleep(0.01)
        # Give the others' watchdogs a moment to print their side before the abort.
        time.sleep(min(1.0, 3 * self.interval()))

    def _mpi_abort(self, message: str, code: int = 1) -> None:
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
        time.sleep(0.5)  # the launcher forwards output asynchronously: let it reach the terminal
        try:
            self._mpi.COMM_WORLD.Abort(code)
        finally:
            os._exit(code)


def _done(request: Any) -> bool:
    try:
        return bool(request.Test())
    except Exception:
        return True


def install_excepthook(watchdog: Watchdog) -> None:
    """On an uncaught exception: the usual traceback, then tell the other ranks and abort."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
        except Exception:
            traceback.print_exception(kind, value, tb)
        text = "".join(traceback.format_exception_only(kind, value)).strip()
        print(
            f"ember.distributed: rank {watchdog.rank} raised {text}; stopping every rank.", file=sys.stderr, flush=True
        )
        watchdog.notify_failure(text)
        watchdog._mpi_abort(f"ember.distributed: rank {watchdog.rank} aborts the run.")

    sys.excepthook = hook

"""``Interrupter``: stops a training cleanly after the current step (Ctrl-C)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Interrupter:
    """A flag the training loop checks after every step. ``stop()`` from anywhere (a
    callback, another thread, a signal handler) makes ``fit`` finish the step, save
    a checkpoint and return."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def stop(self, reason: str = "stopped") -> None:
        self.reason = reason
        self._event.set()

    def should_stop(self) -> bool:
        return self._event.is_set()

    def reset(self) -> None:
        self.reason = None
        self._event.clear()

    @contextlib.contextmanager
    def catch_sigint(self, notify=None) -> Iterator[None]:
        """While inside, the first Ctrl-C (SIGINT) calls :meth:`stop`; a second one
        raises ``KeyboardInterrupt`` as usual. Only in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self.should_stop():
                raise KeyboardInterrupt
            self.stop("interrupted (Ctrl-C)")
            if notify is not None:
                notify()

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

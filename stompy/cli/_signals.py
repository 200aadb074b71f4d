"""SIGINT and SIGTERM for the client commands: exceptions raised where the main thread
is, so that ``with`` blocks unsubscribe and disconnect gracefully, held back while an
acknowledgement is being sent."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Final

__all__ = ("SIGNALS", "Interrupted", "Signals")


class Interrupted(BaseException):
    """SIGTERM, as ``KeyboardInterrupt`` is SIGINT."""


class Signals:
    """SIGINT and SIGTERM as exceptions (``KeyboardInterrupt``, :class:`Interrupted`)
    raised where the main thread is, except inside :meth:`held`: there they wait until
    the block ends, so that acknowledging what was printed is never cut in half."""

    def __init__(self) -> None:
        self._holding = 0
        self._pending: BaseException | None = None

    def handle(self, signum: int, frame: object) -> None:
        stop = KeyboardInterrupt() if signum == signal.SIGINT else Interrupted()
        if self._holding:
            self._pending = stop
            return
        raise stop

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            stop, self._pending = self._pending, None
            if stop is not None and not self._holding:
                raise stop

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle both signals while the block runs (main thread only: tests run the
        commands in other threads too, where signals cannot be received)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = [(s, signal.signal(s, self.handle)) for s in (signal.SIGINT, signal.SIGTERM)]
        try:
            yield
        finally:
            for signum, handler in previous:
                signal.signal(signum, handler)


#: The process's one handler (signal handlers are per process).
SIGNALS: Final = Signals()

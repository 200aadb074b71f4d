"""What the blocking transport's I/O thread waits for: its wake-up socket, and the
connection's socket for the events it wants.

A caller that waits for an answer reads the socket itself (the read-through, see
:meth:`stompy._transports.blocking.IOThread.wait`). Were the I/O thread to watch the
socket for reading meanwhile, the same bytes would wake both threads: one reads and
routes them, the other wakes for nothing, and when the I/O thread came first the
caller waited for it and then for a poke. So while a caller reads, the I/O thread
stands aside: the caller takes the reading out of the I/O thread's watch, under the
connection's lock, without waking it, and the reading is given back when no caller
reads any more (see ``IOThread.wait``). Standing aside, the I/O thread still wakes for
the peer's end of stream (``EPOLLRDHUP``) and a hang-up.

That needs a watch that one thread may change while another waits in it, with effect
at once: an ``epoll`` set (Linux: ``epoll_ctl`` on a set another thread waits in is
safe, and a change to a socket that is readable already wakes the waiter, so no
bytes are left unseen). :func:`watch_for` makes one where it can (its
:attr:`~Watch.shared` is then true); elsewhere a :mod:`selectors` selector, which only
the I/O thread changes, and the I/O thread keeps reading beside the caller as before.
"""

from __future__ import annotations

import contextlib
import select
import selectors
import socket
from typing import Final

__all__ = ("READ", "WRITE", "Watch", "watch_for")

#: The events a watch is asked for and reports, as :mod:`selectors` names them.
READ: Final = selectors.EVENT_READ
WRITE: Final = selectors.EVENT_WRITE
_EPOLLIN: Final = getattr(select, "EPOLLIN", 0)
#: The peer shut its side (a FIN): what a watch standing aside still wakes for.
_EPOLLRDHUP: Final = getattr(select, "EPOLLRDHUP", 0)
#: The bits :meth:`Watch.stand_aside` flips: the bytes' wake-up for the end's.
_ASIDE_FLIP: Final = _EPOLLIN | _EPOLLRDHUP


class Watch:
    """The I/O thread's wait over ``wake`` (drained whenever it is readable) and
    ``sock`` (watched for what :meth:`watch` says; at first, nothing)."""

    def __init__(self, wake: socket.socket, sock: socket.socket) -> None:
        self._wake = wake
        self._sock = sock
        #: Whether :meth:`stand_aside` may be called by another thread while the I/O
        #: thread waits in :meth:`wait`, with effect at once.
        self.shared = False
        #: The events the I/O thread wants watched on the socket.
        self.events = 0

    def watch(self, events: int) -> None:
        """Watch the socket for ``events`` (:data:`READ`, :data:`WRITE`; 0: none)."""
        raise NotImplementedError

    def stand_aside(self, aside: bool) -> None:
        """Leave the reading to a caller (``aside``), or take it back: while aside,
        the socket's bytes do not end a :meth:`wait`, but its end (a FIN, a hang-up)
        does. Only a :attr:`shared` watch."""
        raise NotImplementedError

    def wait(self, timeout: float | None) -> int:
        """Wait at most ``timeout`` seconds (``None``: no limit) for a wake-up or an
        event on the socket; the socket's events that came (a hang-up or an error
        counts as both)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            self._wake.recv(4096)


class _Epoll(Watch):
    """An ``epoll`` set: a watch other threads may change (see the module's text)."""

    def __init__(self, wake: socket.socket, sock: socket.socket) -> None:
        super().__init__(wake, sock)
        self.shared = True
        self._epoll = select.epoll()
        self._epoll.register(wake.fileno(), select.EPOLLIN)
        self._fd = sock.fileno()
        self._aside = False
        self._mask = -1  # the mask the set has for the socket; -1: not in the set

    def watch(self, events: int) -> None:
        if events != self.events:
            self._set(events, self._aside)

    def stand_aside(self, aside: bool) -> None:
        # _set(self.events, aside), for the one bit that changes: a caller's read-through
        # does this twice per round trip.
        if aside == self._aside:
            return
        mask = self._mask
        if mask >= 0 and self.events & READ:  # (not in the set: nothing to change)
            mask ^= _ASIDE_FLIP  # EPOLLIN out and EPOLLRDHUP in, or back
            self._epoll.modify(self._fd, mask)
            self._mask = mask
        self._aside = aside

    def _set(self, events: int, aside: bool) -> None:
        """Change the set for ``events`` and ``aside``; on an error, nothing changed."""
        reading = (_EPOLLRDHUP if aside else _EPOLLIN) if events & READ else 0
        mask = reading | (select.EPOLLOUT if events & WRITE else 0)
        if not events:
            # Out of the set when the I/O thread wants nothing (a backlog holds reading):
            # a hang-up would be reported still, again and again.
            if self._mask >= 0:
                self._epoll.unregister(self._fd)
            mask = -1
        elif self._mask < 0:
            self._epoll.register(self._fd, mask)
        elif mask != self._mask:
            # Standing aside, the socket stays in the set for its end only (a cheaper
            # change than out and in again): a FIN or a hang-up still wakes the I/O
            # thread, which reads it as before.
            self._epoll.modify(self._fd, mask)
        self._mask = mask
        self.events = events
        self._aside = aside

    def wait(self, timeout: float | None) -> int:
        ready = 0
        for fd, event in self._epoll.poll(-1 if timeout is None else timeout):
            if fd != self._fd:
                self._drain()
            else:
                if event & (select.EPOLLIN | _EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                    ready |= READ
                if event & (select.EPOLLOUT | select.EPOLLHUP | select.EPOLLERR):
                    ready |= WRITE
        return ready

    def close(self) -> None:
        self._epoll.close()


class _Selector(Watch):
    """A :mod:`selectors` selector (``kqueue``, ``poll``, ``select``): only the I/O
    thread changes it."""

    def __init__(self, wake: socket.socket, sock: socket.socket) -> None:
        super().__init__(wake, sock)
        self._selector = selectors.DefaultSelector()
        self._selector.register(wake, READ)

    def stand_aside(self, aside: bool) -> None:
        raise NotImplementedError("a selector is not changed from another thread")

    def watch(self, events: int) -> None:
        watched = self.events
        if events != watched:
            if not watched:
                self._selector.register(self._sock, events)
            elif not events:
                self._selector.unregister(self._sock)
            else:
                self._selector.modify(self._sock, events)
            self.events = events

    def wait(self, timeout: float | None) -> int:
        ready = 0
        for key, events in self._selector.select(timeout):
            if key.fileobj is self._sock:
                ready = events
            else:
                self._drain()
        return ready

    def close(self) -> None:
        self._selector.close()


def watch_for(wake: socket.socket, sock: socket.socket) -> Watch:
    """The I/O thread's watch over ``wake`` and ``sock``: a shared one where the
    platform has it (``epoll``)."""
    if hasattr(select, "epoll"):
        return _Epoll(wake, sock)
    return _Selector(wake, sock)

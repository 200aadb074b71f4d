"""A plain TCP connection's socket, read and written by the anyio transport itself.

anyio's own socket stream costs a round trip more than the socket does: on asyncio it
is a transport and a protocol whose reading is resumed and paused around every receive
(two ``epoll_ctl`` calls), and a write there, as on trio, always lets the other tasks
run once, even when the socket took every byte at once. :class:`RawSocketStream` holds
a duplicate of the connection's socket (non-blocking) and waits for it with anyio's
``wait_readable()`` and ``wait_writable()``: a receive is a wait and a ``recv()``, a
send that the socket takes at once is a ``send()`` and nothing else, and
:meth:`RawSocketStream.send_now` lets a caller write without awaiting at all.

Only for plain TCP (a TLS stream keeps anyio's stream, whose SSL object reads and
writes for it), and only with an anyio that has those waits (4.7 and later);
:func:`direct` says which. anyio's stream is kept, idle, for the connection's life and
closed with it: on asyncio its transport owns the original descriptor (a transport's
descriptor cannot be waited on directly, hence the duplicate).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import anyio.abc

__all__ = ("RawSocketStream", "direct", "running_backend")

_wait_readable: Final[Callable[[socket.socket], Awaitable[None]] | None] = getattr(
    anyio, "wait_readable", None
)
_wait_writable: Final[Callable[[socket.socket], Awaitable[None]] | None] = getattr(
    anyio, "wait_writable", None
)
_notify_closing: Final[Callable[[socket.socket], None] | None] = getattr(
    anyio, "notify_closing", None
)


def running_backend() -> Any:
    """anyio's backend class for the running event loop (``None`` if this anyio has no
    such lookup): what ``anyio.current_time()``, ``anyio.Event()`` and
    ``anyio.wait_readable()`` look up at each call (sniffio, the current task), a few
    microseconds a time, several times per round trip. Private to anyio, hence the
    fallback."""
    try:
        from anyio._core._eventloop import get_async_backend
    except ImportError:  # pragma: no cover - another anyio
        return None
    return get_async_backend()


def direct(stream: anyio.abc.ByteStream) -> anyio.abc.ByteStream:
    """``stream`` read and written through its socket (a :class:`RawSocketStream`) when
    it is a plain TCP socket stream and this anyio can wait for a socket; else
    ``stream`` itself."""
    if _wait_readable is None or _wait_writable is None or _notify_closing is None:
        return stream
    if not isinstance(stream, anyio.abc.SocketStream):  # a TLS stream, say
        return stream
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    dup = getattr(raw, "dup", None)  # asyncio's TransportSocket and trio's socket have it
    if dup is None or getattr(raw, "type", None) != socket.SOCK_STREAM:
        return stream
    sock: socket.socket = dup()
    try:
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    backend = running_backend()
    readable = getattr(backend, "wait_readable", _wait_readable)
    writable = getattr(backend, "wait_writable", _wait_writable)
    return RawSocketStream(sock, stream, readable, writable)


class RawSocketStream(anyio.abc.ByteStream):
    """A TCP connection read and written through a non-blocking socket of its own.

    A receive waits for the socket to be readable, then reads what is there; a send
    writes what the socket takes and waits for room only for the rest (it is a
    checkpoint only then). :meth:`aclose` wakes a task waiting on the socket (with
    :class:`anyio.ClosedResourceError`), closes it, then anyio's stream it came from.
    Errors are the socket's (``OSError``), :class:`anyio.EndOfStream` at the end of
    the stream, :class:`anyio.ClosedResourceError` once closed.
    """

    def __init__(
        self,
        sock: socket.socket,
        stream: anyio.abc.ByteStream,
        wait_readable: Callable[[socket.socket], Awaitable[None]],
        wait_writable: Callable[[socket.socket], Awaitable[None]],
    ) -> None:
        self.sock = sock
        self._stream = stream  # anyio's, idle: closed with this one
        self._closed = False
        self._wait_readable = wait_readable
        self._wait_writable = wait_writable

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        attributes: dict[Any, Callable[[], Any]] = {**self._stream.extra_attributes}
        attributes[anyio.abc.SocketAttribute.raw_socket] = lambda: self.sock
        return attributes

    def send_now(self, data: bytes | bytearray | memoryview) -> int:
        """Write what the socket takes of ``data`` now, without waiting: the number of
        bytes written (0 when it would block). Raises ``OSError`` when the connection
        failed, :class:`anyio.ClosedResourceError` once closed."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            return self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return 0

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while True:
            sent = self.send_now(view)
            if sent == len(view):
                return
            view = view[sent:]
            await self._wait_writable(self.sock)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        sock = self.sock
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            await self._wait_readable(sock)
            try:
                data = sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                continue  # woken for nothing: wait again
            if not data:
                raise anyio.EndOfStream
            return data

    async def send_eof(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self.sock.shutdown(socket.SHUT_WR)

    async def aclose(self) -> None:
        try:
            if not self._closed:
                self._closed = True
                assert _notify_closing is not None
                _notify_closing(self.sock)  # a task waiting on it raises ClosedResourceError
                self.sock.close()
        finally:
            await self._stream.aclose()

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

On asyncio the stream also has a :class:`ReadTurn`: the socket read by the event loop's
own callback, for whichever task waits for bytes, the connection's reader task or a call
waiting for its answer (the *read-through*): the bytes wake exactly that task, and
handing the turn from one to the other wakes nobody. On trio a task can only wait for a
socket itself (``wait_readable``), one task at a time: there the stream has a
:class:`SocketTurn`, the socket's wait lent by the reader task to the calls it answered.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import anyio.abc

__all__ = (
    "RECV_SIZE",
    "RawSocketStream",
    "ReadTurn",
    "SocketTurn",
    "direct",
    "loop_clock",
    "running_backend",
)

#: The most bytes one read takes. Under glibc's threshold for allocating with ``mmap``
#: (128 KiB): ``sock.recv(n)`` makes a bytes object of ``n`` first and shrinks it to
#: what came, so a 256 KiB read cost an ``mmap``, an ``mremap`` and a ``munmap`` (and two
#: page faults) per read, a round trip's answer of 50 bytes included.
RECV_SIZE: Final = 64 * 1024

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


def loop_clock(backend: Any) -> Callable[[], float]:
    """The running event loop's own clock, what ``anyio.current_time()`` reads through
    its backend: ``loop.time`` on asyncio (``time.monotonic`` itself where that is
    asyncio's own, which returns just that), the trio clock's ``current_time`` (a test's
    ``MockClock`` too); the backend's lookup for another. Read a few times per round
    trip, it saves the lookups' calls."""
    name = getattr(backend, "__name__", "")
    if name == "AsyncIOBackend":
        loop = asyncio.get_running_loop()
        if getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time:
            # What asyncio's own loop.time() returns, without its Python call.
            return time.monotonic
        return loop.time
    if name == "TrioBackend":
        import trio.lowlevel

        return trio.lowlevel.current_clock().current_time
    clock: Callable[[], float] = getattr(backend, "current_time", anyio.current_time)
    return clock


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
    raw_stream = RawSocketStream(sock, stream, readable, writable)
    loop = asyncio.events._get_running_loop()
    if getattr(backend, "__name__", "") == "TrioBackend":
        try:
            raw_stream.turn = SocketTurn(sock)
        except BaseException:
            sock.close()
            raise
    elif loop is not None and getattr(backend, "__name__", "") == "AsyncIOBackend":
        try:
            loop.add_reader(sock.fileno(), _nothing)
        except NotImplementedError:  # a proactor loop (Windows): it has no add_reader
            pass
        else:
            loop.remove_reader(sock.fileno())
            raw_stream.turn = ReadTurn(sock, loop)
    return raw_stream


def _nothing() -> None:
    pass


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ReadTurn:
    """asyncio: a socket read by the event loop's callback for one waiting task at a time.

    A task that waits for bytes registers a future: the reader task's (:meth:`receive`)
    or a call's (:attr:`caller`, which goes first). While one is registered the socket
    is watched; when it is readable the callback reads it (so a callback left over from
    a loop turn finds nothing and wakes nobody), keeps the bytes in :attr:`inbound` for
    whoever takes them next (:meth:`take`, in order: each taker feeds them to the engine
    at once, without awaiting) and wakes the call, else the reader. With nobody
    registered the socket is not watched, and TCP pushes back on the broker. The end of
    the stream, or a failed read, is kept in :attr:`end` and wakes both; it is the
    reader task's to judge.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self._sock = sock
        self._loop = loop
        self._fd = sock.fileno()
        self._armed = False
        #: Bytes read and not yet fed to the engine, oldest first.
        self.inbound: list[bytes] = []
        #: :class:`anyio.EndOfStream`, the read's ``OSError`` or, once closed,
        #: :class:`anyio.ClosedResourceError`: nothing more will be read.
        self.end: BaseException | None = None
        #: The future of the call reading through (``None``: none); set when bytes came.
        self.caller: asyncio.Future[None] | None = None
        self._reader: asyncio.Future[None] | None = None
        self._poked = False

    def _readable(self) -> None:
        caller, reader = self.caller, self._reader
        if caller is None and reader is None:
            self.disarm()  # nobody waits for bytes
            return
        try:
            data = self._sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._ended(exc)
            return
        if not data:
            self._ended(anyio.EndOfStream())
            return
        self.inbound.append(data)
        waiter = caller if caller is not None else reader  # _wake() written out: per read
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def set(self) -> None:
        """Wake the call reading through (:attr:`caller`), if one does: the turn is its
        wait's wake-up (a :class:`~stompy._transports.asynchronous.Wake`), registered by
        that call alone and forgotten before it gives the turn up."""
        caller = self.caller
        if caller is not None and not caller.done():
            caller.set_result(None)

    def _ended(self, end: BaseException) -> None:
        if self.end is None:
            self.end = end
        self.disarm()
        _wake(self.caller)
        _wake(self._reader)

    def arm(self) -> None:
        """Watch the socket (again), unless it ended."""
        if not self._armed and self.end is None:
            self._loop.add_reader(self._fd, self._readable)
            self._armed = True

    def disarm(self) -> None:
        """Stop watching the socket (until someone waits again)."""
        if self._armed:
            self._armed = False
            self._loop.remove_reader(self._fd)

    @property
    def free(self) -> bool:
        """Whether a call may read through: none does, and the stream goes on."""
        return self.caller is None and self.end is None

    def take(self) -> bytes:
        """The bytes read and not yet taken (``b""``: none)."""
        inbound = self.inbound
        if not inbound:
            return b""
        data = inbound[0] if len(inbound) == 1 else b"".join(inbound)
        inbound.clear()
        return data

    def poke(self) -> None:
        """Wake the reader task: :meth:`receive` returns, with ``None`` if no bytes came."""
        self._poked = True
        _wake(self._reader)

    async def receive(self) -> bytes | None:
        """The reader task's wait: the next bytes, ``None`` when :meth:`poke` woke it
        without any. Raises what :attr:`end` holds (:class:`anyio.EndOfStream` at the
        end of the stream)."""
        while True:
            data = self.take()
            if data:
                self._poked = False
                return data
            if self._poked:
                self._poked = False
                return None
            if self.end is not None:
                raise self.end
            waiter = self._reader = self._loop.create_future()
            self.arm()
            try:
                await waiter
            finally:
                self._reader = None

    def close(self) -> None:
        """Stop watching; a waiting task wakes and finds :class:`anyio.ClosedResourceError`."""
        self._ended(anyio.ClosedResourceError())


class SocketTurn:
    """trio: the socket's wait, lent by the reader task to the calls waiting for answers.

    On trio only a task can wait for a socket, and one at a time. The reader task waits
    there, but after it routed an answer to a waiting call it *lends* the socket
    (:meth:`lend`) and parks off it: the call, woken, may then wait on the socket itself
    for its next answer (:attr:`free`, :meth:`read`; the *read-through*), which wakes that
    call alone where it woke the reader task and then the call, two turns of the
    scheduler. A call that waited for an answer hands the socket back when it is done or
    waits on anything else (:meth:`hand_back`): the reader task is rescheduled, and goes
    back to the socket unless a call took it again before it ran (then it parks again,
    and that call hands back in turn). So in a run of calls the reader's step comes while
    the next answer is under way, not between an answer and its caller.

    The wait of a reading call is interrupted by :meth:`interrupt` (its deadline, a
    change of the connection): the socket's waiters are told it closes
    (``trio.lowlevel.notify_closing``, the one way to end another task's socket wait
    without a cancel scope, which would cost each call as much again as the rest of its
    wait), on a duplicate of the socket that only reads wait on, so a write waiting for
    room is not woken. The end of the stream or a failed read found by a call is kept in
    :attr:`end` and handed to the reader task (:meth:`poke`), whose verdict it is.
    """

    def __init__(self, sock: socket.socket) -> None:
        import trio.lowlevel

        #: The socket that reads wait on: a duplicate, so that :meth:`interrupt` wakes no
        #: write (:meth:`read`'s parts: ``await turn.wait_readable(turn.fd)`` with
        #: :attr:`waiting` set, then :meth:`read_now`).
        self.sock = sock.dup()
        #: Its descriptor, what the waits are given (trio asks an object for its
        #: ``fileno()`` at each wait). Waited on only after :attr:`end` was looked at,
        #: with no await between: :meth:`close` sets it before the socket closes, so no
        #: wait is for a closed (or reused) descriptor.
        self.fd = self.sock.fileno()
        #: trio's wait for a readable socket; it raises :attr:`closed_error` when the
        #: wait was interrupted or the socket closed.
        self.wait_readable = trio.lowlevel.wait_readable
        self.closed_error = trio.ClosedResourceError
        self._reschedule = trio.lowlevel.reschedule
        self._notify_closing = trio.lowlevel.notify_closing
        self._park = trio.lowlevel.wait_task_rescheduled
        self._current_task = trio.lowlevel.current_task
        self._succeeded = trio.lowlevel.Abort.SUCCEEDED
        #: The socket is the calls' (the reader task parks off it until handed back).
        self.lent = False
        #: A call waits on the socket (or reads it) now.
        self.reading = False
        #: :class:`anyio.EndOfStream`, the read's ``OSError`` or, once closed,
        #: :class:`anyio.ClosedResourceError`: nothing more will be read.
        self.end: BaseException | None = None
        self._parked: Any = None  # the reader task, parked off the socket
        self._waking = False  # it was rescheduled and has not run yet
        #: A task waits on the socket (set around ``wait_readable``, with
        #: :attr:`interrupted` cleared after it).
        self.waiting = False
        #: :meth:`interrupt` ended the wait under way.
        self.interrupted = False
        #: The call reading through was woken (:meth:`set`); cleared by each call before
        #: it registers the turn as its wait's wake-up.
        self.woken = False
        self._poked = False

    @property
    def free(self) -> bool:
        """Whether a call may read through now: the reader task lent the socket (or was
        handed it back and has not yet run), no other call reads, the stream goes on."""
        return (self.lent or self._waking) and not self.reading and self.end is None

    def lend(self) -> None:
        """The reader task's: park off the socket at the next :meth:`receive`, until a
        call hands it back."""
        self.lent = True

    def hand_back(self) -> None:
        """A call's, when it is done waiting: the socket goes back to the reader task (it
        is rescheduled) unless another call reads it."""
        if self.lent and not self.reading:
            self.lent = False
            parked = self._parked  # _wake_reader() written out: once per answer
            if parked is not None:
                self._parked = None
                self._waking = True
                self._reschedule(parked)

    def poke(self) -> None:
        """Wake the reader task: :meth:`receive` returns ``None`` (a call that read hands
        it what to judge)."""
        self._poked = True
        self.lent = False
        self._wake_reader()

    def _wake_reader(self) -> None:
        parked = self._parked
        if parked is not None:
            self._parked = None
            self._waking = True
            self._reschedule(parked)

    def set(self) -> None:
        """Wake the call reading through: it stops at its next look (:attr:`woken`), and
        its wait on the socket, if one is under way, ends (mostly none is: the answer was
        read by the call this wakes, which goes on from there). The turn is that wait's
        wake-up (a :class:`~stompy._transports.asynchronous.Wake`), registered by that
        call alone and forgotten before it hands the socket back."""
        if not self.woken:
            self.woken = True
            if self.reading and self.waiting:
                self.interrupt()

    def interrupt(self) -> None:
        """End the wait of the task waiting on the socket (:meth:`read` returns ``None``)."""
        if self.waiting and not self.interrupted:
            self.interrupted = True
            self._notify_closing(self.sock)

    async def read(self) -> bytes | None:
        """Wait until the socket is readable, then read it: the bytes, ``None`` when
        :meth:`interrupt` ended the wait. Raises :attr:`end` (:class:`anyio.EndOfStream`
        at the end of the stream, the read's ``OSError``), which it keeps.
        (:meth:`stompy._transports.asynchronous.TaskIO.read_in_turn` has it written
        out, one coroutine level less for each wait of a call.)"""
        fd = self.fd
        while True:
            if self.end is not None:
                raise self.end
            self.waiting = True
            try:
                await self.wait_readable(fd)
            except self.closed_error:
                if self.interrupted and self.end is None:
                    return None
                raise anyio.ClosedResourceError from None
            finally:
                self.waiting = self.interrupted = False
            data = self.read_now()
            if data is not None:
                return data
            # woken for nothing: wait again

    def read_now(self) -> bytes | None:
        """Read the socket, found readable: the bytes, ``None`` if there were none after
        all. Raises, and keeps in :attr:`end`, :class:`anyio.EndOfStream` at the end of
        the stream and the read's ``OSError``."""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            self.end = exc
            raise
        if not data:
            self.end = anyio.EndOfStream()
            raise self.end
        return data

    async def receive(self) -> bytes | None:
        """The reader task's wait: off the socket while it is lent, then the next bytes
        (:meth:`read`); ``None`` when :meth:`poke` woke it. Raises what :meth:`read`
        raises."""
        task: Any = None  # this task, asked for once: it parks once per answer, mostly here
        while True:
            if self._poked:
                self._poked = False
                return None
            if not self.lent:
                data = await self.read()
                if data is not None:
                    return data
                continue  # interrupted (a close on the way): look again
            if task is None:
                task = self._current_task()
            self._parked = task
            try:
                await self._park(self._unpark)
            finally:
                self._waking = False

    def _unpark(self, _: object) -> Any:
        self._parked = None  # cancelled: nobody reschedules it any more
        return self._succeeded

    def close(self) -> None:
        """Nothing more is read: a waiting task wakes and finds
        :class:`anyio.ClosedResourceError`, the reader task too."""
        if self.end is None:
            self.end = anyio.ClosedResourceError()
        self._notify_closing(self.sock)
        self._wake_reader()
        self.sock.close()


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
        #: On asyncio, the socket read by the loop's callback (see :class:`ReadTurn`);
        #: :meth:`receive` is then not used while the turn is in use. On trio, the
        #: socket's wait taken in turns (:class:`SocketTurn`).
        self.turn: ReadTurn | SocketTurn | None = None
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
        if isinstance(self.turn, ReadTurn):
            self.turn.disarm()  # anyio's wait below replaces the loop's callback
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
                if self.turn is not None:
                    self.turn.close()
                assert _notify_closing is not None
                _notify_closing(self.sock)  # a task waiting on it raises ClosedResourceError
                self.sock.close()
        finally:
            await self._stream.aclose()

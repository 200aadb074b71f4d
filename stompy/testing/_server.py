"""The broker's anyio transport: it moves bytes and keeps time, and decides nothing.

Every connection is one :class:`~stompy.testing._core.connection.ClientConnection` (the
broker's side of it, without I/O) served by three tasks in one task group:

* the reader feeds received bytes to the client connection; it stops reading while
  its unsent output is over its bound (a client that sends without reading
  gets TCP backpressure) and while the connection is paused;
* the writer is the only task that writes: it drains the output, and once the connection
  is closing (ERROR or DISCONNECT receipt queued) it flushes, half-closes
  and waits for the client's EOF, so the last frame is not lost to a reset;
* the timer sleeps until the connection's next deadline (CONNECT timeout, heart-beats)
  and bounds the closing: a client that neither reads nor closes is cut off after
  ``LINGER`` seconds.

Any anyio byte stream can be served (:meth:`AsyncBroker.serve_stream`), so another
framing only needs to present itself as one: with ``serve(websocket=True)`` a second
listener runs the WebSocket handshake and serves a
:class:`~stompy._engine.websocket.WebSocketStream` over the same store (same queues, same
connections), writing one STOMP frame per WebSocket message.

On asyncio a plain TCP connection is served without tasks (:class:`_LoopConnection`):
the event loop calls it with the bytes read, and it acts on them and writes the
answers in the same call, the same three jobs as the tasks' and with the same
outcomes. anyio's stream pauses and resumes its transport's reading around each
receive and lets the other tasks run after each send, and each frame woke the
writer task, which took a turn of the loop: that was most of the broker's time per
frame. TLS, WebSocket, trio and :meth:`AsyncBroker.serve_stream` keep the tasks.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl as _ssl
import sys
import time
import warnings
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSListener
from typing_extensions import Unpack

from stompy._checks import check_type, wrong_type
from stompy._engine.keywords import check, keys
from stompy._transports.rawsocket import running_backend
from stompy._transports.signal import Signal
from stompy.errors import StompError
from stompy.testing._core.records import (
    AWAITING,
    CONNECTED,
    BrokerConfig,
    BrokerOptions,
    ConnectionState,
)
from stompy.testing._core.store import MessageStore
from stompy.testing._shared import (
    CHUNK,
    STREAM_ERRORS,
    WRITE_CHUNK,
    check_listener,
    listen,
    peer_name,
    serving_task_group,
    wait_until,
    write_chunks,
)

if TYPE_CHECKING:
    from stompy._engine.websocket import WebSocketStream
    from stompy.testing._core.connection import ClientConnection
    from stompy.testing._core.records import BrokerStats, ConnectionInfo

__all__ = ("BROKER_OPTIONS", "LINGER", "AsyncBroker", "serve", "tls_context")

logger = logging.getLogger("stompy.testing")

#: Seconds a closing connection gets to flush its last frame and see the client's EOF.
LINGER: Final = 2.0

#: The keywords :func:`serve` and :func:`~stompy.testing.run_broker` pass on to
#: :class:`BrokerConfig`; any other is refused with a ``TypeError`` naming the call.
BROKER_OPTIONS: Final = keys(BrokerOptions)
#: ``accept()``'s errors while the process (or the system) is out of file descriptors
#: or socket memory: the broker waits for some to be freed, and serves on meanwhile.
_OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Seconds between attempts to accept while out of descriptors. The connections that
#: wait meanwhile are in the listening socket's backlog.
ACCEPT_RETRY: Final = 0.1
#: What :meth:`AsyncBroker.serve_stream` calls on its stream.
_STREAM_METHODS: Final = ("receive", "send", "aclose")


def _log_connected(client: ClientConnection) -> None:
    logger.info(
        "%s: CONNECTED with STOMP %s, login %r, host %r, heart-beats %s",
        client.id,
        client.version,
        client.login,
        client.host,
        client.heartbeats,
    )


class _Connection:
    """One served stream and the broker's side of it."""

    def __init__(
        self, broker: AsyncBroker, stream: anyio.abc.ByteStream, client: ClientConnection
    ) -> None:
        self.broker = broker
        self.stream = stream
        self.client = client
        self.scope = anyio.CancelScope()
        #: The client closed its side (or the stream broke).
        self.eof = False
        #: Ended by :meth:`AsyncBroker.drop_all_connections`.
        self.dropped = False
        self._changed = Signal()

    def notify(self) -> None:
        """Wake every task of this connection waiting in :meth:`wait`."""
        self._changed.pulse()

    def cut(self) -> None:
        """End the connection now, without a word to the client."""
        self.scope.cancel()

    async def wait(self, timeout: float | None = None) -> None:
        if timeout is None:
            await self._changed.wait()
        else:
            with anyio.move_on_after(timeout):
                await self._changed.wait()

    async def run(self) -> None:
        client = self.client
        with self.scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read)
                tg.start_soon(self._time)
                await self._write()
                if not self.eof:
                    try:
                        await self.stream.send_eof()
                    except STREAM_ERRORS:
                        self.eof = True
                    except NotImplementedError:
                        # A TLS stream cannot half-close: the client, which has what
                        # it waited for, closes it (the timer task bounds the wait).
                        pass
                while not self.eof:  # lingering, bounded by the timer task
                    await self.wait()
                tg.cancel_scope.cancel()
        if self.dropped:
            client.close("dropped by the broker")

    async def _read(self) -> None:
        client = self.client
        while True:
            while not client.wants_data:
                if client.state is ConnectionState.CLOSED:
                    return
                await self.wait()
            try:
                data = await self.stream.receive(CHUNK)
            except STREAM_ERRORS:
                data = b""
            if not data:
                self.eof = True
                if not client.finished:
                    client.receive_eof()
                self.notify()
                self.broker._wake()
                return
            was_waiting = client.state is ConnectionState.AWAITING_CONNECT
            before = client.next_deadline()
            client.receive_data(data, anyio.current_time())
            after = client.next_deadline()
            if after is not None and (before is None or after < before):
                self.notify()  # the timer sleeps until a later deadline, or none
            if was_waiting and client.state is ConnectionState.CONNECTED:
                _log_connected(client)
            self.broker._wake()

    async def _write(self) -> None:
        client = self.client
        ws = self.broker._websocket_stream(self.stream)
        while True:
            if not client.paused:
                size = client.buffered
                if ws is not None:
                    # Over WebSocket each frame is a message of its own.
                    frames = client.frames_to_send(anyio.current_time())
                else:
                    frames = client.buffers_to_send(anyio.current_time())
                self.broker._wake()
                if frames:
                    try:
                        if ws is not None:
                            await ws.send_frames(frames)
                        elif size <= WRITE_CHUNK:
                            await self.stream.send(b"".join(frames))
                        else:
                            # A slice at a time: the stream's transport copies what
                            # the socket does not take, shared bodies included.
                            for chunk in write_chunks(frames):
                                await self.stream.send(cast(bytes, chunk))
                    except STREAM_ERRORS:
                        self.eof = True
                        client.close("connection lost")
                        self.broker._wake()
                        return
                    self.notify()
                    continue
                if client.finished:
                    return
            await self.wait()

    async def _time(self) -> None:
        client = self.client
        while not client.finished:
            deadline = client.next_deadline()
            now = anyio.current_time()
            if deadline is not None and deadline <= now:
                client.handle_timer(now)
                self.broker._wake()
                continue
            await self.wait(None if deadline is None else deadline - now)
        await anyio.sleep(LINGER)
        self.scope.cancel()


class _LoopConnection(asyncio.BufferedProtocol):
    """A plain TCP connection on asyncio, served by the event loop's callbacks.

    The jobs of :class:`_Connection`'s three tasks, each done where the loop calls:
    the bytes received are fed to the client connection, and every connection with
    output writes it at once (:meth:`notify`, from the broker's ``_wake``). The loop
    reads into a buffer of ``CHUNK`` bytes that the broker's loop connections share
    (each read is taken from it before the next one): the loop's own reads, of 256 KiB
    into a new bytes object each, cost glibc an ``mmap``, an ``mremap`` and a
    ``munmap`` per read, and two page faults, a 50-byte frame's too. Reading
    pauses while the client connection wants no data and writing while the
    transport's buffer is full (TCP backpressure both ways); a timer handle is armed
    for the connection's next deadline. Once the connection is closing, its output
    is written, its side half-closed, and the client's EOF awaited, for ``LINGER``
    seconds at most. :attr:`ended` is done then (with the exception of a bug).
    """

    def __init__(
        self,
        broker: AsyncBroker,
        client: ClientConnection,
        loop: asyncio.AbstractEventLoop,
        read_buffer: memoryview,
    ) -> None:
        self.broker = broker
        self.client = client
        #: Where the loop reads (shared: see the class docstring).
        self._read_buffer = read_buffer
        #: Ended by :meth:`AsyncBroker.drop_all_connections`.
        self.dropped = False
        #: Done when the connection is over (an exception: a bug ended it).
        self.ended: asyncio.Future[None] = loop.create_future()
        self._loop = loop
        #: The loop's clock: asyncio's own loops read ``time.monotonic`` in their
        #: ``time()``, read here without that method's call (twice a frame).
        own_time = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
        self._time: Callable[[], float] = time.monotonic if own_time else loop.time
        self._transport: asyncio.Transport | None = None
        #: Bytes received and not yet fed to the client connection (it wants none now).
        self._pending = b""
        #: The client closed its side (or the connection is lost).
        self._eof = False
        self._reading = True
        #: The transport's buffer is over its high-water mark.
        self._blocked = False
        #: Output taken and not yet handed to the transport, written a chunk at a
        #: time while it has room (it copies what the socket does not take: a
        #: client that never reads costs a chunk, not a copy of each body); the
        #: connection reads nothing meanwhile (as the tasks' writer holds what it
        #: sends, and its reader waits).
        self._held: deque[bytes | memoryview] = deque()
        #: Inside :meth:`notify` (a write can wake this connection again).
        self._settling = False
        self._half_closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._linger: asyncio.TimerHandle | None = None

    # -- the event loop's calls --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.notify()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._pending += self._read_buffer[:nbytes]  # a copy: the buffer is read again
        self.notify()

    def eof_received(self) -> bool:
        self._eof = True
        try:
            if not self.client.finished:
                self.client.receive_eof()
            self.broker._wake()
            self.notify()
        except Exception as exc:
            self._fail(exc)
        return True  # the broker's side stays open for its last frames

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._transport = None  # nothing more is written
        try:
            if not self.client.finished:
                self.client.receive_eof()
                self.broker._wake()
        except Exception as error:
            self._fail(error)
        self._end()

    def pause_writing(self) -> None:
        self._blocked = True

    def resume_writing(self) -> None:
        self._blocked = False
        held = self._held
        transport = self._transport
        while held and not self._blocked and transport is not None:
            transport.write(held.popleft())
        self.notify()

    # -- what the broker calls ---------------------------------------------------------

    def notify(self) -> None:
        """Write what the client connection has queued and act on the bytes received,
        a chunk at a time while it wants data; then read or not, time, and close as its
        state says. A bug (an exception) ends only this connection."""
        transport = self._transport
        if self._settling or transport is None or self.ended.done():
            return
        self._settling = True
        try:
            client = self.client
            broker = self.broker
            store = broker._store  # whose ``ready`` most wake-ups find empty: looked at first
            held = self._held  # drained here and as the transport has room again
            while True:
                while client.buffered and not client.paused and not held:
                    frames = client.buffers_to_send(self._time())
                    if store.ready:
                        broker._wake()
                    if not frames:
                        break
                    if not self._blocked:
                        if len(frames) == 1:
                            if len(frames[0]) <= WRITE_CHUNK:
                                transport.write(frames[0])
                                continue
                        elif sum(map(len, frames)) <= WRITE_CHUNK:
                            transport.write(b"".join(frames))
                            continue
                    held.extend(write_chunks(frames))
                    while held and not self._blocked:
                        transport.write(held.popleft())
                pending = self._pending
                if not pending or not client.wants_data or held:
                    break
                # Feed the client connection the next chunk of the bytes received (what
                # the tasks' reader reads at once: the output it makes is bounded alike).
                if len(pending) > CHUNK:
                    data, self._pending = pending[:CHUNK], pending[CHUNK:]
                else:
                    data, self._pending = pending, b""
                if client.state is AWAITING:
                    client.receive_data(data, self._time())
                    if client.state is CONNECTED:
                        _log_connected(client)
                else:
                    client.receive_data(data, self._time())
                if store.ready:
                    broker._wake()
            wants = client.wants_data and not self._pending and not held
            if wants != self._reading:
                self._reading = wants
                if wants:
                    transport.resume_reading()
                else:
                    transport.pause_reading()
            if client.state is not CONNECTED and client.finished:  # (connected: not)
                self._finish(transport)
                return
            deadline = client.next_deadline()
            if deadline is None:
                if self._timer is not None:
                    # Nothing to time (CONNECT came, no heart-beats, no frame half
                    # read): a timer left in the loop's heap until it fires (the
                    # CONNECT's deadline) costs each turn of the loop two clock reads.
                    self._timer.cancel()
                    self._timer = self._deadline = None
            elif self._deadline is None or deadline < self._deadline:
                # Only ever earlier: a timer that finds its deadline moved on re-arms.
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._loop.call_at(deadline, self._on_timer)
                self._deadline = deadline
        except Exception as exc:
            self._fail(exc)
        finally:
            self._settling = False

    def cut(self) -> None:
        """End the connection now, without a word to the client."""
        self._end()

    def stop(self) -> None:
        """Cancel the timers (the connection is over)."""
        for handle in (self._timer, self._linger):
            if handle is not None:
                handle.cancel()
        self._timer = self._linger = None

    # -- inside ------------------------------------------------------------------------

    def _finish(self, transport: asyncio.Transport) -> None:
        """The client connection is closing: half-close once its output is written,
        then wait for the client's EOF (bounded by ``LINGER``)."""
        if self._linger is None:
            self._linger = self._loop.call_later(LINGER, self._end)
        client = self.client
        if client.paused or self._held or client.buffered:
            return
        if self._eof:
            self._end()
        elif not self._half_closed:
            self._half_closed = True
            transport.write_eof()  # after what the transport still holds

    def _on_timer(self) -> None:
        self._timer = None
        self._deadline = None
        client = self.client
        try:
            now = self._time()
            deadline = client.next_deadline()
            if deadline is not None and deadline <= now and not client.finished:
                client.handle_timer(now)
                self.broker._wake()
            self.notify()
        except Exception as exc:
            self._fail(exc)

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if not self.ended.done():
            self.ended.set_exception(exc)


class AsyncBroker:
    """A running broker, as yielded by :func:`serve`.

    Its methods must be called from the event loop that runs it (for other threads,
    use :func:`~stompy.testing.run_broker`). The inspection and fault methods exist
    for tests: they look inside the broker and break things on purpose.
    """

    def __init__(
        self,
        store: MessageStore,
        host: str,
        port: int,
        *,
        tls: bool = False,
        ws_port: int | None = None,
    ) -> None:
        self._store = store
        #: The address the broker listens on, as given to :func:`serve`.
        self.host = host
        #: The real port (never 0).
        self.port = port
        #: Whether clients must speak TLS (``serve(ssl=...)``).
        self.tls = tls
        #: The real port of the WebSocket listener (``None`` without ``websocket=True``).
        self.ws_port = ws_port
        self._connections: dict[str, _Connection | _LoopConnection] = {}
        #: What the loop connections read into, one after the other (all run on the
        #: broker's event loop).
        self._read_buffer = memoryview(bytearray(CHUNK))

    @property
    def url(self) -> str:
        """``stomp://host:port`` (``stomp+ssl://`` with TLS) with the real port."""
        return self._url("stomp+ssl" if self.tls else "stomp", self.port)

    @property
    def ws_url(self) -> str | None:
        """``ws://host:port/ws`` (``wss://`` with TLS), or ``None`` without WebSocket.

        Any path is accepted; ``/ws`` is what RabbitMQ's Web-STOMP uses.
        """
        if self.ws_port is None:
            return None
        return self._url("wss" if self.tls else "ws", self.ws_port, "/ws")

    def _url(self, scheme: str, port: int, path: str = "") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{port}{path}"

    @property
    def config(self) -> BrokerConfig:
        return self._store.config

    # -- inspection --------------------------------------------------------------------

    def queue_depth(self, destination: str) -> int:
        """Messages waiting in a queue (not counting delivered, unacked ones)."""
        return self._store.queue_depth(destination)

    def unacked_count(self, destination: str | None = None) -> int:
        """Messages delivered and not yet acknowledged, for one destination or all."""
        return self._store.unacked_count(destination)

    @property
    def connections(self) -> tuple[ConnectionInfo, ...]:
        """A snapshot of every open connection (session id, login, version, ...)."""
        return self._store.connection_infos()

    @property
    def stats(self) -> BrokerStats:
        """A snapshot of the broker's counters."""
        return self._store.stats

    def destinations(self) -> tuple[str, ...]:
        """Destinations that currently hold messages or subscriptions."""
        return self._store.destinations()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` until it is true; raise :class:`TimeoutError` after ``timeout``."""
        await wait_until(predicate, timeout)

    # -- faults ------------------------------------------------------------------------

    async def drop_all_connections(self) -> int:
        """Cut every connection at once, without ERROR; return how many there were.

        Returns once they are gone: their unacked messages are back in their queues.
        """
        connections = list(self._connections.values())
        for connection in connections:
            connection.dropped = True
            connection.cut()
        with anyio.move_on_after(LINGER + 1.0):
            while any(c.client.id in self._connections for c in connections):
                await anyio.sleep(0.002)
        return len(connections)

    async def reset(self) -> None:
        """Make the broker as a new one, for the next test, on the same address.

        Cuts every connection (as :meth:`drop_all_connections`), then drops every
        stored message (queues, topic backlogs, NACKed and dead-lettered messages) and
        zeroes :attr:`stats`. The configuration stays. Returns once done.
        """
        await self.drop_all_connections()
        self._store.reset()  # also ends a connection that came in meanwhile
        for connection in list(self._connections.values()):
            connection.notify()

    def _select(self, session: str | None) -> list[_Connection | _LoopConnection]:
        if session is None:
            return list(self._connections.values())
        check_type("session", session, str, "a session id (a str) or None")
        connection = self._connections.get(session)
        if connection is None:
            raise KeyError(f"no open connection with session id {session!r}")
        return [connection]

    def pause(self, session: str | None = None) -> None:
        """Stop reading from and writing to one connection (``None``: all of them).

        A paused connection sends no heart-beats and takes no deliveries, and the
        broker does not time it out: the way to test a client's heart-beat checks.
        Raises :class:`KeyError` for an unknown session id.
        """
        for connection in self._select(session):
            connection.client.pause()
            connection.notify()

    def resume(self, session: str | None = None) -> None:
        """Undo :meth:`pause`; heart-beat clocks restart now."""
        now = anyio.current_time()
        for connection in self._select(session):
            connection.client.resume(now)
            connection.notify()
        self._wake()

    def send_raw(self, session: str, data: bytes) -> None:
        """Write ``data`` to a client exactly as given (after what is already queued).

        Raises :class:`KeyError` for an unknown session id.
        """
        check_type("session", session, str, "a session id (a str)")
        (connection,) = self._select(session)
        connection.client.send_raw(data)
        self._wake()

    # -- serving -----------------------------------------------------------------------

    def _wake(self) -> None:
        store = self._store
        if not store.ready:
            return  # as most calls find it: one look, not a call
        for client in store.pop_ready():
            connection = self._connections.get(client.id)
            if connection is not None:
                connection.notify()

    async def serve_stream(self, stream: anyio.abc.ByteStream, peer: str = "") -> None:
        """Serve one client over ``stream`` until it ends; closes the stream.

        Never raises, except for cancellation: a bug while serving is logged, counted
        in :attr:`stats` and ends only this connection. A ``stream`` without anyio's
        byte stream methods (``receive``, ``send``, ``aclose``) or a ``peer`` that is no
        str is a :class:`TypeError`, before anything is served.
        """
        if not all(callable(getattr(stream, name, None)) for name in _STREAM_METHODS):
            raise wrong_type("stream", "an anyio byte stream", stream)
        client = self._store.open_connection(anyio.current_time(), peer)
        connection = _Connection(self, stream, client)
        self._connections[client.id] = connection
        logger.info("%s: connection from %s", client.id, peer or "?")
        try:
            await connection.run()
        except Exception:
            self._store.record_internal_error()
            logger.exception("%s: internal error", client.id)
        finally:
            client.close("closed")
            del self._connections[client.id]
            self._wake()
            with anyio.CancelScope(shield=True):
                with suppress(*STREAM_ERRORS):
                    await stream.aclose()
            logger.info("%s: closed (%s)", client.id, client.close_reason)

    async def _serve_socket(self, stream: anyio.abc.ByteStream) -> None:
        await self.serve_stream(stream, peer_name(stream))

    async def _serve_loop_socket(self, sock: socket.socket, address: object) -> None:
        """Serve one accepted TCP socket with the asyncio loop's callbacks (see
        :class:`_LoopConnection`), as :meth:`serve_stream` serves a stream."""
        loop = asyncio.get_running_loop()
        peer = _address_name(address)
        client = self._store.open_connection(loop.time(), peer)
        connection = _LoopConnection(self, client, loop, self._read_buffer)
        self._connections[client.id] = connection
        logger.info("%s: connection from %s", client.id, peer or "?")
        transport: asyncio.BaseTransport | None = None
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: connection, sock)
            await connection.ended
            if connection.dropped:
                client.close("dropped by the broker")
        except Exception:
            self._store.record_internal_error()
            logger.exception("%s: internal error", client.id)
        finally:
            connection.stop()
            client.close("closed")
            del self._connections[client.id]
            self._wake()
            if isinstance(transport, asyncio.Transport):
                transport.abort()
            elif transport is not None:
                transport.close()
            else:
                sock.close()
            logger.info("%s: closed (%s)", client.id, client.close_reason)

    async def _serve_websocket(self, stream: anyio.abc.ByteStream) -> None:
        """Run the WebSocket handshake (bounded by ``connect_timeout``), then serve."""
        from stompy._engine.websocket import WebSocketStream

        peer = peer_name(stream)
        try:
            with anyio.fail_after(self._store.config.connect_timeout):
                ws = await WebSocketStream.accept(stream)
        except (TimeoutError, StompError, *STREAM_ERRORS) as exc:
            logger.info("WebSocket handshake from %s failed: %s", peer or "?", exc)
            with anyio.CancelScope(shield=True), suppress(*STREAM_ERRORS):
                await stream.aclose()
            return
        request = ws.ws.request
        logger.info(
            "WebSocket from %s: %s, subprotocol %s",
            peer or "?",
            request.target if request else "?",
            ws.ws.subprotocol,
        )
        await self.serve_stream(ws, peer)

    @staticmethod
    def _websocket_stream(stream: anyio.abc.ByteStream) -> WebSocketStream | None:
        module = sys.modules.get("stompy._engine.websocket")
        if module is None:
            return None  # not imported, so no WebSocket: plain STOMP needs no wsproto
        cls: type[WebSocketStream] = module.WebSocketStream
        return stream if isinstance(stream, cls) else None


@asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl: _ssl.SSLContext | None = None,
    websocket: bool = False,
    websocket_port: int = 0,
    ssl_context: _ssl.SSLContext | None = None,
    **options: Unpack[BrokerOptions],
) -> AsyncIterator[AsyncBroker]:
    """Run a broker on ``host:port`` for the duration of the ``async with`` block.

    ``port=0`` picks a free port (see ``broker.port`` / ``broker.url``). ``options``
    are the fields of :class:`BrokerConfig` (``users``, ``heartbeats``, ``prefetch``,
    ``max_redeliveries``, limits ...). With ``ssl`` (a server context holding the
    certificate) it speaks TLS only, and ``broker.url`` is a ``stomp+ssl://`` URL;
    ``ssl_context`` is its former name (deprecated). With ``websocket``
    it also listens for STOMP over WebSocket on ``websocket_port`` (0: a free one; see
    ``broker.ws_url``), over the same queues; that needs wsproto, the ``websocket``
    extra. Works under asyncio and trio. On exit every connection is cut.
    Raises :class:`ValueError` for bad options, :class:`TypeError` for an ``ssl`` that
    is no :class:`ssl.SSLContext` or a ``websocket`` that is no bool,
    :class:`ImportError` for ``websocket`` without wsproto, and
    :class:`~stompy.errors.ListenFailed` (an :class:`OSError`) naming the address and
    the cause when it cannot listen there (a port taken, a host that does not resolve).
    An empty ``host`` is a :class:`~stompy.errors.ConfigurationError`.
    """
    check(options, BROKER_OPTIONS, "serve")
    check_listener("serve", host, websocket=websocket, port=port, websocket_port=websocket_port)
    context = tls_context(ssl, ssl_context)
    store = MessageStore(BrokerConfig(**options))
    if websocket:
        import stompy._engine.websocket  # noqa: F401  (fail now, with the extra named)
    listeners: list[anyio.abc.Listener[Any]] = []
    try:
        tcp = await listen(host, port)
        patient = _PatientListener(tcp)
        listeners.append(_secured(patient, context))
        real_port = tcp.listeners[0].extra(SocketAttribute.local_port)
        ws_port: int | None = None
        if websocket:
            ws_tcp = await listen(host, websocket_port)
            listeners.append(_secured(_PatientListener(ws_tcp), context))
            ws_port = ws_tcp.listeners[0].extra(SocketAttribute.local_port)
        broker = AsyncBroker(store, host, real_port, tls=context is not None, ws_port=ws_port)
        async with serving_task_group() as tg:
            if context is None and _on_asyncio():
                tg.start_soon(patient.serve_sockets, broker._serve_loop_socket, tg)
            else:
                tg.start_soon(listeners[0].serve, broker._serve_socket, tg)
            logger.info("listening on %s", broker.url)
            if len(listeners) > 1:
                tg.start_soon(listeners[1].serve, broker._serve_websocket, tg)
                logger.info("listening on %s", broker.ws_url)
            yield broker
    finally:
        with anyio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()


def _on_asyncio() -> bool:
    """Whether anyio runs on asyncio here (not trio)."""
    return getattr(running_backend(), "__name__", "") == "AsyncIOBackend"


def _address_name(address: object) -> str:
    """An accepted socket's peer as :func:`peer_name` names it."""
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


def tls_context(
    ssl: _ssl.SSLContext | None, ssl_context: _ssl.SSLContext | None
) -> _ssl.SSLContext | None:
    """The server context of ``serve(ssl=...)``, or of its deprecated ``ssl_context=``.

    Raises :class:`TypeError` for both at once, or for something else than a context.
    """
    if ssl_context is not None:
        warnings.warn(
            "the broker's ssl_context= is now called ssl=", DeprecationWarning, stacklevel=4
        )
        if ssl is not None:
            raise TypeError("give ssl= only (ssl_context= is its former name)")
        ssl = ssl_context
    if ssl is not None and not isinstance(ssl, _ssl.SSLContext):
        raise TypeError(
            "ssl= takes an ssl.SSLContext holding the broker's certificate, e.g. "
            "ssl.create_default_context(ssl.Purpose.CLIENT_AUTH) and load_cert_chain(), "
            f"not {ssl!r}"
        )
    return ssl


class _PatientListener(anyio.abc.Listener[anyio.abc.SocketStream]):
    """TCP listeners that, out of file descriptors, wait for some to be freed and
    accept again, rather than end the broker: anyio's let ``accept()``'s ``OSError``
    out of the task group, and every connection would go with it."""

    def __init__(self, tcp: MultiListener[anyio.abc.SocketStream]) -> None:
        self._tcp = tcp
        #: Whether accepting waits for descriptors now (warned once each time).
        self._short = False

    async def serve(
        self,
        handler: Callable[[anyio.abc.SocketStream], Any],
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        async with anyio.create_task_group() as own:
            for listener in self._tcp.listeners:
                # What create_tcp_listener() makes: they accept one at a time.
                socket_listener = cast(anyio.abc.SocketListener, listener)
                own.start_soon(self._accept, socket_listener, handler, task_group or own)

    async def serve_sockets(
        self,
        handler: Callable[[socket.socket, object], Any],
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        """:meth:`serve` on asyncio, handing ``handler`` each accepted socket and its
        address rather than anyio's stream (see :class:`_LoopConnection`)."""
        async with anyio.create_task_group() as own:
            for listener in self._tcp.listeners:
                sock = listener.extra(SocketAttribute.raw_socket)
                sock.setblocking(False)  # sock_accept() must not block the loop
                own.start_soon(self._accept_sockets, sock, handler, task_group)

    async def _accept(
        self,
        listener: anyio.abc.SocketListener,
        handler: Callable[[anyio.abc.SocketStream], Any],
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (OSError, anyio.BrokenResourceError) as exc:
                # anyio's trio backend raises the OSError as the cause of its own.
                error = exc if isinstance(exc, OSError) else exc.__cause__
                if not isinstance(error, OSError) or error.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                await self._short_of_descriptors(error)
                continue
            self._accepting_again()
            task_group.start_soon(handler, stream)

    async def _accept_sockets(
        self,
        sock: socket.socket,
        handler: Callable[[socket.socket, object], Any],
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                accepted, address = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                await self._short_of_descriptors(exc)
                continue
            except asyncio.CancelledError:
                # As anyio does: a cancelled sock_accept() may leave its reader behind
                # (https://bugs.python.org/issue41317).
                with suppress(ValueError, NotImplementedError):
                    loop.remove_reader(sock)
                raise
            self._accepting_again()
            task_group.start_soon(handler, accepted, address)

    async def _short_of_descriptors(self, error: OSError) -> None:
        """Wait a while before accepting again: ``error`` says the process is out of
        descriptors (warned once each time)."""
        if not self._short:
            self._short = True
            logger.warning(
                "out of file descriptors (%s): new connections wait until some "
                "close (raise the limit with ulimit -n)",
                error.strerror,
            )
        await anyio.sleep(ACCEPT_RETRY)

    def _accepting_again(self) -> None:
        if self._short:
            self._short = False
            logger.warning("file descriptors are free again: accepting connections")

    async def aclose(self) -> None:
        await self._tcp.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._tcp.extra_attributes


def _secured(
    tcp: anyio.abc.Listener[Any], context: _ssl.SSLContext | None
) -> anyio.abc.Listener[Any]:
    if context is None:
        return tcp
    # STOMP ends with DISCONNECT, not with a TLS close_notify: don't insist on one.
    return _TLSListener(tcp, context, standard_compatible=False)


class _TLSListener(TLSListener):
    """anyio's TLS listener, telling of a failed handshake in one line of the broker's log.

    A client that does not trust the certificate, or speaks plain STOMP to the TLS
    port, is a client's mistake: anyio would log it as an ERROR with a traceback.
    """

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: anyio.abc.AnyByteStream) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, anyio.get_cancelled_exc_class()):
            await TLSListener.handle_handshake_error(exc, stream)  # closes, re-raises
            return
        logger.info("TLS handshake from %s failed: %s", peer_name(stream), exc)
        await anyio.aclose_forcefully(stream)

"""A fault-injection TCP proxy: put it between a client and any broker, then break things.

::

    async with stompy.testing.fault_proxy(broker_url) as proxy:   # asyncio or trio
        ... connect to proxy.url, then proxy.stall(...), await proxy.cut() ...

    with stompy.testing.run_fault_proxy(broker_url) as proxy:      # a background thread
        ... connect to proxy.url, then proxy.stall(...), proxy.cut() ...

Theory of operation
-------------------
Each accepted client connection gets its own connection to the target and two pipes,
*upstream* (client -> broker) and *downstream* (broker -> client). A pipe is two tasks
joined by a bounded memory channel:

* the reader receives chunks (up to :data:`CHUNK` bytes) and queues them with their
  arrival time; when :data:`QUEUED_CHUNKS` are waiting it stops reading, so a stalled,
  delayed or throttled pipe pushes back on its sender through TCP instead of buffering
  without end;
* the writer is the only task that writes to its side: it takes the chunks in order,
  applies the faults of its direction to each (stall, delay, one-shot corruption or
  cut, throttle) and sends it.

Faults are state on the proxy that the writers read at every chunk, so setting one
takes effect on the next chunk of every connection, and :meth:`AsyncFaultProxy.reset`
clears them all. One-shot faults (:meth:`~AsyncFaultProxy.corrupt`,
:meth:`~AsyncFaultProxy.cut_mid_frame`) are taken by the first chunk that comes by in
their direction, whichever connection carries it. Every fault method takes ``after``:
``0`` applies it now, more schedules it (``reset()`` cancels what is scheduled).

End of stream is forwarded as a half-close, so a graceful DISCONNECT passes through
unchanged; once one direction has ended, the other gets :data:`LINGER` seconds to end
too. A cut closes both sides abruptly (with a TCP reset where the platform allows it).
"""

from __future__ import annotations

import functools
import logging
import math
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from stompy._engine.urls import Endpoint, parse_urls
from stompy._transports.signal import Signal
from stompy.errors import ConfigurationError
from stompy.testing._shared import (
    CHUNK,
    STREAM_ERRORS,
    Counters,
    InThread,
    check_listener,
    in_loop,
    listen,
    peer_name,
    serving_task_group,
    wait_until,
)

__all__ = (
    "CHUNK",
    "LINGER",
    "QUEUED_CHUNKS",
    "AsyncFaultProxy",
    "FaultProxy",
    "ProxyConnectionInfo",
    "ProxyStats",
    "fault_proxy",
    "run_fault_proxy",
)

logger = logging.getLogger("stompy.testing")

#: Which way a fault applies: client -> broker, broker -> client, or both.
Direction = Literal["upstream", "downstream", "both"]
#: How :meth:`AsyncFaultProxy.refuse` turns clients away.
RefuseMode = Literal["close", "hold"]
_Way = Literal["upstream", "downstream"]
_WAYS: Final[tuple[_Way, ...]] = ("upstream", "downstream")
_DIRECTIONS: Final[dict[str, tuple[_Way, ...]]] = {
    "upstream": ("upstream",),
    "downstream": ("downstream",),
    "both": _WAYS,
}

#: Chunks a pipe holds between its reader and its writer; then it stops reading.
QUEUED_CHUNKS: Final = 16
#: Seconds the other direction gets to end once one direction has ended.
LINGER: Final = 5.0
#: Connections :meth:`AsyncFaultProxy.refuse` with ``mode="hold"`` keeps waiting at most;
#: more are closed.
MAX_HELD: Final = 128
#: A throttled pipe sends at most this many seconds' worth of bytes at once.
_THROTTLE_SLICE: Final = 0.05


@dataclass(slots=True)
class ProxyStats(Counters):
    """A proxy's counters, since it started (:attr:`AsyncFaultProxy.stats`)."""

    connections_accepted: int = 0
    """Client connections accepted (refused ones included)."""
    connections_refused: int = 0
    """Client connections turned away by :meth:`~AsyncFaultProxy.refuse`."""
    connections_cut: int = 0
    """Connections ended by :meth:`~AsyncFaultProxy.cut` or
    :meth:`~AsyncFaultProxy.cut_mid_frame`."""
    target_failures: int = 0
    """Client connections closed because the target could not be reached."""
    bytes_upstream: int = 0
    """Bytes forwarded from clients to the target."""
    bytes_downstream: int = 0
    """Bytes forwarded from the target to clients."""
    faults_injected: int = 0
    """Faults that took effect (a scheduled one once it fired, a one-shot one once a
    chunk took it)."""


@dataclass(frozen=True, slots=True)
class ProxyConnectionInfo:
    """One proxied connection, as listed by :attr:`AsyncFaultProxy.connections`."""

    id: int
    """Numbered from 1 in the order connections were accepted."""
    client: str
    """The client's address, ``host:port``."""
    bytes_upstream: int
    """Bytes forwarded to the target on this connection."""
    bytes_downstream: int
    """Bytes forwarded to the client on this connection."""


# -- argument checks ----------------------------------------------------------------------


def _ways(direction: str) -> tuple[_Way, ...]:
    ways = _DIRECTIONS.get(direction) if isinstance(direction, str) else None
    if ways is None:
        raise ConfigurationError(
            f"direction must be 'upstream', 'downstream' or 'both', not {direction!r}"
        )
    return ways


def _seconds(name: str, value: float | None, *, none: bool = False) -> float:
    """``value`` checked to be a finite number of seconds >= 0 (``None``: forever)."""
    if value is None and none:
        return math.inf
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, not {value!r}")
    return float(value)


def _count(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _target(url: str) -> tuple[Endpoint, str]:
    """The target's endpoint, and the URL without its host and port (to put ours in)."""
    if not isinstance(url, str):
        raise ConfigurationError(f"the target must be a URL string, not {url!r}")
    try:
        endpoints = parse_urls(url)
    except ValueError as exc:
        raise ConfigurationError(f"bad target URL: {exc}") from None
    if len(endpoints) != 1:
        raise ConfigurationError("a fault proxy forwards to one target URL, not a failover list")
    return endpoints[0], url.strip()


def _proxied_url(target: str, host: str, port: int) -> str:
    """``target`` with ``host:port`` in place of its own; login, passcode and path kept."""
    parts = urlsplit(target)
    userinfo, at, _ = parts.netloc.rpartition("@")
    shown = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{shown}:{port}"))


def _abort(stream: anyio.abc.SocketStream) -> None:
    """Make closing ``stream`` send a TCP reset rather than a graceful FIN."""
    with suppress(anyio.TypedAttributeLookupError, OSError):
        raw = stream.extra(SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


# -- one proxied connection ----------------------------------------------------------------


@dataclass(eq=False)
class _Link:
    """One client connection, its connection to the target, and the two pipes between."""

    proxy: AsyncFaultProxy
    id: int
    client: anyio.abc.SocketStream
    server: anyio.abc.SocketStream
    peer: str
    scope: anyio.CancelScope = field(init=False, default_factory=anyio.CancelScope)
    #: Bytes sent each way.
    sent: dict[_Way, int] = field(init=False, default_factory=lambda: dict.fromkeys(_WAYS, 0))
    #: Close with a reset rather than a FIN.
    abrupt: bool = field(init=False, default=False)
    #: Ended by a fault (counted once).
    cut: bool = field(init=False, default=False)
    #: Set once both streams are closed.
    closed: anyio.Event = field(init=False, default_factory=anyio.Event)
    #: Directions that reached their end of stream.
    _ended: int = field(init=False, default=0)

    def info(self) -> ProxyConnectionInfo:
        return ProxyConnectionInfo(
            self.id, self.peer, self.sent["upstream"], self.sent["downstream"]
        )

    def kill(self, *, abrupt: bool) -> None:
        """End this connection now (both sides)."""
        if not self.cut:
            self.cut = True
            self.proxy._counters.connections_cut += 1
        self.abrupt = self.abrupt or abrupt
        self.scope.cancel()

    async def run(self) -> None:
        with self.scope:
            async with anyio.create_task_group() as tg:
                for way in _WAYS:
                    source, sink = (
                        (self.client, self.server)
                        if way == "upstream"
                        else (self.server, self.client)
                    )
                    send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](
                        QUEUED_CHUNKS
                    )
                    tg.start_soon(self._read, source, send)
                    tg.start_soon(self._write, way, sink, receive)

    async def aclose(self) -> None:
        """Close both streams (a reset after a cut); never raises."""
        with anyio.CancelScope(shield=True):
            for stream in (self.client, self.server):
                if self.abrupt:
                    _abort(stream)
                with suppress(*STREAM_ERRORS):
                    await stream.aclose()
        self.closed.set()

    async def _read(
        self,
        source: anyio.abc.SocketStream,
        queue: MemoryObjectSendStream[tuple[float, bytes]],
    ) -> None:
        with queue:  # closing it is how the writer learns of the end of stream
            while True:
                try:
                    data = await source.receive(CHUNK)
                except anyio.EndOfStream:
                    return
                except STREAM_ERRORS:
                    # Reset or broken: nothing sensible to forward, end both sides.
                    self.scope.cancel()
                    return
                await queue.send((anyio.current_time(), data))

    async def _write(
        self,
        way: _Way,
        sink: anyio.abc.SocketStream,
        queue: MemoryObjectReceiveStream[tuple[float, bytes]],
    ) -> None:
        proxy = self.proxy
        with queue:
            async for arrived, data in queue:
                await proxy._wait_unstalled(way)
                delay = proxy._delay[way]
                if delay:
                    await anyio.sleep_until(arrived + delay)
                    await proxy._wait_unstalled(way)  # a stall may have begun meanwhile
                chunk, then_cut = proxy._take_one_shots(way, data)
                if not await self._send(way, sink, chunk):
                    return
                if then_cut:
                    logger.info("proxy connection %d: cut mid-frame (%s)", self.id, way)
                    self.kill(abrupt=False)
                    return
        try:
            await sink.send_eof()
        except STREAM_ERRORS:
            self.scope.cancel()
            return
        self._ended += 1
        if self._ended == 1:
            # Half-closed: the other direction gets LINGER seconds to end as well.
            self.scope.deadline = anyio.current_time() + LINGER

    async def _send(self, way: _Way, sink: anyio.abc.SocketStream, data: bytes) -> bool:
        """Send ``data`` at the throttled rate, if any; ``False`` if the sink broke."""
        proxy = self.proxy
        while data:  # bounded: every round sends at least one byte
            rate = proxy._rate[way]
            piece = data if rate is None else data[: max(1, int(rate * _THROTTLE_SLICE))]
            try:
                await sink.send(piece)
            except STREAM_ERRORS:
                self.scope.cancel()
                return False
            self.sent[way] += len(piece)
            if way == "upstream":
                proxy._counters.bytes_upstream += len(piece)
            else:
                proxy._counters.bytes_downstream += len(piece)
            data = data[len(piece) :]
            if rate is not None:
                await anyio.sleep(len(piece) / rate)
        return True


# -- the proxy ------------------------------------------------------------------------------


class AsyncFaultProxy:
    """A running fault proxy, as yielded by :func:`fault_proxy`.

    Its methods must be called from the event loop that runs it (for other threads,
    use :func:`run_fault_proxy`). Every fault method raises
    :class:`~stompy.errors.ConfigurationError` for a bad argument, before changing
    anything.
    """

    def __init__(
        self,
        target: Endpoint,
        target_url: str,
        host: str,
        port: int,
        task_group: anyio.abc.TaskGroup,
        connect_timeout: float,
    ) -> None:
        #: Where connections are forwarded to.
        self.target = target
        #: The address the proxy listens on.
        self.host = host
        #: The real port (never 0).
        self.port = port
        #: The target URL with the proxy's host and port (login, passcode, vhost kept).
        self.url = _proxied_url(target_url, host, port)
        self.connect_timeout = connect_timeout
        self._tg = task_group
        self._counters = ProxyStats()  # counted as they happen; `stats` copies it
        self._links: dict[int, _Link] = {}
        self._next_id = 1
        self._held = 0
        self._changed = Signal()  # pulsed when a fault changes
        self._scheduled: set[anyio.CancelScope] = set()
        # The faults; reset() restores these values.
        self._stalled_until: dict[_Way, float] = {}
        self._delay: dict[_Way, float] = {"upstream": 0.0, "downstream": 0.0}
        self._rate: dict[_Way, int | None] = {"upstream": None, "downstream": None}
        self._corrupt: dict[_Way, int] = {}
        self._cut_after: dict[_Way, int] = {}
        self._refuse_until: float | None = None
        self._refuse_mode: RefuseMode = "close"

    def __repr__(self) -> str:
        return f"<stompy.testing.AsyncFaultProxy {self.host}:{self.port} -> {self.target}>"

    # -- inspection --------------------------------------------------------------------

    @property
    def connections(self) -> tuple[ProxyConnectionInfo, ...]:
        """A snapshot of every open proxied connection, oldest first."""
        return tuple(link.info() for link in self._links.values())

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the proxy's counters."""
        return self._counters.snapshot()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` until it is true; raise :class:`TimeoutError` after ``timeout``."""
        await wait_until(predicate, timeout)

    # -- faults ------------------------------------------------------------------------

    async def cut(self, connection: int | None = None, *, after: float = 0.0) -> None:
        """Close every connection (or the one with id ``connection``) abruptly, both sides.

        Returns once they are closed. Raises :class:`~stompy.errors.ConfigurationError`
        for an id that is not open (a scheduled cut of a connection that has gone by
        then does nothing).
        """
        delay = _seconds("after", after)
        if connection is not None:
            _count("connection", connection, 1)
            if not delay and connection not in self._links:
                raise ConfigurationError(f"no open proxied connection with id {connection}")
        if delay:
            self._schedule(delay, functools.partial(self._cut_now, connection))
            return
        await self._cut_now(connection)

    async def _cut_now(self, connection: int | None) -> None:
        if connection is None:
            links = list(self._links.values())
        else:
            link = self._links.get(connection)
            links = [] if link is None else [link]
        self._counters.faults_injected += 1
        logger.info("proxy: cutting %d connection(s)", len(links))
        for link in links:
            link.kill(abrupt=True)
        with anyio.move_on_after(LINGER):
            for link in links:
                await link.closed.wait()

    def cut_mid_frame(
        self, direction: Direction = "downstream", *, keep: int = 1, after: float = 0.0
    ) -> None:
        """Forward only the first ``keep`` bytes of the next chunk going ``direction``,
        then close that chunk's connection (both sides, gracefully: the bytes arrive).

        With ``"both"``, the next chunk of each direction. A chunk shorter than
        ``keep`` is forwarded whole before the cut.
        """
        ways = _ways(direction)
        keep = _count("keep", keep, 0)
        self._apply(after, lambda: self._cut_after.update(dict.fromkeys(ways, keep)), count=False)

    def corrupt(
        self, direction: Direction = "downstream", *, offset: int = 0, after: float = 0.0
    ) -> None:
        """Flip every bit of one byte of the next chunk going ``direction``.

        ``offset`` is the byte's position in the chunk (the last byte if the chunk is
        shorter). With ``"both"``, the next chunk of each direction.
        """
        ways = _ways(direction)
        offset = _count("offset", offset, 0)
        self._apply(after, lambda: self._corrupt.update(dict.fromkeys(ways, offset)), count=False)

    def stall(
        self, seconds: float | None = None, direction: Direction = "both", *, after: float = 0.0
    ) -> None:
        """Stop forwarding for ``seconds`` (``None``: until :meth:`resume` or :meth:`reset`).

        The sockets stay open and bytes keep being read until :data:`QUEUED_CHUNKS`
        chunks wait; then the sender feels TCP backpressure. Forwarding resumes in order.
        """
        ways = _ways(direction)
        length = _seconds("seconds", seconds, none=True)

        def apply() -> None:
            until = anyio.current_time() + length
            self._stalled_until.update(dict.fromkeys(ways, until))

        self._apply(after, apply)

    def resume(self, direction: Direction = "both") -> None:
        """End a stall now."""
        for way in _ways(direction):
            self._stalled_until.pop(way, None)
        self._changed.pulse()

    def delay(self, seconds: float, direction: Direction = "both", *, after: float = 0.0) -> None:
        """Hold every chunk going ``direction`` ``seconds`` after it arrived; 0 ends it.

        Order is kept, and chunks in flight do not add up: the latency of a link.
        """
        ways = _ways(direction)
        latency = _seconds("seconds", seconds)
        self._apply(after, lambda: self._delay.update(dict.fromkeys(ways, latency)))

    def throttle(
        self,
        bytes_per_second: int | None,
        direction: Direction = "both",
        *,
        after: float = 0.0,
    ) -> None:
        """Forward at most ``bytes_per_second`` going ``direction`` on each connection;
        ``None`` ends it."""
        ways = _ways(direction)
        rate = None if bytes_per_second is None else _count("bytes_per_second", bytes_per_second, 1)
        self._apply(after, lambda: self._rate.update(dict.fromkeys(ways, rate)))

    def refuse(
        self, seconds: float | None = None, *, mode: RefuseMode = "close", after: float = 0.0
    ) -> None:
        """Turn new connections away for ``seconds`` (``None``: until :meth:`reset`).

        ``mode="close"`` accepts and closes each at once (a client sees the connection
        end during CONNECT); ``mode="hold"`` leaves it waiting, unanswered, until the
        refusal ends (a client sees its connect timeout), then serves it. Open
        connections are not touched.
        """
        length = _seconds("seconds", seconds, none=True)
        if mode not in ("close", "hold"):
            raise ConfigurationError(f"mode must be 'close' or 'hold', not {mode!r}")

        def apply() -> None:
            self._refuse_until = anyio.current_time() + length
            self._refuse_mode = mode

        self._apply(after, apply)

    def reset(self) -> None:
        """Heal: clear every fault, pending one-shot and scheduled fault.

        Held connections are served, stalled ones resume. Cut connections stay cut.
        """
        for scope in self._scheduled:
            scope.cancel()
        self._scheduled.clear()
        self._stalled_until.clear()
        self._delay = {"upstream": 0.0, "downstream": 0.0}
        self._rate = {"upstream": None, "downstream": None}
        self._corrupt.clear()
        self._cut_after.clear()
        self._refuse_until = None
        self._changed.pulse()

    # -- machinery ---------------------------------------------------------------------

    def _apply(self, after: float, action: Callable[[], None], *, count: bool = True) -> None:
        """Run ``action`` now or in ``after`` seconds, then wake the pipes."""
        delay = _seconds("after", after)

        async def fire() -> None:
            action()
            if count:
                self._counters.faults_injected += 1
            self._changed.pulse()

        if delay:
            self._schedule(delay, fire)
        else:
            action()
            if count:
                self._counters.faults_injected += 1
            self._changed.pulse()

    def _schedule(self, delay: float, fire: Callable[[], Awaitable[None]]) -> None:
        scope = anyio.CancelScope()
        self._scheduled.add(scope)

        async def scheduled() -> None:
            with scope:
                await anyio.sleep(delay)
                await fire()
            self._scheduled.discard(scope)

        self._tg.start_soon(scheduled)

    async def _wait_change(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await self._changed.wait()

    async def _wait_unstalled(self, way: _Way) -> None:
        while True:  # each round waits for the stall's end or for a change
            until = self._stalled_until.get(way)
            now = anyio.current_time()
            if until is None or until <= now:
                return
            await self._wait_change(until - now)

    def _take_one_shots(self, way: _Way, data: bytes) -> tuple[bytes, bool]:
        """``data`` with the pending corruption applied, and whether to cut after it."""
        offset = self._corrupt.pop(way, None)
        if offset is not None:
            at = min(offset, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
            self._counters.faults_injected += 1
        keep = self._cut_after.pop(way, None)
        if keep is None:
            return data, False
        self._counters.faults_injected += 1
        return data[:keep], True

    def _refusing(self) -> RefuseMode | None:
        until = self._refuse_until
        if until is None or until <= anyio.current_time():
            return None
        return self._refuse_mode

    async def _admit(self) -> bool:
        """Whether to serve a new connection now (waiting while refusals say "hold")."""
        held = False
        try:
            while (mode := self._refusing()) is not None:  # each round waits for a change
                if mode == "close" or (not held and self._held >= MAX_HELD):
                    self._counters.connections_refused += 1
                    return False
                if not held:
                    held = True
                    self._held += 1
                assert self._refuse_until is not None
                await self._wait_change(self._refuse_until - anyio.current_time())
            return True
        finally:
            if held:
                self._held -= 1

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        """Serve one client until its connection ends; never raises but cancellation."""
        self._counters.connections_accepted += 1
        peer = peer_name(client)
        link: _Link | None = None
        try:
            if not await self._admit():
                logger.info("proxy: refused %s", peer)
                return
            try:
                with anyio.fail_after(self.connect_timeout):
                    server = await anyio.connect_tcp(self.target.host, self.target.port)
            except (OSError, TimeoutError) as exc:
                self._counters.target_failures += 1
                logger.info("proxy: cannot reach %s for %s: %s", self.target, peer, exc)
                return
            link = _Link(self, self._next_id, client, server, peer)
            self._next_id += 1
            self._links[link.id] = link
            logger.info("proxy connection %d: %s <-> %s", link.id, peer, self.target)
            try:
                await link.run()
            finally:
                del self._links[link.id]
                await link.aclose()
                logger.info("proxy connection %d: closed", link.id)
        except Exception:  # pragma: no cover - a bug: end this connection only
            logger.exception("proxy: internal error serving %s", peer)
        finally:
            if link is None:
                with anyio.CancelScope(shield=True), suppress(*STREAM_ERRORS):
                    await client.aclose()


@asynccontextmanager
async def fault_proxy(
    target: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    connect_timeout: float = 10.0,
) -> AsyncIterator[AsyncFaultProxy]:
    """Run a fault proxy to ``target`` (a ``stomp://`` ... URL) for an ``async with`` block.

    It listens on ``host:port`` (``port=0``: a free port, see ``proxy.port`` and
    ``proxy.url``) and opens a connection to the target for each client, waiting up
    to ``connect_timeout`` seconds for it. Works under asyncio and trio. On exit every
    connection is closed and every task ended. Raises
    :class:`~stompy.errors.ConfigurationError` for a bad URL or option and
    :class:`~stompy.errors.ListenFailed` (an :class:`OSError`) naming the address and
    the cause when it cannot listen there.
    """
    check_listener("fault_proxy", host, port=port)
    endpoint, url = _target(target)
    connect_timeout = _seconds("connect_timeout", connect_timeout)
    if not connect_timeout:
        raise ConfigurationError("connect_timeout must be above 0")
    listener = await listen(host, port)
    try:
        real_port = listener.listeners[0].extra(SocketAttribute.local_port)
        async with serving_task_group() as tg:
            proxy = AsyncFaultProxy(endpoint, url, host, real_port, tg, connect_timeout)
            tg.start_soon(listener.serve, proxy._serve, tg)
            logger.info("proxy listening on %s:%d for %s", host, real_port, endpoint)
            yield proxy
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()


# -- from another thread ---------------------------------------------------------------------


class FaultProxy(InThread[ProxyStats, ProxyConnectionInfo]):
    """A fault proxy running in a background thread, as yielded by :func:`run_fault_proxy`.

    The same methods as :class:`AsyncFaultProxy`, callable from any thread (each runs
    in the proxy's event loop and waits for it), except from that event loop.
    """

    def __init__(self, portal: BlockingPortal, proxy: AsyncFaultProxy) -> None:
        super().__init__(portal, proxy)  # host, port, url (the target's, with our address)
        self._proxy = proxy
        #: Where connections are forwarded to.
        self.target = proxy.target

    def __repr__(self) -> str:
        return f"<stompy.testing.FaultProxy {self.host}:{self.port} -> {self.target}>"

    cut = in_loop(AsyncFaultProxy.cut)
    cut_mid_frame = in_loop(AsyncFaultProxy.cut_mid_frame)
    corrupt = in_loop(AsyncFaultProxy.corrupt)
    stall = in_loop(AsyncFaultProxy.stall)
    resume = in_loop(AsyncFaultProxy.resume)
    delay = in_loop(AsyncFaultProxy.delay)
    throttle = in_loop(AsyncFaultProxy.throttle)
    refuse = in_loop(AsyncFaultProxy.refuse)
    reset = in_loop(AsyncFaultProxy.reset)


@contextmanager
def run_fault_proxy(
    target: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    backend: str = "asyncio",
    connect_timeout: float = 10.0,
) -> Iterator[FaultProxy]:
    """Run :func:`fault_proxy` in a background thread for a ``with`` block.

    ``backend`` is the anyio backend of that thread (``"asyncio"`` or ``"trio"``).
    Returns once the proxy listens; on exit every connection is closed and the thread
    is joined. Raises what :func:`fault_proxy` raises.
    """
    # Fail here, before a thread starts.
    check_listener("run_fault_proxy", host, backend, port=port)
    _target(target)
    with (
        start_blocking_portal(backend) as portal,
        portal.wrap_async_context_manager(
            fault_proxy(target, host, port, connect_timeout=connect_timeout)
        ) as proxy,
    ):
        yield FaultProxy(portal, proxy)

"""The anyio transport: ``AsyncConnection`` and friends, for asyncio and trio.

Theory of operation
-------------------
The connection owns a task group. For each established connection (an *epoch*; a
reconnect starts a new one) it runs three tasks over the same sans-IO core as the
blocking client: a reader that feeds received bytes to the core and routes events, a
writer that sends whatever the core produced, and a timer that wakes at the core's
heart-beat deadline. User calls never write to the stream themselves: they run an
intent on the core (synchronously, so nothing can interleave) and wake the writer.
Cancelling a call therefore never leaves half a frame on the wire.

Each subscription is a bounded memory object stream. When one is full the reader
waits for room, which stops reading the socket: TCP pushes back on the broker and
memory stays flat. While the reader waits so, the timer counts the peer as alive
(bytes are, by then, waiting for us), so a slow consumer is not mistaken for a dead
broker.

Leaving ``async with`` disconnects gracefully and stops every task; the tasks catch
their own errors and store them, so no ExceptionGroup reaches the user.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Coroutine, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from stompy._client import (
    ClientOptions,
    MessageBase,
    Outgoing,
    Reconnect,
    SslArg,
    error_for_event,
    log,
    split_for_sending,
    take_output,
)
from stompy._codec import DEFAULT_LIMITS, FrameLimits
from stompy._events import AckMode, Connected, Receipt
from stompy._events import Message as MessageEvent
from stompy._frames import VERSIONS
from stompy._protocol import ClientProtocol, State
from stompy._urls import Endpoint
from stompy.errors import (
    ConfigurationError,
    ConnectFailed,
    ConnectionLost,
    LocalProtocolError,
    ProtocolError,
    ReceiptTimeout,
    RemoteProtocolError,
    ServerError,
    StompError,
    StompTimeout,
    TransactionLost,
)

if TYPE_CHECKING:
    from stompy._websocket import WebSocket

__all__ = ("AsyncConnection", "AsyncMessage", "AsyncSubscription", "AsyncTransaction", "send_async")

_Established = tuple[anyio.abc.ByteStream, ClientProtocol, Connected, Endpoint, "WebSocket | None"]

MAX_OUTGOING: Final = 4 * 1024 * 1024
_RECV_SIZE: Final = 256 * 1024

_NEW: Final = "new"
_CONNECTED: Final = "connected"
_RECONNECTING: Final = "reconnecting"
_CLOSING: Final = "closing"
_CLOSED: Final = "closed"

_NETWORK_ERRORS: Final = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


_T = TypeVar("_T", bound="AsyncSubscription | AsyncTransaction")


class _Opening(Generic[_T]):
    """What ``subscribe()`` and ``transaction()`` return: await it, or ``async with`` it."""

    __slots__ = ("_coro", "_value")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self._coro = coro
        self._value: _T | None = None

    def __await__(self) -> Generator[Any, None, _T]:
        return self._coro.__await__()

    async def __aenter__(self) -> _T:
        self._value = await self._coro
        return self._value

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._value is not None
        await self._value.__aexit__(exc_type, exc, tb)


class AsyncMessage(MessageBase):
    """A received message; ``await msg.ack()`` / ``await msg.nack()`` answer it."""

    __slots__ = ("_conn",)

    def __init__(self, event: MessageEvent, epoch: int, conn: AsyncConnection) -> None:
        super().__init__(event, epoch)
        self._conn = conn

    async def ack(
        self, transaction: AsyncTransaction | str | None = None, *, receipt: bool = False
    ) -> None:
        """Acknowledge the message; a no-op for a message from before a reconnect."""
        await self._conn._acknowledge("ACK", self, transaction, receipt)

    async def nack(
        self, transaction: AsyncTransaction | str | None = None, *, receipt: bool = False
    ) -> None:
        """Tell the broker the message was not consumed (STOMP 1.1 and later)."""
        await self._conn._acknowledge("NACK", self, transaction, receipt)


class AsyncSubscription:
    """A subscription: ``async for`` over it, or ``await get(timeout)``."""

    def __init__(
        self,
        conn: AsyncConnection,
        id: str,
        destination: str,
        ack: AckMode,
        headers: Mapping[str, str],
        max_pending: int,
    ) -> None:
        self.id = id
        self.destination = destination
        self.ack = ack
        self.headers = dict(headers)
        self.max_pending = max_pending
        self._conn = conn
        self._send: MemoryObjectSendStream[AsyncMessage]
        self._receive: MemoryObjectReceiveStream[AsyncMessage]
        self._send, self._receive = anyio.create_memory_object_stream[AsyncMessage](max_pending)
        self._active = True

    def __repr__(self) -> str:
        return f"<AsyncSubscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    def __del__(self) -> None:
        # Messages left unread after the subscription ended are the user's choice;
        # close the streams quietly instead of warning about them.
        self._send.close()
        self._receive.close()

    @property
    def active(self) -> bool:
        return self._active

    @property
    def pending(self) -> int:
        return self._receive.statistics().current_buffer_used

    async def get(self, timeout: float | None = None) -> AsyncMessage | None:
        """The next message, or ``None`` on timeout or once the subscription ended.

        Cancelling it loses no message. Raises the connection's error once it is lost
        and every message received before was handed out.
        """
        try:
            try:
                # A message already waiting is handed out even with timeout=0.
                return self._receive.receive_nowait()
            except anyio.WouldBlock:
                pass
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            failure = self._conn._failure
            if failure is not None and self._active:
                raise failure from None
        return None

    async def get_batch(
        self, max_messages: int, timeout: float | None = None
    ) -> list[AsyncMessage]:
        """Up to ``max_messages`` messages, oldest first: waits up to ``timeout`` seconds
        for the first (``None``: no limit), then takes what has already arrived.

        Returns an empty list where :meth:`get` returns ``None``, and raises what it
        raises. :class:`~stompy.errors.ConfigurationError` if ``max_messages < 1``.
        """
        if max_messages < 1:
            raise ConfigurationError(f"max_messages must be at least 1, got {max_messages}")
        first = await self.get(timeout)
        if first is None:
            return []
        batch = [first]
        receive = self._receive.receive_nowait
        for _ in range(min(max_messages - 1, self.pending)):
            try:
                batch.append(receive())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        return batch

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> AsyncMessage:
        # Not an async generator: one suspended inside get()'s cancel scope would
        # break the caller's scope nesting when the loop is left with break.
        message = await self.get()
        if message is None:
            raise StopAsyncIteration
        return message

    async def unsubscribe(self, *, receipt: bool = False) -> None:
        """Stop the subscription; messages already received can still be read."""
        if not self._active:
            return
        self._active = False
        conn = self._conn
        conn._subs.pop(self.id, None)
        self._send.close()
        proto = conn._proto
        if conn._status == _CONNECTED and proto is not None and self.id in proto.subscriptions:
            rid = proto.unsubscribe(self.id, receipt=receipt)
            await conn._flush()
            if rid is not None:
                await conn._wait_receipt(rid, conn._epoch)

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn._status in (_CONNECTED, _RECONNECTING):
            with anyio.CancelScope(shield=exc_type is not None):
                await self.unsubscribe()
        else:
            self._active = False
            self._send.close()


class AsyncTransaction:
    """A transaction; ``async with`` commits at the end and aborts if the block raises."""

    def __init__(self, conn: AsyncConnection, id: str, epoch: int) -> None:
        self.id = id
        self._conn = conn
        self._epoch = epoch
        self._done = False

    def __repr__(self) -> str:
        return f"<AsyncTransaction {self.id!r}>"

    def _check(self) -> None:
        if self._done:
            raise LocalProtocolError(f"transaction {self.id!r} is already finished")
        if self._epoch != self._conn._epoch:
            raise TransactionLost(
                f"transaction {self.id!r} was lost with its connection; nothing in it took effect"
            )

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        self._check()
        await self._conn.send(
            destination,
            body,
            headers=headers,
            content_type=content_type,
            receipt=receipt,
            transaction=self.id,
        )

    async def ack(self, message: AsyncMessage) -> None:
        self._check()
        await message.ack(self)

    async def nack(self, message: AsyncMessage) -> None:
        self._check()
        await message.nack(self)

    async def commit(self, *, receipt: bool = True) -> None:
        self._check()
        self._done = True
        await self._conn._transaction_end("COMMIT", self, receipt)

    async def abort(self, *, receipt: bool = False) -> None:
        if self._done:
            return
        self._done = True
        if self._epoch != self._conn._epoch:
            return
        await self._conn._transaction_end("ABORT", self, receipt)

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if not self._done:
                await self.commit()
        else:
            with anyio.CancelScope(shield=True), contextlib.suppress(StompError):
                await self.abort()


class AsyncConnection:
    """An async STOMP connection, the twin of :class:`stompy.Connection`.

    ``async with AsyncConnection(url) as conn:`` connects and starts the reader, writer
    and heart-beat tasks; leaving the block disconnects gracefully and stops them.
    ``ws://`` and ``wss://`` URLs speak STOMP over WebSocket.

    ``connect()`` and ``close()`` may also be awaited by hand, by one task at one level:
    ``connect()`` opens the task group of the connection's tasks where it is called, and
    anyio and trio let only that task close it, outside any cancel scope entered since
    (``async with`` guarantees both). ``close()`` needs no ``move_on_after``: its waits
    are bounded by ``receipt_timeout``.
    """

    def __init__(
        self,
        url_or_urls: str | Endpoint | Sequence[str | Endpoint],
        *,
        login: str | None = None,
        passcode: str | None = None,
        host: str | None = None,
        versions: Sequence[str] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        heartbeat_tolerance: float = 2.0,
        ssl: SslArg = None,
        connect_timeout: float = 10.0,
        receipt_timeout: float = 10.0,
        reconnect: Reconnect | None = None,
        headers: Mapping[str, str] | None = None,
        limits: FrameLimits = DEFAULT_LIMITS,
        max_pending: int = 1000,
        strict: bool = True,
        ws_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._options = ClientOptions(
            url_or_urls,
            login=login,
            passcode=passcode,
            host=host,
            versions=versions,
            heartbeats=heartbeats,
            heartbeat_tolerance=heartbeat_tolerance,
            ssl=ssl,
            connect_timeout=connect_timeout,
            receipt_timeout=receipt_timeout,
            reconnect=reconnect,
            headers=headers,
            limits=limits,
            max_pending=max_pending,
            strict=strict,
            ws_headers=ws_headers,
        )
        self._status = _NEW
        self._failure: StompError | None = None
        self._proto: ClientProtocol | None = None
        self._stream: anyio.abc.ByteStream | None = None
        #: The WebSocket framing of the current stream (``None`` for plain STOMP).
        self._ws: WebSocket | None = None
        self._endpoint: Endpoint | None = None
        self._connected: Connected | None = None
        self._epoch = 0
        self._out = bytearray()
        self._out_ready = anyio.Event()
        self._drained = anyio.Event()
        self._changed = anyio.Event()  # set (and replaced) whenever the status changes
        self._subs: dict[str, AsyncSubscription] = {}
        self._receipts: dict[str, anyio.Event] = {}  # receipt id -> its waiter's wake-up
        self._expected: set[str] = set()  # receipts somebody waits for
        self._received: set[str] = set()  # ... of which these arrived
        self._paused = False
        self._reader_alive = False
        self._write_lock = anyio.Lock()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._host_task: int | None = None  # the task that entered _task_group
        self._epoch_scope: anyio.CancelScope | None = None
        self._lost: StompError | None = None

    def __repr__(self) -> str:
        where = self._endpoint or self._options.endpoints[0]
        return f"<AsyncConnection {where} {self._status}>"

    @property
    def connected(self) -> bool:
        return self._status == _CONNECTED

    @property
    def failure(self) -> StompError | None:
        """The error that ended the connection, or ``None`` while it is fine or closed by us."""
        return self._failure

    @property
    def version(self) -> str | None:
        return self._connected.version if self._connected else None

    @property
    def server(self) -> str | None:
        return self._connected.server if self._connected else None

    @property
    def session(self) -> str | None:
        return self._connected.session if self._connected else None

    @property
    def heartbeats(self) -> tuple[int, int]:
        return self._connected.heartbeats if self._connected else (0, 0)

    def _set_status(self, status: str) -> None:
        self._status = status
        self._changed.set()
        self._changed = anyio.Event()
        for waiter in self._receipts.values():
            waiter.set()

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> AsyncConnection:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connect (retrying per ``reconnect``) and start the connection's tasks."""
        if self._status != _NEW:
            raise LocalProtocolError(f"connect() on a connection that is {self._status}")
        policy = self._options.reconnect
        delays = policy.delays() if policy is not None else iter([0.0])
        last: StompError | None = None
        established = None
        for delay in delays:
            if delay:
                await anyio.sleep(delay)
            try:
                established = await self._establish()
                break
            except (ConnectFailed, RemoteProtocolError) as exc:
                last = exc
        if established is None:
            assert last is not None
            raise last
        self._install(*established)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._host_task = anyio.get_current_task().id
        task_group.start_soon(self._supervise)

    async def close(self) -> None:
        """Disconnect gracefully and stop every task; safe to call more than once.

        Raises :class:`~stompy.errors.LocalProtocolError`, and changes nothing, when
        awaited by another task than the one that called ``connect()``.
        """
        task_group = self._task_group
        if task_group is not None and anyio.get_current_task().id != self._host_task:
            # Checked first: closing the task group from here would corrupt the
            # cancel scopes of the task that opened it.
            raise LocalProtocolError(
                "close() must be awaited by the task that called connect(); "
                "use `async with AsyncConnection(...)` or close it from that task"
            )
        proto, stream = self._proto, self._stream
        if (
            self._status == _CONNECTED
            and self._failure is None
            and proto is not None
            and stream is not None
        ):
            # Shielded and bounded: leaving a cancelled block still says goodbye.
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self._options.receipt_timeout),
                contextlib.suppress(StompError, *_NETWORK_ERRORS),
            ):
                rid = proto.disconnect(receipt=True)
                if rid is not None:
                    # Written before _wait_receipt runs: the RECEIPT may beat it.
                    self._expected.add(rid)
                self._set_status(_CLOSING)
                # Written here, not by the writer task: when the host task is
                # cancelled, the connection's own tasks are cancelled with it.
                async with self._write_lock:
                    self._out += take_output(proto, self._ws, None, self._endpoint)
                    data = bytes(self._out)
                    self._out.clear()
                    await stream.send(data)
                if rid is not None:
                    await self._wait_receipt(rid, self._epoch, allow_closing=True)
        self._set_status(_CLOSED)
        for sub in list(self._subs.values()):
            sub._send.close()
        self._subs.clear()
        if self._epoch_scope is not None:
            self._epoch_scope.cancel()
        self._out_ready.set()
        with anyio.CancelScope(shield=True):
            await self._close_stream()
        if task_group is not None:
            self._task_group = None
            task_group.cancel_scope.cancel()
            # Exited at this level, not inside another scope: anyio (and trio) need
            # a task group's scope to be left exactly where it was entered.
            await task_group.__aexit__(None, None, None)

    async def _close_stream(self) -> None:
        stream = self._stream
        self._stream = None
        if stream is not None:
            ws = self._ws
            if ws is not None and not self._out:
                # Say goodbye the WebSocket way; best effort, bounded.
                with anyio.move_on_after(1.0), contextlib.suppress(Exception):
                    bye = ws.close()
                    if bye:
                        async with self._write_lock:
                            await stream.send(bye)
            with contextlib.suppress(Exception):
                await stream.aclose()

    # -- intents -----------------------------------------------------------------------

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
        transaction: AsyncTransaction | str | None = None,
    ) -> None:
        """Send a message; see :meth:`stompy.Connection.send`."""
        if isinstance(transaction, AsyncTransaction):
            transaction._check()
            tx: str | None = transaction.id
        else:
            tx = transaction
        policy = self._options.reconnect
        give_up = anyio.current_time() + (policy.send_timeout if policy is not None else 0.0)
        while True:
            proto = await self._ready(give_up)
            epoch = self._epoch
            # As in Connection.send: receipt_timeout per attempt for buffer room and
            # receipt together, so the call ends within send_timeout + receipt_timeout.
            until = anyio.current_time() + self._options.receipt_timeout
            rid = proto.send(
                destination,
                body,
                headers=headers,
                content_type=content_type,
                transaction=tx,
                receipt=receipt,
            )
            await self._flush(until)
            if rid is None:
                return
            try:
                await self._wait_receipt(rid, epoch, until=until)
                return
            except ConnectionLost:
                # As in Connection.send: with reconnect on, send again (at least once).
                if policy is None or tx is not None or anyio.current_time() >= give_up:
                    raise
                if self._failure is not None or self._status in (_CLOSING, _CLOSED):
                    raise
                log.info("sending again to %s after the connection was lost", destination)

    async def send_many(
        self,
        messages: Iterable[Outgoing],
        *,
        receipt: bool = False,
        transaction: AsyncTransaction | str | None = None,
    ) -> int:
        """Send ``messages`` in order; see :meth:`stompy.Connection.send_many`."""
        count = 0
        for work in split_for_sending(messages):
            if isinstance(work, list):
                await self._send_chunk(work, transaction)
                count += len(work)
                continue
            await self.send(
                work.destination,
                work.body,
                headers=work.headers,
                content_type=work.content_type,
                receipt=receipt,
                transaction=transaction,
            )
            count += 1
        return count

    async def _send_chunk(
        self, chunk: list[Outgoing], transaction: AsyncTransaction | str | None
    ) -> None:
        if isinstance(transaction, AsyncTransaction):
            transaction._check()
            tx: str | None = transaction.id
        else:
            tx = transaction
        proto = await self._ready()
        try:
            for m in chunk:
                proto.send(
                    m.destination,
                    m.body,
                    headers=m.headers,
                    content_type=m.content_type,
                    transaction=tx,
                )
        finally:
            await self._flush()  # what was queued before an error goes out too

    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_pending: int | None = None,
        receipt: bool = False,
    ) -> _Opening[AsyncSubscription]:
        """Subscribe to ``destination``.

        ``sub = await conn.subscribe(...)``, or ``async with conn.subscribe(...) as sub:``
        to unsubscribe when the block ends.
        """
        return _Opening(self._subscribe(destination, ack, id, headers, max_pending, receipt))

    async def _subscribe(
        self,
        destination: str,
        ack: AckMode,
        id: str | None,
        headers: Mapping[str, str] | None,
        max_pending: int | None,
        receipt: bool,
    ) -> AsyncSubscription:
        proto = await self._ready()
        before = proto.pending_receipts
        sub_id = proto.subscribe(destination, ack=ack, id=id, headers=headers, receipt=receipt)
        pending = max_pending if max_pending is not None else self._options.max_pending
        sub = AsyncSubscription(self, sub_id, destination, ack, headers or {}, pending)
        self._subs[sub_id] = sub
        await self._flush()
        for rid in proto.pending_receipts - before:
            await self._wait_receipt(rid, self._epoch)
        return sub

    def transaction(self) -> _Opening[AsyncTransaction]:
        """Begin a transaction: ``tx = await conn.transaction()``, or
        ``async with conn.transaction() as tx:`` to commit at the end (abort on error)."""
        return _Opening(self._begin())

    async def _begin(self) -> AsyncTransaction:
        proto = await self._ready()
        tx_id = proto.begin()
        await self._flush()
        return AsyncTransaction(self, tx_id, self._epoch)

    async def _transaction_end(self, command: str, tx: AsyncTransaction, receipt: bool) -> None:
        if tx._epoch != self._epoch:
            if command == "COMMIT":
                raise TransactionLost(f"transaction {tx.id!r} was lost with its connection")
            return
        proto = await self._ready()
        if command == "COMMIT":
            rid = proto.commit(tx.id, receipt=receipt)
        else:
            rid = proto.abort(tx.id, receipt=receipt)
        await self._flush()
        if rid is not None:
            await self._wait_receipt(rid, tx._epoch, lost=TransactionLost)

    async def _acknowledge(
        self,
        command: str,
        message: AsyncMessage,
        transaction: AsyncTransaction | str | None,
        receipt: bool,
    ) -> None:
        tx = transaction.id if isinstance(transaction, AsyncTransaction) else transaction
        if message._epoch != self._epoch:
            log.debug("not answering %r from an earlier connection: it is redelivered", message)
            return
        proto = await self._ready()
        if command == "ACK":
            rid = proto.ack(message.event, transaction=tx, receipt=receipt)
        else:
            rid = proto.nack(message.event, transaction=tx, receipt=receipt)
        await self._flush()
        if rid is not None:
            await self._wait_receipt(rid, self._epoch)

    # -- plumbing ----------------------------------------------------------------------

    async def _ready(self, give_up: float | None = None) -> ClientProtocol:
        """The protocol, once connected; waits out a reconnect until ``send_timeout``
        has passed, or until ``give_up`` (a repeated send's time left)."""
        proto = self._proto
        if (
            self._status == _CONNECTED
            and proto is not None
            and (proto.state is State.CLOSED or self._lost is not None)
        ):
            # The core saw the end (an ERROR, say) and the supervisor is about to
            # reconnect or fail: wait for its verdict rather than misuse a dead core.
            with anyio.move_on_after(self._options.receipt_timeout):
                while self._status == _CONNECTED and self._proto is proto:
                    await self._changed.wait()
        if self._status == _RECONNECTING:
            policy = self._options.reconnect
            timeout = policy.send_timeout if policy is not None else 0.0
            deadline = anyio.current_time() + timeout if give_up is None else give_up
            with anyio.CancelScope(deadline=deadline):
                while self._status == _RECONNECTING:
                    await self._changed.wait()
            if self._status == _RECONNECTING:
                raise ConnectionLost(f"not reconnected within {timeout} s")
        if self._failure is not None:
            raise self._failure
        if self._status != _CONNECTED or self._proto is None:
            raise LocalProtocolError(f"the connection is {self._status}")
        return self._proto

    async def _flush(self, until: float | None = None) -> None:
        """Hand the core's bytes to the writer; wait (bounded) if it is far behind.

        A full buffer is waited out until ``until`` (default: ``receipt_timeout``).
        """
        proto = self._proto
        if proto is None:
            return
        data = take_output(proto, self._ws, anyio.current_time(), self._endpoint)
        if data:
            self._out += data
            self._out_ready.set()
        if len(self._out) > MAX_OUTGOING:
            # Receipts may arrive while we wait here: make sure they are kept.
            self._expected |= proto.pending_receipts
            epoch = self._epoch
            if until is None:
                until = anyio.current_time() + self._options.receipt_timeout
            with anyio.CancelScope(deadline=until):
                while len(self._out) > MAX_OUTGOING and self._epoch == epoch:
                    if self._failure is not None:
                        raise self._failure
                    await self._drained.wait()
            if len(self._out) > MAX_OUTGOING and self._epoch == epoch:
                raise StompTimeout("the broker is not reading: the outgoing buffer stays full")

    async def _wait_receipt(
        self,
        rid: str,
        epoch: int,
        *,
        lost: type[StompError] = ConnectionLost,
        allow_closing: bool = False,
        until: float | None = None,
    ) -> None:
        self._expected.add(rid)
        if until is None:
            until = anyio.current_time() + self._options.receipt_timeout
        try:
            with anyio.CancelScope(deadline=until):
                while rid not in self._received:
                    # _lost is set the moment the reader sees the end, before the
                    # supervisor decides between reconnecting and failing.
                    failure = self._failure if self._failure is not None else self._lost
                    if failure is not None:
                        raise failure
                    if (
                        self._epoch != epoch
                        or not self._reader_alive
                        or not (
                            self._status == _CONNECTED
                            or (allow_closing and self._status == _CLOSING)
                        )
                    ):
                        raise lost(f"the connection was lost before the receipt {rid!r} arrived")
                    # Set by the receipt, and by every status change.
                    event = self._receipts[rid] = anyio.Event()
                    await event.wait()
            if rid not in self._received:
                raise ReceiptTimeout(f"no RECEIPT {rid!r} within {self._options.receipt_timeout} s")
        finally:
            self._receipts.pop(rid, None)
            self._expected.discard(rid)
            self._received.discard(rid)

    # -- establishing -------------------------------------------------------------------

    async def _establish(self) -> _Established:
        errors: list[str] = []
        for endpoint in self._options.endpoints:
            try:
                return await self._establish_one(endpoint)
            except ServerError:
                raise
            except (ConnectFailed, RemoteProtocolError) as exc:
                errors.append(str(exc))  # each names its address
                log.info("could not connect to %s: %s", endpoint, exc)
        raise ConnectFailed("; ".join(errors))

    async def _establish_one(self, endpoint: Endpoint) -> _Established:
        options = self._options
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        proto = options.start(endpoint)
        ws: WebSocket | None = None
        request = b""
        if endpoint.websocket:
            ws, request = options.websocket(endpoint)
        stream: anyio.abc.ByteStream | None = None
        try:
            with anyio.fail_after(options.connect_timeout):
                if context is not None:
                    stream = await anyio.connect_tcp(
                        endpoint.host,
                        endpoint.port,
                        ssl_context=context,
                        tls_hostname=endpoint.host,
                        tls_standard_compatible=False,
                    )
                else:
                    stream = await anyio.connect_tcp(endpoint.host, endpoint.port)
                # Over WebSocket, CONNECT goes once the server accepted the upgrade.
                await stream.send(request or take_output(proto, None, None, endpoint))
                while True:
                    ended: StompError | None = None
                    try:
                        data = await stream.receive(_RECV_SIZE)
                    except anyio.EndOfStream:
                        proto.receive_eof()
                    else:
                        if ws is not None:
                            was_open = ws.open
                            got = ws.receive(data)
                            reply = got.reply
                            if ws.open and not was_open:
                                reply += take_output(proto, ws, None, endpoint)
                            if reply:
                                await stream.send(reply)
                            data, ended = got.data, got.ended
                        proto.receive_data(data, anyio.current_time())
                    event = proto.next_event()
                    while event is not None:
                        if isinstance(event, Connected):
                            proto.start_heartbeats(anyio.current_time())
                            log.info("connected to %s (STOMP %s)", endpoint, event.version)
                            return stream, proto, event, endpoint, ws
                        failure = error_for_event(event)
                        if isinstance(failure, ServerError):
                            raise failure
                        if failure is not None:
                            raise ConnectFailed(f"{endpoint} closed the connection during CONNECT")
                        event = proto.next_event()
                    if ended is not None:
                        if isinstance(ended, ConnectionLost):
                            raise ConnectFailed(f"{ended} during CONNECT")
                        raise ended
        except TimeoutError:
            await self._abandon(stream)
            raise ConnectFailed(
                f"no CONNECTED from {endpoint} within the connect timeout"
            ) from None
        except _NETWORK_ERRORS as exc:
            await self._abandon(stream)
            raise ConnectFailed(f"cannot connect to {endpoint}: {exc}") from exc
        except BaseException:
            await self._abandon(stream)
            raise

    @staticmethod
    async def _abandon(stream: anyio.abc.ByteStream | None) -> None:
        if stream is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()

    def _install(
        self,
        stream: anyio.abc.ByteStream,
        proto: ClientProtocol,
        connected: Connected,
        endpoint: Endpoint,
        ws: WebSocket | None,
    ) -> None:
        self._stream = stream
        self._ws = ws
        self._proto = proto
        self._connected = connected
        self._endpoint = endpoint
        self._out = bytearray()
        self._epoch += 1
        self._lost = None
        self._paused = False
        self._reader_alive = True  # from now on; the reader clears it when it ends
        for sub in self._subs.values():
            proto.subscribe(sub.destination, ack=sub.ack, id=sub.id, headers=sub.headers)
        data = take_output(proto, ws, anyio.current_time())
        if data:
            self._out += data
            self._out_ready.set()
        self._set_status(_CONNECTED)

    # -- the tasks ----------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Run the epoch's tasks; reconnect or fail when the connection is lost."""
        while True:
            lost = await self._run_epoch()
            if lost is None or self._status in (_CLOSING, _CLOSED):
                return
            if not await self._reconnect(lost):
                return

    async def _run_epoch(self) -> StompError | None:
        stream = self._stream
        proto = self._proto
        assert stream is not None
        assert proto is not None
        async with anyio.create_task_group() as tg:
            self._epoch_scope = tg.cancel_scope
            tg.start_soon(self._reader, stream, proto, tg.cancel_scope)
            tg.start_soon(self._writer, stream, tg.cancel_scope)
            tg.start_soon(self._timer, proto, tg.cancel_scope)
        self._epoch_scope = None
        return self._lost

    def _end_epoch(self, scope: anyio.CancelScope, failure: StompError | None) -> None:
        if self._lost is None and failure is not None and self._status not in (_CLOSING, _CLOSED):
            self._lost = failure
        scope.cancel()

    async def _reader(
        self, stream: anyio.abc.ByteStream, proto: ClientProtocol, scope: anyio.CancelScope
    ) -> None:
        ws = self._ws
        try:
            while True:
                ended: StompError | None = None
                eof = False
                try:
                    data = await stream.receive(_RECV_SIZE)
                except anyio.EndOfStream:
                    proto.receive_eof()
                    eof = True
                else:
                    now = anyio.current_time()
                    if ws is not None:
                        got = ws.receive(data)
                        if got.reply:
                            self._out += got.reply
                            self._out_ready.set()
                        data, ended = got.data, got.ended
                        if not data:
                            proto.note_alive(now)  # a ping, a pong: the peer is there
                    proto.receive_data(data, now)
                failure = await self._pump(proto)
                if failure is None and ended is not None:
                    # Frames that came before the close were handled; the writer
                    # gets a moment to answer the close before the epoch ends.
                    with anyio.move_on_after(0.5):
                        while self._out:
                            await self._drained.wait()
                    failure = ended
                if failure is not None or eof:
                    # After EOF there is nothing more to read: end here rather than
                    # spin on EndOfStream (after a DISCONNECT receipt, failure is None).
                    self._end_epoch(scope, failure)
                    return
        except _NETWORK_ERRORS as exc:
            self._end_epoch(scope, ConnectionLost(f"connection to {self._endpoint} failed: {exc}"))
        finally:
            self._reader_alive = False
            for waiter in self._receipts.values():
                waiter.set()

    async def _pump(self, proto: ClientProtocol) -> StompError | None:
        try:
            event = proto.next_event()
            while event is not None:
                if isinstance(event, MessageEvent):
                    await self._deliver(event)
                elif isinstance(event, Receipt):
                    if event.receipt_id in self._expected:
                        self._received.add(event.receipt_id)
                        waiter = self._receipts.get(event.receipt_id)
                        if waiter is not None:
                            waiter.set()
                    if proto.state.name == "CLOSED":
                        return None
                else:
                    failure = error_for_event(event)
                    if failure is not None:
                        return failure
                event = proto.next_event()
        except ProtocolError as exc:
            return exc
        data = take_output(proto, self._ws, anyio.current_time())
        if data:
            self._out += data
            self._out_ready.set()
        return None

    async def _deliver(self, event: MessageEvent) -> None:
        sub = self._subs.get(event.subscription)
        if sub is None:
            log.debug("dropping a message for closed subscription %r", event.subscription)
            return
        message = AsyncMessage(event, self._epoch, self)
        try:
            sub._send.send_nowait(message)
        except anyio.WouldBlock:
            self._paused = True
            try:
                await sub._send.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("dropping a message for closed subscription %r", event.subscription)
            finally:
                self._paused = False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("dropping a message for closed subscription %r", event.subscription)

    async def _writer(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        try:
            while True:
                await self._out_ready.wait()
                self._out_ready = anyio.Event()
                while self._out:
                    # Shielded: a cancelled write must not leave half a frame behind.
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.fail_after(self._options.receipt_timeout),
                    ):
                        async with self._write_lock:
                            # Taken under the lock: close() writes its DISCONNECT
                            # under it too, and must not overtake these frames.
                            data = bytes(self._out)
                            self._out.clear()
                            if data:
                                await stream.send(data)
                    self._drained.set()
                    self._drained = anyio.Event()
                if self._status == _CLOSED:
                    return
        except TimeoutError:
            self._end_epoch(scope, ConnectionLost("the broker stopped reading"))
        except _NETWORK_ERRORS as exc:
            self._end_epoch(scope, ConnectionLost(f"connection to {self._endpoint} failed: {exc}"))

    async def _timer(self, proto: ClientProtocol, scope: anyio.CancelScope) -> None:
        while True:
            deadline = proto.next_deadline()
            if deadline is None:
                return
            await anyio.sleep(max(0.0, deadline - anyio.current_time()))
            now = anyio.current_time()
            if self._paused:
                proto.note_alive(now)
            proto.handle_timer(now)
            failure = await self._pump(proto)
            if failure is not None:
                self._end_epoch(scope, failure)
                return

    async def _reconnect(self, lost: StompError) -> bool:
        policy = self._options.reconnect
        await self._close_stream()
        if policy is None:
            log.warning("connection to %s lost: %s", self._endpoint, lost)
            self._fail(lost)
            return False
        log.warning("connection to %s lost (%s); reconnecting", self._endpoint, lost)
        self._epoch += 1
        self._set_status(_RECONNECTING)
        last: StompError = lost
        for delay in policy.delays():
            await anyio.sleep(delay)
            if self._status != _RECONNECTING:
                return False
            try:
                established = await self._establish()
            except StompError as exc:
                last = exc
                continue
            if self._status != _RECONNECTING:
                await self._abandon(established[0])
                return False
            self._install(*established)
            return True
        self._fail(ConnectionLost(f"could not reconnect: {last}"))
        return False

    def _fail(self, failure: StompError) -> None:
        self._failure = failure
        self._set_status(_CLOSED)
        for sub in self._subs.values():
            sub._send.close()


async def send_async(
    url: str | Sequence[str],
    destination: str,
    body: bytes | str = b"",
    *,
    headers: Mapping[str, str] | None = None,
    content_type: str | None = None,
    **options: Any,
) -> None:
    """Connect, send one message with a receipt, disconnect; the twin of :func:`stompy.send`."""
    async with AsyncConnection(url, **options) as conn:
        await conn.send(destination, body, headers=headers, content_type=content_type, receipt=True)

"""The anyio transport: ``AsyncConnection`` and friends, for asyncio and trio.

Theory of operation
-------------------
Every decision (reconnecting, replaying subscriptions, routing what the broker sent,
receipts, the ack-epoch rule, the goodbye) is the session engine's
(:class:`~stompy._session.Session`); this module moves bytes, waits, and wakes waits.
The connection owns a task group. For each established connection (an *epoch*; a
reconnect starts a new one) it runs three tasks: a reader that feeds received bytes to
the session, a writer that sends what the session has to send, and a timer that wakes
at the core's heart-beat deadline. User calls never write to the stream themselves:
they run an intent on the session (synchronously, so nothing can interleave) and wake
the writer. Cancelling a call therefore never leaves half a frame on the wire.

Each subscription's received messages wait in its inbox, at most ``max_pending``.
What does not fit waits in the session's backlog, and while it does the reader stops
reading: TCP pushes back on the broker and memory stays flat. It reads again once a
consumer has taken half an inbox. Meanwhile the timer counts the peer as alive
(bytes are, by then, waiting for us), so a slow consumer is not mistaken for a dead
broker.

Leaving ``async with`` disconnects gracefully and stops every task; the tasks catch
their own errors and store them, so no ExceptionGroup reaches the user.
"""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.abc
from typing_extensions import Unpack

from stompy._events import AckMode, MessageReceived
from stompy._message import MessageBase
from stompy._options import (
    ClientOptions,
    ConnectionOptions,
    Outgoing,
    log,
    split_for_sending,
)
from stompy._protocol import ClientProtocol, State
from stompy._session import Handshake, Inbox, Session
from stompy._state import ReceiptState, Status
from stompy._urls import Endpoint
from stompy.errors import (
    ConfigurationError,
    ConnectFailed,
    ConnectionLost,
    LocalProtocolError,
    ReceiptTimeout,
    RemoteProtocolError,
    ServerError,
    StompError,
    StompTimeout,
    TransactionLost,
)

__all__ = ("AsyncConnection", "AsyncMessage", "AsyncSubscription", "AsyncTransaction", "send_async")

#: Past this many unwritten bytes, senders wait for the writer to catch up.
MAX_OUTGOING: Final = 4 * 1024 * 1024
_RECV_SIZE: Final = 256 * 1024

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

    def __init__(self, event: MessageReceived, epoch: int, conn: AsyncConnection) -> None:
        MessageBase.__init__(self, event, epoch)  # not super(): one per received frame
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

    def __init__(self, conn: AsyncConnection, inbox: Inbox[AsyncMessage]) -> None:
        self.id = inbox.id
        self.destination = inbox.destination
        self.ack = inbox.ack
        self.headers = dict(inbox.headers)
        self.max_pending = inbox.max_pending
        self._conn = conn
        self._session = conn._session
        self._inbox = inbox
        self._active = True  # until unsubscribed (a closed connection's stay active)
        #: Set when a message arrives or the subscription may have ended.
        self._wakeup: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<AsyncSubscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    @property
    def active(self) -> bool:
        return self._active

    @property
    def pending(self) -> int:
        return len(self._inbox.items)

    async def get(self, timeout: float | None = None) -> AsyncMessage | None:
        """The next message, or ``None`` on timeout or once the subscription ended.

        Cancelling it loses no message. Raises the connection's error once it is lost
        and every message received before was handed out.
        """
        items = self._inbox.items
        if not items:  # (a message already waiting is handed out even with timeout=0)
            if timeout is None:
                await self._arrival()
            else:
                with anyio.move_on_after(timeout):
                    await self._arrival()
            if not items:
                failure = self._session.failure
                if failure is not None and self._active:
                    raise failure
                return None
        message = items.popleft()
        session = self._session
        if session.backlog and session.wants_resume(self._inbox):
            self._conn._make_room()
        return message

    async def _arrival(self) -> None:
        """Wait until a message is in the inbox or the subscription ended."""
        items = self._inbox.items
        conn = self._conn
        while not items and self._active and self._session.status is not Status.CLOSED:
            event = self._wakeup
            if event is None:
                event = self._wakeup = anyio.Event()
                conn._getting.add(self)
            try:
                await event.wait()
            finally:
                if self._wakeup is event and event.statistics().tasks_waiting == 0:
                    # Cancelled, and no other task waits here: nothing to wake.
                    self._wakeup = None
                    conn._getting.discard(self)

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
        items = self._inbox.items
        take = min(max_messages - 1, len(items))
        if take:
            batch += [items.popleft() for _ in range(take)]
            if self._session.wants_resume(self._inbox):
                self._conn._make_room()
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
        self._end()
        conn = self._conn
        session = self._session
        epoch = session.epoch
        rid = session.unsubscribe(self._inbox, receipt)
        conn._make_room()  # what waited in the backlog for this inbox is dropped
        await conn._flush()
        if rid is not None:
            await conn._wait_receipt(rid, epoch)

    def _end(self) -> None:
        self._active = False
        self._inbox.active = False
        event = self._wakeup
        if event is not None:
            self._wakeup = None
            self._conn._getting.discard(self)
            event.set()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session.status in (Status.CONNECTED, Status.RECONNECTING):
            with anyio.CancelScope(shield=exc_type is not None):
                await self.unsubscribe()
        else:
            self._end()


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
        if self._conn._session.is_stale(self._epoch):
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
        if self._conn._session.is_stale(self._epoch):
            return  # the broker aborted it when the connection ended
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
        **options: Unpack[ConnectionOptions],
    ) -> None:
        self._options = ClientOptions(url_or_urls, **options)
        self._session: Session[AsyncMessage] = Session(self._options, self._message)
        self._stream: anyio.abc.ByteStream | None = None
        self._out_ready = anyio.Event()
        self._drained = anyio.Event()
        self._changed = anyio.Event()  # set (and replaced) whenever the status changes
        self._receipts: dict[str, anyio.Event] = {}  # receipt id -> its waiter's wake-up
        self._getting: set[AsyncSubscription] = set()  # subscriptions with a get() waiting
        self._room: anyio.Event | None = None  # the paused reader waits on it
        self._reader_alive = False
        self._write_lock = anyio.Lock()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._host_task: int | None = None  # the task that entered _task_group
        self._epoch_scope: anyio.CancelScope | None = None
        self._lost: StompError | None = None

    def _message(self, event: MessageReceived, epoch: int) -> AsyncMessage:
        return AsyncMessage(event, epoch, self)

    def __repr__(self) -> str:
        session = self._session
        where = session.endpoint or self._options.endpoints[0]
        return f"<AsyncConnection {where} {session.status}>"

    @property
    def connected(self) -> bool:
        return self._session.status is Status.CONNECTED

    @property
    def failure(self) -> StompError | None:
        """The error that ended the connection, or ``None`` while it is fine or closed by us."""
        return self._session.failure

    @property
    def version(self) -> str | None:
        connected = self._session.connected
        return connected.version if connected else None

    @property
    def server(self) -> str | None:
        connected = self._session.connected
        return connected.server if connected else None

    @property
    def session(self) -> str | None:
        connected = self._session.connected
        return connected.session if connected else None

    @property
    def heartbeats(self) -> tuple[int, int]:
        connected = self._session.connected
        return connected.heartbeats if connected else (0, 0)

    # -- waking waits ------------------------------------------------------------------

    def _status_changed(self) -> None:
        """The session's status changed: wake every wait, each checks its own cause."""
        self._changed.set()
        self._changed = anyio.Event()
        self._wake_receipts()
        self._wake_getters(everyone=True)

    def _wake_receipts(self) -> None:
        for waiter in self._receipts.values():
            waiter.set()

    def _wake_getters(self, *, everyone: bool = False) -> None:
        getting = self._getting
        woken = [sub for sub in getting if everyone or sub._inbox.items]
        for sub in woken:
            getting.discard(sub)
            event = sub._wakeup
            sub._wakeup = None
            if event is not None:
                event.set()

    def _make_room(self) -> None:
        """A consumer took messages: let a paused reader move the backlog."""
        room = self._room
        if room is not None:
            room.set()

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
        session = self._session
        if session.status is not Status.NEW:
            raise LocalProtocolError(f"connect() on a connection that is {session.status}")
        last: StompError | None = None
        established = None
        for delay in session.connect_delays():
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
        session, stream = self._session, self._stream
        if (
            session.status is Status.CONNECTED
            and session.failure is None
            and session.proto is not None
            and stream is not None
        ):
            # Shielded and bounded: leaving a cancelled block still says goodbye.
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self._options.receipt_timeout),
                contextlib.suppress(StompError, *_NETWORK_ERRORS),
            ):
                # The receipt is expected before it is written: it may beat the wait.
                rid = session.begin_close()
                self._status_changed()
                # Written here, not by the writer task: when the host task is
                # cancelled, the connection's own tasks are cancelled with it.
                async with self._write_lock:
                    session.flush(None)
                    out = session.outgoing
                    data = bytes(out)
                    out.clear()
                    await stream.send(data)
                if rid is not None:
                    await self._wait_receipt(rid, session.epoch, allow_closing=True)
        session.closed()
        self._status_changed()
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
            ws = self._session.ws
            if ws is not None and not self._session.outgoing:
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
        session = self._session
        policy = self._options.reconnect
        send_timeout = policy.send_timeout if policy is not None else 0.0
        # The clock is read only when needed: the common send reads it once (_flush).
        give_up: float | None = None  # when the send began, plus send_timeout
        while True:
            proto = self._usable()
            if proto is None:
                if give_up is None:
                    give_up = anyio.current_time() + send_timeout
                proto = await self._ready(give_up)
            epoch = session.epoch
            # As in Connection.send: receipt_timeout per attempt for buffer room and
            # receipt together, so the call ends within send_timeout + receipt_timeout.
            until: float | None = None
            if receipt:
                now = anyio.current_time()
                until = now + self._options.receipt_timeout
                if give_up is None:
                    give_up = now + send_timeout
            rid = proto.send(
                destination,
                body,
                headers=headers,
                content_type=content_type,
                transaction=tx,
                receipt=receipt,
            )
            if rid is None:
                await self._flush(until)
                return
            session.expect(rid)  # before the flush, which may wait: it may come meanwhile
            await self._flush(until)
            try:
                await self._wait_receipt(rid, epoch, until=until)
                return
            except ConnectionLost:
                # As in Connection.send: with reconnect on, send again (at least once).
                assert give_up is not None
                if policy is None or tx is not None or anyio.current_time() >= give_up:
                    raise
                if session.failure is not None or session.status in (
                    Status.CLOSING,
                    Status.CLOSED,
                ):
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
        await self._ready()
        session = self._session
        epoch = session.epoch
        subscribed = session.subscribe(destination, ack, id, headers, max_pending, receipt)
        sub = AsyncSubscription(self, subscribed.inbox)
        await self._flush()
        if subscribed.receipt is not None:
            await self._wait_receipt(subscribed.receipt, epoch)
        return sub

    def transaction(self) -> _Opening[AsyncTransaction]:
        """Begin a transaction: ``tx = await conn.transaction()``, or
        ``async with conn.transaction() as tx:`` to commit at the end (abort on error)."""
        return _Opening(self._begin())

    async def _begin(self) -> AsyncTransaction:
        proto = await self._ready()
        tx = AsyncTransaction(self, proto.begin(), self._session.epoch)
        await self._flush()
        return tx

    async def _transaction_end(self, command: str, tx: AsyncTransaction, receipt: bool) -> None:
        session = self._session
        if session.is_stale(tx._epoch):
            if command == "COMMIT":
                raise TransactionLost(f"transaction {tx.id!r} was lost with its connection")
            return
        await self._ready()
        rid = session.end_transaction(command, tx.id, receipt)
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
        session = self._session
        if session.is_stale(message._epoch):
            log.debug("not answering %r from an earlier connection: it is redelivered", message)
            return
        await self._ready()
        epoch = session.epoch
        rid = session.acknowledge(command, message.event, tx, receipt)
        await self._flush()
        if rid is not None:
            await self._wait_receipt(rid, epoch)

    # -- plumbing ----------------------------------------------------------------------

    def _usable(self) -> ClientProtocol | None:
        """The core, when an intent can run on it right away (no wait, no error)."""
        session = self._session
        proto = session.proto
        if (
            session.status is Status.CONNECTED
            and self._lost is None
            and proto is not None
            and proto.state is not State.CLOSED  # not session.settling
        ):
            return proto
        return None

    async def _ready(self, give_up: float | None = None) -> ClientProtocol:
        """The protocol, once connected; waits out a reconnect until ``send_timeout``
        has passed, or until ``give_up`` (a repeated send's time left)."""
        proto = self._usable()
        if proto is not None:
            return proto
        session = self._session
        if session.settling or (self._lost is not None and session.status is Status.CONNECTED):
            # The core saw the end (an ERROR, say) and the supervisor is about to
            # reconnect or fail: wait for its verdict rather than misuse a dead core.
            proto = session.proto
            with anyio.move_on_after(self._options.receipt_timeout):
                while session.status is Status.CONNECTED and session.proto is proto:
                    await self._changed.wait()
        if session.status is Status.RECONNECTING:
            policy = self._options.reconnect
            timeout = policy.send_timeout if policy is not None else 0.0
            deadline = anyio.current_time() + timeout if give_up is None else give_up
            with anyio.CancelScope(deadline=deadline):
                while session.status is Status.RECONNECTING:
                    await self._changed.wait()
            if session.status is Status.RECONNECTING:
                raise ConnectionLost(f"not reconnected within {timeout} s")
        return session.ready()

    async def _flush(self, until: float | None = None) -> None:
        """Hand the core's bytes to the writer; wait (bounded) if it is far behind.

        A full buffer is waited out until ``until`` (default: ``receipt_timeout``).
        """
        session = self._session
        if session.flush(anyio.current_time()):
            self._out_ready.set()
        if len(session.outgoing) > MAX_OUTGOING:
            # Receipts may arrive while we wait here: make sure they are kept.
            session.expect_pending()
            epoch = session.epoch
            if until is None:
                until = anyio.current_time() + self._options.receipt_timeout
            with anyio.CancelScope(deadline=until):
                while len(session.outgoing) > MAX_OUTGOING and session.epoch == epoch:
                    if session.failure is not None:
                        raise session.failure
                    await self._drained.wait()
            if len(session.outgoing) > MAX_OUTGOING and session.epoch == epoch:
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
        session = self._session
        session.expect(rid)
        if until is None:
            until = anyio.current_time() + self._options.receipt_timeout
        try:
            with anyio.CancelScope(deadline=until):
                while True:
                    state = session.receipt_state(
                        rid, epoch, reading=self._reader_alive, allow_closing=allow_closing
                    )
                    if state is ReceiptState.ARRIVED:
                        return
                    # _lost is set the moment the reader sees the end, before the
                    # supervisor decides between reconnecting and failing.
                    failure = session.failure if session.failure is not None else self._lost
                    if failure is not None:
                        raise failure
                    if state is not ReceiptState.PENDING:
                        raise lost(f"the connection was lost before the receipt {rid!r} arrived")
                    # Set by a pump that routed something, and by every status change.
                    event = self._receipts[rid] = anyio.Event()
                    await event.wait()
            state = session.receipt_state(rid, epoch, reading=self._reader_alive)
            if state is not ReceiptState.ARRIVED:
                raise ReceiptTimeout(f"no RECEIPT {rid!r} within {self._options.receipt_timeout} s")
        finally:
            self._receipts.pop(rid, None)
            session.forget(rid)

    # -- establishing -------------------------------------------------------------------

    async def _establish(self) -> tuple[anyio.abc.ByteStream, Handshake]:
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

    async def _establish_one(self, endpoint: Endpoint) -> tuple[anyio.abc.ByteStream, Handshake]:
        options = self._options
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        handshake = self._session.handshake(endpoint)
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
                await stream.send(handshake.first)
                while handshake.connected is None:
                    try:
                        data = await stream.receive(_RECV_SIZE)
                    except anyio.EndOfStream:
                        data = b""
                    reply = handshake.receive(data, anyio.current_time())
                    if reply:
                        await stream.send(reply)
                return stream, handshake
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

    def _install(self, stream: anyio.abc.ByteStream, handshake: Handshake) -> None:
        self._stream = stream
        self._lost = None
        self._reader_alive = True  # from now on; the reader clears it when it ends
        session = self._session
        session.install(handshake, anyio.current_time())
        if session.outgoing:
            self._out_ready.set()
        self._status_changed()

    # -- the tasks ----------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Run the epoch's tasks; reconnect or fail when the connection is lost."""
        session = self._session
        while True:
            lost = await self._run_epoch()
            if lost is None or session.status in (Status.CLOSING, Status.CLOSED):
                return
            if not await self._reconnect(lost):
                return

    async def _run_epoch(self) -> StompError | None:
        stream = self._stream
        proto = self._session.proto
        assert stream is not None
        assert proto is not None
        async with anyio.create_task_group() as tg:
            self._epoch_scope = tg.cancel_scope
            tg.start_soon(self._reader, stream, tg.cancel_scope)
            tg.start_soon(self._writer, stream, tg.cancel_scope)
            tg.start_soon(self._timer, proto, tg.cancel_scope)
        self._epoch_scope = None
        self._room = None
        return self._lost

    def _end_epoch(self, scope: anyio.CancelScope, failure: StompError | None) -> None:
        if (
            self._lost is None
            and failure is not None
            and self._session.status not in (Status.CLOSING, Status.CLOSED)
        ):
            self._lost = failure
        scope.cancel()

    def _pumped(self, woke: bool) -> None:
        """After a pump: start the writer, wake whom the routed events concern."""
        if self._session.outgoing:
            self._out_ready.set()
        if woke:
            if self._getting:
                self._wake_getters()
            if self._receipts:
                self._wake_receipts()

    async def _reader(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        session = self._session
        try:
            while True:
                try:
                    data = await stream.receive(_RECV_SIZE)
                except anyio.EndOfStream:
                    data = b""  # the session's end of stream
                now = anyio.current_time()
                ended = session.receive(data, now)
                pumped = session.pump(now)
                self._pumped(pumped.woke)
                failure = pumped.failure
                if failure is None:
                    while session.paused:
                        # An inbox is full: read no more until a consumer made room.
                        room = self._room = anyio.Event()
                        await room.wait()
                        self._pumped(session.drain_backlog())
                    self._room = None
                    if ended is not None:
                        # Frames that came before the close were handled; the writer
                        # gets a moment to answer the close before the epoch ends.
                        with anyio.move_on_after(0.5):
                            while session.outgoing:
                                await self._drained.wait()
                        failure = ended
                if failure is not None or not data:
                    # After EOF there is nothing more to read: end here rather than
                    # spin on EndOfStream (after a DISCONNECT receipt, failure is None).
                    self._end_epoch(scope, failure)
                    return
        except _NETWORK_ERRORS as exc:
            failure = ConnectionLost(f"connection to {session.endpoint} failed: {exc}")
            self._end_epoch(scope, failure)
        finally:
            self._reader_alive = False
            self._wake_receipts()

    async def _writer(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        session = self._session
        try:
            while True:
                await self._out_ready.wait()
                self._out_ready = anyio.Event()
                while session.outgoing:
                    # Shielded: a cancelled write must not leave half a frame behind.
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.fail_after(self._options.receipt_timeout),
                    ):
                        async with self._write_lock:
                            # Taken under the lock: close() writes its DISCONNECT
                            # under it too, and must not overtake these frames.
                            out = session.outgoing
                            data = bytes(out)
                            out.clear()
                            if data:
                                await stream.send(data)
                    self._drained.set()
                    self._drained = anyio.Event()
                if session.status is Status.CLOSED:
                    return
        except TimeoutError:
            self._end_epoch(scope, ConnectionLost("the broker stopped reading"))
        except _NETWORK_ERRORS as exc:
            failure = ConnectionLost(f"connection to {session.endpoint} failed: {exc}")
            self._end_epoch(scope, failure)

    async def _timer(self, proto: ClientProtocol, scope: anyio.CancelScope) -> None:
        session = self._session
        while True:
            deadline = proto.next_deadline()
            if deadline is None:
                return
            await anyio.sleep(max(0.0, deadline - anyio.current_time()))
            now = anyio.current_time()
            if session.paused:
                proto.note_alive(now)  # bytes wait for us: the peer is there
            proto.handle_timer(now)
            pumped = session.pump(now)
            self._pumped(pumped.woke)
            self._make_room()  # the pump may have moved the backlog the reader waits on
            if pumped.failure is not None:
                self._end_epoch(scope, pumped.failure)
                return

    def _reconnecting(self) -> bool:
        return self._session.status is Status.RECONNECTING

    async def _reconnect(self, lost: StompError) -> bool:
        session = self._session
        await self._close_stream()
        delays = session.lost(lost)
        self._status_changed()
        if delays is None:
            return False
        last: StompError = lost
        reconnecting = self._reconnecting
        for delay in delays:
            await anyio.sleep(delay)
            if not reconnecting():
                return False
            try:
                stream, handshake = await self._establish()
            except StompError as exc:
                last = exc
                continue
            if not reconnecting():  # close() came meanwhile
                await self._abandon(stream)
                return False
            self._install(stream, handshake)
            return True
        session.give_up(last)
        self._status_changed()
        return False


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

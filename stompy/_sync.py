"""The blocking transport: ``Connection``, ``Subscription``, ``Transaction``, ``Message``.

Theory of operation
-------------------
One I/O thread per connection owns the socket. It waits in ``select`` for bytes from
the broker, for bytes to write, for a wake-up from a user thread, or for the core's
next heart-beat deadline, whichever comes first. User threads never touch the socket:
an intent runs the sans-IO core under the connection's lock, appends the encoded
bytes to the outgoing buffer and wakes the I/O thread, which writes whatever has
accumulated in one go (many frames, one ``send``). Frames can never interleave.

Received messages go into each subscription's bounded buffer. When one is full the
I/O thread keeps the remaining events aside and stops reading the socket, so TCP
pushes back on the broker instead of memory growing; it still sends heart-beats, and
bytes waiting in the socket count as a sign of life, so a slow consumer is not
mistaken for a dead broker. Reading resumes when the consumer takes a message.

Every wait has a bound: receipts (``receipt_timeout``), a full outgoing buffer, the
connection coming back (``Reconnect.send_timeout``). When the connection ends, every
blocked call and iterator wakes up and raises (``ConnectionLost``,
``HeartbeatTimeout``, ``ServerError``) after handing out what was already received.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl as _ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Final, TypeVar

from stompy._client import (
    ClientOptions,
    MessageBase,
    Outgoing,
    Reconnect,
    SslArg,
    error_for_event,
    log,
    log_sent,
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
    ServerError,
    StompError,
    StompTimeout,
    TransactionLost,
)

if TYPE_CHECKING:
    from stompy._websocket import WebSocket

__all__ = ("Connection", "Message", "Subscription", "Transaction", "send")

T = TypeVar("T")

_Established = tuple[socket.socket, ClientProtocol, Connected, Endpoint, "WebSocket | None"]

#: Past this many unwritten bytes, senders wait for the I/O thread to catch up.
MAX_OUTGOING: Final = 4 * 1024 * 1024
_RECV_SIZE: Final = 256 * 1024
_SEND_CHUNK: Final = 1024 * 1024

# Connection statuses.
_NEW: Final = "new"
_CONNECTED: Final = "connected"
_RECONNECTING: Final = "reconnecting"
_CLOSING: Final = "closing"
_CLOSED: Final = "closed"


class Message(MessageBase):
    """A received message; ``ack()`` / ``nack()`` answer it on its connection."""

    __slots__ = ("_conn",)

    def __init__(self, event: MessageEvent, epoch: int, conn: Connection) -> None:
        # MessageBase's fields set here directly: one per received message, so the
        # super() call is worth saving.
        self.event = event
        self._epoch = epoch
        self._headers = None
        self._conn = conn

    def ack(self, transaction: Transaction | str | None = None, *, receipt: bool = False) -> None:
        """Acknowledge the message (in ``transaction`` if given).

        A message received before a reconnect cannot be acked any more: the broker
        has already put it back, and will deliver it again, so this does nothing.
        """
        self._conn._acknowledge("ACK", self, transaction, receipt)

    def nack(self, transaction: Transaction | str | None = None, *, receipt: bool = False) -> None:
        """Tell the broker the message was not consumed (STOMP 1.1 and later)."""
        self._conn._acknowledge("NACK", self, transaction, receipt)


class Subscription:
    """A subscription: iterate it, ``get()`` from it, or let ``on_message`` run.

    At most ``max_pending`` received messages wait in it; past that the connection
    stops reading from the broker until the consumer catches up.
    """

    def __init__(
        self,
        conn: Connection,
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
        self._items: deque[Message] = deque()
        self._active = True
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    @property
    def active(self) -> bool:
        return self._active

    @property
    def pending(self) -> int:
        """How many received messages wait to be taken."""
        return len(self._items)

    def get(self, timeout: float | None = None) -> Message | None:
        """Return the next message, waiting up to ``timeout`` seconds (``None``: no limit).

        Returns ``None`` on timeout, or when the subscription ended normally and
        nothing is left. Raises the connection's error once it is lost and every
        message received before is handed out.
        """
        conn = self._conn
        with conn._lock:  # the condition's lock, entered at C speed
            if not self._items:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._items:
                    if not self._active:
                        return None
                    failure = conn._failure
                    if failure is not None:
                        raise failure
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    conn._cond.wait(remaining)
            message = self._items.popleft()
            if conn._backlog and len(self._items) <= self.max_pending // 2:
                # The I/O thread waits for room: wake it once half is free, not at every
                # message, or each get() would cost it a wake-up to move one message.
                conn._wake()
            return message

    def get_batch(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_messages`` messages, oldest first: waits up to ``timeout`` seconds
        for the first (``None``: no limit), then takes what has already arrived.

        One lock turn for the whole batch: a consumer that handles messages in bulk
        pays the hand-off from the I/O thread once per batch, not once per message.
        Returns an empty list where :meth:`get` returns ``None``, and raises what it
        raises. :class:`~stompy.errors.ConfigurationError` if ``max_messages < 1``.
        """
        if max_messages < 1:
            raise ConfigurationError(f"max_messages must be at least 1, got {max_messages}")
        first = self.get(timeout)
        if first is None:
            return []
        batch = [first]
        conn = self._conn
        with conn._lock:
            items = self._items
            take = min(max_messages - 1, len(items))
            batch += [items.popleft() for _ in range(take)]
            if take and conn._backlog and len(items) <= self.max_pending // 2:
                conn._wake()
        return batch

    def __iter__(self) -> Iterator[Message]:
        """Yield messages until the subscription or the connection ends."""
        while True:
            message = self.get()
            if message is None:
                return
            yield message

    def unsubscribe(self, *, receipt: bool = False) -> None:
        """Stop the subscription; messages already received stay available."""
        conn = self._conn
        with conn._cond:
            if not self._active:
                return
            self._active = False
            conn._subs.pop(self.id, None)
            if conn._status == _CONNECTED and conn._proto is not None:
                proto = conn._proto
                if self.id in proto.subscriptions:
                    rid = proto.unsubscribe(self.id, receipt=receipt)
                    conn._flush_locked()
                    if rid is not None:
                        conn._wait_receipt_locked(rid, conn._epoch)
            conn._cond.notify_all()
        self._join_dispatcher()

    def _join_dispatcher(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._conn._options.receipt_timeout)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn._status in (_CONNECTED, _RECONNECTING):
            self.unsubscribe()
        else:
            self._active = False

    def _dispatch(self, callback: Callable[[Message], object]) -> None:
        """Run ``callback`` for each message, in its own thread (see ``on_message``)."""
        try:
            for message in self:
                try:
                    callback(message)
                except Exception:
                    log.exception("on_message callback of %r failed", self)
        except StompError as exc:
            log.debug("%r ended: %s", self, exc)


class Transaction:
    """A STOMP transaction: SENDs, ACKs and NACKs in it take effect at ``commit()``.

    As a context manager it commits when the block ends and aborts if it raises.
    """

    def __init__(self, conn: Connection, id: str, epoch: int) -> None:
        self.id = id
        self._conn = conn
        self._epoch = epoch
        self._done = False

    def __repr__(self) -> str:
        return f"<Transaction {self.id!r}>"

    def _check(self) -> None:
        if self._done:
            raise LocalProtocolError(f"transaction {self.id!r} is already finished")
        if self._epoch != self._conn._epoch:
            raise TransactionLost(
                f"transaction {self.id!r} was lost with its connection; nothing in it took effect"
            )

    def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        self._check()
        self._conn.send(
            destination,
            body,
            headers=headers,
            content_type=content_type,
            receipt=receipt,
            transaction=self.id,
        )

    def ack(self, message: Message) -> None:
        self._check()
        message.ack(self)

    def nack(self, message: Message) -> None:
        self._check()
        message.nack(self)

    def commit(self, *, receipt: bool = True) -> None:
        """Commit; with ``receipt`` (the default) wait until the broker confirms."""
        self._check()
        self._done = True
        self._conn._transaction_end("COMMIT", self, receipt)

    def abort(self, *, receipt: bool = False) -> None:
        """Roll back everything sent or acked in the transaction."""
        if self._done:
            return
        self._done = True
        if self._epoch != self._conn._epoch:
            return  # the broker aborted it when the connection ended
        self._conn._transaction_end("ABORT", self, receipt)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if not self._done:
                self.commit()
        else:
            with contextlib.suppress(StompError):
                self.abort()


class Connection:
    """A blocking STOMP connection.

    ``url_or_urls`` is one ``stomp://``, ``stomp+ssl://``, ``ws://`` or ``wss://``
    address or several (tried in turn). Entering the ``with`` block connects; leaving
    it disconnects gracefully (DISCONNECT with a receipt, then close), also when the
    block raised. ``ws_headers`` are extra HTTP headers for a WebSocket handshake.
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
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._status = _NEW
        self._failure: StompError | None = None
        self._proto: ClientProtocol | None = None
        self._sock: socket.socket | None = None
        #: The WebSocket framing of the current socket (``None`` for plain STOMP).
        self._ws: WebSocket | None = None
        self._endpoint: Endpoint | None = None
        self._connected: Connected | None = None
        self._epoch = 0
        self._out = bytearray()
        self._subs: dict[str, Subscription] = {}
        self._backlog: deque[MessageEvent] = deque()
        self._receipts: set[str] = set()  # received, waited for
        self._waiting: set[str] = set()  # asked for, someone waits
        self._thread: threading.Thread | None = None
        # Made at connect(): a user thread writes a byte to wake the I/O thread.
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._wake_sent = False
        self._io_done = False

    def __repr__(self) -> str:
        where = self._endpoint or self._options.endpoints[0]
        return f"<Connection {where} {self._status}>"

    # -- properties --------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._status == _CONNECTED

    @property
    def failure(self) -> StompError | None:
        """The error that ended the connection, or ``None`` while it is fine or closed by us."""
        return self._failure

    @property
    def version(self) -> str | None:
        """The negotiated STOMP version (``None`` before connecting)."""
        return self._connected.version if self._connected else None

    @property
    def server(self) -> str | None:
        return self._connected.server if self._connected else None

    @property
    def session(self) -> str | None:
        return self._connected.session if self._connected else None

    @property
    def heartbeats(self) -> tuple[int, int]:
        """The negotiated ``(outgoing, incoming)`` heart-beat intervals in ms."""
        return self._connected.heartbeats if self._connected else (0, 0)

    # -- lifetime ----------------------------------------------------------------------

    def __enter__(self) -> Connection:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def connect(self) -> None:
        """Connect to the first address that answers (with retries if ``reconnect`` is set).

        Raises :class:`ConnectFailed` when no address can be reached,
        :class:`ServerError` when the broker refuses (for example a wrong passcode).
        """
        with self._cond:
            if self._status != _NEW:
                raise LocalProtocolError(f"connect() on a connection that is {self._status}")
        policy = self._options.reconnect
        delays = policy.delays() if policy is not None else iter([0.0])
        last: StompError | None = None
        for delay in delays:
            if delay:
                time.sleep(delay)
            try:
                established = self._establish()
            except (ConnectFailed, ProtocolError) as exc:
                last = exc
                continue
            break
        else:
            assert last is not None
            raise last
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._install(*established)
        thread = threading.Thread(target=self._run, name=f"stompy-io-{id(self):x}", daemon=True)
        self._thread = thread
        thread.start()

    def close(self) -> None:
        """Disconnect gracefully: DISCONNECT, wait for its receipt, close the socket.

        Safe to call more than once and after the connection was lost.
        """
        with self._cond:
            if self._status == _NEW:
                self._status = _CLOSED
            if self._status in (_CONNECTED, _RECONNECTING) and self._failure is None:
                epoch = self._epoch
                rid = None
                proto = self._proto
                if self._status == _CONNECTED and proto is not None:
                    with contextlib.suppress(StompError):
                        rid = proto.disconnect(receipt=True)
                        self._flush_locked()
                self._status = _CLOSING
                self._cond.notify_all()
                if rid is not None:
                    with contextlib.suppress(StompError):
                        self._wait_receipt_locked(rid, epoch, allow_closing=True)
            self._status = _CLOSED
            for sub in self._subs.values():
                sub._active = False
            self._cond.notify_all()
            self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._options.connect_timeout)
        with self._cond:
            subs = list(self._subs.values())
            self._subs.clear()
            self._close_socket()
        for sub in subs:
            sub._join_dispatcher()
        for wake in (self._wake_r, self._wake_w):
            if wake is not None:
                wake.close()

    # -- intents -----------------------------------------------------------------------

    def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
        transaction: Transaction | str | None = None,
    ) -> None:
        """Send a message to ``destination``.

        A ``str`` body is sent as UTF-8 with ``content-type: text/plain;charset=utf-8``
        unless told otherwise. With ``receipt=True`` this returns only once the broker
        confirmed, and raises :class:`ReceiptTimeout` if it does not in time.

        With ``reconnect`` on, a send with a receipt whose connection is lost before
        the receipt came is sent again on the next connection (until
        ``Reconnect.send_timeout``): the broker may then hold it twice, never zero
        times. A send inside a transaction is not repeated (the transaction is lost).
        Repeats included, the call returns or raises within ``send_timeout +
        receipt_timeout``.
        """
        if transaction is None and receipt is False:
            # The common case, kept short: nothing to wait for on a connection that is up.
            with self._lock:
                proto = self._proto
                if (
                    self._status == _CONNECTED
                    and proto is not None
                    and proto.state is State.CONNECTED
                ):
                    proto.send(destination, body, headers=headers, content_type=content_type)
                    self._flush_locked()
                    return
        tx = transaction.id if isinstance(transaction, Transaction) else transaction
        if isinstance(transaction, Transaction):
            transaction._check()
        policy = self._options.reconnect
        give_up = time.monotonic() + (policy.send_timeout if policy is not None else 0.0)
        with self._cond:
            while True:
                proto = self._ready_locked(give_up)
                epoch = self._epoch
                # The broker gets receipt_timeout per attempt, for buffer room and
                # receipt together: with the wait for a reconnect ending at give_up,
                # the call ends within send_timeout + receipt_timeout.
                until = time.monotonic() + self._options.receipt_timeout
                rid = proto.send(
                    destination,
                    body,
                    headers=headers,
                    content_type=content_type,
                    transaction=tx,
                    receipt=receipt,
                )
                self._flush_locked(until)
                if rid is None:
                    return
                try:
                    self._wait_receipt_locked(rid, epoch, until=until)
                    return
                except ConnectionLost:
                    if policy is None or tx is not None or time.monotonic() >= give_up:
                        raise
                    if self._failure is not None or self._status in (_CLOSING, _CLOSED):
                        raise
                    log.info("sending again to %s after the connection was lost", destination)

    def send_many(
        self,
        messages: Iterable[Outgoing],
        *,
        receipt: bool = False,
        transaction: Transaction | str | None = None,
    ) -> int:
        """Send ``messages`` in order, as :meth:`send` would one by one, for less work.

        They are queued in chunks, each under one turn of the connection's lock, so
        a large batch costs little more than encoding its frames. With
        ``receipt=True`` the last one asks for a RECEIPT and this returns once it
        came: the broker processes a connection's frames in order, so that receipt
        confirms every message before it. Returns how many were sent. What was
        sent before an error stays sent; the error is :meth:`send`'s.
        """
        count = 0
        for work in split_for_sending(messages):
            if isinstance(work, list):
                self._send_chunk(work, transaction)
                count += len(work)
                continue
            self.send(
                work.destination,
                work.body,
                headers=work.headers,
                content_type=work.content_type,
                receipt=receipt,
                transaction=transaction,
            )
            count += 1
        return count

    def _send_chunk(self, chunk: list[Outgoing], transaction: Transaction | str | None) -> None:
        tx = transaction.id if isinstance(transaction, Transaction) else transaction
        if isinstance(transaction, Transaction):
            transaction._check()
        with self._lock:
            proto = self._proto
            if self._status == _CONNECTED and proto is not None and proto.state is State.CONNECTED:
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
                    self._flush_locked()  # what was queued before an error goes out too
                return
        for m in chunk:  # not connected just now: the careful path waits or raises
            self.send(
                m.destination,
                m.body,
                headers=m.headers,
                content_type=m.content_type,
                transaction=transaction,
            )

    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        on_message: Callable[[Message], object] | None = None,
        max_pending: int | None = None,
        receipt: bool = False,
    ) -> Subscription:
        """Subscribe to ``destination`` and return the :class:`Subscription`.

        With ``on_message``, that function is called for each message in a thread of
        the subscription's own (so a slow callback never delays heart-beats).
        """
        with self._cond:
            proto = self._ready_locked()
            before = proto.pending_receipts
            sub_id = proto.subscribe(destination, ack=ack, id=id, headers=headers, receipt=receipt)
            pending = max_pending if max_pending is not None else self._options.max_pending
            sub = Subscription(self, sub_id, destination, ack, headers or {}, pending)
            self._subs[sub_id] = sub
            self._flush_locked()
            for rid in proto.pending_receipts - before:
                self._wait_receipt_locked(rid, self._epoch)
        if on_message is not None:
            thread = threading.Thread(
                target=sub._dispatch, args=(on_message,), name=f"stompy-sub-{sub_id}", daemon=True
            )
            sub._thread = thread
            thread.start()
        return sub

    def transaction(self) -> Transaction:
        """Begin a transaction; use it as a context manager to commit or abort it."""
        with self._cond:
            proto = self._ready_locked()
            tx_id = proto.begin()
            self._flush_locked()
            return Transaction(self, tx_id, self._epoch)

    def _transaction_end(self, command: str, tx: Transaction, receipt: bool) -> None:
        with self._cond:
            if tx._epoch != self._epoch:
                if command == "COMMIT":
                    raise TransactionLost(f"transaction {tx.id!r} was lost with its connection")
                return
            proto = self._ready_locked()
            if command == "COMMIT":
                rid = proto.commit(tx.id, receipt=receipt)
            else:
                rid = proto.abort(tx.id, receipt=receipt)
            self._flush_locked()
            if rid is not None:
                self._wait_receipt_locked(rid, tx._epoch, lost=TransactionLost)

    def _acknowledge(
        self, command: str, message: Message, transaction: Transaction | str | None, receipt: bool
    ) -> None:
        tx = transaction.id if isinstance(transaction, Transaction) else transaction
        with self._cond:
            if message._epoch != self._epoch:
                log.debug("not answering %r from an earlier connection: it is redelivered", message)
                return
            proto = self._ready_locked()
            if command == "ACK":
                rid = proto.ack(message.event, transaction=tx, receipt=receipt)
            else:
                rid = proto.nack(message.event, transaction=tx, receipt=receipt)
            self._flush_locked()
            if rid is not None:
                self._wait_receipt_locked(rid, self._epoch)

    # -- plumbing under the lock ---------------------------------------------------------

    def _ready_locked(self, give_up: float | None = None) -> ClientProtocol:
        """The protocol, once connected; waits out a reconnect (bounded).

        The wait for a reconnect ends after ``send_timeout``, or at ``give_up`` when
        a repeated send has less time left than that.
        """
        proto = self._proto
        if self._status == _CONNECTED and proto is not None and proto.state is State.CLOSED:
            # The core saw the end (an ERROR, say) and the I/O thread is about to
            # reconnect or fail: wait for its verdict rather than misuse a dead core.
            deadline = time.monotonic() + self._options.receipt_timeout
            while self._status == _CONNECTED and self._proto is proto and not self._io_done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        if self._status == _RECONNECTING:
            policy = self._options.reconnect
            timeout = policy.send_timeout if policy is not None else 0.0
            deadline = time.monotonic() + timeout if give_up is None else give_up
            while self._status == _RECONNECTING:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectionLost(f"not reconnected within {timeout} s")
                self._cond.wait(remaining)
        if self._failure is not None:
            raise self._failure
        if self._status != _CONNECTED or self._proto is None:
            raise LocalProtocolError(f"the connection is {self._status}")
        return self._proto

    def _flush_locked(self, until: float | None = None) -> None:
        """Move the core's bytes to the outgoing buffer and wake the I/O thread.

        A full buffer is waited out until ``until`` (default: ``receipt_timeout``).
        """
        proto = self._proto
        if proto is None:
            return
        if self._ws is None:  # take_output, inlined: this runs for every frame sent
            data = proto.data_to_send(time.monotonic())
            if data and log.isEnabledFor(logging.DEBUG):
                log_sent(data, self._endpoint)
        else:
            data = take_output(proto, self._ws, time.monotonic(), self._endpoint)
        if not data:
            return
        # Queued for the I/O thread, which writes whatever accumulated in one send:
        # measured faster than writing from the caller's thread, which costs a
        # system call per frame.
        self._out += data
        if not self._wake_sent:
            self._wake()
        if len(self._out) > MAX_OUTGOING and threading.current_thread() is not self._thread:
            # Receipts may arrive while we wait here: make sure they are kept.
            self._waiting |= proto.pending_receipts
            deadline = time.monotonic() + self._options.receipt_timeout if until is None else until
            epoch = self._epoch
            while len(self._out) > MAX_OUTGOING and self._epoch == epoch:
                if self._failure is not None:
                    raise self._failure
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StompTimeout("the broker is not reading: the outgoing buffer stays full")
                self._cond.wait(remaining)

    def _wake(self) -> None:
        if not self._wake_sent and self._wake_w is not None:
            self._wake_sent = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def _wait_receipt_locked(
        self,
        rid: str,
        epoch: int,
        *,
        lost: type[StompError] = ConnectionLost,
        allow_closing: bool = False,
        until: float | None = None,
    ) -> None:
        self._waiting.add(rid)
        deadline = time.monotonic() + self._options.receipt_timeout if until is None else until
        try:
            while rid not in self._receipts:
                if self._failure is not None:
                    raise self._failure
                if self._io_done:
                    raise lost(f"the connection ended before the receipt {rid!r} arrived")
                if self._epoch != epoch or (
                    self._status not in (_CONNECTED, _CLOSING)
                    or (self._status == _CLOSING and not allow_closing)
                ):
                    raise lost(f"the connection was lost before the receipt {rid!r} arrived")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReceiptTimeout(
                        f"no RECEIPT {rid!r} within {self._options.receipt_timeout} s"
                    )
                self._cond.wait(remaining)
        finally:
            self._waiting.discard(rid)
            self._receipts.discard(rid)

    # -- establishing ---------------------------------------------------------------------

    def _establish(self) -> _Established:
        """Try each address once; return the first that completes CONNECT."""
        errors: list[str] = []
        for endpoint in self._options.endpoints:
            try:
                return self._establish_one(endpoint)
            except ServerError:
                raise
            except (ConnectFailed, ProtocolError) as exc:
                errors.append(str(exc))  # each names its address
                log.info("could not connect to %s: %s", endpoint, exc)
        raise ConnectFailed("; ".join(errors))

    def _establish_one(self, endpoint: Endpoint) -> _Established:
        options = self._options
        deadline = time.monotonic() + options.connect_timeout
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        proto = options.start(endpoint)
        ws: WebSocket | None = None
        request = b""
        if endpoint.websocket:
            ws, request = options.websocket(endpoint)
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection(
                (endpoint.host, endpoint.port), timeout=options.connect_timeout
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=endpoint.host)
            # Over WebSocket, CONNECT goes once the server accepted the upgrade.
            sock.sendall(request or take_output(proto, None, None, endpoint))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectFailed(f"no CONNECTED from {endpoint} within the connect timeout")
                sock.settimeout(remaining)
                data = sock.recv(_RECV_SIZE)
                now = time.monotonic()
                ended: StompError | None = None
                if not data:
                    proto.receive_eof()
                elif ws is None:
                    proto.receive_data(data, now)
                else:
                    was_open = ws.open
                    got = ws.receive(data)
                    reply = got.reply
                    if ws.open and not was_open:
                        reply += take_output(proto, ws, None, endpoint)
                    if reply:
                        sock.sendall(reply)
                    proto.receive_data(got.data, now)
                    ended = got.ended
                event = proto.next_event()
                while event is not None:
                    if isinstance(event, Connected):
                        proto.start_heartbeats(now)
                        sock.setblocking(False)
                        log.info("connected to %s (STOMP %s)", endpoint, event.version)
                        return sock, proto, event, endpoint, ws
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
        except (OSError, _ssl.SSLError) as exc:
            if sock is not None:
                sock.close()
            raise ConnectFailed(f"cannot connect to {endpoint}: {exc}") from exc
        except BaseException:
            if sock is not None:
                sock.close()
            raise

    def _install(
        self,
        sock: socket.socket,
        proto: ClientProtocol,
        connected: Connected,
        endpoint: Endpoint,
        ws: WebSocket | None,
    ) -> None:
        with self._cond:
            self._sock = sock
            self._ws = ws
            self._proto = proto
            self._connected = connected
            self._endpoint = endpoint
            self._out = bytearray()
            self._backlog.clear()
            self._epoch += 1
            self._status = _CONNECTED
            # After a reconnect every subscription is made again with the same id.
            for sub in self._subs.values():
                proto.subscribe(sub.destination, ack=sub.ack, id=sub.id, headers=sub.headers)
            self._flush_locked()
            self._cond.notify_all()

    def _close_socket(self) -> None:
        sock = self._sock
        self._sock = None
        if sock is not None:
            ws = self._ws
            if ws is not None and not self._out:
                # Say goodbye the WebSocket way; best effort, the socket is closing.
                with contextlib.suppress(OSError):
                    sock.send(ws.close())
            with contextlib.suppress(OSError):
                sock.close()

    # -- the I/O thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                lost = self._serve()
                if lost is None:
                    return
                if not self._reconnect(lost):
                    return
        except BaseException:  # a bug: never leave waiters hanging
            log.exception("stompy I/O thread failed")
            with self._cond:
                self._fail_locked(ConnectionLost("the I/O thread failed"))
            raise
        finally:
            with self._cond:
                self._io_done = True
                self._cond.notify_all()

    def _serve(self) -> StompError | None:
        """Pump one socket until it ends; return why it ended (``None``: closed by us)."""
        while True:
            with self._cond:
                if self._status == _CLOSED:
                    return None
                sock, proto, ws = self._sock, self._proto, self._ws
                assert sock is not None
                assert proto is not None
                # Room a consumer made since the last pump: its wake-up may have been
                # folded into one that was already read, so look now, under the lock.
                self._drain_backlog_locked()
                paused = bool(self._backlog)
                want_write = bool(self._out)
                deadline = proto.next_deadline()
                self._wake_sent = False
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            pending_tls = isinstance(sock, _ssl.SSLSocket) and not paused and sock.pending() > 0
            wake_r = self._wake_r
            assert wake_r is not None
            rlist: list[socket.socket] = [wake_r] if paused else [wake_r, sock]
            try:
                if pending_tls:
                    readable, writable = [sock], [sock] if want_write else []
                else:
                    readable, writable, _ = select.select(
                        rlist, [sock] if want_write else [], [], timeout
                    )
                if wake_r in readable:
                    with contextlib.suppress(OSError):
                        wake_r.recv(4096)
                data: bytes | None = None
                if sock in readable:
                    data = self._recv(sock)
                if writable:
                    self._send(sock)
                alive = paused and bool(select.select([sock], [], [], 0)[0])
            except (OSError, _ssl.SSLError) as exc:
                with self._cond:
                    if self._status in (_CLOSING, _CLOSED):
                        return None
                return ConnectionLost(f"connection to {self._endpoint} failed: {exc}")
            now = time.monotonic()
            with self._cond:
                if self._status == _CLOSED:
                    return None
                ended: StompError | None = None
                if data is not None:
                    if not data:
                        proto.receive_eof()
                    elif ws is None:
                        proto.receive_data(data, now)
                    else:
                        got = ws.receive(data)
                        self._out += got.reply
                        proto.receive_data(got.data, now)
                        alive = alive or not got.data  # a ping, a pong: the peer is there
                        ended = got.ended
                if alive:
                    proto.note_alive(now)
                proto.handle_timer(now)
                failure = self._pump_locked(proto, now)
                if failure is None and ended is not None:
                    # Frames that came before the close were handled; answer it.
                    with contextlib.suppress(OSError):
                        self._send(sock)
                    failure = ended
                if failure is not None:
                    if self._status == _CLOSING:
                        return None
                    return failure
                if proto.state is State.CLOSED and not self._out:
                    return None if self._status == _CLOSING else ConnectionLost("closed")

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(_RECV_SIZE)
        except (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError):
            return None

    def _send(self, sock: socket.socket) -> None:
        with self._cond:
            chunk = bytes(self._out[:_SEND_CHUNK])
        try:
            sent = sock.send(chunk)
        except (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError):
            return
        with self._cond:
            del self._out[:sent]
            if len(self._out) <= MAX_OUTGOING:
                self._cond.notify_all()

    def _pump_locked(self, proto: ClientProtocol, now: float) -> StompError | None:
        """Take every event the core has and route it; return a connection-ending error."""
        failure: StompError | None = None
        delivered = False
        self._drain_backlog_locked()
        debug = log.isEnabledFor(logging.DEBUG)
        try:
            event = proto.next_event()
            while event is not None:
                if debug:
                    log.debug("received %r", event)
                if isinstance(event, MessageEvent):
                    self._deliver_locked(event)
                    delivered = True
                elif isinstance(event, Receipt):
                    if event.receipt_id in self._waiting:
                        self._receipts.add(event.receipt_id)
                    delivered = True
                else:
                    failure = error_for_event(event)
                    if failure is not None:
                        break
                event = proto.next_event()
        except ProtocolError as exc:
            failure = exc
        out = take_output(proto, self._ws, now)
        if out:
            self._out += out
        if delivered or failure is not None:
            self._cond.notify_all()
        return failure

    def _deliver_locked(self, event: MessageEvent) -> None:
        if self._backlog:
            self._backlog.append(event)
            return
        sub = self._subs.get(event.subscription)
        if sub is None:
            log.debug("dropping a message for closed subscription %r", event.subscription)
            return
        if len(sub._items) >= sub.max_pending:
            self._backlog.append(event)
            return
        sub._items.append(Message(event, self._epoch, self))

    def _drain_backlog_locked(self) -> None:
        backlog = self._backlog
        moved = False
        while backlog:
            event = backlog[0]
            sub = self._subs.get(event.subscription)
            if sub is not None:
                if len(sub._items) >= sub.max_pending:
                    break
                sub._items.append(Message(event, self._epoch, self))
                moved = True
            backlog.popleft()
        if moved:
            self._cond.notify_all()

    def _fail_locked(self, failure: StompError) -> None:
        self._failure = failure
        self._status = _CLOSED
        self._close_socket()
        self._cond.notify_all()

    def _reconnect(self, lost: StompError) -> bool:
        """After a loss: reconnect if the policy says so; return whether to go on."""
        policy = self._options.reconnect
        with self._cond:
            self._close_socket()
            if self._status in (_CLOSING, _CLOSED):
                return False
            # Messages still set aside belong to the old connection; the broker will
            # redeliver the unacked ones, but auto-acked ones must not be dropped.
            self._drain_backlog_all_locked()
            if policy is None:
                log.warning("connection to %s lost: %s", self._endpoint, lost)
                self._fail_locked(lost)
                return False
            log.warning("connection to %s lost (%s); reconnecting", self._endpoint, lost)
            self._status = _RECONNECTING
            self._epoch += 1  # unanswered receipts and open transactions are lost
            self._cond.notify_all()
        last: StompError = lost
        for delay in policy.delays():
            if delay:
                with self._cond:
                    if self._status != _RECONNECTING:
                        return False
                    self._cond.wait(delay)
            with self._cond:
                if self._status != _RECONNECTING:
                    return False
            try:
                established = self._establish()
            except StompError as exc:
                last = exc
                continue
            with self._cond:
                if self._status != _RECONNECTING:
                    established[0].close()
                    return False
            self._install(*established)
            return True
        with self._cond:
            self._fail_locked(ConnectionLost(f"could not reconnect: {last}"))
        return False

    def _drain_backlog_all_locked(self) -> None:
        while self._backlog:
            event = self._backlog.popleft()
            sub = self._subs.get(event.subscription)
            if sub is not None:
                sub._items.append(Message(event, self._epoch, self))
        self._cond.notify_all()


def send(
    url: str | Sequence[str],
    destination: str,
    body: bytes | str = b"",
    *,
    headers: Mapping[str, str] | None = None,
    content_type: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    host: str | None = None,
    ssl: SslArg = None,
    connect_timeout: float = 10.0,
    receipt_timeout: float = 10.0,
    ws_headers: Mapping[str, str] | None = None,
) -> None:
    """Connect, send one message with a receipt, and disconnect.

    Returns only once the broker confirmed it has the message; raises otherwise.
    """
    with Connection(
        url,
        login=login,
        passcode=passcode,
        host=host,
        ssl=ssl,
        connect_timeout=connect_timeout,
        receipt_timeout=receipt_timeout,
        ws_headers=ws_headers,
    ) as conn:
        conn.send(destination, body, headers=headers, content_type=content_type, receipt=True)

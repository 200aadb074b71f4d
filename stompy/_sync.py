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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Final

from typing_extensions import Unpack

from stompy._events import AckMode, MessageReceived
from stompy._message import MessageBase
from stompy._options import (
    ClientOptions,
    ConnectionOptions,
    Outgoing,
    SslArg,
    log,
    log_sent,
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

__all__ = ("Connection", "Message", "Subscription", "Transaction", "send")

#: Past this many unwritten bytes, senders wait for the I/O thread to catch up.
MAX_OUTGOING: Final = 4 * 1024 * 1024
_RECV_SIZE: Final = 256 * 1024
_SEND_CHUNK: Final = 1024 * 1024


class Message(MessageBase):
    """A received message; ``ack()`` / ``nack()`` answer it on its connection."""

    __slots__ = ("_conn",)

    def __init__(self, event: MessageReceived, epoch: int, conn: Connection) -> None:
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

    def __init__(self, conn: Connection, inbox: Inbox[Message]) -> None:
        self.id = inbox.id
        self.destination = inbox.destination
        self.ack = inbox.ack
        self.headers = dict(inbox.headers)
        self.max_pending = inbox.max_pending
        self._conn = conn
        self._inbox = inbox
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    @property
    def active(self) -> bool:
        return self._inbox.active

    @property
    def pending(self) -> int:
        """How many received messages wait to be taken."""
        return len(self._inbox.items)

    def get(self, timeout: float | None = None) -> Message | None:
        """Return the next message, waiting up to ``timeout`` seconds (``None``: no limit).

        Returns ``None`` on timeout, or when the subscription ended normally and
        nothing is left. Raises the connection's error once it is lost and every
        message received before is handed out.
        """
        conn = self._conn
        inbox = self._inbox
        items = inbox.items
        with conn._lock:  # the condition's lock, entered at C speed
            if not items:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not items:
                    if not inbox.active:
                        return None
                    failure = conn._session.failure
                    if failure is not None:
                        raise failure
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    conn._cond.wait(remaining)
            message = items.popleft()
            if conn._session.backlog and len(items) <= inbox.max_pending // 2:
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
            items = self._inbox.items
            take = min(max_messages - 1, len(items))
            batch += [items.popleft() for _ in range(take)]
            if take and conn._session.wants_resume(self._inbox):
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
            if not self._inbox.active:
                return
            session = conn._session
            epoch = session.epoch
            conn._subs.pop(self.id, None)
            rid = session.unsubscribe(self._inbox, receipt)
            conn._flush_locked()
            if rid is not None:
                conn._wait_receipt_locked(rid, epoch)
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
        if self._conn._session.status in (Status.CONNECTED, Status.RECONNECTING):
            self.unsubscribe()
        else:
            self._inbox.active = False

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
        if self._conn._session.is_stale(self._epoch):
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
        if self._conn._session.is_stale(self._epoch):
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
    The keyword options are :class:`~stompy.ConnectionOptions`, the same for
    :class:`~stompy.AsyncConnection`.
    """

    def __init__(
        self,
        url_or_urls: str | Endpoint | Sequence[str | Endpoint],
        **options: Unpack[ConnectionOptions],
    ) -> None:
        self._options = ClientOptions(url_or_urls, **options)
        self._session: Session[Message] = Session(self._options, self._message)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._sock: socket.socket | None = None
        self._subs: dict[str, Subscription] = {}
        self._thread: threading.Thread | None = None
        # Made at connect(): a user thread writes a byte to wake the I/O thread.
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._wake_sent = False
        self._io_done = False

    def _message(self, event: MessageReceived, epoch: int) -> Message:
        return Message(event, epoch, self)

    def __repr__(self) -> str:
        session = self._session
        where = session.endpoint or self._options.endpoints[0]
        return f"<Connection {where} {session.status}>"

    # -- properties --------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._session.status is Status.CONNECTED

    @property
    def failure(self) -> StompError | None:
        """The error that ended the connection, or ``None`` while it is fine or closed by us."""
        return self._session.failure

    @property
    def version(self) -> str | None:
        """The negotiated STOMP version (``None`` before connecting)."""
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
        """The negotiated ``(outgoing, incoming)`` heart-beat intervals in ms."""
        connected = self._session.connected
        return connected.heartbeats if connected else (0, 0)

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
        session = self._session
        with self._cond:
            if session.status is not Status.NEW:
                raise LocalProtocolError(f"connect() on a connection that is {session.status}")
        last: StompError | None = None
        for delay in session.connect_delays():
            if delay:
                time.sleep(delay)
            try:
                established = self._establish()
            except (ConnectFailed, RemoteProtocolError) as exc:
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
        session = self._session
        with self._cond:
            if session.status is Status.NEW:
                session.closed()
            if (
                session.status in (Status.CONNECTED, Status.RECONNECTING)
                and session.failure is None
            ):
                epoch = session.epoch
                rid = session.begin_close()
                with contextlib.suppress(StompError):
                    self._flush_locked()
                self._cond.notify_all()
                if rid is not None:
                    with contextlib.suppress(StompError):
                        self._wait_receipt_locked(rid, epoch, allow_closing=True)
            session.closed()
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
                session = self._session
                proto = session.proto
                if (
                    session.status is Status.CONNECTED
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
                epoch = self._session.epoch
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
                    session = self._session
                    if session.failure is not None or session.status in (
                        Status.CLOSING,
                        Status.CLOSED,
                    ):
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
            session = self._session
            proto = session.proto
            if (
                session.status is Status.CONNECTED
                and proto is not None
                and proto.state is State.CONNECTED
            ):
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
            self._ready_locked()
            session = self._session
            epoch = session.epoch
            made = session.subscribe(destination, ack, id, headers, max_pending, receipt)
            sub = Subscription(self, made.inbox)
            sub_id = sub.id
            self._subs[sub_id] = sub
            self._flush_locked()
            if made.receipt is not None:
                self._wait_receipt_locked(made.receipt, epoch)
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
            return Transaction(self, tx_id, self._session.epoch)

    def _transaction_end(self, command: str, tx: Transaction, receipt: bool) -> None:
        with self._cond:
            session = self._session
            if session.is_stale(tx._epoch):
                if command == "COMMIT":
                    raise TransactionLost(f"transaction {tx.id!r} was lost with its connection")
                return
            self._ready_locked()
            rid = session.end_transaction(command, tx.id, receipt)
            self._flush_locked()
            if rid is not None:
                self._wait_receipt_locked(rid, tx._epoch, lost=TransactionLost)

    def _acknowledge(
        self, command: str, message: Message, transaction: Transaction | str | None, receipt: bool
    ) -> None:
        tx = transaction.id if isinstance(transaction, Transaction) else transaction
        with self._cond:
            session = self._session
            if session.is_stale(message._epoch):
                log.debug("not answering %r from an earlier connection: it is redelivered", message)
                return
            self._ready_locked()
            epoch = session.epoch
            rid = session.acknowledge(command, message.event, tx, receipt)
            self._flush_locked()
            if rid is not None:
                self._wait_receipt_locked(rid, epoch)

    # -- plumbing under the lock ---------------------------------------------------------

    def _ready_locked(self, give_up: float | None = None) -> ClientProtocol:
        """The protocol, once connected; waits out a reconnect (bounded).

        The wait for a reconnect ends after ``send_timeout``, or at ``give_up`` when
        a repeated send has less time left than that.
        """
        session = self._session
        proto = session.proto
        if session.settling:
            # The core saw the end (an ERROR, say) and the I/O thread is about to
            # reconnect or fail: wait for its verdict rather than misuse a dead core.
            deadline = time.monotonic() + self._options.receipt_timeout
            while session.status is Status.CONNECTED and session.proto is proto:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._io_done:
                    break
                self._cond.wait(remaining)
        if session.status is Status.RECONNECTING:
            policy = self._options.reconnect
            timeout = policy.send_timeout if policy is not None else 0.0
            deadline = time.monotonic() + timeout if give_up is None else give_up
            while session.status is Status.RECONNECTING:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectionLost(f"not reconnected within {timeout} s")
                self._cond.wait(remaining)
        return session.ready()

    def _flush_locked(self, until: float | None = None) -> None:
        """Move the core's bytes to the outgoing buffer and wake the I/O thread.

        A full buffer is waited out until ``until`` (default: ``receipt_timeout``).
        """
        session = self._session
        proto = session.proto
        if proto is None:
            return
        out = session.outgoing
        if session.ws is None:  # Session.flush, inlined: this runs for every frame sent
            data = proto.data_to_send(time.monotonic())
            if not data:
                return
            if log.isEnabledFor(logging.DEBUG):
                log_sent(data, session.endpoint)
            # Queued for the I/O thread, which writes whatever accumulated in one send:
            # measured faster than writing from the caller's thread, which costs a
            # system call per frame.
            out += data
        elif not session.flush(time.monotonic()):
            return
        if not self._wake_sent:
            self._wake()
        if len(out) > MAX_OUTGOING and threading.current_thread() is not self._thread:
            # Receipts may arrive while we wait here: make sure they are kept.
            session.expect_pending()
            deadline = time.monotonic() + self._options.receipt_timeout if until is None else until
            epoch = session.epoch
            while len(session.outgoing) > MAX_OUTGOING and session.epoch == epoch:
                if session.failure is not None:
                    raise session.failure
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
        session = self._session
        session.expect(rid)
        deadline = time.monotonic() + self._options.receipt_timeout if until is None else until
        try:
            while True:
                state = session.receipt_state(
                    rid, epoch, reading=not self._io_done, allow_closing=allow_closing
                )
                if state is ReceiptState.ARRIVED:
                    return
                if state is ReceiptState.FAILED:
                    assert session.failure is not None
                    raise session.failure
                if state is ReceiptState.LOST:
                    raise lost(f"the connection was lost before the receipt {rid!r} arrived")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReceiptTimeout(
                        f"no RECEIPT {rid!r} within {self._options.receipt_timeout} s"
                    )
                self._cond.wait(remaining)
        finally:
            session.forget(rid)

    # -- establishing ---------------------------------------------------------------------

    def _establish(self) -> tuple[socket.socket, Handshake]:
        """Try each address once; return the first that completes CONNECT."""
        errors: list[str] = []
        for endpoint in self._options.endpoints:
            try:
                return self._establish_one(endpoint)
            except ServerError:
                raise
            except (ConnectFailed, RemoteProtocolError) as exc:
                errors.append(str(exc))  # each names its address
                log.info("could not connect to %s: %s", endpoint, exc)
        raise ConnectFailed("; ".join(errors))

    def _establish_one(self, endpoint: Endpoint) -> tuple[socket.socket, Handshake]:
        options = self._options
        deadline = time.monotonic() + options.connect_timeout
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        handshake = self._session.handshake(endpoint)
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection(
                (endpoint.host, endpoint.port), timeout=options.connect_timeout
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=endpoint.host)
            sock.sendall(handshake.first)
            while handshake.connected is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectFailed(f"no CONNECTED from {endpoint} within the connect timeout")
                sock.settimeout(remaining)
                reply = handshake.receive(sock.recv(_RECV_SIZE), time.monotonic())
                if reply:
                    sock.sendall(reply)
            sock.setblocking(False)
            return sock, handshake
        except (OSError, _ssl.SSLError) as exc:
            if sock is not None:
                sock.close()
            raise ConnectFailed(f"cannot connect to {endpoint}: {exc}") from exc
        except BaseException:
            if sock is not None:
                sock.close()
            raise

    def _install(self, sock: socket.socket, handshake: Handshake) -> None:
        with self._cond:
            self._sock = sock
            self._session.install(handshake, time.monotonic())
            if self._session.outgoing:
                self._wake()
            self._cond.notify_all()

    def _close_socket(self) -> None:
        sock = self._sock
        self._sock = None
        if sock is not None:
            ws = self._session.ws
            if ws is not None and not self._session.outgoing:
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
                self._session.fail(ConnectionLost("the I/O thread failed"))
                self._close_socket()
                self._cond.notify_all()
            raise
        finally:
            with self._cond:
                self._io_done = True
                self._cond.notify_all()

    def _serve(self) -> StompError | None:
        """Pump one socket until it ends; return why it ended (``None``: closed by us)."""
        session = self._session
        while True:
            with self._cond:
                if session.status is Status.CLOSED:
                    return None
                sock, proto = self._sock, session.proto
                assert sock is not None
                assert proto is not None
                # Room a consumer made since the last pump: its wake-up may have been
                # folded into one that was already read, so look now, under the lock.
                if session.drain_backlog():
                    self._cond.notify_all()
                paused = session.paused
                want_write = bool(session.outgoing)
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
                    if session.status in (Status.CLOSING, Status.CLOSED):
                        return None
                return ConnectionLost(f"connection to {session.endpoint} failed: {exc}")
            now = time.monotonic()
            with self._cond:
                status: Status = session.status  # a local: another thread changes it
                if status is Status.CLOSED:
                    return None
                ended = None if data is None else session.receive(data, now)
                if alive:
                    proto.note_alive(now)
                proto.handle_timer(now)
                pumped = session.pump(now)
                if pumped.woke:
                    self._cond.notify_all()
                failure = pumped.failure
                if failure is None and ended is not None:
                    # Frames that came before the close were handled; answer it.
                    with contextlib.suppress(OSError):
                        self._send(sock)
                    failure = ended
                if failure is not None:
                    if session.status is Status.CLOSING:
                        return None
                    return failure
                if proto.state is State.CLOSED and not session.outgoing:
                    return None if session.status is Status.CLOSING else ConnectionLost("closed")

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(_RECV_SIZE)
        except (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError):
            return None

    def _send(self, sock: socket.socket) -> None:
        with self._cond:
            chunk = bytes(self._session.outgoing[:_SEND_CHUNK])
        try:
            sent = sock.send(chunk)
        except (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError):
            return
        with self._cond:
            out = self._session.outgoing
            del out[:sent]
            if len(out) <= MAX_OUTGOING:
                self._cond.notify_all()

    def _reconnect(self, lost: StompError) -> bool:
        """After a loss: reconnect if the policy says so; return whether to go on."""
        session = self._session
        with self._cond:
            self._close_socket()
            delays = session.lost(lost)
            self._cond.notify_all()
            if delays is None:
                return False
        last: StompError = lost
        for delay in delays:
            if delay:
                with self._cond:
                    if session.status is not Status.RECONNECTING:
                        return False
                    self._cond.wait(delay)
            with self._cond:
                if session.status is not Status.RECONNECTING:
                    return False
            try:
                established = self._establish()
            except StompError as exc:
                last = exc
                continue
            with self._cond:
                status: Status = session.status  # a local: another thread changes it
                if status is not Status.RECONNECTING:
                    established[0].close()
                    return False
            self._install(*established)
            return True
        with self._cond:
            session.give_up(last)
            self._close_socket()
            self._cond.notify_all()
        return False


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

"""The blocking client: ``Connection``, ``Subscription``, ``Transaction``, ``Message``.

Every call that may wait is one of the engine's calls (:mod:`stompy._engine.calls`),
run by the I/O thread's driver under the connection's lock
(:class:`~stompy._transports.blocking.IOThread`); only the common cases are written out here, for
speed: a send with nothing to wait for, a message already received.

Every wait has a bound: receipts (``receipt_timeout``), a full outgoing buffer, the
connection coming back (``Reconnect.send_timeout``). When the connection ends, every
blocked call and iterator wakes up and raises (``ConnectionLost``,
``HeartbeatTimeout``, ``ServerError``) after handing out what was already received.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Final, NoReturn

from typing_extensions import Unpack

from stompy._checks import MAX_SECONDS, check_flag, check_timeout, wrong_type
from stompy._client.base import (
    ConnectionBase,
    LinkBase,
    SubscriptionBase,
    TransactionBase,
    check_message,
    traced,
    transaction_id,
)
from stompy._engine import keywords as kw
from stompy._engine.callbacks import UNTRACED, call_plainly, handle_message
from stompy._engine.calls import Asking, Call
from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.outgoing import Outgoing, log, note_sent, split_for_sending
from stompy._engine.state import CLOSING, CONNECTED, NEW, RECONNECTING
from stompy._transports.blocking import IOThread
from stompy.errors import LocalProtocolError, StompError

__all__ = ("Connection", "Message", "Subscription", "Transaction", "send")


class Message(MessageBase):
    """A received message; ``ack()`` / ``nack()`` answer it on its connection.

    It is the core's :class:`~stompy.events.MessageReceived` itself (the core makes it
    as this class), and compares by identity.
    """

    __slots__ = ()

    _owner: Link

    def ack(self, transaction: Transaction | str | None = None, *, receipt: bool = False) -> None:
        """Acknowledge the message (in ``transaction`` if given); with ``receipt``, wait
        until the broker confirmed.

        A message received before a reconnect cannot be acked any more: the broker
        has already put it back, and will deliver it again. Nothing is sent; with
        ``receipt=True`` this raises :class:`~stompy.errors.AckLost`, else it does
        nothing.

        Raises :class:`~stompy.errors.LocalProtocolError` (nothing sent, the connection
        lives on) for a message answered already (by ``ack()`` or ``nack()``; with
        ``ack="client"``, also by the answer to a later message, which is cumulative; an
        aborted transaction's answers do not count), and for one of an ``auto``
        subscription.
        """
        self._owner.answer("ACK", self, transaction, receipt)

    def nack(self, transaction: Transaction | str | None = None, *, receipt: bool = False) -> None:
        """Tell the broker the message was not consumed (STOMP 1.1 and later); for a
        message from before a reconnect, or one answered already, as :meth:`ack`."""
        self._owner.answer("NACK", self, transaction, receipt)

    def reply(self, body: bytes | str, **options: Unpack[kw.MessageOptions]) -> None:
        """Answer a request: send ``body`` to this message's ``reply-to``, with its
        ``correlation-id`` (see :meth:`Connection.request`); otherwise as
        :meth:`Connection.send`. Raises :class:`~stompy.errors.NoReplyTo` (nothing
        sent) when the message has no ``reply-to``."""
        kw.check(options, kw.MESSAGE, "Message.reply")
        link = self._owner
        link.io.run(traced(link.call(), link.telemetry).reply(self, body, options))


class Link(LinkBase[Message]):
    """What a :class:`Connection`'s messages and subscriptions hold of it (see
    :class:`~stompy._client.base.LinkBase`): also the I/O thread that runs its calls,
    and its subscriptions, whose dispatcher threads ``close()`` joins."""

    __slots__ = ("io", "subscriptions")

    def __init__(self, io: IOThread[Message]) -> None:
        super().__init__(io.engine)
        self.io = io
        self.subscriptions: dict[str, Subscription] = {}

    def call(self) -> Call[Message]:
        """A call on the connection, starting now."""
        return Call(self.engine, time.monotonic())

    def answer(
        self, command: str, message: Message, transaction: Transaction | str | None, receipt: bool
    ) -> None:
        """ACK or NACK ``message`` (see :meth:`Message.ack`)."""
        tx = transaction_id(transaction, self.engine)
        self.io.run(self.call().acknowledge(command, message, message._epoch, tx, receipt))


class Subscription(SubscriptionBase[Message]):
    """A subscription: iterate it, ``get()`` from it, or let ``on_message`` run.

    At most ``max_pending`` received messages wait in it. With client acks the broker
    is asked to send no more (a prefetch); past that, ``overflow`` decides: the
    connection stops reading until the consumer catches up (``"pause"``), or the
    subscription ends with :class:`~stompy.errors.SubscriptionOverflow` (``"fail"``).
    """

    def __init__(self, link: Link, inbox: Inbox[Message]) -> None:
        # Not the Connection (see Link): its dispatcher thread holds the subscription.
        super().__init__(link.engine, inbox, link.telemetry)
        self._link = link
        self._io = link.io
        self._thread: threading.Thread | None = None

    def get(self, timeout: float | None = None) -> Message | None:
        """Return the next message, waiting up to ``timeout`` seconds (``None``: no limit).

        Returns ``None`` on timeout, or when the subscription ended normally and
        nothing is left. Raises the connection's error once it is lost and every
        message received before is handed out; :class:`~stompy.errors.ConfigurationError`
        for a ``timeout`` below 0, NaN or too long (:class:`TypeError`: not a number).
        """
        if timeout is not None and not (type(timeout) is float and 0.0 <= timeout <= MAX_SECONDS):
            timeout = check_timeout(timeout)  # (its usual case above, without the call)
        if self._telemetry is not None:
            started = time.time_ns()
            return self._received(self._take(timeout), started)
        # _take() written out: a consumer calls this once per message.
        inbox = self._inbox
        message = inbox.take()
        if message is None:
            message = self._io.take(inbox, timeout, self._ended)
            if message is None:
                return None
        delivery = self._delivery
        if delivery.backlog and delivery.wants_resume(inbox):
            self._made_room()
        return message

    def _take(self, timeout: float | None) -> Message | None:
        """:meth:`get`, untraced."""
        # A message already here is taken without the lock: the I/O thread only adds
        # (see Inbox).
        inbox = self._inbox
        message = inbox.take()
        if message is None:
            message = self._io.take(inbox, timeout, self._ended)  # waits, under the lock
            if message is None:
                return None
        if self._delivery.backlog:
            self._made_room()
        return message

    def _made_room(self) -> None:
        """After a take while the I/O thread keeps a backlog: wake it once half the
        inbox is free, not at every message, or each get() would cost it a wake-up to
        move one message. Looked at without the lock first, as at most takes it is not
        time yet (the lengths it reads are read whole), and again under it."""
        delivery = self._delivery
        if not delivery.wants_resume(self._inbox):
            return
        io = self._io
        with io.lock:
            if delivery.wants_resume(self._inbox):
                io.wake()

    def get_batch(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_messages`` messages, oldest first: waits up to ``timeout`` seconds
        for the first (``None``: no limit), then takes what has already arrived.

        One lock turn for the whole batch: a consumer that handles messages in bulk
        pays the hand-off from the I/O thread once per batch, not once per message.
        Returns an empty list where :meth:`get` returns ``None``, and raises what it
        raises. :class:`~stompy.errors.ConfigurationError` if ``max_messages < 1``.
        """
        timeout = self._check_batch(max_messages, timeout)
        started = time.time_ns()
        first = self._take(timeout)
        if first is None:
            return []
        batch = [first]
        with self._io.lock:
            if self._take_more(batch, max_messages):
                self._io.wake()
        return self._received_batch(batch, started)

    def __iter__(self) -> Iterator[Message]:
        """Yield messages until the subscription or the connection ends."""
        while True:
            message = self.get()
            if message is None:
                return
            yield message

    def unsubscribe(self, *, receipt: bool = False) -> None:
        """Stop the subscription; messages already received stay available.

        With ``receipt=True``, returns once the broker confirmed (raises
        :class:`ReceiptTimeout` if it does not in time). A connection that ends first
        ended the subscription too, and it is not made again: that returns as well.
        """
        io = self._io
        with io.cond:
            if not self._inbox.active:
                return
            self._link.subscriptions.pop(self.id, None)
            try:
                io.run(self._link.call().unsubscribe(self._inbox, receipt))
            finally:
                io.notify_all()
        self._join_dispatcher()

    def _join_dispatcher(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._engine.options.receipt_timeout)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._engine.status in (CONNECTED, RECONNECTING):
            self.unsubscribe()
        else:
            self._inbox.end()

    def _dispatch(self, callback: Callable[[Message], object]) -> None:
        """Run ``callback`` for each message, in its own thread (see ``on_message``),
        as :func:`~stompy._engine.callbacks.handle_message` says."""
        telemetry = self._telemetry
        on_error = self._engine.options.on_callback_error
        try:
            while (message := self._take(None)) is not None:
                around = UNTRACED if telemetry is None else telemetry.processing(message)
                calling = handle_message(callback, message, self, on_error, around)
                who = f"the on_message callback of {self!r}"
                call_plainly(calling, "on_message", message, who)
        except StompError as exc:
            log.debug("%r ended: %s", self, exc)


class Transaction(TransactionBase):
    """A STOMP transaction: SENDs, ACKs and NACKs in it take effect at ``commit()``.

    As a context manager it commits when the block ends and aborts if it raises.
    """

    def __init__(self, conn: Connection, id: str, epoch: int) -> None:
        super().__init__(conn._engine, id, epoch)
        self._conn = conn

    def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        """Send in the transaction (see :meth:`Connection.send`): delivered at ``commit()``."""
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
        """Acknowledge ``message`` in the transaction (see :meth:`Message.ack`); a
        ``message`` that is no :class:`Message` is a :class:`TypeError`."""
        check_message(message, Message, "Transaction.ack")
        self._check()
        message.ack(self)

    def nack(self, message: Message) -> None:
        """NACK ``message`` in the transaction (see :meth:`Message.nack`)."""
        check_message(message, Message, "Transaction.nack")
        self._check()
        message.nack(self)

    def commit(self, *, receipt: bool = True) -> None:
        """Commit; with ``receipt`` (the default) wait until the broker confirmed."""
        check_flag("receipt", receipt)  # before the transaction counts as finished
        self._check()
        self._done = True
        self._conn._end(self, "COMMIT", receipt)
        self._committed = True

    def abort(self, *, receipt: bool = False) -> None:
        """Roll back everything sent or acked in the transaction.

        Does nothing for a transaction already aborted, lost with its connection, or
        whose ``commit()`` raised; raises :class:`LocalProtocolError` for one committed.
        """
        check_flag("receipt", receipt)
        if self._finish():
            self._conn._end(self, "ABORT", receipt)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            if not self._done:
                self.commit()
        else:
            with contextlib.suppress(StompError):
                self.abort()


class Connection(ConnectionBase[Message]):
    """A blocking STOMP connection.

    ``url_or_urls`` is one ``stomp://``, ``stomp+ssl://``, ``ws://`` or ``wss://``
    address or several (tried in turn). Entering the ``with`` block connects; leaving
    it disconnects gracefully (DISCONNECT with a receipt, then close), also when the
    block raised. ``ws_headers`` are extra HTTP headers for a WebSocket handshake.
    The keyword options are :class:`~stompy.ConnectionOptions`, the same for
    :class:`~stompy.AsyncConnection`. Any number of threads may share it, and several
    may read one :class:`Subscription` (each message goes to one of them).
    """

    _link: Link

    def _message_class(self) -> type[Message]:
        return Message

    def _setup(self) -> None:
        options = self._options
        for name in _HOOK_NAMES:
            _check_plain(name, getattr(options, name))
        self._io = io = IOThread(self._engine)
        # What answers its messages; it must not hold the Connection: see __del__.
        self._engine.owner = self._link = Link(io)

    def _gather_reads(self, seconds: float) -> None:
        """Internal, the Spark source's: let a stream's bytes gather up to ``seconds``
        before the I/O thread reads them (see :attr:`IOThread.gather`)."""
        self._io.gather = seconds

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # Like a socket: never closed, the Connection warns and lets its thread and
        # socket go (nothing the I/O thread holds refers to the Connection).
        io = getattr(self, "_io", None)
        if io is None or self._engine.status not in (CONNECTED, RECONNECTING):
            return
        try:
            _warn(f"unclosed {self!r}", ResourceWarning, stacklevel=2, source=self)
        finally:
            io.abandon()

    def __enter__(self) -> Connection:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[1] is None:
            self.close()
        else:
            self._close()  # the block's own exception goes on, not the broker's ERROR

    async def __aenter__(self) -> NoReturn:
        # Only for the message (see AsyncConnection.__enter__).
        raise TypeError(
            "a Connection is opened with `with Connection(...) as conn:`, not `async with` "
            "(the async client is stompy.AsyncConnection)"
        )

    async def __aexit__(self, *exc_info: object) -> None:  # pragma: no cover - never entered
        pass

    def connect(self) -> None:
        """Connect to the first address that answers (with retries if ``reconnect`` is set).

        Raises :class:`ConnectFailed` when no address can be reached,
        :class:`ServerError` when the broker refuses (for example a wrong passcode), and
        :class:`LocalProtocolError` on a connection opened before (also one that was
        closed since: make a new one).
        """
        with self._io.cond:
            if self._engine.status is not NEW:
                raise LocalProtocolError(
                    f"connect() on a connection that is {self._engine.status}: "
                    "a Connection is opened once; make a new one"
                )
        self._instrument()
        self._io.connect()

    def close(self) -> bool:
        """Disconnect gracefully: DISCONNECT, wait for its receipt (up to
        ``receipt_timeout``), close the socket.

        Returns ``True`` for a clean close: the broker confirmed the DISCONNECT, so it
        processed every frame sent before. ``False`` when it did not (no receipt in
        time, or the connection was lost or never made): what was sent last, without a
        receipt of its own, may not have arrived. Safe to call more than once (it says
        the same again) and after the connection was lost; a close while another is
        under way (in another thread) waits for it and says what it does.

        Raises :class:`ServerError` when the broker's ERROR ended the connection and no
        call raised it yet (once): it refused something sent without a receipt (a full
        queue, a destination not allowed), which is lost. The connection is closed all
        the same. The end of the ``with`` block raises it too, unless the block raised.
        """
        clean = self._close()
        self._raise_refusal()
        return clean

    def _close(self) -> bool:
        io = self._io
        with io.cond:
            # Every get() waiting wakes: it looks again once the goodbye waits for its
            # receipt, which releases the lock, and finds the connection closing.
            io.notify_all()
            engine = self._engine
            # Another thread's goodbye under way: its outcome is this one's too, once
            # it is known (a goodbye of ours would end it unconfirmed). Bounded by its
            # own bound, the receipt timeout.
            until = time.monotonic() + self._options.receipt_timeout + 1.0
            while engine.status is CLOSING and (left := until - time.monotonic()) > 0:
                io.cond.wait(left)
            clean = io.run(Call(engine, time.monotonic()).goodbye())
            subs = list(self._link.subscriptions.values())
            self._link.subscriptions.clear()
        io.stop(self._options.connect_timeout)
        for sub in subs:
            sub._join_dispatcher()
        return clean

    # -- calls -------------------------------------------------------------------------

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
        unless told otherwise (a content type naming another charset is a
        :class:`ConfigurationError`: pass bytes in it); a body that is neither ``bytes``
        nor ``str`` (a ``bytearray``: pass ``bytes(b)``), or a destination that is not a
        ``str``, is a :class:`TypeError` and nothing is sent. With ``receipt=True`` this
        returns only once the broker confirmed, and raises :class:`ReceiptTimeout` if it
        does not in time.

        With ``reconnect`` on, a send with a receipt whose connection is lost before
        the receipt came is sent again on the next connection (until
        ``Reconnect.send_timeout``), with the header ``stompy-resent: N`` (the repeat's
        number): the broker may then hold it twice, never zero times. A send inside a
        transaction is not repeated (the transaction is lost). Repeats included, the
        call returns or raises within ``send_timeout + receipt_timeout``.

        Raises :class:`ConnectionLost` when the connection is lost first (without a
        receipt: while the send waited for room in the outgoing buffer); a broker that
        takes nothing for ``receipt_timeout`` ends the connection so.
        """
        telemetry = self._link.telemetry
        engine = self._engine
        if transaction is None and telemetry is None:
            # The common case, kept short: nothing to wait for on a connection that is up.
            if receipt is False and self._io.send_now(destination, body, headers, content_type):
                return
            # Untraced, in no transaction: the call as it is (traced() and
            # transaction_id() would return what they are given).
            plain = Call(engine, time.monotonic())
            if receipt is True:  # Call.send's work, its flag checked: a round trip's
                message = Outgoing(destination, body, headers, content_type)
                steps = plain.send_one(message, None, True)
            else:
                steps = plain.send(destination, body, headers, content_type, None, receipt)
        else:
            call = traced(Call(engine, time.monotonic()), telemetry)
            tx = transaction_id(transaction, engine)
            steps = call.send(destination, body, headers, content_type, tx, receipt)
        self._io.run(steps)

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
        sent before an error stays sent; the error is :meth:`send`'s (or the
        iterable's), with a note saying how many of the batch went out: the first N,
        none after them. An :class:`Outgoing` refuses what :meth:`send` would where it
        is made, so only what a send learns on the connection (a body over the
        broker's limit) can stop a batch partway.
        """
        tx = transaction_id(transaction, self._engine)
        count = 0
        work: list[Outgoing] | Outgoing = []
        try:
            for work in split_for_sending(messages):
                call = traced(Call(self._engine, time.monotonic()), self._link.telemetry)
                count += self._io.run(call.send_some(work, receipt, tx, count))
        except Exception as exc:
            note_sent(exc, count, receipt, isinstance(work, Outgoing))  # what went out
            raise
        return count

    def request(
        self, destination: str, body: bytes | str = b"", **options: Unpack[kw.RequestOptions]
    ) -> Message:
        """Send a request to ``destination`` and return the reply.

        The request carries a ``reply-to`` naming a temporary queue private to this
        connection and a fresh ``correlation-id``; the reply is the message sent there
        with that ``correlation-id`` (a responder's :meth:`Message.reply`). Many threads
        may wait for replies on one connection at once. Raises
        :class:`~stompy.errors.RequestTimeout` when none came within ``timeout``
        seconds (30 by default; a later reply is dropped), and
        :class:`~stompy.errors.ConnectionLost` when the connection was lost first (or
        closed by :meth:`close`, which the error says).
        """
        if not kw.REQUEST.issuperset(options):  # (kw.check()'s own test, written out)
            kw.check(options, kw.REQUEST, "Connection.request")
        telemetry = self._link.telemetry
        if telemetry is None:  # straight when nothing is in its way (see Asking)
            return self._io.run(Asking(self._engine, time.monotonic(), destination, body, options))
        call = traced(Call(self._engine, time.monotonic()), telemetry)
        return self._io.run(call.request(destination, body, options))

    def subscribe(
        self,
        destination: str,
        *,
        on_message: Callable[[Message], object] | None = None,
        **options: Unpack[kw.SubscribeOptions],
    ) -> Subscription:
        """Subscribe to ``destination`` and return the :class:`Subscription`.

        With ``on_message``, that function is called for each message in a thread of
        the subscription's own (so a slow callback never delays heart-beats); what it
        raises goes to the ``on_callback_error`` hook, or is printed to stderr (see
        ``docs/acks.md``), and the next message comes. An ``on_message`` that is not
        callable is a :class:`TypeError`, and nothing is subscribed.
        """
        kw.check(options, kw.SUBSCRIBE, "Connection.subscribe")
        if on_message is not None and not callable(on_message):
            raise wrong_type("on_message", "a callable or None", on_message)
        _check_plain("on_message", on_message)
        io = self._io
        with io.cond:
            call = Call(self._engine, time.monotonic())
            inbox = io.run(call.subscribe(destination, options))
            sub = self._link.subscriptions[inbox.id] = Subscription(self._link, inbox)
        if on_message is not None:
            sub._until_closed = True
            thread = threading.Thread(
                target=sub._dispatch, args=(on_message,), name=f"stompy-sub-{sub.id}", daemon=True
            )
            sub._thread = thread
            thread.start()
        return sub

    def transaction(self) -> Transaction:
        """Begin a transaction; use it as a context manager to commit or abort it."""
        with self._io.cond:
            tx = self._io.run(Call(self._engine, time.monotonic()).begin())
            return Transaction(self, tx, self._engine.epoch)

    def _end(self, tx: Transaction, command: str, receipt: bool) -> None:
        call = Call(self._engine, time.monotonic())
        self._io.run(call.end_transaction(command, tx.id, tx._epoch, receipt))


#: The connection's hooks, each called as a plain function (in the hooks' thread, or the
#: callback's for ``on_callback_error``).
_HOOK_NAMES: Final = (
    "on_connected",
    "on_reconnected",
    "on_disconnected",
    "on_error",
    "on_unrouted",
    "on_callback_error",
)


def _check_plain(name: str, function: object) -> None:
    """Refuse an ``async def`` function where the blocking client calls one: calling it
    only makes a coroutine that nobody awaits, so it would never run (and the message
    handed to an ``on_message`` one would be lost, with ``ack="auto"``)."""
    if inspect.iscoroutinefunction(function):
        raise TypeError(
            f"{name}: Connection calls plain functions, got the coroutine function "
            f"{getattr(function, '__qualname__', function)!s}(): use def, or AsyncConnection"
        )


def send(
    url: str | Sequence[str],
    destination: str,
    body: bytes | str = b"",
    **options: Unpack[kw.OneShotOptions],
) -> None:
    """Connect, send one message with a receipt, and disconnect.

    Returns only once the broker confirmed it has the message; raises otherwise.
    """
    connection, message = kw.one_shot(options, "send")
    with Connection(url, **connection) as conn:
        conn.send(destination, body, **message)

"""The engine: every decision of a client connection that is not moving bytes
or waiting.

:class:`ClientProtocol` knows one STOMP connection. A client lives longer: it
reconnects, replays its subscriptions, keeps received messages for slow consumers,
matches receipts to the calls that wait for them, and says goodbye. :class:`Engine`
holds that state and makes those decisions for both transports, which only move
bytes, wait, and wake the user's waits. Like the core, it does no I/O and reads no
clock: time and randomness come in as arguments.

The parts it decides over live in modules of their own: establishing a connection
(:mod:`stompy._engine.connecting`), where a received message goes and when to stop
reading (:mod:`stompy._engine.delivery`, over each subscription's
:mod:`~stompy._engine.inbox`), the receipts and the replies that calls wait for
(:mod:`stompy._engine.receipts`, :mod:`stompy._engine.requests`), what was
acknowledged (:mod:`stompy._engine.acks`) and the queued hook calls
(:mod:`stompy._engine.notices`); import their names from there.

Heart-beats: the transport calls :meth:`Engine.tick` at :meth:`Engine.next_deadline`,
with a probe that says whether bytes wait unread in its socket. Bytes that wait are a
sign of life, however long the client took to read them: a client that stopped
reading (backpressure, a blocked event loop) never takes the broker for dead.

Lifecycle hooks: the engine decides when the application hears of a connection made,
lost or made again, an ERROR frame, or a MESSAGE for no known subscription, and queues
the call in :attr:`Engine.notices` for the transport to make (:meth:`Engine.notify`).

Each established connection is an *epoch*. What belongs to an epoch (unanswered
receipts, open transactions, unacked messages) is void in the next: an ACK for a
message from an earlier epoch is a no-op, since the broker has put it back.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

from stompy._core.events import AckMode, Connected, MessageReceived, Receipt
from stompy._core.protocol import ClientProtocol
from stompy._engine.acks import AckBook
from stompy._engine.connecting import Attempts, Handshake
from stompy._engine.delivery import Delivery
from stompy._engine.failures import error_for_event, too_large
from stompy._engine.inbox import Inbox, subscribe_headers
from stompy._engine.message import MessageBase
from stompy._engine.notices import Notice, queue_notice
from stompy._engine.options import ClientOptions, Overflow, check_overflow
from stompy._engine.outgoing import log_sent, take_output
from stompy._engine.receipts import Receipts
from stompy._engine.requests import (
    REPLY_QUEUE,
    Request,
    Requests,
    check_request_headers,
    explicit_replies,
    reply_destination,
    reply_route,
)
from stompy._engine.state import (
    CLOSED,
    CLOSING,
    CONNECTED,
    NEW,
    PROTOCOL_CLOSED,
    RECONNECTING,
    ReceiptState,
)
from stompy._engine.urls import Endpoint
from stompy.errors import (
    ConnectionLost,
    LocalProtocolError,
    ProtocolError,
    ServerError,
    StompError,
    _again,
)

if TYPE_CHECKING:
    from stompy._engine.websocket import WebSocket

__all__ = (
    "MAX_OUTGOING",
    "TRANSACTION_PREFIX",
    "Pumped",
    "Engine",
    "Subscribed",
)

log: Final = logging.getLogger("stompy")

_DEBUG: Final = logging.DEBUG
# Module constants for the steps that run per call: an Enum's member looked up on its
# class costs more (see docs/performance.md, "Figures behind the core's comments").
_ARRIVED: Final = ReceiptState.ARRIVED
_PENDING: Final = ReceiptState.PENDING
_LOST: Final = ReceiptState.LOST
#: logging's own record of the levels the stompy logger logs at, which
#: ``Logger.isEnabledFor`` fills and logging empties whenever its settings change (a
#: ``setLevel()``, ``disable()``...): :func:`_debug_on` reads it without that call.
#: (An empty dict where the logger has none: every look is then the call.)
_LEVELS: Final[dict[int, bool]] = getattr(log, "_cache", {})


def _debug_on() -> bool:
    """Whether the stompy logger logs at DEBUG, as ``log.isEnabledFor(DEBUG)`` says,
    without calling it while logging's settings are unchanged (a compiled call, where
    ``isEnabledFor`` is an interpreted one)."""
    enabled = _LEVELS.get(_DEBUG)
    if enabled is None:  # not looked up since logging's settings changed
        return log.isEnabledFor(_DEBUG)
    return enabled and not log.disabled


#: Past this many unwritten bytes, a call waits for the transport to catch up.
MAX_OUTGOING: Final = 4 * 1024 * 1024

#: The ids of the transactions the engine begins are this and a number the engine counts
#: across the connections, never again from 1: no frame of a transaction lost with its
#: connection can name one of a later connection's, and the number alone tells whether
#: the transaction's connection ended (:meth:`Engine.transaction_lost`).
TRANSACTION_PREFIX: Final = "tx-"

#: A transport's message class: the core makes it of each MESSAGE, the engine stamps it.
M = TypeVar("M", bound=MessageBase)


class Subscribed(Generic[M]):
    """What :meth:`Engine.subscribe` made: the inbox, and the receipt id to wait for."""

    __slots__ = ("inbox", "receipt")

    def __init__(self, inbox: Inbox[M], receipt: str | None) -> None:
        self.inbox = inbox
        self.receipt = receipt


class Pumped:
    """What one :meth:`Engine.pump` did: whether anyone should be woken, why the
    connection ended (if it did), and the ``correlation-id`` of each request that got
    its reply."""

    __slots__ = ("failure", "replied", "woke")

    def __init__(self, woke: bool, failure: StompError | None, replied: Sequence[str] = ()) -> None:
        self.woke = woke
        self.failure = failure
        self.replied = replied


#: What most pumps did, made once: woke somebody (or nobody), no failure, no reply.
_WOKE: Final = Pumped(True, None)
_QUIET: Final = Pumped(False, None)


class Engine(Generic[M]):
    """A client connection's state across reconnects, and the rules that change it.

    ``message_class`` is the transport's message class (:class:`MessageBase` or a
    subclass): the core makes one of each MESSAGE (see
    :attr:`ClientProtocol.message_class`), and the engine stamps it with its epoch and
    :attr:`owner`, what answers it. ``uniform(a, b)`` is the randomness of the
    reconnect jitter.
    """

    def __init__(
        self,
        options: ClientOptions,
        message_class: type[M],
        *,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.options = options
        self.status = NEW
        #: The error that ended the engine for good, or ``None``.
        self.failure: StompError | None = None
        self.epoch = 0
        self.proto: ClientProtocol | None = None
        #: The WebSocket framing of the current connection (``None`` for plain STOMP).
        self.ws: WebSocket | None = None
        self.endpoint: Endpoint | None = None
        self.connected: Connected | None = None
        #: Encoded bytes not yet written, in order.
        self.outgoing = bytearray()
        #: Whether a transport serves the engine (reads, and will give a verdict when
        #: the connection ends): set by :meth:`install`, cleared by the transport.
        self.serving = False
        #: How the current connection ended, seen by the transport before its verdict
        #: (reconnect or fail); see :meth:`saw_end`.
        self.ending: StompError | None = None
        #: The last connection that ended, as ``(epoch, why)``: what its calls that wake
        #: after the next one is made say they were lost to (see :meth:`end_of`).
        self.ended: tuple[int, StompError] | None = None
        #: The class of the messages the core makes for the transport.
        self.message_class = message_class
        #: What answers the messages (a transport may set it after making its own parts:
        #: see ``Connection``); each message carries it.
        self.owner: object = None
        self._uniform = uniform
        #: The receipts calls wait for.
        self.receipts = Receipts()
        #: The requests waiting for their reply.
        self.requests: Requests[M] = Requests()
        self._reply_subscribed = 0  # the epoch in which REPLY_QUEUE was subscribed to
        self._reply_to = REPLY_QUEUE  # ... and the destination of that subscription
        #: How the last request's replies were awaited, kept for the next one on the same
        #: connection: (epoch, reply_subscription, reply-to, route in words). The broker's
        #: ``server`` it depends on is the epoch's: it changes only with the connection.
        self._replies_chosen: tuple[int, str, str, str] | None = None
        #: What was answered of the messages delivered.
        self.acks = AckBook()
        self._now = 0.0  # the time as the transport last said (for the backlog's clock)
        #: Since when bytes wait to be written with no progress (``None``: none wait).
        self._write_since: float | None = None
        #: Hook calls for the transport to make, in order (see :class:`Notice`).
        self.notices: deque[Notice] = deque()
        #: The subscriptions, and where each received message goes.
        self.delivery: Delivery[M] = Delivery(
            options, self.requests, self.notices, self._overflowed
        )
        self._installed = 0  # connections established so far
        self._transactions_begun = 0  # over all connections: the last id's number
        #: The transactions numbered up to this one were begun on a connection that
        #: ended, which the broker aborted (see :meth:`transaction_lost`).
        self._transactions_lost = 0
        self._end_told = False  # on_disconnected was queued for the current connection
        #: Whether the stompy logger logs at DEBUG, as of the last :meth:`pump` (one look
        #: per batch of received bytes, rather than one per frame sent).
        self.debug = _debug_on()
        #: Whether the broker confirmed the goodbye (its DISCONNECT receipt came); set
        #: when the engine is closed (see :meth:`Call.goodbye`).
        self.goodbye_confirmed: bool | None = None
        #: The broker's ERROR that ended the engine (none reconnected after it): the
        #: clients' ``close()`` raises it if no call did (a message sent without a
        #: receipt that the broker refused is told so, not only in a WARNING).
        self.refusal: ServerError | None = None

    def __repr__(self) -> str:
        return f"<Engine {self.endpoint} {self.status} epoch={self.epoch}>"

    # -- establishing --------------------------------------------------------------------

    def handshake(self, endpoint: Endpoint) -> Handshake:
        return Handshake(self.options, endpoint, self.message_class)

    def connect_attempts(self) -> Attempts:
        """The attempts of the first connect: one round, or the reconnect policy's."""
        policy = self.options.reconnect
        delays = policy.delays(self._uniform) if policy is not None else iter((0.0,))
        return Attempts(self.options.endpoints, delays, first=True)

    def install(self, handshake: Handshake, now: float) -> None:
        """Make an established connection the current one: a new epoch, in which every
        subscription is made again with the same id."""
        assert handshake.connected is not None
        proto = handshake.proto
        previous = self.proto
        if previous is not None:
            # Ids unique across the connections: a call still waiting for a receipt of
            # the previous one must not take a receipt of this one's for its own.
            proto.number_ids_after(previous.last_id)
        self.proto = proto
        self.ws = handshake.ws
        self.endpoint = handshake.endpoint
        self.connected = handshake.connected
        self.outgoing = bytearray()
        self._write_since = None
        self.delivery.backlog.clear()
        self.acks.clear()
        self.epoch += 1
        self.status = CONNECTED
        self.serving = True
        self.ending = None
        self.debug = _debug_on()
        self._now = now
        self.delivery.watch(now, self.endpoint)
        for inbox in self.delivery.inboxes.values():
            headers = subscribe_headers(inbox.ack, inbox.headers, inbox.max_pending)
            proto.subscribe(inbox.destination, ack=inbox.ack, id=inbox.id, headers=headers)
        self.flush(now)
        self._installed += 1
        self._end_told = False
        options = self.options
        if self._installed == 1:
            self.notify("on_connected", options.on_connected, self.endpoint)
        else:
            self.notify("on_reconnected", options.on_reconnected, self.endpoint)

    def notify(self, what: str, hook: Callable[[Any], object] | None, argument: object) -> None:
        """Queue ``hook(argument)``, the hook the option ``what`` set (``None``: unset),
        for the transport to call (see :mod:`stompy._engine.notices`)."""
        queue_notice(self.notices, what, hook, argument)

    def _told_end(self, error: StompError | None) -> None:
        """Queue ``on_disconnected(error)`` once per connection."""
        if self._installed and not self._end_told:
            self._end_told = True
            self.notify("on_disconnected", self.options.on_disconnected, error)

    # -- intents ---------------------------------------------------------------------------

    @property
    def settling(self) -> bool:
        """The connection ended (an ERROR, say), and the transport has not yet decided
        between reconnecting and failing: an intent waits for that verdict."""
        proto = self.proto
        return self.status is CONNECTED and (
            self.ending is not None or (proto is not None and proto.state is PROTOCOL_CLOSED)
        )

    def usable(self) -> ClientProtocol | None:
        """The core, when an intent can run on it right away (no wait, no error)."""
        proto = self.proto
        if (
            self.status is CONNECTED
            and self.ending is None
            and proto is not None
            and proto.state is not PROTOCOL_CLOSED
        ):
            return proto
        return None

    def saw_end(self, error: StompError) -> None:
        """The transport saw the connection end with ``error``; its verdict (:meth:`lost`)
        follows. Until then intents wait rather than run on a dead core."""
        if self.ending is None and self.status is CONNECTED:
            self.ending = error

    def ready(self) -> ClientProtocol:
        """The core to run an intent on; raises why there is none (once no wait helps)."""
        if self.failure is not None:
            raise _again(self.failure) from self.failure
        proto = self.proto
        if self.status is NEW:
            raise LocalProtocolError(
                f"the connection is new, not open yet: {self.message_class.opening}"
            )
        if self.status is not CONNECTED or proto is None:
            raise LocalProtocolError(f"the connection is {self.status}")
        return proto

    def send_now(
        self,
        destination: object,  # object: the core checks them (see ClientProtocol.send)
        body: object,
        headers: Mapping[str, str] | None,
        content_type: object,
        clock: Callable[[], float],
    ) -> bool:
        """The clients' fast path of a send that waits for nothing (no receipt, no
        transaction): if the core takes intents right away (see :meth:`usable`), queue
        the SEND, move its bytes to :attr:`outgoing` and return True; else False, and
        the client takes the long way (a call). Raises what ``ClientProtocol.send`` does.

        ``clock`` is read only when outgoing heart-beats are on (the last write decides
        when the next is due); the write deadline starts when the transport next looks
        (:meth:`write_deadline`)."""
        proto = self.proto
        if (
            self.status is not CONNECTED
            or self.ending is not None
            or proto is None
            or proto.state is PROTOCOL_CLOSED
        ):
            return False
        proto.send(destination, body, headers=headers, content_type=content_type)
        # Asked per send, not taken from the last pump: a publisher may hear nothing
        # from the broker, and DEBUG switched on must show its next SEND. Off by
        # logging's own record (the common case): no call.
        debug = False if _DEBUG in _LEVELS and not _LEVELS[_DEBUG] else _debug_on()
        if self.ws is None:  # take_output, inlined: this runs for every message sent
            if proto.negotiated_heartbeats[0]:
                data = proto.data_to_send(clock())
            else:
                data = proto.data_to_send()
            if debug:
                log_sent(data, self.endpoint)
        else:
            now = clock() if proto.negotiated_heartbeats[0] else None
            data = take_output(proto, self.ws, now, self.endpoint if debug else None)
        self.outgoing += data
        return True

    def flush(self, now: float | None) -> bool:
        """Move the core's encoded frames to :attr:`outgoing`; whether there were any."""
        proto = self.proto
        if proto is None:
            return False
        if self.ws is None:  # take_output, written out: this runs at every call and pump
            data = proto.data_to_send(now)
            if data:
                log_sent(data, self.endpoint)
        else:
            data = take_output(proto, self.ws, now, self.endpoint)
        if data:
            if not self.outgoing and now is not None:
                self._write_since = now  # the write deadline counts from here
            self.outgoing += data
            return True
        return False

    def subscribe(
        self,
        destination: object,  # object: the core checks it (see ClientProtocol.send)
        ack: AckMode,
        id: str | None,
        headers: Mapping[str, str] | None,
        max_pending: int | None,
        receipt: bool,
        overflow: Overflow | None = None,
    ) -> Subscribed[M]:
        """SUBSCRIBE on the current connection; the inbox and the receipt id to wait for.

        ``max_pending`` and ``overflow`` default to the connection's; in the client ack
        modes the SUBSCRIBE asks for a prefetch of ``max_pending``
        (:func:`subscribe_headers`). The caller checked ``max_pending`` (``Call.subscribe``,
        as ``ClientOptions`` the connection's).
        """
        options = self.options
        pending = max_pending if max_pending is not None else options.max_pending
        if overflow is not None:
            check_overflow(overflow)
        proto = self.ready()
        rid = proto.new_receipt_id() if receipt else None
        sub_id = proto.subscribe(
            destination,
            ack=ack,
            id=id,
            headers=subscribe_headers(ack, headers or {}, pending),
            receipt=rid if rid else False,
        )
        inbox: Inbox[M] = Inbox(
            sub_id,
            cast(str, destination),
            ack,
            headers or {},
            pending,
            overflow or options.overflow,
        )
        self.delivery.add(inbox)
        if rid is not None:
            self.receipts.expect(rid)
        return Subscribed(inbox, rid)

    def unsubscribe(self, inbox: Inbox[M], receipt: bool) -> str | None:
        """End a subscription; UNSUBSCRIBE if its connection is up. The receipt id, if any.

        Messages already received stay in the inbox for the consumer. A connection
        that ended (its verdict not yet given) is sent nothing: its subscriptions ended
        with it, and this one is not made again.
        """
        inbox.end()
        if self.delivery.remove(inbox):
            self.acks.forget_subscription(inbox.id)
        proto = self.usable()
        if proto is not None and inbox.id in proto.subscriptions:
            rid = proto.unsubscribe(inbox.id, receipt=receipt)
            if rid is not None:
                self.receipts.expect(rid)
            return rid
        return None

    def _overflowed(self, inbox: Inbox[M]) -> None:
        """The delivery ended ``inbox``'s subscription: its consumer fell behind."""
        self.unsubscribe(inbox, receipt=False)

    def begin(self) -> str:
        """BEGIN a transaction on the current connection; its id, unique across the
        connections (see :data:`TRANSACTION_PREFIX`)."""
        number = self._transactions_begun + 1
        transaction = self.ready().begin(f"{TRANSACTION_PREFIX}{number}")
        self._transactions_begun = number
        return transaction

    def transaction_lost(self, transaction: str) -> bool:
        """Whether ``transaction`` is the id of one begun on a connection that ended:
        "Any transaction which has not been committed is implicitly aborted if [...]
        the TCP connection fails for any reason" (STOMP 1.2, BEGIN). A frame in it must
        not go out on a later connection, where the id is unknown (or, were ids not
        unique, another transaction's). An id the engine did not make is not one."""
        prefix = TRANSACTION_PREFIX
        if not transaction.startswith(prefix):
            return False
        number = transaction[len(prefix) :]
        return (
            number.isascii()
            and number.isdigit()
            and number[0] != "0"
            and int(number) <= self._transactions_lost
        )

    def is_stale(self, epoch: int) -> bool:
        """Whether something of ``epoch`` (a message, a transaction) is from an earlier
        connection: its broker state is gone, so answering it would be wrong."""
        return epoch != self.epoch

    def acknowledge(
        self, command: str, event: MessageReceived, transaction: str | None, receipt: bool
    ) -> str | None:
        """ACK or NACK ``event`` on the current connection; the receipt id, if any.

        Raises :class:`LocalProtocolError` (nothing sent) for a message answered already
        on this connection (see :mod:`stompy._engine.acks`), and what the core raises.
        """
        proto = self.ready()
        acks = self.acks
        acks.check(command, event)
        if command == "ACK":
            rid = proto.ack(event, transaction=transaction, receipt=receipt)
        else:
            rid = proto.nack(event, transaction=transaction, receipt=receipt)
        acks.answered(command, event, transaction)
        if rid is not None:
            self.receipts.expect(rid)
        return rid

    def end_transaction(self, command: str, transaction: str, receipt: bool) -> str | None:
        """COMMIT or ABORT on the current connection; the receipt id, if any."""
        proto = self.ready()
        if command == "COMMIT":
            rid = proto.commit(transaction, receipt=receipt)
        else:
            rid = proto.abort(transaction, receipt=receipt)
        self.acks.ended(command, transaction)
        if rid is not None:
            self.receipts.expect(rid)
        return rid

    def request(
        self,
        destination: object,  # object: the core checks them (see ClientProtocol.send)
        body: object,
        headers: Mapping[str, str] | None,
        content_type: object,
        reply_subscription: str,
        now: float | None,
    ) -> Request[M]:
        """SEND a request on the current connection: ``reply-to`` is where the replies
        come (see :mod:`stompy._engine.requests`: :data:`REPLY_QUEUE`, or a destination
        the connection subscribes to at its first request), ``correlation-id`` a fresh
        one. Its bytes are moved to :attr:`outgoing` at once (:meth:`flush` at ``now``).
        The request waits in :attr:`requests` until :meth:`Requests.forget`.

        Raises :class:`ConfigurationError` (nothing sent) when ``headers`` has either.
        """
        proto = self.proto
        if self.failure is not None or self.status is not CONNECTED or proto is None:
            proto = self.ready()  # raises why not (the call checked it: seldom here)
        if headers:
            check_request_headers(headers)
        chosen = self._replies_chosen
        if chosen is None or chosen[0] != self.epoch or chosen[1] != reply_subscription:
            server = self.connected.server if self.connected is not None else None
            explicit = explicit_replies(server, reply_subscription)
            reply_to = REPLY_QUEUE
            if explicit:
                if self._reply_subscribed != self.epoch:
                    # Replies reach only a SUBSCRIBE here; its id is REPLY_QUEUE, so that
                    # they are routed as on RabbitMQ. Not replayed: the next connection's
                    # first request makes it again.
                    self._reply_to = reply_destination()
                    proto.subscribe(self._reply_to, ack="auto", id=REPLY_QUEUE)
                    self._reply_subscribed = self.epoch
                reply_to = self._reply_to
            route = reply_route(explicit, reply_to, server, reply_subscription)
            chosen = (self.epoch, reply_subscription, reply_to, route)
            self._replies_chosen = chosen
        reply_to = chosen[2]
        request = self.requests.new(destination, self.epoch, chosen[3])
        correlation_id = request.correlation_id
        sent = {"reply-to": reply_to, "correlation-id": correlation_id}
        if headers:
            sent.update(headers)
        try:
            proto.send(destination, body, headers=sent, content_type=content_type)
        except BaseException:
            self.requests.forget(request)  # nothing went out: nothing to wait for
            raise
        if self.ws is None:  # flush(), written out: a request's one take of the output
            data = proto.data_to_send(now)
            # Asked per request, as send_now() does; off by logging's own record: no call.
            if not (_DEBUG in _LEVELS and not _LEVELS[_DEBUG]) and _debug_on():
                log_sent(data, self.endpoint)
            if not self.outgoing and now is not None:
                self._write_since = now  # the write deadline counts from here
            self.outgoing += data
        else:
            self.flush(now)
        return request

    def reply_state(self, request: Request[M]) -> ReceiptState:
        """How the wait for ``request``'s reply stands: like a receipt's, a reply can only
        come on the connection the request went out on, and not once it is closing."""
        if request.reply is not None:
            return ReceiptState.ARRIVED
        return self._standing(request.epoch, receipt=False)

    # -- receipts --------------------------------------------------------------------------

    def expect_pending(self) -> None:
        """Keep every receipt the core waits for (a wait is about to let them arrive)."""
        proto = self.proto
        if proto is not None:
            self.receipts.expect_all(proto.pending_receipts)

    def receipt_state(self, rid: str, epoch: int) -> ReceiptState:
        """How the wait for ``rid``, asked in ``epoch``, stands.

        While the transport has seen the end but not given its verdict, the wait goes on:
        the verdict says whether the engine failed or the receipt is lost. While the
        connection closes, it goes on too: the DISCONNECT's receipt settles it (see
        :mod:`stompy._engine.receipts`); once the close ended without that, whether the
        frame took effect is unknown (:attr:`ReceiptState.UNCONFIRMED`)."""
        if self.receipts.arrived(rid):
            return _ARRIVED
        if self.failure is None and epoch == self.epoch and self.status is CONNECTED:
            # _standing's common case, without the call: a wait asked on this connection
            return _PENDING if self.serving else _LOST
        return self._standing(epoch, receipt=True)

    def _standing(self, epoch: int, *, receipt: bool) -> ReceiptState:
        """How a wait for an answer asked in ``epoch`` stands, while it has not come:
        a ``receipt`` (which a close settles), else a reply."""
        if self.failure is not None:
            return ReceiptState.FAILED
        if epoch != self.epoch:
            return ReceiptState.LOST
        status = self.status
        if status is CONNECTED:
            return ReceiptState.PENDING if self.serving else ReceiptState.LOST
        if status is CLOSING or status is CLOSED:
            if not receipt:
                return ReceiptState.CLOSED
            if status is CLOSING and self.serving:
                return ReceiptState.PENDING
            return ReceiptState.UNCONFIRMED
        return ReceiptState.LOST

    # -- what the broker sent -----------------------------------------------------------

    def receive(self, data: bytes, now: float) -> StompError | None:
        """Feed bytes read from the connection (``b""``: end of stream) to the core.

        Returns the error a WebSocket close stands for: the transport reports it after
        the frames before it were handled (see :meth:`pump`).
        """
        proto = self.proto
        assert proto is not None
        if not data:
            proto.receive_eof()
            return None
        ws = self.ws
        if ws is None:
            proto.receive_data(data, now)
            return None
        got = ws.receive(data)
        if got.reply:
            self.outgoing += got.reply
        if got.data:
            proto.receive_data(got.data, now)
        else:
            proto.note_alive(now)  # a ping, a pong: the peer is there
        return got.ended

    def pump(self, now: float | None) -> Pumped:
        """Route every event the core has: a MESSAGE to :attr:`delivery`, a RECEIPT to
        its waiter, an ERROR or an end as the connection's failure."""
        proto = self.proto
        assert proto is not None
        if now is not None:
            self._now = now
        failure: StompError | None = None
        delivery = self.delivery
        woke = delivery.drain(self._now, self.endpoint) if delivery.backlog else False
        message_class = self.message_class
        epoch = self.epoch
        owner = self.owner
        # _debug_on()'s first look, made here: mostly no DEBUG, and no call needed.
        self.debug = debug = False if _LEVELS.get(_DEBUG) is False else _debug_on()
        try:
            event = proto.next_event()
            while event is not None:
                if debug:
                    log.debug("received %r", event)
                if isinstance(event, message_class):
                    # Called on the object, not through a bound method in a local:
                    # compiled, that is a direct call (the bound method's is a Python
                    # call, its arguments parsed from a vector for each message).
                    delivery.route(event, epoch, owner)
                    woke = True
                elif isinstance(event, Receipt):
                    self.receipts.came(event.receipt_id)
                    woke = True
                else:
                    failure = error_for_event(event)
                    if failure is not None:
                        if isinstance(failure, ServerError):
                            failure = too_large(failure, proto)
                            self.notify("on_error", self.options.on_error, failure)
                            if self.status is CLOSING:
                                self._error_while_closing(failure)
                        break
                if proto.exhausted:  # the core knows it has nothing more: not asked
                    break
                event = proto.next_event()
        except ProtocolError as exc:
            failure = exc
        if delivery.backlog or delivery.paused_since is not None:  # else it has nothing to do
            delivery.watch(self._now, self.endpoint)
        self.flush(now)
        requests = self.requests
        replied: Sequence[str] = requests.replied
        if replied:  # (take_replied(), written out)
            requests.replied = []
        if failure is None and not replied:
            return _WOKE if woke else _QUIET  # the common results, made once
        return Pumped(woke or failure is not None, failure, replied)

    def _error_while_closing(self, failure: ServerError) -> None:
        """The broker's ERROR ended the connection while it was closing: said here, the
        wait for the DISCONNECT's receipt names it rather than a lost connection, and
        ``close()`` raises it (:attr:`refusal`)."""
        log.warning("the broker sent an ERROR while %s was closing: %s", self.endpoint, failure)
        if self.ending is None:
            self.ending = failure
        if self.refusal is None:
            self.refusal = failure

    @property
    def paused(self) -> bool:
        """Whether the transport should stop reading until a consumer makes room."""
        return bool(self.delivery.backlog)

    def drain_backlog(self, now: float | None = None) -> bool:
        """Move what now fits from the backlog to the inboxes (see
        :meth:`Delivery.drain`); whether any moved."""
        if now is not None:
            self._now = now
        return self.delivery.drain(self._now, self.endpoint)

    # -- time ----------------------------------------------------------------------------

    def wrote(self, now: float) -> None:
        """The transport wrote (or handed its stream) some of :attr:`outgoing` at ``now``."""
        self._write_since = now if self.outgoing else None

    def wrote_all(self) -> None:
        """The transport wrote all of :attr:`outgoing`: no write deadline runs (what
        :meth:`wrote` does then, without the time, which costs a clock read to know)."""
        self._write_since = None

    def write_deadline(self, now: float) -> float | None:
        """When the broker counts as no longer reading, if nothing is written by then:
        ``receipt_timeout`` after the last progress while bytes wait to be written (or
        after ``now``, if nobody looked since they came)."""
        if not self.outgoing:
            self._write_since = None
            return None
        if self._write_since is None:
            self._write_since = now
        return self._write_since + self.options.receipt_timeout

    def stopped_reading(self) -> ConnectionLost:
        """The error of a connection whose broker stopped reading: both transports end
        the connection with it (a reconnect policy then takes over)."""
        return ConnectionLost(
            f"the broker stopped reading: nothing could be written to {self.endpoint} for "
            f"{self.options.receipt_timeout:g} s"
        )

    def next_deadline(self, now: float | None = None) -> float | None:
        """When the transport must next call :meth:`tick` (``None``: no need); ``now``
        is the time, as the transport has it."""
        proto = self.proto
        best = proto.next_deadline() if proto is not None else None
        warn = self.delivery.stall_deadline()
        if warn is not None:
            best = warn if best is None or warn < best else best
        stuck = self.write_deadline(self._now if now is None else now)
        if stuck is not None:
            best = stuck if best is None or stuck < best else best
        return best

    def tick(self, now: float, waiting: Callable[[], bool | None]) -> Pumped:
        """The transport's timer, at :meth:`next_deadline` (or later): heart-beats go
        out, a silent broker is found dead, a stall is warned about, and a broker that
        took none of our bytes for ``receipt_timeout`` is found to have stopped reading
        (the failure is :meth:`stopped_reading`).

        ``waiting()`` says whether bytes wait unread in the transport's socket
        (``None``: it cannot tell). They are the broker's: it is alive, whenever the
        client gets to read them. A transport that cannot tell, and stopped reading for
        a consumer, counts the broker as alive too.
        """
        proto = self.proto
        assert proto is not None
        self._now = now
        stuck = self.write_deadline(now)
        if stuck is not None and now >= stuck and proto.state is not PROTOCOL_CLOSED:
            return Pumped(True, self.stopped_reading())
        if proto.negotiated_heartbeats[1]:
            unread = waiting()
            if unread or (unread is None and self.paused):
                proto.note_alive(now)
        proto.handle_timer(now)
        self.delivery.warn_stall(now, self.endpoint)
        return self.pump(now)

    # -- the end of a connection, and of the engine ------------------------------------

    def lost(self, error: StompError) -> Attempts | None:
        """The current connection ended with ``error``.

        Returns the reconnect attempts, or ``None`` when the engine is over: closed by
        the user, or failed (no reconnect policy).
        """
        if self.status in (CLOSING, CLOSED):
            return None
        if self.ending is None:
            self.ending = error  # what the calls of this epoch say they were lost to
        self.ended = (self.epoch, self.ending)
        self._transactions_lost = self._transactions_begun  # the broker aborted them
        self._told_end(error)
        self.delivery.release(self._now, self.endpoint)
        policy = self.options.reconnect
        if policy is None:
            log.warning("connection to %s lost: %s", self.endpoint, error)
            self.fail(error)
            return None
        log.warning("connection to %s lost (%s); reconnecting", self.endpoint, error)
        self.status = RECONNECTING
        self.epoch += 1  # unanswered receipts and open transactions are lost
        return Attempts(self.options.endpoints, policy.delays(self._uniform), first=False)

    def end_of(self, epoch: int) -> StompError | None:
        """Why the connection of ``epoch`` ended, if it did and that is still known: a
        call may wake only once the next connection was made."""
        if epoch == self.epoch:
            return self.ending
        ended = self.ended
        return ended[1] if ended is not None and ended[0] == epoch else None

    def give_up(self, attempts: Attempts) -> None:
        """Every reconnect attempt failed."""
        self.fail(ConnectionLost(f"could not reconnect: {attempts.error()}"))

    def fail(self, failure: StompError) -> None:
        self._told_end(failure)
        self.failure = failure
        if isinstance(failure, ServerError):
            self.refusal = failure
        self.status = CLOSED

    def begin_close(self) -> str | None:
        """Start the goodbye: DISCONNECT with a receipt if the connection is up.

        Returns the receipt id to wait for (``None``: nothing to wait for).
        """
        rid = None
        proto = self.proto
        ending = self.ending
        if self.status is CONNECTED and isinstance(ending, ServerError):
            self.refusal = ending  # it ended the connection before the verdict came
        if self.status is CONNECTED and self.failure is None and proto is not None:
            try:
                rid = proto.disconnect(receipt=True)
            except StompError:
                rid = None
            if rid is not None:
                self.receipts.expect_last(rid)
        if self.status in (CONNECTED, RECONNECTING):
            self.status = CLOSING
        return rid

    def closed(self) -> None:
        """The engine is over: every subscription ends."""
        self._told_end(None)  # closed by the user (a loss was told as it happened)
        self.status = CLOSED
        self.delivery.end_all()

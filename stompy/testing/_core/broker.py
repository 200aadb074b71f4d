"""The broker's protocol side, without I/O: destinations, subscriptions, acks, transactions.

Theory of operation
-------------------
:class:`BrokerCore` holds what the connections share: the destinations with their
stored messages, and every open :class:`ServerSession`. A transport opens one session
per connection and drives it like the client core is driven:

* ``receive_data(data, now)`` parses and acts on what the client sent;
* ``data_to_send(now)`` drains the bytes to write (heart-beat EOLs included);
* ``next_deadline()`` / ``handle_timer(now)`` run the CONNECT timeout and heart-beats;
* ``receive_eof()`` / ``close()`` end it: its unacknowledged messages go back to their
  queues marked ``redelivered:true`` and its open transactions are aborted.

A frame on one connection can produce bytes on others (a SEND delivers to
subscribers elsewhere), so after any call the transport asks
:meth:`BrokerCore.pop_ready` which sessions got new output and wakes their writers.

Session states move only forward::

    AWAITING_CONNECT --CONNECT/STOMP--> CONNECTED --DISCONNECT--> CLOSING
      any error (bad frame, refused CONNECT, heart-beat loss, no CONNECT in time):
                                                     any open state --> CLOSING
      CLOSING: ERROR or RECEIPT queued, input ignored; the transport flushes and closes
      receive_eof() or close():                          any state --> CLOSED

Destinations: names starting with ``/topic/`` are topics (each message goes to every
current subscriber and is dropped when there is none); every other name is a queue
(each message goes to one subscriber, round-robin, and waits while nobody listens).

Temporary queues, the way RabbitMQ has them: a SEND whose ``reply-to`` names
``/temp-queue/NAME`` makes (once per connection and name) a queue private to that
connection, ``/reply-queue/amq.gen-...``, which the ``reply-to`` of the delivered
message names instead; the connection receives what is sent there on a subscription
it never asked for, whose id is ``/temp-queue/NAME`` (``auto`` ack). SUBSCRIBE to a
``/temp-queue/`` or ``/reply-queue/`` is refused. The queue goes with its connection
(or an UNSUBSCRIBE of that id); what is sent to it afterwards is dropped.

Flow control: a session receives no deliveries while its unsent output is above
``write_buffer`` bytes, and a ``client`` / ``client-individual`` subscription none
while it holds ``prefetch`` unacknowledged messages. Deliveries resume when the
transport drains the output or the client acks. Messages wait in their queue (or a
topic subscription's backlog) meanwhile: storage is in memory, bounded by
``max_queue`` and ``max_stored_bytes``. A SEND over those bounds gets an ERROR that
names the limit; a topic backlog over ``max_queue`` drops its oldest message (with
one WARNING per subscription).
"""

from __future__ import annotations

import enum
import logging
import re
import secrets
import warnings
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import InitVar, dataclass, field, replace
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Final, TypedDict, get_args

from stompy._checks import (
    bad_value,
    check_heartbeats,
    check_integer,
    check_number,
    check_seconds,
    check_type,
    check_versions,
    refuse_time,
    wrong_type,
)
from stompy._core.encoder import encode
from stompy._core.events import AckMode
from stompy._core.frames import (
    V10,
    V11,
    V12,
    VERSIONS,
    Frame,
    Headers,
    escape,
    received_block,
    received_escaping,
    split_header_lines,
)
from stompy._core.heartbeat import (
    MAX_INTERVAL,
    Heartbeat,
    format_heartbeat,
    negotiate,
    only_heartbeats,
    parse_heartbeat,
)
from stompy._core.parser import FrameLimits, FrameParser
from stompy._core.protocol import MAX_BODY_HEADER
from stompy.errors import ConfigurationError, FrameTooLarge, ProtocolError

__all__ = (
    "BrokerConfig",
    "BrokerCore",
    "BrokerOptions",
    "BrokerStats",
    "ConnectionInfo",
    "ServerSession",
    "SessionState",
    "StoredMessage",
    "SubscriberInfo",
)

_ACK_MODES: Final[tuple[AckMode, ...]] = get_args(AckMode)
#: Headers of a SEND frame that the broker sets itself on the MESSAGE frame; the rest
#: are user headers and "MUST be passed through in the MESSAGE frame" (1.2, SEND):
#: what a SEND tells the broker, and what the broker adds to each delivery.
_SEND_CONTROL: Final = ("destination", "transaction", "receipt", "content-length")
_DELIVERY_HEADERS: Final = ("message-id", "subscription", "ack", "redelivered")
_BROKER_HEADERS: Final = frozenset(_SEND_CONTROL + _DELIVERY_HEADERS)
#: How a SEND's header block starts when its client writes the destination first.
_SEND_DESTINATION: Final = "SEND\ndestination:"
_TOPIC_PREFIX: Final = "/topic/"
#: A ``reply-to`` starting with this names a temporary queue (RabbitMQ's convention)...
_TEMP_QUEUE_PREFIX: Final = "/temp-queue/"
#: ... which the broker makes under this prefix, and which only its connection reads.
_REPLY_QUEUE_PREFIX: Final = "/reply-queue/"
_PRIVATE_PREFIXES: Final = (_TEMP_QUEUE_PREFIX, _REPLY_QUEUE_PREFIX)
_QUEUE_PREFIX: Final = "/queue/"
#: Dead-letter queues by default: ``/queue/DLQ.<name>``, as ActiveMQ names them.
_DLQ_PREFIX: Final = "/queue/DLQ."
#: A header line that the broker reads or replaces rather than passes through (it
#: replaces a ``reply-to`` that names a temporary queue).
_CONTROL_LINE: Final = re.compile(
    f"\n(?:(?:{'|'.join(sorted(_BROKER_HEADERS))}):|reply-to:{_TEMP_QUEUE_PREFIX})"
)

logger: Final = logging.getLogger("stompy.testing")
#: Whether this module runs compiled (mypyc, in a wheel): then its functions are no
#: frames of the Python stack.
_COMPILED: Final = __file__.endswith(tuple(EXTENSION_SUFFIXES))


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What a broker accepts and how much it holds. Every bound has a default.

    Raises :class:`~stompy.errors.ConfigurationError` (a :class:`ValueError`) for an
    unusable value and :class:`TypeError` for one of a wrong type, naming the field.
    """

    #: ``login -> passcode``; ``None`` accepts every client, with or without a login.
    #: Left out of the ``repr``: it holds passcodes.
    users: Mapping[str, str] | None = field(default=None, repr=False)
    #: Accepted values of the CONNECT ``host`` header; ``None`` accepts any.
    virtual_hosts: Collection[str] | None = None
    #: The STOMP versions spoken, from which the highest common one is chosen.
    versions: tuple[str, ...] = VERSIONS
    #: The broker's ``heart-beat`` header, ``(can send, wants)`` in ms. Small values let
    #: the client's wishes decide, since the negotiated interval is the larger one.
    heartbeats: tuple[int, int] = (100, 100)
    #: A client is dropped after ``incoming interval * tolerance`` of silence after its
    #: last heart-beat, one interval more after a frame (the client's rule too).
    heartbeat_tolerance: float = 2.0
    #: Frame size limits for what clients send.
    limits: FrameLimits = field(default_factory=FrameLimits)
    #: Unacknowledged messages in flight per client-ack subscription (overridable per
    #: subscription with a ``prefetch-count`` header).
    prefetch: int = 100
    #: Messages a queue (or a topic subscription's backlog) holds at most: room for
    #: tests of realistic size (``max_stored_bytes`` bounds the memory).
    max_queue: int = 1_000_000
    #: Body bytes all queues together hold at most.
    max_stored_bytes: int = 256 * 1024 * 1024
    #: Unsent output per connection above which deliveries to it pause.
    write_buffer: int = 1024 * 1024
    max_subscriptions: int = 1000
    max_transactions: int = 100
    #: SEND, ACK and NACK frames one transaction holds at most.
    max_transaction_frames: int = 10_000
    #: Seconds a new connection has to send CONNECT.
    connect_timeout: float = 30.0
    #: The ``server`` header of CONNECTED.
    server_name: str = "stompy-broker/0.1"
    #: The former name of ``max_queue``, still accepted (with a DeprecationWarning).
    max_queue_depth: InitVar[int | None] = None
    #: Times a message is redelivered (after a NACK, or when the connection or the
    #: subscription it was delivered to ends before an ACK) before it goes to the
    #: dead-letter queue instead, as ActiveMQ's ``maximumRedeliveries`` does. ``None``
    #: (the default): redelivered without end, as RabbitMQ does.
    max_redeliveries: int | None = None
    #: Where a message goes after ``max_redeliveries``. ``None``: a queue per
    #: destination, ``/queue/DLQ.<name>`` (``/queue/orders`` -> ``/queue/DLQ.orders``,
    #: ``/topic/news`` -> ``/queue/DLQ.topic.news``), as ActiveMQ's individual
    #: dead-letter strategy. Needs ``max_redeliveries``.
    dead_letter_queue: str | None = None

    def __post_init__(self, max_queue_depth: int | None) -> None:
        if max_queue_depth is not None:
            check_integer("max_queue_depth", max_queue_depth, 1)
            # The caller of BrokerConfig(), above the __init__ that dataclasses wrote;
            # compiled, this method is no frame of the stack.
            warnings.warn(
                "max_queue_depth is now called max_queue",
                DeprecationWarning,
                stacklevel=2 if _COMPILED else 3,
            )
            object.__setattr__(self, "max_queue", max_queue_depth)
        # A wrong type is a TypeError, an unusable value a ConfigurationError (also a
        # ValueError), each naming the field, as the clients' options (stompy._checks).
        given = check_versions("versions", self.versions, VERSIONS)
        object.__setattr__(self, "versions", tuple(v for v in VERSIONS if v in given))
        heartbeats = check_heartbeats("heartbeats", self.heartbeats, MAX_INTERVAL)
        object.__setattr__(self, "heartbeats", heartbeats)
        if self.users is not None:
            object.__setattr__(self, "users", _users(self.users))
        if self.virtual_hosts is not None:
            object.__setattr__(self, "virtual_hosts", _virtual_hosts(self.virtual_hosts))
        check_number("heartbeat_tolerance", self.heartbeat_tolerance, 1.0)
        check_type("limits", self.limits, FrameLimits, "a FrameLimits")
        check_integer("prefetch", self.prefetch, 1)
        check_integer("max_queue", self.max_queue, 1)
        check_integer("max_stored_bytes", self.max_stored_bytes, 1)
        check_integer("write_buffer", self.write_buffer, 1)
        check_integer("max_subscriptions", self.max_subscriptions, 1)
        check_integer("max_transactions", self.max_transactions, 1)
        check_integer("max_transaction_frames", self.max_transaction_frames, 1)
        check_seconds("connect_timeout", self.connect_timeout, positive=True)
        check_type("server_name", self.server_name, str, "a str")
        if "\n" in self.server_name or "\r" in self.server_name:
            raise bad_value("server_name", "must be one line", self.server_name)
        if self.max_redeliveries is not None:
            check_integer("max_redeliveries", self.max_redeliveries, 0)
        dlq = self.dead_letter_queue
        if dlq is not None:
            check_type("dead_letter_queue", dlq, str, "a destination (a str) or None")
            if self.max_redeliveries is None:
                raise ConfigurationError(
                    "dead_letter_queue needs max_redeliveries (the limit), "
                    f"got dead_letter_queue={dlq!r} and max_redeliveries=None"
                )
            if not dlq or "\n" in dlq or "\r" in dlq or dlq.startswith(_PRIVATE_PREFIXES):
                raise bad_value("dead_letter_queue", "must be a destination for it", dlq)


def _users(users: object) -> dict[str, str]:
    """BrokerConfig's ``users``, a copy: a mapping of logins to passcodes, all str."""
    if not isinstance(users, Mapping):
        raise wrong_type("users", "a mapping of logins to passcodes (str) or None", users)
    copied = dict(users)
    for login, passcode in copied.items():
        if not isinstance(login, str) or not isinstance(passcode, str):
            # The passcode is not shown: only its type.
            shown = f"{login!r}: {type(passcode).__name__}"
            raise TypeError(f"users: expected a mapping of logins to passcodes (str), got {shown}")
    return copied


def _virtual_hosts(hosts: object) -> frozenset[str]:
    """BrokerConfig's ``virtual_hosts``: host names (str), as a frozenset."""
    if isinstance(hosts, str):
        # A str is a collection of one-character strings: every letter a host.
        raise bad_value("virtual_hosts", "must be a collection of host names like ('h',)", hosts)
    if not isinstance(hosts, Collection) or not all(isinstance(h, str) for h in hosts):
        raise wrong_type("virtual_hosts", "a collection of host names (str) or None", hosts)
    return frozenset(hosts)


class BrokerOptions(TypedDict, total=False):
    """The keyword arguments of :func:`~stompy.testing.serve`: :class:`BrokerConfig`'s fields."""

    users: Mapping[str, str] | None
    virtual_hosts: Collection[str] | None
    versions: tuple[str, ...]
    heartbeats: tuple[int, int]
    heartbeat_tolerance: float
    limits: FrameLimits
    prefetch: int
    max_queue: int
    #: Deprecated: ``max_queue``.
    max_queue_depth: int
    max_stored_bytes: int
    write_buffer: int
    max_subscriptions: int
    max_transactions: int
    max_transaction_frames: int
    connect_timeout: float
    server_name: str
    max_redeliveries: int | None
    dead_letter_queue: str | None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the broker keeps it between SEND and MESSAGE (its fields: the
    broker's own storage is a leaner private class of the same meaning)."""

    message_id: str
    destination: str
    #: The SEND frame's user headers, in order (``content-type`` included).
    headers: Headers
    body: bytes
    #: True once it was delivered and came back (NACK, or its connection ended).
    redelivered: bool = False
    #: How many times it came back so far (see ``BrokerConfig.max_redeliveries``).
    redeliveries: int = 0


@dataclass(slots=True)
class BrokerStats:
    """Counters since the broker started or was reset (:attr:`AsyncBroker.stats`).

    What ``stats`` returns is a copy, which the broker does not change afterwards. Not a
    :class:`~stompy.testing._shared.Counters` as the proxy's are: this module is
    compiled in a wheel (a compiled class cannot extend one that is not), and its
    imports stay clear of anyio. Each field's docstring says what it counts (they show
    in the API reference, where comments do not)."""

    connections_opened: int = 0
    """Connections accepted."""
    connections_open: int = 0
    """Connections open when the snapshot was taken. One that ended for the broker, by
    the client's DISCONNECT or by an ERROR, no longer counts: its last frame (the
    DISCONNECT's RECEIPT, the ERROR) is queued after it stopped counting, so a client
    that got it, such as one at the end of ``with Connection(...)``, is not counted,
    though its socket may still be closing."""
    messages_received: int = 0
    """Messages accepted by SEND (counted at COMMIT inside a transaction)."""
    messages_delivered: int = 0
    """MESSAGE frames written, redeliveries included."""
    messages_redelivered: int = 0
    """MESSAGE frames written with ``redelivered:true``."""
    messages_acked: int = 0
    """Messages acknowledged (a cumulative ACK counts each message it covers)."""
    messages_nacked: int = 0
    """Messages given back by NACK (a cumulative NACK counts each one it covers)."""
    messages_dropped: int = 0
    """Topic messages nobody could take, and backlog overflow."""
    messages_dead_lettered: int = 0
    """Messages moved to a dead-letter queue after ``max_redeliveries``."""
    errors_sent: int = 0
    """ERROR frames sent."""
    heartbeat_timeouts: int = 0
    """Connections dropped because the client's heart-beats stopped."""
    internal_errors: int = 0
    """Bugs: exceptions the transport caught while serving a connection."""


@dataclass(frozen=True, slots=True)
class SubscriberInfo:
    """One subscription of a connection, as seen by the broker."""

    id: str
    destination: str
    ack: str
    prefetch: int
    unacked: int
    """Messages delivered to it and not acknowledged yet."""
    backlog: int
    """Topic messages waiting for it (always 0 for queues: they wait in the queue)."""


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """One connection, as seen by the broker."""

    session: str
    peer: str
    state: str
    version: str
    login: str | None
    host: str | None
    heartbeats: tuple[int, int]
    """Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms."""
    paused: bool
    buffered: int
    """Output bytes waiting to be written to it."""
    subscriptions: tuple[SubscriberInfo, ...]
    transactions: tuple[str, ...]


class SessionState(enum.Enum):
    """Where a client connection stands, seen from the broker."""

    #: Connected at the transport level, waiting for CONNECT or STOMP.
    AWAITING_CONNECT = "AWAITING_CONNECT"
    #: CONNECTED sent; every client frame is accepted.
    CONNECTED = "CONNECTED"
    #: An ERROR (or the DISCONNECT receipt) is queued; input is ignored, the transport
    #: flushes the output and closes the connection.
    CLOSING = "CLOSING"
    #: The transport is gone and the session released everything it held.
    CLOSED = "CLOSED"


# The states as module names, in the order of their definition, for the busy paths:
# reading an Enum member from its class costs as much as a small function call (about
# 850 instructions on CPython 3.11).
_AWAITING, _CONNECTED, _CLOSING, _CLOSED = SessionState
#: The states in which a session reads what the client sends, and those after them.
_READING: Final = (_AWAITING, _CONNECTED)
_FINISHED: Final = (_CLOSING, _CLOSED)


class _Reject(Exception):
    """A client frame the broker refuses: it answers with ERROR and closes."""

    def __init__(self, message: str, *, body: str = "", headers: Headers = ()) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        self.headers = headers


class _Message:
    """What the broker stores for each message: :class:`StoredMessage`'s fields in a
    plain slotted class, made in about a quarter of the instructions (a frozen
    dataclass sets each field through ``object.__setattr__``: some 10,000 per SEND on
    CPython 3.11). A transaction holds its SENDs as messages without an id yet, which
    they get at COMMIT. Never changed once published (a topic's subscriptions share
    it), but for the pairs made from ``lines`` when first needed: redelivery makes a
    new one, ``redelivered:true`` when ``redeliveries`` > 0.

    The user headers of a SEND that arrived in the usual shape are kept as the header
    lines that arrived (``lines``), not as pairs: making the pairs cost about as much
    as the rest of the SEND, and a MESSAGE to a client of the same escaping is spliced
    from those lines (see :meth:`ServerSession._deliver`)."""

    __slots__ = (
        "_headers",
        "body",
        "destination",
        "escaping",
        "lines",
        "message_id",
        "redeliveries",
    )

    def __init__(
        self,
        destination: str,
        headers: Headers | None,
        body: bytes,
        lines: str | None = None,
        escaping: str = V10,
    ) -> None:
        self.destination = destination
        self._headers = headers
        self.body = body
        #: The user headers as received, each line after a LF, escaped as
        #: ``escaping`` escapes (``None``: only the pairs are kept).
        self.lines = lines
        self.escaping = escaping
        #: Set when it is published (see ``BrokerCore._publish``).
        self.message_id = ""
        #: How many times it came back so far (see ``BrokerConfig.max_redeliveries``);
        #: above 0 it is delivered with ``redelivered:true``.
        self.redeliveries = 0

    @property
    def headers(self) -> Headers:
        """The SEND frame's user headers, in order (``content-type`` included)."""
        headers = self._headers
        if headers is None:
            headers = self._headers = _pairs(self.lines or "", self.escaping)
        return headers

    def again(self) -> _Message:
        """The message given back for redelivery: one more redelivery counted."""
        again = _Message(self.destination, self._headers, self.body, self.lines, self.escaping)
        again.message_id = self.message_id
        again.redeliveries = self.redeliveries + 1
        return again


def _pairs(lines: str, escaping: str) -> Headers:
    """The pairs of received header ``lines`` (each after a LF, as a checked block of a
    :class:`~stompy._core.frames.ReceivedFrame` holds them), unescaped."""
    if not lines:
        return ()
    flat = split_header_lines(lines[1:], escaping)
    return tuple(zip(flat[::2], flat[1::2], strict=True))


class _Destination:
    __slots__ = ("bytes", "is_topic", "messages", "name", "next_index", "subscriptions")

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_topic = name.startswith(_TOPIC_PREFIX)
        self.messages: deque[_Message] = deque()
        self.bytes = 0
        self.subscriptions: list[_Subscription] = []
        self.next_index = 0  # round-robin position among the subscriptions


class _Subscription:
    __slots__ = (
        "ack",
        "backlog",
        "by_message_id",
        "destination",
        "dropped",
        "id",
        "prefetch",
        "session",
        "splice",
    )

    def __init__(
        self,
        session: ServerSession,
        id: str,
        destination: _Destination,
        ack: AckMode,
        prefetch: int,
    ) -> None:
        self.session = session
        self.id = id
        self.destination = destination
        self.ack: AckMode = ack
        self.prefetch = prefetch
        #: Topic messages waiting until this subscription can take them.
        self.backlog: deque[_Message] = deque()
        #: message-id -> ack id of the unacknowledged deliveries, in delivery order.
        self.by_message_id: dict[str, str] = {}
        #: Whether its backlog dropped a message yet (warned once).
        self.dropped = False
        #: What its MESSAGE frames start with, up to the message id and after it, as
        #: ``encode`` writes them in the session's version (see ServerSession._deliver);
        #: None where that cannot be written as it is (a line break in STOMP 1.0).
        self.splice: tuple[str, str] | None = None
        version = session.version
        name = destination.name
        if version != V10 or not any(c in name or c in id for c in "\n\r"):
            self.splice = (
                f"MESSAGE\ndestination:{escape(name, version)}\nmessage-id:",
                f"\nsubscription:{escape(id, version)}",
            )

    def can_accept(self) -> bool:
        session = self.session
        if (
            session.state is not _CONNECTED
            or session.paused
            or session.buffered >= session.core.config.write_buffer
        ):
            return False
        return self.ack == "auto" or len(self.by_message_id) < self.prefetch


@dataclass(frozen=True, slots=True)
class _TxSettle:
    command: str  # "ACK" or "NACK"
    subscription: _Subscription
    ack_id: str


class BrokerCore:
    """The shared state of one broker and the factory of its sessions."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        if config is not None:
            check_type("config", config, BrokerConfig, "a BrokerConfig or None")
        self.config = config if config is not None else BrokerConfig()
        #: Open sessions by id, CLOSING ones included.
        self.sessions: dict[str, ServerSession] = {}
        self._destinations: dict[str, _Destination] = {}
        self._ready: dict[str, ServerSession] = {}
        #: Counted as they happen; ``connections_open`` is filled in by :attr:`stats`.
        self._counters = BrokerStats()
        self._stored_bytes = 0
        self._token = secrets.token_hex(3)
        #: Message ids are this and a number (one f-string part less per SEND).
        self._message_prefix = f"message-{self._token}-"
        self._next_session = 0
        self._next_message = 0
        self._next_ack = 0
        self._next_temp = 0

    # -- sessions ----------------------------------------------------------------------

    def open_session(self, now: float, peer: str = "") -> ServerSession:
        """Start serving a new connection; ``peer`` only labels it."""
        refuse_time("now", now)
        check_type("peer", peer, str, "a str")
        self._next_session += 1
        session = ServerSession(self, f"session-{self._token}-{self._next_session}", now, peer)
        self.sessions[session.id] = session
        self._counters.connections_opened += 1
        return session

    def pop_ready(self) -> list[ServerSession]:
        """Sessions that got output since the last call (their writers need waking)."""
        if not self._ready:
            return []
        ready = list(self._ready.values())
        self._ready.clear()
        return ready

    def record_internal_error(self) -> None:
        """Count a bug the transport caught (shown in :attr:`stats`)."""
        self._counters.internal_errors += 1

    def reset(self) -> None:
        """Start afresh, as a new broker would, for the next test: close every session
        still open, then drop every stored message (what those sessions held
        unacknowledged, NACKed and dead-lettered ones too) and zero the counters.

        The configuration stays; message ids go on from where they were, so an ACK
        from before cannot match a message from after.
        """
        for session in list(self.sessions.values()):
            session.close("the broker was reset")
        self._destinations.clear()
        self._stored_bytes = 0
        self._counters = BrokerStats()

    # -- inspection --------------------------------------------------------------------

    def queue_depth(self, destination: str) -> int:
        """Messages waiting in a queue; for a topic, in its subscriptions' backlogs."""
        check_type("destination", destination, str, "a str")
        dest = self._destinations.get(destination)
        if dest is None:
            return 0
        if dest.is_topic:
            return sum(len(sub.backlog) for sub in dest.subscriptions)
        return len(dest.messages)

    def unacked_count(self, destination: str | None = None) -> int:
        """Messages delivered and not acknowledged, for one destination or all."""
        if destination is not None:
            check_type("destination", destination, str, "a str or None")
        total = 0
        for session in self.sessions.values():
            for sub in session._subscriptions.values():
                if destination is None or sub.destination.name == destination:
                    total += len(sub.by_message_id)
        return total

    def destinations(self) -> tuple[str, ...]:
        """Names of the destinations that hold messages or subscriptions."""
        return tuple(self._destinations)

    def connection_infos(self) -> tuple[ConnectionInfo, ...]:
        return tuple(session.info() for session in self.sessions.values())

    @property
    def stats(self) -> BrokerStats:
        """A snapshot of the counters."""
        # Those closing (their last frame queued) are over for the broker already.
        open_now = 0
        for session in self.sessions.values():
            if session.state in _READING:
                open_now += 1
        return replace(self._counters, connections_open=open_now)

    # -- routing -----------------------------------------------------------------------

    def _destination(self, name: str) -> _Destination:
        dest = self._destinations.get(name)
        if dest is None:
            dest = self._destinations[name] = _Destination(name)
        return dest

    def _forget_if_unused(self, dest: _Destination) -> None:
        # Destinations are made on demand; an empty one with no subscriber is garbage,
        # so a client cycling through names cannot grow this dict.
        if not dest.messages and not dest.subscriptions:
            self._destinations.pop(dest.name, None)

    def _check_capacity(self, sends: list[_Message]) -> None:
        """Raise :class:`_Reject` unless every send fits the storage bounds."""
        counts: dict[str, int] = {}
        size = 0
        for send in sends:
            if not send.destination.startswith(_TOPIC_PREFIX):
                counts[send.destination] = counts.get(send.destination, 0) + 1
                size += len(send.body)
        for name, count in counts.items():
            self._check_room(name, count, 0)
        self._check_room(None, 0, size)

    def _check_room(self, name: str | None, count: int, size: int) -> None:
        """Raise :class:`_Reject` unless queue ``name`` takes ``count`` more messages
        and the broker ``size`` more bytes of bodies."""
        config = self.config
        if name is not None:
            dest = self._destinations.get(name)
            depth = len(dest.messages) if dest is not None else 0
            if depth + count > config.max_queue:
                raise _Reject(
                    f"destination {name!r} is full: it holds {depth} messages, the "
                    f"broker's max_queue limit is {config.max_queue} (raise it with "
                    "serve(max_queue=...) or stompy broker --max-queue)"
                )
        if self._stored_bytes + size > config.max_stored_bytes:
            raise _Reject(
                f"the broker is full: it stores {self._stored_bytes} bytes of bodies, "
                f"its max_stored_bytes limit is {config.max_stored_bytes} (raise it with "
                "serve(max_stored_bytes=...) or stompy broker --max-stored-bytes)"
            )

    def _accept(self, message: _Message) -> None:
        """Take a SEND outside a transaction: check the room it needs, then publish it.

        The busiest path of a broker, for a queue that exists, in one function: the
        same checks and the same outcome as ``_check_room`` then ``_publish``.
        """
        destination = message.destination
        dest = self._destinations.get(destination)
        if dest is None or dest.is_topic:
            topic = destination.startswith(_TOPIC_PREFIX)
            size = 0 if topic else len(message.body)
            self._check_room(None if topic else destination, 1, size)
            self._publish(message)
            return
        size = len(message.body)
        config = self.config
        stored = self._stored_bytes + size
        if len(dest.messages) >= config.max_queue or stored > config.max_stored_bytes:
            self._check_room(destination, 1, size)  # raises, naming the limit
        self._counters.messages_received += 1
        self._next_message += 1
        message.message_id = f"{self._message_prefix}{self._next_message}"
        dest.messages.append(message)
        dest.bytes += size
        self._stored_bytes = stored
        if dest.subscriptions:
            self._dispatch(dest)

    def _publish(self, message: _Message) -> None:
        """Number a message that a SEND made (its transaction's COMMIT, if it had one)
        and route it."""
        self._counters.messages_received += 1
        if message.destination.startswith(_REPLY_QUEUE_PREFIX) and (
            message.destination not in self._destinations
        ):
            # A temporary queue whose connection is gone: RabbitMQ drops the message.
            self._counters.messages_dropped += 1
            return
        self._next_message += 1
        message.message_id = f"{self._message_prefix}{self._next_message}"
        self._route(message)

    def _route(self, message: _Message) -> None:
        """Deliver ``message`` to its topic's subscribers, or store it in its queue."""
        dest = self._destination(message.destination)
        if dest.is_topic:
            if not dest.subscriptions:
                self._counters.messages_dropped += 1
                self._forget_if_unused(dest)
                return
            for sub in dest.subscriptions:
                if not sub.backlog and sub.can_accept():
                    sub.session._deliver(sub, message)
                else:
                    self._add_backlog(sub, message)
            return
        dest.messages.append(message)
        dest.bytes += len(message.body)
        self._stored_bytes += len(message.body)
        self._dispatch(dest)

    def _add_backlog(self, sub: _Subscription, message: _Message) -> None:
        sub.backlog.append(message)
        if len(sub.backlog) > self.config.max_queue:
            sub.backlog.popleft()
            self._counters.messages_dropped += 1
            if not sub.dropped:
                sub.dropped = True
                logger.warning(
                    "%s: the backlog of subscription %r to %r reached max_queue (%d): its "
                    "oldest messages are dropped (raise max_queue, or consume faster)",
                    sub.session.id,
                    sub.id,
                    sub.destination.name,
                    self.config.max_queue,
                )

    def _discard(self, dest: _Destination) -> None:
        """Drop every message waiting in ``dest`` (a temporary queue going away)."""
        self._counters.messages_dropped += len(dest.messages)
        self._stored_bytes -= dest.bytes
        dest.messages.clear()
        dest.bytes = 0

    def _new_temp_queue(self) -> _Destination:
        self._next_temp += 1
        name = f"{_REPLY_QUEUE_PREFIX}amq.gen-{self._token}-{self._next_temp}"
        return self._destination(name)

    def _requeue(self, dest: _Destination, messages: list[_Message]) -> None:
        """Put delivered messages back at the front, in their order, for redelivery
        (those over ``max_redeliveries`` go to the dead-letter queue instead)."""
        again = self._given_back(messages)
        size = sum(len(m.body) for m in again)
        dest.messages.extendleft(reversed(again))
        dest.bytes += size
        self._stored_bytes += size

    def _given_back(self, messages: list[_Message]) -> list[_Message]:
        """``messages``, delivered and given back, marked for redelivery, in order;
        those that used up ``max_redeliveries`` are dead-lettered and left out."""
        limit = self.config.max_redeliveries
        again = []
        for m in messages:
            if limit is not None and m.redeliveries >= limit:
                self._dead_letter(m)
            else:
                again.append(m.again())
        return again

    def _dead_letter_queue(self, destination: str) -> str:
        configured = self.config.dead_letter_queue
        if configured is not None:
            return configured
        if destination.startswith(_DLQ_PREFIX):
            return destination  # a dead-letter queue has none of its own
        if destination.startswith(_QUEUE_PREFIX):
            return _DLQ_PREFIX + destination[len(_QUEUE_PREFIX) :]
        return _DLQ_PREFIX + destination.strip("/").replace("/", ".")

    def _dead_letter(self, message: _Message) -> None:
        """Move ``message``, redelivered ``max_redeliveries`` times, to its dead-letter
        queue, with an ``original-destination`` header (as ActiveMQ marks it)."""
        name = self._dead_letter_queue(message.destination)
        dest = self._destinations.get(name)
        if name == message.destination or (
            dest is not None and not dest.is_topic and len(dest.messages) >= self.config.max_queue
        ):
            self._counters.messages_dropped += 1
            logger.warning(
                "message %s of %r used up its %d redeliveries and is dropped (%s)",
                message.message_id,
                message.destination,
                message.redeliveries,
                "it is in its dead-letter queue"
                if name == message.destination
                else f"{name!r} is full",
            )
            return
        self._counters.messages_dead_lettered += 1
        logger.info(
            "message %s of %r used up its %d redeliveries: moved to %r",
            message.message_id,
            message.destination,
            message.redeliveries,
            name,
        )
        headers = tuple(h for h in message.headers if h[0] != "original-destination")
        headers += (("original-destination", message.destination),)
        moved = _Message(name, headers, message.body)
        moved.message_id = message.message_id
        self._route(moved)

    def _dispatch(self, dest: _Destination) -> None:
        """Hand waiting messages to subscriptions that can take them."""
        if dest.is_topic:
            for sub in dest.subscriptions:
                while sub.backlog and sub.can_accept():
                    sub.session._deliver(sub, sub.backlog.popleft())
            return
        subs = dest.subscriptions
        while dest.messages and subs:
            count = len(subs)
            chosen: _Subscription | None = None
            for step in range(count):
                candidate = subs[(dest.next_index + step) % count]
                if candidate.can_accept():
                    chosen = candidate
                    dest.next_index = (dest.next_index + step + 1) % count
                    break
            if chosen is None:
                return
            message = dest.messages.popleft()
            dest.bytes -= len(message.body)
            self._stored_bytes -= len(message.body)
            chosen.session._deliver(chosen, message)

    def _new_ack_id(self) -> str:
        self._next_ack += 1
        return str(self._next_ack)


class ServerSession:
    """The broker's side of one connection, without I/O. See the module docstring."""

    def __init__(self, core: BrokerCore, session_id: str, now: float, peer: str) -> None:
        self.core = core
        self.id = session_id
        self.peer = peer
        self.state = _AWAITING
        #: The negotiated version (1.0 until CONNECTED).
        self.version: str = V10
        self.login: str | None = None
        self.host: str | None = None
        #: Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms.
        self.heartbeats: tuple[int, int] = (0, 0)
        #: While paused the session takes no deliveries and keeps no heart-beat time;
        #: the transport stops reading and writing.
        self.paused = False
        #: Why the session is closing or closed.
        self.close_reason: str | None = None
        self._parser = FrameParser(V10, core.config.limits)
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._opened = now
        self._heartbeat: Heartbeat | None = None
        self._subscriptions: dict[str, _Subscription] = {}
        self._ack_index: dict[str, tuple[_Subscription, _Message]] = {}
        self._transactions: dict[str, list[_Message | _TxSettle]] = {}
        #: The temporary queues named in its SENDs' reply-to: their implicit
        #: subscriptions, by id (the ``/temp-queue/NAME`` itself).
        self._temp_queues: dict[str, _Subscription] = {}
        self._released = False

    # -- views -------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes queued for the client and not yet taken by :meth:`data_to_send`."""
        return self._out_bytes

    @property
    def wants_data(self) -> bool:
        """Whether the transport should read more from the client now.

        False while paused, and while the output is over ``write_buffer`` in an open
        state: a client that sends without reading its receipts gets backpressure.
        After CLOSING the transport reads on (and the session discards) until EOF.
        """
        if self.paused or self.state is _CLOSED:
            return False
        return self.state is _CLOSING or self._out_bytes < self.core.config.write_buffer

    @property
    def finished(self) -> bool:
        """The connection should close once :meth:`data_to_send` returned everything."""
        return self.state in _FINISHED

    def info(self) -> ConnectionInfo:
        subs = tuple(
            SubscriberInfo(
                sub.id,
                sub.destination.name,
                sub.ack,
                sub.prefetch,
                len(sub.by_message_id),
                len(sub.backlog),
            )
            for sub in self._subscriptions.values()
        )
        return ConnectionInfo(
            session=self.id,
            peer=self.peer,
            state=self.state.value,
            version=self.version,
            login=self.login,
            host=self.host,
            heartbeats=self.heartbeats,
            paused=self.paused,
            buffered=self._out_bytes,
            subscriptions=subs,
            transactions=tuple(self._transactions),
        )

    # -- output ------------------------------------------------------------------------

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        self.core._ready[self.id] = self

    def _encode(self, frame: Frame) -> bytes:
        try:
            return encode(frame, self.version)
        except ValueError:
            # STOMP 1.0 has no escaping: a header from a 1.1+ sender holding a line
            # break cannot be written as is. Flatten it rather than inject a header.
            cleaned = tuple(
                (
                    key.replace(":", "_").replace("\n", "_").replace("\r", "_"),
                    value.replace("\n", " ").replace("\r", " "),
                )
                for key, value in frame.headers
            )
            return encode(Frame(frame.command, cleaned, frame.body), self.version)

    def _send_frame(self, command: str, headers: Headers, body: bytes = b"") -> None:
        self._queue(self._encode(Frame(command, headers, body)))

    def _send_receipt(self, receipt: str) -> None:
        """Queue the RECEIPT for a frame's ``receipt`` header."""
        if "\\" in receipt or ":" in receipt or "\n" in receipt or "\r" in receipt:
            self._send_frame("RECEIPT", (("receipt-id", receipt),))
        else:
            # What encode() writes for it in every version, without building a Frame:
            # an id with nothing to escape, as ids are (a client may send one each SEND).
            self._queue(b"RECEIPT\nreceipt-id:%b\n\n\x00" % receipt.encode())

    def data_to_send(self, now: float | None = None) -> bytes:
        """Return (and forget) the bytes to write; ``now`` is when they are written.

        Taking the output makes room, so waiting messages are delivered right after:
        the next call may return more.
        """
        if now is not None and type(now) is not float:  # once a write, not a frame
            refuse_time("now", now)
        self.core._ready.pop(self.id, None)
        if not self._out:
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        if now is not None and self._heartbeat is not None:
            self._heartbeat.sent(now)
        if self.state is _CONNECTED:
            for sub in list(self._subscriptions.values()):
                self.core._dispatch(sub.destination)
        return data

    def send_raw(self, data: bytes) -> None:
        """Queue bytes exactly as given, to test how clients take broken input."""
        # bytes() would take a count, and a str with an encoding: not what is meant.
        check_type("data", data, (bytes, bytearray, memoryview), "bytes")
        if self.state is not _CLOSED:
            self._queue(bytes(data))

    def _deliver(self, sub: _Subscription, message: _Message) -> None:
        core = self.core
        ack = ""  # the MESSAGE's ack header, if it has one
        if sub.ack != "auto":
            ack_id = core._new_ack_id()
            sub.by_message_id[message.message_id] = ack_id
            self._ack_index[ack_id] = (sub, message)
            # "If the message is received from a subscription that requires explicit
            # acknowledgment ... the MESSAGE frame MUST also contain an ack header" (1.2)
            if self.version == V12:
                ack = ack_id
        if message.redeliveries:
            core._counters.messages_redelivered += 1
        core._counters.messages_delivered += 1
        lines = message.lines
        splice = sub.splice
        if (
            lines is not None
            and splice is not None
            and (message.escaping == self.version or "\\" not in lines)
            and message.destination == sub.destination.name
        ):
            # The bytes encode() writes for these headers, spliced: the user header
            # lines as received need no escaping again in the session's version (the
            # escaping they arrived in, or none at all); ack ids are digits.
            text = splice[0] + message.message_id + splice[1]
            if ack:
                text += "\nack:" + ack
            if message.redeliveries:
                text += "\nredelivered:true"
            body = message.body
            if body:
                head = f"{text}{lines}\ncontent-length:{len(body)}\n\n"
                self._queue(b"".join((head.encode(), body, b"\x00")))
            else:
                self._queue(f"{text}{lines}\n\n\x00".encode())
            return
        headers = [
            ("destination", message.destination),
            ("message-id", message.message_id),
            ("subscription", sub.id),
        ]
        if ack:
            headers.append(("ack", ack))
        if message.redeliveries:
            headers.append(("redelivered", "true"))
        headers.extend(message.headers)
        self._send_frame("MESSAGE", tuple(headers), message.body)

    def _error(self, reject: _Reject, frame: Frame | None) -> None:
        """Queue an ERROR for ``reject`` and start closing, as the spec requires."""
        message = " ".join(reject.message.split())
        headers: list[tuple[str, str]] = [("message", message), *reject.headers]
        receipt = frame.get("receipt") if frame is not None else None
        if receipt is not None:
            # "if the frame included a receipt header, the ERROR frame SHOULD set the
            # receipt-id header to match the value of the receipt header" (1.2, ERROR)
            headers.append(("receipt-id", receipt))
        headers.append(("content-type", "text/plain"))
        body = reject.body or message
        if frame is not None and not reject.body:
            shown = "\n".join(
                f"{k}:{'********' if k == 'passcode' else v}" for k, v in frame.headers
            )
            body += (
                f"\n\nThe frame:\n-----\n{frame.command}\n{shown}\n"
                f"({len(frame.body)} body bytes)\n-----\n"
            )
        self._send_frame("ERROR", tuple(headers), body.encode("utf-8"))
        self.core._counters.errors_sent += 1
        self._closing(message)

    def _closing(self, reason: str) -> None:
        self.state = _CLOSING
        if self.close_reason is None:
            self.close_reason = reason
        self._release()

    # -- input -------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Parse and act on bytes from the client; ``now`` is when they arrived.

        Never raises for bad input: it queues an ERROR and moves to CLOSING.
        """
        if type(now) is not float:  # once a read, not a frame
            refuse_time("now", now)
        if not data:
            check_type("data", data, (bytes, bytearray, memoryview), "bytes")
            return
        if self.state not in _READING:
            return  # after ERROR or DISCONNECT, what follows is discarded
        if self._heartbeat is not None:
            self._heartbeat.received(now, only_heartbeats(data))
        parser = self._parser
        parser.feed(data)
        while self.state in _READING:
            try:
                frame = parser.next_frame()
            except FrameTooLarge as exc:
                self._error(_Reject("frame too large", body=str(exc)), None)
                return
            except ProtocolError as exc:
                self._error(_Reject("malformed frame received", body=str(exc)), None)
                return
            if frame is None:
                return
            try:
                self._handle(frame, now)
            except _Reject as reject:
                self._error(reject, frame)

    def receive_eof(self) -> None:
        """The client closed the connection."""
        self.close("connection closed by the client")

    def close(self, reason: str = "closed") -> None:
        """The transport is gone: release everything and forget the session.

        Unacknowledged queue messages go back to their queues (``redelivered:true``),
        open transactions are aborted. Output not yet taken can still be drained.
        """
        check_type("reason", reason, str, "a str")
        if self.state is _CLOSED:
            return
        if self.close_reason is None:
            self.close_reason = reason
        self.state = _CLOSED
        self._release()
        self.core.sessions.pop(self.id, None)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._heartbeat = None
        # "Any started transactions which have not been committed will be implicitly
        # aborted if the client sends a DISCONNECT frame or if the TCP connection
        # fails for any reason." (1.2, BEGIN)
        self._transactions.clear()
        for sub in list(self._subscriptions.values()):
            self._remove_subscription(sub)

    # -- frames ------------------------------------------------------------------------

    def _handle(self, frame: Frame, now: float) -> None:
        command = frame.command
        if command == "SEND" and self.state is _CONNECTED:
            self._on_send(frame)  # by far the most frequent: tested first
            return
        if command in ("CONNECT", "STOMP"):
            self._on_connect(frame, now)
            return
        if self.state is _AWAITING:
            raise _Reject(f"expected a CONNECT or STOMP frame, got {command}")
        if command == "SUBSCRIBE":
            self._on_subscribe(frame)
        elif command == "UNSUBSCRIBE":
            self._on_unsubscribe(frame)
        elif command in ("ACK", "NACK"):
            self._on_settle(frame)
        elif command == "BEGIN":
            self._on_begin(frame)
        elif command in ("COMMIT", "ABORT"):
            self._on_finish(frame)
        elif command == "DISCONNECT":
            self._receipt(frame)
            self._closing("DISCONNECT")
        else:
            raise _Reject(f"{command} is a server frame; a client must not send it")

    def _required(self, frame: Frame, name: str) -> str:
        value = frame.get(name)
        if not value:
            what = "an empty" if value == "" else "no"
            raise _Reject(
                f"{frame.command} frame with {what} {name} header, which is required "
                f"(STOMP {self.version})"
            )
        return value

    def _receipt(self, frame: Frame) -> None:
        # "A RECEIPT frame is sent from the server to the client once a server has
        # successfully processed a client frame that requests a receipt." (1.2)
        receipt = frame.get("receipt")
        if receipt is not None:
            self._send_receipt(receipt)

    def _on_connect(self, frame: Frame, now: float) -> None:
        if self.state is not _AWAITING:
            raise _Reject(f"{frame.command} frame on a connection that is already connected")
        config = self.core.config
        accept = frame.get("accept-version")
        # "If the accept-version header is missing, it means that the client only
        # supports version 1.0 of the protocol." (1.2, Protocol Negotiation)
        offered = {V10} if accept is None else {v.strip() for v in accept.split(",")}
        common = [v for v in config.versions if v in offered]
        if not common:
            supported = " ".join(config.versions)
            # "the server MUST respond with an ERROR frame similar to the following
            # and then close the connection: version:1.2,2.1 ..."
            raise _Reject(
                f"no common STOMP version: the client accepts {accept or '1.0'}, "
                f"this server speaks {supported}",
                body=f"Supported protocol versions are {supported}",
                headers=(("version", ",".join(config.versions)),),
            )
        version = common[-1]
        host = frame.get("host")
        if config.virtual_hosts is not None and host not in config.virtual_hosts:
            # STOMP 1.1 and 1.2 make host REQUIRED, yet common clients (stomp.py in
            # 1.1 mode) leave it out; like RabbitMQ and ActiveMQ the broker lets that
            # pass unless it checks virtual hosts.
            what = "no host header" if host is None else f"unknown virtual host {host!r}"
            raise _Reject(f"{frame.command} frame with {what}")
        try:
            theirs = parse_heartbeat(frame.get("heart-beat"))
        except ProtocolError as exc:
            raise _Reject(str(exc)) from None
        login = frame.get("login")
        if config.users is not None and (
            login is None
            or login not in config.users
            or config.users[login] != frame.get("passcode")
        ):
            raise _Reject("authentication failed: unknown login or wrong passcode")
        self.version = version
        self._parser.version = version
        self.login = login
        self.host = host
        self.state = _CONNECTED
        headers = [("version", version), ("session", self.id), ("server", config.server_name)]
        # Not in any STOMP version: a client that knows it refuses a larger SEND itself,
        # rather than lose the connection to the ERROR (stompy's clients do).
        headers.append((MAX_BODY_HEADER, str(config.limits.max_body)))
        if version != V10:  # STOMP 1.0 has no heart-beating
            headers.append(("heart-beat", format_heartbeat(config.heartbeats)))
            out_ms, in_ms = negotiate(config.heartbeats, theirs)
            self.heartbeats = (out_ms, in_ms)
            if out_ms or in_ms:
                self._heartbeat = Heartbeat(out_ms, in_ms, config.heartbeat_tolerance, now)
        self._send_frame("CONNECTED", tuple(headers))

    def _transaction(self, frame: Frame) -> list[_Message | _TxSettle] | None:
        return self._open_transaction(frame.command, frame.get("transaction"))

    def _open_transaction(
        self, command: str, name: str | None
    ) -> list[_Message | _TxSettle] | None:
        """The frames so far of transaction ``name`` (``None``: outside any)."""
        if name is None:
            return None
        ops = self._transactions.get(name)
        if ops is None:
            raise _Reject(f"{command} in transaction {name!r}, which is not open")
        if len(ops) >= self.core.config.max_transaction_frames:
            raise _Reject(
                f"transaction {name!r} holds {len(ops)} frames, the broker's "
                f"max_transaction_frames limit is {self.core.config.max_transaction_frames} "
                "(raise it with serve(max_transaction_frames=...))"
            )
        return ops

    def _on_send(self, frame: Frame) -> None:
        # The busiest path of a broker. A SEND as clients mostly write one (destination
        # first, then no header the broker reads but content-length) is taken from its
        # header block as it arrived, without making the pairs: the block was checked
        # by the parser (one colon a line, LF only, defined escapes), and its lines but
        # those two are its user headers, kept as they are.
        block = received_block(frame)
        if block.startswith(_SEND_DESTINATION):
            end = block.find("\n", 17)
            if end > 17:
                target = block[17:end]
                lines = block[end:]
                at = lines.find("\ncontent-length:")
                if at >= 0:
                    after = lines.find("\n", at + 16)
                    lines = lines[:at] if after < 0 else lines[:at] + lines[after:]
                if "\\" not in target and _CONTROL_LINE.search(lines) is None:
                    escaping = received_escaping(frame)
                    self.core._accept(_Message(target, None, frame.body, lines, escaping))
                    return
        # Any other SEND: the header entries are read in one pass.
        destination = transaction = receipt = reply_to = None
        user: list[tuple[str, str]] = []
        for entry in frame.headers:
            name = entry[0]
            if name not in _BROKER_HEADERS:
                user.append(entry)
                if name == "reply-to" and reply_to is None:
                    reply_to = entry[1]
            elif name == "destination":
                destination = entry[1] if destination is None else destination
            elif name == "transaction":
                transaction = entry[1] if transaction is None else transaction
            elif name == "receipt":
                receipt = entry[1] if receipt is None else receipt
        if not destination:
            what = "an empty" if destination == "" else "no"
            raise _Reject(
                f"SEND frame with {what} destination header, which is required "
                f"(STOMP {self.version})"
            )
        ops = None if transaction is None else self._open_transaction("SEND", transaction)
        headers = tuple(user)
        if reply_to is not None and reply_to.startswith(_TEMP_QUEUE_PREFIX):
            headers = tuple((k, self._temp_queue(v) if k == "reply-to" else v) for k, v in headers)
        message = _Message(destination, headers, frame.body)
        if ops is not None:
            ops.append(message)
        else:
            self.core._accept(message)
        if receipt is not None:
            self._send_receipt(receipt)

    def _temp_queue(self, name: str) -> str:
        """The private queue that stands for the temporary queue ``name`` (made at its
        first use on this connection, with its implicit subscription); its name."""
        if not name.startswith(_TEMP_QUEUE_PREFIX):
            return name  # a reply-to entry that names no temporary queue stays as it is
        sub = self._temp_queues.get(name)
        if sub is None:
            limit = self.core.config.max_subscriptions
            if len(self._subscriptions) >= limit:
                raise _Reject(f"too many subscriptions (the limit is {limit}) for {name!r}")
            if name in self._subscriptions:
                raise _Reject(f"reply-to {name!r}: a subscription of this connection has that id")
            dest = self.core._new_temp_queue()
            sub = _Subscription(self, name, dest, "auto", self.core.config.prefetch)
            self._subscriptions[name] = sub
            self._temp_queues[name] = sub
            dest.subscriptions.append(sub)
        return sub.destination.name

    def _on_subscribe(self, frame: Frame) -> None:
        config = self.core.config
        destination = self._required(frame, "destination")
        if destination.startswith(_PRIVATE_PREFIXES):
            # As RabbitMQ: a temporary queue is named in a SEND's reply-to, and its
            # replies arrive on the subscription the broker makes then.
            raise _Reject(
                f"SUBSCRIBE to {destination!r}: a temporary queue cannot be subscribed to; "
                "name /temp-queue/NAME in a SEND's reply-to header and its replies arrive "
                "on subscription /temp-queue/NAME"
            )
        if self.version == V10 and frame.get("id") is None:
            # STOMP 1.0 makes the id optional; the destination then names it.
            sub_id = destination
        else:
            sub_id = self._required(frame, "id")
        if sub_id in self._subscriptions:
            # "Within the same connection, different subscriptions MUST use different
            # subscription identifiers." (1.2, SUBSCRIBE id Header)
            raise _Reject(f"subscription id {sub_id!r} is already in use on this connection")
        ack = frame.get("ack", "auto")
        if ack not in _ACK_MODES:
            raise _Reject(f"invalid ack mode {ack!r}: want auto, client or client-individual")
        if len(self._subscriptions) >= config.max_subscriptions:
            raise _Reject(f"too many subscriptions (the limit is {config.max_subscriptions})")
        prefetch = config.prefetch
        requested = frame.get("prefetch-count")
        if requested is not None:
            if not requested.isdigit() or int(requested) < 1:
                raise _Reject(f"invalid prefetch-count {requested!r}: want a positive integer")
            prefetch = int(requested)
        dest = self.core._destination(destination)
        sub = _Subscription(self, sub_id, dest, _ACK_MODES[_ACK_MODES.index(ack)], prefetch)
        self._subscriptions[sub_id] = sub
        dest.subscriptions.append(sub)
        self._receipt(frame)
        self.core._dispatch(dest)

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.get("id")
        if sub_id is None and self.version == V10:
            # 1.0: "It requires either a destination header or an id header"
            destination = self._required(frame, "destination")
            matches = [s for s in self._subscriptions.values() if s.destination.name == destination]
            if not matches:
                raise _Reject(f"no subscription to {destination!r} on this connection")
            sub = matches[0]
        else:
            sub_id = self._required(frame, "id")
            found = self._subscriptions.get(sub_id)
            if found is None:
                raise _Reject(
                    f"UNSUBSCRIBE of {sub_id!r}, which is no subscription of this connection"
                )
            sub = found
        self._remove_subscription(sub)
        self._receipt(frame)

    def _remove_subscription(self, sub: _Subscription) -> None:
        core = self.core
        self._subscriptions.pop(sub.id, None)
        dest = sub.destination
        index = dest.subscriptions.index(sub)
        del dest.subscriptions[index]
        # Keep the round-robin position on the subscription that was next.
        if index < dest.next_index:
            dest.next_index -= 1
        if dest.subscriptions:
            dest.next_index %= len(dest.subscriptions)
        else:
            dest.next_index = 0
        if self._temp_queues.get(sub.id) is sub:
            del self._temp_queues[sub.id]
            core._discard(dest)  # private to this connection: nobody else can read it
        unacked = [self._ack_index.pop(ack_id)[1] for ack_id in sub.by_message_id.values()]
        sub.by_message_id.clear()
        core._counters.messages_dropped += len(sub.backlog)
        sub.backlog.clear()
        if unacked and not dest.is_topic:
            # Delivered but never acked: the client may not have processed them.
            core._requeue(dest, unacked)
            core._dispatch(dest)
        else:
            core._counters.messages_dropped += len(unacked)
        core._forget_if_unused(dest)

    def _find_delivery(self, frame: Frame) -> tuple[_Subscription, str]:
        """The subscription and ack id an ACK or NACK frame refers to, per version."""
        command = frame.command
        if self.version == V12:
            # "The ACK frame MUST include an id header matching the ack header of the
            # MESSAGE being acknowledged." (1.2, ACK)
            ack_id = self._required(frame, "id")
            entry = self._ack_index.get(ack_id)
            if entry is None:
                raise _Reject(f"{command} of {ack_id!r}, which is no unacknowledged message")
            return entry[0], ack_id
        message_id = self._required(frame, "message-id")
        if self.version == V11:
            sub_id = self._required(frame, "subscription")
            sub = self._subscriptions.get(sub_id)
            if sub is None:
                raise _Reject(
                    f"{command} for {sub_id!r}, which is no subscription of this connection"
                )
            candidates = [sub]
        else:
            candidates = list(self._subscriptions.values())
        for sub in candidates:
            found = sub.by_message_id.get(message_id)
            if found is not None:
                return sub, found
        raise _Reject(f"{command} of message {message_id!r}, which is not awaiting acknowledgement")

    def _on_settle(self, frame: Frame) -> None:
        if frame.command == "NACK" and self.version == V10:
            raise _Reject("NACK does not exist in STOMP 1.0")
        sub, ack_id = self._find_delivery(frame)
        ops = self._transaction(frame)
        if ops is not None:
            ops.append(_TxSettle(frame.command, sub, ack_id))
        else:
            self._settle(frame.command, sub, ack_id)
        self._receipt(frame)

    def _settle(self, command: str, sub: _Subscription, ack_id: str) -> None:
        """Apply an ACK or NACK (cumulative in ``client`` mode)."""
        entry = self._ack_index.get(ack_id)
        if entry is None or entry[0] is not sub:
            return  # settled meanwhile (e.g. acked outside the transaction)
        if sub.ack == "client":
            # "The ACK frames sent by the client will be treated as a cumulative
            # acknowledgment ... and all messages sent to the subscription before."
            # NACK alike: "to all messages sent before and not yet ACK'ed or NACK'ed".
            ack_ids: list[str] = []
            for pending in sub.by_message_id.values():
                ack_ids.append(pending)
                if pending == ack_id:
                    break
        else:
            ack_ids = [ack_id]
        messages = []
        for pending in ack_ids:
            message = self._ack_index.pop(pending)[1]
            del sub.by_message_id[message.message_id]
            messages.append(message)
        core = self.core
        if command == "ACK":
            core._counters.messages_acked += len(messages)
        else:
            core._counters.messages_nacked += len(messages)
            if sub.destination.is_topic:
                sub.backlog.extendleft(reversed(core._given_back(messages)))
            else:
                core._requeue(sub.destination, messages)
        core._dispatch(sub.destination)

    def _on_begin(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        if name in self._transactions:
            # "Within the same connection, different transactions MUST use different
            # transaction identifiers." (1.2, BEGIN)
            raise _Reject(f"transaction {name!r} is already open")
        if len(self._transactions) >= self.core.config.max_transactions:
            raise _Reject(
                f"too many open transactions (the limit is {self.core.config.max_transactions})"
            )
        self._transactions[name] = []
        self._receipt(frame)

    def _on_finish(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        ops = self._transactions.pop(name, None)
        if ops is None:
            raise _Reject(f"{frame.command} of transaction {name!r}, which is not open")
        if frame.command == "COMMIT":
            # All or nothing: check room for every SEND before applying any.
            self.core._check_capacity([op for op in ops if isinstance(op, _Message)])
            for op in ops:
                if isinstance(op, _Message):
                    self.core._publish(op)
                else:
                    self._settle(op.command, op.subscription, op.ack_id)
        self._receipt(frame)

    # -- timers and test hooks ---------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called (``None``: never)."""
        if self.state is _AWAITING:
            return self._opened + self.core.config.connect_timeout
        if self.state is _CONNECTED and self._heartbeat and not self.paused:
            return self._heartbeat.deadline()
        return None

    def handle_timer(self, now: float) -> None:
        """Queue a heart-beat EOL when one is due; drop a silent or late client."""
        if self.state is _AWAITING:
            if now >= self._opened + self.core.config.connect_timeout:
                self._error(
                    _Reject(f"no CONNECT frame within {self.core.config.connect_timeout:g} s"),
                    None,
                )
            return
        beat = self._heartbeat
        if self.state is not _CONNECTED or beat is None or self.paused:
            return
        if beat.peer_dead(now):
            self.core._counters.heartbeat_timeouts += 1
            self._error(
                _Reject(
                    f"heart-beat timeout: nothing received for {beat.silence(now):.3f} s "
                    f"(heart-beats every {self.heartbeats[1]} ms were agreed)"
                ),
                None,
            )
            return
        if beat.beat_due(now):
            # "if the sender has no real STOMP frame to send, it MUST send an EOL"
            if not self._out:
                self._queue(b"\n")
            beat.sent(now)

    def pause(self) -> None:
        """Stop deliveries and heart-beat bookkeeping (the transport stops its I/O)."""
        self.paused = True

    def resume(self, now: float) -> None:
        """Undo :meth:`pause`; the heart-beat clocks restart at ``now``."""
        refuse_time("now", now)
        if not self.paused:
            return
        self.paused = False
        if self._heartbeat is not None:
            self._heartbeat.sent(now)
            self._heartbeat.received(now)
        if self.state is _CONNECTED:
            for sub in list(self._subscriptions.values()):
                self.core._dispatch(sub.destination)
        self.core._ready[self.id] = self

"""What the test broker is configured with and what it reports: its options, the
snapshots of its counters and connections, a connection's states, the destination names
it treats apart, and the refusal of a client frame. No behaviour but the checks of the
options.
"""

from __future__ import annotations

import enum
import logging
import warnings
from collections.abc import Collection, Mapping
from dataclasses import InitVar, dataclass, field
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Final, TypedDict

from stompy._checks import (
    bad_value,
    check_heartbeats,
    check_integer,
    check_number,
    check_seconds,
    check_type,
    check_versions,
    wrong_type,
)
from stompy._core.frames import VERSIONS, Headers
from stompy._core.heartbeat import MAX_INTERVAL
from stompy._core.parser import FrameLimits
from stompy.errors import ConfigurationError

__all__ = (
    "AWAITING",
    "CLOSED",
    "CLOSING",
    "CONNECTED",
    "DLQ_PREFIX",
    "FINISHED",
    "PRIVATE_PREFIXES",
    "QUEUE_PREFIX",
    "READING",
    "REPLY_QUEUE_PREFIX",
    "TEMP_QUEUE_PREFIX",
    "TOPIC_PREFIX",
    "BrokerConfig",
    "BrokerOptions",
    "BrokerStats",
    "ConnectionInfo",
    "ConnectionState",
    "Reject",
    "SubscriberInfo",
    "logger",
)

TOPIC_PREFIX: Final = "/topic/"
#: A ``reply-to`` starting with this names a temporary queue (RabbitMQ's convention)...
TEMP_QUEUE_PREFIX: Final = "/temp-queue/"
#: ... which the broker makes under this prefix, and which only its connection reads.
REPLY_QUEUE_PREFIX: Final = "/reply-queue/"
PRIVATE_PREFIXES: Final = (TEMP_QUEUE_PREFIX, REPLY_QUEUE_PREFIX)
QUEUE_PREFIX: Final = "/queue/"
#: Dead-letter queues by default: ``/queue/DLQ.<name>``, as ActiveMQ names them.
DLQ_PREFIX: Final = "/queue/DLQ."

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
    #: Bytes the broker holds for its clients at most: messages (their bodies, user
    #: headers and ``MESSAGE_OVERHEAD``, 256 bytes for the objects that keep them) in
    #: queues, waiting for topic subscribers slower than their topic, delivered and not
    #: yet acknowledged, and in open transactions (whose ACK and NACK frames count 256
    #: bytes each); the subscriptions (``subscription_size``: a client may name them
    #: with 64 KiB each); and ``DESTINATION_OVERHEAD`` for each destination in use. A
    #: message counts once for each subscription that waits for it or holds it.
    max_stored_bytes: int = 256 * 1024 * 1024
    #: Unsent output per connection above which deliveries to it pause.
    write_buffer: int = 1024 * 1024
    #: Subscriptions one connection holds at most (its temporary queues included).
    max_subscriptions: int = 1000
    #: Transactions one connection has open at most.
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
    #: Body bytes one topic subscription holds at most for a consumer slower than its
    #: topic. A topic message that finds it full (or the broker at ``max_stored_bytes``)
    #: is dropped for that subscriber, its oldest waiting messages first, with one
    #: WARNING per subscription: a SEND to a topic is never refused for a slow consumer.
    max_backlog_bytes: int = 64 * 1024 * 1024
    #: Bytes of frames not yet complete that all connections together hold at most; the
    #: connection whose bytes go over gets an ERROR naming the limit, and is closed.
    max_partial_bytes: int = 128 * 1024 * 1024
    #: Seconds a client has to finish a frame once its first byte arrived; then an
    #: ERROR, and the connection is closed. (CONNECT has ``connect_timeout``.)
    frame_timeout: float = 60.0

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
        check_integer("max_backlog_bytes", self.max_backlog_bytes, 1)
        check_integer("max_partial_bytes", self.max_partial_bytes, 1)
        check_seconds("frame_timeout", self.frame_timeout, positive=True)
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
            if not dlq or "\n" in dlq or "\r" in dlq or dlq.startswith(PRIVATE_PREFIXES):
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
    max_backlog_bytes: int
    max_partial_bytes: int
    frame_timeout: float


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
    bytes_stored: int = 0
    """Bytes held for the clients when the snapshot was taken, as ``max_stored_bytes``
    counts them: messages in queues, waiting for slow topic subscribers, delivered and
    not yet acknowledged, and in open transactions; the subscriptions and the
    destinations in use."""
    bytes_partial: int = 0
    """Bytes of unfinished frames held when the snapshot was taken, all connections
    together (see ``max_partial_bytes``)."""


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


class ConnectionState(enum.Enum):
    """Where a client connection stands, seen from the broker."""

    #: Connected at the transport level, waiting for CONNECT or STOMP.
    AWAITING_CONNECT = "AWAITING_CONNECT"
    #: CONNECTED sent; every client frame is accepted.
    CONNECTED = "CONNECTED"
    #: An ERROR (or the DISCONNECT receipt) is queued; input is ignored, the transport
    #: flushes the output and closes the connection.
    CLOSING = "CLOSING"
    #: The transport is gone and the connection released everything it held.
    CLOSED = "CLOSED"


# The states as module names, in the order of their definition, for the busy paths:
# reading an Enum member from its class costs as much as a small function call.
AWAITING, CONNECTED, CLOSING, CLOSED = ConnectionState
#: The states in which a connection reads what the client sends, and those after them.
READING: Final = (AWAITING, CONNECTED)
FINISHED: Final = (CLOSING, CLOSED)


class Reject(Exception):
    """A client frame the broker refuses: it answers with ERROR and closes."""

    def __init__(self, message: str, *, body: str = "", headers: Headers = ()) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        self.headers = headers

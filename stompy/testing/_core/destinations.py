"""What the test broker stores: messages, destinations, and the subscriptions that
join a destination to a client connection.

The store (:mod:`.store`) routes messages between them; the connection
(:mod:`.connection`) owns what is per client: a subscription's unacknowledged
deliveries (``by_message_id``). A topic subscription's backlog is the store's.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from stompy._core.events import AckMode
from stompy._core.frames import V10, Headers, escape, split_header_lines
from stompy.testing._core.records import TOPIC_PREFIX

if TYPE_CHECKING:
    from stompy.testing._core.connection import ClientConnection

__all__ = (
    "DESTINATION_OVERHEAD",
    "MESSAGE_OVERHEAD",
    "SUBSCRIPTION_OVERHEAD",
    "Destination",
    "StoredMessage",
    "Subscription",
    "subscription_size",
)


#: Bytes counted for each message held besides its body and headers: about what the
#: objects that hold an empty message in a queue take, so that ``max_stored_bytes``
#: bounds messages without a body too (a million of them to a queue nobody reads).
MESSAGE_OVERHEAD: Final = 256
#: Bytes counted for each subscription besides its id and destination: about what its
#: objects take.
SUBSCRIPTION_OVERHEAD: Final = 1024
#: Bytes counted for each destination while it holds messages or subscriptions: about
#: what its objects take, so that empty messages spread over new queues (a destination
#: each) are bounded by ``max_stored_bytes`` as well as those in one queue.
DESTINATION_OVERHEAD: Final = 1024


def subscription_size(sub_id: str, destination: str) -> int:
    """What ``max_stored_bytes`` counts for a subscription: its id and destination
    name twice (its MESSAGE frames' first lines are kept made) and
    :data:`SUBSCRIPTION_OVERHEAD`. A client may send names of 64 KiB."""
    return 2 * (len(sub_id) + len(destination)) + SUBSCRIPTION_OVERHEAD


class StoredMessage:
    """A message as the broker keeps it between SEND and MESSAGE.

    A plain slotted class, not a frozen dataclass: one is made for every SEND, and a
    frozen dataclass sets each field through ``object.__setattr__``. A transaction
    holds its SENDs as messages without an id yet, which they get at COMMIT. Never
    changed once published (a topic's subscriptions share it), but for the pairs made
    from ``lines`` when first needed: redelivery makes a new one, ``redelivered:true``
    when ``redeliveries`` > 0.

    The user headers of a SEND that arrived in the usual shape are kept as the header
    lines that arrived (``lines``), not as pairs: making the pairs costs about as much
    as the rest of the SEND, and a MESSAGE to a client of the same escaping is spliced
    from those lines (see :meth:`ClientConnection.deliver`)."""

    __slots__ = (
        "_headers",
        "body",
        "destination",
        "escaping",
        "lines",
        "message_id",
        "redeliveries",
        "size",
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
        #: Set when it is published (see ``MessageStore.publish``).
        self.message_id = ""
        #: How many times it came back so far (see ``BrokerConfig.max_redeliveries``);
        #: above 0 it is delivered with ``redelivered:true``.
        self.redeliveries = 0
        #: What ``max_stored_bytes`` counts for it: its body, its user headers (a SEND
        #: without a body may hold 96 KiB of them) and :data:`MESSAGE_OVERHEAD`.
        self.size = len(body) + MESSAGE_OVERHEAD
        if lines is not None:
            self.size += len(lines)
        elif headers:
            for key, value in headers:
                self.size += len(key) + len(value) + 2

    @property
    def headers(self) -> Headers:
        """The SEND frame's user headers, in order (``content-type`` included)."""
        headers = self._headers
        if headers is None:
            headers = self._headers = pairs(self.lines or "", self.escaping)
        return headers

    def again(self) -> StoredMessage:
        """The message given back for redelivery: one more redelivery counted."""
        again = StoredMessage(self.destination, self._headers, self.body, self.lines, self.escaping)
        again.message_id = self.message_id
        again.redeliveries = self.redeliveries + 1
        return again


def pairs(lines: str, escaping: str) -> Headers:
    """The pairs of received header ``lines`` (each after a LF, as a checked block of a
    :class:`~stompy._core.frames.ReceivedFrame` holds them), unescaped."""
    if not lines:
        return ()
    flat = split_header_lines(lines[1:], escaping)
    return tuple(zip(flat[::2], flat[1::2], strict=True))


class Destination:
    """A queue or a topic: its waiting messages (a queue's) and its subscriptions."""

    __slots__ = ("bytes", "is_topic", "messages", "name", "next_index", "subscriptions")

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_topic = name.startswith(TOPIC_PREFIX)
        self.messages: deque[StoredMessage] = deque()
        #: What ``messages`` count against ``max_stored_bytes`` (their sizes).
        self.bytes = 0
        self.subscriptions: list[Subscription] = []
        self.next_index = 0  # round-robin position among the subscriptions


class Subscription:
    """One subscription of a client connection to a destination."""

    __slots__ = (
        "ack",
        "backlog",
        "backlog_bytes",
        "by_message_id",
        "connection",
        "destination",
        "dropped",
        "id",
        "prefetch",
        "size",
        "splice",
        "temporary",
    )

    def __init__(
        self,
        connection: ClientConnection,
        id: str,
        destination: Destination,
        ack: AckMode,
        prefetch: int,
        temporary: bool = False,
    ) -> None:
        self.connection = connection
        self.id = id
        self.destination = destination
        self.ack: AckMode = ack
        self.prefetch = prefetch
        #: What it counts against ``max_stored_bytes`` while it lasts.
        self.size = subscription_size(id, destination.name)
        #: The implicit subscription to a temporary queue, which goes with it.
        self.temporary = temporary
        #: Topic messages waiting until this subscription can take them.
        self.backlog: deque[StoredMessage] = deque()
        #: What ``backlog`` counts against ``max_stored_bytes`` (its messages' sizes).
        self.backlog_bytes = 0
        #: message-id -> ack id of the unacknowledged deliveries, in delivery order.
        self.by_message_id: dict[str, str] = {}
        #: Whether its backlog dropped a message yet (warned once).
        self.dropped = False
        #: What its MESSAGE frames start with, up to the message id and after it, as
        #: ``encode`` writes them in the connection's version (see
        #: ClientConnection.deliver); None where that cannot be written as it is (a
        #: line break in STOMP 1.0).
        self.splice: tuple[str, str] | None = None
        version = connection.version
        name = destination.name
        if version != V10 or not any(c in name or c in id for c in "\n\r"):
            self.splice = (
                f"MESSAGE\ndestination:{escape(name, version)}\nmessage-id:",
                f"\nsubscription:{escape(id, version)}",
            )

    def can_accept(self) -> bool:
        """Whether a message can be delivered to it now (flow control)."""
        if not self.connection.takes_deliveries():
            return False
        return self.ack == "auto" or len(self.by_message_id) < self.prefetch

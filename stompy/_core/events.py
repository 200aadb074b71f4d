"""What the client state machine reports: small frozen dataclasses, one per event
(:class:`MessageReceived`, made per message, and :class:`Receipt`, per round trip, plain
classes that behave as ones, read-only by agreement as :class:`~stompy.Frame` is: a
frozen class makes interpreted Python pay a ``__setattr__`` call per field of each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from stompy._core.frames import Frame
from stompy._mypyc import mypyc_attr

__all__ = (
    "AckMode",
    "Connected",
    "ConnectionClosed",
    "Error",
    "Event",
    "HeartbeatTimedOut",
    "MessageReceived",
    "Receipt",
)

AckMode = Literal["auto", "client", "client-individual"]


@dataclass(frozen=True, slots=True)
class Connected:
    """The server accepted the connection (its CONNECTED frame)."""

    #: The negotiated STOMP version.
    version: str
    #: The ``server`` header, if the server sent one.
    server: str | None
    #: The ``session`` header, if the server sent one.
    session: str | None
    #: Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms; 0 is off.
    heartbeats: tuple[int, int]
    frame: Frame

    def __reduce__(self) -> tuple[type[Connected], tuple[object, ...]]:
        return Connected, (self.version, self.server, self.session, self.heartbeats, self.frame)


@mypyc_attr(allow_interpreted_subclasses=True)
class MessageReceived:
    """A MESSAGE frame, routed to one of our subscriptions.

    ``MessageReceived(frame, subscription, ack_mode)``; treat it as read-only, as the
    other events are (and :class:`~stompy.Frame`; not enforced: one is made per
    message), and like them it compares by value. A plain class rather than a
    dataclass: one is made per message received, and mypyc compiles the ``__init__``
    written here, where a dataclass's generated one stays interpreted
    (docs/performance.md has the cost).

    It may be subclassed, also when the core is compiled: the clients' messages
    (``stompy.Message``, ``stompy.AsyncMessage``) are subclasses that the core is made
    to produce (``ClientProtocol(message_class=...)``), so that a received message is
    one object, not an event and another object around it. A subclass keeps this
    ``__init__``; compiled code reads the three attributes directly, and the properties
    through the subclass.
    """

    __slots__ = ("ack_mode", "frame", "subscription")

    #: As a dataclass has them, for ``match`` statements.
    __match_args__: ClassVar[tuple[str, ...]] = ("frame", "subscription", "ack_mode")

    def __init__(self, frame: Frame, subscription: str, ack_mode: AckMode) -> None:
        self.frame = frame
        #: The id of the subscription it belongs to.
        self.subscription = subscription
        #: The subscription's ack mode: whether this message must be acked.
        self.ack_mode: AckMode = ack_mode

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageReceived) or type(other) is not type(self):
            return NotImplemented
        return (
            self.frame == other.frame
            and self.subscription == other.subscription
            and self.ack_mode == other.ack_mode
        )

    def __reduce__(self) -> tuple[type[MessageReceived], tuple[object, ...]]:
        return type(self), (self.frame, self.subscription, self.ack_mode)

    #: Unhashable, as a dataclass that compares by value and is not frozen.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"MessageReceived(frame={self.frame!r}, subscription={self.subscription!r}, "
            f"ack_mode={self.ack_mode!r})"
        )

    @property
    def destination(self) -> str:
        return self.frame.get("destination") or ""

    @property
    def message_id(self) -> str:
        return self.frame.get("message-id") or ""

    @property
    def ack_id(self) -> str | None:
        """The ``ack`` header (STOMP 1.2), which ACK and NACK refer to."""
        return self.frame.get("ack")

    @property
    def body(self) -> bytes:
        return self.frame.body


class Receipt:
    """The server processed the frame that asked for ``receipt_id``.

    ``Receipt(receipt_id, frame)``; treat it as read-only, as the other events are (not
    enforced: one is made per round trip), and like them it compares by value. A plain
    class rather than a dataclass, as :class:`MessageReceived`: a round trip makes one,
    and mypyc compiles this ``__init__`` (a dataclass's generated one stays
    interpreted).
    """

    __slots__ = ("frame", "receipt_id")

    #: As a dataclass has them, for ``match`` statements.
    __match_args__: ClassVar[tuple[str, ...]] = ("receipt_id", "frame")

    def __init__(self, receipt_id: str, frame: Frame) -> None:
        self.receipt_id = receipt_id
        self.frame = frame

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Receipt):
            return NotImplemented
        return self.receipt_id == other.receipt_id and self.frame == other.frame

    #: Unhashable, as the frozen dataclass it was (its frame is unhashable).
    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[Receipt], tuple[object, ...]]:
        return Receipt, (self.receipt_id, self.frame)

    def __repr__(self) -> str:
        return f"Receipt(receipt_id={self.receipt_id!r}, frame={self.frame!r})"


@dataclass(frozen=True, slots=True)
class Error:
    """The server sent an ERROR frame; the connection is closed after it."""

    #: The ``message`` header, or the start of the body when it is missing.
    message: str
    #: The ``receipt-id`` header: the receipt of the frame that caused the error.
    receipt_id: str | None
    frame: Frame

    def __reduce__(self) -> tuple[type[Error], tuple[object, ...]]:
        return Error, (self.message, self.receipt_id, self.frame)


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the transport."""

    #: True when the close followed a DISCONNECT or an ERROR, as the protocol expects.
    expected: bool

    def __reduce__(self) -> tuple[type[ConnectionClosed], tuple[object, ...]]:
        return ConnectionClosed, (self.expected,)


@dataclass(frozen=True, slots=True)
class HeartbeatTimedOut:
    """Nothing arrived for longer than the incoming heart-beat interval allows."""

    #: Seconds of silence when the peer was declared dead.
    silence: float

    def __reduce__(self) -> tuple[type[HeartbeatTimedOut], tuple[object, ...]]:
        return HeartbeatTimedOut, (self.silence,)


Event = Connected | MessageReceived | Receipt | Error | ConnectionClosed | HeartbeatTimedOut

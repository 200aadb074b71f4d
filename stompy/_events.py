"""What the client state machine reports: small frozen dataclasses, one per event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stompy._frames import Frame

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


@dataclass(slots=True)
class MessageReceived:
    """A MESSAGE frame, routed to one of our subscriptions.

    Read-only like the other events, though not frozen: one is made per message
    received, and a frozen dataclass is slow to make (see :class:`Frame`).
    """

    frame: Frame
    #: The id of the subscription it belongs to.
    subscription: str
    #: The subscription's ack mode: whether this message must be acked.
    ack_mode: AckMode

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


@dataclass(frozen=True, slots=True)
class Receipt:
    """The server processed the frame that asked for ``receipt_id``."""

    receipt_id: str
    frame: Frame


@dataclass(frozen=True, slots=True)
class Error:
    """The server sent an ERROR frame; the connection is closed after it."""

    #: The ``message`` header, or the start of the body when it is missing.
    message: str
    #: The ``receipt-id`` header: the receipt of the frame that caused the error.
    receipt_id: str | None
    frame: Frame


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the transport."""

    #: True when the close followed a DISCONNECT or an ERROR, as the protocol expects.
    expected: bool


@dataclass(frozen=True, slots=True)
class HeartbeatTimedOut:
    """Nothing arrived for longer than the incoming heart-beat interval allows."""

    #: Seconds of silence when the peer was declared dead.
    silence: float


Event = Connected | MessageReceived | Receipt | Error | ConnectionClosed | HeartbeatTimedOut

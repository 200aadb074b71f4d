"""The statuses a client connection goes through, and the answers the engine gives.

Plain enums, shared by the engine and both transports, so that a status is
spelled once and a comparison is by identity, not by string.
"""

from __future__ import annotations

import enum
from typing import Final

from stompy._core.protocol import State


class Status(enum.Enum):
    """Where a client connection is in its life."""

    NEW = "new"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSING = "closing"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


# The members bound to names once, for the checks made per message sent or received:
# looking one up on its class (``Status.CONNECTED``) goes through the enum machinery,
# where a module global is one cached load (docs/performance.md, "Costs the code is
# shaped by").
NEW: Final = Status.NEW
CONNECTED: Final = Status.CONNECTED
RECONNECTING: Final = Status.RECONNECTING
CLOSING: Final = Status.CLOSING
CLOSED: Final = Status.CLOSED
#: The core's state once its connection ended.
PROTOCOL_CLOSED: Final = State.CLOSED


class ReceiptState(enum.Enum):
    """How a wait for one RECEIPT (or for the reply to one request) stands."""

    #: The receipt (the reply) came.
    ARRIVED = "arrived"
    #: Not yet; the connection it was asked on is still up.
    PENDING = "pending"
    #: The connection it was asked on ended first: whether the frame took effect is
    #: unknown (a reply can no longer come).
    LOST = "lost"
    #: The connection failed for good (:attr:`Engine.failure` says why).
    FAILED = "failed"
    #: The user closed the connection before the receipt came, and the broker did not
    #: confirm the DISCONNECT (whose receipt settles every wait): whether the frame
    #: took effect is unknown.
    UNCONFIRMED = "unconfirmed"
    #: The user closed the connection before the reply to a request came: none is
    #: awaited after the DISCONNECT (a receipt's wait is settled by its receipt instead).
    CLOSED = "closed"

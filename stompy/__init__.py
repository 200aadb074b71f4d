"""stompy: a STOMP 1.0 / 1.1 / 1.2 client for Python.

The protocol lives in a sans-IO core (:class:`FrameParser`, :func:`encode`,
:class:`ClientProtocol`); thin transports run it over blocking sockets and anyio.
"""

from __future__ import annotations

from stompy import errors
from stompy._codec import FrameLimits, FrameParser, encode
from stompy._events import (
    AckMode,
    Connected,
    ConnectionClosed,
    Error,
    Event,
    HeartbeatTimedOut,
    Message,
    Receipt,
)
from stompy._frames import VERSIONS, Frame
from stompy._protocol import ClientProtocol, State, SubscriptionInfo
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    ProtocolError,
    ReceiptTimeout,
    ServerError,
    StompError,
)

__version__ = "0.1.0"

__all__ = (
    "VERSIONS",
    "AckMode",
    "ClientProtocol",
    "ConnectFailed",
    "Connected",
    "ConnectionClosed",
    "ConnectionLost",
    "Error",
    "Event",
    "Frame",
    "FrameLimits",
    "FrameParser",
    "FrameTooLarge",
    "HeartbeatTimedOut",
    "HeartbeatTimeout",
    "LocalProtocolError",
    "Message",
    "ProtocolError",
    "Receipt",
    "ReceiptTimeout",
    "ServerError",
    "State",
    "StompError",
    "SubscriptionInfo",
    "encode",
    "errors",
)

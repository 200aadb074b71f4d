"""The events :class:`stompy.ClientProtocol` reports (for writing your own transport)."""

from __future__ import annotations

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

__all__ = (
    "AckMode",
    "Connected",
    "ConnectionClosed",
    "Error",
    "Event",
    "HeartbeatTimedOut",
    "Message",
    "Receipt",
)

"""The events :class:`stompy.ClientProtocol` reports (for writing your own transport)."""

from __future__ import annotations

from stompy._events import (
    AckMode,
    Connected,
    ConnectionClosed,
    Error,
    Event,
    HeartbeatTimedOut,
    MessageReceived,
    Receipt,
)

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


def __getattr__(name: str) -> object:
    # ``stompy.events.Message`` was this event's name until it was told apart from
    # ``stompy.Message``, the message a subscription hands out.
    if name == "Message":
        import warnings

        warnings.warn(
            "stompy.events.Message is now stompy.events.MessageReceived",
            DeprecationWarning,
            stacklevel=2,
        )
        return MessageReceived
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

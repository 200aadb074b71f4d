"""One subscription as the session keeps it, and what its SUBSCRIBE asks the broker.

An :class:`Inbox` holds at most ``max_pending`` received messages. In the client ack
modes, :func:`subscribe_headers` asks the broker for a prefetch of ``max_pending``, so
a consumer that falls behind is paced by the broker, not by the socket; what the
session does with a message that does not fit (the inbox's ``overflow``) is the
session's decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Final, Generic, TypeVar

from stompy._core.events import AckMode
from stompy._engine.options import Overflow
from stompy.errors import StompError

__all__ = ("MAX_PREFETCH", "PREFETCH_HEADERS", "Inbox", "subscribe_headers")

#: The SUBSCRIBE headers by which brokers hold back unacknowledged messages per
#: subscription: RabbitMQ's (also read by the in-process broker), then ActiveMQ's.
#: Each broker ignores the other's.
PREFETCH_HEADERS: Final = ("prefetch-count", "activemq.prefetchSize")
#: The largest prefetch asked for: RabbitMQ takes no more (a 16-bit count).
MAX_PREFETCH: Final = 65535

#: What a transport's message class is built from (see :class:`Session`).
M = TypeVar("M")


class Inbox(Generic[M]):
    """One subscription as the session keeps it: what to replay, and the messages
    received for it that the consumer has not taken yet (at most ``max_pending``)."""

    __slots__ = (
        "ack",
        "active",
        "destination",
        "failure",
        "headers",
        "id",
        "items",
        "max_pending",
        "overflow",
    )

    def __init__(
        self,
        id: str,
        destination: str,
        ack: AckMode,
        headers: Mapping[str, str],
        max_pending: int,
        overflow: Overflow = "pause",
    ) -> None:
        self.id = id
        self.destination = destination
        self.ack: AckMode = ack
        #: The headers the user gave (the SUBSCRIBE frame's: :func:`subscribe_headers`).
        self.headers = dict(headers)
        self.max_pending = max_pending
        self.overflow: Overflow = overflow
        self.items: deque[M] = deque()
        self.active = True
        #: Why the session ended the subscription (``overflow="fail"``), or ``None``.
        self.failure: StompError | None = None


def subscribe_headers(ack: AckMode, headers: Mapping[str, str], max_pending: int) -> dict[str, str]:
    """The headers of a SUBSCRIBE: ``headers``, and in the client ack modes a prefetch
    of ``max_pending`` (at most :data:`MAX_PREFETCH`) in each of
    :data:`PREFETCH_HEADERS` that ``headers`` does not set.

    The broker then sends no more unacknowledged messages than the inbox holds, so a
    consumer that falls behind is paced by the broker, not by the socket. With
    ``auto`` the broker forgets a message as it sends it, and no broker paces that.
    """
    merged = dict(headers)
    if ack != "auto":
        prefetch = str(min(max_pending, MAX_PREFETCH))
        for name in PREFETCH_HEADERS:
            merged.setdefault(name, prefetch)
    return merged

"""One subscription as the engine keeps it, and what its SUBSCRIBE asks the broker.

An :class:`Inbox` holds at most ``max_pending`` received messages. In the client ack
modes, :func:`subscribe_headers` asks the broker for a prefetch of ``max_pending``, so
a consumer that falls behind is paced by the broker, not by the socket; what the
engine does with a message that does not fit (the inbox's ``overflow``) is the
engine's decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
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

#: What a transport's message class is built from (see :class:`Engine`).
M = TypeVar("M")


class Inbox(Generic[M]):
    """One subscription as the engine keeps it: what to replay, and the messages
    received for it that the consumer has not taken yet (at most ``max_pending``).

    The engine puts messages in (:meth:`offer`, :meth:`keep`) and ends it
    (:meth:`end`); the consumer takes them out (:meth:`take`, :meth:`take_many`), also
    from another thread than the engine's: each of these is one step of a
    :class:`~collections.deque`, atomic without a lock.
    """

    __slots__ = (
        "_append",
        "_items",
        "_popleft",
        "ack",
        "active",
        "destination",
        "failure",
        "headers",
        "id",
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
        self._items: deque[M] = deque()
        # Its two steps of every message, bound once: compiled, a method called by
        # name on a deque is looked up in its type at each call (mypyc has no deque).
        self._append = self._items.append
        self._popleft = self._items.popleft
        #: Whether the subscription goes on; read it, and end it with :meth:`end`
        #: (a plain attribute: a consumer that waits reads it at each wake-up).
        self.active = True
        #: Why the engine ended the subscription (``overflow="fail"``), or ``None``.
        self.failure: StompError | None = None

    def __repr__(self) -> str:
        state = "active" if self.active else "ended"
        return f"<Inbox {self.id!r} {state} {len(self._items)}/{self.max_pending}>"

    def __iter__(self) -> Iterator[M]:
        """The messages waiting, oldest first, as they are now."""
        return iter(tuple(self._items))

    @property
    def pending(self) -> int:
        """How many messages wait to be taken."""
        return len(self._items)

    def offer(self, message: M) -> bool:
        """Keep ``message`` if there is room for it; whether there was."""
        if len(self._items) >= self.max_pending:
            return False
        self._append(message)
        return True

    def keep(self, message: M) -> None:
        """Keep ``message``, room or not: its connection ended, and nothing else would
        hand it to the consumer."""
        self._items.append(message)

    def take(self) -> M | None:
        """The oldest message, taken out (``None``: none waits)."""
        if not self._items:  # looked at first: a consumer that waits finds it empty
            return None  # often, and an IndexError raised and caught costs more
        try:
            return self._popleft()
        except IndexError:  # another thread took the last one since the look
            return None

    def take_many(self, batch: list[M], limit: int) -> None:
        """Add the oldest messages to ``batch``, until it holds ``limit`` or none waits."""
        popleft = self._popleft
        try:
            for _ in range(min(limit - len(batch), len(self._items))):
                batch.append(popleft())
        except IndexError:
            pass  # a get() in another thread took some meanwhile (it takes unlocked)

    def resume_due(self) -> bool:
        """Whether the consumer made room enough for the engine to move its backlog:
        half the inbox, not one message, or each take would cost the transport a
        wake-up to move one."""
        return len(self._items) <= self.max_pending // 2

    def end(self) -> None:
        """The subscription is over: no message comes any more; those waiting stay
        for the consumer."""
        self.active = False


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

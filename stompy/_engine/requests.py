"""Request/reply: where a request asks for its reply, and which request a reply answers.

:meth:`Session.request` sends with ``reply-to`` naming :data:`REPLY_QUEUE`, a temporary
queue private to the connection, and a fresh ``correlation-id``, and keeps the
:class:`Request` in :attr:`Session.requests` (:class:`Requests`) until its waiter is
done. The broker
delivers the replies on a subscription of that name (RabbitMQ and the in-process broker
make it implicitly; on ActiveMQ, :func:`subscribes_to_temp_queue`, the session
subscribes itself), and the session hands each to the request :func:`answered` names.
:func:`reply_address` is the other side: where a reply to a received message goes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final, Generic, TypeVar

from stompy._core.events import MessageReceived
from stompy._core.frames import Frame
from stompy.errors import ConfigurationError, NoReplyTo

__all__ = (
    "REPLY_QUEUE",
    "Request",
    "Requests",
    "answered",
    "check_request_headers",
    "reply_address",
    "subscribes_to_temp_queue",
)

#: The temporary queue a session's requests name in ``reply-to``. RabbitMQ (and the
#: in-process broker) rewrite it into a queue private to the connection and deliver
#: its replies on an implicit subscription whose id is this name; ActiveMQ wants a
#: SUBSCRIBE to it, which the session makes with this name as the id. Either way the
#: replies arrive with ``subscription`` set to it, and are removed with the connection.
REPLY_QUEUE: Final = "/temp-queue/stompy-replies"
#: ``server`` header prefixes (lower case) of brokers on which the requester must
#: SUBSCRIBE to its temporary queue itself (RabbitMQ refuses that SUBSCRIBE).
_SUBSCRIBE_TO_TEMP_QUEUE: Final = ("activemq/",)
#: The headers :meth:`Session.request` writes itself.
_REQUEST_HEADERS: Final = ("reply-to", "correlation-id")

log: Final = logging.getLogger("stompy")

#: A transport's message class (see :class:`Session`).
M = TypeVar("M", bound=MessageReceived)


class Request(Generic[M]):
    """One request waiting for its reply (see :meth:`Session.request`)."""

    __slots__ = ("correlation_id", "destination", "epoch", "reply")

    def __init__(self, correlation_id: str, destination: str, epoch: int) -> None:
        self.correlation_id = correlation_id
        self.destination = destination
        #: The connection it was sent on: its reply can only come on that one.
        self.epoch = epoch
        #: The reply, once it came.
        self.reply: M | None = None


class Requests(Generic[M]):
    """The requests waiting for their reply, by ``correlation-id``, and those that got
    it since the session's last pump (:meth:`take_replied`)."""

    __slots__ = ("_made", "_replied", "_waiting")

    def __init__(self) -> None:
        self._waiting: dict[str, Request[M]] = {}
        self._made = 0
        self._replied: list[str] = []

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def new(self, destination: str, epoch: int) -> Request[M]:
        """A request to ``destination`` on the connection of ``epoch``, with a fresh
        ``correlation-id``; it waits until :meth:`forget`."""
        self._made += 1
        request: Request[M] = Request(f"stompy-{self._made}", destination, epoch)
        self._waiting[request.correlation_id] = request
        return request

    def reply(self, message: M) -> None:
        """``message`` came to :data:`REPLY_QUEUE`: the reply of the request it names,
        or else dropped (that request timed out, or was answered already)."""
        request = answered(self._waiting, message.frame)
        if request is None:
            log.debug(
                "dropping a reply with correlation-id %r from %r: no request waits for "
                "it (it timed out, or was answered already)",
                message.frame.get("correlation-id"),
                message.destination,
            )
            return
        request.reply = message
        self._replied.append(request.correlation_id)

    def take_replied(self) -> Sequence[str]:
        """The ``correlation-id`` of each request that got its reply since the last
        call, in order."""
        replied = self._replied
        if not replied:
            return ()
        self._replied = []
        return replied

    def forget(self, request: Request[M]) -> None:
        """The wait for ``request``'s reply is over: a reply that comes later is dropped."""
        self._waiting.pop(request.correlation_id, None)


def check_request_headers(headers: Mapping[str, str] | None) -> None:
    """Raise :class:`ConfigurationError` when ``headers`` sets what a request writes
    itself (``reply-to``, ``correlation-id``)."""
    given = [name for name in _REQUEST_HEADERS if headers and name in headers]
    if given:
        raise ConfigurationError(
            f"request() writes {' and '.join(given)} itself; use send() to set them"
        )


def subscribes_to_temp_queue(server: str | None) -> bool:
    """Whether the broker of CONNECTED ``server`` wants a SUBSCRIBE to
    :data:`REPLY_QUEUE` before replies to it arrive (ActiveMQ)."""
    return server is not None and server.lower().startswith(_SUBSCRIBE_TO_TEMP_QUEUE)


def answered(requests: Mapping[str, Request[M]], reply: Frame) -> Request[M] | None:
    """The request that the MESSAGE ``reply`` answers: the one its ``correlation-id``
    names, unless that one has its reply already (``None`` then, as for no match)."""
    correlation_id = reply.get("correlation-id")
    request = requests.get(correlation_id) if correlation_id is not None else None
    if request is None or request.reply is not None:
        return None
    return request


def reply_address(frame: Frame, headers: Mapping[str, str] | None) -> tuple[str, dict[str, str]]:
    """Where a reply to the message ``frame`` goes: its ``reply-to``, and ``headers``
    with its ``correlation-id`` added (one given in ``headers`` wins).

    Raises :class:`NoReplyTo` when the message has no ``reply-to``.
    """
    reply_to = frame.get("reply-to")
    if not reply_to:
        raise NoReplyTo(
            f"message {frame.get('message-id')!r} from {frame.get('destination')!r} has no "
            "reply-to header: there is nowhere to send a reply"
        )
    merged = dict(headers or {})
    correlation_id = frame.get("correlation-id")
    if correlation_id is not None:
        merged.setdefault("correlation-id", correlation_id)
    return reply_to, merged

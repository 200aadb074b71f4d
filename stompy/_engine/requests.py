"""Request/reply: where a request asks for its reply, and which request a reply answers.

:meth:`Engine.request` sends with ``reply-to`` naming a temporary queue and a fresh
``correlation-id``, and keeps the :class:`Request` in :attr:`Engine.requests` until its
waiter is done. How the replies reach the connection depends on the broker, told by the
``server`` header of its CONNECTED frame (:func:`explicit_replies`):

* *implicit*: RabbitMQ (and the in-process broker) rewrite ``reply-to:`` :data:`REPLY_QUEUE`
  into a queue private to the connection and deliver its replies on a subscription
  they make themselves, whose id is that name (a SUBSCRIBE to it is refused);
* *explicit*: every other broker (ActiveMQ, CoilMQ, stompserver...) delivers only to a
  SUBSCRIBE. The engine makes one at the connection's first request, to a name of its
  own under ``/temp-queue/`` (:func:`reply_destination`: ActiveMQ makes it a temporary
  queue of the connection, other brokers a destination nobody else uses) with
  :data:`REPLY_QUEUE` as its id.

Either way the replies arrive with ``subscription`` set to :data:`REPLY_QUEUE`, and the
engine hands each to the request its ``correlation-id`` names (:meth:`Requests.reply`).
``request(..., reply_subscription=...)`` overrides the choice; a :class:`RequestTimeout`
says which way was used (:func:`timed_out`). :func:`reply_address` is the other side:
where a reply to a received message goes.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Generic, Literal, TypeVar, get_args

from stompy._checks import wrong_type
from stompy._core.events import MessageReceived
from stompy._core.frames import Frame
from stompy.errors import ConfigurationError, NoReplyTo, RequestTimeout

__all__ = (
    "REPLY_QUEUE",
    "REPLY_SUBSCRIPTIONS",
    "ReplySubscription",
    "Request",
    "Requests",
    "check_request_headers",
    "explicit_replies",
    "reply_address",
    "reply_destination",
    "reply_route",
    "timed_out",
)

#: The temporary queue a engine's requests name in ``reply-to`` on a broker that
#: delivers the replies implicitly (RabbitMQ), and the subscription id of the replies
#: in either way.
REPLY_QUEUE: Final = "/temp-queue/stompy-replies"
#: How ``request()`` gets its replies: ``"auto"`` (by the broker's ``server`` header),
#: ``"implicit"`` (the broker subscribes the connection itself, as RabbitMQ does), or
#: ``"explicit"`` (the connection SUBSCRIBEs to its reply destination).
ReplySubscription = Literal["auto", "implicit", "explicit"]
REPLY_SUBSCRIPTIONS: Final[tuple[str, ...]] = get_args(ReplySubscription)
#: ``server`` header prefixes (lower case) of the brokers that deliver the replies to a
#: ``reply-to:/temp-queue/...`` on a subscription of their own making.
_IMPLICIT_REPLIES: Final = ("rabbitmq/", "stompy-broker/")
#: The headers :meth:`Engine.request` writes itself.
_REQUEST_HEADERS: Final = ("reply-to", "correlation-id")

log: Final = logging.getLogger("stompy")

#: A transport's message class (see :class:`Engine`).
M = TypeVar("M", bound=MessageReceived)


class Request(Generic[M]):
    """One request waiting for its reply (see :meth:`Engine.request`)."""

    __slots__ = ("correlation_id", "destination", "epoch", "reply", "route")

    def __init__(
        self,
        correlation_id: str,
        destination: object,  # a str: the core checks it after (see ClientProtocol.send)
        epoch: int,
        route: str = "",
    ) -> None:
        self.correlation_id = correlation_id
        self.destination = destination
        #: The connection it was sent on: its reply can only come on that one.
        self.epoch = epoch
        #: How its reply was awaited, in words (for :func:`timed_out`).
        self.route = route
        #: The reply, once it came.
        self.reply: M | None = None


class Requests(Generic[M]):
    """The requests waiting for their reply, by ``correlation-id``, and those that got
    it since the engine's last pump (:meth:`take_replied`)."""

    __slots__ = ("_made", "_waiting", "replied")

    def __init__(self) -> None:
        self._waiting: dict[str, Request[M]] = {}
        self._made = 0
        #: The ``correlation-id`` of each request replied to since the last
        #: :meth:`take_replied` (read it; the engine's pump looks before it takes).
        self.replied: list[str] = []

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def new(self, destination: object, epoch: int, route: str) -> Request[M]:
        """A request to ``destination`` on the connection of ``epoch``, with a fresh
        ``correlation-id``, its replies awaited by ``route`` (in words); it waits until
        :meth:`forget`."""
        self._made += 1
        request: Request[M] = Request(f"stompy-{self._made}", destination, epoch, route)
        self._waiting[request.correlation_id] = request
        return request

    def reply(self, message: M) -> None:
        """``message`` came to :data:`REPLY_QUEUE`: the reply of the request its
        ``correlation-id`` names, kept on it (:attr:`Request.reply`), or else dropped
        (that request timed out, or has its reply already)."""
        correlation_id = message.frame.get("correlation-id")  # (answered(), written out)
        request = self._waiting.get(correlation_id) if correlation_id is not None else None
        if request is None or request.reply is not None:
            log.debug(
                "dropping a reply with correlation-id %r from %r: no request waits for "
                "it (it timed out, or was answered already)",
                correlation_id,
                message.destination,
            )
            return
        request.reply = message
        self.replied.append(request.correlation_id)

    def take_replied(self) -> Sequence[str]:
        """The ``correlation-id`` of each request that got its reply since the last
        call, in order."""
        replied = self.replied
        if not replied:
            return ()
        self.replied = []
        return replied

    def forget(self, request: Request[M]) -> None:
        """The wait for ``request``'s reply is over: a reply that comes later is dropped."""
        self._waiting.pop(request.correlation_id, None)


def check_request_headers(headers: Mapping[str, str] | None) -> None:
    """Raise :class:`ConfigurationError` when ``headers`` sets what a request writes
    itself (``reply-to``, ``correlation-id``)."""
    # In any case: a Reply-To would be sent beside stompy's reply-to (STOMP header names
    # are case-sensitive), and a replier would read one or the other.
    loose: Iterable[object] = headers or ()
    given = [n for n in loose if isinstance(n, str) and n.lower() in _REQUEST_HEADERS]
    if given:
        said = " and ".join(
            name if name.islower() else f"{name.lower()} (as {name!r})" for name in given
        )
        raise ConfigurationError(f"request() writes {said} itself; use send() to set them")


def explicit_replies(server: str | None, asked: str) -> bool:
    """Whether the connection must SUBSCRIBE to its reply destination: ``asked`` (a
    :data:`ReplySubscription`) says so, or with ``"auto"`` the broker of CONNECTED
    ``server`` is none known to subscribe the connection itself."""
    if asked != "auto":
        return asked == "explicit"
    return server is None or not server.lower().startswith(_IMPLICIT_REPLIES)


def reply_destination() -> str:
    """A fresh reply destination for an explicit subscription: a name under
    ``/temp-queue/`` no other connection uses (on a broker without temporary queues,
    two requesters on one name would take each other's replies)."""
    return f"{REPLY_QUEUE}-{secrets.token_hex(6)}"


def reply_route(explicit: bool, reply_to: str, server: str | None, asked: str) -> str:
    """How a request's replies are awaited, in words, for :func:`timed_out`: on a
    SUBSCRIBE to ``reply_to`` (``explicit``) or on the broker's own subscription, and
    why (``asked``, else the broker's ``server`` header)."""
    chosen = "asked for" if asked != "auto" else f"for server {server!r}"
    if explicit:
        return f"its replies were awaited on a SUBSCRIBE to {reply_to} (explicit, {chosen})"
    return (
        f"its replies were awaited on the subscription a broker makes itself for "
        f"reply-to:{reply_to}, as RabbitMQ does (implicit, {chosen}); a broker that does "
        "not needs request(..., reply_subscription='explicit')"
    )


def timed_out(request: Request[M], timeout: float) -> RequestTimeout:
    """The error of ``request``, whose reply did not come within ``timeout`` seconds:
    it says how the replies were awaited, and what to try otherwise."""
    return RequestTimeout(
        f"no reply to the request to {request.destination!r} (correlation-id "
        f"{request.correlation_id!r}) within {timeout} s; {request.route}"
    )


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
    try:
        merged = dict(headers or {})
    except (TypeError, ValueError):
        raise wrong_type("headers", "a mapping of str to str", headers) from None
    correlation_id = frame.get("correlation-id")
    if correlation_id is not None:
        if merged and "correlation-id" not in merged:
            _check_correlation_spelling(merged)
        merged.setdefault("correlation-id", correlation_id)
    return reply_to, merged


def _check_correlation_spelling(names: Iterable[object]) -> None:
    """Refuse a reply's ``Correlation-Id`` (any case but the lower): it would be sent
    beside the correlation-id copied from the request, header names being
    case-sensitive, and the requester would read that one, not the one meant."""
    for name in names:
        if isinstance(name, str) and name.lower() == "correlation-id":
            raise ConfigurationError(
                f"headers: {name!r} would be sent beside the correlation-id reply() copies "
                "from the request: STOMP header names are case-sensitive, and the "
                "requester reads 'correlation-id'; write it so to give your own"
            )

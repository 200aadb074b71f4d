"""The keyword arguments of the public calls, listed once for both clients.

Each ``TypedDict`` here is one call's keywords, the same in the blocking and the async
client. A type checker sees them; a user without one is told at run time too: every
public call refuses a keyword it does not know with a :class:`TypeError` that names it,
as a plain Python function does. Two ways, one rule:

* Calls whose keywords go on as a dict (``Connection`` and ``AsyncConnection`` to
  :class:`~stompy._engine.options.ClientOptions`; ``subscribe``, ``request`` and a message's
  ``reply`` to the engine's calls; the one-shot ``send``/``send_async``) take
  them as ``**options: Unpack[...]`` and pass them through :func:`check` first, against
  the ``TypedDict``'s own keys (so the list and the check cannot differ), with a
  "did you mean" for a near miss.
* The sends (``send``, ``send_many``, a transaction's ``send``), where every
  instruction counts, name their keywords as keyword-only parameters: Python refuses an
  unknown one itself, for nothing (it is cheaper than building the ``**options`` dict).
  ``tests/test_keywords.py`` keeps those signatures equal to :class:`SendOptions`,
  :class:`BatchOptions` and :class:`MessageOptions`, in both clients.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final, Generic, Literal, TypedDict, TypeVar, cast

from stompy._core.events import AckMode, MessageReceived
from stompy._core.parser import FrameLimits
from stompy._engine.options import Overflow, Reconnect, SslArg
from stompy._engine.urls import Endpoint
from stompy.errors import ServerError, StompError

__all__ = (
    "CONNECTION",
    "MESSAGE",
    "ONE_SHOT",
    "REQUEST",
    "SUBSCRIBE",
    "BatchOptions",
    "ConnectionOptions",
    "MessageOptions",
    "OneShotOptions",
    "RequestOptions",
    "SendOptions",
    "SubscribeOptions",
    "check",
    "keys",
    "one_shot",
    "unexpected",
)


class ConnectionOptions(TypedDict, total=False):
    """The keyword arguments of ``Connection`` and ``AsyncConnection``, listed once.

    Defaults and meanings are :class:`ClientOptions`'; both constructors take them as
    ``**options: Unpack[ConnectionOptions]``, so type checkers and IDEs still know
    every name and type. ``max_pending`` bounds each subscription's buffer (and is the
    prefetch asked for with client acks); ``overflow`` says what a full one does
    (``"pause"`` the connection, or ``"fail"`` that subscription). The ``on_*``
    lifecycle hooks are called in order outside the connection's own work: a thread of
    their own (``Connection``), a task of its task group (``AsyncConnection``, which
    awaits coroutine functions); see the "Lifecycle hooks" section of ``docs/api.md``.
    ``tracing=False`` turns OpenTelemetry off for the connection (see
    ``docs/observability.md``; it is on when ``opentelemetry-api`` is installed).
    """

    login: str | None
    passcode: str | None
    host: str | None
    versions: Sequence[str]
    heartbeats: tuple[int, int]
    heartbeat_tolerance: float
    ssl: SslArg
    connect_timeout: float
    receipt_timeout: float
    reconnect: Reconnect | None
    headers: Mapping[str, str] | None
    limits: FrameLimits
    max_pending: int
    overflow: Overflow
    strict: bool
    ws_headers: Mapping[str, str] | None
    on_connected: Callable[[Endpoint], object] | None
    on_reconnected: Callable[[Endpoint], object] | None
    on_disconnected: Callable[[StompError | None], object] | None
    on_error: Callable[[ServerError], object] | None
    on_unrouted: Callable[[MessageReceived], object] | None
    on_callback_error: Callable[[Exception, MessageReceived], object] | None
    tracing: bool


#: A flavour's transaction class (``Transaction`` or ``AsyncTransaction``).
TX = TypeVar("TX")


class MessageOptions(TypedDict, total=False):
    """The keywords of a transaction's ``send()`` and of a message's ``reply()``:
    ``headers``, ``content_type`` (a ``str`` body is sent as UTF-8 with
    ``text/plain;charset=utf-8`` unless told otherwise) and ``receipt`` (return once
    the broker confirmed)."""

    headers: Mapping[str, str] | None
    content_type: str | None
    receipt: bool


class SendOptions(MessageOptions, Generic[TX], total=False):
    """The keywords of a connection's ``send()``: :class:`MessageOptions` and the
    ``transaction`` (a transaction or its id)."""

    transaction: TX | str | None


class BatchOptions(TypedDict, Generic[TX], total=False):
    """The keywords of ``send_many()``: ``receipt`` (on the last message, which confirms
    them all) and ``transaction``."""

    receipt: bool
    transaction: TX | str | None


class SubscribeOptions(TypedDict, total=False):
    """The keywords of ``subscribe()``: ``ack`` mode (``auto`` by default), ``id`` (made
    up if not given), extra SUBSCRIBE ``headers``, ``max_pending`` and ``overflow`` (the
    connection's if not given) and ``receipt`` (return once the broker confirmed)."""

    ack: AckMode
    id: str | None
    headers: Mapping[str, str] | None
    max_pending: int | None
    overflow: Overflow | None
    receipt: bool


class RequestOptions(TypedDict, total=False):
    """The keywords of ``request()``: the request's ``headers`` and ``content_type`` (as
    for ``send()``; ``reply-to`` and ``correlation-id`` are the request's own),
    ``timeout``, the seconds to wait for the reply (30 by default), and
    ``reply_subscription``, how the replies reach the connection: ``"auto"`` (the
    default: by the broker's CONNECTED ``server`` header), ``"implicit"`` (the broker
    subscribes the connection itself, as RabbitMQ does) or ``"explicit"`` (the
    connection subscribes to its reply destination, as ActiveMQ and most brokers need)."""

    headers: Mapping[str, str] | None
    content_type: str | None
    timeout: float
    reply_subscription: Literal["auto", "implicit", "explicit"]


class OneShotOptions(TypedDict, total=False):
    """The keywords of :func:`stompy.send` and :func:`stompy.send_async`: the message's
    ``headers`` and ``content_type``, and the connection's options that a one-message
    script needs."""

    headers: Mapping[str, str] | None
    content_type: str | None
    login: str | None
    passcode: str | None
    host: str | None
    ssl: SslArg
    connect_timeout: float
    receipt_timeout: float
    ws_headers: Mapping[str, str] | None
    tracing: bool


def keys(options: type[Mapping[str, object]]) -> frozenset[str]:
    """The keywords a ``TypedDict`` lists (its bases' too)."""
    return frozenset(options.__annotations__)


#: The keywords of the calls that :func:`check` them.
CONNECTION: Final = keys(ConnectionOptions)
MESSAGE: Final = keys(MessageOptions)
REQUEST: Final = keys(RequestOptions)
SUBSCRIBE: Final = keys(SubscribeOptions)
ONE_SHOT: Final = keys(OneShotOptions)


#: Keywords of other STOMP clients (stomp.py's and others') and what stompy calls them:
#: told as "did you mean" where the keyword is among those of the call, since no
#: spelling alike finds them (``password`` finds ``passcode``; ``username``, nothing).
_OTHER_NAMES: Final = {
    "username": "login",
    "user": "login",
    "vhost": "host",
    "virtual_host": "host",
    "tls": "ssl",
    "use_ssl": "ssl",
    "ssl_context": "ssl",
    "keepalive": "heartbeats",
    "prefetch": "max_pending",
    "prefetch_count": "max_pending",
}
#: Keywords of no call that takes ``**options``, with what to do instead: a name spelled
#: alike is not what was meant (``transaction``: "did you mean 'tracing'?").
_ELSEWHERE: Final = {
    "transaction": "a transaction is begun with the connection's transaction(), and a "
    "message sent in it with the transaction's send() or send(..., transaction=)",
}


def _meant(name: str, known: Collection[str]) -> str | None:
    """The keyword of ``known`` that ``name`` most likely meant, if any."""
    other = _OTHER_NAMES.get(name)
    if other is not None and other in known:
        return other
    if name in _ELSEWHERE:
        return None
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return near[0] if near else None


def unexpected(call: str, name: str, known: Collection[str]) -> TypeError:
    """The :class:`TypeError` a Python function raises for the keyword ``name`` it does
    not take, ``call`` named as the user wrote it, with the nearest of ``known`` when one
    is close (as Python 3.13's own message has), or another client's name for it, or
    what to do instead."""
    message = f"{call}() got an unexpected keyword argument {name!r}"
    meant = _meant(name, known)
    if meant is not None:
        message += f". Did you mean {meant!r}?"
    elif name in _ELSEWHERE:
        message += f": {_ELSEWHERE[name]}"
    return TypeError(message)


def check(options: Mapping[str, object], known: frozenset[str], call: str) -> None:
    """Refuse ``options`` (a call's ``**options``) if one of them is not in ``known``,
    with :func:`unexpected`'s :class:`TypeError` naming the first; ``call`` is the public
    call's name (``"Connection.subscribe"``)."""
    if not known.issuperset(options):
        name = next(name for name in options if name not in known)
        raise unexpected(call, name, known)


def one_shot(
    options: OneShotOptions, call: str = "send"
) -> tuple[ConnectionOptions, MessageOptions]:
    """A one-shot send's keywords split: the connection's, and the message's (its
    ``headers`` and ``content_type``; a one-shot send always asks for a receipt).
    Raises :func:`check`'s :class:`TypeError` for a keyword a one-shot send does not take
    (``call`` is its name), saying what a connection's keyword or ``receipt``, or a near
    miss of one, would need."""
    if not ONE_SHOT.issuperset(options):
        raise _not_one_shot(call, next(name for name in options if name not in ONE_SHOT))
    message: MessageOptions = {
        "headers": options.get("headers"),
        "content_type": options.get("content_type"),
        "receipt": True,
    }
    connection = {k: v for k, v in options.items() if k not in ("headers", "content_type")}
    return cast(ConnectionOptions, connection), message


#: Whom a one-shot send's unknown keyword is compared with for a "did you mean": its
#: own keywords, a connection's (which it does not all take) and ``receipt``.
_NEAR_ONE_SHOT: Final = sorted(ONE_SHOT | CONNECTION | {"receipt"})


def _not_one_shot(call: str, name: str) -> TypeError:
    """:func:`unexpected`'s error for the keyword ``name`` of a one-shot send, which
    also says what a connection's keyword or ``receipt`` would need (a near miss of one
    is told as such, as :class:`Connection` tells it)."""
    message = f"{call}() got an unexpected keyword argument {name!r}"
    always = "a one-shot send always waits for the broker's receipt"
    if name == "receipt":
        # Not "did you mean 'receipt_timeout'?": whoever wrote it wanted the receipt.
        return TypeError(f"{message}: {always}")
    meant = name if name in CONNECTION else _meant(name, _NEAR_ONE_SHOT)
    if meant is None:
        if name in _ELSEWHERE:
            message += f": a one-shot send sends outside transactions; {_ELSEWHERE[name]}"
        return TypeError(message)
    if meant != name:
        message += f". Did you mean {meant!r}?"
    if meant == "receipt":
        message += f" ({always})"
    elif meant not in ONE_SHOT:
        message += (
            f" ({meant} is an option of Connection that a one-shot send does not take: "
            f"send with a Connection(url, {meant}=...))"
        )
    return TypeError(message)

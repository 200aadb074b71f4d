"""The keyword arguments of the public calls, listed once for both clients.

``Connection`` and ``AsyncConnection`` (and their ``send``, ``send_many``,
``subscribe`` and ``request``, a message's ``reply``, and the one-shot
``send``/``send_async``) take these as
``**options: Unpack[...]``: one list to keep, and type checkers and IDEs still know
every name and type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypedDict, TypeVar, cast

from stompy._codec import FrameLimits
from stompy._events import AckMode, MessageReceived
from stompy._options import Overflow, Reconnect, SslArg
from stompy._urls import Endpoint
from stompy.errors import ServerError, StompError

__all__ = (
    "BatchOptions",
    "ConnectionOptions",
    "MessageOptions",
    "OneShotOptions",
    "RequestOptions",
    "SendOptions",
    "SubscribeOptions",
    "one_shot",
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
    for ``send()``; ``reply-to`` and ``correlation-id`` are the request's own), and
    ``timeout``, the seconds to wait for the reply (30 by default)."""

    headers: Mapping[str, str] | None
    content_type: str | None
    timeout: float


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


def one_shot(options: OneShotOptions) -> tuple[ConnectionOptions, MessageOptions]:
    """A one-shot send's keywords split: the connection's, and the message's (its
    ``headers`` and ``content_type``; a one-shot send always asks for a receipt)."""
    message: MessageOptions = {
        "headers": options.get("headers"),
        "content_type": options.get("content_type"),
        "receipt": True,
    }
    connection = {k: v for k, v in options.items() if k not in ("headers", "content_type")}
    return cast(ConnectionOptions, connection), message

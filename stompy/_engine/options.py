"""A client's options: the constructors' keywords, the reconnect policy, and what
they decide (the CONNECT frame, TLS, the WebSocket upgrade).

Everything here is free of I/O, and the same for the blocking and the async client.
"""

from __future__ import annotations

import random
import re
import ssl as _ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import TYPE_CHECKING, Final, Literal, get_args

from stompy._checks import (
    bad_value,
    check_choice,
    check_flag,
    check_heartbeats,
    check_integer,
    check_number,
    check_seconds,
    check_type,
    check_versions,
    wrong_type,
)
from stompy._core.events import MessageReceived
from stompy._core.frames import VERSIONS
from stompy._core.heartbeat import MAX_INTERVAL
from stompy._core.parser import DEFAULT_LIMITS, FrameLimits
from stompy._core.protocol import ClientProtocol
from stompy._engine.urls import Endpoint, parse_urls
from stompy.errors import (
    ConfigurationError,
    ConnectFailed,
    ServerError,
    StompError,
)

if TYPE_CHECKING:
    from stompy._engine.websocket import WebSocket

__all__ = ("ClientOptions", "Overflow", "Reconnect", "check_overflow")

_HTTP_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HTTP_VALUE: Final = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _check_http_header(name: object, value: object) -> None:
    """HTTP allows a token as a header name and no control characters in a value."""
    if not isinstance(name, str) or not isinstance(value, str):
        shown = type(value).__name__
        raise TypeError(f"ws_headers: expected a mapping of str to str, got {name!r}: {shown}")
    # The value is not shown: it may well be a secret (Authorization, Cookie).
    if not _HTTP_TOKEN.fullmatch(name):
        why = "a name must be an HTTP token"
    elif not _HTTP_VALUE.fullmatch(value):
        why = "its value holds a control character"
    else:
        return
    raise ConfigurationError(f"ws_headers: invalid WebSocket handshake header {name!r}: {why}")


#: The ``host`` header when neither the ``host`` argument nor the URL path names one.
#: STOMP lets clients choose "any name of their choosing"; ``/`` is RabbitMQ's default
#: virtual host, and ActiveMQ and the in-process broker accept any value.
DEFAULT_VHOST: Final = "/"


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How to reconnect after a connection is lost (off unless given to a connection).

    Addresses are tried in turn; between rounds the delay grows from
    ``initial_delay`` by ``multiplier`` up to ``max_delay``, with ``jitter`` (a
    fraction) of randomness so that many clients do not return at once.
    ``max_attempts`` bounds the attempts per outage (``None``: no bound).
    ``send_timeout`` is how long a send waits for the connection to come back.

    A value it cannot use is a :class:`~stompy.errors.ConfigurationError` naming the
    field (a wrong type a :class:`TypeError`): seconds are from 0 to 1,000,000,
    ``multiplier`` is at least 1, ``jitter`` from 0 to 1, ``max_attempts`` at least 1.
    """

    max_attempts: int | None = None
    initial_delay: float = 0.1
    max_delay: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.2
    send_timeout: float = 30.0

    def __post_init__(self) -> None:
        # TypeError for a wrong type, ConfigurationError for a value (see _checks).
        if self.max_attempts is not None:
            check_integer("max_attempts", self.max_attempts, 1)
        check_seconds("initial_delay", self.initial_delay)
        check_seconds("max_delay", self.max_delay)
        if self.max_delay < self.initial_delay:
            raise ConfigurationError(
                f"max_delay: must be at least initial_delay ({self.initial_delay!r}), "
                f"got {self.max_delay!r}"
            )
        check_number("multiplier", self.multiplier, 1.0)
        check_number("jitter", self.jitter, 0.0, 1.0)
        check_seconds("send_timeout", self.send_timeout)

    def delays(self, uniform: Callable[[float, float], float] = random.uniform) -> Iterator[float]:
        """The delay before each attempt: 0 for the first, then growing with jitter
        (``uniform(a, b)``, a random number between ``a`` and ``b``).

        A ``uniform`` that is not callable is a :class:`TypeError` here, not at the
        second attempt.
        """
        if not callable(uniform):
            raise wrong_type("uniform", "a function uniform(a, b) -> float", uniform)
        return self._delays(uniform)

    def _delays(self, uniform: Callable[[float, float], float]) -> Iterator[float]:
        delay = self.initial_delay
        attempt = 0
        while self.max_attempts is None or attempt < self.max_attempts:
            if attempt == 0:
                yield 0.0
            else:
                spread = delay * self.jitter
                yield max(0.0, delay + uniform(-spread, spread))
                delay = min(self.max_delay, delay * self.multiplier)
            attempt += 1


SslArg = bool | _ssl.SSLContext | None

#: What a subscription does when its consumer falls ``max_pending`` messages behind:
#: ``"pause"`` stops reading the connection until the consumer catches up (nothing is
#: lost; every other subscription, receipt and ERROR waits too), ``"fail"`` ends that
#: subscription with :class:`~stompy.errors.SubscriptionOverflow` and reading goes on.
Overflow = Literal["pause", "fail"]


def check_overflow(overflow: object) -> None:
    """Raise :class:`ConfigurationError` unless ``overflow`` is an :data:`Overflow`
    (:class:`TypeError` unless it is a str)."""
    check_choice("overflow", overflow, get_args(Overflow))


#: The lifecycle hooks among the options.
_HOOKS: Final = ("on_connected", "on_reconnected", "on_disconnected", "on_error", "on_unrouted")


@dataclass(eq=False, repr=False)
class ClientOptions:
    """The normalised arguments of ``Connection`` / ``AsyncConnection``.

    A dataclass so that one list declares the constructor's keywords, their defaults
    and the attributes they become; :meth:`__post_init__` checks and normalises them.
    ``urls`` becomes :attr:`endpoints`; read the passcode with :meth:`credentials`
    (the URL's is the fallback).
    """

    urls: InitVar[str | Endpoint | Sequence[str | Endpoint]]
    _: KW_ONLY
    login: str | None = None
    passcode: str | None = None
    host: str | None = None
    versions: Sequence[str] = VERSIONS
    heartbeats: tuple[int, int] = (0, 0)
    heartbeat_tolerance: float = 2.0
    ssl: SslArg = None
    connect_timeout: float = 10.0
    receipt_timeout: float = 10.0
    reconnect: Reconnect | None = None
    #: Extra CONNECT headers (copied).
    headers: Mapping[str, str] | None = None
    limits: FrameLimits = DEFAULT_LIMITS
    max_pending: int = 1000
    overflow: Overflow = "pause"
    strict: bool = True
    #: Extra HTTP headers for the WebSocket handshake (cookies, ``Authorization``; copied).
    ws_headers: Mapping[str, str] | None = None
    #: The lifecycle hooks (see :class:`~stompy._engine.notices.Notice`).
    on_connected: Callable[[Endpoint], object] | None = None
    on_reconnected: Callable[[Endpoint], object] | None = None
    on_disconnected: Callable[[StompError | None], object] | None = None
    on_error: Callable[[ServerError], object] | None = None
    on_unrouted: Callable[[MessageReceived], object] | None = None
    #: Called as ``hook(exception, message)`` when an ``on_message`` callback raised.
    on_callback_error: Callable[[Exception, MessageReceived], object] | None = None
    #: Whether the connection records OpenTelemetry spans and metrics (when
    #: ``opentelemetry-api`` is installed and the application installed an SDK).
    tracing: bool = True
    #: The addresses to try, in turn, from ``urls``.
    endpoints: tuple[Endpoint, ...] = field(init=False)

    def __post_init__(self, urls: str | Endpoint | Sequence[str | Endpoint]) -> None:
        # Every option checked now, not at connect time: a TypeError for a wrong type, a
        # ConfigurationError for a value, each naming the option (see _checks).
        if not isinstance(urls, (str, Endpoint, Sequence)):
            raise wrong_type("url_or_urls", "a URL, an Endpoint or a sequence of them", urls)
        self.endpoints = parse_urls(urls)
        for name in ("login", "passcode", "host"):
            if getattr(self, name) is not None:
                check_type(name, getattr(self, name), str, "a str or None")
        if self.host == "":  # a host header that names no virtual host: refused by brokers
            raise bad_value("host", "must name a virtual host (None: the URL's path, else /)", "")
        self.versions = check_versions("versions", self.versions, VERSIONS)
        self.heartbeats = check_heartbeats("heartbeats", self.heartbeats, MAX_INTERVAL)
        check_number("heartbeat_tolerance", self.heartbeat_tolerance, 1.0)
        check_type(
            "ssl", self.ssl, (bool, _ssl.SSLContext, type(None)), "a bool, an SSLContext or None"
        )
        if self.ssl is False:
            for endpoint in self.endpoints:
                if endpoint.tls:
                    raise bad_value("ssl", f"cannot be False: {endpoint} needs TLS", False)
        check_seconds("connect_timeout", self.connect_timeout, positive=True)
        check_seconds("receipt_timeout", self.receipt_timeout, positive=True)
        check_type("reconnect", self.reconnect, (Reconnect, type(None)), "a Reconnect or None")
        check_type("limits", self.limits, FrameLimits, "a FrameLimits")
        check_integer("max_pending", self.max_pending, 1)
        check_overflow(self.overflow)
        check_flag("strict", self.strict)
        check_flag("tracing", self.tracing)
        for name in _HOOKS:
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise wrong_type(name, "a callable or None", hook)
        check_type("headers", self.headers, (Mapping, type(None)), "a mapping of str to str")
        self.headers = dict(self.headers or {})
        check_type("ws_headers", self.ws_headers, (Mapping, type(None)), "a mapping of str to str")
        self.ws_headers = dict(self.ws_headers or {})
        for name, value in self.ws_headers.items():
            _check_http_header(name, value)
        # The CONNECT headers are checked by the core as it writes the frame.
        self.start(self.endpoints[0])

    @property
    def hooked(self) -> bool:
        """Whether any lifecycle hook is set (a transport then runs them)."""
        return any(
            hook is not None
            for hook in (
                self.on_connected,
                self.on_reconnected,
                self.on_disconnected,
                self.on_error,
                self.on_unrouted,
            )
        )

    def __repr__(self) -> str:
        urls = ", ".join(str(e) for e in self.endpoints)
        return f"ClientOptions({urls!r}, login={self.login!r}, host={self.host!r})"

    def new_protocol(
        self, message_class: type[MessageReceived] = MessageReceived
    ) -> ClientProtocol:
        return ClientProtocol(
            versions=self.versions,
            heartbeats=self.heartbeats,
            heartbeat_tolerance=self.heartbeat_tolerance,
            limits=self.limits,
            strict=self.strict,
            message_class=message_class,
        )

    def credentials(self, endpoint: Endpoint) -> tuple[str | None, str | None]:
        """Login and passcode: the arguments win over the URL."""
        login = self.login if self.login is not None else endpoint.login
        passcode = self.passcode if self.passcode is not None else endpoint.passcode
        return login, passcode

    def vhost(self, endpoint: Endpoint) -> str:
        """The ``host`` header: the ``host`` argument, else the URL path, else ``/``."""
        if self.host is not None:
            return self.host
        return endpoint.vhost if endpoint.vhost is not None else DEFAULT_VHOST

    def start(
        self, endpoint: Endpoint, message_class: type[MessageReceived] = MessageReceived
    ) -> ClientProtocol:
        """A fresh protocol with the CONNECT frame for ``endpoint`` queued, making
        ``message_class`` of each MESSAGE."""
        proto = self.new_protocol(message_class)
        login, passcode = self.credentials(endpoint)
        proto.connect(self.vhost(endpoint), login=login, passcode=passcode, headers=self.headers)
        return proto

    def websocket(self, endpoint: Endpoint) -> tuple[WebSocket, bytes]:
        """The client side of a WebSocket to ``endpoint`` and its upgrade request.

        It offers the subprotocols of the allowed STOMP versions. Raises
        :class:`ConnectFailed` when wsproto (the ``websocket`` extra) is missing.
        """
        try:
            from stompy._engine.websocket import WebSocket, subprotocols_for
        except ImportError as exc:
            raise ConnectFailed(str(exc)) from None
        return WebSocket.client(
            endpoint.host,
            endpoint.port,
            endpoint.path,
            tls=endpoint.tls,
            subprotocols=subprotocols_for(self.versions),
            headers=self.ws_headers,
        )

    def ssl_context(self, endpoint: Endpoint) -> _ssl.SSLContext | None:
        """The TLS context for ``endpoint``, or ``None`` for plain TCP.

        ``stomp+ssl://`` and ``wss://`` always use TLS; ``ssl=True`` or a context turns
        it on for the others. Certificates are verified unless the context says not.
        """
        if isinstance(self.ssl, _ssl.SSLContext):
            return self.ssl
        if self.ssl or endpoint.tls:
            if self.ssl is False:
                raise bad_value("ssl", f"cannot be False: {endpoint} needs TLS", False)
            return _ssl.create_default_context()
        return None

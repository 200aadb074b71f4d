"""Establishing a connection: the handshake, and the rounds of attempts across addresses.

A :class:`Handshake` takes one connection from its first bytes (the WebSocket upgrade,
if any, and CONNECT) to CONNECTED; :class:`Attempts` says which address to try next,
after what delay, and which error ends the attempts. The transport does the I/O; the
engine makes an established connection its current one (:meth:`Engine.install`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from stompy._core.events import Connected, MessageReceived
from stompy._engine.failures import error_for_event
from stompy._engine.options import DEFAULT_VHOST, ClientOptions
from stompy._engine.outgoing import take_output
from stompy._engine.urls import Endpoint
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    RemoteProtocolError,
    ServerError,
    StompError,
)

if TYPE_CHECKING:
    from stompy._engine.websocket import WebSocket

__all__ = ("Attempts", "Handshake", "refused")

log: Final = logging.getLogger("stompy")


class Handshake:
    """Establishing one connection: the WebSocket upgrade (if any), CONNECT, CONNECTED.

    The transport writes :attr:`first`, then hands every chunk it reads to
    :meth:`receive` and writes what it returns, until :attr:`connected` is set. Its
    protocol makes a ``message_class`` of each MESSAGE.
    """

    def __init__(
        self,
        options: ClientOptions,
        endpoint: Endpoint,
        message_class: type[MessageReceived] = MessageReceived,
    ) -> None:
        self.endpoint = endpoint
        self.proto = options.start(endpoint, message_class)
        #: The CONNECT's ``host`` header, which a refusal names.
        self.host = options.vhost(endpoint)
        self.ws: WebSocket | None = None
        request = b""
        if endpoint.websocket:
            self.ws, request = options.websocket(endpoint)
        #: The first bytes to write: CONNECT, or over WebSocket the upgrade request
        #: (CONNECT then goes once the server accepted it).
        self.first = request or take_output(self.proto, None, None, endpoint)
        self.connected: Connected | None = None

    def receive(self, data: bytes, now: float) -> bytes:
        """Feed what was read (``b""`` at end of stream); return the bytes to write.

        Raises :class:`ServerError` when the broker refuses, :class:`ConnectFailed` when
        the connection ends first, and the parser's :class:`ProtocolError`.
        """
        proto, ws, endpoint = self.proto, self.ws, self.endpoint
        reply = b""
        ended: StompError | None = None
        if not data:
            proto.receive_eof()
        elif ws is None:
            proto.receive_data(data, now)
        else:
            was_open = ws.open
            got = ws.receive(data)
            reply = got.reply
            if ws.open and not was_open:
                reply += take_output(proto, ws, None, endpoint)
            proto.receive_data(got.data, now)
            ended = got.ended
        event = proto.next_event()
        while event is not None:
            if isinstance(event, Connected):
                proto.start_heartbeats(now)
                log.info("connected to %s (STOMP %s)", endpoint, event.version)
                self.connected = event
                return reply
            failure = error_for_event(event)
            if isinstance(failure, ServerError):
                raise refused(failure, self.host)
            if failure is not None:
                raise ConnectFailed(f"{endpoint} closed the connection during CONNECT")
            event = proto.next_event()
        if ended is not None:
            if isinstance(ended, ConnectionLost):
                raise ConnectFailed(f"{ended} during CONNECT")
            raise ended
        return reply


def refused(failure: ServerError, host: str) -> ServerError:
    """``failure``, the broker's ERROR in answer to CONNECT, naming the ``host`` header
    sent and what sets it: a broker may refuse a virtual host it does not know (CoilMQ
    takes only its machine's name with STOMP 1.2, RabbitMQ only its vhosts)."""
    return ServerError(
        failure.message,
        failure.frame,
        note=(
            f"the broker refused the CONNECT, which sent host:{host!r}: the host option "
            f"sets it, else the URL's path, else {DEFAULT_VHOST!r}"
        ),
    )


class Attempts:
    """The rounds of attempts to establish a connection: which address next, after
    what delay, and which error ends them.

    Iterating gives ``(delay, endpoint)``: each round tries every address in turn, the
    round's delay before its first. For :meth:`Engine.connect_attempts` a refusal
    (:class:`ServerError`) is final; a reconnect tries on.
    """

    def __init__(self, endpoints: tuple[Endpoint, ...], delays: Iterator[float], first: bool):
        self._endpoints = endpoints
        self._delays = delays
        self._first = first
        self._errors: list[str] = []
        self.last: StompError | None = None

    def __iter__(self) -> Iterator[tuple[float, Endpoint]]:
        for delay in self._delays:
            self._errors = []
            for i, endpoint in enumerate(self._endpoints):
                yield (delay if i == 0 else 0.0), endpoint
            self.last = ConnectFailed("; ".join(self._errors))  # each names its address

    def failed(self, endpoint: Endpoint, error: StompError) -> None:
        """The attempt at ``endpoint`` failed with ``error``; raises it if that is final."""
        if self._first and not isinstance(error, (ConnectFailed, RemoteProtocolError)):
            raise error
        # The address once: most errors name it already ("cannot connect to X: why").
        reason = str(error).removeprefix(f"cannot connect to {endpoint}: ")
        log.info("could not connect to %s: %s", endpoint, reason)
        self._errors.append(str(error))

    def error(self) -> StompError:
        """Why every attempt failed: the last round's errors."""
        return self.last if self.last is not None else ConnectFailed("no address to try")

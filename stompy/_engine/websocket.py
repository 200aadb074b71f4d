"""STOMP over WebSocket: one sans-IO adapter over wsproto, for the clients and the broker.

Theory of operation
-------------------
:class:`WebSocket` wraps a ``wsproto.WSConnection`` and speaks in STOMP terms. Bytes
read from the socket go in through :meth:`WebSocket.receive`, which returns a
:class:`Received`: the STOMP bytes the messages carried, the bytes to write back (the
handshake answer, pongs, the reply to a close) and, when the WebSocket ended, the
stompy error that says why. STOMP frames go out through :meth:`WebSocket.send_frames`,
one frame (or heart-beat EOL) per binary message, as STOMP-over-WebSocket servers
expect.

Received messages are a byte stream to STOMP: a frame may be split across messages
or several may be packed into one, in text or binary messages alike. wsproto hands
payload over as it arrives and never reassembles a message, so nothing is buffered
here beyond one read; the STOMP parser, fed incrementally, bounds each frame
(:class:`~stompy.FrameLimits`), and control frames are at most 125 bytes.

The blocking and the anyio clients call the adapter from their pump loops (framing is
one step between the socket and the core); the broker serves it as an anyio byte
stream, :class:`WebSocketStream`. Importing this module needs wsproto (the
``websocket`` extra); nothing else in stompy imports it until a WebSocket is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc

from stompy._core.frames import V10, V11, V12
from stompy.errors import (
    ConnectFailed,
    RemoteProtocolError,
    StompError,
    WebSocketClosed,
)

try:
    from wsproto import ConnectionType, WSConnection
    from wsproto.connection import ConnectionState
    from wsproto.events import (
        AcceptConnection,
        BytesMessage,
        CloseConnection,
        Ping,
        RejectConnection,
        Request,
        TextMessage,
    )
    from wsproto.utilities import LocalProtocolError as _WsLocalError
    from wsproto.utilities import RemoteProtocolError as _WsRemoteError
except ImportError as exc:  # pragma: no cover - the extra is installed for the tests
    raise ImportError(
        "STOMP over WebSocket needs wsproto: pip install 'stompy-client[websocket]'"
    ) from exc

__all__ = (
    "SUBPROTOCOLS",
    "Received",
    "UpgradeRequest",
    "WebSocket",
    "WebSocketClosed",
    "WebSocketStream",
    "subprotocols_for",
)

#: The WebSocket subprotocol of each STOMP version, as registered with IANA.
SUBPROTOCOLS: Final = {V12: "v12.stomp", V11: "v11.stomp", V10: "v10.stomp"}
#: "1000 indicates a normal closure" (RFC 6455, 7.4.1).
NORMAL_CLOSURE: Final = 1000
#: "1007 indicates that an endpoint is terminating the connection because it has
#: received data within a message that was not consistent with the type of the message
#: (e.g., non-UTF-8 [RFC3629] data within a text message)" (RFC 6455, 7.4.1).
_INVALID_PAYLOAD: Final = 1007
_TEXT_HINT: Final = (
    " (a text message must be UTF-8: a binary body needs a binary message; RabbitMQ"
    " sends them with web_stomp.ws_frame = binary)"
)
_DEFAULT_PORTS: Final = {False: 80, True: 443}
_HTTP_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HTTP_VALUE: Final = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def subprotocols_for(versions: Iterable[str]) -> list[str]:
    """The subprotocols for ``versions``, highest first (the order of preference)."""
    wanted = set(versions)
    return [name for version, name in SUBPROTOCOLS.items() if version in wanted]


@dataclass(frozen=True, slots=True)
class UpgradeRequest:
    """The client's upgrade request, as the server side saw it."""

    host: str
    #: The request target: path and query.
    target: str
    #: Headers other than the WebSocket ones, lower-cased names, in order.
    headers: tuple[tuple[str, str], ...]
    subprotocols: tuple[str, ...]

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Received:
    """What one call to :meth:`WebSocket.receive` produced."""

    #: STOMP bytes carried by the messages, in order (frames may be partial).
    data: bytes = b""
    #: Bytes to write to the peer now: handshake answer, pongs, reply to a close.
    reply: bytes = b""
    #: Why the WebSocket ended, if it did: :class:`WebSocketClosed` for a close from
    #: the peer, :class:`RemoteProtocolError` for bad WebSocket data,
    #: :class:`ConnectFailed` for a refused handshake. Raise it once :attr:`data` has
    #: been handled.
    ended: StompError | None = None


class WebSocket:
    """One WebSocket connection, client or server side, with no I/O.

    Create a client with :meth:`client` (it returns the handshake request to write)
    and a server with :meth:`server`. Errors from wsproto never escape: the peer's
    mistakes come back as :attr:`Received.ended`.
    """

    def __init__(self, *, client: bool, subprotocols: Sequence[str]) -> None:
        self._conn = WSConnection(ConnectionType.CLIENT if client else ConnectionType.SERVER)
        self.is_client = client
        #: The client's offer, or the server's supported subprotocols (preferred first).
        self.subprotocols = tuple(subprotocols)
        #: Whether the handshake completed (messages may flow).
        self.open = False
        #: The subprotocol agreed on in the handshake, if any.
        self.subprotocol: str | None = None
        #: Server side: the client's upgrade request, once received.
        self.request: UpgradeRequest | None = None
        self._peer = "the server" if client else "the client"

    @classmethod
    def client(
        cls,
        host: str,
        port: int,
        path: str,
        *,
        tls: bool,
        subprotocols: Sequence[str],
        headers: Mapping[str, str] | None = None,
    ) -> tuple[WebSocket, bytes]:
        """A client and the upgrade request to write first.

        ``headers`` are extra HTTP headers for the request (cookies, ``Authorization``,
        ``Origin``...). Raises :class:`ValueError` for a header that cannot be sent.
        """
        ws = cls(client=True, subprotocols=subprotocols)
        shown = f"[{host}]" if ":" in host else host
        if port != _DEFAULT_PORTS[tls]:
            shown = f"{shown}:{port}"
        extra: list[tuple[bytes, bytes]] = []
        for name, value in (headers or {}).items():
            if not _HTTP_TOKEN.fullmatch(name) or not _HTTP_VALUE.fullmatch(value):
                raise ValueError(f"invalid WebSocket handshake header {name!r}")
            extra.append((name.encode("latin-1"), value.encode("latin-1")))
        request = Request(
            host=shown, target=path or "/", extra_headers=extra, subprotocols=list(subprotocols)
        )
        return ws, ws._conn.send(request)

    @classmethod
    def server(cls, subprotocols: Sequence[str] = tuple(SUBPROTOCOLS.values())) -> WebSocket:
        """A server side that accepts any upgrade request.

        Of the subprotocols the client offers it picks the first of ``subprotocols``;
        a client that offers none is accepted without one.
        """
        return cls(client=False, subprotocols=subprotocols)

    @property
    def closing(self) -> bool:
        """A close frame was sent or received: no more messages can be sent."""
        return self._conn.state not in (ConnectionState.CONNECTING, ConnectionState.OPEN)

    # -- receiving ---------------------------------------------------------------------

    def receive(self, data: bytes) -> Received:
        """Take bytes read from the socket; see :class:`Received` for what comes back."""
        conn = self._conn
        if not data:
            return Received()  # an EOF is the transport's to report, not a message
        try:
            conn.receive_data(data)
        except _WsLocalError:
            return Received()  # after the close handshake, what follows is noise
        except _WsRemoteError as exc:
            return self._refuse(exc)
        stomp = bytearray()
        reply = bytearray()
        ended: StompError | None = None
        try:
            for event in conn.events():
                if isinstance(event, BytesMessage):
                    stomp += event.data
                elif isinstance(event, TextMessage):
                    stomp += event.data.encode("utf-8")
                elif isinstance(event, Ping):
                    reply += conn.send(event.response())
                elif isinstance(event, CloseConnection):
                    ended = self._closed(event, reply)
                    break
                elif isinstance(event, AcceptConnection):
                    self.open = True
                    self.subprotocol = event.subprotocol
                elif isinstance(event, RejectConnection):
                    ended = ConnectFailed(
                        f"{self._peer} refused the WebSocket handshake: HTTP {event.status_code}"
                    )
                    break
                elif isinstance(event, Request):
                    reply += self._accept(event)
                # Pong and RejectData: nothing to do.
        except _WsRemoteError as exc:
            refused = self._refuse(exc)
            return Received(bytes(stomp), bytes(reply) + refused.reply, refused.ended)
        return Received(bytes(stomp), bytes(reply), ended)

    def _closed(self, event: CloseConnection, reply: bytearray) -> StompError:
        state = self._conn.state
        reason = event.reason or ""
        if state is ConnectionState.REMOTE_CLOSING:
            # "If an endpoint receives a Close frame and did not previously send a Close
            # frame, the endpoint MUST send a Close frame in response" (RFC 6455, 5.5.1)
            reply += self._conn.send(event.response())
            return WebSocketClosed(event.code, reason, self._peer)
        if state is ConnectionState.CLOSED:
            return WebSocketClosed(event.code, reason, self._peer)  # the answer to ours
        # The state did not move: wsproto found the peer's data invalid and reports it
        # as a close of its own making. Tell the peer, with the code it chose.
        if state is ConnectionState.OPEN:
            reply += self._conn.send(CloseConnection(event.code, reason))
        if event.code == _INVALID_PAYLOAD:
            # "the endpoint MUST _Fail the WebSocket Connection_" (RFC 6455, 8.1)
            reason += _TEXT_HINT
        return RemoteProtocolError(f"bad WebSocket data from {self._peer}: {reason}")

    def _accept(self, event: Request) -> bytes:
        self.request = UpgradeRequest(
            event.host,
            event.target,
            tuple(
                (bytes(k).decode("latin-1").lower(), bytes(v).decode("latin-1"))
                for k, v in event.extra_headers
            ),
            tuple(event.subprotocols),
        )
        chosen = next((p for p in self.subprotocols if p in event.subprotocols), None)
        self.open = True
        self.subprotocol = chosen
        return self._conn.send(AcceptConnection(subprotocol=chosen))

    def _refuse(self, exc: _WsRemoteError) -> Received:
        """A handshake wsproto rejected (bad HTTP, or a subprotocol we did not offer)."""
        reply = b""
        if not self.is_client and isinstance(exc.event_hint, RejectConnection):
            try:
                reply = self._conn.send(exc.event_hint)
            except (_WsLocalError, _WsRemoteError):
                reply = b""
        return Received(b"", reply, RemoteProtocolError(f"bad WebSocket handshake: {exc}"))

    # -- sending -----------------------------------------------------------------------

    def send_frames(self, frames: Iterable[bytes]) -> bytes:
        """The wire bytes for ``frames``, one binary message each.

        Returns ``b""`` once the WebSocket is closing: the connection is ending and
        the frames could not be delivered anyway.
        """
        if not self.open or self.closing:
            return b""
        send = self._conn.send
        return b"".join([send(BytesMessage(data=frame)) for frame in frames])

    def ping(self, payload: bytes = b"") -> bytes:
        """The bytes of a ping (answered by a pong)."""
        if not self.open or self.closing:
            return b""
        return self._conn.send(Ping(payload=payload))

    def close(self, code: int = NORMAL_CLOSURE, reason: str = "") -> bytes:
        """The bytes of a close frame, or ``b""`` if one was already sent or the
        handshake never completed."""
        if not self.open or self._conn.state not in (
            ConnectionState.OPEN,
            ConnectionState.REMOTE_CLOSING,
        ):
            return b""
        return self._conn.send(CloseConnection(code=code, reason=reason or None))


_STREAM_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class WebSocketStream(anyio.abc.ByteStream):
    """A WebSocket (server side) presented as an anyio byte stream of STOMP bytes.

    What the broker serves: ``receive()`` returns the STOMP bytes the client sent
    (pongs and the close reply are written on the way), ``send(data)`` writes ``data``
    as one message, :meth:`send_frames` one message per frame, and ``send_eof()``
    starts the close handshake. Every write goes through one lock, since the reader
    answers pings while the writer writes.
    """

    def __init__(self, stream: anyio.abc.ByteStream, ws: WebSocket, pending: bytes = b"") -> None:
        self._stream = stream
        self.ws = ws
        self._pending = pending
        self._ended: StompError | None = None
        self._lock = anyio.Lock()

    @classmethod
    async def accept(
        cls,
        stream: anyio.abc.ByteStream,
        subprotocols: Sequence[str] = tuple(SUBPROTOCOLS.values()),
    ) -> WebSocketStream:
        """Run the server side of the handshake on ``stream`` (bound it with a timeout).

        Raises :class:`RemoteProtocolError` for a bad request and the stream's own errors
        (``anyio.EndOfStream``...) when the client goes away first.
        """
        ws = WebSocket.server(subprotocols)
        pending = bytearray()
        while not ws.open:
            got = ws.receive(await stream.receive())
            if got.reply:
                await stream.send(got.reply)
            if got.ended is not None:
                raise got.ended
            pending += got.data
        return cls(stream, ws, bytes(pending))

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._stream.extra_attributes

    async def _write(self, data: bytes) -> None:
        if data:
            async with self._lock:
                await self._stream.send(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next STOMP bytes. Raises ``anyio.EndOfStream`` after a close from the
        client and ``anyio.BrokenResourceError`` after bad WebSocket data."""
        while not self._pending:
            if self._ended is not None:
                if isinstance(self._ended, WebSocketClosed):
                    raise anyio.EndOfStream
                raise anyio.BrokenResourceError(str(self._ended))
            got = self.ws.receive(await self._stream.receive(max_bytes))
            self._ended = got.ended
            self._pending = got.data
            if got.reply:
                try:
                    await self._write(got.reply)
                except _STREAM_ERRORS:
                    if not self._pending:
                        raise
        data, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return data

    async def send(self, item: bytes) -> None:
        """Write ``item`` as one WebSocket message."""
        await self.send_frames([item])

    async def send_frames(self, frames: Iterable[bytes]) -> None:
        """Write each of ``frames`` as a message of its own, in one write."""
        await self._write(self.ws.send_frames(frames))

    async def send_eof(self) -> None:
        """Start the close handshake (code 1000); the client's answer ends ``receive``."""
        await self._write(self.ws.close())

    async def aclose(self) -> None:
        await self._stream.aclose()

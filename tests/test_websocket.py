"""STOMP over WebSocket: the sans-IO adapter, and the clients against a scripted server.

The scripted server speaks WebSocket through wsproto directly (not through stompy's
adapter), so the clients are checked against an independent peer: it writes frames
split across messages, packed into one, as text and as binary, pings, and closes.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

import stompy
from stompy._core.encoder import encode
from stompy._core.frames import Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy._engine.websocket import (
    Received,
    WebSocket,
    WebSocketClosed,
    subprotocols_for,
)
from stompy.errors import ConnectFailed, ConnectionLost, FrameTooLarge, RemoteProtocolError
from tests.test_lenient import serve_one

TIMEOUT = 5.0
ALL = ["v12.stomp", "v11.stomp", "v10.stomp"]


def stomp(command: str, *headers: tuple[str, str], body: bytes = b"") -> bytes:
    return encode(Frame(command, tuple(headers), body), "1.2")


# -- the adapter, joined to a wsproto peer in memory -------------------------------------


def open_pair(
    offered: list[str] = ALL, chosen: str | None = "v12.stomp"
) -> tuple[WebSocket, WSConnection]:
    ws, request = WebSocket.client(
        "example.org", 15674, "/ws", tls=False, subprotocols=offered, headers={"Cookie": "k=v"}
    )
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(request)
    (event,) = server.events()
    assert isinstance(event, Request)
    assert event.host == "example.org:15674"
    assert event.target == "/ws"
    assert event.subprotocols == offered
    assert (b"cookie", b"k=v") in [(k.lower(), v) for k, v in event.extra_headers]
    got = ws.receive(server.send(AcceptConnection(subprotocol=chosen)))
    assert got == Received()
    assert ws.open
    assert ws.subprotocol == chosen
    return ws, server


def server_events(server: WSConnection, data: bytes) -> list[Event]:
    server.receive_data(data)
    return list(server.events())


def test_subprotocols_follow_the_versions() -> None:
    assert subprotocols_for(("1.0", "1.1", "1.2")) == ALL
    assert subprotocols_for(["1.1"]) == ["v11.stomp"]


def test_default_ports_are_left_out_of_the_host_header() -> None:
    for tls, port in ((False, 80), (True, 443)):
        _, request = WebSocket.client("h", port, "/", tls=tls, subprotocols=ALL)
        assert b"\r\nhost: h\r\n" in request.lower()
    _, request = WebSocket.client("::1", 8080, "/", tls=False, subprotocols=ALL)
    assert b"\r\nhost: [::1]:8080\r\n" in request.lower()


@pytest.mark.parametrize("header", [("Bad Name", "v"), ("X", "a\r\nInjected: 1"), ("", "v")])
def test_handshake_headers_are_checked(header: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="header"):
        WebSocket.client("h", 80, "/", tls=False, subprotocols=ALL, headers=dict([header]))
    with pytest.raises(ValueError, match="header"):
        stompy.Connection("ws://h/ws", ws_headers=dict([header]))


def test_one_message_per_frame_and_any_split_on_receipt() -> None:
    ws, server = open_pair()
    frames = [stomp("SEND", ("destination", "/a")), b"\n", stomp("SEND", body=b"\x00\xff")]
    sent = server_events(server, ws.send_frames(frames))
    assert [type(e) for e in sent] == [BytesMessage] * 3
    assert [bytes(e.data) for e in sent if isinstance(e, BytesMessage)] == frames
    # Received: split across messages, packed into one, text and binary, fragmented.
    one = stomp("MESSAGE", ("destination", "/a"), body=b"\x00bin")
    two = stomp("RECEIPT", ("receipt-id", "r-1"))
    wire = (
        server.send(TextMessage(data="CONNEC"))
        + server.send(TextMessage(data="TED\nversion:1.2\n\n\x00"))
        + server.send(BytesMessage(data=one + two))
        + server.send(BytesMessage(data=one[:5], message_finished=False))
        + server.send(BytesMessage(data=one[5:], message_finished=True))
    )
    got = b"".join(ws.receive(wire[i : i + 7]).data for i in range(0, len(wire), 7))
    assert got == b"CONNECTED\nversion:1.2\n\n\x00" + one + two + one


def test_text_messages_carry_utf8() -> None:
    ws, server = open_pair()
    assert ws.receive(server.send(TextMessage(data="é\x00"))).data == "é\x00".encode()


def test_ping_is_answered_and_pong_ignored() -> None:
    ws, server = open_pair()
    got = ws.receive(server.send(Ping(payload=b"hb")) + server.send(Pong(payload=b"x")))
    assert got.data == b""
    assert got.ended is None
    assert server_events(server, got.reply) == [Pong(payload=b"hb")]
    assert server_events(server, ws.ping(b"p")) == [Ping(payload=b"p")]


def test_close_from_the_peer_is_answered_and_reported() -> None:
    ws, server = open_pair()
    wire = server.send(BytesMessage(data=b"ERROR\n\n\x00")) + server.send(
        CloseConnection(code=4001, reason="maintenance")
    )
    got = ws.receive(wire)
    assert got.data == b"ERROR\n\n\x00"  # what came before the close is kept
    assert isinstance(got.ended, WebSocketClosed)
    assert isinstance(got.ended, ConnectionLost)
    assert (got.ended.code, got.ended.reason) == (4001, "maintenance")
    assert "4001" in str(got.ended)
    assert server_events(server, got.reply) == [CloseConnection(4001, "maintenance")]
    assert ws.closing
    assert ws.send_frames([b"\n"]) == b""  # nothing can be sent any more
    assert ws.close() == b""
    assert ws.receive(b"more noise") == Received()


def test_our_close_and_its_answer() -> None:
    ws, server = open_pair()
    assert server_events(server, ws.close(1000, "bye")) == [CloseConnection(1000, "bye")]
    assert ws.close() == b""  # only one close frame
    got = ws.receive(server.send(CloseConnection(1000, "bye")))
    assert isinstance(got.ended, WebSocketClosed)
    assert got.reply == b""


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (b"\x8f\x00", 1002),  # an opcode RFC 6455 does not define
        (b"\x82\x81abcdx", 1002),  # a masked frame from a server
        (b"\x81\x02\xc3\x28", 1007),  # a text message that is not UTF-8
    ],
)
def test_bad_websocket_data_is_a_protocol_error(wire: bytes, code: int) -> None:
    ws, server = open_pair()
    got = ws.receive(wire)
    assert isinstance(got.ended, RemoteProtocolError)
    (event,) = server_events(server, got.reply)
    assert isinstance(event, CloseConnection)
    assert event.code == code
    if code == 1007:  # the usual cause: a binary body sent in a text message
        assert "binary message" in str(got.ended)


def test_refused_handshake_is_connect_failed() -> None:
    ws, request = WebSocket.client("h", 80, "/ws", tls=False, subprotocols=ALL)
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(request)
    list(server.events())
    wire = server.send(
        RejectConnection(status_code=403, headers=[(b"content-length", b"2")], has_body=True)
    ) + server.send(RejectData(data=b"no"))
    got = ws.receive(wire)
    assert isinstance(got.ended, ConnectFailed)
    assert "HTTP 403" in str(got.ended)
    assert not ws.open


def test_a_subprotocol_we_did_not_offer_is_refused() -> None:
    ws, _ = WebSocket.client("h", 80, "/ws", tls=False, subprotocols=["v12.stomp"])
    response = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: x\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
    )
    got = ws.receive(response)
    assert isinstance(got.ended, RemoteProtocolError)
    assert not ws.open


def test_server_side_negotiates_and_keeps_the_request() -> None:
    server = WebSocket.server()
    client = WSConnection(ConnectionType.CLIENT)
    request = client.send(
        Request(
            host="h",
            target="/ws?x=1",
            subprotocols=["mqtt", "v11.stomp", "v12.stomp"],
            extra_headers=[(b"Authorization", b"Bearer t")],
        )
    )
    got = server.receive(request)
    assert server.open
    assert server.subprotocol == "v12.stomp"  # the highest version both speak
    assert server.request is not None
    assert server.request.target == "/ws?x=1"
    assert server.request.header("AUTHORIZATION") == "Bearer t"
    assert server.request.header("cookie") is None
    client.receive_data(got.reply)
    (accepted,) = client.events()
    assert isinstance(accepted, AcceptConnection)
    assert accepted.subprotocol == "v12.stomp"


def test_server_side_accepts_a_client_offering_no_subprotocol() -> None:
    server = WebSocket.server()
    client = WSConnection(ConnectionType.CLIENT)
    got = server.receive(client.send(Request(host="h", target="/")))
    assert server.open
    assert server.subprotocol is None
    client.receive_data(got.reply)
    assert isinstance(next(client.events()), AcceptConnection)


def test_server_side_refuses_a_bad_request_with_400() -> None:
    server = WebSocket.server()
    got = server.receive(b"POST /ws HTTP/1.1\r\nHost: h\r\n\r\n")
    assert isinstance(got.ended, RemoteProtocolError)
    assert got.reply.startswith(b"HTTP/1.1 400 ")
    got = WebSocket.server().receive(b"\x00\x01 not http at all\r\n\r\n")
    assert isinstance(got.ended, RemoteProtocolError)


# -- a scripted WebSocket server for the clients -----------------------------------------


class Peer:
    """The server side of one connection, written with wsproto alone."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(TIMEOUT)
        self.sock = sock
        self.ws = WSConnection(ConnectionType.SERVER)
        self.request: Request | None = None
        self._events: deque[Event] = deque()
        self.pongs: list[bytes] = []
        self.closes: list[CloseConnection] = []

    def next_event(self) -> Event:
        while not self._events:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the client closed the socket")
            self.ws.receive_data(data)
            self._events.extend(self.ws.events())
        return self._events.popleft()

    def send(self, *events: Event) -> None:
        self.sock.sendall(b"".join(self.ws.send(e) for e in events))

    def accept(self, subprotocol: str | None = "v12.stomp") -> Request:
        event = self.next_event()
        assert isinstance(event, Request)
        self.request = event
        self.send(AcceptConnection(subprotocol=subprotocol))
        return event

    def message(self) -> bytes:
        """The next whole message (pongs and closes are noted on the way)."""
        data = bytearray()
        while True:
            event = self.next_event()
            if isinstance(event, Pong):
                self.pongs.append(bytes(event.payload))
            elif isinstance(event, CloseConnection):
                self.closes.append(event)
                raise EOFError(f"close {event.code}")
            elif isinstance(event, Message):
                data += event.data.encode() if isinstance(event.data, str) else event.data
                if event.message_finished:
                    return bytes(data)

    def frame(self) -> Frame:
        """The next message, which must hold exactly one STOMP frame."""
        frames = FrameParser("1.2").parse(self.message())
        assert len(frames) == 1, frames
        return frames[0]

    def connected(self, version: str = "1.2") -> Frame:
        connect = self.frame()
        assert connect.command in ("CONNECT", "STOMP")
        self.send(BytesMessage(data=stomp("CONNECTED", ("version", version))))
        return connect

    def disconnect(self) -> None:
        """Answer the client's DISCONNECT (and UNSUBSCRIBEs before it), then its close."""
        frame = self.frame()
        while frame.command == "UNSUBSCRIBE":
            frame = self.frame()
        assert frame.command == "DISCONNECT"
        receipt = frame.get("receipt")
        assert receipt is not None
        self.send(BytesMessage(data=stomp("RECEIPT", ("receipt-id", receipt))))
        try:
            extra = self.message()
        except EOFError:
            return
        raise AssertionError(f"a message after DISCONNECT: {extra!r}")


@contextmanager
def scripted(script: Callable[[Peer], None]) -> Iterator[str]:
    """Run ``script`` for the one connection a client makes; yield the URL to use."""
    with serve_one(lambda sock: script(Peer(sock)), TIMEOUT) as port:
        yield f"ws://127.0.0.1:{port}/stomp?x=1"


def test_handshake_carries_headers_path_and_subprotocols() -> None:
    seen: list[Request] = []

    def script(peer: Peer) -> None:
        seen.append(peer.accept("v11.stomp"))
        assert peer.connected("1.1").get("host") == "/"
        peer.disconnect()

    headers = {"Cookie": "session=abc", "Authorization": "Bearer token"}
    with scripted(script) as url, stompy.Connection(url, ws_headers=headers) as conn:
        assert conn.version == "1.1"
    (request,) = seen
    assert request.target == "/stomp?x=1"
    assert request.subprotocols == ALL
    received = {k.decode().lower(): v.decode() for k, v in request.extra_headers}
    assert received["cookie"] == "session=abc"
    assert received["authorization"] == "Bearer token"


def test_one_frame_per_message_from_the_client() -> None:
    commands: list[str] = []

    def script(peer: Peer) -> None:
        peer.accept()
        peer.connected()
        for _ in range(3):
            frame = peer.frame()  # asserts one frame per message
            commands.append(frame.command)
            if receipt := frame.get("receipt"):
                peer.send(BytesMessage(data=stomp("RECEIPT", ("receipt-id", receipt))))
        peer.disconnect()

    with scripted(script) as url, stompy.Connection(url) as conn:
        conn.subscribe("/queue/a")
        conn.send("/queue/a", b"\x00" * 10)
        conn.send("/queue/a", "x", receipt=True)
    assert commands == ["SUBSCRIBE", "SEND", "SEND"]


def test_frames_split_packed_text_and_binary_reach_the_client() -> None:
    def script(peer: Peer) -> None:
        peer.accept()
        peer.frame()
        connected = stomp("CONNECTED", ("version", "1.2"), ("heart-beat", "0,0"))
        peer.send(*(TextMessage(data=connected[i : i + 4].decode()) for i in range(0, 40, 4)))
        peer.send(TextMessage(data=connected[40:].decode()))
        subscribe = peer.frame()
        sub = subscribe.get("id")
        assert sub is not None

        def msg(n: int, body: bytes) -> bytes:
            return stomp(
                "MESSAGE",
                ("destination", "/queue/a"),
                ("subscription", sub),
                ("message-id", str(n)),
                body=body,
            )

        peer.send(
            BytesMessage(data=msg(1, b"\x00one") + b"\n" + msg(2, b"two")),  # packed
            TextMessage(data=msg(3, b"drei").decode(), message_finished=False),
            TextMessage(data="", message_finished=True),  # an empty last fragment
            BytesMessage(data=msg(4, b"4")[:9]),  # split across two messages
            BytesMessage(data=msg(4, b"4")[9:]),
        )
        peer.disconnect()

    with scripted(script) as url, stompy.Connection(url) as conn:
        with conn.subscribe("/queue/a") as sub:
            bodies = [m.body for m in (sub.get(timeout=TIMEOUT) for _ in range(4)) if m]
        assert bodies == [b"\x00one", b"two", b"drei", b"4"]


def msg_frame(sub: str, n: int, body: bytes) -> bytes:
    return stomp(
        "MESSAGE",
        ("destination", "/queue/a"),
        ("subscription", sub),
        ("message-id", str(n)),
        body=body,
    )


def ping_script(peer: Peer) -> None:
    """Ping once subscribed; deliver a message once the pong came back."""
    peer.accept()
    peer.connected()
    sub = peer.frame().get("id")
    assert sub is not None
    peer.send(Ping(payload=b"are you there"))
    assert peer.next_event() == Pong(payload=b"are you there")
    peer.send(BytesMessage(data=msg_frame(sub, 1, b"pong seen")))
    peer.disconnect()


def test_ping_is_answered_by_the_sync_client() -> None:
    with scripted(ping_script) as url, stompy.Connection(url) as conn:
        with conn.subscribe("/queue/a") as sub:
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            assert message.body == b"pong seen"


def close_script(peer: Peer) -> None:
    peer.accept()
    peer.connected()
    peer.frame()  # SUBSCRIBE
    peer.send(CloseConnection(code=4001, reason="maintenance"))
    event = peer.next_event()  # the client answers the close
    assert event == CloseConnection(code=4001, reason="maintenance")


def test_close_from_the_server_is_connection_lost_with_code_and_reason() -> None:
    with scripted(close_script) as url, stompy.Connection(url) as conn:
        sub = conn.subscribe("/queue/a")
        with pytest.raises(ConnectionLost) as info:
            sub.get(timeout=TIMEOUT)
    assert isinstance(info.value, WebSocketClosed)
    assert (info.value.code, info.value.reason) == (4001, "maintenance")
    assert info.value.__cause__ is conn.failure  # a fresh copy, chained to the failure


def test_refused_handshake_fails_to_connect() -> None:
    def script(peer: Peer) -> None:
        assert isinstance(peer.next_event(), Request)
        peer.send(RejectConnection(status_code=401))

    with scripted(script) as url, pytest.raises(ConnectFailed, match="HTTP 401"):
        stompy.Connection(url, connect_timeout=TIMEOUT).connect()


def test_close_during_connect_fails_to_connect() -> None:
    def script(peer: Peer) -> None:
        peer.accept()
        peer.frame()
        peer.send(CloseConnection(code=1008, reason="policy"))

    with scripted(script) as url, pytest.raises(ConnectFailed, match="1008"):
        stompy.Connection(url, connect_timeout=TIMEOUT).connect()


def test_bad_websocket_data_from_the_server_is_a_protocol_error() -> None:
    def script(peer: Peer) -> None:
        peer.accept()
        peer.connected()
        peer.frame()
        peer.sock.sendall(b"\x8f\x00")  # no such opcode
        event = peer.next_event()
        assert isinstance(event, CloseConnection)
        assert event.code == 1002

    with scripted(script) as url, stompy.Connection(url) as conn:
        sub = conn.subscribe("/queue/a")
        with pytest.raises(RemoteProtocolError, match="WebSocket"):
            sub.get(timeout=TIMEOUT)


def test_an_endless_message_is_cut_off_by_the_frame_limits() -> None:
    """wsproto has no message size limit: the STOMP limits bound the stream instead."""

    def script(peer: Peer) -> None:
        peer.accept()
        peer.connected()
        sub = peer.frame().get("id")
        assert sub is not None
        head = msg_frame(sub, 1, b"")[:-1]  # no NUL: the body goes on and on
        # One binary WebSocket frame that announces 2**40 bytes of payload.
        peer.sock.sendall(b"\x82\x7f" + (2**40).to_bytes(8, "big") + head)
        chunk = b"x" * 65536
        for _ in range(64):  # 4 MiB at most, then the client must have given up
            try:
                peer.sock.sendall(chunk)
            except OSError:
                return

    limits = FrameLimits(max_body=256 * 1024)
    with scripted(script) as url, stompy.Connection(url, limits=limits) as conn:
        sub = conn.subscribe("/queue/a")
        with pytest.raises(FrameTooLarge):
            sub.get(timeout=TIMEOUT)


def test_eof_without_a_close_frame_is_connection_lost() -> None:
    def script(peer: Peer) -> None:
        peer.accept()
        peer.connected()
        peer.frame()

    with scripted(script) as url, stompy.Connection(url) as conn:
        sub = conn.subscribe("/queue/a")
        with pytest.raises(ConnectionLost) as info:
            sub.get(timeout=TIMEOUT)
        assert not isinstance(info.value, WebSocketClosed)


def test_one_call_send_with_handshake_headers() -> None:
    seen: list[Request] = []

    def script(peer: Peer) -> None:
        seen.append(peer.accept())
        peer.connected()
        frame = peer.frame()
        assert frame.command == "SEND"
        assert frame.body == b"hi"
        receipt = frame.get("receipt")
        assert receipt is not None
        peer.send(BytesMessage(data=stomp("RECEIPT", ("receipt-id", receipt))))
        peer.disconnect()

    with scripted(script) as url:
        stompy.send(url, "/queue/a", b"hi", ws_headers={"X-Token": "t"})
    assert (b"x-token", b"t") in [(k.lower(), v) for k, v in seen[0].extra_headers]


# -- the async client against the scripted server ----------------------------------------


@pytest.mark.anyio
async def test_async_handshake_split_frames_and_one_frame_per_message() -> None:
    seen: list[Request] = []

    def script(peer: Peer) -> None:
        seen.append(peer.accept("v12.stomp"))
        connect = peer.frame()
        assert connect.command in ("CONNECT", "STOMP")
        connected = stomp("CONNECTED", ("version", "1.2"))
        peer.send(TextMessage(data=connected[:7].decode()), BytesMessage(data=connected[7:]))
        sub = peer.frame().get("id")  # SUBSCRIBE, alone in its message
        assert sub is not None
        send = peer.frame()
        assert send.body == b"\x00x"
        two = msg_frame(sub, 1, b"a") + msg_frame(sub, 2, b"b")
        peer.send(BytesMessage(data=two[:30]), TextMessage(data=two[30:].decode()))
        peer.disconnect()

    with anyio.fail_after(TIMEOUT * 2), scripted(script) as url:
        async with stompy.AsyncConnection(url, ws_headers={"Cookie": "c=1"}) as conn:
            async with conn.subscribe("/queue/a") as sub:
                await conn.send("/queue/a", b"\x00x")
                first = await sub.get(timeout=TIMEOUT)
                second = await sub.get(timeout=TIMEOUT)
                assert first is not None
                assert second is not None
                assert (first.body, second.body) == (b"a", b"b")
    assert (b"cookie", b"c=1") in [(k.lower(), v) for k, v in seen[0].extra_headers]


@pytest.mark.anyio
async def test_async_ping_is_answered() -> None:
    with anyio.fail_after(TIMEOUT * 2), scripted(ping_script) as url:
        async with stompy.AsyncConnection(url) as conn, conn.subscribe("/queue/a") as sub:
            message = await sub.get(timeout=TIMEOUT)
            assert message is not None
            assert message.body == b"pong seen"


@pytest.mark.anyio
async def test_async_close_from_the_server_is_connection_lost() -> None:
    with anyio.fail_after(TIMEOUT * 2), scripted(close_script) as url:
        async with stompy.AsyncConnection(url) as conn:
            sub = await conn.subscribe("/queue/a")
            with pytest.raises(ConnectionLost) as info:
                await sub.get(timeout=TIMEOUT)
    assert isinstance(info.value, WebSocketClosed)
    assert (info.value.code, info.value.reason) == (4001, "maintenance")


@pytest.mark.anyio
async def test_async_refused_handshake_fails_to_connect() -> None:
    def script(peer: Peer) -> None:
        assert isinstance(peer.next_event(), Request)
        peer.send(RejectConnection(status_code=404))

    with anyio.fail_after(TIMEOUT * 2), scripted(script) as url:
        with pytest.raises(ConnectFailed, match="HTTP 404"):
            async with stompy.AsyncConnection(url, connect_timeout=TIMEOUT):
                pass

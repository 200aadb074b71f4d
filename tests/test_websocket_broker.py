"""The in-process broker over WebSocket (``serve(websocket=True)``), with both clients.

Raw wsproto clients check the broker's side of the protocol: subprotocol choice, one
frame per message, pings, the close handshake and bad requests.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest
import trustme
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    Request,
    TextMessage,
)

import stompy
from stompy._core.encoder import encode
from stompy._core.frames import Frame
from stompy._core.parser import FrameParser
from stompy.errors import ConnectFailed, ConnectionLost, ServerError
from stompy.testing import Broker, run_broker, serve

TIMEOUT = 5.0


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(websocket=True, users={"guest": "guest"}) as running:
        yield running
        assert running.stats.internal_errors == 0


def ws_url(broker: Broker) -> str:
    assert broker.ws_url is not None
    return broker.ws_url


def test_urls_and_ports(broker: Broker) -> None:
    assert broker.url == f"stomp://127.0.0.1:{broker.port}"
    assert broker.ws_url == f"ws://127.0.0.1:{broker.ws_port}/ws"
    assert broker.ws_port != broker.port
    with run_broker() as plain:
        assert plain.ws_url is None
        assert plain.ws_port is None


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_sync_client_over_websocket(broker: Broker, version: str) -> None:
    dest = queue()
    body = b"\x00binary\n" * 5000
    with stompy.Connection(
        ws_url(broker), login="guest", passcode="guest", versions=[version]
    ) as conn:
        assert conn.version == version
        with conn.subscribe(dest, ack="client") as sub:
            conn.send(dest, body if version != "1.0" else b"text", receipt=True)
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            assert message.body == (body if version != "1.0" else b"text")
            message.ack(receipt=True)
    broker.wait_until(lambda: broker.unacked_count(dest) == 0)


def test_both_transports_share_the_queues(broker: Broker) -> None:
    dest = queue()
    stompy.send(broker.url, dest, "over tcp", login="guest", passcode="guest")
    stompy.send(ws_url(broker), dest, "over ws", login="guest", passcode="guest")
    with stompy.Connection(ws_url(broker), login="guest", passcode="guest") as conn:
        with conn.subscribe(dest) as sub:
            texts = [m.text for m in (sub.get(timeout=TIMEOUT) for _ in range(2)) if m]
    assert texts == ["over tcp", "over ws"]


def test_heartbeats_flow_over_websocket(broker: Broker) -> None:
    with stompy.Connection(
        ws_url(broker), login="guest", passcode="guest", heartbeats=(20, 20)
    ) as conn:
        out, incoming = conn.heartbeats
        assert out > 0
        assert incoming > 0
        before = broker.stats.heartbeat_timeouts
        time.sleep(3 * max(out, incoming) / 1000)  # both sides must have kept beating
        assert conn.connected
        assert conn.failure is None
        conn.send(queue(), "still here", receipt=True)
    assert broker.stats.heartbeat_timeouts == before


def test_wrong_passcode_is_a_server_error_over_websocket(broker: Broker) -> None:
    with pytest.raises(ServerError):
        stompy.Connection(ws_url(broker), login="guest", passcode="nope").connect()


def test_dropped_connection_is_connection_lost() -> None:
    with run_broker(websocket=True) as own:
        assert own.ws_url is not None
        with stompy.Connection(own.ws_url) as conn:
            sub = conn.subscribe(queue())
            assert own.drop_all_connections() == 1
            with pytest.raises(ConnectionLost):
                sub.get(timeout=TIMEOUT)


def test_send_raw_reaches_a_websocket_client() -> None:
    with run_broker(websocket=True) as own:
        assert own.ws_url is not None
        with stompy.Connection(own.ws_url) as conn:
            sub = conn.subscribe(queue())
            session = conn.session
            assert session is not None
            own.send_raw(session, b"ERROR\nmessage:going away\n\nbye\x00")
            with pytest.raises(ServerError, match="going away"):
                sub.get(timeout=TIMEOUT)


@pytest.mark.anyio
async def test_async_client_over_websocket() -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT * 2):
        async with serve(websocket=True) as running:
            assert running.ws_url is not None
            async with stompy.AsyncConnection(running.ws_url, heartbeats=(20, 20)) as conn:
                async with conn.subscribe(dest, ack="client-individual") as sub:
                    await conn.send(dest, b"\x00" * 70000, receipt=True)
                    await conn.send(dest, "zwei")
                    first = await sub.get(timeout=TIMEOUT)
                    second = await sub.get(timeout=TIMEOUT)
                    assert first is not None
                    assert second is not None
                    assert first.body == b"\x00" * 70000
                    assert second.text == "zwei"
                    await first.ack(receipt=True)
                    await second.ack(receipt=True)
                await anyio.sleep(0.2)  # heart-beats both ways
                assert conn.connected
            await running.wait_until(lambda: running.stats.connections_open == 0)
            assert running.stats.heartbeat_timeouts == 0


@pytest.mark.anyio
async def test_async_send_async_over_websocket() -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT * 2):
        async with serve(websocket=True) as running:
            assert running.ws_url is not None
            await stompy.send_async(running.ws_url, dest, "one call")
            assert running.queue_depth(dest) == 1


# -- TLS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_wss_with_a_verified_certificate(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    with run_broker(ssl=server_context, websocket=True) as secure:
        url = secure.ws_url
        assert url is not None
        assert url.startswith("wss://")
        dest = queue()
        with stompy.Connection(url, ssl=client_context) as conn, conn.subscribe(dest) as sub:
            conn.send(dest, b"\x00secret", receipt=True)
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            assert message.body == b"\x00secret"
        # The default context does not trust the test CA.
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            stompy.Connection(url, connect_timeout=TIMEOUT).connect()


@pytest.mark.anyio
async def test_async_wss(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> None:
    with anyio.fail_after(TIMEOUT * 2):
        async with serve(ssl=server_context, websocket=True) as secure:
            assert secure.ws_url is not None
            async with stompy.AsyncConnection(secure.ws_url, ssl=client_context) as conn:
                await conn.send(queue(), "über TLS", receipt=True)
            with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                async with stompy.AsyncConnection(secure.ws_url, connect_timeout=TIMEOUT):
                    pass


# -- the broker's side, seen by a raw wsproto client ----------------------------------


class RawClient:
    def __init__(self, port: int, subprotocols: list[str], target: str = "/ws") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._events: list[Event] = []
        self.send(Request(host="127.0.0.1", target=target, subprotocols=subprotocols))
        accepted = self.next_event()
        assert isinstance(accepted, AcceptConnection)
        self.subprotocol = accepted.subprotocol

    def close(self) -> None:
        self.sock.close()

    def send(self, *events: Event) -> None:
        self.sock.sendall(b"".join(self.ws.send(e) for e in events))

    def next_event(self) -> Event:
        while not self._events:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.ws.receive_data(data)
            self._events.extend(self.ws.events())
        return self._events.pop(0)

    def frame(self) -> Frame:
        """The next message; it must hold exactly one STOMP frame."""
        data = bytearray()
        while True:
            event = self.next_event()
            assert isinstance(event, Message), event
            data += event.data.encode() if isinstance(event.data, str) else event.data
            if event.message_finished:
                break
        frames = FrameParser("1.2").parse(bytes(data))
        assert len(frames) == 1, frames
        return frames[0]

    def stomp(self, command: str, *headers: tuple[str, str], text: bool = False) -> None:
        data = encode(Frame(command, headers, b""), "1.2")
        self.send(TextMessage(data=data.decode()) if text else BytesMessage(data=data))


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),
        (["mqtt", "v11.stomp"], "v11.stomp"),
        ([], None),
    ],
)
def test_broker_negotiates_the_subprotocol(
    broker: Broker, offered: list[str], chosen: str | None
) -> None:
    assert broker.ws_port is not None
    client = RawClient(broker.ws_port, offered)
    try:
        assert client.subprotocol == chosen
    finally:
        client.close()


def test_broker_sends_one_frame_per_message_and_takes_text(broker: Broker) -> None:
    assert broker.ws_port is not None
    dest = queue()
    stompy.send(broker.url, dest, "a", login="guest", passcode="guest")
    stompy.send(broker.url, dest, "b", login="guest", passcode="guest")
    client = RawClient(broker.ws_port, ["v12.stomp"], target="/any/path?x=1")
    try:
        # A CONNECT split across a text and a binary message.
        connect = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00"
        client.send(TextMessage(data=connect[:20].decode()), BytesMessage(data=connect[20:]))
        assert client.frame().command == "CONNECTED"
        client.stomp("SUBSCRIBE", ("destination", dest), ("id", "s"), ("receipt", "r"), text=True)
        frames = [client.frame() for _ in range(3)]
        assert [f.command for f in frames] == ["RECEIPT", "MESSAGE", "MESSAGE"]
        assert [f.body for f in frames[1:]] == [b"a", b"b"]
        client.send(Ping(payload=b"hb"))
        assert client.next_event() == Pong(payload=b"hb")
        client.stomp("DISCONNECT", ("receipt", "bye"))
        assert client.frame().get("receipt-id") == "bye"
        # Then the broker starts the close handshake, and the client answers.
        closing = client.next_event()
        assert isinstance(closing, CloseConnection)
        assert closing.code == 1000
        client.send(closing.response())
    finally:
        client.close()


def test_broker_ends_the_session_on_a_close_from_the_client(broker: Broker) -> None:
    assert broker.ws_port is not None
    client = RawClient(broker.ws_port, ["v12.stomp"])
    try:
        client.stomp(
            "CONNECT", ("accept-version", "1.2"), ("login", "guest"), ("passcode", "guest")
        )
        session = client.frame().get("session")
        assert session in {c.session for c in broker.connections}
        client.send(CloseConnection(code=1001, reason="tab closed"))
        answer = client.next_event()
        assert answer == CloseConnection(code=1001, reason="tab closed")
        with pytest.raises(EOFError):
            client.next_event()
    finally:
        client.close()
    broker.wait_until(lambda: session not in {c.session for c in broker.connections})


def test_broker_fails_a_client_that_sends_bad_websocket_data(broker: Broker) -> None:
    assert broker.ws_port is not None
    client = RawClient(broker.ws_port, ["v12.stomp"])
    try:
        client.sock.sendall(b"\x82\x01x")  # unmasked: RFC 6455 forbids it from a client
        closing = client.next_event()
        assert isinstance(closing, CloseConnection)
        assert closing.code == 1002
        with pytest.raises(EOFError):
            client.next_event()
    finally:
        client.close()
    assert broker.stats.internal_errors == 0


def test_broker_refuses_a_bad_handshake(broker: Broker) -> None:
    assert broker.ws_port is not None
    with socket.create_connection(("127.0.0.1", broker.ws_port), timeout=TIMEOUT) as sock:
        sock.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")  # no Upgrade: not WebSocket
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ")
    with socket.create_connection(("127.0.0.1", broker.ws_port), timeout=TIMEOUT) as sock:
        sock.sendall(b"CONNECT\r\n\r\n")  # STOMP without the upgrade
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ")
    assert broker.stats.internal_errors == 0


# -- without wsproto --------------------------------------------------------------------


def test_importing_stompy_does_not_import_wsproto() -> None:
    code = (
        "import sys, stompy, stompy.testing;"
        "from stompy.testing import run_broker;"
        "assert 'wsproto' not in sys.modules, 'wsproto imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_websocket_url_without_wsproto_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wsproto", None)
    monkeypatch.delitem(sys.modules, "stompy._engine.websocket", raising=False)
    with pytest.raises(ConnectFailed, match=r"stompy-client\[websocket\]"):
        stompy.Connection("ws://127.0.0.1:1/ws", connect_timeout=1).connect()
    with pytest.raises(ImportError, match=r"stompy-client\[websocket\]"):
        with run_broker(websocket=True):
            pass

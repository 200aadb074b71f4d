"""``stompy send`` / ``stompy subscribe`` over WebSocket: ``--ws-header`` on the handshake."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from stompy import cli
from stompy.testing import Broker, run_broker


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(websocket=True) as running:
        yield running


class Gatekeeper:
    """A WebSocket endpoint that refuses every upgrade with 403, keeping the requests."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        with client:
            client.settimeout(10)
            request = b""
            for _ in range(100):  # a handshake is a few hundred bytes
                chunk = client.recv(4096)
                request += chunk
                if not chunk or b"\r\n\r\n" in request:
                    break
            self.requests.append(request)
            client.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")


@pytest.fixture
def gatekeeper() -> Iterator[Gatekeeper]:
    gate = Gatekeeper()
    gate.thread.start()
    try:
        yield gate
    finally:
        gate.listener.close()
        gate.thread.join(timeout=10)


@pytest.mark.parametrize("command", ["send", "subscribe"])
def test_ws_headers_go_on_the_handshake(
    gatekeeper: Gatekeeper, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, f"ws://127.0.0.1:{gatekeeper.port}/stomp", "/queue/x"]
    argv += ["--ws-header", "Authorization: Bearer t0ken", "--ws-header", "Cookie:SESSION=4f2a"]
    argv += ["--connect-timeout", "10", "--count", "1"] if command == "subscribe" else ["hi"]
    assert cli.main(argv) == 1
    assert "403" in capsys.readouterr().err
    (request,) = gatekeeper.requests
    head = request.decode("latin-1").lower()
    assert head.startswith("get /stomp http/1.1\r\n")
    assert "\r\nauthorization: bearer t0ken\r\n" in head
    assert "\r\ncookie: session=4f2a\r\n" in head


def test_ws_headers_with_the_in_process_broker(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broker.ws_url is not None
    header = ["--ws-header", "Origin: https://app.example.com"]
    assert cli.main(["send", broker.ws_url, "/queue/cli-ws-header", "over ws", *header]) == 0
    argv = ["subscribe", broker.ws_url, "/queue/cli-ws-header", "--count", "1", *header]
    assert cli.main([*argv, "--timeout", "10"]) == 0
    assert capsys.readouterr().out == "over ws\n"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("Bad Name:x", "invalid WebSocket handshake header 'Bad Name'"),
        ("X-Token:a\x7fb", "invalid WebSocket handshake header 'X-Token'"),
    ],
)
def test_a_header_http_refuses_is_a_usage_error(
    broker: Broker, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broker.ws_url is not None
    assert cli.main(["send", broker.ws_url, "/queue/x", "x", "--ws-header", value]) == 2
    assert said in capsys.readouterr().err


def test_ws_headers_without_a_websocket_url(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["send", broker.url, "/queue/x", "x", "--ws-header", "a:b"]) == 2
    assert "--ws-header is for ws:// and wss:// URLs" in capsys.readouterr().err


def test_ws_header_needs_a_colon(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["send", "ws://127.0.0.1:1/", "/queue/x", "x", "--ws-header", "nocolon"])
    assert info.value.code == 2
    assert "want NAME:VALUE" in capsys.readouterr().err


def test_the_parsed_values() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["subscribe", "ws://h/", "/q", "--ws-header", "Cookie:  a=b  "])
    assert args.ws_headers == [("Cookie", "a=b")]
    assert parser.parse_args(["send", "ws://h/", "/q", "b"]).ws_headers == []

"""stomp.py against the same brokers, and stomp.py <-> stompy through them.

stomp.py is the reference most users come from: what it can do with a broker,
stompy must do too, and messages must pass between the two unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import stomp

import stompy
from stompy.events import MessageReceived, Receipt
from tests.interop._support import TIMEOUT, BrokerTarget, ProtocolSession


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects what stomp.py's receiver thread reports; waits are bounded."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.connected: list[Any] = []
        self.errors: list[Any] = []
        self.messages: list[Any] = []
        self.receipts: list[str] = []

    def on_connected(self, frame: Any) -> None:
        with self.cond:
            self.connected.append(frame)
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.append(frame.headers["receipt-id"])
            self.cond.notify_all()

    def wait_for(self, what: str, count: int = 1, timeout: float = TIMEOUT) -> list[Any]:
        with self.cond:
            ok = self.cond.wait_for(
                lambda: len(getattr(self, what)) >= count or bool(self.errors), timeout
            )
            if self.errors and what != "errors":
                raise AssertionError(f"broker sent ERROR: {self.errors[0].headers}")
            assert ok, f"waited {timeout} s for {count} {what}, got {getattr(self, what)}"
            return list(getattr(self, what))


@contextmanager
def stomppy(
    broker: BrokerTarget, vhost: str | None = "", *, auto_decode: bool = True
) -> Iterator[tuple[Any, Recorder]]:
    """A connected stomp.py 1.2 connection (``vhost=None``: stomp.py's own default).

    ``auto_decode=False`` hands message bodies over as bytes.
    """
    conn = stomp.Connection12(
        [(broker.host, broker.port)],
        vhost=broker.vhost if vhost == "" else vhost,
        reconnect_attempts_max=1,
        timeout=TIMEOUT,
        auto_decode=auto_decode,
    )
    recorder = Recorder()
    conn.set_listener("recorder", recorder)
    try:
        conn.connect(broker.login, broker.passcode, wait=False)
        yield conn, recorder
    finally:
        if conn.is_connected():
            conn.disconnect()
        conn.transport.stop()


def test_stomppy_send_subscribe_receipt(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stomppy-{unique}"
    with stomppy(broker) as (conn, rec):
        rec.wait_for("connected")
        conn.subscribe(destination, id="1", ack="auto", receipt="sub")
        rec.wait_for("receipts")
        conn.send(destination, "hello", headers={"x-colon": "a:b"}, receipt="sent")
        (message,) = rec.wait_for("messages")
        assert rec.wait_for("receipts", 2) == ["sub", "sent"]
        assert message.body == "hello"
        assert message.headers["x-colon"] == "a:b"
        assert message.headers["subscription"] == "1"


def test_stomppy_default_host_header(broker: BrokerTarget) -> None:
    """stomp.py sends the socket's host name by default, which RabbitMQ refuses."""
    with stomppy(broker, vhost=None) as (_conn, rec):
        if broker.kind == "rabbitmq":
            (error,) = rec.wait_for("errors")
            assert error.headers["message"] == "Bad CONNECT"
            assert "access denied" in error.body
        elif broker.kind == "activemq":
            rec.wait_for("connected")
        else:
            pytest.skip(f"no host-header expectation for {broker.kind}")


def test_stomppy_to_stompy(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stomppy-to-stompy-{unique}"
    value = "colon:newline\nbackslash\\end"
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        with stomppy(broker) as (conn, rec):
            rec.wait_for("connected")
            conn.send(destination, "from stomp.py", headers={"x-escaped": value}, receipt="r")
            rec.wait_for("receipts")
        message = session.expect(MessageReceived)
        assert message.body == b"from stomp.py"
        assert message.frame.get("x-escaped") == value


def test_stompy_to_stomppy(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stompy-to-stomppy-{unique}"
    value = "colon:newline\nbackslash\\end"
    with stomppy(broker) as (conn, rec):
        rec.wait_for("connected")
        conn.subscribe(destination, id="1", receipt="sub")
        rec.wait_for("receipts")
        with ProtocolSession(broker) as session:
            session.connect()
            session.proto.send(destination, "from stompy", headers={"x-escaped": value})
            session.proto.disconnect(receipt="bye")
            session.flush()
            session.expect(Receipt)
        (message,) = rec.wait_for("messages")
        assert message.body == "from stompy"
        assert message.headers["x-escaped"] == value


#: What must pass between the two clients unchanged: (body, user headers).
PAYLOADS = {
    "unicode-headers": (
        "héllo ✓ 雪".encode(),
        {
            "x-colon": "a:b:c",
            "x-newline": "two\nlines",
            "x-backslash": "c:\\path\\",
            "x-ünïcode": "ça va ✓ 雪",
            "reply-to": "/queue/somewhere",
        },
    ),
    "binary-nuls": (bytes(range(256)) * 4 + b"\0\0end\0", {"x-kind": "binary"}),
    "one-mib": (bytes(range(256)) * 4096, {"x-kind": "1 MiB"}),
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_stomppy_to_stompy_connection(broker: BrokerTarget, unique: str, payload: str) -> None:
    """stomp.py sends; stompy's blocking Connection receives body and headers intact."""
    body, headers = PAYLOADS[payload]
    destination = f"/queue/stomppy-to-connection-{unique}"
    with stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(destination, receipt=True)
        with stomppy(broker) as (other, rec):
            rec.wait_for("connected")
            other.send(
                destination,
                body,
                content_type="application/octet-stream",
                headers=headers,
                receipt="sent",
            )
            rec.wait_for("receipts")
        message = sub.get(timeout=TIMEOUT * 2)
    assert message is not None
    assert message.body == body
    assert message.content_type == "application/octet-stream"
    for name, value in headers.items():
        assert message.headers.get(name) == value, name


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_stompy_connection_to_stomppy(broker: BrokerTarget, unique: str, payload: str) -> None:
    """stompy's blocking Connection sends; stomp.py receives body and headers intact."""
    body, headers = PAYLOADS[payload]
    destination = f"/queue/connection-to-stomppy-{unique}"
    with stomppy(broker, auto_decode=False) as (other, rec):
        rec.wait_for("connected")
        other.subscribe(destination, id="1", receipt="sub")
        rec.wait_for("receipts")
        with stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
            conn.send(
                destination,
                body,
                headers=headers,
                content_type="application/octet-stream",
                receipt=True,
            )
        (message,) = rec.wait_for("messages", timeout=TIMEOUT * 2)
    assert message.body == body
    assert message.headers["content-type"] == "application/octet-stream"
    assert message.headers["content-length"] == str(len(body))
    for name, value in headers.items():
        assert message.headers.get(name) == value, name

"""Another library's client (stomp.py) against the in-process broker."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import stomp

from stompy.testing import Broker, run_broker


class Collector(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)


CONNECTIONS = {"1.0": "Connection10", "1.1": "Connection11", "1.2": "Connection12"}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(users={"app": "secret"}) as running:
        yield running


def open_connection(broker: Broker, version: str, **options: Any) -> tuple[Any, Collector]:
    cls = getattr(stomp, CONNECTIONS[version])
    conn = cls([(broker.host, broker.port)], timeout=5, **options)
    collector = Collector()
    conn.set_listener("collector", collector)
    conn.connect("app", "secret", wait=True)
    return conn, collector


@pytest.mark.parametrize("version", sorted(CONNECTIONS))
def test_send_subscribe_ack(broker: Broker, version: str) -> None:
    destination = f"/queue/stomppy-{uuid.uuid4().hex}"
    conn, collector = open_connection(broker, version)
    try:
        conn.subscribe(destination=destination, id="1", ack="client")
        conn.send(destination=destination, body="héllo", headers={"x-key": "a:b"})
        frame = collector.messages.get(timeout=5)
        assert frame.body == "héllo"
        assert frame.headers["x-key"] == "a:b"
        assert broker.unacked_count(destination) == 1
        if version == "1.2":
            conn.ack(frame.headers["ack"])
        elif version == "1.1":
            conn.ack(frame.headers["message-id"], "1")
        else:
            conn.ack(frame.headers["message-id"])
        broker.wait_until(lambda: broker.unacked_count(destination) == 0)
    finally:
        conn.disconnect(receipt=str(uuid.uuid4()))
    assert collector.errors.empty()


def test_transaction_and_heartbeats(broker: Broker) -> None:
    destination = f"/queue/stomppy-{uuid.uuid4().hex}"
    conn, collector = open_connection(broker, "1.2", heartbeats=(100, 100))
    try:
        conn.subscribe(destination=destination, id="1", ack="auto")
        tx = conn.begin()
        conn.send(destination=destination, body="in tx", transaction=tx)
        with pytest.raises(queue.Empty):
            collector.messages.get(timeout=0.3)
        conn.commit(tx)
        assert collector.messages.get(timeout=5).body == "in tx"
        (info,) = [c for c in broker.connections if c.login == "app"]
        assert info.heartbeats == (100, 100)
    finally:
        conn.disconnect(receipt=str(uuid.uuid4()))


def test_wrong_passcode_is_refused(broker: Broker) -> None:
    conn = stomp.Connection12([(broker.host, broker.port)], timeout=5)
    collector = Collector()
    conn.set_listener("collector", collector)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("app", "wrong", wait=True)
    assert "authentication failed" in collector.errors.get(timeout=5).headers["message"]

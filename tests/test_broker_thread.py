"""``run_broker``: the broker in a background thread, used from plain synchronous code."""

from __future__ import annotations

import socket
import threading

import pytest

from stompy.testing import Broker, run_broker


def frames(sock: socket.socket, count: int) -> list[bytes]:
    """Read until ``count`` NUL-terminated frames arrived (heart-beat EOLs dropped)."""
    data = b""
    while data.count(b"\x00") < count:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return [part.lstrip(b"\n") for part in data.split(b"\x00")[:count]]


def connect(broker: Broker, version: str = "1.2") -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=5)
    sock.sendall(f"CONNECT\naccept-version:{version}\nhost:h\n\n\x00".encode())
    assert frames(sock, 1)[0].startswith(b"CONNECTED\n")
    return sock


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_runs_and_stops_in_a_thread(backend: str) -> None:
    before = set(threading.enumerate())
    with run_broker(backend=backend) as broker:
        assert repr(broker) == f"<stompy.testing.Broker {broker.url}>"
        assert broker.config.prefetch == 100
        with connect(broker) as sock:
            sock.sendall(b"SUBSCRIBE\ndestination:/queue/t\nid:1\nack:client\n\n\x00")
            sock.sendall(b"SEND\ndestination:/queue/t\nreceipt:r\n\nhello\x00")
            received = frames(sock, 2)
            assert any(f.startswith(b"MESSAGE\n") and f.endswith(b"hello") for f in received)
            assert broker.unacked_count("/queue/t") == 1
            assert broker.unacked_count() == 1
            assert broker.queue_depth("/queue/t") == 0
            assert broker.destinations() == ("/queue/t",)
            (info,) = broker.connections
            assert info.subscriptions[0].unacked == 1
            assert broker.stats.messages_received == 1
    assert set(threading.enumerate()) <= before  # every thread it started ended


def test_exceptions_propagate_and_the_thread_ends() -> None:
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="boom"), run_broker():
        raise RuntimeError("boom")
    assert set(threading.enumerate()) <= before  # every thread it started ended


def test_fault_injection_from_a_thread() -> None:
    with run_broker(heartbeats=(20, 20)) as broker, connect(broker) as sock:
        (info,) = broker.connections
        broker.pause(info.session)
        assert broker.connections[0].paused
        broker.resume(info.session)
        broker.send_raw(info.session, b"RECEIPT\nreceipt-id:raw\n\n\x00")
        assert frames(sock, 1) == [b"RECEIPT\nreceipt-id:raw\n\n"]
        with pytest.raises(KeyError):
            broker.send_raw("nobody", b"x")
        assert broker.drop_all_connections() == 1
        assert broker.connections == ()
        sock.settimeout(5)
        while sock.recv(65536):  # drains to EOF
            pass


def test_wait_until() -> None:
    with run_broker() as broker:
        broker.wait_until(lambda: broker.stats.connections_open == 0)
        with pytest.raises(TimeoutError):
            broker.wait_until(lambda: False, timeout=0.05)


def test_fixed_port_and_bind_errors() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="in use"), run_broker(port=taken.getsockname()[1]):
            pass  # pragma: no cover

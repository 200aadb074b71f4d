"""The test broker under hostile load: each bound it keeps, hit on purpose.

Out of file descriptors it keeps serving; a topic subscriber that never reads holds a
bounded backlog; unfinished frames hold bounded memory and time; the subscription limit
is an option that its ERROR names. The memory is measured with the broker's own
accounting (``stats.bytes_stored``, ``stats.bytes_partial``), which counts what it holds.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import stompy
from stompy.testing import run_broker
from stompy.testing._core.destinations import DESTINATION_OVERHEAD, subscription_size
from stompy.testing._core.records import ConnectionState
from stompy.testing._core.store import MessageStore
from tests.test_broker_core import Peer, connected, make

TEN_KB = b"x" * 10_000


def read_until_eof(sock: socket.socket, timeout: float) -> bytes:
    """Everything ``sock`` receives until the broker closes it, within ``timeout``."""
    sock.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


# -- subscriptions -----------------------------------------------------------------------------


def test_the_subscription_limit_is_an_option_its_error_says_how_to_raise() -> None:
    store = make(max_subscriptions=3)
    peer = connected(store)
    for n in range(3):
        peer.subscribe(f"/queue/{n}", id=f"s{n}")
    assert peer.frames() == []
    peer.subscribe("/queue/3", id="s3")
    message = peer.error().get("message") or ""
    assert "max_subscriptions" in message
    assert "serve(max_subscriptions=...)" in message
    assert "--max-subscriptions" in message


# -- a topic subscriber that never reads -------------------------------------------------------


def flood_topic(store_options: dict[str, int], count: int) -> tuple[Peer, Peer, Peer, MessageStore]:
    """A subscriber that never takes its output, one that does, and a producer that
    sends ``count`` 10 KB messages to the topic, each with a receipt."""
    store = make(**store_options)
    stuck = connected(store)
    stuck.subscribe("/topic/flood", id="stuck")
    reader = connected(store)
    reader.subscribe("/topic/flood", id="reader")
    producer = connected(store)
    received = 0
    for n in range(count):
        producer.send("SEND", {"destination": "/topic/flood", "receipt": f"r{n}"}, TEN_KB)
        receipts = producer.frames()
        assert [f.command for f in receipts] == ["RECEIPT"]  # never refused
        received += len(reader.frames())
    assert received == count  # the subscriber that reads misses nothing
    return stuck, reader, producer, store


def test_a_stuck_topic_subscriber_holds_at_most_max_backlog_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="stompy.testing"):
        stuck, _, _, store = flood_topic(
            {"max_backlog_bytes": 100_000, "write_buffer": 20_000}, 300
        )
    stats = store.stats
    assert stats.bytes_stored <= 100_000
    assert store.queue_depth("/topic/flood") * len(TEN_KB) <= 100_000
    assert stats.messages_dropped >= 300 - 10 - 3  # what waits, and what its output took
    (warning,) = [r.getMessage() for r in caplog.records if "backlog" in r.getMessage()]
    assert "max_backlog_bytes" in warning
    assert "'stuck'" in warning
    # What is kept is the newest: the subscriber resumes with the latest messages.
    stuck.output()
    bodies = [f for f in stuck.frames() if f.command == "MESSAGE"]
    assert bodies


def test_topic_backlogs_count_against_max_stored_bytes() -> None:
    _, _, producer, store = flood_topic({"max_stored_bytes": 100_000, "write_buffer": 20_000}, 300)
    assert store.stats.bytes_stored <= 100_000
    assert store.queue_depth("/topic/flood") * len(TEN_KB) <= 100_000
    # The same bound as the queues': the broker is full for them too.
    producer.send("SEND", {"destination": "/queue/q"}, TEN_KB * 2)
    message = producer.error().get("message") or ""
    assert "max_stored_bytes" in message


def test_a_backlog_freed_by_its_consumer_is_no_longer_counted() -> None:
    stuck, _, _, store = flood_topic({"write_buffer": 20_000}, 50)
    # What is left is the topic and its two subscriptions.
    subscribed = [subscription_size(name, "/topic/flood") for name in ("stuck", "reader")]
    assert store.stats.bytes_stored > sum(subscribed) + DESTINATION_OVERHEAD
    for _ in range(100):  # bounded: each round drains what the output took
        if not stuck.frames():
            break
    assert store.stats.bytes_stored == sum(subscribed) + DESTINATION_OVERHEAD
    stuck.client.close()
    assert store.stats.bytes_stored == subscribed[1] + DESTINATION_OVERHEAD


def test_a_socket_that_never_reads_costs_the_broker_a_bounded_backlog() -> None:
    with run_broker(max_backlog_bytes=1_000_000, write_buffer=100_000) as broker:
        stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before it connects
        stuck.settimeout(5.0)
        stuck.connect((broker.host, broker.port))
        with stuck, stompy.Connection(broker.url) as conn:
            stuck.sendall(
                b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00"
                b"SUBSCRIBE\nid:stuck\ndestination:/topic/flood\nreceipt:s\n\n\x00"
            )
            broker.wait_until(lambda: broker.stats.connections_open == 2)
            broker.wait_until(lambda: any(c.subscriptions for c in broker.connections))
            for n in range(1000):
                conn.send("/topic/flood", TEN_KB, receipt=n == 999)
            stats = broker.stats
            assert stats.messages_received == 1000
            assert stats.bytes_stored <= 1_000_000
            assert stats.messages_dropped > 0


# -- unfinished frames -------------------------------------------------------------------------


def partial_send(size: int, sent: int) -> bytes:
    """A SEND announcing ``size`` body bytes, with only ``sent`` of them."""
    return b"SEND\ndestination:/queue/big\ncontent-length:%d\n\n" % size + b"y" * sent


def test_unfinished_frames_of_all_connections_are_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make(max_partial_bytes=1_000_000)
    first, second, third = (connected(store) for _ in range(3))
    first.raw(partial_send(600_000, 450_000))
    assert store.stats.bytes_partial > 450_000
    with caplog.at_level(logging.WARNING, logger="stompy.testing"):
        second.raw(partial_send(600_000, 599_999))
    message = second.error().get("message") or ""
    assert "max_partial_bytes" in message
    assert "--max-partial-bytes" in message
    assert any("max_partial_bytes" in r.getMessage() for r in caplog.records)
    # Only the connection that went over is closed, and what it held is released.
    assert first.client.state is ConnectionState.CONNECTED
    assert store.stats.bytes_partial < 500_000
    third.raw(partial_send(600_000, 400_000))
    assert third.client.state is ConnectionState.CONNECTED
    first.raw(b"y" * 150_000 + b"\x00")  # finishing a frame frees its bytes
    assert store.stats.bytes_partial < 500_000
    assert store.queue_depth("/queue/big") == 1


def test_a_frame_that_stalls_midway_times_out(caplog: pytest.LogCaptureFixture) -> None:
    store = make(frame_timeout=5.0, heartbeats=(0, 0))
    peer = connected(store)
    assert peer.client.next_deadline() is None
    peer.raw(partial_send(100, 10), now=1.0)
    assert peer.client.next_deadline() == 6.0
    peer.raw(b"y", now=3.0)  # dribbling does not extend it
    assert peer.client.next_deadline() == 6.0
    peer.client.handle_timer(5.9)
    assert peer.client.state is ConnectionState.CONNECTED
    with caplog.at_level(logging.WARNING, logger="stompy.testing"):
        peer.client.handle_timer(6.0)
    message = peer.error().get("message") or ""
    assert "frame_timeout" in message
    assert any("frame_timeout" in r.getMessage() for r in caplog.records)
    # A frame finished in time starts no clock.
    other = connected(store)
    other.raw(partial_send(3, 2), now=1.0)
    other.raw(b"y\x00", now=2.0)
    assert other.client.next_deadline() is None


def test_a_stalled_frame_gets_an_error_and_a_close_over_a_socket() -> None:
    with run_broker(frame_timeout=0.5) as broker:
        with socket.create_connection((broker.host, broker.port), timeout=5.0) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00" + partial_send(100, 10))
            started = time.monotonic()
            data = read_until_eof(sock, 10.0)
            assert time.monotonic() - started < 5.0
    assert b"CONNECTED" in data
    assert b"ERROR" in data
    assert b"frame_timeout" in data


# -- the standalone broker ---------------------------------------------------------------------


URL = re.compile(r"listening on (stomp://\S+)")
#: The descriptors the broker process may open: its own, a few for Python and the event
#: loop, and some connections; far fewer than the sockets the test opens.
FD_LIMIT = 64


def _limit_descriptors() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, hard))


@pytest.fixture
def log_file() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "broker.log"


def start_broker(log: Path, *args: str, limited: bool = False) -> tuple[subprocess.Popen[str], str]:
    """``stompy broker`` in a process of its own, its log in ``log``; its URL."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stompy", "broker", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_limit_descriptors if limited else None,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the broker prints it at once; it fails if it dies
    match = URL.search(line)
    assert match is not None, (line, log.read_text())
    return proc, match.group(1)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung broker
        proc.kill()
        proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_out_of_file_descriptors_the_broker_serves_on(backend: str, log_file: Path) -> None:
    proc, url = start_broker(log_file, "--backend", backend, limited=True)
    host, port = url.removeprefix("stomp://").rsplit(":", 1)
    flood: list[socket.socket] = []
    try:
        with stompy.Connection(url, receipt_timeout=10.0) as good:
            sub = good.subscribe("/queue/alive")
            for _ in range(FD_LIMIT + 40):  # the kernel completes them: they wait to be accepted
                flood.append(socket.create_connection((host, int(port)), timeout=5.0))
            assert wait_for(lambda: "out of file descriptors" in log_file.read_text(), 10.0)
            assert proc.poll() is None, log_file.read_text()
            # A client connected before is served as ever.
            good.send("/queue/alive", "still here", receipt=True)
            message = sub.get(timeout=5.0)
            assert message is not None
            assert message.text == "still here"
            for sock in flood:
                sock.close()
            flood.clear()
            # The broker accepts again once descriptors are free.
            assert wait_for(lambda: _sends(url), 15.0), log_file.read_text()
            assert proc.poll() is None
        log = log_file.read_text()
        assert log.count("out of file descriptors") == 1, log
        assert "accepting connections" in log
    finally:
        for sock in flood:
            sock.close()
        stop(proc)


def _sends(url: str) -> bool:
    try:
        stompy.send(url, "/queue/after", "accepted again", connect_timeout=2.0)
    except stompy.StompError:
        return False
    return True


def test_the_limits_are_flags_of_stompy_broker(log_file: Path) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "stompy", "broker", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for flag in (
        "--max-queue",
        "--max-stored-bytes",
        "--max-backlog-bytes",
        "--max-subscriptions",
        "--max-partial-bytes",
        "--frame-timeout",
    ):
        assert flag in help_text
    proc, url = start_broker(log_file, "--max-subscriptions", "2")
    try:
        with stompy.Connection(url) as conn:
            conn.subscribe("/queue/a")
            conn.subscribe("/queue/b")
            with pytest.raises(stompy.StompError, match="max_subscriptions"):
                conn.subscribe("/queue/c", receipt=True)
    finally:
        stop(proc)

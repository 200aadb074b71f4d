"""The test broker against hostile clients: what it holds for one stays within
``max_stored_bytes``, whatever the client keeps the broker holding.

Each test drives the broker's sans-IO core (a :class:`MessageStore` and its
connections) past the bound on purpose and checks the broker's own accounting
(``stats.bytes_stored``) and that a further SEND is refused with the limit named.
docs/performance.md "The test broker's memory under hostile load" has the figures of
the broker process itself.
"""

from __future__ import annotations

import socket
import time
import tracemalloc

import pytest

import stompy
from stompy.testing import run_broker
from stompy.testing._core.destinations import (
    DESTINATION_OVERHEAD,
    MESSAGE_OVERHEAD,
    subscription_size,
)
from tests.test_broker_core import Peer, connected, make

LIMIT = 1_000_000
KB = b"x" * 1000


def refused(peer: Peer) -> str:
    """The ERROR's message, which must name ``max_stored_bytes``."""
    message = peer.error().get("message") or ""
    assert "max_stored_bytes" in message, message
    return message


def test_headers_count_against_max_stored_bytes() -> None:
    # SENDs without a body, each with 50 KB of headers, to a queue nobody reads: before,
    # only bodies counted, and the broker held them without end.
    store = make(max_stored_bytes=LIMIT)
    peer = connected(store)
    headers = {f"h{n}": "v" * 1000 for n in range(50)}
    for _ in range(100):  # bounded: the 20th or so is refused
        peer.send("SEND", {"destination": "/queue/headers", **headers})
        if peer.client.finished:
            break
    refused(peer)
    assert store.queue_depth("/queue/headers") < 25
    assert store.stats.bytes_stored <= LIMIT


def test_messages_without_a_body_count_against_max_stored_bytes() -> None:
    # Empty SENDs, one queue each: each costs the broker its objects and its queue's,
    # counted (before, 400,000 of them held 449 MB).
    limit = 100 * (MESSAGE_OVERHEAD + DESTINATION_OVERHEAD)
    store = make(max_stored_bytes=limit)
    peer = connected(store)
    for n in range(1000):  # bounded: the 101st is refused
        peer.send("SEND", {"destination": f"/queue/empty-{n}"})
        if peer.client.finished:
            break
    refused(peer)
    assert len(store.destinations()) == 100
    assert store.stats.bytes_stored == limit


def test_an_open_transaction_holds_at_most_max_stored_bytes() -> None:
    # SENDs in a transaction never committed: the broker holds them until COMMIT or
    # ABORT, so they count; the one that does not fit is refused.
    store = make(max_stored_bytes=LIMIT)
    peer = connected(store)
    peer.send("BEGIN", {"transaction": "t"})
    for _ in range(2000):  # bounded: about the 1000th is refused
        peer.send("SEND", {"destination": "/queue/tx", "transaction": "t"}, KB)
        if peer.client.finished:
            break
    refused(peer)
    assert store.stats.bytes_stored == 0  # the ERROR closed it: the transaction is gone


def test_a_transaction_releases_what_it_held_at_commit_abort_and_close() -> None:
    store = make(max_stored_bytes=LIMIT)
    peer = connected(store)
    for name in ("a", "b", "c"):
        peer.send("BEGIN", {"transaction": name})
        peer.send("SEND", {"destination": "/queue/tx", "transaction": name}, KB)
    held = store.stats.bytes_stored
    assert held == 3 * (len(KB) + MESSAGE_OVERHEAD)
    peer.send("ABORT", {"transaction": "a"})
    assert store.stats.bytes_stored == held * 2 // 3
    peer.send("COMMIT", {"transaction": "b"}, b"")
    assert store.queue_depth("/queue/tx") == 1  # held by the queue now, counted once
    assert store.stats.bytes_stored == held * 2 // 3 + DESTINATION_OVERHEAD
    peer.client.close()  # "c" is aborted
    assert store.stats.bytes_stored == held // 3 + DESTINATION_OVERHEAD
    assert peer.frames() == []


def test_unacknowledged_messages_count_against_max_stored_bytes() -> None:
    # A consumer that reads but never acks, with a prefetch as large as it likes: the
    # broker keeps each message to deliver it again, so each counts until acked, and
    # producers are refused once the broker is full.
    store = make(max_stored_bytes=LIMIT)
    consumer = connected(store)
    consumer.subscribe("/queue/kept", ack="client-individual", **{"prefetch-count": "1000000"})
    producer = connected(store)
    taken = 0
    for _ in range(2000):  # bounded: about the 1000th is refused
        producer.send("SEND", {"destination": "/queue/kept"}, KB)
        taken += len(consumer.frames())
        if producer.client.finished:
            break
    refused(producer)
    assert store.unacked_count() == taken < 1000
    assert store.stats.bytes_stored <= LIMIT


def test_acked_nacked_and_abandoned_deliveries_release_what_they_held() -> None:
    store = make(max_stored_bytes=LIMIT)
    consumer = connected(store)
    consumer.subscribe("/queue/q", ack="client-individual")
    producer = connected(store)
    for _ in range(3):
        producer.send("SEND", {"destination": "/queue/q"}, KB)
    one = len(KB) + MESSAGE_OVERHEAD
    subscribed = subscription_size("s1", "/queue/q") + DESTINATION_OVERHEAD
    assert store.stats.bytes_stored == 3 * one + subscribed
    acks = [f.get("ack") or "" for f in consumer.frames()]
    assert len(acks) == 3
    assert store.stats.bytes_stored == 3 * one + subscribed  # delivered, held until acked
    consumer.send("ACK", {"id": acks[0]})
    assert store.stats.bytes_stored == 2 * one + subscribed
    consumer.send("NACK", {"id": acks[1]})  # delivered again: still held once
    assert store.stats.bytes_stored == 2 * one + subscribed
    consumer.client.close()  # both back in the queue
    assert store.queue_depth("/queue/q") == 2
    assert store.stats.bytes_stored == 2 * one + DESTINATION_OVERHEAD  # the queue stays


def test_a_topic_subscriber_that_never_acks_is_held_to_max_stored_bytes() -> None:
    # Topic SENDs are never refused; a client-ack subscriber with a huge prefetch that
    # never acks gets messages only while the broker has room, the rest are dropped for
    # it, and a subscriber that keeps up misses nothing.
    store = make(max_stored_bytes=LIMIT)
    stuck = connected(store)
    stuck.subscribe("/topic/t", id="stuck", ack="client", **{"prefetch-count": "1000000"})
    reader = connected(store)
    reader.subscribe("/topic/t", id="reader")
    producer = connected(store)
    seen = 0
    for n in range(3000):
        producer.send("SEND", {"destination": "/topic/t", "receipt": f"r{n}"}, KB)
        assert [f.command for f in producer.frames()] == ["RECEIPT"]
        stuck.frames()
        seen += len(reader.frames())
    assert seen == 3000
    stats = store.stats
    assert stats.bytes_stored <= LIMIT
    assert store.unacked_count("/topic/t") < 1000
    assert stats.messages_dropped > 2000


def test_acks_held_in_open_transactions_count_against_max_stored_bytes() -> None:
    # One unacknowledged message ACKed again and again inside transactions left open:
    # before, 100 transactions of 10,000 ACKs held 130 MB per connection, uncounted.
    subscribed = subscription_size("s1", "/queue/a") + DESTINATION_OVERHEAD
    store = make(max_stored_bytes=1000 * MESSAGE_OVERHEAD + subscribed)
    peer = connected(store)
    peer.subscribe("/queue/a", ack="client-individual")
    peer.send("SEND", {"destination": "/queue/a"}, b"m")
    (message,) = peer.frames()
    ack = message.get("ack") or ""
    for t in range(2):
        peer.send("BEGIN", {"transaction": f"t{t}"})
        for _ in range(400):
            peer.send("ACK", {"id": ack, "transaction": f"t{t}"})
    assert peer.frames() == []
    # With the message and the subscription:
    assert store.stats.bytes_stored == 801 * MESSAGE_OVERHEAD + 1 + subscribed
    peer.send("ABORT", {"transaction": "t0"})
    assert store.stats.bytes_stored == 401 * MESSAGE_OVERHEAD + 1 + subscribed
    peer.send("BEGIN", {"transaction": "t2"})
    for _ in range(1000):  # bounded: about the 600th is refused
        peer.send("ACK", {"id": ack, "transaction": "t2"})
        if peer.client.finished:
            break
    refused(peer)
    assert store.stats.bytes_stored <= 1000 * MESSAGE_OVERHEAD + subscribed


def test_subscriptions_count_against_max_stored_bytes() -> None:
    # A thousand subscriptions (max_subscriptions) with ids and destinations of 40 KB
    # each held 184 MB per connection before, uncounted, for as many connections as
    # the process had descriptors; now the broker refuses the one that does not fit.
    store = make(max_stored_bytes=LIMIT)
    peer = connected(store)
    for n in range(1000):  # bounded: about the 6th is refused
        peer.subscribe(f"/queue/{n}-" + "d" * 40_000, id=f"{n}-" + "i" * 40_000)
        if peer.client.finished:
            break
    refused(peer)
    assert store.stats.bytes_stored == 0  # the ERROR closed it: its subscriptions went
    # A temporary queue's implicit subscription too.
    peer = connected(store)
    for n in range(1000):
        peer.send(
            "SEND", {"destination": "/topic/nobody", "reply-to": f"/temp-queue/{n}" + "t" * 60_000}
        )
        if peer.client.finished:
            break
    refused(peer)
    assert store.stats.bytes_stored == 0


def test_over_a_socket_a_consumer_that_never_acks_gets_the_producer_refused() -> None:
    # The same through the broker's transport and stompy's clients: the producer's
    # SEND with a receipt raises ServerError naming the limit, and the broker serves on.
    with run_broker(max_stored_bytes=LIMIT) as broker:
        with stompy.Connection(broker.url) as consumer:
            sub = consumer.subscribe(
                "/queue/kept", ack="client-individual", headers={"prefetch-count": "1000000"}
            )
            with pytest.raises(stompy.ServerError, match="max_stored_bytes"):
                with stompy.Connection(broker.url) as producer:
                    for _ in range(200):  # bounded: about the 90th is refused
                        producer.send("/queue/kept", b"x" * 10_000, receipt=True)
            held = sub.get_batch(200, timeout=1.0)
            assert 50 < len(held) < 150  # not the 200 sent
            assert broker.stats.bytes_stored <= LIMIT
            with stompy.Connection(broker.url) as other:  # served on
                other.send("/topic/else", "still here", receipt=True)


# -- what a connection's unsent output holds ------------------------------------------


def test_subscribers_output_shares_a_long_body_rather_than_copying_it() -> None:
    # Each subscriber's unsent output held a copy of every MESSAGE it was given, body
    # and all: ten topic subscribers that never read, four 30 MB messages, 941 MB.
    store = make()
    subscribers = [connected(store) for _ in range(3)]
    for peer in subscribers:
        peer.subscribe("/topic/long")
        peer.frames()
    producer = connected(store)
    body = bytes(range(256)) * 100  # 25,600 bytes: over SHARED_BODY
    producer.send("SEND", {"destination": "/topic/long"}, body)
    outputs = [peer.client.buffers_to_send(0.0) for peer in subscribers]
    shared = [next(piece for piece in pieces if len(piece) == len(body)) for pieces in outputs]
    assert all(piece is shared[0] for piece in shared)  # one body, not three
    assert bytes(shared[0]) == body
    # Written as it was queued, the frame is what it always was: one MESSAGE.
    producer.send("SEND", {"destination": "/topic/long"}, body)
    for peer in subscribers:
        frames = peer.client.frames_to_send(0.0)
        assert len(frames) == 1
        assert frames[0].startswith(b"MESSAGE\n")
        assert frames[0].endswith(body + b"\x00")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_subscribers_that_never_read_hold_no_copy_of_each_body(backend: str) -> None:
    # Ten topic subscribers that never read their sockets, 2 MB messages to their topic:
    # the broker's output held each body three times over for each of them (its own
    # output, what the loop connection held while the transport was full, and the
    # transport's buffer); now their bodies, shared.
    body = b"m" * 2_000_000
    subscribers: list[socket.socket] = []
    with run_broker(backend=backend) as broker:
        tracemalloc.start()
        try:
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
                sock.sendall(b"SUBSCRIBE\nid:1\ndestination:/topic/stuck\n\n\x00")
                subscribers.append(sock)
            deadline = time.monotonic() + 10
            while sum(bool(c.subscriptions) for c in broker.connections) < 10:
                assert time.monotonic() < deadline, broker.connections
                time.sleep(0.02)
            with stompy.Connection(broker.url) as producer:
                for _ in range(4):
                    producer.send("/topic/stuck", body, receipt=True)
                held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
            for sock in subscribers:
                sock.close()
    # The four bodies (the backlogs keep two), the parser's and the chunks the
    # transports hold: about 7 MB, where copies took 41 MB.
    assert held < 20_000_000, held


@pytest.mark.parametrize(
    ("backend", "websocket"), [("asyncio", False), ("trio", False), ("asyncio", True)]
)
def test_long_messages_arrive_whole_in_slices_to_a_reading_subscriber(
    backend: str, websocket: bool
) -> None:
    # Long bodies go out a slice at a time (a frame a message over WebSocket), between
    # short frames: each arrives whole and in order.
    bodies = [bytes([n]) * size for n, size in enumerate((700_000, 20, 300_000, 16_384))]
    with run_broker(backend=backend, websocket=websocket) as broker:
        url = broker.ws_url if websocket else broker.url
        assert url is not None
        with stompy.Connection(url) as conn, conn.subscribe("/topic/slices") as sub:
            for body in bodies:
                conn.send("/topic/slices", body)
            got = [sub.get(timeout=10) for _ in bodies]
    assert [m.body if m else None for m in got] == bodies

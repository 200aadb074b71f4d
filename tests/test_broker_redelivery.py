"""The broker's redelivery limit and dead-letter queues (off by default), and ``reset()``:
sans-IO, with the sessions of ``test_broker_core``."""

from __future__ import annotations

import logging

import pytest

from stompy._core.frames import V11, V12, Frame
from stompy.testing import BrokerConfig, BrokerStats
from stompy.testing._core.records import ConnectionState
from stompy.testing._core.store import MessageStore
from tests.test_broker_core import Peer, ack_headers, bodies, connected, deliver, make


def nack_until_gone(store: MessageStore, consumer: Peer, rounds: int) -> list[Frame]:
    """NACK the one message ``consumer`` holds, again and again (``rounds`` at most),
    as long as it comes back; every MESSAGE frame received."""
    received = [f for f in consumer.frames() if f.command == "MESSAGE"]
    for _ in range(rounds):
        consumer.send("NACK", ack_headers(V12, received[-1]))
        again = [f for f in consumer.frames() if f.command == "MESSAGE"]
        if not again:
            break
        received += again
    return received


def test_without_a_limit_a_nacked_message_comes_back_forever() -> None:
    store = make()
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual")
    connected(store).send("SEND", {"destination": "/queue/a"}, b"poison")
    received = nack_until_gone(store, consumer, rounds=20)
    assert len(received) == 21
    assert all(f.get("redelivered") == "true" for f in received[1:])
    assert store.stats.messages_dead_lettered == 0
    assert store.destinations() == ("/queue/a",)


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_after_max_redeliveries_a_message_goes_to_its_dead_letter_queue(limit: int) -> None:
    store = make(max_redeliveries=limit)
    consumer = connected(store)
    consumer.subscribe("/queue/orders", ack="client-individual")
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/orders", "order": "17"}, b"poison")
    received = nack_until_gone(store, consumer, rounds=limit + 5)
    assert len(received) == limit + 1  # the first delivery and `limit` redeliveries
    assert [f.get("redelivered") for f in received] == [None] + ["true"] * limit
    assert store.queue_depth("/queue/orders") == 0
    assert store.queue_depth("/queue/DLQ.orders") == 1
    stats = store.stats
    assert (stats.messages_nacked, stats.messages_dead_lettered) == (limit + 1, 1)

    inspector = connected(store)
    inspector.subscribe("/queue/DLQ.orders")
    (dead,) = inspector.frames()
    assert dead.body == b"poison"
    assert dead.get("message-id") == received[0].get("message-id")
    assert dead.get("original-destination") == "/queue/orders"
    assert dead.get("order") == "17"  # the user's headers travel along
    assert dead.get("redelivered") is None  # new in its queue


def test_a_lost_connection_counts_as_a_redelivery() -> None:
    store = make(max_redeliveries=1)
    connected(store).send("SEND", {"destination": "/queue/a"}, b"x")
    for expected in (None, "true"):
        consumer = connected(store)
        consumer.subscribe("/queue/a", ack="client")
        (message,) = consumer.frames()
        assert message.get("redelivered") == expected
        consumer.client.receive_eof()  # crashed before its ACK
    assert store.queue_depth("/queue/a") == 0
    assert store.queue_depth("/queue/DLQ.a") == 1


def test_a_cumulative_nack_dead_letters_in_order() -> None:
    store = make(max_redeliveries=0, dead_letter_queue="/queue/dead")
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client")
    messages = deliver(store, consumer, 3)
    consumer.send("NACK", ack_headers(V12, messages[2]))
    assert consumer.frames() == []
    assert store.stats.messages_dead_lettered == 3
    inspector = connected(store)
    inspector.subscribe("/queue/dead")
    assert bodies(inspector.frames()) == [b"0", b"1", b"2"]


def test_topic_messages_are_dead_lettered_per_subscription() -> None:
    store = make(max_redeliveries=0)
    nacking, acking = connected(store), connected(store)
    nacking.subscribe("/topic/news", ack="client-individual")
    acking.subscribe("/topic/news", ack="client-individual")
    (message,) = deliver(store, nacking, 1, "/topic/news")
    (other,) = [f for f in acking.frames() if f.command == "MESSAGE"]
    nacking.send("NACK", ack_headers(V12, message))
    acking.send("ACK", ack_headers(V12, other))
    assert store.queue_depth("/queue/DLQ.topic.news") == 1
    assert store.stats.messages_dead_lettered == 1


def test_one_shared_dead_letter_queue_is_delivered_at_once() -> None:
    store = make(max_redeliveries=0, dead_letter_queue="/queue/dead")
    watcher = connected(store)
    watcher.subscribe("/queue/dead")
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual", id="a")
    consumer.subscribe("/queue/b", ack="client-individual", id="b")
    for destination in ("/queue/a", "/queue/b"):
        (message,) = deliver(store, consumer, 1, destination)
        consumer.send("NACK", ack_headers(V12, message))
    dead = watcher.frames()
    assert [f.get("original-destination") for f in dead] == ["/queue/a", "/queue/b"]


def test_a_message_that_fails_in_its_dead_letter_queue_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make(max_redeliveries=0)
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual", id="a")
    consumer.subscribe("/queue/DLQ.a", ack="client-individual", id="dlq")
    (message,) = deliver(store, consumer, 1)
    consumer.send("NACK", ack_headers(V12, message))
    (dead,) = consumer.frames()
    assert dead.get("subscription") == "dlq"
    with caplog.at_level(logging.WARNING, "stompy.testing"):
        consumer.send("NACK", ack_headers(V12, dead))
    assert consumer.frames() == []
    assert store.destinations() == ("/queue/a", "/queue/DLQ.a")  # subscribed, empty
    assert store.queue_depth("/queue/DLQ.a") == 0
    assert store.stats.messages_dropped == 1
    assert "is dropped (it is in its dead-letter queue)" in caplog.text


def test_a_full_dead_letter_queue_drops(caplog: pytest.LogCaptureFixture) -> None:
    store = make(max_redeliveries=0, max_queue=1)
    for _ in range(2):
        consumer = connected(store)
        consumer.subscribe("/queue/a", ack="client-individual")
        (message,) = deliver(store, consumer, 1)
        with caplog.at_level(logging.WARNING, "stompy.testing"):
            consumer.send("NACK", ack_headers(V12, message))
        consumer.client.close()
    assert store.queue_depth("/queue/DLQ.a") == 1
    assert (store.stats.messages_dead_lettered, store.stats.messages_dropped) == (1, 1)
    assert "'/queue/DLQ.a' is full" in caplog.text


def test_a_nack_in_a_committed_transaction_counts() -> None:
    store = make(max_redeliveries=0)
    consumer = connected(store, V11)
    consumer.subscribe("/queue/a", ack="client-individual")
    (message,) = deliver(store, consumer, 1)
    consumer.send("BEGIN", {"transaction": "t"})
    consumer.send("NACK", {**ack_headers(V11, message), "transaction": "t"})
    assert store.stats.messages_dead_lettered == 0
    consumer.send("COMMIT", {"transaction": "t"})
    assert store.queue_depth("/queue/DLQ.a") == 1


@pytest.mark.parametrize(
    "options",
    [
        {"max_redeliveries": -1},
        {"dead_letter_queue": "/queue/dead"},  # no limit: it would never be used
        {"max_redeliveries": 1, "dead_letter_queue": ""},
        {"max_redeliveries": 1, "dead_letter_queue": "/temp-queue/x"},
        {"max_redeliveries": 1, "dead_letter_queue": "/queue/a\nb"},
    ],
)
def test_bad_redelivery_options(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"max_redeliveries|dead_letter_queue"):
        make(**options)


def test_the_limit_is_off_by_default() -> None:
    config = BrokerConfig()
    assert (config.max_redeliveries, config.dead_letter_queue) == (None, None)


# -- reset ------------------------------------------------------------------------------


def test_reset_forgets_every_message_and_counter() -> None:
    store = make(max_redeliveries=0)
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual")
    messages = deliver(store, consumer, 2)
    consumer.send("NACK", ack_headers(V12, messages[0]))  # to /queue/DLQ.a
    holder = connected(store)
    holder.subscribe("/topic/t", ack="client")
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/waiting"}, b"left over")
    assert store.stats != BrokerStats()

    store.reset()
    assert store.destinations() == ()
    assert store.connections == {}
    assert all(p.client.state is ConnectionState.CLOSED for p in (consumer, holder, producer))
    assert store.unacked_count() == 0
    assert store.stats == BrokerStats()

    # As new, but message ids go on: an ACK from before the reset matches nothing.
    after = connected(store)
    after.subscribe("/queue/a", ack="client-individual")
    (fresh,) = deliver(store, after, 1)
    assert fresh.get("message-id") not in {m.get("message-id") for m in messages}
    assert store.stats.connections_opened == 2


def test_stats_are_a_snapshot() -> None:
    store = make()
    stats = store.stats
    connected(store).send("SEND", {"destination": "/queue/a"}, b"x")
    assert stats.messages_received == 0
    stats.messages_received = 99
    assert store.stats.messages_received == 1

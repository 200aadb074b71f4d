"""The broker's redelivery limit and dead-letter queues (off by default), and ``reset()``:
sans-IO, with the sessions of ``test_broker_core``."""

from __future__ import annotations

import logging

import pytest

from stompy._core.frames import V11, V12, Frame
from stompy.testing import BrokerConfig, BrokerCore, BrokerStats, SessionState
from tests.test_broker_core import Peer, ack_headers, bodies, connected, deliver, make


def nack_until_gone(core: BrokerCore, consumer: Peer, rounds: int) -> list[Frame]:
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
    core = make()
    consumer = connected(core)
    consumer.subscribe("/queue/a", ack="client-individual")
    connected(core).send("SEND", {"destination": "/queue/a"}, b"poison")
    received = nack_until_gone(core, consumer, rounds=20)
    assert len(received) == 21
    assert all(f.get("redelivered") == "true" for f in received[1:])
    assert core.stats.messages_dead_lettered == 0
    assert core.destinations() == ("/queue/a",)


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_after_max_redeliveries_a_message_goes_to_its_dead_letter_queue(limit: int) -> None:
    core = make(max_redeliveries=limit)
    consumer = connected(core)
    consumer.subscribe("/queue/orders", ack="client-individual")
    producer = connected(core)
    producer.send("SEND", {"destination": "/queue/orders", "order": "17"}, b"poison")
    received = nack_until_gone(core, consumer, rounds=limit + 5)
    assert len(received) == limit + 1  # the first delivery and `limit` redeliveries
    assert [f.get("redelivered") for f in received] == [None] + ["true"] * limit
    assert core.queue_depth("/queue/orders") == 0
    assert core.queue_depth("/queue/DLQ.orders") == 1
    stats = core.stats
    assert (stats.messages_nacked, stats.messages_dead_lettered) == (limit + 1, 1)

    inspector = connected(core)
    inspector.subscribe("/queue/DLQ.orders")
    (dead,) = inspector.frames()
    assert dead.body == b"poison"
    assert dead.get("message-id") == received[0].get("message-id")
    assert dead.get("original-destination") == "/queue/orders"
    assert dead.get("order") == "17"  # the user's headers travel along
    assert dead.get("redelivered") is None  # new in its queue


def test_a_lost_connection_counts_as_a_redelivery() -> None:
    core = make(max_redeliveries=1)
    connected(core).send("SEND", {"destination": "/queue/a"}, b"x")
    for expected in (None, "true"):
        consumer = connected(core)
        consumer.subscribe("/queue/a", ack="client")
        (message,) = consumer.frames()
        assert message.get("redelivered") == expected
        consumer.session.receive_eof()  # crashed before its ACK
    assert core.queue_depth("/queue/a") == 0
    assert core.queue_depth("/queue/DLQ.a") == 1


def test_a_cumulative_nack_dead_letters_in_order() -> None:
    core = make(max_redeliveries=0, dead_letter_queue="/queue/dead")
    consumer = connected(core)
    consumer.subscribe("/queue/a", ack="client")
    messages = deliver(core, consumer, 3)
    consumer.send("NACK", ack_headers(V12, messages[2]))
    assert consumer.frames() == []
    assert core.stats.messages_dead_lettered == 3
    inspector = connected(core)
    inspector.subscribe("/queue/dead")
    assert bodies(inspector.frames()) == [b"0", b"1", b"2"]


def test_topic_messages_are_dead_lettered_per_subscription() -> None:
    core = make(max_redeliveries=0)
    nacking, acking = connected(core), connected(core)
    nacking.subscribe("/topic/news", ack="client-individual")
    acking.subscribe("/topic/news", ack="client-individual")
    (message,) = deliver(core, nacking, 1, "/topic/news")
    (other,) = [f for f in acking.frames() if f.command == "MESSAGE"]
    nacking.send("NACK", ack_headers(V12, message))
    acking.send("ACK", ack_headers(V12, other))
    assert core.queue_depth("/queue/DLQ.topic.news") == 1
    assert core.stats.messages_dead_lettered == 1


def test_one_shared_dead_letter_queue_is_delivered_at_once() -> None:
    core = make(max_redeliveries=0, dead_letter_queue="/queue/dead")
    watcher = connected(core)
    watcher.subscribe("/queue/dead")
    consumer = connected(core)
    consumer.subscribe("/queue/a", ack="client-individual", id="a")
    consumer.subscribe("/queue/b", ack="client-individual", id="b")
    for destination in ("/queue/a", "/queue/b"):
        (message,) = deliver(core, consumer, 1, destination)
        consumer.send("NACK", ack_headers(V12, message))
    dead = watcher.frames()
    assert [f.get("original-destination") for f in dead] == ["/queue/a", "/queue/b"]


def test_a_message_that_fails_in_its_dead_letter_queue_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = make(max_redeliveries=0)
    consumer = connected(core)
    consumer.subscribe("/queue/a", ack="client-individual", id="a")
    consumer.subscribe("/queue/DLQ.a", ack="client-individual", id="dlq")
    (message,) = deliver(core, consumer, 1)
    consumer.send("NACK", ack_headers(V12, message))
    (dead,) = consumer.frames()
    assert dead.get("subscription") == "dlq"
    with caplog.at_level(logging.WARNING, "stompy.testing"):
        consumer.send("NACK", ack_headers(V12, dead))
    assert consumer.frames() == []
    assert core.destinations() == ("/queue/a", "/queue/DLQ.a")  # subscribed, empty
    assert core.queue_depth("/queue/DLQ.a") == 0
    assert core.stats.messages_dropped == 1
    assert "is dropped (it is in its dead-letter queue)" in caplog.text


def test_a_full_dead_letter_queue_drops(caplog: pytest.LogCaptureFixture) -> None:
    core = make(max_redeliveries=0, max_queue=1)
    for _ in range(2):
        consumer = connected(core)
        consumer.subscribe("/queue/a", ack="client-individual")
        (message,) = deliver(core, consumer, 1)
        with caplog.at_level(logging.WARNING, "stompy.testing"):
            consumer.send("NACK", ack_headers(V12, message))
        consumer.session.close()
    assert core.queue_depth("/queue/DLQ.a") == 1
    assert (core.stats.messages_dead_lettered, core.stats.messages_dropped) == (1, 1)
    assert "'/queue/DLQ.a' is full" in caplog.text


def test_a_nack_in_a_committed_transaction_counts() -> None:
    core = make(max_redeliveries=0)
    consumer = connected(core, V11)
    consumer.subscribe("/queue/a", ack="client-individual")
    (message,) = deliver(core, consumer, 1)
    consumer.send("BEGIN", {"transaction": "t"})
    consumer.send("NACK", {**ack_headers(V11, message), "transaction": "t"})
    assert core.stats.messages_dead_lettered == 0
    consumer.send("COMMIT", {"transaction": "t"})
    assert core.queue_depth("/queue/DLQ.a") == 1


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
    core = make(max_redeliveries=0)
    consumer = connected(core)
    consumer.subscribe("/queue/a", ack="client-individual")
    messages = deliver(core, consumer, 2)
    consumer.send("NACK", ack_headers(V12, messages[0]))  # to /queue/DLQ.a
    holder = connected(core)
    holder.subscribe("/topic/t", ack="client")
    producer = connected(core)
    producer.send("SEND", {"destination": "/queue/waiting"}, b"left over")
    assert core.stats != BrokerStats()

    core.reset()
    assert core.destinations() == ()
    assert core.sessions == {}
    assert all(p.session.state is SessionState.CLOSED for p in (consumer, holder, producer))
    assert core.unacked_count() == 0
    assert core.stats == BrokerStats()

    # As new, but message ids go on: an ACK from before the reset matches nothing.
    after = connected(core)
    after.subscribe("/queue/a", ack="client-individual")
    (fresh,) = deliver(core, after, 1)
    assert fresh.get("message-id") not in {m.get("message-id") for m in messages}
    assert core.stats.connections_opened == 2


def test_stats_are_a_snapshot() -> None:
    core = make()
    stats = core.stats
    connected(core).send("SEND", {"destination": "/queue/a"}, b"x")
    assert stats.messages_received == 0
    stats.messages_received = 99
    assert core.stats.messages_received == 1

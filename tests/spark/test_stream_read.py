"""The driver-side subscriptions of the streaming read, against the in-process broker."""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import stompy
from stompy.errors import ConfigurationError
from stompy.spark._arrow import from_ipc
from stompy.spark._stream_read import GATHER, StreamConsumer, TriggerNotSupported
from stompy.testing import Broker, run_broker
from tests.spark._reading import closed_port, fill, planned, read_settings, rows, until


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=100_000) as running:
        yield running


def test_stream_consumer_acks_a_batch_once_the_next_is_planned(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 25)
    settings = read_settings(broker.url, maxMessagesPerBatch="10", prefetch="100")
    consumer = StreamConsumer(settings)
    try:
        start = consumer.initial()
        end = consumer.latest(start, 10)
        assert end == start + 10
        batch = planned(consumer.plan(start, end))
        assert [r["body"] for r in batch] == [str(i).encode() for i in range(10)]
        assert [r["offset"] for r in batch] == list(range(start, end))
        assert batch[0]["destination"] == "/queue/in"
        assert dict(batch[0]["headers"])["destination"] == "/queue/in"
        assert batch[0]["content_type"] == "text/plain;charset=utf-8"
        assert batch[0]["redelivered"] is False
        assert broker.unacked_count("/queue/in") == 25  # Spark is not done with anything
        # PySpark 4.0 and 4.1 give no start: the last end is where the next batch begins.
        end2 = consumer.latest(None, 10)
        assert end2 == end + 10
        # The first batch is in the sink: acknowledged.
        broker.wait_until(lambda: broker.unacked_count("/queue/in") == 15)
        consumer.plan(end, end2)
        consumer.commit(end2)
        broker.wait_until(lambda: broker.unacked_count("/queue/in") == 5)
        end3 = consumer.latest(end2, None)
        assert end3 == end2 + 5
        assert consumer.latest(end3, None) == end3  # idle
    finally:
        consumer.close()
    assert broker.unacked_count("/queue/in") == 0
    assert broker.queue_depth("/queue/in") == 5  # the unfinished batch went back


def test_the_intake_leaves_the_reading_to_the_gathering_io_thread(broker: Broker) -> None:
    # A take that waits reads the socket itself (a few frames a read); the source's
    # connections gather their reads in the I/O thread instead (IOThread.gather).
    fill(broker.url, "/queue/in", 50)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="1000"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        (conn,) = consumer._conns
        io = conn._io
        assert io.gather == GATHER > 0
        reads = io._reads  # the callers' reads of the socket (the SUBSCRIBE's receipt)
        got = end - start
        fill(broker.url, "/queue/in", 250, start=50)
        for _ in range(100):
            if got >= 300:
                break
            consumer.plan(start, end)
            start, end = end, consumer.latest(end, None)
            got += end - start
        assert got == 300
        assert io._reads == reads
    finally:
        consumer.close()


def test_a_restarted_reader_gets_what_was_not_finished(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 6)
    clock = iter([10_000_000, 20_000_000]).__next__
    settings = read_settings(broker.url)
    first = StreamConsumer(settings, clock=clock)
    start = first.initial()
    assert start == 10_000
    end = first.latest(start, 4)
    first.plan(start, end)
    # The query stops mid-batch: the process ends, nothing was acknowledged.
    first.close()
    second = StreamConsumer(settings, clock=clock)
    try:
        assert second.plan(start, end) == []  # Spark replays the batch: it comes anew
        new_end = second.latest(end, None)
        batch = planned(second.plan(end, new_end))
        assert new_end == 20_000 + 6
        assert sorted(r["body"] for r in batch) == [str(i).encode() for i in range(6)]
        assert all(r["redelivered"] for r in batch)  # delivered before (prefetched)
        second.latest(new_end, None)
        broker.wait_until(lambda: broker.unacked_count("/queue/in") == 0)
    finally:
        second.close()
    assert broker.queue_depth("/queue/in") == 0


def test_numbering_continues_past_a_checkpoint_ahead_of_the_clock(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(read_settings(broker.url), clock=lambda: 5_000)
    try:
        end = consumer.latest(9_000, None)
        assert end == 9_001
        assert [r["offset"] for r in planned(consumer.plan(9_000, end))] == [9_000]
    finally:
        consumer.close()


def test_a_replayed_batch_first_pushes_the_numbering_past_it(broker: Broker) -> None:
    consumer = StreamConsumer(read_settings(broker.url), clock=lambda: 0)
    assert consumer.plan(400, 600) == []  # replayed from the checkpoint: comes anew
    assert consumer.book.base == 600
    assert not broker.connections  # planning alone does not subscribe
    consumer.close()


def test_available_now_waits_for_the_destination_to_be_idle(broker: Broker) -> None:
    consumer = StreamConsumer(read_settings(broker.url, idleTimeout="0.3"))
    try:
        consumer.available_now()
        start = consumer.initial()
        assert consumer.latest(start, None, all_available=True) == start  # idle: done
        fill(broker.url, "/queue/in", 3)
        assert consumer.latest(start, None) == start + 3
    finally:
        consumer.close()


def test_trigger_once_is_refused_before_anything_is_read(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 3)
    consumer = StreamConsumer(read_settings(broker.url))
    try:
        with pytest.raises(TriggerNotSupported, match=r"Trigger\.Once.*availableNow=True"):
            consumer.latest(consumer.initial(), None, all_available=True)
        assert isinstance(TriggerNotSupported("x"), ConfigurationError)
        assert not any(c.subscriptions for c in broker.connections)  # refused first
    finally:
        consumer.close()
    assert broker.queue_depth("/queue/in") == 3


def test_a_batch_never_outgrows_the_limit(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 50)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="5"))
    try:
        start = consumer.initial()
        # Even asked for everything, the source holds one batch; the rest of the
        # prefetch waits in the connection until that batch is planned.
        end = consumer.latest(start, None)
        assert end == start + 5
        assert len(consumer.book) == 5
        consumer.plan(start, end)
        assert consumer.latest(end, None) == end + 5
        # The first batch was acknowledged: 45 left, queued or delivered.
        broker.wait_until(
            lambda: broker.queue_depth("/queue/in") + broker.unacked_count("/queue/in") == 45
        )
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("server", "rows", "prefetch"),
    [("stompy-broker/0.1", 100_000, 200_000), ("RabbitMQ/3.10.8", 32_000, 64_000)],
)
def test_the_default_batch_is_as_large_as_the_brokers_prefetch_lets_it_pipeline(
    server: str, rows: int, prefetch: int
) -> None:
    # The subscription asks for two batches (one in Spark's hands, the next
    # arriving), past RabbitMQ's 16-bit limit only where the broker is not RabbitMQ.
    with run_broker(server_name=server) as running:
        fill(running.url, "/queue/in", 3)
        consumer = StreamConsumer(read_settings(running.url))
        try:
            start = consumer.initial()
            # Spark asks for the default read limit it was given (batch_rows).
            end = consumer.latest(start, consumer.settings.batch_rows)
            assert end == start + 3
            (conn,) = running.connections
            (sub,) = conn.subscriptions
            assert sub.prefetch == prefetch
            assert consumer._rows == rows
        finally:
            consumer.close()


def test_a_large_batch_is_spread_over_the_partitions(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 10)
    consumer = StreamConsumer(read_settings(broker.url, numPartitions="4"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        parts = consumer.plan(start, end)
        sizes = [len(rows(from_ipc(p))) for p in parts]
        assert sizes == [2, 3, 2, 3]
        assert [r["offset"] for r in planned(parts)] == list(range(start, end))
        fill(broker.url, "/queue/in", 2)
        end2 = consumer.latest(end, None)
        assert len(consumer.plan(end, end2)) == 2  # never an empty partition
    finally:
        consumer.close()


def test_several_destinations_one_subscription_each(broker: Broker) -> None:
    fill(broker.url, "/queue/a", 3)
    fill(broker.url, "/queue/b", 2)
    settings = read_settings(broker.url, destination="/queue/a, /queue/b")
    assert settings.destinations == ("/queue/a", "/queue/b")
    consumer = StreamConsumer(settings)
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        assert end == start + 5
        got = planned(consumer.plan(start, end))
        by_destination = {
            d: sorted(r["body"] for r in got if r["destination"] == d)
            for d in ("/queue/a", "/queue/b")
        }
        assert by_destination == {"/queue/a": [b"0", b"1", b"2"], "/queue/b": [b"0", b"1"]}
        # A connection each: RabbitMQ's cumulative ACK spans a whole connection.
        assert sum(1 for c in broker.connections if c.subscriptions) == 2
        consumer.latest(end, None)  # the batch is done: one ACK per subscription
        broker.wait_until(lambda: broker.unacked_count("/queue/a") == 0)
        broker.wait_until(lambda: broker.unacked_count("/queue/b") == 0)
    finally:
        consumer.close()
    assert broker.queue_depth("/queue/a") == broker.queue_depth("/queue/b") == 0


def test_the_default_reconnect_rides_out_a_broker_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with run_broker() as first:
        port = first.port
        fill(first.url, "/queue/in", 2)
        settings = read_settings(first.url)
        consumer = StreamConsumer(settings)
        start = consumer.initial()
        end = consumer.latest(start, None)
        assert end == start + 2
        consumer.plan(start, end)
    # The broker is gone (and its queue with it) for about three seconds.
    restarted = threading.Event()
    done: list[Broker] = []

    def come_back() -> None:
        time.sleep(3.0)
        with run_broker(port=port) as second:
            done.append(second)
            fill(second.url, "/queue/in", 1, start=7)
            restarted.set()
            for _ in range(300):
                if not done:
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=come_back)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="stompy"):
            assert restarted.wait(30)
            deadline = time.monotonic() + 30
            end2 = end
            while end2 == end and time.monotonic() < deadline:
                end2 = consumer.latest(end, None)
            assert [r["body"] for r in planned(consumer.plan(end, end2))] == [b"7"]
        assert "reconnect" in caplog.text.lower() or "lost" in caplog.text.lower()
    finally:
        consumer.close()
        done.clear()
        thread.join(30)


def test_the_next_batch_is_taken_in_while_spark_runs_the_one_before(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 35)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="10"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        # Nobody calls the source while Spark runs the batch: the intake numbers and
        # converts the next one meanwhile, and stops one batch ahead.
        assert until(lambda: consumer.book.unplanned() == 10)
        time.sleep(0.1)
        assert consumer.book.unplanned() == 10
        assert len(consumer.book) == 20
        end2 = consumer.latest(end, None)
        assert end2 == end + 10
        assert [r["body"] for r in planned(consumer.plan(end, end2))] == [
            str(i).encode() for i in range(10, 20)
        ]
    finally:
        consumer.close()


def test_offsets_follow_each_subscriptions_order(broker: Broker) -> None:
    # The cumulative ACK of a batch covers every earlier delivery of its subscription,
    # so within a subscription the numbering must be the delivery order.
    fill(broker.url, "/queue/a", 300)
    fill(broker.url, "/queue/b", 200)
    settings = read_settings(broker.url, destination="/queue/a, /queue/b", maxMessagesPerBatch="70")
    consumer = StreamConsumer(settings)
    got: list[dict[str, Any]] = []
    try:
        start = consumer.initial()
        for _ in range(100):
            end = consumer.latest(start, None)
            got += planned(consumer.plan(start, end))
            start = end
            if len(got) == 500:
                break
    finally:
        consumer.close()
    assert [r["offset"] for r in got] == sorted(r["offset"] for r in got)
    for destination, count in (("/queue/a", 300), ("/queue/b", 200)):
        bodies = [int(r["body"]) for r in got if r["destination"] == destination]
        assert bodies == list(range(count))


def test_closing_stops_the_intake(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 3)
    consumer = StreamConsumer(read_settings(broker.url))
    start = consumer.initial()
    assert consumer.latest(start, None) == start + 3
    intakes = [t for t in threading.enumerate() if t.name == "stompy-spark-intake"]
    assert len(intakes) == 1
    consumer.close()
    assert not intakes[0].is_alive()
    assert broker.queue_depth("/queue/in") == 3  # nothing was acknowledged


def test_stream_consumer_pickles_to_its_settings(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(read_settings(broker.url))
    try:
        consumer.latest(consumer.initial(), None)
        copy = pickle.loads(pickle.dumps(consumer))
        assert copy.settings == consumer.settings
        assert copy._conns == []
        assert "StreamConsumer" in repr(copy)
    finally:
        consumer.close()
        consumer.close()


def test_durable_subscription_keeps_its_name(broker: Broker) -> None:
    consumer = StreamConsumer(read_settings(broker.url, durableName="audit-trail"))
    try:
        consumer.latest(consumer.initial(), None)
        subs = [s for c in broker.connections for s in c.subscriptions]
        assert [s.id for s in subs] == ["audit-trail"]
    finally:
        consumer.close()


def test_an_unreachable_broker_is_named_by_the_stream() -> None:
    url = f"stomp://127.0.0.1:{closed_port()}"
    # A streaming source retries as it would after an outage (minutes by default).
    settings = read_settings(url, connectTimeout="2", reconnectAttempts="2", reconnectDelay="0.1")
    with pytest.raises(stompy.ConnectFailed, match=rf"127\.0\.0\.1:{url.rsplit(':', 1)[1]}"):
        StreamConsumer(settings).latest(None, None)


def test_a_broker_gone_for_good_fails_the_stream_once_reconnecting_gave_up() -> None:
    with run_broker() as broker:
        fill(broker.url, "/queue/in", 1)
        settings = read_settings(
            broker.url, reconnectAttempts="2", reconnectDelay="0.1", connectTimeout="1"
        )
        consumer = StreamConsumer(settings)
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
    try:
        deadline = time.monotonic() + 30
        with pytest.raises(stompy.NetworkError):
            while time.monotonic() < deadline:
                consumer.latest(end, None)
                time.sleep(0.1)
    finally:
        consumer.close()


def _trickle(url: str, count: int, every: float, stop: threading.Event) -> threading.Thread:
    """A producer thread sending ``count`` messages ``every`` seconds apart (in tens)."""

    def produce() -> None:
        with stompy.Connection(url) as conn:
            for first in range(0, count, 10):
                if stop.is_set():
                    return
                conn.send_many(
                    [stompy.Outgoing("/queue/in", str(i)) for i in range(first, first + 10)]
                )
                time.sleep(every * 10)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("delay", [None, "0"])
def test_under_a_backlog_a_batch_waits_for_its_rows(broker: Broker, delay: str | None) -> None:
    # Messages arrive at about 2,000 a second: a batch started with what had arrived
    # would hold the few that came while Spark ran the one before; it waits for its
    # 600 rows instead (``maxTriggerDelay``, 2 s by default; 0: never).
    options = {"maxMessagesPerBatch": "600"} | ({} if delay is None else {"maxTriggerDelay": delay})
    stop = threading.Event()
    producer = _trickle(broker.url, 4000, 0.0005, stop)
    consumer = StreamConsumer(read_settings(broker.url, True, **options))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        time.sleep(0.05)  # Spark runs the batch: about a hundred more arrive meanwhile
        begun = time.monotonic()
        end2 = consumer.latest(end, None)
        waited = time.monotonic() - begun
        if delay is None:
            assert end2 - end == 600
            assert waited < 2.0
        else:
            assert end2 - end < 600
            assert waited < 0.2
    finally:
        stop.set()
        consumer.close()
        producer.join(10)


def test_a_slow_stream_is_not_held_back_for_a_full_batch(broker: Broker) -> None:
    # 50 messages a second are a trickle beside a 10,000-row batch: the batch takes
    # what had arrived, it does not wait for more.
    stop = threading.Event()
    producer = _trickle(broker.url, 200, 0.02, stop)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="10000"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        time.sleep(0.3)  # ten more came meanwhile
        begun = time.monotonic()
        end2 = consumer.latest(end, None)
        assert time.monotonic() - begun < 1.0  # the delay is 2 s
        assert 0 < end2 - end < 100
    finally:
        stop.set()
        consumer.close()
        producer.join(10)


def test_the_first_batch_does_not_wait_out_the_idle_timeout(broker: Broker) -> None:
    # The intake may take every queued message before the first batch's wait begins:
    # those are the batch, not a reason to wait idleTimeout for more.
    fill(broker.url, "/queue/in", 100)
    consumer = StreamConsumer(read_settings(broker.url, idleTimeout="5"))
    try:
        begun = time.monotonic()
        start = consumer.initial()
        end = consumer.latest(start, None)
        assert end - start == 100
        assert time.monotonic() - begun < 2.5
    finally:
        consumer.close()


def test_the_intake_converts_a_stream_in_few_chunks(broker: Broker) -> None:
    # Under a steady stream a take brings what one read of the socket held, a few
    # messages; turning each take into Arrow columns cost a few hundred microseconds
    # whatever its size. The intake lets the messages gather, and a call that waits
    # for them has the rest converted at once.
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="5000"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        with stompy.Connection(broker.url) as conn:
            for group in range(100):  # 2,000 messages, 20 at a time
                conn.send_many(
                    [stompy.Outgoing("/queue/in", str(20 * group + i)) for i in range(20)]
                )
                time.sleep(0.002)
        # Spark runs the batch: the intake takes them in meanwhile.
        assert until(lambda: consumer._arrived == 2001)
        end2 = consumer.latest(end, None)
        assert end2 - end == 2000
        assert len(consumer._columns.between(end, end2)) <= 2
        assert [r["body"] for r in planned(consumer.plan(end, end2))] == [
            str(i).encode() for i in range(2000)
        ]
    finally:
        consumer.close()


def test_what_came_while_a_batch_waited_for_rows_is_in_it(broker: Broker) -> None:
    # While a batch waits for fuller rows (maxTriggerDelay), the intake lets what it
    # takes gather unconverted; when the wait ends, that is converted and in the batch.
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(
        read_settings(broker.url, maxMessagesPerBatch="1000", maxTriggerDelay="1")
    )
    conn = stompy.Connection(broker.url)

    def produce_during_the_wait() -> None:
        # The batch began with the first 200: it waits for more now.
        assert until(lambda: consumer.book.unplanned() == 200)
        conn.send_many([stompy.Outgoing("/queue/in", str(i)) for i in range(200, 600)])

    producer = threading.Thread(target=produce_during_the_wait, daemon=True)
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        conn.connect()
        conn.send_many([stompy.Outgoing("/queue/in", str(i)) for i in range(200)], receipt=True)
        assert until(lambda: consumer._arrived == 201)  # taken in, not converted yet
        assert consumer.book.unplanned() == 0
        producer.start()
        end2 = consumer.latest(end, None)
        assert end2 - end == 600
        assert [r["body"] for r in planned(consumer.plan(end, end2))] == [
            str(i).encode() for i in range(600)
        ]
    finally:
        producer.join(10)
        conn.close()
        consumer.close()

"""The connector's logic without Spark: offsets, the driver-side subscription, draining, sending.

Everything here runs against stompy's in-process broker, in this process.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import stompy
from stompy.errors import ConfigurationError, LocalProtocolError
from stompy.spark._arrow import READ_ARROW_SCHEMA, from_ipc
from stompy.spark._core import (
    READ_SCHEMA,
    OffsetBook,
    StreamConsumer,
    TaskIdentity,
    TriggerNotSupported,
    WriteColumns,
    dedup_id,
    drain,
    offset_dict,
    offset_value,
    write_partition,
)
from stompy.spark._options import ReadSettings, parse_read_options, parse_write_options
from stompy.testing import Broker, run_broker

WHEN_US = 1_704_153_600_000_000  # 2024-01-02 00:00 UTC


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=100_000) as running:
        yield running


def fill(url: str, destination: str, count: int, start: int = 0) -> None:
    with stompy.Connection(url) as conn:
        messages = (stompy.Outgoing(destination, str(i)) for i in range(start, start + count))
        conn.send_many(messages, receipt=True)


def take_all(url: str, destination: str) -> list[stompy.Message]:
    got: list[stompy.Message] = []
    with stompy.Connection(url) as conn, conn.subscribe(destination) as sub:
        for _ in range(100_000):
            message = sub.get(timeout=0.5)
            if message is None:
                break
            got.append(message)
    return got


def read_settings(url: str, streaming: bool = True, **options: str) -> ReadSettings:
    base = {"url": url, "destination": "/queue/in", "idleTimeout": "0.5", **options}
    return parse_read_options({k.lower(): v for k, v in base.items()}, streaming=streaming)


def rows(batches: Iterable[pa.RecordBatch]) -> list[dict[str, Any]]:
    """The rows of record batches as dicts, checking each batch has the read schema."""
    result: list[dict[str, Any]] = []
    for batch in batches:
        assert batch.schema.equals(READ_ARROW_SCHEMA)
        result.extend(batch.to_pylist())
    return result


def planned(parts: list[bytes]) -> list[dict[str, Any]]:
    return rows(b for part in parts for b in from_ipc(part))


# -- offsets ------------------------------------------------------------------------------


def test_offsets_round_trip_and_reject_strangers() -> None:
    assert offset_value(offset_dict(42)) == 42
    bad: Any
    for bad in ({}, {"seq": -1}, {"seq": "1"}, {"seq": True}, []):
        with pytest.raises(ValueError, match="not an offset"):
            offset_value(bad)


def test_book_numbers_messages_and_plans_batches() -> None:
    book: OffsetBook[str] = OffsetBook(100)
    for name in "abcde":
        book.add(name, 7)
    assert len(book) == 5
    end = book.latest(100, 3)
    assert end == 103
    batch = book.plan(100, end)
    assert (batch.first, batch.handles, batch.received_us) == (100, ["a", "b", "c"], [7, 7, 7])
    assert book.unplanned() == 2
    assert book.latest(None, None) == 105  # PySpark 4.0: from where the last one ended
    assert book.latest(105, None) == 105  # nothing new


def test_book_releases_only_what_spark_was_handed() -> None:
    book: OffsetBook[str] = OffsetBook(0)
    for name in "abcd":
        book.add(name, 0)
    end = book.latest(0, 2)
    assert book.release(end) == []  # not planned yet: nothing to let go
    book.plan(0, end)
    assert book.release(end) == ["a", "b"]
    assert book.release(end) == []
    assert book.release(77) == []  # never issued
    later = book.latest(end, None)
    assert book.plan(end, later).handles == ["c", "d"]
    assert book.release(later) == ["c", "d"]
    assert len(book) == 0


def test_offsets_of_an_earlier_run() -> None:
    book: OffsetBook[str] = OffsetBook(1000)
    book.add("x", 0)
    # Spark starts from a checkpointed offset this run never issued.
    assert book.latest(500, None) == 1001
    assert book.plan(400, 500).handles == []  # a batch of the earlier run: empty
    assert book.plan(500, 1001).handles == ["x"]
    assert book.release(500) == []


# -- the driver-side subscription ----------------------------------------------------------


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


def _until(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


def test_the_next_batch_is_taken_in_while_spark_runs_the_one_before(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 35)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="10"))
    try:
        start = consumer.initial()
        end = consumer.latest(start, None)
        consumer.plan(start, end)
        # Nobody calls the source while Spark runs the batch: the intake numbers and
        # converts the next one meanwhile, and stops one batch ahead.
        assert _until(lambda: consumer.book.unplanned() == 10)
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


# -- batch read ------------------------------------------------------------------------------


def test_drain_takes_what_is_queued_and_acks_at_the_end(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 30)
    settings = read_settings(broker.url, streaming=False, idleTimeout="0.3")
    batches = drain(settings, 1, now_us=lambda: WHEN_US)
    got = rows([next(batches)])
    assert [r["body"] for r in got] == [str(i).encode() for i in range(30)]
    assert got[0]["received_at"].timestamp() == WHEN_US / 1e6
    # offsets are unique in the whole read: partition 1 of 2 numbers 1, 3, 5, ...
    assert [r["offset"] for r in got] == list(range(1, 60, 2))
    assert broker.unacked_count("/queue/in") == 30  # nothing acknowledged mid-task
    assert list(batches) == []
    assert broker.unacked_count("/queue/in") == 0
    assert broker.queue_depth("/queue/in") == 0


def test_a_drain_stopped_early_gives_everything_back(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 10)
    batches = drain(read_settings(broker.url, streaming=False))
    assert rows([next(batches)])[0]["body"] == b"0"
    batches.close()
    assert broker.queue_depth("/queue/in") == 10
    assert all(m.redelivered for m in take_all(broker.url, "/queue/in")[:1])


def test_a_drain_reads_past_its_prefetch_through_windows(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 600)
    settings = read_settings(broker.url, streaming=False, prefetch="100", idleTimeout="0.3")
    got = rows(drain(settings))
    assert sorted(int(r["body"]) for r in got) == list(range(600))
    assert broker.queue_depth("/queue/in") == 0
    assert broker.unacked_count("/queue/in") == 0


def test_a_window_left_quiet_still_has_what_reaches_it_read(broker: Broker) -> None:
    # The first window takes 5 messages and goes quiet, so the task opens a second;
    # messages sent then reach both windows (the broker spreads them over its two
    # subscriptions): those of the first are read too, not left unread to the end.
    fill(broker.url, "/queue/in", 5)
    settings = read_settings(broker.url, streaming=False, prefetch="100", idleTimeout="1")
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(rows(drain(settings))))
    reader.start()
    broker.wait_until(
        lambda: sum(len(c.subscriptions) for c in broker.connections) >= 2, timeout=10
    )
    fill(broker.url, "/queue/in", 60, start=5)
    reader.join(30)
    assert sorted(int(r["body"]) for r in got) == list(range(65))
    assert broker.queue_depth("/queue/in") == broker.unacked_count("/queue/in") == 0


def test_drains_running_together_share_the_queue(broker: Broker) -> None:
    # Both drains subscribe before the messages come: with the queue filled first, one
    # of them could take all 6,000 before the other's thread ran (as on a loaded
    # machine it did). The long idleTimeout covers the wait for the first message.
    settings = read_settings(broker.url, streaming=False, idleTimeout="5")
    results: dict[int, list[dict[str, Any]]] = {}

    def task(index: int) -> None:
        results[index] = rows(drain(settings, index))

    threads = [threading.Thread(target=task, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    broker.wait_until(
        lambda: sum(1 for c in broker.connections if c.subscriptions) >= 2, timeout=10
    )
    fill(broker.url, "/queue/in", 6000)
    for thread in threads:
        thread.join(60)
    counts = sorted(len(r) for r in results.values())
    assert sum(counts) == 6000
    assert counts[0] >= 1000, counts  # both took a real share
    offsets = [r["offset"] for part in results.values() for r in part]
    assert len(set(offsets)) == 6000  # unique across the partitions
    assert broker.queue_depth("/queue/in") == broker.unacked_count("/queue/in") == 0


def test_drain_stops_at_the_per_task_limit_and_says_so(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    fill(broker.url, "/queue/in", 10)
    settings = read_settings(broker.url, streaming=False, maxMessagesPerPartition="4")
    with caplog.at_level(logging.WARNING, logger="stompy.spark"):
        assert len(rows(drain(settings))) == 4
    assert "stopped at maxMessagesPerPartition=4" in caplog.text
    assert broker.queue_depth("/queue/in") == 6


def test_a_topic_is_read_through_one_subscription(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    settings = read_settings(
        broker.url, streaming=False, destination="/topic/t", prefetch="5", idleTimeout="1"
    )
    batches = drain(settings)
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(rows(batches)))
    with caplog.at_level(logging.WARNING, logger="stompy.spark"):
        reader.start()
        broker.wait_until(lambda: any(c.subscriptions for c in broker.connections), timeout=5)
        fill(broker.url, "/topic/t", 8)
        reader.join(30)
    # A second subscription to a topic would copy its messages: one only, so the
    # prefetch bounds the read, and a WARNING says so.
    assert len(got) == 5
    assert "its subscription" in caplog.text
    assert "raise 'prefetch'" in caplog.text


def test_drain_reads_several_destinations(broker: Broker) -> None:
    fill(broker.url, "/queue/a", 2)
    fill(broker.url, "/queue/b", 3)
    settings = read_settings(
        broker.url, streaming=False, destination="/queue/a,/queue/b", idleTimeout="0.3"
    )
    got = rows(drain(settings))
    assert [(r["destination"], r["body"]) for r in got] == [
        ("/queue/a", b"0"),
        ("/queue/a", b"1"),
        ("/queue/b", b"0"),
        ("/queue/b", b"1"),
        ("/queue/b", b"2"),
    ]
    assert broker.queue_depth("/queue/a") == broker.queue_depth("/queue/b") == 0


def test_browse_leaves_the_queue_as_it_was(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 5)
    settings = read_settings(broker.url, streaming=False, mode="browse", idleTimeout="0.3")
    got = rows(drain(settings))
    assert [r["body"] for r in got] == [str(i).encode() for i in range(5)]
    assert broker.queue_depth("/queue/in") == 5  # this broker does not browse: given back


def test_browse_stops_at_the_brokers_end_marker(broker: Broker) -> None:
    # A browsing broker (ActiveMQ, Apollo) ends a browse with a ``browser:end`` message;
    # played here by a message that carries the header.
    fill(broker.url, "/queue/in", 3)
    with stompy.Connection(broker.url) as conn:
        conn.send("/queue/in", "", headers={"browser": "end"})
    fill(broker.url, "/queue/in", 2, start=3)
    settings = read_settings(broker.url, streaming=False, mode="browse")
    got = rows(drain(settings))
    assert [r["body"] for r in got] == [b"0", b"1", b"2"]  # neither the marker nor after


# -- writing ------------------------------------------------------------------------------


def test_write_columns_from_the_schema() -> None:
    columns = WriteColumns.from_schema(
        [("Headers", "map<string,string>"), ("body", "binary"), ("DESTINATION", "varchar(20)")],
        None,
    )
    assert columns == WriteColumns(body=1, destination=2, headers=0)
    assert WriteColumns.from_schema([("body", "string")], "/queue/x").body == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("body", "string"), ("value", "int")], "column 'value' cannot be written"),
        ([("destination", "string")], "needs a 'body' column"),
        ([("body", "int")], "'body' must be binary or string, not int"),
        ([("body", "string"), ("headers", "map<string,int>")], "'headers' must be map"),
        ([("body", "string"), ("BODY", "string")], "appears twice"),
    ],
)
def test_bad_write_schemas_are_named(fields: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WriteColumns.from_schema(fields, "/queue/x")


def test_a_destination_is_needed() -> None:
    with pytest.raises(ValueError, match="'destination' option or a 'destination' column"):
        WriteColumns.from_schema([("body", "string")], None)


def test_dedup_ids_are_deterministic() -> None:
    task = TaskIdentity("q", "7", 3, attempt=2)
    assert dedup_id(task, 11) == "q.7.3.11"
    assert dedup_id(TaskIdentity("q", "7", 3, attempt=0), 11) == dedup_id(task, 11)


def test_write_partition_sends_and_confirms(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "sendheaders": '{"kind": "test"}'}
    )
    columns = WriteColumns.from_schema(
        [
            ("body", "binary"),
            ("destination", "string"),
            ("headers", "map<string,string>"),
            ("content_type", "string"),
        ],
        settings.destination,
    )
    rows = [
        (bytearray(b"one"), None, {"n": "1", "skip": None}, "application/json"),
        (b"two", "/queue/other", None, None),
        (memoryview(b"three"), None, {"kind": "override"}, None),
    ]
    task = TaskIdentity("query", "5", 2)
    assert write_partition(iter(rows), settings, columns, task) == 3
    out = take_all(broker.url, "/queue/out")
    assert [m.body for m in out] == [b"one", b"three"]
    assert out[0].headers["n"] == "1"
    assert "skip" not in out[0].headers
    assert out[0].content_type == "application/json"
    assert out[0].headers["kind"] == "test"
    assert out[1].headers["kind"] == "override"
    assert [m.headers["stompy-dedup-id"] for m in out] == ["query.5.2.0", "query.5.2.2"]
    other = take_all(broker.url, "/queue/other")
    assert [m.body for m in other] == [b"two"]


def test_write_partition_takes_arrow_batches(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    fields = [
        ("body", "binary"),
        ("destination", "string"),
        ("headers", "map<string,string>"),
        ("content_type", "string"),
    ]
    columns = WriteColumns.from_schema(fields, settings.destination)
    schema = pa.schema(
        [
            ("body", pa.binary()),
            ("destination", pa.string()),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("content_type", pa.string()),
        ]
    )
    first = pa.RecordBatch.from_pylist(
        [
            {"body": b"a", "destination": None, "headers": [("n", "1")], "content_type": None},
            {"body": b"b", "destination": "/queue/x", "headers": None, "content_type": "t/x"},
        ],
        schema=schema,
    )
    second = pa.RecordBatch.from_pylist(
        [{"body": b"c", "destination": None, "headers": [("n", None)], "content_type": None}],
        schema=schema,
    )
    task = TaskIdentity("q", "3", 1)
    assert write_partition(iter([first, second]), settings, columns, task) == 3
    out = take_all(broker.url, "/queue/out")
    assert [m.body for m in out] == [b"a", b"c"]
    assert out[0].headers["n"] == "1"
    assert "n" not in out[1].headers  # a null header value is left out
    assert [m.headers["stompy-dedup-id"] for m in out] == ["q.3.1.0", "q.3.1.2"]
    (other,) = take_all(broker.url, "/queue/x")
    assert other.content_type == "t/x"


def test_a_large_partition_is_confirmed_by_one_receipt(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/big"})
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    batches = [
        pa.RecordBatch.from_pydict({"body": [str(i) for i in range(k, k + 1000)]})
        for k in range(0, 5000, 1000)
    ]
    assert write_partition(iter(batches), settings, columns, TaskIdentity("q", "0", 0)) == 5000
    # The task returned after the broker confirmed: everything is there, in order.
    assert broker.queue_depth("/queue/big") == 5000
    assert [m.text for m in take_all(broker.url, "/queue/big")] == [str(i) for i in range(5000)]


def test_string_bodies_and_no_dedup_header(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "dedupheader": ""}
    )
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    assert write_partition(iter([("héllo",)]), settings, columns, TaskIdentity("q", "0", 0)) == 1
    (message,) = take_all(broker.url, "/queue/out")
    assert message.text == "héllo"
    assert "stompy-dedup-id" not in message.headers


def test_an_empty_partition_opens_no_connection(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    before = broker.stats.connections_opened
    assert write_partition(iter([]), settings, columns, TaskIdentity("q", "0", 0)) == 0
    assert broker.stats.connections_opened == before


def test_a_transactional_task_sends_all_or_nothing(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "transactional": "true"}
    )
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    task = TaskIdentity("q", "0", 0)
    assert write_partition(iter([("a",), ("b",)]), settings, columns, task) == 2
    assert broker.queue_depth("/queue/out") == 2
    with pytest.raises(ConfigurationError, match="row 2 of partition 0 has no body"):
        write_partition(iter([("c",), ("d",), (None,)]), settings, columns, task)
    assert broker.queue_depth("/queue/out") == 2  # aborted: c and d never arrived


def test_a_row_without_destination_fails_the_task(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url})
    columns = WriteColumns.from_schema([("body", "string"), ("destination", "string")], None)
    with pytest.raises(ConfigurationError, match="no destination"):
        write_partition(iter([("x", None)]), settings, columns, TaskIdentity("q", "0", 0))


def test_reserved_headers_are_refused(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    columns = WriteColumns.from_schema(
        [("body", "string"), ("headers", "map<string,string>")], settings.destination
    )
    with pytest.raises(LocalProtocolError):
        write_partition(
            iter([("x", {"receipt": "mine"})]), settings, columns, TaskIdentity("q", "0", 0)
        )


def test_read_schema_lists_the_row_fields() -> None:
    names = [part.split()[0] for part in READ_SCHEMA.split(", ")]
    assert names == [
        "destination",
        "subscription",
        "message_id",
        "redelivered",
        "content_type",
        "headers",
        "body",
        "received_at",
        "offset",
    ]


# -- errors a pipeline sees ---------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_broker_is_named(caplog: pytest.LogCaptureFixture) -> None:
    url = f"stomp://127.0.0.1:{_closed_port()}"
    # A streaming source retries as it would after an outage (minutes by default).
    settings = read_settings(url, connectTimeout="2", reconnectAttempts="2", reconnectDelay="0.1")
    with pytest.raises(stompy.ConnectFailed, match=rf"127\.0\.0\.1:{url.rsplit(':', 1)[1]}"):
        StreamConsumer(settings).latest(None, None)
    with pytest.raises(stompy.ConnectFailed, match=r"127\.0\.0\.1"):
        list(drain(read_settings(url, streaming=False, connectTimeout="2")))
    write = parse_write_options({"url": url, "destination": "/queue/x", "connecttimeout": "2"})
    columns = WriteColumns.from_schema([("body", "string")], write.destination)
    with pytest.raises(stompy.ConnectFailed, match=r"127\.0\.0\.1"):
        write_partition(iter([("x",)]), write, columns, TaskIdentity("q", "0", 0))


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


def test_a_read_held_back_at_activemqs_page_says_so(caplog: pytest.LogCaptureFixture) -> None:
    # ActiveMQ hands out at most 200 unacknowledged messages of a queue by default: a
    # first window that got exactly that many, from a broker that says it is ActiveMQ,
    # may have been held back, and the task says so.
    with run_broker(server_name="ActiveMQ/5.17.2") as broker:
        fill(broker.url, "/queue/in", 200)
        settings = read_settings(broker.url, streaming=False, idleTimeout="0.3")
        with caplog.at_level(logging.WARNING, logger="stompy.spark"):
            assert len(rows(drain(settings))) == 200
    assert "raise maxPageSize in activemq.xml" in caplog.text

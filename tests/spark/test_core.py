"""The connector's logic without Spark: offsets, the driver-side subscription, draining, sending.

Everything here runs against stompy's in-process broker, in this process.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

import stompy
from stompy.errors import LocalProtocolError
from stompy.spark._core import (
    READ_SCHEMA,
    OffsetBook,
    StreamConsumer,
    TaskIdentity,
    WriteColumns,
    dedup_id,
    drain,
    offset_dict,
    offset_value,
    write_partition,
)
from stompy.spark._options import ReadSettings, parse_read_options, parse_write_options
from stompy.testing import Broker, run_broker

WHEN = datetime(2024, 1, 2, tzinfo=timezone.utc)


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue_depth=20_000) as running:
        yield running


def fill(url: str, destination: str, count: int, start: int = 0) -> None:
    with stompy.Connection(url) as conn:
        for i in range(start, start + count):
            conn.send(destination, str(i), receipt=i == start + count - 1)


def take_all(url: str, destination: str) -> list[stompy.Message]:
    got: list[stompy.Message] = []
    with stompy.Connection(url) as conn, conn.subscribe(destination) as sub:
        for _ in range(100_000):
            message = sub.get(timeout=0.5)
            if message is None:
                break
            got.append(message)
    return got


def read_settings(url: str, **options: str) -> ReadSettings:
    base = {"url": url, "destination": "/queue/in", "idleTimeout": "0.5", **options}
    return parse_read_options({k.lower(): v for k, v in base.items()})


def row(seq: int) -> tuple[str, str, str, bool, None, dict[str, str], bytes, datetime, int]:
    return ("/queue/q", "s", f"m{seq}", False, None, {}, b"", WHEN, seq)


# -- offsets ------------------------------------------------------------------------------


def test_offsets_round_trip_and_reject_strangers() -> None:
    assert offset_value(offset_dict(42)) == 42
    for bad in ({}, {"seq": "1"}, {"seq": -1}, {"seq": True}, {"offset": 1}):
        with pytest.raises(ValueError, match="not an offset"):
            offset_value(bad)


def test_book_numbers_messages_and_plans_batches() -> None:
    book: OffsetBook[str] = OffsetBook(100)
    assert book.latest(None, 10) == 100  # nothing yet: no new offset
    for seq in range(100, 105):
        assert book.add(f"h{seq}", row(seq)) == seq
    assert len(book) == 5
    assert book.unplanned() == 5
    end = book.latest(100, 3)
    assert end == 103
    assert [r[8] for r in book.plan(100, end)] == [100, 101, 102]
    assert book.planned == 103
    assert book.unplanned() == 2
    assert book.latest(None, None) == 105  # from where the last batch ended
    assert book.latest(103, None) == 105
    assert [r[8] for r in book.plan(103, 105)] == [103, 104]


def test_book_releases_only_what_spark_was_handed() -> None:
    book: OffsetBook[str] = OffsetBook(0)
    for seq in range(5):
        book.add(f"h{seq}", row(seq))
    end = book.latest(0, 2)
    assert book.release(end) is None  # issued, but not planned yet: nothing to give up
    book.plan(0, end)
    assert book.release(end) == "h1"  # the last message below the offset: ACK it
    assert book.released == 2
    assert len(book) == 3
    assert book.release(end) is None  # already released
    assert book.release(4) is None  # never issued
    assert book.release(1) is None  # below what is released


def test_offsets_of_an_earlier_run() -> None:
    old_end = 500
    book: OffsetBook[str] = OffsetBook(1_000)
    # Spark replays a batch of the earlier run: its messages come again, numbered anew.
    assert book.plan(400, old_end) == []
    assert book.release(old_end) is None
    assert book.latest(old_end, 10) == old_end  # nothing new yet
    book.add("h", row(1_000))
    end = book.latest(old_end, 10)
    assert end == 1_001
    assert [r[8] for r in book.plan(old_end, end)] == [1_000]
    assert book.release(old_end) is None


# -- the driver-side subscription ----------------------------------------------------------


def test_stream_consumer_acks_a_batch_once_the_next_is_planned(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 25)
    settings = read_settings(broker.url, maxMessagesPerBatch="10", prefetch="100")
    consumer = StreamConsumer(settings)
    try:
        start = consumer.initial()
        end = consumer.latest(start, 10)
        assert end == start + 10
        rows = consumer.plan(start, end)
        assert [r[6] for r in rows] == [str(i).encode() for i in range(10)]
        assert [r[8] for r in rows] == list(range(start, end))
        assert rows[0][0] == "/queue/in"
        assert rows[0][5]["destination"] == "/queue/in"
        assert broker.unacked_count("/queue/in") == 25  # Spark is not done with anything
        # PySpark 4.0 and 4.1 give no start: the last end is where the next batch begins.
        end2 = consumer.latest(None, 10)
        assert end2 == end + 10
        assert broker.unacked_count("/queue/in") == 15  # the first batch is in the sink
        consumer.plan(end, end2)
        consumer.commit(end2)
        assert broker.unacked_count("/queue/in") == 5
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
        rows = second.plan(end, new_end)
        assert new_end == 20_000 + 6
        assert sorted(r[6] for r in rows) == [str(i).encode() for i in range(6)]
        assert all(r[3] for r in rows)  # all were delivered before (prefetched): redelivered
        second.latest(new_end, None)
        assert broker.unacked_count("/queue/in") == 0
    finally:
        second.close()
    assert broker.queue_depth("/queue/in") == 0


def test_numbering_continues_past_a_checkpoint_ahead_of_the_clock(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(read_settings(broker.url), clock=lambda: 5_000)
    try:
        end = consumer.latest(9_000, None)
        assert end == 9_001
        assert [r[8] for r in consumer.plan(9_000, end)] == [9_000]
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
        assert consumer.latest(start, None) == start  # idle for the timeout: done
        fill(broker.url, "/queue/in", 3)
        assert consumer.latest(start, None) == start + 3
    finally:
        consumer.close()


def test_a_batch_never_outgrows_twice_the_limit(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 50)
    consumer = StreamConsumer(read_settings(broker.url, maxMessagesPerBatch="5"))
    try:
        start = consumer.initial()
        assert consumer.latest(start, None) == start + 10  # held at most 2 x 5
        assert len(consumer.book) == 10
    finally:
        consumer.close()


def test_stream_consumer_pickles_to_its_settings(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 1)
    consumer = StreamConsumer(read_settings(broker.url))
    try:
        consumer.latest(consumer.initial(), None)
        copy = pickle.loads(pickle.dumps(consumer))
        assert copy.settings == consumer.settings
        assert copy._conn is None
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
    rows = drain(read_settings(broker.url, idleTimeout="0.3"), now=lambda: WHEN)
    first = next(rows)
    assert first[6] == b"0"
    assert first[7] == WHEN
    assert first[8] == 0
    assert broker.unacked_count("/queue/in") == 30  # nothing acknowledged mid-task
    rest = list(rows)
    assert [r[8] for r in rest] == list(range(1, 30))
    assert broker.unacked_count("/queue/in") == 0
    assert broker.queue_depth("/queue/in") == 0


def test_a_drain_stopped_early_gives_everything_back(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 10)
    rows = drain(read_settings(broker.url))
    assert next(rows)[6] == b"0"
    rows.close()
    assert broker.queue_depth("/queue/in") == 10
    assert all(m.redelivered for m in take_all(broker.url, "/queue/in")[:1])


def test_drain_stops_at_the_per_task_limit(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 10)
    rows = list(drain(read_settings(broker.url, maxMessagesPerPartition="4")))
    assert len(rows) == 4
    assert broker.queue_depth("/queue/in") == 6


def test_browse_leaves_the_queue_as_it_was(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 5)
    rows = list(drain(read_settings(broker.url, mode="browse", idleTimeout="0.3")))
    assert [r[6] for r in rows] == [str(i).encode() for i in range(5)]
    assert broker.queue_depth("/queue/in") == 5  # this broker does not browse: given back


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
    assert dedup_id(task, 11) == "q:7:3:11"
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
    assert [m.headers["stompy-dedup-id"] for m in out] == ["query:5:2:0", "query:5:2:2"]
    other = take_all(broker.url, "/queue/other")
    assert [m.body for m in other] == [b"two"]


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
    with pytest.raises(ValueError, match="null 'body'"):
        write_partition(iter([("c",), ("d",), (None,)]), settings, columns, task)
    assert broker.queue_depth("/queue/out") == 2  # aborted: c and d never arrived


def test_a_row_without_destination_fails_the_task(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url})
    columns = WriteColumns.from_schema([("body", "string"), ("destination", "string")], None)
    with pytest.raises(ValueError, match="no destination"):
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

"""The PySpark classes called directly, as Spark's workers call them, without a JVM."""

from __future__ import annotations

import importlib.util
import logging
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark.sql.datasource", reason="PySpark 4.0+ is not installed")

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import stompy
import stompy.spark
from stompy.errors import ConfigurationError
from stompy.spark import StompCommitMessage, StompDataSource
from stompy.spark._arrow import READ_ARROW_SCHEMA, READ_SCHEMA
from stompy.spark._source import (
    StompBatch,
    StompPartition,
    StompReader,
    StompStreamReader,
    StompWriter,
    _limit,
    report,
)
from stompy.spark._stream_read import TriggerNotSupported
from stompy.testing import Broker, run_broker

#: PySpark 4.2 added read limits (and the Trigger.AvailableNow mixin).
READ_LIMITS = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
HEADERS = MapType(StringType(), StringType())
WRITE_SCHEMA = StructType([StructField("body", StringType()), StructField("headers", HEADERS)])
# StructType.fromDDL needs a JVM; these are built by hand.
READ_STRUCT = StructType(
    [
        StructField("destination", StringType()),
        StructField("subscription", StringType()),
        StructField("message_id", StringType()),
        StructField("redelivered", BooleanType()),
        StructField("content_type", StringType()),
        StructField("headers", HEADERS),
        StructField("body", BinaryType()),
        StructField("received_at", TimestampType()),
        StructField("offset", LongType()),
    ]
)


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def source(**options: str) -> StompDataSource:
    return StompDataSource({k.lower(): v for k, v in options.items()})


def test_the_source_is_called_stomp_and_has_the_read_schema() -> None:
    assert StompDataSource.name() == "stomp"
    assert source(url="stomp://h", destination="/q").schema() == READ_SCHEMA
    simple = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in READ_STRUCT.fields)
    assert simple == READ_SCHEMA


def test_the_arrow_schema_is_the_one_pyspark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    # PySpark refuses a reader's record batches of any other schema (4.2 and later
    # check; 4.0 takes the timezone from the session, UTC in tests).
    try:
        expected = to_arrow_schema(READ_STRUCT, timezone="UTC")
    except TypeError:  # PySpark 4.0 has no timezone argument
        expected = to_arrow_schema(READ_STRUCT)
    assert expected.equals(READ_ARROW_SCHEMA)


def test_bad_options_are_refused_when_the_read_is_loaded() -> None:
    # schema() is what Spark calls on load(): nothing has been planned or started yet.
    with pytest.raises(ConfigurationError, match="'destination'"):
        source(url="stomp://h").schema()
    with pytest.raises(ConfigurationError, match="'idleTimeout' must be a positive number"):
        source(url="stomp://h", destination="/q", idleTimeout="-1").schema()


def test_a_different_read_schema_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"leave out \.schema"):
        source(url="stomp://h", destination="/q").reader(
            StructType([StructField("body", BinaryType())])
        )


def test_what_only_plans_imports_no_pyarrow() -> None:
    # Spark starts a Python process to create the source, one to plan a write and one
    # to commit it: none of them turns messages into rows, and pyarrow (with numpy
    # and pyarrow.compute) was a good part of what each paid at its start.
    code = """
import pickle, sys
from pyspark.sql.types import StringType, StructField, StructType
from stompy.spark import StompDataSource
source = StompDataSource({"url": "stomp://127.0.0.1:1", "destination": "/queue/q"})
assert source.schema().startswith("destination string")
writer = source.writer(StructType([StructField("body", StringType())]), False)
writer.commit(pickle.loads(pickle.dumps([None])))
print(sorted(m for m in ("pyarrow", "pyarrow.compute", "numpy") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_batch_write_in_process(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    writer = source(url=broker.url, destination="/queue/out").writer(WRITE_SCHEMA, False)
    assert isinstance(writer, StompWriter)
    writer = pickle.loads(pickle.dumps(writer))  # as Spark ships it to the tasks
    message = writer.write(iter([("a", {"k": "v"}), ("b", None)]))
    assert message == StompCommitMessage(partition=0, attempt=0, messages=2, batch="0")
    with caplog.at_level(logging.INFO, logger="stompy.spark"):
        writer.commit([message, StompCommitMessage(1, 0, 3)])
    assert f"write {writer.job}: 5 messages confirmed" in caplog.text
    assert "from 2 of 2 tasks" in caplog.text
    with stompy.Connection(broker.url) as conn, conn.subscribe("/queue/out") as sub:
        got = [sub.get(timeout=5) for _ in range(2)]
    assert [m.text for m in got if m is not None] == ["a", "b"]
    dedup = [m.headers["stompy-dedup-id"] for m in got if m is not None]
    assert dedup == [f"{writer.job}.0.0.0", f"{writer.job}.0.0.1"]


def test_abort_says_what_stays_at_the_broker(caplog: pytest.LogCaptureFixture) -> None:
    writer = source(url="stomp://h", destination="/q").writer(WRITE_SCHEMA, False)
    with caplog.at_level(logging.WARNING, logger="stompy.spark"):
        writer.abort([StompCommitMessage(0, 0, 4), None])
    assert f"write {writer.job} failed; the 4 messages of the 1 tasks" in caplog.text


def test_stream_writer_reports_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    writer = source(url="stomp://h", destination="/q").streamWriter(WRITE_SCHEMA, False)
    with caplog.at_level(logging.INFO, logger="stompy.spark"):
        writer.commit([StompCommitMessage(0, 0, 7, "3")], 3)
        writer.abort([None], 4)
    assert "batch 3: 7 messages confirmed" in caplog.text
    assert "write of batch 4 failed" in caplog.text


def test_stream_writer_sends(broker: Broker) -> None:
    writer = source(url=broker.url, destination="/queue/s").streamWriter(WRITE_SCHEMA, False)
    assert writer.write(iter([("x", None)])).messages == 1
    assert broker.queue_depth("/queue/s") == 1


def test_overwrite_and_bad_columns_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="only be appended"):
        source(url="stomp://h", destination="/q").writer(WRITE_SCHEMA, True)
    with pytest.raises(ConfigurationError, match="column 'id' cannot be written"):
        source(url="stomp://h", destination="/q").writer(
            StructType([StructField("id", LongType())]), False
        )


def test_read_limits() -> None:
    limits = pytest.importorskip("pyspark.sql.streaming.datasource", reason="PySpark 4.2+")
    assert _limit(None, 7) == (7, False)
    assert _limit(limits.ReadAllAvailable(), 7) == (None, True)
    assert _limit(limits.ReadMaxRows(3), 7) == (3, False)
    assert _limit(limits.ReadMinRows(3), 7) == (7, False)
    assert _limit(limits.ReadMaxRows(0), 7) == (7, False)


def test_trigger_once_is_refused_with_a_clear_error(broker: Broker) -> None:
    limits = pytest.importorskip("pyspark.sql.streaming.datasource", reason="PySpark 4.2+")
    reader = source(url=broker.url, destination="/queue/in").streamReader(READ_STRUCT)
    try:
        # Trigger.Once asks for everything available, without AvailableNow's preparation.
        with pytest.raises(TriggerNotSupported, match="availableNow=True"):
            reader.latestOffset(reader.initialOffset(), limits.ReadAllAvailable())
    finally:
        reader.stop()


def test_stream_reader_in_process(broker: Broker) -> None:
    with stompy.Connection(broker.url) as conn:
        for i in range(5):
            conn.send("/queue/in", str(i), receipt=i == 4)
    schema = READ_STRUCT
    reader = source(url=broker.url, destination="/queue/in", maxMessagesPerBatch="3").streamReader(
        schema
    )
    assert isinstance(reader, StompStreamReader)
    try:
        limit = None
        if READ_LIMITS:  # PySpark 4.2+ asks for the default limit and passes it back
            limit = reader.getDefaultReadLimit()
            assert getattr(limit, "max_rows", None) == 3
        reader.prepareForTriggerAvailableNow()
        start = reader.initialOffset()
        end = reader.latestOffset(start, limit)
        assert end["seq"] == start["seq"] + 3
        parts = reader.partitions(start, end)
        assert len(parts) == 2
        assert all(isinstance(p, StompBatch) for p in parts)
        # An executor makes its own reader and reads the rows the partition carries.
        worker_reader = source(url=broker.url, destination="/queue/in").streamReader(schema)
        bodies = []
        for part in parts:
            for batch in worker_reader.read(pickle.loads(pickle.dumps(part))):
                assert isinstance(batch, pa.RecordBatch)
                bodies += batch.column("body").to_pylist()
        assert bodies == [b"0", b"1", b"2"]
        assert reader.partitions(end, end) == []
        end2 = reader.latestOffset()  # the PySpark 4.0 call
        assert end2["seq"] == end["seq"] + 2
        reader.partitions(end, end2)
        reader.commit(end2)  # acknowledged, without waiting for a receipt
        broker.wait_until(lambda: broker.unacked_count("/queue/in") == 0)
    finally:
        reader.stop()


def test_batch_reader_in_process(broker: Broker) -> None:
    with stompy.Connection(broker.url) as conn:
        conn.send("/queue/b", "only", receipt=True)
    reader = source(
        url=broker.url, destination="/queue/b", numPartitions="3", idleTimeout="0.2"
    ).reader(READ_STRUCT)
    assert isinstance(reader, StompReader)
    before = time.time()
    parts = reader.partitions()
    assert all(isinstance(p, InputPartition) for p in parts)
    mine = [p for p in parts if isinstance(p, StompPartition)]
    assert [p.index for p in mine] == [0, 1, 2]
    # Stamped with when the read was planned: a task that starts long after is late.
    (planned,) = {p.planned_at for p in mine}
    assert planned is not None
    assert before <= planned <= time.time()
    (batch,) = list(reader.read(parts[0]))
    assert batch.column("body").to_pylist() == [b"only"]
    with pytest.raises(ConfigurationError, match="'maxMessagesPerBatch' applies to streaming"):
        source(url=broker.url, destination="/q", maxMessagesPerBatch="5").reader(READ_STRUCT)
    with pytest.raises(ConfigurationError, match="'mode' applies to batch reads"):
        source(url=broker.url, destination="/q", mode="browse").streamReader(READ_STRUCT)


def test_report_ignores_failed_tasks() -> None:
    assert report([StompCommitMessage(0, 0, 2), None], "stomp://h:1", "batch 0") == 2


def test_importing_without_pyspark_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import stompy.spark\n"
        "assert 'StompDataSource' in dir(stompy.spark)\n"
        "try:\n"
        "    from stompy.spark import StompDataSource\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'stompy-client[spark]'" in result.stdout
    with pytest.raises(AttributeError):
        _ = stompy.spark.Nothing

"""Every trigger Spark offers a Python streaming source: it works or it is refused, clearly.

| trigger | what the STOMP source does |
|---|---|
| processingTime (and the default) | works: tests/spark/test_spark_stream.py |
| availableNow | works: reads what is there, acknowledges it, stops; a later run goes on |
| once | refused (Spark never tells the source the one batch is done) |
| continuous | refused by Spark itself (no continuous Python sources) |
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark._support import Collector, skip_without_spark

skip_without_spark()

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

import stompy  # noqa: E402
from stompy.testing import Broker, run_broker  # noqa: E402

#: PySpark 4.2 lets a Python source know it runs under AvailableNow, and passes the
#: read limit that tells Trigger.Once apart; before, neither can be served or refused.
try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: F401

    TRIGGERS_KNOWN = True
except ImportError:  # PySpark 4.0 and 4.1
    TRIGGERS_KNOWN = False
needs_triggers = pytest.mark.skipif(
    not TRIGGERS_KNOWN, reason="PySpark 4.2+ tells a Python source which trigger runs"
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def fill(url: str, destination: str, first: int, count: int) -> None:
    with stompy.Connection(url) as conn:
        messages = (stompy.Outgoing(destination, str(i)) for i in range(first, first + count))
        conn.send_many(messages, receipt=True)


def wait_for_total(broker: Broker, collector: Collector, total: int) -> None:
    broker.wait_until(lambda: collector.total >= total, timeout=30)


def copy_query(
    spark: SparkSession, broker: Broker, checkpoint: Path, **trigger: Any
) -> StreamingQuery:
    source = (
        spark.readStream.format("stomp")
        .option("url", broker.url)
        .option("destination", "/queue/in")
        .option("maxMessagesPerBatch", "500")
        .option("idleTimeout", "0.5")
        .load()
    )
    writer = (
        source.selectExpr("body", "map('source-id', message_id) AS headers")
        .writeStream.format("stomp")
        .option("url", broker.url)
        .option("destination", "/queue/out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
    )
    query: StreamingQuery = writer.start()
    return query


@needs_triggers
def test_available_now_acknowledges_and_the_next_run_goes_on(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    collector = Collector(broker.url, "/queue/out")
    try:
        sent = 0
        for run, count in enumerate((1200, 300, 0)):
            fill(broker.url, "/queue/in", sent, count)
            sent += count
            query = copy_query(spark, broker, tmp_path / "checkpoint", availableNow=True)
            assert query.awaitTermination(120), f"run {run} did not end"
            assert query.exception() is None
            rows = [p["numInputRows"] for p in query.recentProgress]
            assert max(rows, default=0) <= 500  # maxMessagesPerBatch holds
            assert sum(rows) == count  # only what this run found new
            # What the run processed was acknowledged: nothing waits at the broker.
            broker.wait_until(lambda: broker.unacked_count("/queue/in") == 0, timeout=30)
            assert broker.queue_depth("/queue/in") == 0
            wait_for_total(broker, collector, sent)
        assert collector.total == collector.unique == 1500  # no message twice
        assert collector.bodies == {str(i).encode() for i in range(1500)}
    finally:
        collector.close()


@needs_triggers
def test_trigger_once_is_refused_and_reads_nothing(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    fill(broker.url, "/queue/in", 0, 50)
    query = copy_query(spark, broker, tmp_path / "checkpoint", once=True)
    with pytest.raises(Exception, match=r"Trigger\.Once") as info:
        query.awaitTermination(120)
    assert "availableNow=True" in str(info.value)
    assert broker.queue_depth("/queue/in") == 50  # nothing consumed
    assert broker.queue_depth("/queue/out") == 0


def test_continuous_is_refused_by_spark(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    fill(broker.url, "/queue/in", 0, 5)
    deadline = time.monotonic() + 120
    with pytest.raises(PySparkException, match="continuous"):
        query = copy_query(spark, broker, tmp_path / "checkpoint", continuous="1 second")
        query.awaitTermination(int(max(1.0, deadline - time.monotonic())))
    assert broker.queue_depth("/queue/in") == 5

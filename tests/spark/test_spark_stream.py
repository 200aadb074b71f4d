"""Streaming through a local SparkSession: STOMP in, STOMP out, a stop and a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.spark._support import Collector, skip_without_spark, wait_for_query

skip_without_spark()

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

import stompy  # noqa: E402
from stompy.testing import Broker, run_broker  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    # PySpark 4.0's gateway client leaves sockets for the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MESSAGES = 2_000
PER_BATCH = 250


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=4 * MESSAGES) as running:
        yield running


def test_stop_and_restart_from_the_checkpoint_loses_nothing(
    spark: SparkSession,
    broker: Broker,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    with stompy.Connection(broker.url) as conn:
        for i in range(MESSAGES):
            conn.send("/queue/in", str(i), receipt=i == MESSAGES - 1)

    def start() -> StreamingQuery:
        source = (
            spark.readStream.format("stomp")
            .option("url", broker.url)
            .option("destination", "/queue/in")
            .option("maxMessagesPerBatch", str(PER_BATCH))
            .load()
        )
        out = source.selectExpr("body", "map('source-id', message_id) AS headers")
        return (
            out.writeStream.format("stomp")
            .option("url", broker.url)
            .option("destination", "/queue/out")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    collector = Collector(broker.url, "/queue/out")
    try:
        query = start()
        try:
            wait_for_query(lambda: collector.total >= PER_BATCH, query, timeout=180)
        finally:
            query.stop()
        before_restart = collector.total
        assert before_restart < MESSAGES  # stopped mid-stream
        # The query's subscription is gone with its process; the broker has taken
        # back whatever was not acknowledged.
        broker.wait_until(lambda: broker.unacked_count("/queue/in") == 0, timeout=30)

        query = start()
        try:
            wait_for_query(lambda: collector.unique >= MESSAGES, query, timeout=300)
        finally:
            query.stop()
        record_property("messages", MESSAGES)
        record_property("duplicates", collector.duplicates)
        print(
            f"\nstream restart: {MESSAGES} messages, {collector.unique} unique after "
            f"de-duplicating by message_id, {collector.duplicates} duplicates, "
            f"{before_restart} delivered before the stop"
        )
        assert collector.unique == MESSAGES
        assert collector.bodies == {str(i).encode() for i in range(MESSAGES)}
        # query id (kept in the checkpoint, the same after the restart), batch id,
        # partition, row: one id per message written.
        parts = [d.split(".") for d in collector.dedup]
        assert len(collector.dedup) == collector.total
        assert {p[0] for p in parts} == {str(query.id)}
        assert len({p[1] for p in parts}) >= 2
    finally:
        collector.close()

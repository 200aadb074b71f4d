"""The connector on a standalone cluster (a master, two workers of one core each), the
driver in this process in client mode, the broker in a process of its own
(``stompy broker``): batch write and read, and a streaming query (STOMP in, STOMP
out) that loses a worker, with its executor, mid-query.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.spark._support import skip_without_spark

skip_without_spark()

from pyspark.sql import SparkSession  # noqa: E402

import stompy  # noqa: E402
from tests.spark._support import wait_for_query  # noqa: E402
from tests.spark_cluster._cluster import PER_BATCH, Cluster, executors, start_copy  # noqa: E402
from tests.spark_cluster._support import Copies, check_copies, send  # noqa: E402

ROWS = 2_000
MESSAGES = 3_000


def test_batch_write_then_read_on_two_executors(spark: SparkSession, broker_url: str) -> None:
    frame = spark.range(0, ROWS, numPartitions=2).selectExpr("CAST(id AS STRING) AS body")
    options = {"url": broker_url, "destination": "/queue/batch"}
    frame.write.format("stomp").mode("append").options(**options).save()

    read = spark.read.format("stomp").options(**options).option("idleTimeout", "2").load()
    rows = read.select("body", "headers", "redelivered").collect()
    assert sorted(int(r.body) for r in rows) == list(range(ROWS))
    assert not any(r.redelivered for r in rows)
    dedup = {r.headers["stompy-dedup-id"] for r in rows}
    assert len(dedup) == ROWS
    assert {d.split(".")[2] for d in dedup} == {"0", "1"}  # written by two tasks
    # The reading tasks acknowledged everything: nothing comes back once they are gone.
    with stompy.Connection(broker_url) as conn:
        assert conn.subscribe("/queue/batch").get(timeout=1) is None


def test_a_stream_loses_nothing_when_a_worker_is_killed_mid_query(
    spark: SparkSession,
    cluster: Cluster,
    broker_url: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    send(broker_url, MESSAGES)
    copies = Copies(broker_url, "/queue/out")
    try:
        query = start_copy(spark, broker_url, tmp_path / "checkpoint")
        try:
            wait_for_query(lambda: copies.total >= 2 * PER_BATCH, query, timeout=120)
            cluster.kill_worker(0)  # its JVM, its executor and their Python workers
            before = copies.total
            assert before < MESSAGES, "the query finished before the kill"
            # The driver noticed, and the query goes on with the other executor...
            wait_for_query(lambda: executors(spark) == 1, query, timeout=60)
            # ... and with one on the restarted worker, when it comes.
            cluster.start_worker(0)
            wait_for_query(lambda: copies.unique >= MESSAGES, query, timeout=180)
        finally:
            query.stop()
        record_property("duplicates", copies.duplicates)
        print(
            f"\nworker SIGKILLed mid-query: {MESSAGES} messages, {copies.unique} unique, "
            f"{copies.duplicates} duplicates, {before} delivered before the kill"
        )
        check_copies(copies, MESSAGES)
        assert copies.redelivered == 0  # the reading side lives next to the driver
    finally:
        copies.close()

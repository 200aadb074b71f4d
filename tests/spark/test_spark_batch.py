"""Batch write and batch read through a local SparkSession, against the in-process broker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.spark._support import skip_without_spark

skip_without_spark()

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from stompy.spark._options import PARALLELISM_VARIABLE  # noqa: E402
from stompy.testing import Broker, run_broker  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    # PySpark 4.0's gateway client leaves sockets for the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PASSCODE = "s3cret-passcode-42"
ROWS = 10_000


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=2 * ROWS, users={"app": PASSCODE}) as running:
        yield running


def options(broker: Broker, destination: str) -> dict[str, str]:
    return {"url": broker.url, "login": "app", "passcode": PASSCODE, "destination": destination}


def test_write_10000_rows_then_read_them_all_back(spark: SparkSession, broker: Broker) -> None:
    frame = spark.range(0, ROWS, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS body", "map('n', CAST(id AS STRING)) AS headers"
    )
    frame.write.format("stomp").mode("append").options(**options(broker, "/queue/batch")).save()
    # Every task waited for its receipt: the broker holds all rows once save() returns.
    assert broker.queue_depth("/queue/batch") == ROWS

    read = (
        spark.read.format("stomp")
        .options(**options(broker, "/queue/batch"))
        .option("numPartitions", "2")
        .option("idleTimeout", "2")
        .load()
    )
    rows = read.select("body", "headers", "redelivered", "destination").collect()
    assert len(rows) == ROWS
    assert sorted(int(r.body) for r in rows) == list(range(ROWS))
    assert all(r.headers["n"] == r.body.decode() for r in rows)
    assert not any(r.redelivered for r in rows)
    assert {r.destination for r in rows} == {"/queue/batch"}
    dedup = {r.headers["stompy-dedup-id"] for r in rows}
    assert len(dedup) == ROWS
    assert {d.split(".")[2] for d in dedup} == {"0", "1"}  # the partition of each message
    # The reading tasks acknowledged what they produced.
    assert broker.queue_depth("/queue/batch") == 0
    assert broker.unacked_count("/queue/batch") == 0


def test_a_read_with_more_partitions_than_task_slots_waits_one_idle_timeout(
    spark: SparkSession, broker: Broker
) -> None:
    # local[2]: with 6 partitions, partitions 3 to 6 start only once the first two
    # ended, which they do after idleTimeout without a message. Each later wave used to
    # wait idleTimeout again (two more here); a task that starts that late now waits
    # only a moment for a first message. Compared with the same read in one wave (2
    # partitions), so that Spark's own time, whatever the machine's load, cancels out.
    idle = 10.0

    def read(partitions: int) -> float:
        spark.range(0, 1000, numPartitions=2).selectExpr("CAST(id AS STRING) AS body").write.format(
            "stomp"
        ).mode("append").options(**options(broker, "/queue/late")).save()
        started = time.monotonic()
        count = (
            spark.read.format("stomp")
            .options(**options(broker, "/queue/late"))
            .option("numPartitions", str(partitions))
            .option("idleTimeout", str(idle))
            .load()
            .count()
        )
        assert count == 1000
        return time.monotonic() - started

    # Warm: the first read of a session also starts Spark's Python workers.
    spark.read.format("stomp").options(**options(broker, "/queue/late-warm")).option(
        "numPartitions", "2"
    ).option("idleTimeout", "0.2").load().count()
    one_wave = read(2)
    three_waves = read(6)
    assert three_waves - one_wave < idle, f"{three_waves:.1f} s against {one_wave:.1f} s"


def test_the_session_tells_the_planning_processes_its_parallelism(spark: SparkSession) -> None:
    # Registering the source (the spark fixture does) puts the driver's default
    # parallelism into the environment Spark gives the processes that plan a read,
    # where numPartitions takes it as its default.
    context = spark.sparkContext
    assert context.environment[PARALLELISM_VARIABLE] == str(context.defaultParallelism)
    read = (
        spark.read.format("stomp")
        .option("url", "stomp://127.0.0.1:1")
        .option("destination", "/queue/x")
    )
    assert read.load().rdd.getNumPartitions() == context.defaultParallelism


def test_the_passcode_stays_out_of_the_plan(
    spark: SparkSession, broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    frame = spark.read.format("stomp").options(**options(broker, "/queue/none")).load()
    frame.explain(extended=True)
    plan = capsys.readouterr().out
    assert "stomp" in plan
    assert PASSCODE not in plan


def test_an_unknown_column_is_named(spark: SparkSession, broker: Broker) -> None:
    frame = spark.range(1).selectExpr("CAST(id AS STRING) AS body", "id AS extra")
    with pytest.raises(PySparkException, match="column 'extra' cannot be written"):
        frame.write.format("stomp").mode("append").options(**options(broker, "/queue/x")).save()
    assert broker.queue_depth("/queue/x") == 0


def test_a_bad_read_option_is_named_at_load(spark: SparkSession, broker: Broker) -> None:
    for reader in (spark.read, spark.readStream):
        with pytest.raises(PySparkException, match="'idleTimeout' must be a positive number"):
            reader.format("stomp").options(**options(broker, "/queue/x")).option(
                "idleTimeout", "-1"
            ).load()  # no action, no query: load() alone refuses it


def test_an_unreachable_broker_is_named(spark: SparkSession) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    frame = (
        spark.read.format("stomp")
        .option("url", f"stomp://127.0.0.1:{port}")
        .option("destination", "/queue/x")
        .option("connectTimeout", "2")
        .load()
    )
    with pytest.raises(PySparkException, match=rf"ConnectFailed.*127\.0\.0\.1:{port}"):
        frame.collect()

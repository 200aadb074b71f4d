"""Does a streaming read keep the broker's pace? ``readStream.format("stomp")`` against
one hand-rolled consumer with the same guarantee (``local[2]``, one warmed-up session).

A queue holds ``count`` messages of 100 bytes (200,000 by default) before each run;
what is timed is the *steady rate*: the rows that landed between the moments 20% and
80% of them had landed, over the time between. The contenders:

* ``stompy``: ``spark.readStream.format("stomp")`` with its defaults (only ``url`` and
  ``destination``) into a parquet sink, under Spark's default trigger. A row lands
  when its micro-batch ends (the batch's start plus its ``triggerExecution``, as Spark
  reports them).
* ``stomp.py, client acks``: one stomp.py consumer in ``client`` ack mode sending a
  cumulative ACK every 1,000 messages: what a data engineer writes by hand for the
  same guarantee (nothing acknowledged before it was handled). A row lands when it
  arrives.
* ``stomp.py, auto acks``: the same consumer in ``auto`` mode, no guarantee: the
  broker's pace for a reader that costs it least.

Beside them, Spark's floor: the same query with no broker, micro-batches of the size
the connector's default gives on that broker, into the same sink:

* ``floor: Python source, rows in memory``: a Python streaming data source that holds
  the rows (the connector's columns, made once) and plans each batch as the connector
  does (Arrow IPC bytes in ``numPartitions`` partitions, read back by the tasks);
* ``floor: rate-micro-batch``: Spark's own ``rate-micro-batch`` source, the same
  columns made by Spark expressions (no Python at all).

No connector can pass the first on this machine; where it is below 0.8x the
hand-rolled consumer, so is the target.

Target: the connector at 0.8x the consumer with the same guarantee, or better, against
stompy's broker (its own process) and RabbitMQ (127.0.0.1:61613, when it answers).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

from benchmarks._core import (
    Row,
    Settings,
    Target,
    alternate_timed,
    failure_rows,
    log,
    register,
    rows_from_rates,
)
from benchmarks.spark import (
    BODY,
    RABBITMQ_URL,
    STOMPY,
    _stomppy_connect,
    fill,
    own_broker,
    queue,
    rabbitmq_answers,
    spark_session,
)

GROUP: Final = "spark-pace"
SAME_GUARANTEE: Final = "stomp.py, client acks"
NO_GUARANTEE: Final = "stomp.py, auto acks"
PYTHON_FLOOR: Final = "floor: Python source, rows in memory"
RATE_FLOOR: Final = "floor: rate-micro-batch"
#: Messages between two cumulative ACKs of the hand-rolled consumer.
ACK_EVERY: Final = 1_000
#: The window of the steady rate: from this share of the rows landed to the other.
LOW, HIGH = 0.2, 0.8
BROKERS: Final = ("stompy broker", "rabbitmq")


def steady_seconds(landed: Sequence[tuple[float, int]], count: int) -> float:
    """``count`` over the steady rate of ``landed`` (when each step of rows landed,
    and how many rows had landed by then, in time order): the seconds a read at
    that rate would take for all of them."""
    low = next((at, rows) for at, rows in landed if rows >= LOW * count)
    high = next((at, rows) for at, rows in landed if rows >= HIGH * count)
    if high[0] <= low[0] or high[1] <= low[1]:
        raise RuntimeError(f"no steady window in {len(landed)} steps: {landed[:3]}...")
    return count * (high[0] - low[0]) / (high[1] - low[1])


def _batch_end(progress: dict[str, Any]) -> float:
    start = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return float(start + progress["durationMs"]["triggerExecution"] / 1000)


#: Where the micro-batches spent their time, one line per run (for the log).
BREAKDOWNS: list[str] = []


def _breakdown(progress: Sequence[dict[str, Any]]) -> str:
    """The median of each of Spark's ``durationMs`` parts over the batches, and their rows."""
    parts: dict[str, list[int]] = {}
    for p in progress:
        for key, ms in p["durationMs"].items():
            parts.setdefault(key, []).append(ms)
    rows = sorted(p["numInputRows"] for p in progress)
    medians = ", ".join(f"{k} {sorted(v)[len(v) // 2]}" for k, v in sorted(parts.items()))
    return f"{len(progress)} batches, median {rows[len(rows) // 2]:,} rows; ms: {medians}"


def stompy_stream(spark: Any, url: str, count: int, work: Path, **options: str) -> float:
    """The connector's steady seconds for ``count`` queued messages (see the module);
    ``options`` are more options of the source (none: its defaults)."""
    return steady_seconds(stream_steps(spark, url, count, work, **options), count)


def stream_steps(
    spark: Any, url: str, count: int, work: Path, **options: str
) -> list[tuple[float, int]]:
    """When each micro-batch of a streaming read of ``count`` queued messages ended,
    and the rows landed by then."""
    destination = queue("pace")
    fill(url, destination, count)
    frame = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", destination)
        .options(**options)
        .load()
    )
    return sink_steps(frame, count, work, STOMPY)


# -- Spark's floor --------------------------------------------------------------------------

#: The name the in-memory floor source is registered under.
MEMORY_SOURCE: Final = "stompy-bench-memory"


def floor_rows(first: int, count: int) -> Any:
    """``count`` rows as the connector makes them from the benchmark's messages (its
    schema; five headers each, a 100-byte body), numbered from ``first``."""
    import pyarrow as pa

    from stompy.spark._arrow import READ_ARROW_SCHEMA, now_us

    ids = [f"T_spark-0@@session-pace@@{i}" for i in range(first, first + count)]
    names = ["destination", "message-id", "subscription", "content-length", "persistent"]
    values: list[str] = []
    for message_id in ids:
        values += ["/queue/pace", message_id, "spark-0", str(BODY), "true"]
    columns = [
        pa.array(["/queue/pace"] * count, pa.string()),
        pa.array(["spark-0"] * count, pa.string()),
        pa.array(ids, pa.string()),
        pa.array([False] * count, pa.bool_()),
        pa.nulls(count, pa.string()),
        pa.MapArray.from_arrays(
            pa.array(range(0, len(names) * count + 1, len(names)), pa.int32()),
            pa.array(names * count, pa.string()),
            pa.array(values, pa.string()),
        ),
        pa.array([b"x" * BODY] * count, pa.binary()),
        pa.array([now_us()] * count, pa.timestamp("us", tz="UTC")),
        pa.array(range(first, first + count), pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_ARROW_SCHEMA)


def memory_source() -> type:
    """The floor's Python data source (PySpark imported only when it runs)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from stompy.spark._arrow import from_ipc, to_ipc
    from stompy.spark._schema import READ_SCHEMA

    class Part(InputPartition):
        def __init__(self, data: bytes) -> None:
            self.data = data

    class Reader(DataSourceStreamReader):
        """Hands Spark ``count`` rows it holds, ``batch`` at a time, in ``parts`` parts."""

        def __init__(self, count: int, batch: int, parts: int) -> None:
            self.count, self.batch, self.parts = count, batch, parts
            self.rows: Any = None  # made at the first plan, in the planning process

        def initialOffset(self) -> dict[str, int]:
            return {"seq": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
            begin = 0 if start is None else start["seq"]
            return {"seq": min(self.count, begin + self.batch)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            if self.rows is None:
                self.rows = floor_rows(0, self.count)
            low, size = start["seq"], end["seq"] - start["seq"]
            cuts = [low + size * p // self.parts for p in range(self.parts + 1)]
            return [Part(to_ipc(self.rows.slice(a, b - a))) for a, b in itertools.pairwise(cuts)]

        def read(self, partition: Any) -> Any:
            return from_ipc(partition.data)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Memory(DataSource):
        @classmethod
        def name(cls) -> str:
            return MEMORY_SOURCE

        def schema(self) -> str:
            return READ_SCHEMA

        def streamReader(self, schema: Any) -> Reader:
            o = self.options
            return Reader(int(o["count"]), int(o["batch"]), int(o["parts"]))

    return Memory


def floor_stream(spark: Any, kind: str, count: int, batch: int, work: Path) -> float:
    """Spark's steady seconds for ``count`` rows in batches of ``batch`` rows with no
    broker: ``kind`` is :data:`PYTHON_FLOOR` or :data:`RATE_FLOOR` (see the module)."""
    parts = str(spark.sparkContext.defaultParallelism)  # the connector's numPartitions
    if kind == PYTHON_FLOOR:
        frame = (
            spark.readStream.format(MEMORY_SOURCE)
            .options(count=str(count), batch=str(batch), parts=parts)
            .load()
        )
    else:
        message_id = "concat('T_spark-0@@session-pace@@', CAST(value AS STRING))"
        frame = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", str(batch))
            .option("numPartitions", parts)
            .load()
            .selectExpr(
                "'/queue/pace' AS destination",
                "'spark-0' AS subscription",
                f"{message_id} AS message_id",
                "false AS redelivered",
                "CAST(NULL AS STRING) AS content_type",
                f"map('destination', '/queue/pace', 'message-id', {message_id}, 'subscription',"
                f" 'spark-0', 'content-length', '{BODY}', 'persistent', 'true') AS headers",
                f"CAST(repeat('x', {BODY}) AS BINARY) AS body",
                "timestamp AS received_at",
                "value AS offset",
            )
        )
    return steady_seconds(sink_steps(frame, count, work, kind), count)


def sink_steps(frame: Any, count: int, work: Path, who: str) -> list[tuple[float, int]]:
    """Run ``frame`` into a parquet sink until ``count`` rows landed; when each
    micro-batch ended, and the rows landed by then (``who``: for the log's breakdown)."""
    out = Path(tempfile.mkdtemp(dir=work))
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out / "rows"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )
    try:
        deadline = time.monotonic() + 600
        landed = 0
        while landed < count and time.monotonic() < deadline:
            time.sleep(0.2)
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            landed = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()
    progress = sorted(
        (p for p in query.recentProgress if p["numInputRows"]), key=lambda p: p["batchId"]
    )
    steps, total = [], 0
    for p in progress:
        total += p["numInputRows"]
        steps.append((_batch_end(p), total))
    if total < count:
        raise AssertionError(f"the streaming query landed {total} of {count} rows")
    BREAKDOWNS.append(f"{who}: {_breakdown(progress)}")
    shutil.rmtree(out, ignore_errors=True)
    return steps


def stomppy_consume(url: str, count: int, ack: str) -> float:
    """One stomp.py consumer's steady seconds for ``count`` queued messages: ``ack``
    ``"client"`` sends a cumulative ACK every :data:`ACK_EVERY` messages (and for the
    last), ``"auto"`` none."""
    import stomp

    destination = queue(f"pace-{ack}")
    fill(url, destination, count)
    marks = {int(LOW * count + 0.999), int(HIGH * count + 0.999)}
    landed: list[tuple[float, int]] = []
    got = 0
    done = threading.Event()
    conn = _stomppy_connect(url)

    class Consumer(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            nonlocal got
            got += 1
            if ack == "client" and (got % ACK_EVERY == 0 or got == count):
                conn.ack(frame.headers["message-id"], "1")
            if got in marks:
                landed.append((time.perf_counter(), got))
            if got >= count:
                done.set()

    conn.set_listener("pace", Consumer())
    try:
        # A prefetch that leaves room for the ACK interval (stompy's broker holds back
        # at 100 unacknowledged messages unless asked; RabbitMQ's default is no limit).
        conn.subscribe(destination, id="1", ack=ack, headers={"prefetch-count": "65535"})
        if not done.wait(600):
            raise TimeoutError(f"stomp.py ({ack}) took {got} of {count} messages")
    finally:
        conn.disconnect()
    return steady_seconds(landed, count)


def _count(settings: Settings) -> int:
    # Four or more of the default's batches on every broker: a steady window of two.
    return settings.pick_count(400_000, 20_000)


def describe(settings: Settings) -> dict[str, Any]:
    return {
        "messages": _count(settings),
        "body_bytes": 100,
        "rounds": settings.pick_rounds(2, 1),
        "spark": "local[2], one session, warmed up; parquet sink; the source's defaults",
        "rate": f"steady: rows landed between {LOW:.0%} and {HIGH:.0%} of the count",
        "hand-rolled": f"one stomp.py consumer; client acks with a cumulative ACK per {ACK_EVERY}",
    }


def default_batch(url: str) -> int:
    """The most rows of a micro-batch that the connector's defaults give on ``url``."""
    import stompy
    from stompy.spark._options import parse_read_options

    with stompy.Connection(url) as conn:
        server = conn.server
    settings = parse_read_options({"url": url, "destination": "/queue/x"}, streaming=True)
    return settings.stream_limits(server)[0]


def ratios(rates: dict[str, list[float]]) -> list[str]:
    """The ratios the target and the docs quote, of the medians that were measured."""
    median = {who: sorted(r)[len(r) // 2] for who, r in rates.items() if r}
    pairs = [(STOMPY, SAME_GUARANTEE), (STOMPY, NO_GUARANTEE)]
    pairs += [(STOMPY, floor) for floor in (PYTHON_FLOOR, RATE_FLOOR)]
    pairs += [(floor, SAME_GUARANTEE) for floor in (PYTHON_FLOOR, RATE_FLOOR)]
    return [
        f"{a} / {b} = {median[a] / median[b]:.2f}x" for a, b in pairs if a in median and b in median
    ]


TARGETS: Final = tuple(
    Target(f"streaming read pace ({broker})", SAME_GUARANTEE, 0.8) for broker in BROKERS
)


@register(
    GROUP,
    "a streaming read's steady rate vs one stomp.py consumer with the same guarantee (msg/s)",
    targets=TARGETS,
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    try:
        import pyspark  # noqa: F401
        import stomp  # noqa: F401
    except ImportError as exc:
        return [Row(GROUP, "all", "all", float("nan"), "msg/s", note=f"missing: {exc}")]
    count = _count(settings)
    rounds = settings.pick_rounds(2, 1)
    rows: list[Row] = []
    spark = spark_session()
    spark.dataSource.register(memory_source())
    work = Path(tempfile.mkdtemp(prefix="stompy-spark-pace-"))
    try:
        brokers: list[tuple[str, Callable[[], contextlib.AbstractContextManager[str]]]] = [
            ("stompy broker", own_broker)
        ]
        why = rabbitmq_answers() if settings.brokers else "skipped (--no-brokers)"
        if why is None:
            brokers.append(("rabbitmq", lambda: contextlib.nullcontext(RABBITMQ_URL)))
        else:
            log(settings, f"spark-pace rabbitmq: {why}")
            rows.append(Row(GROUP, "rabbitmq", "all", float("nan"), "msg/s", note=why))
        for broker, open_broker in brokers:
            with open_broker() as url:
                # The JVM, the Python workers and the source's process: once.
                stream_steps(spark, url, 20_000, work)
                batch = default_batch(url)
                floor_stream(spark, PYTHON_FLOOR, 4 * batch, batch, work)
                BREAKDOWNS.clear()
                log(settings, f"  {broker}: the connector's default batch is {batch:,} rows")
                contenders: list[tuple[str, Callable[[], float]]] = [
                    (STOMPY, lambda: stompy_stream(spark, url, count, work)),
                    (SAME_GUARANTEE, lambda: stomppy_consume(url, count, "client")),
                    (NO_GUARANTEE, lambda: stomppy_consume(url, count, "auto")),
                    (PYTHON_FLOOR, partial(floor_stream, spark, PYTHON_FLOOR, count, batch, work)),
                    (RATE_FLOOR, partial(floor_stream, spark, RATE_FLOOR, count, batch, work)),
                ]
                chosen = [c for c in contenders if settings.wants(c[0])]
                name = f"streaming read pace ({broker})"
                rates, failed = alternate_timed(chosen, rounds, count, settings, name)
                rows += rows_from_rates(GROUP, name, rates, "msg/s")
                rows += failure_rows(GROUP, name, failed, "msg/s")
                for line in BREAKDOWNS:
                    log(settings, f"  {name}, batches of {line}")
                BREAKDOWNS.clear()
                for line in ratios(rates):
                    log(settings, f"  {name}: {line}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows

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

Target: the connector at 0.8x the consumer with the same guarantee, or better, against
stompy's broker (its own process) and RabbitMQ (127.0.0.1:61613, when it answers).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
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


#: Where the connector's micro-batches spent their time, one line per run (for the log).
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
    out = Path(tempfile.mkdtemp(dir=work))
    query = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", destination)
        .options(**options)
        .load()
        .writeStream.format("parquet")
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
        raise AssertionError(f"the streaming read landed {total} of {count} rows")
    BREAKDOWNS.append(_breakdown(progress))
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
    return settings.pick_count(200_000, 20_000)


def describe(settings: Settings) -> dict[str, Any]:
    return {
        "messages": _count(settings),
        "body_bytes": 100,
        "rounds": settings.pick_rounds(2, 1),
        "spark": "local[2], one session, warmed up; parquet sink; the source's defaults",
        "rate": f"steady: rows landed between {LOW:.0%} and {HIGH:.0%} of the count",
        "hand-rolled": f"one stomp.py consumer; client acks with a cumulative ACK per {ACK_EVERY}",
    }


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
                BREAKDOWNS.clear()
                contenders: list[tuple[str, Callable[[], float]]] = [
                    (STOMPY, lambda: stompy_stream(spark, url, count, work)),
                    (SAME_GUARANTEE, lambda: stomppy_consume(url, count, "client")),
                    (NO_GUARANTEE, lambda: stomppy_consume(url, count, "auto")),
                ]
                chosen = [c for c in contenders if settings.wants(c[0])]
                name = f"streaming read pace ({broker})"
                rates, failed = alternate_timed(chosen, rounds, count, settings, name)
                rows += rows_from_rates(GROUP, name, rates, "msg/s")
                rows += failure_rows(GROUP, name, failed, "msg/s")
                for line in BREAKDOWNS:
                    log(settings, f"  {name}, stompy's batches: {line}")
                BREAKDOWNS.clear()
                for who in (SAME_GUARANTEE, NO_GUARANTEE):
                    if rates.get(STOMPY) and rates.get(who):
                        ours = sorted(rates[STOMPY])[len(rates[STOMPY]) // 2]
                        theirs = sorted(rates[who])[len(rates[who]) // 2]
                        log(settings, f"  {name}: stompy / {who} = {ours / theirs:.2f}x")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows

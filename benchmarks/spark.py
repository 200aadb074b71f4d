"""The Spark connector against what a data engineer would write by hand (``local[2]``).

Each workload moves ``count`` small messages (100-byte bodies) through a broker, in one
SparkSession for the whole group, warmed up first (the JVM and Spark's Python workers
start once, as in a running pipeline):

* ``batch write``: ``df.write.format("stomp")`` of a 2-partition DataFrame, against
  ``df.foreachPartition`` with a stomp.py connection per partition and one receipt at
  its end. Timed from the call to its return (every message confirmed).
* ``streaming write``: a file stream of the same rows (a parquet directory, trigger
  ``availableNow``) into ``writeStream.format("stomp")``, against ``foreachBatch`` doing
  the same ``foreachPartition``. Timed from ``start()`` to the query's end.
* ``streaming read``: ``readStream.format("stomp")`` (``maxMessagesPerBatch`` 20,000,
  trigger ``availableNow``, a ``noop`` sink) against one stomp.py consumer draining the
  queue with ``auto`` acks (no guarantee), timed from SUBSCRIBE to the last message.
  The connector's figure is its steady rate: rows over the summed durations of its
  micro-batches, as Spark reports them. It leaves out the query's start (a Python
  process Spark launches, ~2 s) and the ``idleTimeout`` that ends it, which a
  long-running query pays once; both end-to-end times are in the log.
* ``batch read``: ``spark.read.format("stomp")`` (2 partitions) and ``count()``,
  timed whole (the tasks' final ``idleTimeout`` included), against the same drain.
  Beside it, Spark's own floor for such a read: ``count()`` of a Python data source
  that yields ten rows from two partitions and does nothing else (seconds; whatever
  a batch read does, it costs this much more than its drain and its idle end).

Beside them, the broker's ceiling, measured outside Spark: two bare sockets writing
pre-encoded SENDs, and a bare socket acknowledging every message it reads (the price
of at-least-once, which the connector pays and the ``auto`` drain does not); for the
batch read, a bare socket that holds every message unacknowledged until the last, as
each batch-read task must (RabbitMQ spends about 1.5x the CPU per message on such a
consumer as on an ``auto`` one).

Brokers: stompy's broker in a process of its own (``python -m stompy broker``), and
RabbitMQ on 127.0.0.1:61613 when it answers. Memory: the peak RSS of Spark's Python
processes (the source's process next to the driver, the workers) during a streaming
read of ``count`` and of twice as many messages: it must not grow with the count.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from benchmarks._core import (
    CEILING_MARK,
    Limit,
    Row,
    Settings,
    Target,
    alternate_timed,
    failure_rows,
    log,
    register,
    rows_from_rates,
)

GROUP: Final = "spark"
STOMPY: Final = "stompy"
PEER: Final = "stomp.py"
#: What the broker does for clients that cost nothing, outside Spark: pre-encoded SENDs
#: on two connections; a consumer acknowledging every message (``client-individual``,
#: the price of at-least-once).
CEILING: Final = f"bare socket {CEILING_MARK}"
RABBITMQ_URL: Final = "stomp://guest:guest@127.0.0.1:61613/%2F"
WORKLOADS: Final = ("batch write", "streaming write", "streaming read", "batch read")
PER_BATCH: Final = 20_000
BODY: Final = 100


def _count(settings: Settings) -> int:
    return settings.pick_count(50_000, 5_000)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(3, 1)


# -- brokers ------------------------------------------------------------------------------


@contextlib.contextmanager
def own_broker() -> Iterator[str]:
    """``python -m stompy broker`` in a process of its own; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "broker", "--port", "0", "--max-queue", "5000000", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(stomp://\S+)", line)
        if match is None:
            raise RuntimeError(f"stompy broker said {line!r}")
        yield match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def rabbitmq_answers() -> str | None:
    """Why RabbitMQ cannot be used (``None``: it answered)."""
    import stompy

    try:
        with stompy.Connection(RABBITMQ_URL, connect_timeout=3):
            return None
    except stompy.StompError as exc:
        return f"RabbitMQ not reachable ({exc})"


def queue(tag: str) -> str:
    return f"/queue/stompy-spark-bench-{tag}-{uuid.uuid4().hex[:10]}"


def fill(url: str, destination: str, count: int) -> None:
    import stompy

    body = b"x" * BODY
    with stompy.Connection(url, receipt_timeout=120) as conn:
        conn.send_many((stompy.Outgoing(destination, body) for _ in range(count)), receipt=True)


def drain_count(url: str, destination: str, limit: float = 120.0) -> int:
    """Take (and count) everything ``destination`` holds, with stompy."""
    import stompy

    count = 0
    deadline = time.monotonic() + limit
    with stompy.Connection(url, max_pending=20_000) as conn:
        sub = conn.subscribe(destination)
        while time.monotonic() < deadline and sub.get(timeout=1.0) is not None:
            count += 1
    return count


# -- the hand-rolled peers (stomp.py) ---------------------------------------------------------


def _stomppy_connect(url: str) -> Any:
    import stomp

    parts = urlsplit(url)
    conn = stomp.Connection([(parts.hostname, parts.port)], heartbeats=(0, 0))
    vhost = unquote(parts.path[1:]) if parts.path[1:] else "/"
    conn.connect(parts.username, parts.password, wait=True, headers={"host": vhost})
    return conn


def stomppy_send_partition(url: str, destination: str) -> Callable[[Iterator[Any]], None]:
    """What a data engineer writes for ``foreachPartition``: send each row, one receipt."""

    def send(rows: Iterator[Any]) -> None:
        import threading

        import stomp

        done = threading.Event()

        class Receipts(stomp.ConnectionListener):  # type: ignore[misc]
            def on_receipt(self, frame: Any) -> None:
                done.set()

        conn = _stomppy_connect(url)
        conn.set_listener("receipts", Receipts())
        try:
            pending = None
            for row in rows:
                if pending is not None:
                    conn.send(destination, pending)
                pending = row.body
            if pending is not None:
                conn.send(destination, pending, headers={"receipt": "last"})
                if not done.wait(120):
                    raise TimeoutError("no receipt from the broker")
        finally:
            conn.disconnect()

    return send


def stomppy_drain(url: str, destination: str, count: int) -> float:
    """One stomp.py consumer, ``auto`` acks: seconds from SUBSCRIBE to the last message."""
    import stomp

    got = 0
    done = threading.Event()

    class Counter(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            nonlocal got
            got += 1
            if got >= count:
                done.set()

    conn = _stomppy_connect(url)
    conn.set_listener("count", Counter())
    try:
        start = time.perf_counter()
        conn.subscribe(destination, id="1", ack="auto")
        if not done.wait(300):
            raise TimeoutError(f"stomp.py took {got} of {count} messages")
        return time.perf_counter() - start
    finally:
        conn.disconnect()


# -- the broker's ceiling ---------------------------------------------------------------------


def _server(url: str) -> Any:
    from benchmarks.rawstomp import Server

    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) or None
    return Server(
        "spark",
        parts.hostname or "127.0.0.1",
        parts.port or 61613,
        parts.username,
        parts.password,
        vhost=vhost,
    )


def bare_publish(url: str, count: int) -> float:
    """Seconds for two bare sockets to publish ``count`` messages between them."""
    from benchmarks.rawstomp import Deadline, raw_publish

    destination = queue("cw")
    times: list[float] = []
    threads = [
        threading.Thread(
            target=lambda: times.append(
                raw_publish(_server(url), destination, count // 2, Deadline(300))[0]
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    drain_count(url, destination)
    if len(times) != 2:
        raise RuntimeError("a bare publisher failed")
    return max(times)


def bare_consume(url: str, count: int, ack: str = "client-individual") -> float:
    """Seconds for a bare socket to take ``count`` messages, acknowledging each (or,
    with ``ack="client"``, all of them at the end, as a batch-read task does)."""
    from benchmarks.rawstomp import Deadline, raw_consume

    destination = queue("cr")
    fill(url, destination, count)
    return raw_consume(_server(url), destination, count, Deadline(300), ack=ack)[0]


# -- Spark ------------------------------------------------------------------------------------


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from stompy.spark import StompDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("stompy-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(StompDataSource)
    return session


class Runs:
    """One workload's contenders on one broker, each call one timed run."""

    def __init__(self, spark: Any, url: str, count: int, work: Path) -> None:
        self.spark = spark
        self.url = url
        self.count = count
        self.work = work
        self.frame = (
            spark.range(0, count, numPartitions=2)
            .selectExpr(f"lpad(CAST(id AS STRING), {BODY}, 'x') AS body")
            .cache()
        )
        self.frame.count()
        self.parquet = Path(tempfile.mkdtemp(dir=work)) / "rows"
        self.frame.write.parquet(str(self.parquet))
        #: Every end-to-end time of the connector's streaming read (for the log).
        self.stream_wall: list[float] = []

    def _check(self, destination: str, who: str) -> None:
        got = drain_count(self.url, destination)
        if got < self.count:
            raise AssertionError(f"{who}: {got} of {self.count} messages arrived")

    # writes ---------------------------------------------------------------------------

    def stompy_batch_write(self) -> float:
        destination = queue("bw")
        start = time.perf_counter()
        (
            self.frame.write.format("stomp")
            .mode("append")
            .option("url", self.url)
            .option("destination", destination)
            .save()
        )
        elapsed = time.perf_counter() - start
        self._check(destination, "batch write")
        return elapsed

    def peer_batch_write(self) -> float:
        destination = queue("pw")
        start = time.perf_counter()
        self.frame.foreachPartition(stomppy_send_partition(self.url, destination))
        elapsed = time.perf_counter() - start
        self._check(destination, "foreachPartition")
        return elapsed

    def _file_stream(self) -> Any:
        schema = self.spark.read.parquet(str(self.parquet)).schema
        return self.spark.readStream.schema(schema).parquet(str(self.parquet))

    def stompy_stream_write(self) -> float:
        destination = queue("sw")
        checkpoint = tempfile.mkdtemp(dir=self.work)
        start = time.perf_counter()
        query = (
            self._file_stream()
            .writeStream.format("stomp")
            .option("url", self.url)
            .option("destination", destination)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(600)
        elapsed = time.perf_counter() - start
        self._check(destination, "streaming write")
        return elapsed

    def peer_stream_write(self) -> float:
        destination = queue("psw")
        checkpoint = tempfile.mkdtemp(dir=self.work)
        send = stomppy_send_partition(self.url, destination)
        start = time.perf_counter()
        query = (
            self._file_stream()
            .writeStream.foreachBatch(lambda frame, _id: frame.foreachPartition(send))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(600)
        elapsed = time.perf_counter() - start
        self._check(destination, "foreachBatch")
        return elapsed

    # reads ----------------------------------------------------------------------------

    def stompy_stream_read(self) -> float:
        destination = queue("sr")
        fill(self.url, destination, self.count)
        checkpoint = tempfile.mkdtemp(dir=self.work)
        start = time.perf_counter()
        query = (
            self.spark.readStream.format("stomp")
            .option("url", self.url)
            .option("destination", destination)
            .option("maxMessagesPerBatch", str(PER_BATCH))
            .option("idleTimeout", "0.5")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(600)
        self.stream_wall.append(time.perf_counter() - start)
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        if rows < self.count:
            raise AssertionError(f"streaming read: {rows} of {self.count} rows")
        busy: float = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        return float(busy * self.count / rows)

    def stompy_batch_read(self) -> float:
        destination = queue("br")
        fill(self.url, destination, self.count)
        start = time.perf_counter()
        rows = (
            self.spark.read.format("stomp")
            .option("url", self.url)
            .option("destination", destination)
            .option("numPartitions", "2")
            .option("idleTimeout", "0.5")
            .load()
            .count()
        )
        elapsed = time.perf_counter() - start
        if rows < self.count:
            raise AssertionError(f"batch read: {rows} of {self.count} rows")
        return elapsed

    def peer_drain(self) -> float:
        destination = queue("pd")
        fill(self.url, destination, self.count)
        return stomppy_drain(self.url, destination, self.count)

    def contenders(self, workload: str) -> list[tuple[str, Callable[[], float]]]:
        write_ceiling = (CEILING, lambda: bare_publish(self.url, self.count))
        read_ceiling = (CEILING, lambda: bare_consume(self.url, self.count))
        held_ceiling = (CEILING, lambda: bare_consume(self.url, self.count, "client"))
        return {
            "batch write": [
                (STOMPY, self.stompy_batch_write),
                (PEER, self.peer_batch_write),
                write_ceiling,
            ],
            "streaming write": [
                (STOMPY, self.stompy_stream_write),
                (PEER, self.peer_stream_write),
                write_ceiling,
            ],
            "streaming read": [
                (STOMPY, self.stompy_stream_read),
                (PEER, self.peer_drain),
                read_ceiling,
            ],
            "batch read": [
                (STOMPY, self.stompy_batch_read),
                (PEER, self.peer_drain),
                held_ceiling,
            ],
        }[workload]


class _TenRows:
    """A Python data source that costs nothing: what Spark alone spends on a batch read."""

    @staticmethod
    def register(spark: Any) -> str:
        from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

        class Reader(DataSourceReader):
            def partitions(self) -> list[InputPartition]:
                return [InputPartition(0), InputPartition(1)]

            def read(self, partition: InputPartition) -> Iterator[tuple[bytes]]:
                for _ in range(5):
                    yield (b"x",)

        class Source(DataSource):
            @classmethod
            def name(cls) -> str:
                return "stompy-bench-ten-rows"

            def schema(self) -> str:
                return "body binary"

            def reader(self, schema: Any) -> DataSourceReader:
                return Reader()

        spark.dataSource.register(Source)
        return Source.name()


def spark_floor(spark: Any, rounds: int) -> list[float]:
    """Seconds of ``count()`` over :class:`_TenRows`, warmed up once, ``rounds`` times."""
    name = _TenRows.register(spark)
    spark.read.format(name).load().count()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        spark.read.format(name).load().count()
        times.append(time.perf_counter() - start)
    return times


# -- memory -------------------------------------------------------------------------------------


def _python_children() -> list[int]:
    """Spark's Python processes: the workers and the streaming source's runner."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark.daemon" in cmdline or b"python_streaming_source_runner" in cmdline:
            found.append(int(entry.name))
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_during(run: Callable[[], object]) -> float:
    """The highest RSS (MB) any of Spark's Python processes reached while ``run`` ran."""
    peak = 0.0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            for pid in _python_children():
                peak = max(peak, _rss_mb(pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        stop.set()
        sampler.join(5)
    return peak


# -- the group --------------------------------------------------------------------------------


def describe(settings: Settings) -> dict[str, Any]:
    return {
        "messages": _count(settings),
        "body_bytes": BODY,
        "rounds": _rounds(settings),
        "spark": "local[2], one session, warmed up",
        "maxMessagesPerBatch": PER_BATCH,
        "brokers": "stompy broker (own process); RabbitMQ 127.0.0.1:61613 when it answers",
    }


TARGETS: Final[tuple[Target | Limit, ...]] = (
    *(
        Target(f"{workload} ({broker})", PEER, 2.0 if "write" in workload else 1.0)
        for broker in ("stompy broker", "rabbitmq")
        for workload in WORKLOADS
    ),
    Limit("streaming read memory growth (stompy broker)", STOMPY, 50.0),
)


@register(
    GROUP,
    "the Spark connector vs foreachPartition + stomp.py and a stomp.py drain (msg/s)",
    targets=TARGETS,
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        return [Row(GROUP, "all", "all", float("nan"), "msg/s", note=f"no PySpark: {exc}")]
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return [Row(GROUP, "all", "all", float("nan"), "msg/s", note="no Java")]
    count = _count(settings)
    rounds = _rounds(settings)
    rows: list[Row] = []
    spark = spark_session()
    work = Path(tempfile.mkdtemp(prefix="stompy-spark-bench-"))
    try:
        floor = spark_floor(spark, max(rounds, 3))
        log(settings, f"spark: a batch read of a source that does nothing: {floor} s")
        rows.append(
            Row(
                GROUP,
                "batch read: Spark's floor",
                "no-op source",
                statistics.median(floor),
                "s",
                higher_is_better=False,
                samples=tuple(floor),
            )
        )
        brokers: list[tuple[str, Callable[[], contextlib.AbstractContextManager[str]]]] = [
            ("stompy broker", own_broker)
        ]
        why = rabbitmq_answers() if settings.brokers else "skipped (--no-brokers)"
        if why is None:
            brokers.append(("rabbitmq", lambda: contextlib.nullcontext(RABBITMQ_URL)))
        else:
            log(settings, f"spark rabbitmq: {why}")
            rows.append(Row(GROUP, "rabbitmq", "all", float("nan"), "msg/s", note=why))
        for broker, open_broker in brokers:
            with open_broker() as url:
                runs = Runs(spark, url, count, work)
                warm = Runs(spark, url, min(count, 2_000), work)
                for workload in WORKLOADS:  # the JVM, the workers, the runner: once
                    for who, contender in warm.contenders(workload):
                        if who != CEILING:
                            contender()
                for workload in WORKLOADS:
                    name = f"{workload} ({broker})"
                    chosen = [c for c in runs.contenders(workload) if settings.wants(c[0])]
                    rates, failed = alternate_timed(chosen, rounds, count, settings, name)
                    rows += rows_from_rates(GROUP, name, rates, "msg/s")
                    rows += failure_rows(GROUP, name, failed, "msg/s")
                if runs.stream_wall:
                    walls = ", ".join(f"{count / w:,.0f}" for w in runs.stream_wall)
                    log(settings, f"  streaming read ({broker}) end to end: {walls} msg/s")
                if broker == "stompy broker" and settings.wants(STOMPY):
                    small = peak_rss_during(Runs(spark, url, count, work).stompy_stream_read)
                    large = peak_rss_during(Runs(spark, url, 2 * count, work).stompy_stream_read)
                    log(
                        settings,
                        f"  peak RSS of Spark's Python processes: {small:.0f} MB "
                        f"at {count:,} messages, {large:.0f} MB at {2 * count:,}",
                    )
                    rows.append(
                        Row(
                            GROUP,
                            f"streaming read memory growth ({broker})",
                            STOMPY,
                            large - small,
                            "MB",
                            higher_is_better=False,
                            samples=(small, large),
                        )
                    )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows

"""The first write of a session: what the connector adds to Spark's own cold cost.

Each contender runs in a driver process of its own (a fresh JVM and fresh Python
workers, as the first write of a pipeline pays them): the session starts, a job that
runs no Python warms the JVM (``spark.range(10).count()``), and then the timed call
writes a 100-row DataFrame (two partitions):

* ``no-op source``: a Python data source whose writer takes the rows and does
  nothing: Spark's floor for any Python data source's first write;
* ``stompy``: ``df.write.format("stomp")`` into stompy's broker;
* ``stomp.py``: ``df.foreachPartition`` with a stomp.py connection per partition and
  one receipt at its end.

The connector's cost is its time less the floor's; what it does in a write task is
also timed alone (a fresh interpreter: its imports, the first partition written with
its first connection, a second one). Then a streaming read in a fresh
driver (``readStream.format("stomp")`` into a parquet sink, 100 queued messages, then
100 more three times): the seconds from ``start()`` to the first micro-batch landed,
and the first micro-batch's ``triggerExecution`` against the later ones'. Beside them,
the imports a Python worker pays for the connector (``python -X importtime``), measured in a fresh
interpreter: the modules a write task unpickles (``stompy.spark._source``), against
PySpark's own (``pyspark.sql.datasource``) in the same interpreter before them.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from typing import Any, Final

from benchmarks._core import Row, Settings, log, register

GROUP: Final = "spark-cold"
FLOOR: Final = "no-op source"
CONTENDERS: Final = (FLOOR, "stompy", "stomp.py")
ROWS: Final = 100

_DRIVER: Final = r"""
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage

who, url = sys.argv[1], sys.argv[2]

class NoOpWriter(DataSourceWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()

class NoOp(DataSource):
    @classmethod
    def name(cls):
        return "stompy-bench-noop"

    def writer(self, schema, overwrite):
        return NoOpWriter()

spark = (
    SparkSession.builder.master("local[2]").appName("stompy-cold")
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1").getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.range(10).count()
frame = spark.range(0, ROWS, numPartitions=2).selectExpr("CAST(id AS STRING) AS body")
if who == "no-op source":
    spark.dataSource.register(NoOp)
    run = lambda: frame.write.format("stompy-bench-noop").mode("append").save()
elif who == "stompy":
    from stompy.spark import StompDataSource
    spark.dataSource.register(StompDataSource)
    run = lambda: (
        frame.write.format("stomp").mode("append").option("url", url)
        .option("destination", "/queue/stompy-cold").save()
    )
else:
    from benchmarks.spark import stomppy_send_partition
    send = stomppy_send_partition(url, "/queue/stompy-cold")
    run = lambda: frame.foreachPartition(send)
start = time.perf_counter()
run()
print(f"SECONDS {time.perf_counter() - start:.4f}", flush=True)
spark.stop()
""".replace("ROWS", str(ROWS))


_STREAM_DRIVER: Final = r"""
import os, sys, tempfile, time
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
import stompy
from pyspark.sql import SparkSession
from stompy.spark import StompDataSource

url, destination = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[2]").appName("stompy-cold-stream")
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1").getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.range(10).count()
spark.dataSource.register(StompDataSource)

def fill():
    with stompy.Connection(url) as conn:
        batch = (stompy.Outgoing(destination, b"x" * 100) for _ in range(ROWS))
        conn.send_many(batch, receipt=True)

def landed(query, batches):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [p for p in query.recentProgress if p["numInputRows"]]
        if len(done) >= batches:
            return done
        time.sleep(0.05)
    raise TimeoutError(f"{batches} batches did not land")

work = tempfile.mkdtemp()
fill()
start = time.perf_counter()
query = (
    spark.readStream.format("stomp").option("url", url).option("destination", destination)
    .load().writeStream.format("parquet").option("path", work + "/rows")
    .option("checkpointLocation", work + "/checkpoint").start()
)
landed(query, 1)
print(f"FIRST {time.perf_counter() - start:.4f}", flush=True)
for batches in range(2, BATCHES + 1):
    fill()
    done = landed(query, batches)
query.stop()
print("BATCHES " + " ".join(str(p["durationMs"]["triggerExecution"]) for p in done), flush=True)
spark.stop()
""".replace("ROWS", str(ROWS)).replace("BATCHES + 1", "5")


def stream_batches(url: str) -> tuple[float, list[float]]:
    """A fresh session's streaming read of ``ROWS`` queued messages, then ``ROWS`` more
    three times, one micro-batch each: the seconds from ``start()`` to the first
    batch landed, and each batch's ``triggerExecution`` (s) as Spark reports it."""
    import uuid

    destination = f"/queue/stompy-cold-stream-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", _STREAM_DRIVER, url, destination],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[1:])},
    )
    first = re.search(r"FIRST (\S+)", done.stdout)
    batches = re.search(r"BATCHES (.+)", done.stdout)
    if first is None or batches is None:
        raise RuntimeError(f"streaming read: no times ({done.stderr[-2000:]})")
    return float(first.group(1)), [int(ms) / 1000 for ms in batches.group(1).split()]


def first_write(who: str, url: str) -> float:
    """Seconds of the first write of a fresh session (see the module)."""
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, who, url],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[1:])},
    )
    match = re.search(r"SECONDS (\S+)", done.stdout)
    if match is None:
        raise RuntimeError(f"{who}: no time ({done.stderr[-2000:]})")
    return float(match.group(1))


_TASK: Final = r"""
import sys, time
import pyarrow, pyspark.sql.datasource  # what any Arrow write task imports first
start = time.perf_counter()
import stompy.spark._source
from stompy.spark._options import parse_write_options
from stompy.spark._write import TaskIdentity, WriteColumns, write_partition
imported = time.perf_counter()
settings = parse_write_options({"url": sys.argv[1], "destination": "/queue/stompy-cold"})
columns = WriteColumns.from_schema([("body", "string")], settings.destination)
rows = pyarrow.RecordBatch.from_pydict({"body": [str(i) for i in range(HALF)]})
write_partition(iter([rows]), settings, columns, TaskIdentity("cold", "0", 0))
first = time.perf_counter()
write_partition(iter([rows]), settings, columns, TaskIdentity("cold", "0", 1))
print(f"TASK {imported - start:.4f} {first - imported:.4f} {time.perf_counter() - first:.4f}")
""".replace("HALF", str(ROWS // 2))


def task_seconds(url: str) -> tuple[float, float, float]:
    """The connector's part of a cold write task, in a fresh interpreter that has
    imported what PySpark's Arrow write task does: seconds importing the connector,
    writing one partition of the cold write (its first connection), and another."""
    done = subprocess.run(
        [sys.executable, "-c", _TASK, url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[1:])},
    )
    match = re.search(r"TASK (\S+) (\S+) (\S+)", done.stdout)
    if match is None:
        raise RuntimeError(f"write task: no times ({done.stderr[-2000:]})")
    imports, first, second = (float(match.group(i)) for i in (1, 2, 3))
    return imports, first, second


def import_seconds(module: str, after: str = "") -> float:
    """Seconds a fresh interpreter spends importing ``module`` (after ``after``)."""
    code = f"import {after}" if after else "pass"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"{code}\nimport {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[1:])},
    )
    total = 0
    started = not after
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        if not started:
            started = name.strip() == after
            continue
        if name == f" {module}":  # top level: its cumulative time covers the rest
            total = int(parts[1])
    return total / 1e6


def describe(settings: Settings) -> dict[str, Any]:
    return {
        "rows": ROWS,
        "rounds": settings.pick_rounds(3, 1),
        "spark": "local[2], a fresh driver per run, the JVM warmed by a job without Python",
    }


@register(
    GROUP,
    "the first write of a session: Spark's floor (a no-op Python source) and the connector (s)",
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    from benchmarks.spark import own_broker

    rounds = settings.pick_rounds(3, 1)
    rows: list[Row] = []
    with own_broker() as url:
        times: dict[str, list[float]] = {who: [] for who in CONTENDERS}
        for _ in range(rounds):
            for who in CONTENDERS:
                times[who].append(first_write(who, url))
                log(settings, f"  first write, {who}: {times[who][-1]:.2f} s")
        starts: list[float] = []
        firsts: list[float] = []
        laters: list[float] = []
        for _ in range(rounds):
            start, batches = stream_batches(url)
            starts.append(start)
            firsts.append(batches[0])
            laters += batches[1:]
            log(
                settings,
                f"  streaming read: first batch landed {start:.2f} s after start(); "
                f"batches (s): {', '.join(f'{b:.2f}' for b in batches)}",
            )
        tasks = [task_seconds(url) for _ in range(3)]
    for who, samples in times.items():
        rows.append(
            Row(
                GROUP,
                "first write of a session",
                who,
                statistics.median(samples),
                "s",
                higher_is_better=False,
                samples=tuple(samples),
            )
        )
    floor = statistics.median(times[FLOOR])
    ours = statistics.median(times["stompy"])
    log(settings, f"  the connector's cost over the floor: {ours - floor:.2f} s")
    for who, samples in (
        ("start() to the first batch landed", starts),
        ("first micro-batch", firsts),
        ("later micro-batches", laters),
    ):
        rows.append(
            Row(
                GROUP,
                "a streaming read of a fresh session",
                who,
                statistics.median(samples),
                "s",
                higher_is_better=False,
                samples=tuple(samples),
            )
        )
    for index, who in enumerate(("imports", "the first partition written", "a second partition")):
        samples = [task[index] for task in tasks]
        rows.append(
            Row(
                GROUP,
                "the connector in a fresh write task",
                who,
                statistics.median(samples),
                "s",
                higher_is_better=False,
                samples=tuple(samples),
            )
        )
    imports = [import_seconds("stompy.spark._source", "pyspark.sql.datasource") for _ in range(3)]
    pyspark = [import_seconds("pyspark.sql.datasource") for _ in range(3)]
    for who, samples in (("stompy.spark._source", imports), ("pyspark.sql.datasource", pyspark)):
        rows.append(
            Row(
                GROUP,
                "imports of a Python worker",
                who,
                statistics.median(samples),
                "s",
                higher_is_better=False,
                samples=tuple(samples),
            )
        )
    return rows

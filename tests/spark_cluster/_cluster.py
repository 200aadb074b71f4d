"""A Spark standalone cluster on this machine, started from the pyspark package's launcher.

``$SPARK_HOME/bin/spark-class`` (SPARK_HOME: the pyspark package's directory) runs a
``Master`` and two ``Worker`` JVMs, one core each, everything bound to 127.0.0.1.
Each daemon is a session of its own: killing a worker's session takes its executor
and that executor's Python workers with it, as losing the machine would. Each is also
started with the parent-death signal set, so a test run that is itself killed does not
leave them behind.

The executors run this interpreter (``PYSPARK_PYTHON``) with this checkout first on
``PYTHONPATH`` (``spark.executorEnv.PYTHONPATH``): they import the stompy under test.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.spark._support import kill_tree

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

#: The checkout: the executors import stompy from here.
ROOT = Path(__file__).resolve().parents[2]
#: How long a daemon may take to say it is ready (a JVM start on a busy 2-core machine).
START_TIMEOUT = 120.0

#: For every JVM here: they live for a minute, so the quick compiler alone (its code is
#: slower, but it compiles for a fraction of the CPU) and the serial collector.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL me when the process that started me ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class Daemon:
    """One Master or Worker JVM, its output in a log file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",  # the web UIs bind here too
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
            # No REST submission server: it would listen on the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                text=True,
                start_new_session=True,  # killed as a whole, with what it starts
                preexec_fn=die_with_parent,
            )

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        """The first match of ``pattern`` in the log, once the daemon wrote it."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_text(errors="replace")
            match = re.search(pattern, text)
            if match is not None:
                return match
            if self.proc.poll() is not None or time.monotonic() > deadline:
                state = "exited" if self.proc.poll() is not None else f"not within {timeout} s"
                raise RuntimeError(f"{self.name}: {pattern!r} {state}; log:\n{text[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the daemon's whole session; return once none of it is left."""
        kill_tree(self.proc)


class Cluster:
    """A master and ``workers`` workers of one core each; :meth:`stop` kills them all."""

    def __init__(self, work: Path, workers: int = 2) -> None:
        self._work = work
        self.workers: list[Daemon | None] = [None] * workers
        self.master = Daemon(
            "master",
            [
                *("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
                *("--port", "0", "--webui-port", "0"),
            ],
            work / "master.log",
        )
        try:
            self.url = self.master.wait_for(r"Starting Spark master at (spark://\S+)")[1]
            self.master.wait_for(r"elected leader")
            for index in range(workers):
                self.start_worker(index, wait=False)
            for index in range(workers):
                self.wait_worker(index)
        except BaseException:
            self.stop()
            raise

    def start_worker(self, index: int, wait: bool = True) -> None:
        """Start worker ``index`` (again, after :meth:`kill_worker`)."""
        assert self.workers[index] is None, f"worker {index} is running"
        work_dir = self._work / f"worker{index}"
        work_dir.mkdir(exist_ok=True)
        args = [
            *("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"),
            *("--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "512m"),
            *("--work-dir", str(work_dir), self.url),
        ]
        log = self._work / f"worker{index}-{time.monotonic_ns()}.log"
        self.workers[index] = Daemon(f"worker {index}", args, log)
        if wait:
            self.wait_worker(index)

    def wait_worker(self, index: int) -> None:
        worker = self.workers[index]
        assert worker is not None
        worker.wait_for(r"Successfully registered with master")

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executor and Python workers."""
        worker = self.workers[index]
        assert worker is not None, f"worker {index} is not running"
        self.workers[index] = None
        worker.kill()

    def stop(self) -> None:
        """Kill the workers, then the master; each kill waits (bounded) until it is done."""
        for index, worker in enumerate(self.workers):
            if worker is not None:
                self.kill_worker(index)
        self.master.kill()


def session(master: str, app: str) -> SparkSession:
    """A SparkSession in client mode on ``master``, its executors running this checkout.

    It waits (up to a minute) until both executors have registered, so that every
    test starts with the whole cluster.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from stompy.spark import StompDataSource

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executorEnv.PYTHONPATH", str(ROOT))
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StompDataSource)
    return spark


def executors(spark: SparkSession) -> int:
    """How many executors the driver knows of now (the driver itself not counted)."""
    return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


#: The most rows in one micro-batch of :func:`start_copy`: small, so a query runs many.
PER_BATCH = 250


def start_copy(spark: SparkSession, url: str, checkpoint: Path) -> StreamingQuery:
    """A streaming query copying /queue/in to /queue/out, run by the executors.

    Each message written carries its source's ``message_id`` (``source-id``) and
    ``redelivered`` flag (``source-redelivered``): a test tells each copy's origin.
    """
    source = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/in")
        .option("maxMessagesPerBatch", str(PER_BATCH))
        .load()
    )
    headers = "map('source-id', message_id, 'source-redelivered', CAST(redelivered AS STRING))"
    return (
        source.selectExpr("body", f"{headers} AS headers")
        .writeStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

"""Helpers of the Spark tests."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import stompy

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


def skip_without_spark() -> None:
    """Skip the calling test module, saying why, when Spark cannot run here."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip(
            "Spark tests need Java (17 or later) on PATH or JAVA_HOME", allow_module_level=True
        )
    missing = [m for m in ("pyspark.sql.datasource", "pyarrow") if not _importable(m)]
    if missing:
        pytest.skip(
            f"Spark tests need PySpark 4.0+ and pyarrow (pip install -e '.[spark]'); "
            f"cannot import {', '.join(missing)}",
            allow_module_level=True,
        )


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


class Collector:
    """Counts what arrives on a destination, in a thread of its own, until closed."""

    def __init__(self, url: str, destination: str) -> None:
        self._lock = threading.Lock()
        self.by_id: Counter[str] = Counter()
        self.bodies: set[bytes] = set()
        #: The de-duplication ids the messages carried.
        self.dedup: set[str] = set()
        self.total = 0
        self._conn = stompy.Connection(url)
        self._conn.connect()
        self._conn.subscribe(destination, on_message=self._take, receipt=True)

    def _take(self, message: stompy.Message) -> None:
        with self._lock:
            self.by_id[message.headers.get("source-id", message.message_id)] += 1
            self.bodies.add(message.body)
            self.dedup.add(message.headers.get("stompy-dedup-id", ""))
            self.total += 1

    @property
    def unique(self) -> int:
        with self._lock:
            return len(self.by_id)

    @property
    def duplicates(self) -> int:
        with self._lock:
            return self.total - len(self.by_id)

    def close(self) -> None:
        self._conn.close()


@contextlib.contextmanager
def broker_process() -> Iterator[str]:
    """``stompy broker`` in a process of its own (it outlives a killed driver, as a real
    broker would); yields its URL, terminates it on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "broker", "--port", "0", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"(stomp://\S+)", proc.stdout.readline())
        assert match is not None
        yield match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _session_members(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the driver, its JVM, Spark's workers)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            fields = stat.rpartition(")")[2].split()
            # fields[0] is the state: a zombie is gone already.
            if int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def kill_tree(driver: subprocess.Popen[str]) -> None:
    """SIGKILL the driver's whole session at once and wait until none of it is left."""
    sid = driver.pid
    for pid in [sid, *_session_members(sid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    driver.wait(30)
    deadline = time.monotonic() + 30
    while _session_members(sid):
        assert time.monotonic() < deadline, f"still alive: {_session_members(sid)}"
        for pid in _session_members(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def wait_for_process(
    what: Callable[[], bool], driver: subprocess.Popen[str], timeout: float
) -> None:
    """Wait until ``what()`` holds; fail if the driver exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not what():
        assert driver.poll() is None, f"the driver exited with {driver.returncode}"
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def wait_for_query(what: Callable[[], bool], query: StreamingQuery, timeout: float) -> None:
    """Wait until ``what()`` holds; fail if the query fails first or time runs out."""
    deadline = time.monotonic() + timeout
    while not what():
        error = query.exception()
        if error is not None:
            raise AssertionError(f"the streaming query failed: {error}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not done within {timeout} s: {query.lastProgress}")
        time.sleep(0.2)

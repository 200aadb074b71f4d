"""A streaming query's driver killed with SIGKILL mid-stream, then restarted: nothing lost.

The broker runs in a process of its own (``stompy broker``), so it outlives the driver
as a real one would; the driver (with its JVM and Spark's Python workers) is a process
group killed at once, the way a machine failure or an OOM kill ends it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.spark._support import Collector, skip_without_spark

skip_without_spark()

import stompy  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MESSAGES = 5_000
DRIVER = Path(__file__).with_name("_kill_driver.py")


@pytest.fixture
def broker_url() -> Iterator[str]:
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


def start_driver(url: str, checkpoint: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), url, str(checkpoint)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own session: killed as a whole
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )


def wait_for(what: Callable[[], bool], driver: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert driver.poll() is None, f"the driver exited with {driver.returncode}"
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def test_a_killed_driver_restarted_from_its_checkpoint_loses_nothing(
    broker_url: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    with stompy.Connection(broker_url) as conn:
        messages = (stompy.Outgoing("/queue/in", str(i)) for i in range(MESSAGES))
        conn.send_many(messages, receipt=True)
    checkpoint = tmp_path / "checkpoint"
    collector = Collector(broker_url, "/queue/out")
    try:
        driver = start_driver(broker_url, checkpoint)
        try:
            wait_for(lambda: collector.total >= 1_000, driver, timeout=180)
        finally:
            kill_tree(driver)
        before = collector.total
        assert before < MESSAGES, "the query finished before it could be killed"

        driver = start_driver(broker_url, checkpoint)
        try:
            wait_for(lambda: collector.unique >= MESSAGES, driver, timeout=180)
        finally:
            kill_tree(driver)
        record_property("messages", MESSAGES)
        record_property("duplicates", collector.duplicates)
        print(
            f"\nSIGKILL mid-stream: {MESSAGES} messages, {collector.unique} unique after "
            f"de-duplicating, {collector.duplicates} duplicates, {before} delivered before "
            "the kill"
        )
        assert collector.unique == MESSAGES
        assert collector.bodies == {str(i).encode() for i in range(MESSAGES)}
    finally:
        collector.close()

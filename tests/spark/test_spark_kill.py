"""A streaming query's driver killed with SIGKILL mid-stream, then restarted: nothing lost.

The broker runs in a process of its own (``stompy broker``), so it outlives the driver
as a real one would; the driver (with its JVM and Spark's Python workers) is a process
group killed at once, the way a machine failure or an OOM kill ends it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.spark._support import (
    Collector,
    broker_process,
    kill_tree,
    skip_without_spark,
    wait_for_process,
)

skip_without_spark()

import stompy  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MESSAGES = 5_000
DRIVER = Path(__file__).with_name("_kill_driver.py")


@pytest.fixture
def broker_url() -> Iterator[str]:
    with broker_process() as url:
        yield url


def start_driver(url: str, checkpoint: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), url, str(checkpoint)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own session: killed as a whole
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )


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
            wait_for_process(lambda: collector.total >= 1_000, driver, timeout=180)
        finally:
            kill_tree(driver)
        before = collector.total
        assert before < MESSAGES, "the query finished before it could be killed"

        driver = start_driver(broker_url, checkpoint)
        try:
            wait_for_process(lambda: collector.unique >= MESSAGES, driver, timeout=180)
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

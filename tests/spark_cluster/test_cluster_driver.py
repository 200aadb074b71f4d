"""A streaming query's driver on the cluster SIGKILLed mid-stream, then restarted from
its checkpoint: nothing lost, every duplicate read redelivered.

The driver is a process of its own (``_driver.py``), in a session of its own killed
as a whole (its JVM and Python workers with it); the master then ends its executors,
and the restarted driver gets the cluster's two cores.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tests.spark._support import skip_without_spark

skip_without_spark()

from tests.spark._support import kill_tree, wait_for_process  # noqa: E402
from tests.spark_cluster._cluster import PER_BATCH, ROOT, Cluster, die_with_parent  # noqa: E402
from tests.spark_cluster._support import Copies, check_copies, send  # noqa: E402

MESSAGES = 2_000


def start_driver(
    cluster: Cluster, url: str, checkpoint: Path, log: IO[str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark_cluster._driver", cluster.url, url, str(checkpoint)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own session: killed as a whole
        preexec_fn=die_with_parent,
    )


def wait_for_driver(
    what: Callable[[], bool], driver: subprocess.Popen[str], log: Path, timeout: float
) -> None:
    """``wait_for_process``, with the end of the driver's log when it fails."""
    try:
        wait_for_process(what, driver, timeout)
    except AssertionError as error:
        end = log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"{error}; the driver's log ends:\n{end}") from None


def test_a_killed_driver_restarted_from_its_checkpoint_loses_nothing(
    cluster: Cluster,
    broker_url: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    send(broker_url, MESSAGES)
    checkpoint = tmp_path / "checkpoint"
    copies = Copies(broker_url, "/queue/out")
    try:
        log_path = tmp_path / "driver.log"
        with log_path.open("w") as log:
            driver = start_driver(cluster, broker_url, checkpoint, log)
            try:
                wait_for_driver(lambda: copies.total >= 2 * PER_BATCH, driver, log_path, 180)
            finally:
                kill_tree(driver)
            before = copies.total
            assert before < MESSAGES, "the query finished before it could be killed"

            driver = start_driver(cluster, broker_url, checkpoint, log)
            try:
                wait_for_driver(lambda: copies.unique >= MESSAGES, driver, log_path, 180)
            finally:
                kill_tree(driver)
        record_property("duplicates", copies.duplicates)
        print(
            f"\ndriver SIGKILLed and restarted: {MESSAGES} messages, {copies.unique} unique, "
            f"{copies.duplicates} duplicates, {copies.redelivered} read redelivered, "
            f"{before} delivered before the kill"
        )
        check_copies(copies, MESSAGES)
    finally:
        copies.close()

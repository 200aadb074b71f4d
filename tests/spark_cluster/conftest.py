"""The standalone cluster the tests here run on (see ``_cluster.py``), started once.

They start JVMs for a minute or more, so they run only when asked for:
``STOMPY_SPARK_CLUSTER=1`` (``nox -s spark_cluster`` sets it); otherwise they skip,
saying so. The ``tests`` session leaves this directory out.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark_cluster._cluster import Cluster

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)
            # PySpark's gateway client leaves sockets for the garbage collector.
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers (one core each) on 127.0.0.1, killed at the end.

    SIGTERM (a CI timeout) is turned into KeyboardInterrupt while it runs, so pytest
    still tears it down; a run killed outright takes the daemons with it (their
    parent-death signal).
    """
    if os.environ.get("STOMPY_SPARK_CLUSTER") != "1":
        pytest.skip("starts a Spark cluster: set STOMPY_SPARK_CLUSTER=1 (nox -s spark_cluster)")
    from tests.spark._support import skip_without_spark

    skip_without_spark()
    from tests.spark_cluster._cluster import Cluster

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        running = Cluster(tmp_path_factory.mktemp("cluster"))
        try:
            yield running
        finally:
            running.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def broker_url() -> Iterator[str]:
    """The broker, ``stompy broker`` in a process of its own, one per test."""
    from tests.spark._support import broker_process

    with broker_process() as url:
        yield url


@pytest.fixture(scope="module")
def spark(cluster: Cluster) -> Iterator[SparkSession]:
    """A driver in this process with both executors registered; stopped after the
    module, which frees the cluster's two cores for the next module's driver."""
    from tests.spark_cluster._cluster import executors, session

    spark = session(cluster.url, "stompy-cluster-tests")
    try:
        assert executors(spark) == 2
        yield spark
    finally:
        spark.stop()

"""examples/spark_pipeline.py does its job, on the tests' SparkSession."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.spark._support import skip_without_spark

skip_without_spark()

from pyspark.sql import SparkSession  # noqa: E402

from stompy.testing import run_broker  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    # PySpark 4.0's gateway client leaves sockets for the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

AVAILABLE_NOW_MIXIN = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pipeline_example_moves_the_big_orders(spark: SparkSession, tmp_path: Path) -> None:
    example = load_example()
    with run_broker() as broker:
        example.send_orders(broker.url)
        # AvailableNow: the query ends by itself once the input queue is idle.
        example.run_pipeline(spark, broker.url, str(tmp_path / "checkpoint"))
        results = example.received(broker.url)
        expected = [i for i in range(example.ORDERS) if i % 3]
        assert [r["order"] for r in results] == expected
        assert {r["customer"] for r in results} <= {f"CUSTOMER-{i}" for i in range(4)}
        assert all(r["amount"] == 150.0 for r in results)
        assert broker.unacked_count() == 0
        if AVAILABLE_NOW_MIXIN:
            # The query's last look at the source acknowledged the last batch.
            assert broker.queue_depth("/queue/orders") == 0
        else:
            # Without the mixin (PySpark 4.0) Spark runs one batch and never tells the
            # source it is done: it is redelivered to the next run (at-least-once).
            assert broker.queue_depth("/queue/orders") == example.ORDERS + 1

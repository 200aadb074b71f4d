"""A Spark pipeline from STOMP to STOMP: read orders, keep the big ones, send them on.

Needs PySpark 4.0+, pyarrow and Java 17+ (``pip install '.[spark]'`` from a clone of
stompy; ``stompy-client[spark]`` once released).
Runs against an in-process broker it starts itself::

    python examples/spark_pipeline.py

The streaming query reads ``/queue/orders`` (JSON bodies), keeps the orders of 100 or
more, reshapes them and writes them to ``/queue/big-orders``, each carrying the id of
the message it came from. ``Trigger.AvailableNow`` makes it stop once the queue has
been idle for ``idleTimeout`` seconds.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import TYPE_CHECKING

import stompy
from stompy.testing import run_broker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ORDERS = 20


def send_orders(url: str, count: int = ORDERS) -> None:
    """Put ``count`` orders on ``/queue/orders``: every third one is big."""
    with stompy.Connection(url) as conn:
        for i in range(count):
            order = {"id": i, "customer": f"customer-{i % 4}", "amount": 150.0 if i % 3 else 20.0}
            conn.send("/queue/orders", json.dumps(order), content_type="application/json")
        conn.send("/queue/orders", json.dumps({"id": -1, "amount": 0}), receipt=True)


def run_pipeline(spark: SparkSession, url: str, checkpoint: str) -> None:
    """STOMP in, transform, STOMP out; returns when the input queue is drained."""
    orders = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/orders")
        .option("idleTimeout", "2")
        .load()
    )
    big = orders.selectExpr(
        "from_json(CAST(body AS STRING), 'id INT, customer STRING, amount DOUBLE') AS o",
        "message_id",
    ).where("o.amount >= 100")
    out = big.selectExpr(
        "to_json(named_struct('order', o.id, 'customer', upper(o.customer), "
        "'amount', o.amount)) AS body",
        "map('source-message-id', message_id) AS headers",
        "'application/json' AS content_type",
    )
    query = (
        out.writeStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/big-orders")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def received(url: str) -> list[dict[str, object]]:
    """Take everything from ``/queue/big-orders``."""
    results: list[dict[str, object]] = []
    with stompy.Connection(url) as conn, conn.subscribe("/queue/big-orders") as sub:
        while (message := sub.get(timeout=1.0)) is not None:
            results.append(json.loads(message.text))
    return sorted(results, key=lambda r: int(str(r["order"])))


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from stompy.spark import StompDataSource

    with run_broker() as broker, tempfile.TemporaryDirectory() as checkpoint:
        send_orders(broker.url)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.dataSource.register(StompDataSource)
            run_pipeline(spark, broker.url, checkpoint)
        finally:
            spark.stop()
        results = received(broker.url)
        for result in results:
            print(f"big order {result['order']} from {result['customer']}: {result['amount']}")
        print(f"{len(results)} of {ORDERS + 1} orders were big")


if __name__ == "__main__":
    main()

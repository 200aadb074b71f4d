"""A Spark driver for test_spark_kill: a STOMP -> STOMP streaming query, run until killed.

``python _kill_driver.py URL CHECKPOINT``: reads /queue/in, writes every message's
body to /queue/out with the source ``message_id`` in a ``source-id`` header, in
micro-batches of at most 500, with its checkpoint in CHECKPOINT.
"""

from __future__ import annotations

import os
import sys


def main(url: str, checkpoint: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from stompy.spark import StompDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("stompy-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StompDataSource)
    source = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/in")
        .option("maxMessagesPerBatch", "500")
        .load()
    )
    query = (
        source.selectExpr("body", "map('source-id', message_id) AS headers")
        .writeStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/out")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

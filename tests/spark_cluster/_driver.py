"""A Spark driver on the cluster for test_cluster_driver: the copy query, run until killed.

``python -m tests.spark_cluster._driver MASTER URL CHECKPOINT``: copies /queue/in to
/queue/out (see ``_cluster.start_copy``) with its checkpoint in CHECKPOINT.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.spark_cluster._cluster import session, start_copy


def main(master: str, url: str, checkpoint: str) -> None:
    spark = session(master, "stompy-cluster-driver")
    query = start_copy(spark, url, Path(checkpoint))
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])

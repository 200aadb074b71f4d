"""A STOMP data source for PySpark (>= 4.0): ``format("stomp")``.

Install with ``pip install 'stompy-client[spark]'``, then::

    from stompy.spark import StompDataSource
    spark.dataSource.register(StompDataSource)

    stream = (spark.readStream.format("stomp")
              .option("url", "stomp://broker:61613").option("destination", "/queue/in")
              .load())
    (df.selectExpr("to_json(struct(*)) AS body")
       .write.format("stomp").option("url", "stomp://broker:61613")
       .option("destination", "/queue/out").save())

Delivery is at-least-once in both directions; ``docs/spark.md`` has the options and
the guarantees. Importing this package needs no PySpark; using the data source does,
and raises :class:`ImportError` naming the extra when it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stompy.spark._source import (
        StompCommitMessage,
        StompDataSource,
        StompStreamReader,
        StompStreamWriter,
    )

__all__ = ("StompCommitMessage", "StompDataSource", "StompStreamReader", "StompStreamWriter")


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import pyspark.sql.datasource  # noqa: F401  (PySpark 4.0 added it)
    except ImportError as exc:
        raise ImportError(
            f"stompy.spark.{name} needs PySpark 4.0 or later and pyarrow: "
            "pip install 'stompy-client[spark]'"
        ) from exc
    value = getattr(importlib.import_module("stompy.spark._source"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

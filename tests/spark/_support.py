"""Helpers of the Spark tests."""

from __future__ import annotations

import importlib
import os
import shutil
import threading
from collections import Counter

import pytest

import stompy


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

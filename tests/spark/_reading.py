"""Helpers of the tests of the connector's plain-Python modules (no Spark session)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

import stompy
from stompy.spark._arrow import READ_ARROW_SCHEMA, from_ipc
from stompy.spark._options import ReadSettings, parse_read_options


def fill(url: str, destination: str, count: int, start: int = 0) -> None:
    with stompy.Connection(url) as conn:
        messages = (stompy.Outgoing(destination, str(i)) for i in range(start, start + count))
        conn.send_many(messages, receipt=True)


def take_all(url: str, destination: str) -> list[stompy.Message]:
    got: list[stompy.Message] = []
    with stompy.Connection(url) as conn, conn.subscribe(destination) as sub:
        for _ in range(100_000):
            message = sub.get(timeout=0.5)
            if message is None:
                break
            got.append(message)
    return got


def read_settings(url: str, streaming: bool = True, **options: str) -> ReadSettings:
    base = {"url": url, "destination": "/queue/in", "idleTimeout": "0.5", **options}
    return parse_read_options({k.lower(): v for k, v in base.items()}, streaming=streaming)


def rows(batches: Iterable[pa.RecordBatch]) -> list[dict[str, Any]]:
    """The rows of record batches as dicts, checking each batch has the read schema."""
    result: list[dict[str, Any]] = []
    for batch in batches:
        assert batch.schema.equals(READ_ARROW_SCHEMA)
        result.extend(batch.to_pylist())
    return result


def planned(parts: list[bytes]) -> list[dict[str, Any]]:
    return rows(b for part in parts for b in from_ipc(part))


def until(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """Whether ``condition`` held within ``timeout`` seconds (looked at every 10 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

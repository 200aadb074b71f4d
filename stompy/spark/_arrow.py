"""Columns, not rows: received messages as Arrow record batches, rows to send from them.

Spark hands a Python data source Arrow record batches and takes them back (PySpark
4.0 and later), so per message there is no Python row object, no pickled tuple and
no type conversion by Spark: the columns are built with list comprehensions over
the received frames and copied into Arrow buffers in one call each.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import accumulate, chain
from typing import Final

import pyarrow as pa

from stompy._message import MessageBase

__all__ = (
    "READ_ARROW_SCHEMA",
    "READ_SCHEMA",
    "from_ipc",
    "message_batch",
    "to_ipc",
)

#: The rows of a read, as a Spark DDL string.
READ_SCHEMA: Final = (
    "destination string, subscription string, message_id string, redelivered boolean, "
    "content_type string, headers map<string,string>, body binary, "
    "received_at timestamp, offset bigint"
)

#: :data:`READ_SCHEMA` as Arrow has it: what PySpark expects a reader's batches to be
#: (it refuses batches of any other schema).
READ_ARROW_SCHEMA: Final = pa.schema(
    [
        ("destination", pa.string()),
        ("subscription", pa.string()),
        ("message_id", pa.string()),
        ("redelivered", pa.bool_()),
        ("content_type", pa.string()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("received_at", pa.timestamp("us", tz="UTC")),
        ("offset", pa.int64()),
    ]
)


def message_batch(
    messages: Sequence[MessageBase], received_us: Sequence[int], offsets: Sequence[int]
) -> pa.RecordBatch:
    """The rows of ``messages`` in :data:`READ_SCHEMA`.

    ``received_us`` is when each arrived (microseconds since the epoch, UTC) and
    ``offsets`` the number each gets in the ``offset`` column. The ``headers`` column
    keeps the first entry of a repeated header, as :attr:`~stompy.Message.headers`.
    """
    frames = [m.frame for m in messages]
    maps = [dict(f.headers) for f in frames]
    for index, frame in enumerate(frames):
        if len(maps[index]) != len(frame.headers):  # a repeated header: the first wins
            maps[index] = frame.header_map()
    header_offsets = list(accumulate((len(d) for d in maps), initial=0))
    headers = pa.MapArray.from_arrays(
        pa.array(header_offsets, pa.int32()),
        pa.array(list(chain.from_iterable(maps)), pa.string()),
        pa.array(list(chain.from_iterable(d.values() for d in maps)), pa.string()),
    )
    columns = [
        pa.array([d.get("destination", "") for d in maps], pa.string()),
        pa.array([m.subscription for m in messages], pa.string()),
        pa.array([d.get("message-id", "") for d in maps], pa.string()),
        pa.array([d.get("redelivered") == "true" for d in maps], pa.bool_()),
        pa.array([d.get("content-type") for d in maps], pa.string()),
        headers,
        pa.array([f.body for f in frames], pa.binary()),
        pa.array(received_us, pa.timestamp("us", tz="UTC")),
        pa.array(offsets, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_ARROW_SCHEMA)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """``batch`` as Arrow IPC stream bytes: how a planned partition carries its rows."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def from_ipc(data: bytes) -> Iterator[pa.RecordBatch]:
    """The record batches of :func:`to_ipc`'s bytes."""
    with pa.ipc.open_stream(data) as reader:
        yield from reader

"""The write: each Spark task sends its rows and returns once the broker has them all.

Each task opens its own connection (settings are pickled, sockets are not) and sends
its rows in order with :meth:`~stompy.Connection.send_many`, asking for a RECEIPT on
the last frame: on the last SEND, or on the COMMIT of the task's transaction. Frames
on one connection are processed in order, so that receipt confirms every message of
the task, and only then does the task return its commit message. A task that fails
before is retried by Spark and sends its rows again: delivery is *at least once*.
Each message carries a de-duplication header made of the query, batch, partition and
row number, the same in every attempt, so a consumer (or a broker that
de-duplicates) can drop the repeats. Nothing here imports PySpark; rows come as
Arrow record batches (or as rows where PySpark has no Arrow writer).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from stompy._engine.outgoing import Outgoing
from stompy.errors import ConfigurationError
from stompy.spark._options import WriteSettings

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = (
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "TaskIdentity",
    "WriteColumns",
    "dedup_id",
    "write_partition",
)

#: Local properties Spark sets on every task of a streaming micro-batch.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

_STRING_TYPES: Final = ("string", "varchar", "char")
_COLUMN_TYPES: Final = {
    "body": "binary or string",
    "destination": "string",
    "headers": "map<string,string>",
    "content_type": "string",
}


def _is_string(type_name: str) -> bool:
    return type_name.split("(")[0] in _STRING_TYPES


@dataclass(frozen=True)
class WriteColumns:
    """Where the columns a write understands are in the input rows."""

    body: int
    destination: int | None = None
    headers: int | None = None
    content_type: int | None = None

    @classmethod
    def from_schema(
        cls, fields: Sequence[tuple[str, str]], default_destination: str | None
    ) -> WriteColumns:
        """Check the input's ``(name, type)`` pairs (Spark's simple type strings).

        Raises :class:`~stompy.errors.ConfigurationError` naming any column that is
        unknown, repeated or of the wrong type, and when neither a column nor the
        option gives a destination.
        """
        found: dict[str, int] = {}
        for index, (name, type_name) in enumerate(fields):
            key = name.lower()
            if key not in _COLUMN_TYPES:
                raise ConfigurationError(
                    f"column {name!r} cannot be written to STOMP: the columns are body "
                    f"(required), destination, headers and content_type"
                )
            if key in found:
                raise ConfigurationError(f"column {name!r} appears twice")
            ok = {
                "body": type_name == "binary" or _is_string(type_name),
                "destination": _is_string(type_name),
                "content_type": _is_string(type_name),
                "headers": type_name.replace(" ", "") == "map<string,string>",
            }[key]
            if not ok:
                raise ConfigurationError(
                    f"column {name!r} must be {_COLUMN_TYPES[key]}, not {type_name}"
                )
            found[key] = index
        if "body" not in found:
            raise ConfigurationError("writing to STOMP needs a 'body' column (binary or string)")
        if "destination" not in found and not default_destination:
            raise ConfigurationError(
                "writing to STOMP needs the 'destination' option or a 'destination' column"
            )
        return cls(
            body=found["body"],
            destination=found.get("destination"),
            headers=found.get("headers"),
            content_type=found.get("content_type"),
        )


@dataclass(frozen=True)
class TaskIdentity:
    """What makes a task's messages unique: the query (or job), batch and partition."""

    query: str
    batch: str
    partition: int
    attempt: int = 0


def dedup_id(task: TaskIdentity, seq: int) -> str:
    """The de-duplication id of row ``seq`` of a task: equal in every attempt.

    Its parts are joined by dots, not colons: STOMP 1.1 and 1.2 escape a colon in a
    header value (``\\c``), which costs every hop (the encoder, the broker's parser
    and its MESSAGE, the reader's parser) a slow path per message.
    """
    return f"{task.query}.{task.batch}.{task.partition}.{seq}"


def _column(batch: pa.RecordBatch, index: int | None) -> list[Any] | None:
    return None if index is None else batch.column(index).to_pylist()


def _arrow_rows(
    batches: Iterable[pa.RecordBatch], columns: WriteColumns
) -> Iterator[Sequence[Any]]:
    """The rows of record batches as column tuples, in :class:`WriteColumns` order."""
    for batch in batches:
        bodies = _column(batch, columns.body) or []
        count = len(bodies)
        none = [None] * count
        yield from zip(
            bodies,
            _column(batch, columns.destination) or none,
            _column(batch, columns.headers) or none,
            _column(batch, columns.content_type) or none,
            strict=True,
        )


def _plain_rows(rows: Iterable[Sequence[Any]], columns: WriteColumns) -> Iterator[Sequence[Any]]:
    """Spark's rows (PySpark without Arrow writers) as column tuples."""
    for row in rows:
        yield (
            row[columns.body],
            None if columns.destination is None else row[columns.destination],
            None if columns.headers is None else row[columns.headers],
            None if columns.content_type is None else row[columns.content_type],
        )


def _outgoing(
    rows: Iterator[Sequence[Any]], settings: WriteSettings, task: TaskIdentity
) -> Iterator[Outgoing]:
    """One :class:`~stompy.Outgoing` per row; a row that cannot be sent is an error."""
    base = dict(settings.send_headers)
    dedup = settings.dedup_header
    prefix = dedup_id(task, 0)[:-1]  # all but the row number
    default = settings.destination
    for seq, (body, destination, extra, content_type) in enumerate(rows):
        if type(body) is not bytes and type(body) is not str:
            if body is None:
                raise ConfigurationError(f"row {seq} of partition {task.partition} has no body")
            body = bytes(body)
        headers = base.copy()
        if extra:
            items = extra.items() if isinstance(extra, Mapping) else extra
            headers.update((str(k), str(v)) for k, v in items if v is not None)
        if dedup:
            headers[dedup] = f"{prefix}{seq}"
        where = destination if destination is not None else default
        if not where:
            raise ConfigurationError(
                f"row {seq} of partition {task.partition} has no destination and the "
                "'destination' option is not set"
            )
        yield Outgoing(where, body, headers, content_type)


def write_partition(
    items: Iterable[Any],
    settings: WriteSettings,
    columns: WriteColumns,
    task: TaskIdentity,
) -> int:
    """Send every row of one task; return the count once the broker confirmed them all.

    ``items`` are Arrow record batches (PySpark's Arrow writers) or rows. Connects at
    the first row (an empty partition opens no connection). Raises
    :class:`~stompy.errors.ConfigurationError` for a row that cannot be sent and the
    connection's :class:`~stompy.errors.StompError` otherwise; a transaction is
    aborted then.
    """
    iterator = iter(items)
    first = next(iterator, None)
    if first is None:
        return 0
    together = _chain_first(first, iterator)
    # A record batch means pyarrow is loaded; this module does not load it, so that
    # the processes that only plan or commit a write never pay for it.
    pyarrow = sys.modules.get("pyarrow")
    arrow = pyarrow is not None and isinstance(first, pyarrow.RecordBatch)
    rows = _arrow_rows(together, columns) if arrow else _plain_rows(together, columns)
    messages = _outgoing(rows, settings, task)
    head = next(messages, None)
    if head is None:
        return 0
    with settings.connection.connection() as conn:
        stream = _chain_first(head, messages)
        if not settings.transactional:
            # Frames are processed in order: a receipt for the last one confirms them all.
            return conn.send_many(stream, receipt=True)
        with conn.transaction() as tx:
            count = conn.send_many(stream, transaction=tx)
            tx.commit(receipt=True)
        return count


T = TypeVar("T")


def _chain_first(first: T, rest: Iterator[T]) -> Iterator[T]:
    yield first
    yield from rest

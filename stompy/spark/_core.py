"""What the ``stomp`` data source does, in plain Python: reading and sending.

Nothing here imports PySpark, so all of it is tested without a Spark session; the
classes in :mod:`stompy.spark._source` only adapt it to PySpark's interfaces. Rows
travel as Arrow record batches (:mod:`stompy.spark._arrow`) both ways.

Theory of operation
-------------------
**Writing.** Each Spark task opens its own connection (settings are pickled, sockets
are not) and sends its rows in order with :meth:`~stompy.Connection.send_many`,
asking for a RECEIPT on the last frame: on the last SEND, or on the COMMIT of the
task's transaction. Frames on one connection are processed in order, so that receipt
confirms every message of the task, and only then does the task return its commit
message. A task that fails before is retried by Spark and sends its rows again:
delivery is *at least once*. Each message carries a de-duplication header made of
the query, batch, partition and row number, the same in every attempt, so a
consumer (or a broker that de-duplicates) can drop the repeats.

**Streaming read.** A subscription next to the driver numbers the messages, and
Spark's offsets count them: :mod:`stompy.spark._stream`.

**Batch read.** Each task is a competing consumer with its own connection, and
acknowledges (with a receipt) only after Spark took its last row: a task that fails
gives everything back. Holding every message unacknowledged until the end would
stop a subscription at its prefetch, so a task reads a queue through *windows*: a
subscription whose prefetch is full is left as it is, and the task subscribes again
for the next window (growing from ``prefetch`` up to :data:`MAX_PREFETCH`). Small
first windows let the tasks share the destination instead of the first one to
subscribe taking it all. A task stops once the destination stayed idle for
``idleTimeout`` seconds, or at ``maxMessagesPerPartition`` (with a WARNING that
says so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, TypeVar

import pyarrow as pa

from stompy._client.blocking import Connection, Message, Subscription
from stompy._engine.outgoing import Outgoing
from stompy.errors import ConfigurationError
from stompy.spark._arrow import READ_SCHEMA, message_batch
from stompy.spark._options import MAX_PREFETCH, ReadSettings, WriteSettings
from stompy.spark._stream import (
    OffsetBook,
    Planned,
    StreamConsumer,
    TriggerNotSupported,
    ack_each_subscription,
    now_us,
    offset_dict,
    offset_value,
)

__all__ = (
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "READ_SCHEMA",
    "OffsetBook",
    "Planned",
    "StreamConsumer",
    "TaskIdentity",
    "TriggerNotSupported",
    "WriteColumns",
    "dedup_id",
    "drain",
    "offset_dict",
    "offset_value",
    "write_partition",
)

log: Final = logging.getLogger("stompy.spark")

#: Local properties Spark sets on every task of a streaming micro-batch.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

#: Rows per record batch a batch-read task yields.
BATCH_READ_ROWS: Final = 10_000
#: Seconds of quiet after which a batch-read task tries a new window.
QUIET: Final = 0.2
#: Subscriptions (windows) one batch-read task opens per destination at most.
MAX_WINDOWS: Final = 500
#: ActiveMQ's default ``maxPageSize``: the unacknowledged messages a queue gives out.
ACTIVEMQ_PAGE: Final = 200
#: A take of fewer messages than this means the broker delivers more slowly than the
#: task takes: the task then waits :data:`LINGER` seconds for more to gather, rather
#: than wake (and make the I/O thread wake it) for every message. Two tasks reading
#: RabbitMQ spent 80-100 µs of CPU a message so, on the cores the broker needs.
SMALL_TAKE: Final = 64
LINGER: Final = 0.01


# -- batch read ---------------------------------------------------------------------------


def _is_queue(destination: str) -> bool:
    """Whether a second subscription to ``destination`` shares its messages rather than
    copying them (a queue's competing consumers, not a topic's subscribers)."""
    return destination.startswith(("/queue/", "/amq/queue/"))


class _Windows:
    """The subscriptions through which one batch-read task reads one destination.

    See the module docstring: a new window when the current one is full, or took
    messages and went quiet (the broker may hold it back short of its prefetch, as
    ActiveMQ does at a page of 200); only a window that gets nothing for
    ``idleTimeout`` means the destination is drained. A topic gets one subscription:
    a second would receive copies.
    """

    def __init__(
        self, conn: Connection, settings: ReadSettings, destination: str, index: int
    ) -> None:
        self.conn = conn
        self.settings = settings
        self.destination = destination
        self.index = index
        self.browse = settings.mode == "browse"
        self.renewable = _is_queue(destination) and not settings.durable_name and not self.browse
        self.size = settings.batch_window if self.renewable else settings.prefetch or MAX_PREFETCH
        #: Messages the current window took; what the first one took (once known).
        self.taken = 0
        self.first: int | None = None
        self.opened = 0
        self._ended = False
        #: Windows left because they went quiet before their prefetch was full, with
        #: the room they still had: the broker may yet send them messages (a window
        #: goes quiet on a busy machine too), which are taken before the next wait, so
        #: that none sits unread (and holds the connection's reading) until the end.
        self._left: list[tuple[Subscription, int]] = []
        self._sub = self._subscribe()

    def _subscribe(self) -> Subscription:
        sub_id, headers = self.settings.subscribe_args(self.size, self.destination, self.index)
        if self.browse:
            headers["browser"] = "true"
        self.opened += 1
        self.taken = 0
        # The inbox holds the whole window: a subscription the client stopped reading
        # for (flow control) would hold the socket, and with it every other window and
        # the final RECEIPT, while the window waited for looks idle.
        return self.conn.subscribe(
            self.destination, ack="client", id=sub_id, headers=headers, max_pending=self.size
        )

    def _renew(self) -> None:
        if self.opened == 1:
            self.first = self.taken
        if self.taken < self.size:
            self._left.append((self._sub, self.size - self.taken))
        if self.settings.prefetch is None:
            self.size = min(2 * self.size, MAX_PREFETCH)
        self._sub = self._subscribe()

    def _late(self, limit: int) -> list[Message]:
        """Messages that reached a window left earlier (one window's, at most ``limit``)."""
        for at, (sub, room) in enumerate(self._left):
            got = sub.get_batch(min(limit, room), timeout=0)
            if got:
                if len(got) == room:
                    del self._left[at]  # full now: the broker sends it no more
                else:
                    self._left[at] = (sub, room - len(got))
                return got
        return []

    def take(self, limit: int) -> list[Message]:
        """Up to ``limit`` next messages of one window (at least one), or none once the
        destination is drained."""
        idle = self.settings.idle_timeout
        # Seconds the destination has already been seen idle: a window that went quiet
        # counts towards idleTimeout, so that the end of a read costs idleTimeout, not
        # QUIET more.
        seen_idle = 0.0
        while True:
            late = self._late(limit)
            if late or self._ended:
                return late
            if self.renewable and self.taken == self.size:
                self._renew()
            quiet = self.renewable and self.taken > 0 and self.opened < MAX_WINDOWS
            room = min(limit, self.size - self.taken) if self.renewable else limit
            wait = min(QUIET, idle) if quiet else idle - seen_idle
            got = self._sub.get_batch(room, timeout=wait)
            if not got and quiet:
                seen_idle = wait
                self._renew()
                continue
            if self.browse:
                for index, message in enumerate(got):
                    if message.headers.get("browser") == "end":
                        del got[index:]
                        self._ended = True
                        break
            self.taken += len(got)
            if got:
                return got
            # Idle, unless a window left earlier got messages meanwhile.
            late = self._late(limit)
            self._ended = not late
            return late

    def explain(self, partition: int) -> None:
        """Say so when the read may have stopped short of what the destination holds."""
        server = self.conn.server or ""
        if self.first == ACTIVEMQ_PAGE < self.settings.batch_window and server.startswith(
            "ActiveMQ"
        ):
            log.warning(
                "partition %d: ActiveMQ handed out %d messages of %r and held back the rest: "
                "a queue gives out at most maxPageSize (200 by default) messages that wait "
                "for an ACK, so this read may have stopped short; raise maxPageSize in "
                "activemq.xml (see the Spark page of stompy's docs)",
                partition,
                ACTIVEMQ_PAGE,
                self.destination,
            )
        if not self.renewable and self.taken >= self.size:
            log.warning(
                "partition %d stopped after %d messages of %r, the prefetch of its "
                "subscription: the broker holds back more until they are acknowledged, at "
                "the end of the task; raise 'prefetch' (at most %d) or 'numPartitions'",
                partition,
                self.taken,
                self.destination,
                MAX_PREFETCH,
            )


def drain(
    settings: ReadSettings,
    partition: int = 0,
    *,
    now_us: Callable[[], int] = now_us,
) -> Generator[pa.RecordBatch, None, None]:
    """Yield what the destinations hold, as record batches, until each is idle.

    ``partition`` is this task's index: the ``offset`` column numbers this task's
    rows ``partition``, ``partition + numPartitions``, ... so that it is unique in
    the read. Acknowledges once the caller took the last batch; if the caller stops
    early, the connection closes without ACK and the broker redelivers. In
    ``browse`` mode nothing is ever acknowledged: a broker that browses
    (``browser:true``) leaves the queue as it was and marks the end with a
    ``browser:end`` message; one that does not gets every message back at disconnect.
    """
    cap = settings.max_messages_per_partition
    stride = settings.num_partitions
    taken: list[Message] = []
    received: list[int] = []
    last: dict[str, Message] = {}  # the newest message of each subscription: what to ack
    seq = 0  # this task's rows yielded so far
    with settings.connection.connection(max_pending=10_000) as conn:
        for index, destination in enumerate(settings.destinations):
            windows = _Windows(conn, settings, destination, index)
            while cap is None or seq + len(taken) < cap:
                room = BATCH_READ_ROWS - len(taken)
                if cap is not None:
                    room = min(room, cap - seq - len(taken))
                got = windows.take(room)
                if not got:
                    break
                if len(got) < min(room, SMALL_TAKE):
                    time.sleep(LINGER)  # the window's inbox keeps filling meanwhile
                last[got[-1].subscription] = got[-1]  # one take: one window's messages
                taken += got
                received += repeat(now_us(), len(got))
                if len(taken) == BATCH_READ_ROWS or (cap is not None and seq + len(taken) == cap):
                    offsets = range(seq * stride + partition, (seq + len(taken)) * stride, stride)
                    yield message_batch(taken, received, offsets)
                    seq += len(taken)
                    taken, received = [], []
            windows.explain(partition)
        if taken:
            offsets = range(seq * stride + partition, (seq + len(taken)) * stride, stride)
            yield message_batch(taken, received, offsets)
            seq += len(taken)
        if cap is not None and seq >= cap:
            log.warning(
                "partition %d stopped at maxMessagesPerPartition=%d: %s may hold more",
                partition,
                cap,
                ", ".join(settings.destinations),
            )
        if last and settings.mode != "browse":
            ack_each_subscription(list(last.values()))


# -- writing ------------------------------------------------------------------------------

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
    rows = (
        _arrow_rows(together, columns)
        if isinstance(first, pa.RecordBatch)
        else _plain_rows(together, columns)
    )
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

"""What the ``stomp`` data source does, in plain Python: rows, offsets, sending, draining.

Nothing here imports PySpark, so all of it is tested without a Spark session; the
classes in :mod:`stompy.spark._source` only adapt it to PySpark's interfaces.

Theory of operation
-------------------
**Writing.** Each Spark task opens its own connection (settings are pickled, sockets
are not), sends its rows in order and asks for a RECEIPT on the last frame: on the
last SEND, or on the COMMIT of the task's transaction. Frames on one connection are
processed in order, so the receipt confirms every message of the task, and only then
does the task return its commit message. A task that fails before that is retried by
Spark and sends its rows again: delivery is *at least once*. Each message carries a
de-duplication header made of the query, batch, partition and row number, which is
the same in every attempt, so a consumer (or a broker that de-duplicates) can drop
the repeats.

**Streaming read.** One subscription in ``client`` ack mode lives in the process
that plans the micro-batches. :class:`OffsetBook` numbers the messages as they
arrive; Spark's offset ``{"seq": k}`` means "every message numbered below ``k``".
A planned batch carries its rows to the executors inside its partition. Nothing is
acknowledged before Spark is done with it: Spark runs micro-batches one after the
other, so when it plans the next batch (``latestOffset``, or the ``start`` of
``partitions``) every batch planned before is in the sink; ``commit(end)``, which
Spark calls one batch late, is a second trigger. Acknowledgements are cumulative
(``client`` mode), one ACK per batch. Whatever was not acknowledged when the
process ends is redelivered by the broker, so a query restarted from its checkpoint
loses nothing; a batch that Spark replays from an earlier run comes back empty
because its messages are redelivered (numbered anew) instead.

Numbering starts for each run at the wall clock in microseconds, or at the
checkpointed offset if Spark says it first, so offsets keep growing across restarts
(as long as a run reads fewer than a million messages a second).

**Batch read.** Each task is a competing consumer: it subscribes in ``client`` mode,
takes what arrives until the destination has been idle for ``idleTimeout`` seconds,
and acknowledges (with a receipt) only after Spark consumed its last row.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Generic, TypeVar

from stompy._client import MessageBase, Reconnect
from stompy._sync import Connection, Message, Subscription, Transaction
from stompy.errors import StompError
from stompy.spark._options import ReadSettings, WriteSettings

__all__ = (
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "READ_SCHEMA",
    "MessageRow",
    "OffsetBook",
    "Outgoing",
    "StreamConsumer",
    "TaskIdentity",
    "WriteColumns",
    "dedup_id",
    "drain",
    "message_row",
    "offset_dict",
    "offset_value",
    "write_partition",
)

log: Final = logging.getLogger("stompy.spark")

#: The rows of a read, as a Spark DDL string.
READ_SCHEMA: Final = (
    "destination string, subscription string, message_id string, redelivered boolean, "
    "content_type string, headers map<string,string>, body binary, "
    "received_at timestamp, offset bigint"
)

#: Local properties Spark sets on every task of a streaming micro-batch.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

#: Seconds between two messages after which a patient fill stops taking more.
TRICKLE: Final = 0.1

MessageRow = tuple[str, str, str, bool, "str | None", dict[str, str], bytes, datetime, int]

H = TypeVar("H")


def message_row(message: MessageBase, offset: int, received_at: datetime) -> MessageRow:
    """The row of a received message, in :data:`READ_SCHEMA` order."""
    return (
        message.destination,
        message.subscription,
        message.message_id,
        message.redelivered,
        message.content_type,
        dict(message.headers),
        message.body,
        received_at,
        offset,
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- offsets ------------------------------------------------------------------------------


def offset_dict(seq: int) -> dict[str, int]:
    """Spark's JSON offset for ``seq``."""
    return {"seq": seq}


def offset_value(offset: Mapping[str, Any]) -> int:
    """The number inside one of our offsets; :class:`ValueError` for anything else."""
    value = offset.get("seq") if isinstance(offset, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not an offset of the STOMP source: {offset!r}")
    return value


@dataclass(slots=True)
class _Entry(Generic[H]):
    seq: int
    row: MessageRow
    handle: H


class OffsetBook(Generic[H]):
    """Numbers received messages and remembers what Spark was handed and finished with.

    ``H`` is what acknowledges a message (a :class:`~stompy.Message`; anything in
    tests). Offsets this run did not issue (from a checkpoint of an earlier run)
    are recognised and never acknowledge anything here.
    """

    def __init__(self, base: int) -> None:
        #: The number of this run's first message.
        self.base = base
        #: The number the next message gets.
        self.next = base
        #: The highest end of a batch handed to Spark (by :meth:`plan`).
        self.planned = base
        #: Everything numbered below this is acknowledged or given up.
        self.released = base
        self._entries: deque[_Entry[H]] = deque()
        self._issued: set[int] = {base}
        self._last = base

    def __len__(self) -> int:
        """Messages held: not yet released."""
        return len(self._entries)

    def add(self, handle: H, row: MessageRow) -> int:
        """Keep a message numbered :attr:`next` (which its ``row`` carries); return it."""
        seq = self.next
        self._entries.append(_Entry(seq, row, handle))
        self.next += 1
        return seq

    def unplanned(self) -> int:
        """Messages numbered but not yet handed to Spark."""
        return self.next - self.planned

    def latest(self, start: int | None, max_rows: int | None) -> int:
        """The end of the next batch from ``start`` (``None``: where the last one ended)."""
        if start is None:
            begin = self._last
        elif start in self._issued:
            begin = start
        else:
            begin = self.base  # an earlier run's offset: everything of this run is new
        end = self.next if max_rows is None else min(self.next, begin + max_rows)
        if end <= begin:
            return begin if start is None else start
        self._issued.add(end)
        self._last = end
        return end

    def plan(self, start: int, end: int) -> list[MessageRow]:
        """The rows of the batch ``(start, end]`` (an empty list for an earlier run's)."""
        if end not in self._issued:
            return []
        begin = start if start in self._issued else self.base
        self.planned = max(self.planned, end)
        return [e.row for e in self._entries if begin <= e.seq < end]

    def release(self, upto: int) -> H | None:
        """Forget messages below ``upto``; return the last one's handle to acknowledge.

        Only offsets of this run count, and never past what Spark was handed.
        """
        if upto not in self._issued:
            return None
        upto = min(upto, self.planned)
        handle: H | None = None
        while self._entries and self._entries[0].seq < upto:
            handle = self._entries.popleft().handle
        if upto > self.released:
            self.released = upto
            self._issued = {o for o in self._issued if o >= upto}
        return handle


class StreamConsumer:
    """The driver-side subscription of a streaming read (see the module docstring).

    Connects on first use; pickles to its settings only. Raises the connection's
    :class:`~stompy.errors.StompError` once reconnecting gave up.
    """

    def __init__(
        self,
        settings: ReadSettings,
        *,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self._conn: Connection | None = None
        self._sub: Subscription | None = None
        self._book: OffsetBook[Message] | None = None
        self._fresh = False
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings = state["settings"]
        self._clock = time.time_ns
        self._reset()

    def __repr__(self) -> str:
        return f"<StreamConsumer {self.settings.destination!r}>"

    @property
    def book(self) -> OffsetBook[Message]:
        return self._ensure_book(None)

    def _ensure_book(self, start: int | None) -> OffsetBook[Message]:
        if self._book is None:
            base = self._clock() // 1000
            if start is not None:
                base = max(base, start)
            self._book = OffsetBook(base)
        return self._book

    def _subscription(self) -> Subscription:
        if self._sub is not None:
            return self._sub
        settings = self.settings
        prefetch = settings.stream_prefetch
        attempts = settings.reconnect_attempts
        conn = settings.connection.connection(
            max_pending=min(prefetch, 10_000),
            reconnect=Reconnect(max_attempts=attempts) if attempts else None,
        )
        conn.connect()
        try:
            sub_id, headers = settings.subscribe_args(prefetch)
            self._sub = conn.subscribe(
                settings.destination, ack="client", id=sub_id, headers=headers, receipt=True
            )
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._fresh = True
        log.info("subscribed to %r at %s", settings.destination, settings.connection.where)
        return self._sub

    def _fill(self) -> None:
        """Take what the subscription has, up to two batches held and not yet planned.

        Right after subscribing, and on every call under ``Trigger.AvailableNow``, this
        waits up to ``idleTimeout`` for a first message and then takes messages while
        they keep coming (:data:`TRICKLE` apart at most): such a query ends once the
        destination stays idle that long. Otherwise it takes only what is there.
        """
        book = self._ensure_book(None)
        sub = self._subscription()
        room = 2 * self.settings.max_messages_per_batch - book.unplanned()
        patient = self._fresh or self._available_now
        wait = self.settings.idle_timeout if patient else 0.0
        self._fresh = False
        while room > 0:
            message = sub.get(timeout=wait)
            if message is None:
                return
            book.add(message, message_row(message, book.next, _now()))
            room -= 1
            wait = min(TRICKLE, self.settings.idle_timeout) if patient else 0.0

    def _release(self, upto: int) -> None:
        if self._book is None:
            return
        message = self._book.release(upto)
        if message is not None:
            message.ack(receipt=True)  # cumulative: every earlier message of the batch too

    # -- what the stream reader calls -----------------------------------------------------

    def initial(self) -> int:
        return self._ensure_book(None).base

    def latest(self, start: int | None, max_rows: int | None) -> int:
        book = self._ensure_book(start)
        # Spark plans a batch only once the one before is in the sink.
        self._release(book.planned)
        if start is not None:
            self._release(start)
        self._fill()
        return book.latest(start, max_rows)

    def plan(self, start: int, end: int) -> list[MessageRow]:
        book = self._ensure_book(max(start, end))  # a replayed batch: number past it
        self._release(start)
        return book.plan(start, end)

    def commit(self, end: int) -> None:
        self._release(end)

    def available_now(self) -> None:
        self._available_now = True

    def close(self) -> None:
        """Disconnect; unacknowledged messages go back to the broker."""
        conn, self._conn, self._sub = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(StompError):
                conn.close()


# -- batch read ---------------------------------------------------------------------------


def drain(
    settings: ReadSettings, *, now: Callable[[], datetime] = _now
) -> Generator[MessageRow, None, None]:
    """Yield what is queued until idle; acknowledge once the last row was taken.

    If the caller stops early the connection closes without ACK and the broker
    redelivers. In ``browse`` mode nothing is ever acknowledged: a broker that
    browses (``browser:true``) leaves the queue as it was and marks the end with a
    ``browser:end`` message; one that does not gets every message back at disconnect.
    """
    browse = settings.mode == "browse"
    prefetch = settings.batch_prefetch
    with settings.connection.connection(max_pending=min(prefetch, 10_000)) as conn:
        sub_id, headers = settings.subscribe_args(prefetch)
        if browse:
            headers["browser"] = "true"
        sub = conn.subscribe(settings.destination, ack="client", id=sub_id, headers=headers)
        last: Message | None = None
        for seq in range(settings.max_messages_per_partition):
            message = sub.get(timeout=settings.idle_timeout)
            if message is None or (browse and message.headers.get("browser") == "end"):
                break
            last = message
            yield message_row(message, seq, now())
        if last is not None and not browse:
            last.ack(receipt=True)


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

        Raises :class:`ValueError` naming any column that is unknown, repeated or of
        the wrong type, and when neither a column nor the option gives a destination.
        """
        found: dict[str, int] = {}
        for index, (name, type_name) in enumerate(fields):
            key = name.lower()
            if key not in _COLUMN_TYPES:
                raise ValueError(
                    f"column {name!r} cannot be written to STOMP: the columns are body "
                    f"(required), destination, headers and content_type"
                )
            if key in found:
                raise ValueError(f"column {name!r} appears twice")
            ok = {
                "body": type_name == "binary" or _is_string(type_name),
                "destination": _is_string(type_name),
                "content_type": _is_string(type_name),
                "headers": type_name.replace(" ", "") == "map<string,string>",
            }[key]
            if not ok:
                raise ValueError(f"column {name!r} must be {_COLUMN_TYPES[key]}, not {type_name}")
            found[key] = index
        if "body" not in found:
            raise ValueError("writing to STOMP needs a 'body' column (binary or string)")
        if "destination" not in found and not default_destination:
            raise ValueError(
                "writing to STOMP needs the 'destination' option or a 'destination' column"
            )
        return cls(
            body=found["body"],
            destination=found.get("destination"),
            headers=found.get("headers"),
            content_type=found.get("content_type"),
        )


@dataclass(frozen=True)
class Outgoing:
    """One message to send."""

    destination: str
    body: bytes | str
    headers: dict[str, str]
    content_type: str | None = None


@dataclass(frozen=True)
class TaskIdentity:
    """What makes a task's messages unique: the query (or job), batch and partition."""

    query: str
    batch: str
    partition: int
    attempt: int = 0


def dedup_id(task: TaskIdentity, seq: int) -> str:
    """The de-duplication id of row ``seq`` of a task: equal in every attempt."""
    return f"{task.query}:{task.batch}:{task.partition}:{seq}"


def _outgoing(
    row: Sequence[object], columns: WriteColumns, settings: WriteSettings, dedup: str | None
) -> Outgoing:
    body = row[columns.body]
    if isinstance(body, (bytearray, memoryview)):
        body = bytes(body)
    if not isinstance(body, (bytes, str)):
        raise ValueError("a row has a null 'body'")
    destination = row[columns.destination] if columns.destination is not None else None
    if destination is None:
        destination = settings.destination
    if not isinstance(destination, str) or not destination:
        raise ValueError("a row has no destination and the 'destination' option is not set")
    headers = dict(settings.send_headers)
    if columns.headers is not None:
        given = row[columns.headers]
        if isinstance(given, Mapping):
            headers.update((str(k), str(v)) for k, v in given.items() if v is not None)
    content_type = row[columns.content_type] if columns.content_type is not None else None
    if dedup is not None and settings.dedup_header:
        headers[settings.dedup_header] = dedup
    return Outgoing(
        destination, body, headers, content_type if isinstance(content_type, str) else None
    )


def write_partition(
    rows: Iterable[Sequence[object]],
    settings: WriteSettings,
    columns: WriteColumns,
    task: TaskIdentity,
) -> int:
    """Send every row of one task; return the count once the broker confirmed them all.

    Connects at the first row (an empty partition opens no connection). Raises
    :class:`ValueError` for a row that cannot be sent and the connection's
    :class:`~stompy.errors.StompError` otherwise; a transaction is aborted then.
    """
    count = 0
    with contextlib.ExitStack() as stack:
        conn: Connection | None = None
        tx: Transaction | None = None
        pending: Outgoing | None = None
        for seq, row in enumerate(rows):
            message = _outgoing(row, columns, settings, dedup_id(task, seq))
            if conn is None:
                conn = stack.enter_context(settings.connection.connection())
                if settings.transactional:
                    tx = stack.enter_context(conn.transaction())
            if pending is not None:
                _send(conn, pending, tx, receipt=False)
            pending = message
            count += 1
        if conn is not None and pending is not None:
            # Frames are processed in order: a receipt for the last one confirms them all.
            _send(conn, pending, tx, receipt=tx is None)
            if tx is not None:
                tx.commit(receipt=True)
    return count


def _send(conn: Connection, message: Outgoing, tx: Transaction | None, *, receipt: bool) -> None:
    conn.send(
        message.destination,
        message.body,
        headers=message.headers,
        content_type=message.content_type,
        receipt=receipt,
        transaction=tx,
    )

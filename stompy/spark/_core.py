"""What the ``stomp`` data source does, in plain Python: offsets, reading, sending.

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

**Streaming read.** A subscription in ``client`` ack mode per destination (each on
a connection of its own) lives in the process that plans the micro-batches (next to
the driver). :class:`OffsetBook` numbers the messages as they arrive; Spark's offset
``{"seq": k}`` means "every message numbered below ``k``". A planned batch carries
its rows to the executors inside its partitions, as Arrow IPC bytes. Nothing is
acknowledged before Spark is done with it: Spark runs micro-batches one after the
other, so when it asks for the next batch's end (``latestOffset``) or plans it
(the ``start`` of ``partitions``) every batch planned before is in the sink;
``commit(end)``, which Spark calls one batch late, is a third trigger. One
cumulative ACK per subscription and batch. Whatever was not acknowledged when the
process ends is redelivered by the broker, so a query restarted from its checkpoint
loses nothing; a batch that Spark replays from an earlier run comes back empty
because its messages are redelivered (numbered anew) instead.

Numbering starts for each run at the wall clock in microseconds, or at the
checkpointed offset if Spark says it first, so offsets keep growing across restarts
(as long as a run reads fewer than a million messages a second).

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

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Any, Final, Generic, TypeVar

import pyarrow as pa

from stompy._options import Outgoing
from stompy._sync import Connection, Message, Subscription
from stompy.errors import ConfigurationError, StompError
from stompy.spark._arrow import READ_SCHEMA, message_batch, to_ipc
from stompy.spark._options import MAX_PREFETCH, ReadSettings, WriteSettings

__all__ = (
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "READ_SCHEMA",
    "OffsetBook",
    "Planned",
    "StreamConsumer",
    "TaskIdentity",
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

#: Seconds between two messages after which a patient fill stops taking more.
TRICKLE: Final = 0.1
#: Rows per record batch a batch-read task yields.
BATCH_READ_ROWS: Final = 10_000
#: Seconds one look at an idle subscription lasts when several are read at once.
POLL: Final = 0.01
#: Seconds of quiet after which a batch-read task tries a new window.
QUIET: Final = 0.2
#: Subscriptions (windows) one batch-read task opens per destination at most.
MAX_WINDOWS: Final = 500
#: ActiveMQ's default ``maxPageSize``: the unacknowledged messages a queue gives out.
ACTIVEMQ_PAGE: Final = 200

H = TypeVar("H")


def _now_us() -> int:
    return time.time_ns() // 1000


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
class Planned(Generic[H]):
    """The messages of a planned batch: ``handles[i]`` is numbered ``first + i``."""

    first: int
    handles: list[H]
    #: When each arrived, in microseconds since the epoch.
    received_us: list[int]


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
        self._handles: deque[H] = deque()
        self._received: deque[int] = deque()
        self._issued: set[int] = {base}
        self._last = base

    def __len__(self) -> int:
        """Messages held: not yet released."""
        return len(self._handles)

    def add(self, handle: H, received_us: int) -> int:
        """Keep a message; return its number."""
        self._handles.append(handle)
        self._received.append(received_us)
        self.next += 1
        return self.next - 1

    def add_many(self, handles: Sequence[H], received_us: int) -> None:
        """Keep messages that arrived together, numbered in their order."""
        self._handles.extend(handles)
        self._received.extend(repeat(received_us, len(handles)))
        self.next += len(handles)

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

    def plan(self, start: int, end: int) -> Planned[H]:
        """The messages of the batch ``(start, end]`` (none for an earlier run's)."""
        if end not in self._issued:
            return Planned(end, [], [])
        begin = max(start if start in self._issued else self.base, self.released)
        self.planned = max(self.planned, end)
        first = self.next - len(self._handles)  # the number of the oldest held
        low, high = begin - first, end - first
        return Planned(
            begin,
            list(islice(self._handles, low, high)),
            list(islice(self._received, low, high)),
        )

    def release(self, upto: int) -> list[H]:
        """Forget messages below ``upto``; return them, oldest first, to acknowledge.

        Only offsets of this run count, and never past what Spark was handed.
        """
        if upto not in self._issued:
            return []
        upto = min(upto, self.planned)
        count = max(0, upto - (self.next - len(self._handles)))
        released = [self._handles.popleft() for _ in range(count)]
        for _ in range(count):
            self._received.popleft()
        if upto > self.released:
            self.released = upto
            self._issued = {o for o in self._issued if o >= upto}
        return released


def _ack_each_subscription(messages: Sequence[Message], *, receipt: bool = True) -> None:
    """Acknowledge ``messages`` (oldest first) with one cumulative ACK per subscription,
    oldest subscription first, each with a receipt if ``receipt``.

    The order matters on RabbitMQ, where a ``client`` ACK covers every earlier
    delivery of the connection: acknowledging a message already covered is an error
    there that closes the connection.
    """
    last: dict[str, tuple[int, Message]] = {}
    for position, message in enumerate(messages):
        last[message.subscription] = (position, message)
    for _, message in sorted(last.values(), key=lambda item: item[0]):
        message.ack(receipt=receipt)


class _Inbox:
    """Messages from any of several subscriptions, each of them in turn."""

    def __init__(self, subscriptions: Sequence[Subscription]) -> None:
        self.subscriptions = list(subscriptions)
        self._turn = 0

    def take(self, limit: int, timeout: float) -> list[Message]:
        """Up to ``limit`` messages of one subscription, waiting up to ``timeout``
        seconds for the first; one lock turn for them all (:meth:`Subscription.get_batch`)."""
        subs = self.subscriptions
        if len(subs) == 1:
            return subs[0].get_batch(limit, timeout)
        deadline = time.monotonic() + timeout
        while True:
            for step in range(len(subs)):
                index = (self._turn + step) % len(subs)
                if subs[index].pending:
                    self._turn = (index + 1) % len(subs)
                    return subs[index].get_batch(limit, 0)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            sub = subs[self._turn]
            self._turn = (self._turn + 1) % len(subs)
            got = sub.get_batch(limit, min(remaining, POLL))
            if got:
                return got


class TriggerNotSupported(ConfigurationError):
    """The streaming query runs under a trigger the STOMP source cannot serve."""


class StreamConsumer:
    """The driver-side subscriptions of a streaming read (see the module docstring).

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
        self._conns: list[Connection] = []
        self._inbox: _Inbox | None = None
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
        return f"<StreamConsumer {', '.join(self.settings.destinations)!r}>"

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

    def _subscriptions(self) -> _Inbox:
        if self._inbox is not None:
            return self._inbox
        settings = self.settings
        prefetch = settings.stream_prefetch
        conns: list[Connection] = []
        subs: list[Subscription] = []
        try:
            # A connection per destination: RabbitMQ takes a ``client`` ACK as covering
            # every earlier delivery of the connection, not of the subscription only
            # (STOMP's rule), so one ACK could take messages of another destination
            # that Spark has not seen yet.
            for index, destination in enumerate(settings.destinations):
                conn = settings.connection.connection(
                    max_pending=prefetch, reconnect=settings.reconnect
                )
                conn.connect()
                conns.append(conn)
                sub_id, headers = settings.subscribe_args(prefetch, destination, index)
                # Ids unique across the connections: acknowledgements go by subscription.
                sub_id = sub_id or f"spark-{index}"
                subs.append(
                    conn.subscribe(
                        destination, ack="client", id=sub_id, headers=headers, receipt=True
                    )
                )
        except BaseException:
            for conn in conns:
                with contextlib.suppress(StompError):
                    conn.close()
            raise
        self._conns = conns
        self._inbox = _Inbox(subs)
        self._fresh = True
        log.info(
            "subscribed to %s at %s",
            ", ".join(settings.destinations),
            settings.connection.where,
        )
        return self._inbox

    def _fill(self) -> None:
        """Take what the subscriptions hold, up to one batch not yet planned.

        The book takes no more than the next batch: the rest of the prefetch (two
        batches) stays in the connection, whose I/O thread keeps receiving while
        Spark runs a batch, so the next call finds its batch already there.

        A batch is never waited for once it has rows. Only when there is none (right
        after subscribing, and on every call under ``Trigger.AvailableNow``) does this
        wait up to ``idleTimeout`` for a first message and then take messages while
        they keep coming (:data:`TRICKLE` apart at most): such a query ends once the
        destination stays idle that long.
        """
        book = self._ensure_book(None)
        inbox = self._subscriptions()
        room = self.settings.max_messages_per_batch - book.unplanned()
        patient = (self._fresh or self._available_now) and book.unplanned() == 0
        self._fresh = False
        wait = self.settings.idle_timeout if patient else 0.0
        while room > 0:
            got = inbox.take(room, wait)
            if not got:
                return
            book.add_many(got, _now_us())
            room -= len(got)
            if patient:
                wait = min(TRICKLE, self.settings.idle_timeout)

    def _release(self, upto: int) -> None:
        if self._book is not None:
            done = self._book.release(upto)
            if done:
                # No receipt to wait for: an ACK that never arrives only brings its
                # messages back (at least once), and the DISCONNECT that ends the
                # query is confirmed after every ACK before it.
                _ack_each_subscription(done, receipt=False)

    # -- what the stream reader calls -----------------------------------------------------

    def initial(self) -> int:
        return self._ensure_book(None).base

    def latest(
        self, start: int | None, max_rows: int | None, *, all_available: bool = False
    ) -> int:
        """The end of the next batch. ``all_available``: Spark asked for everything
        there is, which only ``Trigger.Once`` does outside ``AvailableNow``; refused,
        since Spark never tells a source that such a query's one batch is done."""
        if all_available and not self._available_now:
            raise TriggerNotSupported(
                "the STOMP source does not support Trigger.Once: Spark never tells a source "
                "that the one batch of such a query reached the sink, so its messages could "
                "never be acknowledged and would come again in every run; use "
                "trigger(availableNow=True), which reads what is there and then stops"
            )
        book = self._ensure_book(start)
        # Spark plans a batch only once the one before is in the sink.
        self._release(book.planned)
        if start is not None:
            self._release(start)
        self._fill()
        return book.latest(start, max_rows)

    def plan(self, start: int, end: int) -> list[bytes]:
        """The batch ``(start, end]`` as Arrow IPC bytes, split into at most
        ``numPartitions`` parts of nearly equal size (none for an earlier run's batch)."""
        book = self._ensure_book(max(start, end))  # a replayed batch: number past it
        self._release(start)
        planned = book.plan(start, end)
        count = len(planned.handles)
        parts = min(self.settings.num_partitions, count)
        result = []
        for part in range(parts):
            low, high = count * part // parts, count * (part + 1) // parts
            first = planned.first + low
            batch = message_batch(
                planned.handles[low:high],
                planned.received_us[low:high],
                range(first, first + high - low),
            )
            result.append(to_ipc(batch))
        return result

    def commit(self, end: int) -> None:
        self._release(end)

    def available_now(self) -> None:
        self._available_now = True

    def close(self) -> None:
        """Disconnect; unacknowledged messages go back to the broker."""
        conns, self._conns, self._inbox = self._conns, [], None
        for conn in conns:
            with contextlib.suppress(StompError):
                conn.close()


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
        self._sub = self._subscribe()

    def _subscribe(self) -> Subscription:
        sub_id, headers = self.settings.subscribe_args(self.size, self.destination, self.index)
        if self.browse:
            headers["browser"] = "true"
        self.opened += 1
        self.taken = 0
        return self.conn.subscribe(self.destination, ack="client", id=sub_id, headers=headers)

    def _renew(self) -> None:
        if self.opened == 1:
            self.first = self.taken
        if self.settings.prefetch is None:
            self.size = min(2 * self.size, MAX_PREFETCH)
        self._sub = self._subscribe()

    def take(self, limit: int) -> list[Message]:
        """Up to ``limit`` next messages of one window (at least one), or none once the
        destination is drained."""
        idle = self.settings.idle_timeout
        # Seconds the destination has already been seen idle: a window that went quiet
        # counts towards idleTimeout, so that the end of a read costs idleTimeout, not
        # QUIET more.
        seen_idle = 0.0
        while not self._ended:
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
            self._ended = self._ended or not got
            return got
        return []

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
    now_us: Callable[[], int] = _now_us,
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
            _ack_each_subscription(list(last.values()))


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
    """The de-duplication id of row ``seq`` of a task: equal in every attempt."""
    return f"{task.query}:{task.batch}:{task.partition}:{seq}"


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
    prefix = f"{task.query}:{task.batch}:{task.partition}:"
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

"""The streaming read: the subscriptions next to the driver, and what Spark plans from them.

A subscription in ``client`` ack mode per destination (each on a connection of its
own) lives in the process that plans the micro-batches (next to the driver). An
:class:`~stompy.spark._offsets.OffsetBook` numbers the messages as they arrive, and
Spark's offsets count them. A planned batch carries its rows to the executors inside
its partitions, as Arrow IPC bytes. Nothing is acknowledged before Spark is done with
it: Spark runs micro-batches one after the other, so when it asks for the next batch's
end (``latestOffset``) or plans it (the ``start`` of ``partitions``) every batch
planned before is in the sink; ``commit(end)``, which Spark calls one batch late, is a
third trigger. One cumulative ACK per subscription and batch. Whatever was not
acknowledged when the process ends is redelivered by the broker, so a query restarted
from its checkpoint loses nothing; a batch that Spark replays from an earlier run
comes back empty because its messages are redelivered (numbered anew) instead.

The work per message happens off Spark's path: an *intake* thread takes the messages
from the subscriptions as they arrive, numbers them and turns them into Arrow columns
while Spark runs the batch before, up to one batch ahead. Planning a batch only slices
those columns and writes them out; the intake is the only reader of the
subscriptions, so messages are numbered in the order each subscription delivered
them, which the cumulative ACK relies on.

Numbering starts for each run at the wall clock in microseconds, or at the
checkpointed offset if Spark says it first, so offsets keep growing across restarts
(as long as a run reads fewer than a million messages a second).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

import pyarrow as pa

from stompy._client.blocking import Connection, Message, Subscription
from stompy.errors import ConfigurationError, StompError, _again
from stompy.spark._acks import ack_each_subscription
from stompy.spark._arrow import READ_ARROW_SCHEMA, message_batch, now_us, to_ipc
from stompy.spark._offsets import OffsetBook
from stompy.spark._options import ReadSettings

__all__ = ("StreamConsumer", "TriggerNotSupported")

log: Final = logging.getLogger("stompy.spark")

#: Seconds between two messages after which a patient wait for a batch stops.
TRICKLE: Final = 0.1
#: Seconds a wait for a fuller batch lasts before it judges the pace (and the longest
#: pause between messages it sits out): a broker takes a while to go on delivering
#: after a large cumulative ACK.
PROBE: Final = 0.25
#: A batch waits for its full rows only if the stream brought at least this share
#: (1/n) of them per ``maxTriggerDelay`` while Spark ran the batch before.
SLOWEST: Final = 8
#: Seconds one look at an idle subscription lasts (the intake's longest nap).
POLL: Final = 0.01
#: Messages the intake takes at once at most.
CHUNK: Final = 10_000
#: Messages the intake lets gather before it converts them (see ``_take_in``).
LEAST: Final = 2_000
NAP_BELOW: Final = 500
NAP: Final = 0.005
#: Seconds a call waits at most for the intake to take what had arrived.
SETTLE: Final = 5.0
#: Seconds the connection's I/O thread lets a flowing stream's bytes gather before it
#: reads them: each read costs a wake-up whatever it brings, and RabbitMQ's stream
#: comes about 3 KB at a time (see ``IOThread.gather``).
GATHER: Final = 0.001


class _Columns:
    """The Arrow rows of numbered messages, in chunks as the intake made them."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, pa.RecordBatch]] = deque()

    def add(self, first: int, batch: pa.RecordBatch) -> None:
        self._chunks.append((first, batch))

    def between(self, begin: int, end: int) -> list[pa.RecordBatch]:
        """The rows numbered ``begin`` to ``end - 1`` (slices, not copies)."""
        result = []
        for first, batch in self._chunks:
            low, high = max(begin, first), min(end, first + batch.num_rows)
            if low < high:
                result.append(batch.slice(low - first, high - low))
        return result

    def drop(self, upto: int) -> None:
        """Forget the chunks numbered wholly below ``upto``."""
        chunks = self._chunks
        while chunks and chunks[0][0] + chunks[0][1].num_rows <= upto:
            chunks.popleft()


class _RoundRobin:
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
        self._inbox: _RoundRobin | None = None
        #: The most rows of a batch (known once connected: it depends on the broker).
        self._rows = self.settings.batch_rows
        self._book: OffsetBook[Message] | None = None
        self._columns = _Columns()
        self._fresh = False
        self._available_now = False
        #: Guards the book and the columns; notified whenever either changes.
        self._changed = threading.Condition()
        self._intake: threading.Thread | None = None
        self._stopping = False
        self._failure: BaseException | None = None
        #: Takes the intake began, and the last of them that found nothing more waiting.
        self._takes = 0
        self._caught_up = 0
        #: Whether a call waits for the intake to take in and convert what arrived.
        self._hurry = False
        #: Messages the intake took, and of those the ones already in the book.
        self._arrived = 0
        self._numbered = 0
        #: When the last ``latest()`` returned, and ``_arrived`` then: the pace since.
        self._mark = (time.monotonic(), 0)

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

    def _subscribe(self, book: OffsetBook[Message]) -> None:
        if self._inbox is not None:
            return
        settings = self.settings
        conns: list[Connection] = []
        subs: list[Subscription] = []
        try:
            # A connection per destination: RabbitMQ takes a ``client`` ACK as covering
            # every earlier delivery of the connection, not of the subscription only
            # (STOMP's rule), so one ACK could take messages of another destination
            # that Spark has not seen yet.
            for index, destination in enumerate(settings.destinations):
                conn = settings.connection.connection(reconnect=settings.reconnect)
                conn._gather_reads(GATHER)
                conn.connect()
                conns.append(conn)
                if index == 0:  # the batch and the prefetch the broker allows
                    self._rows, prefetch = settings.stream_limits(conn.server)
                sub_id, headers = settings.subscribe_args(prefetch, destination, index)
                # Ids unique across the connections: acknowledgements go by subscription.
                sub_id = sub_id or f"spark-{index}"
                subs.append(
                    conn.subscribe(
                        destination,
                        ack="client",
                        id=sub_id,
                        headers=headers,
                        receipt=True,
                        max_pending=prefetch,
                    )
                )
        except BaseException:
            for conn in conns:
                with contextlib.suppress(StompError):
                    conn.close()
            raise
        self._conns = conns
        self._inbox = inbox = _RoundRobin(subs)
        self._fresh = True
        self._stopping = False
        self._intake = threading.Thread(
            target=self._take_in, args=(inbox, book), name="stompy-spark-intake", daemon=True
        )
        self._intake.start()
        log.info(
            "subscribed to %s at %s",
            ", ".join(settings.destinations),
            settings.connection.where,
        )

    def _take_in(self, inbox: _RoundRobin, book: OffsetBook[Message]) -> None:
        """The intake thread: number and convert what arrives, one batch ahead at most.

        What a take brings waits (``waiting``) until there are :data:`LEAST` messages
        to convert at once, the batch ahead is full, or a call waits for the intake
        (:attr:`_hurry`): turning messages into Arrow columns costs a few hundred
        microseconds a time whatever their number, and a take under a steady stream
        brings what one read of the socket held (tens of messages).
        """
        limit = self._rows
        single = len(inbox.subscriptions) == 1
        changed = self._changed
        waiting: list[Message] = []
        stamps: list[int] = []  # when each of them arrived
        try:
            while True:
                with changed:
                    while not self._stopping and book.unplanned() >= limit:
                        changed.wait()
                    if self._stopping:
                        return
                    asked = min(limit - book.unplanned() - len(waiting), CHUNK)
                    self._takes += 1
                    take = self._takes
                # Without waiting: a take that waits reads the socket itself while it
                # does (the read-through), a few frames at a time; the I/O thread's
                # reads gather more (see GATHER).
                got = inbox.take(asked, 0) if asked > 0 else []
                if got:
                    stamps += [now_us()] * len(got)
                    waiting += got
                    with changed:  # a patient wait sees messages come before they are ready
                        self._arrived += len(got)
                        changed.notify_all()
                short = not got or (single and len(got) < asked)
                if waiting and (
                    (short and self._hurry)
                    or len(waiting) >= LEAST
                    or book.unplanned() + len(waiting) >= limit
                ):
                    self._convert(book, waiting, stamps)
                    waiting, stamps = [], []
                if short and not waiting:
                    with changed:
                        self._caught_up = take
                        changed.notify_all()
                if not got and asked > 0:
                    time.sleep(NAP)  # nothing came: look again soon
                elif short and waiting and len(got) < NAP_BELOW and not self._hurry:
                    time.sleep(NAP)
        except BaseException as exc:  # the connection gave up: the query fails on it
            with changed:
                self._failure = exc
                changed.notify_all()

    def _convert(self, book: OffsetBook[Message], got: list[Message], stamps: list[int]) -> None:
        """Number ``got`` (which arrived at ``stamps``) and add their Arrow rows."""
        first = book.next  # only the intake numbers messages
        batch = message_batch(got, stamps, range(first, first + len(got)))
        with self._changed:
            book.add_many(got, stamps)
            self._columns.add(first, batch)
            self._numbered += len(got)
            self._changed.notify_all()

    def _await_batch(self, book: OffsetBook[Message]) -> None:
        """Wait until the book holds what the next batch should have.

        A batch that has rows waits only for the intake to take in what had already
        arrived and, under a backlog, up to ``maxTriggerDelay`` for its full rows
        (:meth:`_fill`). Only when there is none (right after
        subscribing, and on every call under ``Trigger.AvailableNow``) does this wait
        up to ``idleTimeout`` for a first message and then while messages keep coming
        (:data:`TRICKLE` apart at most): such a query ends once the destination stays
        idle that long.
        """
        with self._changed:
            self._hurry = True
            try:
                self._settle(book)
            finally:
                self._hurry = False

    def _settle(self, book: OffsetBook[Message]) -> None:
        """:meth:`_await_batch` with the lock held and the intake hurried."""
        limit = self._rows
        changed = self._changed
        patient = (self._fresh or self._available_now) and book.unplanned() == 0
        self._fresh = False
        if patient:
            idle = self.settings.idle_timeout
            trickle = min(TRICKLE, idle)
            # What arrived and is not planned yet counts: right after subscribing
            # the intake may have taken every queued message before this wait.
            before = self._numbered
            changed.wait_for(
                lambda: self._arrived > before or self._failure is not None, timeout=idle
            )
            # Quiet: the intake waited ``trickle`` seconds for a message (the time
            # it spends converting what it took does not count).
            seen, quiet_at = self._arrived, time.monotonic() + trickle
            give_up = time.monotonic() + idle + SETTLE  # a wait that always ends
            while before < self._arrived < before + limit and self._failure is None:
                if time.monotonic() >= give_up:
                    break
                if self._numbered != self._arrived:
                    changed.wait(min(SETTLE, max(0.0, give_up - time.monotonic())))
                    seen, quiet_at = self._arrived, time.monotonic() + trickle
                    continue
                remaining = quiet_at - time.monotonic()
                if remaining <= 0:
                    break
                changed.wait(remaining)
                if self._arrived != seen:
                    seen, quiet_at = self._arrived, time.monotonic() + trickle
            changed.wait_for(
                lambda: self._numbered == self._arrived or self._failure is not None,
                timeout=SETTLE,
            )
        else:
            self._catch_up(book, limit)
            if 0 < book.unplanned() < limit and self.settings.max_trigger_delay > 0:
                self._hurry = False  # what comes meanwhile is converted in chunks
                self._fill(book, limit, self.settings.max_trigger_delay)
                self._hurry = True
                self._catch_up(book, limit)
        failure = self._failure
        if failure is not None:
            raise _again(failure) from failure

    def _catch_up(self, book: OffsetBook[Message], limit: int) -> None:
        """Wait (the lock held, the intake hurried) until the intake took in and
        converted what had arrived, or holds a full batch."""
        take = self._takes + 1  # one begun from now on
        self._changed.wait_for(
            lambda: (
                self._caught_up >= take or book.unplanned() >= limit or self._failure is not None
            ),
            timeout=SETTLE,
        )

    def _fill(self, book: OffsetBook[Message], limit: int, delay: float) -> None:
        """Under a backlog, wait up to ``delay`` seconds for a full batch (the lock held).

        Spark's cost per micro-batch hardly grows with its rows, and while it runs one
        it takes the CPU the intake (and the broker) would need for the next: a batch
        started with what had arrived stays small, batch after batch. So a batch
        waits for its ``limit`` rows while messages keep coming (:data:`PROBE` apart
        at most) and, once it has waited :data:`PROBE`, only as long as they come
        fast enough to fill half a batch in ``delay`` (a backlog, or a stream about
        as fast as Spark takes it). A stream that brought less than 1/:data:`SLOWEST`
        of a batch per ``delay`` while Spark ran the batch before is not held back at
        all (the intake's pace then is what is left of the CPU beside Spark: under a
        backlog it is a fraction of the broker's); one between is held back
        :data:`PROBE` at most.
        """
        changed = self._changed
        began = time.monotonic()
        since, before = self._mark
        at_start = self._arrived
        if (at_start - before) / max(began - since, 1e-3) * delay < limit / SLOWEST:
            return  # a trickle, not a backlog: not even a probe
        deadline = began + delay
        seen, quiet_at = at_start, began + PROBE
        while book.unplanned() < limit and self._failure is None:
            now = time.monotonic()
            if now >= deadline or now >= quiet_at:
                return
            if (
                now - began >= PROBE
                and (self._arrived - at_start) / (now - began) * delay < limit / 2
            ):
                return
            wake = min(deadline, quiet_at)
            if now < began + PROBE:  # the pace is judged once the probe is over
                wake = min(wake, began + PROBE)
            changed.wait(wake - now)
            if self._arrived != seen:
                seen, quiet_at = self._arrived, time.monotonic() + PROBE

    def _release(self, upto: int) -> None:
        if self._book is None:
            return
        with self._changed:
            done = self._book.release(upto)
            self._columns.drop(self._book.released)
        if done:
            # No receipt to wait for: an ACK that never arrives only brings its
            # messages back (at least once), and the DISCONNECT that ends the
            # query is confirmed after every ACK before it.
            inbox = self._inbox
            among = None if inbox is None else len(inbox.subscriptions)
            ack_each_subscription(done, receipt=False, among=among)

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
        self._subscribe(book)
        if max_rows is not None and self.settings.max_messages_per_batch is None:
            max_rows = min(max_rows, self._rows)  # Spark asked for the default
        self._await_batch(book)
        with self._changed:
            self._mark = (time.monotonic(), self._arrived)
            return book.latest(start, max_rows)

    def plan(self, start: int, end: int) -> list[bytes]:
        """The batch ``(start, end]`` as Arrow IPC bytes, split into at most
        ``numPartitions`` parts of nearly equal size (none for an earlier run's batch)."""
        book = self._ensure_book(max(start, end))  # a replayed batch: number past it
        self._release(start)
        with self._changed:
            numbers = book.claim(start, end)
            chunks = self._columns.between(numbers.start, numbers.stop)
            self._changed.notify_all()  # room for the intake
        count = len(numbers)
        if not count:
            return []
        rows = pa.Table.from_batches(chunks, READ_ARROW_SCHEMA)
        parts = min(self.settings.num_partitions, count)
        result = []
        for part in range(parts):
            low, high = count * part // parts, count * (part + 1) // parts
            result.append(to_ipc(rows.slice(low, high - low).combine_chunks()))
        return result

    def commit(self, end: int) -> None:
        self._release(end)

    def available_now(self) -> None:
        self._available_now = True

    def close(self) -> None:
        """Stop the intake and disconnect; unacknowledged messages go back to the broker."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        intake, self._intake = self._intake, None
        if intake is not None:
            intake.join(SETTLE)
        conns, self._conns, self._inbox = self._conns, [], None
        for conn in conns:
            with contextlib.suppress(StompError):
                conn.close()

"""The batch read: each Spark task drains a destination as a competing consumer.

Each task has its own connection (settings are pickled, sockets are not) and
acknowledges (with a receipt) only after Spark took its last row: a task that fails
gives everything back. Holding every message unacknowledged until the end would
stop a subscription at its prefetch, so a task reads a queue through *windows*: a
subscription whose prefetch is full is left as it is, and the task subscribes again
for the next window (growing from ``prefetch`` up to :data:`MAX_PREFETCH`). Small
first windows let the tasks share the destination instead of the first one to
subscribe taking it all. A task stops once the destination stayed idle for
``idleTimeout`` seconds, or at ``maxMessagesPerPartition`` (with a WARNING that
says so). Nothing here imports PySpark: it is tested without a Spark session, and
:mod:`stompy.spark._source` adapts it. Rows leave as Arrow record batches
(:mod:`stompy.spark._arrow`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from itertools import repeat
from typing import Final

import pyarrow as pa

from stompy._client.blocking import Connection, Message, Subscription
from stompy.spark._acks import ack_each_subscription
from stompy.spark._arrow import message_batch, now_us
from stompy.spark._options import MAX_PREFETCH, ReadSettings

__all__ = ("drain",)

log: Final = logging.getLogger("stompy.spark")


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
        self,
        conn: Connection,
        settings: ReadSettings,
        destination: str,
        index: int,
        *,
        started_late: bool = False,
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
        #: Seconds of quiet that mean the destination is drained. A task that started
        #: late (see :func:`drain`) waits only :data:`QUIET` for its first message.
        self._patience = settings.idle_timeout
        if started_late:
            self._patience = min(QUIET, settings.idle_timeout)
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
        idle = self._patience
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
                self._patience = self.settings.idle_timeout
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
    planned_at: float | None = None,
    now_us: Callable[[], int] = now_us,
) -> Generator[pa.RecordBatch, None, None]:
    """Yield what the destinations hold, as record batches, until each is idle.

    ``planned_at`` is when the read was planned (seconds since the epoch). A task that
    starts ``idleTimeout`` or more after that waited for a free task slot while other
    tasks of the read took what was there, and they end only once the destination
    stayed idle that long: such a late task waits only :data:`QUIET` for a first
    message rather than ``idleTimeout`` again (it reads on as usual once it got one).

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
    started_late = planned_at is not None and time.time() - planned_at >= settings.idle_timeout
    with settings.connection.connection(max_pending=10_000) as conn:
        for index, destination in enumerate(settings.destinations):
            windows = _Windows(conn, settings, destination, index, started_late=started_late)
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

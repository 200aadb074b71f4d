"""Offsets of the streaming read: the numbers Spark's checkpoints hold, and the book
that keeps them.

Spark's offset ``{"seq": k}`` means "every message numbered below ``k``". The
:class:`OffsetBook` numbers the messages as the driver-side subscriptions deliver
them, remembers which batches Spark was handed, and gives back the messages Spark
is done with, to be acknowledged. It holds no socket and no lock: the streaming
read (:mod:`stompy.spark._stream_read`) guards it, and tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ("OffsetBook", "Planned", "offset_dict", "offset_value")

H = TypeVar("H")


def offset_dict(seq: int) -> dict[str, int]:
    """Spark's JSON form of an offset."""
    return {"seq": seq}


def offset_value(offset: Mapping[str, Any]) -> int:
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
        # Lists, not deques: a release lets a whole batch go in one slice and one
        # ``del`` at C speed, not a ``popleft()`` per message.
        self._handles: list[H] = []
        self._received: list[int] = []
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

    def add_many(self, handles: Sequence[H], received_us: Sequence[int]) -> None:
        """Keep messages, numbered in their order; ``received_us[i]`` is when
        ``handles[i]`` arrived."""
        self._handles.extend(handles)
        self._received.extend(received_us)
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

    def claim(self, start: int, end: int) -> range:
        """The numbers of the batch ``(start, end]``, now handed to Spark (none for an
        earlier run's batch)."""
        if end not in self._issued:
            return range(end, end)
        begin = max(start if start in self._issued else self.base, self.released)
        self.planned = max(self.planned, end)
        return range(begin, end)

    def plan(self, start: int, end: int) -> Planned[H]:
        """The messages of the batch ``(start, end]`` (none for an earlier run's)."""
        numbers = self.claim(start, end)
        if not numbers:
            return Planned(numbers.start, [], [])
        first = self.next - len(self._handles)  # the number of the oldest held
        low, high = numbers.start - first, numbers.stop - first
        return Planned(numbers.start, self._handles[low:high], self._received[low:high])

    def release(self, upto: int) -> list[H]:
        """Forget messages below ``upto``; return them, oldest first, to acknowledge.

        Only offsets of this run count, and never past what Spark was handed.
        """
        if upto not in self._issued:
            return []
        upto = min(upto, self.planned)
        count = max(0, upto - (self.next - len(self._handles)))
        released = self._handles[:count]
        del self._handles[:count]
        del self._received[:count]
        if upto > self.released:
            self.released = upto
            self._issued = {o for o in self._issued if o >= upto}
        return released

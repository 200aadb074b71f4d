"""What the cluster tests count: every copy a query wrote, and where each came from."""

from __future__ import annotations

from collections import defaultdict

import stompy
from tests.spark._support import Collector


class Copies(Collector):
    """A :class:`Collector` that also keeps, per source message, each copy's
    de-duplication id and whether the query read it redelivered."""

    def __init__(self, url: str, destination: str) -> None:
        #: source-id -> [(stompy-dedup-id, source-redelivered), ...], one per copy
        self.by_source: defaultdict[str, list[tuple[str, bool]]] = defaultdict(list)
        super().__init__(url, destination)

    def _take(self, message: stompy.Message) -> None:
        super()._take(message)
        headers = message.headers
        copy = (headers.get("stompy-dedup-id", ""), headers.get("source-redelivered") == "true")
        with self._lock:
            self.by_source[headers.get("source-id", message.message_id)].append(copy)

    def sources(self) -> dict[str, list[tuple[str, bool]]]:
        """A copy of :attr:`by_source` as it is now."""
        with self._lock:
            return {source: list(seen) for source, seen in self.by_source.items()}

    @property
    def redelivered(self) -> int:
        """How many copies the query read with ``redelivered`` set."""
        with self._lock:
            return sum(r for copies in self.by_source.values() for _, r in copies)


def check_copies(copies: Copies, messages: int) -> None:
    """Nothing lost, and every duplicate explained as docs/spark.md says.

    A source message written more than once was either written again by a retried
    task (the same de-duplication id: an executor lost mid-write) or read again after
    the broker redelivered it (``redelivered`` set: a driver that never acknowledged
    it). So the copies read the first time all carry one de-duplication id.
    """
    assert copies.unique == messages, f"{messages - copies.unique} lost"
    assert copies.bodies == {str(i).encode() for i in range(messages)}
    for source, seen in copies.sources().items():
        first_reads = {dedup for dedup, redelivered in seen if not redelivered}
        assert len(first_reads) <= 1, f"{source}: copies not explained: {seen}"
        assert all(dedup for dedup, _ in seen), (
            f"{source}: a copy without a de-duplication id: {seen}"
        )


def send(url: str, count: int, destination: str = "/queue/in") -> None:
    """``count`` messages with bodies "0", "1", ...; return once the broker has them all."""
    with stompy.Connection(url) as conn:
        conn.send_many((stompy.Outgoing(destination, str(i)) for i in range(count)), receipt=True)

"""The blocking transport's gathered reads (``IOThread.gather``), which only the Spark
source's connections ask for: while a stream flows, the I/O thread lets the broker's
bytes gather that long before it reads them, and never longer; the first bytes after a
pause are read at once, and a connection that did not ask reads as it always did.

The gather is made long here (half a second) so that it shows on a loaded machine; the
consumer takes messages without waiting (``get(0)``), so that the I/O thread reads
them, not a caller reading through.
"""

from __future__ import annotations

import time
import uuid

import stompy
from stompy.testing import run_broker

GATHER = 0.5
#: A generous bound on how long a message takes through a loaded machine.
SLACK = 2.0


def _arrival(sub: stompy.Subscription, since: float, limit: float) -> float:
    """Seconds from ``since`` until ``sub`` holds a message (taken without waiting)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if sub.get(0) is not None:
            return time.monotonic() - since
        time.sleep(0.001)
    raise AssertionError(f"no message within {limit} s")


def _two_in_a_row(gather: float | None) -> tuple[float, float, float]:
    """A message after a pause, one sent as soon as it arrived, then a receipt asked
    right after: the seconds each took, on a consumer that gathers ``gather``."""
    destination = f"/queue/{uuid.uuid4().hex}"
    with (
        run_broker() as broker,
        stompy.Connection(broker.url) as producer,
        stompy.Connection(broker.url) as consumer,
    ):
        if gather is not None:
            consumer._gather_reads(gather)
        sub = consumer.subscribe(destination, receipt=True)
        # A pause: bytes read longer ago than the gather (and 10 ms) are no flowing stream.
        time.sleep(GATHER + 0.2)
        sent = time.monotonic()
        producer.send(destination, b"first")
        first = _arrival(sub, sent, GATHER + SLACK)
        sent = time.monotonic()
        producer.send(destination, b"second")  # the stream flows now
        second = _arrival(sub, sent, GATHER + SLACK + 1.0)
        sent = time.monotonic()
        consumer.send(f"/queue/{uuid.uuid4().hex}", b"x", receipt=True)
        receipt = time.monotonic() - sent
    return first, second, receipt


def test_a_gathering_connection_holds_a_frame_of_a_flowing_stream_no_longer_than_its_gather() -> (
    None
):
    first, second, receipt = _two_in_a_row(GATHER)
    assert first < GATHER / 2  # the first bytes after a pause are read at once
    assert GATHER * 0.9 <= second < GATHER + SLACK  # gathered, and no longer than that
    assert receipt < GATHER + SLACK


def test_a_connection_that_did_not_ask_reads_at_once() -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        assert conn._io.gather == 0.0
    first, second, receipt = _two_in_a_row(None)
    assert first < GATHER / 2
    assert second < GATHER / 2
    assert receipt < GATHER / 2

"""The Spark connector's reading logic against real brokers (no Spark needed).

What these pin down differs from broker to broker: how a ``client`` ACK is cumulative
(RabbitMQ: over the whole connection, not the subscription), how prefetch stops a
subscription, how competing consumers share a queue.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import stompy
from tests.interop._support import BrokerTarget

pa = pytest.importorskip("pyarrow", reason="the Spark connector needs pyarrow")

from stompy.spark._arrow import from_ipc  # noqa: E402
from stompy.spark._batch_read import drain  # noqa: E402
from stompy.spark._options import ReadSettings, parse_read_options  # noqa: E402
from stompy.spark._stream_read import StreamConsumer  # noqa: E402
from tests.quirks import COILMQ, INDIVIDUAL_IS_AUTO  # noqa: E402


def settings(broker: BrokerTarget, streaming: bool, **options: str) -> ReadSettings:
    base = {"url": broker.url, "idleTimeout": "1", **options}
    return parse_read_options({k.lower(): v for k, v in base.items()}, streaming=streaming)


def fill(broker: BrokerTarget, destination: str, count: int) -> None:
    with stompy.Connection(broker.url) as conn:
        messages = (stompy.Outgoing(destination, str(i)) for i in range(count))
        conn.send_many(messages, receipt=True)


def left(broker: BrokerTarget, destination: str) -> int:
    """How many messages the broker still gives out for ``destination`` (consumed)."""
    count = 0
    with stompy.Connection(broker.url) as conn, conn.subscribe(destination) as sub:
        for _ in range(100_000):
            if sub.get(timeout=1.0) is None:
                break
            count += 1
    return count


def bodies(batches: Any) -> list[bytes]:
    return [body for batch in batches for body in batch.column("body").to_pylist()]


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO, effect="skip")
def test_a_batch_read_goes_past_its_prefetch_and_acknowledges_all(
    broker: BrokerTarget, unique: str
) -> None:
    queue = f"/queue/spark-window-{unique}"
    fill(broker, queue, 1500)
    got = bodies(drain(settings(broker, False, destination=queue, prefetch="100")))
    assert sorted(int(b) for b in got) == list(range(1500))
    assert left(broker, queue) == 0


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO, effect="skip")
def test_batch_read_tasks_share_a_queue(broker: BrokerTarget, unique: str) -> None:
    queue = f"/queue/spark-share-{unique}"
    fill(broker, queue, 6000)
    read = settings(broker, False, destination=queue)
    results: dict[int, list[bytes]] = {}

    def task(index: int) -> None:
        results[index] = bodies(drain(read, index))

    threads = [threading.Thread(target=task, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    counts = sorted(len(r) for r in results.values())
    assert sum(counts) == 6000
    assert counts[0] >= 1000, counts
    assert left(broker, queue) == 0


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO, effect="skip")
def test_a_stream_over_two_destinations_acknowledges_only_what_spark_finished(
    broker: BrokerTarget, unique: str
) -> None:
    first, second = f"/queue/spark-a-{unique}", f"/queue/spark-b-{unique}"
    fill(broker, first, 40)
    fill(broker, second, 40)
    read = settings(
        broker, True, destination=f"{first},{second}", maxMessagesPerBatch="30", prefetch="100"
    )
    consumer = StreamConsumer(read)
    try:
        start = consumer.initial()
        end = consumer.latest(start, 30)
        rows = [
            r for part in consumer.plan(start, end) for b in from_ipc(part) for r in b.to_pylist()
        ]
        assert len(rows) == 30
        end2 = consumer.latest(end, 30)  # the first batch is done: acknowledged
        assert end2 > end
    finally:
        consumer.close()  # the second batch was never finished: it goes back
    # Exactly the 30 finished messages are gone; an ACK on one destination never took
    # messages of the other that Spark had not seen.
    assert left(broker, first) + left(broker, second) == 50

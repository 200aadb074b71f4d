"""The batch read's draining tasks, against the in-process broker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import stompy
from stompy.spark._batch_read import drain
from stompy.testing import Broker, run_broker
from tests.spark._reading import closed_port, fill, read_settings, rows, take_all

WHEN_US = 1_704_153_600_000_000  # 2024-01-02 00:00 UTC


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=100_000) as running:
        yield running


def test_drain_takes_what_is_queued_and_acks_at_the_end(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 30)
    settings = read_settings(broker.url, streaming=False, idleTimeout="0.3")
    batches = drain(settings, 1, now_us=lambda: WHEN_US)
    got = rows([next(batches)])
    assert [r["body"] for r in got] == [str(i).encode() for i in range(30)]
    assert got[0]["received_at"].timestamp() == WHEN_US / 1e6
    # offsets are unique in the whole read: partition 1 of 2 numbers 1, 3, 5, ...
    assert [r["offset"] for r in got] == list(range(1, 60, 2))
    assert broker.unacked_count("/queue/in") == 30  # nothing acknowledged mid-task
    assert list(batches) == []
    assert broker.unacked_count("/queue/in") == 0
    assert broker.queue_depth("/queue/in") == 0


def test_a_drain_stopped_early_gives_everything_back(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 10)
    batches = drain(read_settings(broker.url, streaming=False))
    assert rows([next(batches)])[0]["body"] == b"0"
    batches.close()
    assert broker.queue_depth("/queue/in") == 10
    assert all(m.redelivered for m in take_all(broker.url, "/queue/in")[:1])


def test_a_drain_reads_past_its_prefetch_through_windows(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 600)
    settings = read_settings(broker.url, streaming=False, prefetch="100", idleTimeout="0.3")
    got = rows(drain(settings))
    assert sorted(int(r["body"]) for r in got) == list(range(600))
    assert broker.queue_depth("/queue/in") == 0
    assert broker.unacked_count("/queue/in") == 0


def test_a_window_left_quiet_still_has_what_reaches_it_read(broker: Broker) -> None:
    # The first window takes 5 messages and goes quiet, so the task opens a second;
    # messages sent then reach both windows (the broker spreads them over its two
    # subscriptions): those of the first are read too, not left unread to the end.
    fill(broker.url, "/queue/in", 5)
    settings = read_settings(broker.url, streaming=False, prefetch="100", idleTimeout="1")
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(rows(drain(settings))))
    reader.start()
    broker.wait_until(
        lambda: sum(len(c.subscriptions) for c in broker.connections) >= 2, timeout=10
    )
    fill(broker.url, "/queue/in", 60, start=5)
    reader.join(30)
    assert sorted(int(r["body"]) for r in got) == list(range(65))
    assert broker.queue_depth("/queue/in") == broker.unacked_count("/queue/in") == 0


def test_drains_running_together_share_the_queue(broker: Broker) -> None:
    # Both drains subscribe before the messages come: with the queue filled first, one
    # of them could take all 6,000 before the other's thread ran (as on a loaded
    # machine it did). The long idleTimeout covers the wait for the first message.
    settings = read_settings(broker.url, streaming=False, idleTimeout="5")
    results: dict[int, list[dict[str, Any]]] = {}

    def task(index: int) -> None:
        results[index] = rows(drain(settings, index))

    threads = [threading.Thread(target=task, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    broker.wait_until(
        lambda: sum(1 for c in broker.connections if c.subscriptions) >= 2, timeout=10
    )
    fill(broker.url, "/queue/in", 6000)
    for thread in threads:
        thread.join(60)
    counts = sorted(len(r) for r in results.values())
    assert sum(counts) == 6000
    assert counts[0] >= 1000, counts  # both took a real share
    offsets = [r["offset"] for part in results.values() for r in part]
    assert len(set(offsets)) == 6000  # unique across the partitions
    assert broker.queue_depth("/queue/in") == broker.unacked_count("/queue/in") == 0


def test_drain_stops_at_the_per_task_limit_and_says_so(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    fill(broker.url, "/queue/in", 10)
    settings = read_settings(broker.url, streaming=False, maxMessagesPerPartition="4")
    with caplog.at_level(logging.WARNING, logger="stompy.spark"):
        assert len(rows(drain(settings))) == 4
    assert "stopped at maxMessagesPerPartition=4" in caplog.text
    assert broker.queue_depth("/queue/in") == 6


def test_a_topic_is_read_through_one_subscription(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    settings = read_settings(
        broker.url, streaming=False, destination="/topic/t", prefetch="5", idleTimeout="1"
    )
    batches = drain(settings)
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(rows(batches)))
    with caplog.at_level(logging.WARNING, logger="stompy.spark"):
        reader.start()
        broker.wait_until(lambda: any(c.subscriptions for c in broker.connections), timeout=5)
        fill(broker.url, "/topic/t", 8)
        reader.join(30)
    # A second subscription to a topic would copy its messages: one only, so the
    # prefetch bounds the read, and a WARNING says so.
    assert len(got) == 5
    assert "its subscription" in caplog.text
    assert "raise 'prefetch'" in caplog.text


def test_drain_reads_several_destinations(broker: Broker) -> None:
    fill(broker.url, "/queue/a", 2)
    fill(broker.url, "/queue/b", 3)
    settings = read_settings(
        broker.url, streaming=False, destination="/queue/a,/queue/b", idleTimeout="0.3"
    )
    got = rows(drain(settings))
    assert [(r["destination"], r["body"]) for r in got] == [
        ("/queue/a", b"0"),
        ("/queue/a", b"1"),
        ("/queue/b", b"0"),
        ("/queue/b", b"1"),
        ("/queue/b", b"2"),
    ]
    assert broker.queue_depth("/queue/a") == broker.queue_depth("/queue/b") == 0


def test_browse_leaves_the_queue_as_it_was(broker: Broker) -> None:
    fill(broker.url, "/queue/in", 5)
    settings = read_settings(broker.url, streaming=False, mode="browse", idleTimeout="0.3")
    got = rows(drain(settings))
    assert [r["body"] for r in got] == [str(i).encode() for i in range(5)]
    assert broker.queue_depth("/queue/in") == 5  # this broker does not browse: given back


def test_browse_stops_at_the_brokers_end_marker(broker: Broker) -> None:
    # A browsing broker (ActiveMQ, Apollo) ends a browse with a ``browser:end`` message;
    # played here by a message that carries the header.
    fill(broker.url, "/queue/in", 3)
    with stompy.Connection(broker.url) as conn:
        conn.send("/queue/in", "", headers={"browser": "end"})
    fill(broker.url, "/queue/in", 2, start=3)
    settings = read_settings(broker.url, streaming=False, mode="browse")
    got = rows(drain(settings))
    assert [r["body"] for r in got] == [b"0", b"1", b"2"]  # neither the marker nor after


def test_an_unreachable_broker_is_named_by_the_batch_read() -> None:
    url = f"stomp://127.0.0.1:{closed_port()}"
    with pytest.raises(stompy.ConnectFailed, match=r"127\.0\.0\.1"):
        list(drain(read_settings(url, streaming=False, connectTimeout="2")))


def test_a_read_held_back_at_activemqs_page_says_so(caplog: pytest.LogCaptureFixture) -> None:
    # ActiveMQ hands out at most 200 unacknowledged messages of a queue by default: a
    # first window that got exactly that many, from a broker that says it is ActiveMQ,
    # may have been held back, and the task says so.
    with run_broker(server_name="ActiveMQ/5.17.2") as broker:
        fill(broker.url, "/queue/in", 200)
        settings = read_settings(broker.url, streaming=False, idleTimeout="0.3")
        with caplog.at_level(logging.WARNING, logger="stompy.spark"):
            assert len(rows(drain(settings))) == 200
    assert "raise maxPageSize in activemq.xml" in caplog.text


def test_a_task_that_starts_late_waits_only_a_moment_for_a_first_message(broker: Broker) -> None:
    # Planned long ago: the read's other tasks had their idleTimeout for messages to come.
    settings = read_settings(broker.url, streaming=False, idleTimeout="5", numPartitions="3")
    started = time.monotonic()
    assert rows(drain(settings, 2, planned_at=time.time() - 10)) == []
    assert time.monotonic() - started < 2.5  # not the 5 s of idleTimeout
    # What is there is read all the same, and a task on time waits as it always did.
    fill(broker.url, "/queue/in", 50)
    assert len(rows(drain(settings, 2, planned_at=time.time() - 10))) == 50
    started = time.monotonic()
    assert rows(drain(settings, 0, planned_at=time.time())) == []
    assert time.monotonic() - started >= 5

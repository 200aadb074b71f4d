"""The async client's inboxes: the backlog, pausing and resuming the reader, wake-ups.

A subscription's messages wait in its inbox; those that do not fit wait in the
session's backlog while the reader stops reading; every wait is woken by an anyio
event. On asyncio and on trio.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import stompy
from stompy.errors import ConnectionLost
from stompy.testing import serve

pytestmark = pytest.mark.anyio


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


async def wait_pending(sub: stompy.AsyncSubscription, count: int) -> None:
    while sub.pending < count:
        await anyio.sleep(0.01)


async def test_backlog_moved_by_the_timer_does_not_leave_the_reader_asleep() -> None:
    # 11 messages for an inbox of 10: one waits in the backlog and the reader pauses.
    # One get() leaves 9 (more than half: no wake-up), and the heart-beat timer's pump
    # moves the backlog into the room. The reader must read again, or the broker's
    # heart-beats go unread and a healthy connection is declared dead.
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as producer:
                for i in range(11):
                    await producer.send(dest, f"m{i}")
                await producer.send("/queue/other", "sync", receipt=True)
            async with stompy.AsyncConnection(
                broker.url, heartbeats=(100, 100), max_pending=10
            ) as conn:
                sub = await conn.subscribe(dest)
                await wait_pending(sub, 10)
                await anyio.sleep(0.1)  # the 11th is in by now, set aside
                first = await sub.get()
                assert first is not None
                assert first.text == "m0"
                await anyio.sleep(0.6)  # several heart-beat periods
                assert conn.failure is None
                assert conn.connected
                texts = [first.text]
                for _ in range(10):
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    texts.append(msg.text)
                assert texts == [f"m{i}" for i in range(11)]
                await conn.send(dest, "after", receipt=True)
                msg = await sub.get(timeout=5)
                assert msg is not None
                assert msg.text == "after"


async def test_slow_consumer_with_heartbeats_loses_nothing() -> None:
    dest = queue()
    with anyio.fail_after(30):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as producer:
                for i in range(300):
                    await producer.send(dest, b"x" * 2048, headers={"n": str(i)})
                await producer.send("/queue/other", "sync", receipt=True)
            # 300 ms beats: with 100 ms ones, a 220 ms stall of the whole process (the
            # broker shares this event loop) on a loaded machine ended the connection.
            async with stompy.AsyncConnection(
                broker.url, heartbeats=(300, 300), max_pending=4
            ) as conn:
                sub = await conn.subscribe(dest)
                await anyio.sleep(2.0)  # far longer than the peer may be silent
                assert conn.failure is None
                assert sub.pending <= 4
                numbers = []
                for _ in range(300):
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    numbers.append(int(msg.headers["n"]))
                    if len(numbers) % 50 == 0:
                        await anyio.sleep(0.25)
                assert numbers == list(range(300))
                assert conn.failure is None


async def test_unsubscribing_a_full_subscription_lets_the_others_receive() -> None:
    # The backlog holds a's messages and, behind them, b's: once a ends, what waited
    # for it is dropped and b's message must come through.
    a_dest, b_dest = queue(), queue()
    with anyio.fail_after(20):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url) as conn,
            stompy.AsyncConnection(broker.url) as producer,
        ):
            a = await conn.subscribe(a_dest, max_pending=1)
            b = await conn.subscribe(b_dest)
            for i in range(5):
                await producer.send(a_dest, f"a{i}")
            await producer.send(b_dest, "b", receipt=True)
            await wait_pending(a, 1)
            await anyio.sleep(0.1)
            assert b.pending == 0  # behind a's, in the backlog
            await a.unsubscribe()
            msg = await b.get(timeout=5)
            assert msg is not None
            assert msg.text == "b"
            first = await a.get(timeout=0)  # received before the end: still handed out
            assert first is not None
            assert first.text == "a0"
            assert await a.get(timeout=0) is None


async def test_two_tasks_waiting_on_one_subscription_each_get_a_message() -> None:
    dest = queue()
    got: list[str] = []

    async def take(sub: stompy.AsyncSubscription) -> None:
        msg = await sub.get(timeout=5)
        assert msg is not None
        got.append(msg.text)

    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest)
            async with anyio.create_task_group() as tg:
                tg.start_soon(take, sub)
                tg.start_soon(take, sub)
                await anyio.sleep(0.05)
                await conn.send(dest, "one", receipt=True)
                await anyio.sleep(0.05)
                await conn.send(dest, "two", receipt=True)
            assert sorted(got) == ["one", "two"]


async def test_unsubscribe_ends_a_get_waiting_in_another_task() -> None:
    dest = queue()
    results: list[object] = []

    async def take(sub: stompy.AsyncSubscription) -> None:
        results.append(await sub.get())

    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest)
            async with anyio.create_task_group() as tg:
                tg.start_soon(take, sub)
                await anyio.sleep(0.05)
                await sub.unsubscribe()
            assert results == [None]
            assert not sub.active


async def test_a_get_that_timed_out_does_not_keep_a_later_one_from_waking() -> None:
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest)
            assert await sub.get(timeout=0) is None
            assert await sub.get(timeout=0.05) is None
            with anyio.move_on_after(0.05):
                await sub.get()
            await conn.send(dest, "late", receipt=True)
            msg = await sub.get(timeout=5)
            assert msg is not None
            assert msg.text == "late"


async def test_received_messages_come_before_the_failure_and_none_after_close() -> None:
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(dest)
                for i in range(3):
                    await conn.send(dest, f"m{i}")
                await wait_pending(sub, 3)
                await broker.drop_all_connections()
                with anyio.move_on_after(5):
                    while conn.failure is None:
                        await anyio.sleep(0.01)
                texts = []
                for _ in range(3):
                    msg = await sub.get(timeout=0)
                    assert msg is not None
                    texts.append(msg.text)
                assert texts == ["m0", "m1", "m2"]
                with pytest.raises(ConnectionLost):
                    await sub.get(timeout=0)
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(dest)
            assert await sub.get() is None
            assert sub.pending == 0


async def test_a_failed_subscription_raises_until_closed_then_ends() -> None:
    """The same rule as the blocking client's (docs/api.md)."""
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(queue())
                await broker.drop_all_connections()
                with pytest.raises(ConnectionLost):
                    await sub.get(timeout=5)
                still_active = sub.active  # (read into a name: mypy would keep the narrowing)
                assert still_active
                with pytest.raises(ConnectionLost):
                    await sub.get_batch(10, timeout=0)
                await conn.close()
                assert not sub.active
                assert await sub.get(timeout=0) is None
                assert await sub.get_batch(10, timeout=0) == []

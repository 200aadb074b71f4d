"""``AsyncSubscription.get(timeout=...)``: while the connection's timer task runs, it
ends the wait at its deadline, as it ends a call's wait for a receipt, with no cancel
scope per ``get()``. What a ``get()`` waits on (the socket it reads through, the
subscription's event that several ``get()`` calls share) is woken at that deadline, and
behaves as with a cancel scope: on time, nothing lost, the other waits unaffected."""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

import stompy
from stompy.testing import serve

pytestmark = pytest.mark.anyio


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


async def test_a_get_with_a_timeout_is_ended_by_the_timer_task(anyio_backend: str) -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest, receipt=True)
            io = conn._io
            await anyio.wait_all_tasks_blocked()
            deadlines = io._deadlines
            assert deadlines == {}
            got: list[object] = []

            async def get(timeout: float) -> None:
                message = await sub.get(timeout=timeout)
                got.append(None if message is None else message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get, 30)
                await anyio.wait_all_tasks_blocked()
                # The get()'s deadline is the timer's, not a cancel scope's.
                assert len(deadlines) == 1
                (at,) = deadlines.values()
                assert 29 < at - io.clock() <= 30
                await conn.send(dest, "in time")
            assert got == [b"in time"]
            assert deadlines == {}  # forgotten once the wait ended
            assert sub not in io.getting

            started = time.monotonic()
            assert await sub.get(timeout=0.2) is None
            assert 0.2 <= time.monotonic() - started < 2
            assert deadlines == {}
            assert sub not in io.getting
            await conn.send(dest, "after", receipt=True)
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"after"
            assert conn.failure is None


async def test_gets_sharing_a_subscription_time_out_each_at_its_own_deadline(
    anyio_backend: str,
) -> None:
    # Three get() calls on one subscription: one reads through (asyncio) or waits on the
    # subscription's event, the others wait on that event. The short one's deadline ends
    # its wait alone: the other two wait on, without spinning, and get the messages.
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest, receipt=True)
            got: list[object] = []

            async def get(timeout: float | None) -> None:
                message = await sub.get(timeout=timeout)
                got.append(None if message is None else message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get, None)
                await anyio.wait_all_tasks_blocked()
                started = time.monotonic()
                tg.start_soon(get, 0.3)
                tg.start_soon(get, 20)
                await anyio.wait_all_tasks_blocked()
                with anyio.fail_after(3):
                    while not got:
                        await anyio.sleep(0.02)
                assert got == [None]
                assert 0.25 <= time.monotonic() - started < 3
                await anyio.wait_all_tasks_blocked()  # (would not return, were one spinning)
                assert len(got) == 1
                await conn.send(dest, "one")
                await conn.send(dest, "two")
            assert sorted(got[1:], key=repr) == [b"one", b"two"]
            assert conn._io._deadlines == {}
            assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_message_read_as_the_deadline_passes_is_returned(anyio_backend: str) -> None:
    # The loop's callback reads the MESSAGE for the waiting get(), then the loop is held
    # past the get()'s deadline before the get() runs: it returns the message, which
    # neither stays in the socket's hands nor is lost.
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest, receipt=True)
            await anyio.wait_all_tasks_blocked()
            turn = conn._io.turn
            assert turn is not None
            read = turn._readable

            def readable() -> None:
                read()
                if turn.inbound and turn.caller is not None:
                    time.sleep(0.4)  # the deadline passes, the get() not yet woken

            turn.disarm()
            turn._readable = readable  # type: ignore[method-assign]
            got: list[object] = []

            async def get() -> None:
                message = await sub.get(timeout=0.3)
                got.append(None if message is None else message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                assert turn.caller is not None
                await conn.send(dest, "at the deadline")
            assert got == [b"at the deadline"]
            assert not turn.inbound
            assert conn._io._deadlines == {}
            assert conn.failure is None


async def test_a_get_times_out_on_time_across_an_outage(anyio_backend: str) -> None:
    # The connection is lost while a get() waits: its deadline passes while no timer
    # task runs (the reconnect waits its delay), and the get() returns None on time all
    # the same; the next connection's messages come to the next get().
    dest = queue()
    policy = stompy.Reconnect(initial_delay=0.6, max_delay=0.6, send_timeout=10.0)
    with anyio.fail_after(15):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url, reconnect=policy) as conn,
        ):
            sub = await conn.subscribe(dest, receipt=True)
            for timeout in (0.3, 1.0):  # ends while reconnecting; after it
                started = time.monotonic()
                async with anyio.create_task_group() as tg:
                    got: list[object] = []

                    async def get(timeout: float = timeout, got: list[object] = got) -> None:
                        got.append(await sub.get(timeout=timeout))

                    tg.start_soon(get)
                    await anyio.wait_all_tasks_blocked()
                    await broker.drop_all_connections()
                assert got == [None]
                assert timeout <= time.monotonic() - started < timeout + 1.5
            await conn.send(dest, "after", receipt=True)
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"after"

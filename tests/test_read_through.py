"""The async client's read-through: on asyncio a call waiting for its answer (a receipt,
a reply, a ``get()``'s message) on a plain TCP connection is woken by the socket's bytes
itself and feeds them to the engine, while the reader task stays waiting, unwoken
(:class:`stompy._transports.rawsocket.ReadTurn`). On trio the reader task reads, as
before. The behaviour is the same on both: what the waiting call read is never lost,
not even when it is cancelled right after the read, the reader reads again once the
call returns, and a full inbox still stops the reading."""

from __future__ import annotations

import asyncio
import sys
import uuid

import anyio
import pytest

import stompy
from stompy._transports.blocking import bytes_waiting
from stompy._transports.rawsocket import RawSocketStream, ReadTurn
from stompy.testing import serve

pytestmark = pytest.mark.anyio


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


async def turn_of(conn: stompy.AsyncConnection, backend: str) -> ReadTurn | None:
    """The connection's turn, once its tasks run: on asyncio there is one, on trio none."""
    await anyio.wait_all_tasks_blocked()
    stream = conn._io.stream
    assert isinstance(stream, RawSocketStream)
    turn = conn._io.turn
    assert turn is stream.turn
    assert (turn is not None) == (backend == "asyncio")
    return turn


async def test_a_get_waiting_alone_reads_the_socket_and_hands_it_back(anyio_backend: str) -> None:
    mine, other = queue(), queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(mine, receipt=True)
            seen: list[bytes] = []
            await conn.subscribe(other, on_message=lambda m: seen.append(m.body), receipt=True)
            got: list[object] = []

            async def get() -> None:
                message = await sub.get()
                assert message is not None
                got.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                if turn is not None:
                    assert turn.caller is not None  # the get() waits on the socket
                await conn.send(mine, "for the get")
            assert got == [b"for the get"]
            if turn is not None:
                assert turn.caller is None  # handed back
            # Nobody waits now but the callback's task: the reader task reads again.
            await conn.send(other, "for the callback", receipt=True)
            with anyio.fail_after(5):
                while not seen:
                    await anyio.sleep(0.01)
            assert seen == [b"for the callback"]
            assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_get_cancelled_right_after_its_bytes_were_read_loses_nothing(
    anyio_backend: str,
) -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            assert turn is not None
            sub = await conn.subscribe(dest, receipt=True)
            getter: list[asyncio.Task[None]] = []
            read = turn._readable

            def readable() -> None:
                # The loop's callback reads the MESSAGE for the waiting get() and wakes
                # it; the get() is cancelled before it runs, the bytes in its hands.
                read()
                if turn.inbound and turn.caller is not None:
                    getter[0].cancel()

            turn.disarm()
            turn._readable = readable  # type: ignore[method-assign]
            outcome: list[object] = []

            async def get() -> None:
                task = asyncio.current_task()
                assert task is not None
                getter.append(task)
                try:
                    outcome.append(await sub.get())
                except asyncio.CancelledError:
                    if sys.version_info >= (3, 11):
                        task.uncancel()
                    outcome.append("cancelled")

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                assert turn.caller is not None
                await conn.send(dest, "read by the cancelled get()")
            assert outcome == ["cancelled"]
            assert not turn.inbound
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"read by the cancelled get()"
            await conn.send(dest, "next", receipt=True)  # and the connection goes on
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"next"


async def test_a_read_through_that_fills_an_inbox_stops_the_reading(anyio_backend: str) -> None:
    # A get() on one subscription reads through while another's inbox fills: the pause
    # is handed to the reader task, which reads no more until the inbox has room (the
    # bytes stay in the socket), then everything comes, in order.
    waiting_for, flooded = queue(), queue()
    count, body = 60, b"y" * 64 * 1024
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(waiting_for, receipt=True)
            slow = await conn.subscribe(flooded, max_pending=2, receipt=True)
            got: list[object] = []

            async def get() -> None:
                message = await sub.get()
                assert message is not None
                got.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                if turn is not None:
                    assert turn.caller is not None
                async with stompy.AsyncConnection(broker.url) as publisher:
                    for i in range(count):
                        await publisher.send(flooded, body + str(i).encode())
                    await publisher.send(waiting_for, "behind the flood", receipt=True)
                raw = conn._io.stream
                assert isinstance(raw, RawSocketStream)
                with anyio.fail_after(5):
                    while not (conn._engine.paused and bytes_waiting(raw.sock)):
                        await anyio.sleep(0.01)
                assert got == []  # its message is behind the unread bytes
                for i in range(count):
                    message = await slow.get(timeout=5)
                    assert message is not None
                    assert message.body == body + str(i).encode()
            assert got == [b"behind the flood"]
            assert conn.failure is None


async def test_two_tasks_waiting_for_receipts_and_a_get_all_get_their_answers(
    anyio_backend: str,
) -> None:
    # One of them reads through (on asyncio), the others wait on their events and are
    # woken by what it routes; as each returns the turn passes on, and nothing waits
    # for bytes nobody reads.
    dest = queue()
    rounds = 50
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(dest, receipt=True)
            done: list[str] = []
            taken: list[bytes] = []

            async def sender(name: str) -> None:
                for i in range(rounds):
                    await conn.send(dest, f"{name}-{i}", receipt=True)
                done.append(name)

            async def getter() -> None:
                for _ in range(2 * rounds):
                    message = await sub.get()
                    assert message is not None
                    taken.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(getter)
                tg.start_soon(sender, "a")
                tg.start_soon(sender, "b")
            assert sorted(done) == ["a", "b"]
            for name in ("a", "b"):
                mine = [body for body in taken if body.startswith(name.encode())]
                assert mine == [f"{name}-{i}".encode() for i in range(rounds)]
            if turn is not None:
                assert turn.caller is None
                assert not turn.inbound
            assert conn.failure is None

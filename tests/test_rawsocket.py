"""The async client on a plain TCP connection reads and writes its socket itself
(:mod:`stompy._transports.rawsocket`): frames whole and in order however much the
socket takes at once, a close or a cancellation while a task waits on the socket, and
no descriptor left behind. On asyncio and on trio."""

from __future__ import annotations

import os
import uuid

import anyio
import pytest

import stompy
from stompy._transports.rawsocket import RawSocketStream
from stompy.errors import ConnectionLost
from stompy.testing import serve

pytestmark = pytest.mark.anyio

#: Larger than a loopback socket takes in one non-blocking send.
BIG = 12 * 1024 * 1024


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def descriptors_back_to(count: int) -> int:
    """The open descriptors once the broker closed its side too (bounded wait)."""
    for _ in range(100):
        if open_descriptors() <= count:
            break
        await anyio.sleep(0.01)
    return open_descriptors()


async def test_a_plain_connection_reads_and_writes_its_own_socket() -> None:
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            assert isinstance(conn._io.stream, RawSocketStream)
            await conn.send(queue(), "x", receipt=True)


async def test_a_frame_larger_than_the_socket_takes_goes_out_whole_and_first() -> None:
    # The write-through writes what the socket takes without waiting; the writer task
    # writes the rest, before what was queued after it.
    dest = queue()
    big = bytes(range(256)) * (BIG // 256)
    with anyio.fail_after(30):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest, receipt=True) as sub:
                await conn.send(dest, big)  # at rest: written from here, as far as it goes
                await conn.send(dest, "after")
                await conn.send(dest, "last", receipt=True)
                bodies = []
                for _ in range(3):
                    msg = await sub.get(timeout=10)
                    assert msg is not None
                    bodies.append(msg.body)
                assert bodies == [big, b"after", b"last"]


async def test_a_send_cancelled_while_its_frame_goes_out_leaves_no_half_frame() -> None:
    dest = queue()
    big = b"\x01" * BIG
    with anyio.fail_after(30):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest, receipt=True) as sub:
                with anyio.CancelScope() as scope:
                    scope.cancel()  # cancelled before its first wait
                    await conn.send(dest, big, receipt=True)
                await conn.send(dest, "next", receipt=True)
                first = await sub.get(timeout=10)
                second = await sub.get(timeout=10)
                assert first is not None
                assert second is not None
                assert (len(first.body), second.body) == (BIG, b"next")
                assert conn.failure is None


async def test_a_close_while_a_task_waits_on_the_socket_wakes_it() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker:
            before = open_descriptors()
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(dest)
                got: list[object] = []

                async def get() -> None:
                    got.append(await sub.get())

                async with anyio.create_task_group() as tg:
                    tg.start_soon(get)
                    await anyio.sleep(0.05)  # the reader and the get() wait
                    assert await conn.close()
                assert got == [None]
            assert await descriptors_back_to(before) == before  # the socket and its duplicate


async def test_a_broker_gone_while_the_reader_waits_ends_the_connection() -> None:
    with anyio.fail_after(10):
        async with serve() as broker:
            before = open_descriptors()
            conn = stompy.AsyncConnection(broker.url)
            with pytest.raises(ConnectionLost):
                async with conn:
                    await conn.send(queue(), "x", receipt=True)
                    await broker.drop_all_connections()
                    with anyio.fail_after(5):
                        while conn.failure is None:
                            await anyio.sleep(0.01)
                    await conn.send(queue(), "y", receipt=True)
            assert await descriptors_back_to(before) == before

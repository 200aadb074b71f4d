"""The broker's plain TCP connections on asyncio, served by the event loop's callbacks
(``_LoopConnection``) rather than by three tasks each."""

from __future__ import annotations

import asyncio
import socket
import tracemalloc
from typing import Any

import anyio
import pytest

from stompy.testing import serve

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

_CONNECT = b"CONNECT\naccept-version:1.2\nhost:h\nheart-beat:0,0\n\n\x00"


async def _exchange(sock: socket.socket, data: bytes, until: bytes) -> bytes:
    """Write ``data``, then read until ``until`` has arrived (bounded in time)."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, data)
    received = b""
    with anyio.fail_after(5):
        while until not in received:
            chunk = await loop.sock_recv(sock, 65536)
            assert chunk, f"the broker closed the connection after {received!r}"
            received += chunk
    return received


async def test_a_connection_is_one_task_waiting_for_its_end() -> None:
    count = 10
    async with serve() as broker:
        socks: list[socket.socket] = []
        try:
            for index in range(count + 1):
                sock = socket.create_connection((broker.host, broker.port))
                socks.append(sock)
                sock.setblocking(False)
                await _exchange(sock, _CONNECT, b"\x00")
                if index == 0:  # the broker's own tasks run by now
                    before = len(asyncio.all_tasks())
            assert len(broker.connections) == count + 1
            # No reader, writer and timer task per connection: the loop calls it.
            assert len(asyncio.all_tasks()) - before == count
            # Each still answers, and sees the others' messages.
            first, second = socks[0], socks[1]
            await _exchange(
                first, b"SUBSCRIBE\nid:1\ndestination:/queue/q\nreceipt:s\n\n\x00", b"s\n"
            )
            answer = await _exchange(
                second, b"SEND\ndestination:/queue/q\nreceipt:r\n\nhi\x00", b"receipt-id:r"
            )
            assert answer.startswith(b"RECEIPT\n")
            message = await _exchange(first, b"", b"\x00")
            assert message.startswith(b"MESSAGE\n")
            assert message.endswith(b"\n\nhi\x00")
        finally:
            for sock in socks:
                sock.close()
        await broker.wait_until(lambda: not broker.connections)


async def test_a_read_allocates_what_came_not_a_read_of_256_kib() -> None:
    """The loop reads into a buffer the loop connections share: a 60-byte SEND costs
    the broker a copy of 60 bytes, not asyncio's read of 256 KiB into a new bytes
    object each time (which glibc may map and unmap: three system calls a frame)."""
    async with serve() as broker:
        sock = socket.create_connection((broker.host, broker.port))
        try:
            sock.setblocking(False)
            await _exchange(sock, _CONNECT, b"\x00")
            loop = asyncio.get_running_loop()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for index in range(20):
                    receipt = b"receipt-id:r%d\n" % index
                    await loop.sock_sendall(
                        sock, b"SEND\ndestination:/topic/t\nreceipt:r%d\n\nhi\x00" % index
                    )
                    received = b""
                    with anyio.fail_after(5):
                        while receipt not in received:
                            chunk = await loop.sock_recv(sock, 1024)  # small reads here too
                            assert chunk, f"the broker closed the connection after {received!r}"
                            received += chunk
                peak = tracemalloc.get_traced_memory()[1] - base
            finally:
                tracemalloc.stop()
        finally:
            sock.close()
    assert peak < 64 * 1024, f"{peak} bytes at the peak of 20 receipt round trips"


async def test_a_connection_with_nothing_to_time_leaves_no_timer_in_the_loop() -> None:
    """The CONNECT's deadline is timed until CONNECT comes; after it, with heart-beats
    off and no frame half read, the connection's timer is cancelled rather than left
    in the loop's heap (where each turn of the loop reads the clock twice for it)."""
    loop = asyncio.get_running_loop()
    timers: list[asyncio.TimerHandle] = []
    call_at = loop.call_at

    def recording_call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        handle = call_at(when, callback, *args, **kwargs)
        if getattr(callback, "__name__", "") == "_on_timer":
            timers.append(handle)
        return handle

    async with serve(heartbeats=(0, 0)) as broker:
        loop.call_at = recording_call_at  # type: ignore[method-assign,assignment]
        sock = socket.create_connection((broker.host, broker.port))
        try:
            sock.setblocking(False)
            await broker.wait_until(lambda: bool(timers))
            assert timers, "no timer for the CONNECT's deadline"
            assert not any(timer.cancelled() for timer in timers)
            await _exchange(sock, _CONNECT, b"\x00")
            assert all(timer.cancelled() for timer in timers)
            # A frame half read is timed again (frame_timeout), and only while it is.
            await _exchange(sock, b"SEND\ndestination:/topic/t\n", b"")
            await broker.wait_until(lambda: len(timers) == 2)
            assert not timers[1].cancelled()
            await _exchange(sock, b"receipt:r\n\nhi\x00", b"receipt-id:r")
            assert all(timer.cancelled() for timer in timers)
        finally:
            del loop.call_at
            sock.close()

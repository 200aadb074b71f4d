"""How an ``AsyncConnection`` knows its event loop on asyncio without asking for the
running loop at every call (which costs a ``getpid()`` system call on CPython 3.11 and
later): asyncio's own loop says which thread runs it; another loop is asked. And its
clock: asyncio's own ``loop.time()`` read without its Python call, a loop's own clock
(a subclass's, one replaced on the instance) still read."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

import stompy
from stompy._transports.asynchronous import _AskedLoop
from stompy.errors import LocalProtocolError
from stompy.testing import run_broker

TIMEOUT = 10.0


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def test_a_loop_that_does_not_say_its_thread_is_asked() -> None:
    # What stands in for a loop other than asyncio's own (uvloop's): the calling
    # thread while that loop runs there, nothing otherwise.
    other = asyncio.new_event_loop()
    try:

        async def look() -> tuple[int | None, int | None]:
            here = _AskedLoop(asyncio.get_running_loop())
            return here._thread_id, _AskedLoop(other)._thread_id

        assert asyncio.run(look()) == (threading.get_ident(), None)
        stopped = _AskedLoop(other)
        assert stopped._thread_id is None
    finally:
        other.close()


def test_a_connection_on_an_asked_loop_works_here_and_refuses_another_loop() -> None:
    # The connection's loop as a loop that does not say its thread: calls from it run,
    # a call from another thread's loop raises and sends nothing.
    with run_broker() as broker:

        async def main() -> None:
            async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
                io = conn._io
                assert io.host is asyncio.get_running_loop()  # asyncio's own: itself
                io.host = _AskedLoop(io.loop)
                dest = queue()
                sub = await conn.subscribe(dest, receipt=True)
                await conn.send(dest, "here", receipt=True)
                message = await sub.get(timeout=TIMEOUT)
                assert message is not None
                assert message.body == b"here"
                await conn.send(dest, "no receipt")
                message = await sub.get(timeout=TIMEOUT)
                assert message is not None
                assert message.body == b"no receipt"

                failures: list[BaseException] = []

                def elsewhere() -> None:
                    async def send() -> None:
                        await conn.send(dest, "from elsewhere")

                    try:
                        asyncio.run(send())
                    except BaseException as exc:  # what the other thread saw
                        failures.append(exc)

                thread = threading.Thread(target=elsewhere)
                thread.start()
                thread.join(TIMEOUT)
                assert len(failures) == 1
                assert isinstance(failures[0], LocalProtocolError)
                assert "one event loop and thread" in str(failures[0])
                assert await sub.get(timeout=0.2) is None  # nothing was sent

        asyncio.run(main())


@pytest.mark.parametrize("how", ["instance", "subclass"])
def test_a_loop_with_a_clock_of_its_own_times_waits_by_it(how: str) -> None:
    # A loop whose clock is 1000 s behind time.monotonic(): were the connection's
    # deadlines taken from time.monotonic() and its timer armed on the loop's clock, a
    # get(timeout=0.2) would wait some 1000 s.
    def behind(self: object = None) -> float:
        return time.monotonic() - 1000.0

    class Behind(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return behind()

    loop = asyncio.new_event_loop() if how == "instance" else Behind()
    if how == "instance":
        loop.time = behind  # type: ignore[method-assign]
    with run_broker() as broker:

        async def main() -> None:
            async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
                assert conn._io.clock() < time.monotonic() - 999
                sub = await conn.subscribe(queue(), receipt=True)
                started = time.monotonic()
                assert await sub.get(timeout=0.2) is None
                assert 0.15 <= time.monotonic() - started < 5

        try:
            loop.run_until_complete(asyncio.wait_for(main(), TIMEOUT * 2))
        finally:
            loop.close()

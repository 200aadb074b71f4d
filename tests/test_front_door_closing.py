"""The front door at the end of a connection: a message sent without a receipt that the
broker refuses is told by an ERROR after the send returned, mostly while the connection
closes. ``close()`` (and the end of the block, unless the block raised) raises it, in
the blocking, asyncio and trio clients alike, once, and never when a call raised it
already."""

from __future__ import annotations

import threading
import time
import uuid

import anyio
import pytest

import stompy
from stompy.errors import ServerError
from stompy.testing import run_broker
from tests.test_lenient import refuses_late, scripted

#: Seconds any wait of these tests may take.
TIMEOUT = 10.0


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def is_full(error: BaseException, dest: str) -> bool:
    return isinstance(error, ServerError) and f"destination '{dest}' is full" in str(error)


class Boom(Exception):
    """The block's own error."""


# -- the ERROR comes while the connection closes ---------------------------------------


def test_close_raises_an_error_that_came_while_closing_blocking() -> None:
    """The broker answers the DISCONNECT with its refusal of the SEND before it: before,
    close() returned False and the refusal was only a WARNING."""
    with scripted(refuses_late) as url:
        conn = stompy.Connection(url, receipt_timeout=TIMEOUT)
        conn.connect()
        conn.send("/queue/locked", "x")
        with pytest.raises(ServerError, match="write access to /queue/locked refused") as info:
            conn.close()
        assert info.value.message == "See below"
        assert conn.close() is False  # said once; the connection is closed
        assert not conn.connected


@pytest.mark.anyio
async def test_close_raises_an_error_that_came_while_closing_async() -> None:
    with scripted(refuses_late) as url, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(url, receipt_timeout=TIMEOUT) as conn:
            await conn.send("/queue/locked", "x")
            with pytest.raises(ServerError, match="write access to /queue/locked refused"):
                await conn.close()
            assert await conn.close() is False
            assert not conn.connected
        # ... and the end of the block does not raise it again.


# -- the ERROR came before the close, with nothing left to raise it ---------------------


def test_close_raises_an_error_no_call_raised_blocking() -> None:
    """The refusal ended the connection before close(), and no call came after it to
    raise it: close() does (it returned False, silent, before)."""
    dest = queue()
    with run_broker(max_queue=1) as broker:
        conn = stompy.Connection(broker.url, receipt_timeout=TIMEOUT)
        conn.connect()
        conn.send(dest, "kept")
        conn.send(dest, "refused")
        deadline = time.monotonic() + TIMEOUT
        while conn.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert conn.failure is not None
        with pytest.raises(ServerError) as info:
            conn.close()
        assert is_full(info.value, dest)
        assert info.value is not conn.failure  # a fresh copy, chained to it
        assert info.value.__cause__ is conn.failure
        assert conn.close() is False
        assert broker.queue_depth(dest) == 1


@pytest.mark.anyio
async def test_close_raises_an_error_no_call_raised_async() -> None:
    dest = queue()
    with run_broker(max_queue=1) as broker, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
            await conn.send(dest, "kept")
            await conn.send(dest, "refused")
            while conn.failure is None:
                await anyio.sleep(0.01)
            with pytest.raises(ServerError) as info:
                await conn.close()
            assert is_full(info.value, dest)
            assert await conn.close() is False


# -- the end of the block ----------------------------------------------------------------


def test_the_end_of_the_block_raises_a_refusal_blocking() -> None:
    """``with``: the last messages sent without a receipt, one refused; whether its
    ERROR comes before or during the close, the block's end raises it."""
    dest = queue()
    with run_broker(max_queue=1) as broker:
        for _ in range(3):
            with pytest.raises(ServerError) as info, stompy.Connection(broker.url) as conn:
                conn.send(dest, "one")
                conn.send(dest, "more")
            assert is_full(info.value, dest)
            assert not conn.connected
        assert broker.queue_depth(dest) == 1


@pytest.mark.anyio
async def test_the_end_of_the_block_raises_a_refusal_async() -> None:
    dest = queue()
    with run_broker(max_queue=1) as broker, anyio.fail_after(TIMEOUT):
        for _ in range(3):
            with pytest.raises(ServerError) as info:
                async with stompy.AsyncConnection(broker.url) as conn:
                    await conn.send(dest, "one")
                    await conn.send(dest, "more")
            assert is_full(info.value, dest)
            assert not conn.connected
        assert broker.queue_depth(dest) == 1


def test_the_blocks_own_error_is_not_masked_blocking() -> None:
    dest = queue()
    with run_broker(max_queue=1) as broker:
        with pytest.raises(Boom), stompy.Connection(broker.url) as conn:
            conn.send(dest, "one")
            conn.send(dest, "more")
            raise Boom
        assert not conn.connected


@pytest.mark.anyio
async def test_the_blocks_own_error_is_not_masked_async() -> None:
    dest = queue()
    with run_broker(max_queue=1) as broker, anyio.fail_after(TIMEOUT):
        with pytest.raises(Boom):
            async with stompy.AsyncConnection(broker.url) as conn:
                await conn.send(dest, "one")
                await conn.send(dest, "more")
                raise Boom
        assert not conn.connected


# -- a refusal a call raised is not raised again -----------------------------------------


def test_a_refusal_a_call_raised_is_not_raised_by_close_blocking() -> None:
    """The program was told (the send with a receipt raised it, and it went on): the
    block's end and close() do not raise it a second time."""
    dest = queue()
    with run_broker(max_queue=1) as broker:
        with stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
            conn.send(dest, "one", receipt=True)
            with pytest.raises(ServerError):
                conn.send(dest, "more", receipt=True)
        assert conn.close() is False


@pytest.mark.anyio
async def test_a_refusal_a_call_raised_is_not_raised_by_close_async() -> None:
    dest = queue()
    with run_broker(max_queue=1) as broker, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
            await conn.send(dest, "one", receipt=True)
            with pytest.raises(ServerError):
                await conn.send(dest, "more", receipt=True)
        assert await conn.close() is False


def test_a_clean_close_raises_nothing_and_closing_twice_from_threads_is_safe() -> None:
    """No ERROR: close() raises nothing. Two threads closing at once both say the
    close was clean: before, the second one's goodbye ended the first one's wait for
    the DISCONNECT's receipt, and both returned False."""
    with run_broker() as broker:
        conn = stompy.Connection(broker.url, receipt_timeout=TIMEOUT)
        conn.connect()
        conn.send(queue(), "x")
        said: list[bool] = []
        other = threading.Thread(target=lambda: said.append(conn.close()))
        other.start()
        said.append(conn.close())
        other.join(TIMEOUT)
        assert said == [True, True]  # the second waited for the first, as in AsyncConnection


# -- a close() in a hook -------------------------------------------------------------------


def test_a_close_in_the_hook_handed_the_error_does_not_raise_it_blocking() -> None:
    """``on_error`` was handed the refusal: a close() there returns (a ServerError out
    of the hook was printed as an error of the hook); the program's own close() after
    it still raises it, no call having raised it."""
    dest = queue()
    in_hook: list[object] = []
    closed = threading.Event()

    def on_error(error: ServerError) -> None:
        try:
            in_hook.append(conn.close())
        except BaseException as exc:
            in_hook.append(exc)
        closed.set()

    with run_broker(max_queue=1) as broker:
        conn = stompy.Connection(broker.url, receipt_timeout=TIMEOUT, on_error=on_error)
        conn.connect()
        conn.send(dest, "kept")
        conn.send(dest, "refused")
        assert closed.wait(TIMEOUT)
        assert in_hook == [False]
        with pytest.raises(ServerError) as info:
            conn.close()
        assert is_full(info.value, dest)


@pytest.mark.anyio
async def test_a_close_in_the_hook_handed_the_error_does_not_raise_it_async() -> None:
    dest = queue()
    in_hook: list[object] = []
    closed = anyio.Event()

    async def on_error(error: ServerError) -> None:
        try:
            in_hook.append(await conn.close())
        except BaseException as exc:
            in_hook.append(exc)
        closed.set()

    with run_broker(max_queue=1) as broker, anyio.fail_after(TIMEOUT):
        with pytest.raises(ServerError) as info:
            async with stompy.AsyncConnection(
                broker.url, receipt_timeout=TIMEOUT, on_error=on_error
            ) as conn:
                await conn.send(dest, "kept")
                await conn.send(dest, "refused")
                await closed.wait()
                assert in_hook == [False]
        assert is_full(info.value, dest)

"""How a transport drives a call's steps (stompy._engine.calls): a call interrupted while
it waits (a signal in the blocking client, a cancellation in the async one) forgets the
receipt or the request it waited for, and one that ended leaves nothing behind.

The drivers close a call's steps only when they did not end (a wait was pending):
closing steps that ended costs a compiled generator a ``GeneratorExit`` thrown in at
every call. What closing does for an interrupted call (the engine forgets what it
waited for, so a late answer wakes nobody and nothing grows) is held here, through a
real connection, for the blocking, asyncio and trio clients.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType

import anyio
import pytest

import stompy
from stompy.testing import run_broker, serve

#: Bounds every wait of these tests.
TIMEOUT = 10.0


def queue() -> str:
    return f"/queue/driver-{uuid.uuid4().hex[:8]}"


class Interrupted(Exception):
    """Raised in the main thread by the signal :func:`interrupting` sends."""


@contextmanager
def interrupting(waiting: Callable[[], bool]) -> Iterator[None]:
    """Interrupt the main thread (``SIGUSR1``, whose handler raises :class:`Interrupted`
    once) as soon as ``waiting()`` (polled) is true; the signal is sent again every
    50 ms until the handler ran (one landing just before a system call waits is seen
    after it)."""
    assert threading.current_thread() is threading.main_thread()
    raised = threading.Event()
    done = threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    def handler(signum: int, frame: FrameType | None) -> None:
        if not raised.is_set():
            raised.set()
            raise Interrupted

    def signaller() -> None:
        deadline = time.monotonic() + TIMEOUT
        while not waiting():
            if done.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.005)
        while not raised.is_set() and not done.is_set() and time.monotonic() < deadline:
            signal.pthread_kill(main, signal.SIGUSR1)
            raised.wait(0.05)

    previous = signal.signal(signal.SIGUSR1, handler)
    thread = threading.Thread(target=signaller, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(TIMEOUT)
        signal.signal(signal.SIGUSR1, previous)


def test_a_blocking_send_interrupted_while_it_waits_forgets_its_receipt() -> None:
    dest = queue()
    with (
        run_broker() as broker,
        stompy.Connection(broker.url, receipt_timeout=TIMEOUT, heartbeats=(0, 0)) as conn,
    ):
        engine = conn._engine
        conn.send(dest, b"before", receipt=True)
        assert len(engine.receipts) == 0  # a call that ended leaves nothing
        broker.pause()  # its receipt does not come
        started = time.monotonic()
        with interrupting(lambda: len(engine.receipts) == 1):
            with pytest.raises(Interrupted) as caught:
                conn.send(dest, b"interrupted", receipt=True)
        assert time.monotonic() - started < TIMEOUT / 2  # the signal ended it, not the timeout
        # Forgotten, though the error (its traceback: the call's frames) is still held.
        assert caught.tb is not None
        assert len(engine.receipts) == 0  # its late RECEIPT wakes nobody
        broker.resume()
        conn.send(dest, b"after", receipt=True)  # the late RECEIPT came first, unasked
        assert len(engine.receipts) == 0
        sub = conn.subscribe(dest)
        bodies = [m.body for m in (sub.get(timeout=TIMEOUT) for _ in range(3)) if m is not None]
        assert bodies == [b"before", b"interrupted", b"after"]


def test_a_blocking_request_interrupted_while_it_waits_forgets_it() -> None:
    dest = queue()
    with (
        run_broker() as broker,
        stompy.Connection(broker.url, heartbeats=(0, 0)) as conn,
    ):
        engine = conn._engine
        with interrupting(lambda: len(engine.requests) == 1):
            with pytest.raises(Interrupted) as caught:
                conn.request(dest, b"nobody answers", timeout=TIMEOUT)
        assert caught.tb is not None  # the call's frames still held
        assert len(engine.requests) == 0
        conn.send(dest, b"after", receipt=True)  # the connection goes on


async def keeping(kept: list[BaseException], call: Callable[[], Awaitable[object]]) -> None:
    """Await ``call()``, keeping its cancellation (and so the frames of its traceback):
    what a cancelled call forgets must not wait for its steps to be collected."""
    try:
        await call()
    except anyio.get_cancelled_exc_class() as exc:
        kept.append(exc)
        raise


@pytest.mark.anyio
async def test_an_async_send_cancelled_while_it_waits_forgets_its_receipt(
    anyio_backend: str,
) -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT, heartbeats=(0, 0)) as conn,
        ):
            engine = conn._engine
            await conn.send(dest, b"before", receipt=True)
            assert len(engine.receipts) == 0  # a call that ended leaves nothing
            broker.pause()  # its receipt does not come
            kept: list[BaseException] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(keeping, kept, partial(conn.send, dest, b"cancelled", receipt=True))
                while len(engine.receipts) == 0:
                    await anyio.sleep(0.005)
                await anyio.sleep(0.02)  # waiting on the socket, or for the reader task
                tg.cancel_scope.cancel()
            assert kept  # the cancellation, its traceback (the call's frames) held
            assert len(engine.receipts) == 0  # forgotten: its late RECEIPT wakes nobody
            broker.resume()
            await conn.send(dest, b"after", receipt=True)  # the late RECEIPT came first
            assert len(engine.receipts) == 0
            sub = await conn.subscribe(dest)
            bodies = [(await sub.get(timeout=TIMEOUT)) for _ in range(3)]
            assert [m.body for m in bodies if m is not None] == [b"before", b"cancelled", b"after"]


@pytest.mark.anyio
async def test_an_async_request_cancelled_while_it_waits_forgets_it(anyio_backend: str) -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker, stompy.AsyncConnection(broker.url, heartbeats=(0, 0)) as conn:
            engine = conn._engine
            kept: list[BaseException] = []
            with anyio.move_on_after(0.2) as scope:
                await keeping(kept, partial(conn.request, dest, b"nobody answers", timeout=TIMEOUT))
            assert scope.cancelled_caught
            assert kept  # the cancellation, its traceback (the call's frames) held
            assert len(engine.requests) == 0
            await conn.send(dest, b"after", receipt=True)  # the connection goes on
            assert len(engine.receipts) == 0

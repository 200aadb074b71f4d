"""What may be shared between threads and tasks (issue 39, points 7 and 8; the rules are
in docs/api.md, "Threads and tasks"):

* a ``Connection``: any number of threads send on it and read one ``Subscription`` of it,
  each message handed to exactly one reader;
* an ``AsyncConnection``: any number of tasks of the event loop that opened it, likewise;
* an ``AsyncConnection`` from another thread's event loop, or another event loop of its
  thread: refused at once with a ``LocalProtocolError`` naming the rule, where its calls
  waited out their timeouts (or forever) before, and nothing is sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import stompy
from stompy.errors import LocalProtocolError
from stompy.testing import run_broker

#: Seconds any one step may take.
TIMEOUT = 10.0
#: Well within this, a refused call returns (the calls it stands for waited 5 s or more).
AT_ONCE = 3.0
#: Senders and readers sharing one connection, and how many messages each sender sends.
THREADS = 4
EACH = 500


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def bodies() -> list[str]:
    return [f"{sender}-{n}" for sender in range(THREADS) for n in range(EACH)]


def test_threads_share_a_connection_and_one_subscription() -> None:
    dest = queue()
    taken: list[list[str]] = [[] for _ in range(THREADS)]
    failures: list[BaseException] = []
    total = THREADS * EACH
    done = threading.Event()

    with (
        run_broker() as broker,
        stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn,
        conn.subscribe(dest, max_pending=64) as sub,
    ):

        def send(sender: int) -> None:
            try:
                for n in range(EACH):
                    conn.send(dest, f"{sender}-{n}", receipt=n == EACH - 1)
            except BaseException as exc:
                failures.append(exc)

        def read(reader: int) -> None:
            deadline = time.monotonic() + TIMEOUT * 3
            try:
                while not done.is_set() and time.monotonic() < deadline:
                    message = sub.get(timeout=0.2)
                    if message is not None:
                        taken[reader].append(message.text)
                        if sum(map(len, taken)) >= total:
                            done.set()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=send, args=(n,)) for n in range(THREADS)]
        threads += [threading.Thread(target=read, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT * 4)
            assert not thread.is_alive()
        assert sub.get(timeout=0.2) is None  # nothing left over
    assert not failures, failures
    counts = Counter(body for each in taken for body in each)
    assert sorted(counts) == sorted(bodies())
    assert set(counts.values()) == {1}  # each message once, to one reader
    assert sum(1 for each in taken if each) > 1  # the readers shared the work


@pytest.mark.anyio
async def test_tasks_share_a_connection_and_one_subscription() -> None:
    dest = queue()
    taken: list[list[str]] = [[] for _ in range(THREADS)]
    total = THREADS * EACH
    with run_broker() as broker:
        with anyio.fail_after(TIMEOUT * 3):
            async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
                sub = await conn.subscribe(dest, max_pending=64)

                async def send(sender: int) -> None:
                    for n in range(EACH):
                        await conn.send(dest, f"{sender}-{n}", receipt=n == EACH - 1)

                async def read(reader: int) -> None:
                    while sum(map(len, taken)) < total:
                        message = await sub.get(timeout=0.2)
                        if message is not None:
                            taken[reader].append(message.text)

                async with anyio.create_task_group() as tg:
                    for n in range(THREADS):
                        tg.start_soon(send, n)
                        tg.start_soon(read, n)
                assert await sub.get(timeout=0.2) is None
    counts = Counter(body for each in taken for body in each)
    assert sorted(counts) == sorted(bodies())
    assert set(counts.values()) == {1}


def refused(outcome: object) -> bool:
    """Whether a call was refused with the error that names the rule."""
    return isinstance(outcome, LocalProtocolError) and "one event loop and thread" in str(outcome)


@pytest.mark.anyio
async def test_an_async_connection_used_from_another_threads_loop_says_so(
    anyio_backend: str,
) -> None:
    dest = queue()
    outcomes: dict[str, tuple[object, float]] = {}
    with run_broker() as broker:
        with anyio.fail_after(TIMEOUT * 4):
            async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
                sub = await conn.subscribe(dest)
                tx = await conn.transaction()
                # At rest: the writer wrote what was queued (a send without a receipt is
                # looked at when it would start the writer: see docs/api.md).
                await conn.send(queue(), "settled", receipt=True)
                calls: dict[str, Callable[[], Awaitable[object]]] = {
                    "send": lambda: conn.send(dest, "from elsewhere"),
                    "send(receipt=True)": lambda: conn.send(dest, "elsewhere", receipt=True),
                    "get(timeout=5)": lambda: sub.get(timeout=5),
                    "get()": sub.get,
                    "request": lambda: conn.request(dest, "?", timeout=5),
                    "subscribe": lambda: conn.subscribe(queue()),
                    "commit": tx.commit,
                    "abort": tx.abort,
                    "unsubscribe": sub.unsubscribe,
                    "close": conn.close,
                }

                async def elsewhere() -> None:
                    for name, call in calls.items():
                        began = time.monotonic()
                        outcome: object = None
                        # Bounded: before, get() waited forever in this loop.
                        with anyio.move_on_after(AT_ONCE * 2):
                            try:
                                outcome = await call()
                            except Exception as exc:
                                outcome = exc
                        outcomes[name] = (outcome, time.monotonic() - began)

                def other_thread() -> None:
                    anyio.run(elsewhere, backend=anyio_backend)

                await anyio.to_thread.run_sync(other_thread)
                for name, (outcome, took) in outcomes.items():
                    assert refused(outcome), (name, outcome)
                    assert took < AT_ONCE, (name, took)
                # Nothing was sent, and the connection goes on in its own loop.
                assert conn.connected
                await conn.send(dest, "here", receipt=True)
                message = await sub.get(timeout=TIMEOUT)
                assert message is not None
                assert message.text == "here"
                assert await sub.get(timeout=0.3) is None
                await tx.commit()


def _calls_elsewhere(
    conn: stompy.AsyncConnection, sub: stompy.AsyncSubscription, tx: stompy.AsyncTransaction
) -> dict[str, Callable[[], Awaitable[object]]]:
    """The calls of an ``AsyncConnection`` that send or wait, made from another loop."""
    dest = sub.destination
    return {
        "send": lambda: conn.send(dest, "from elsewhere"),
        "send(receipt=True)": lambda: conn.send(dest, "elsewhere", receipt=True),
        "send_many": lambda: conn.send_many([stompy.Outgoing(dest, "elsewhere")]),
        "get(timeout=5)": lambda: sub.get(timeout=5),
        "get()": sub.get,
        "request": lambda: conn.request(dest, "?", timeout=5),
        "subscribe": lambda: conn.subscribe(queue()),
        "commit": tx.commit,
        "abort": tx.abort,
        "unsubscribe": sub.unsubscribe,
        "close": conn.close,
    }


async def _each_refused(calls: dict[str, Callable[[], Awaitable[object]]]) -> None:
    """Each call is refused at once, in a loop anyio may not know (its own timeouts would
    be the connection's library's: sniffio says so in the thread). Checked call by call:
    one that went ahead (a close()) may leave the connection unable to close."""
    for name, call in calls.items():
        began = time.monotonic()
        try:
            outcome: object = await call()
        except Exception as exc:
            outcome = exc
        assert refused(outcome), (name, outcome)
        assert "another event loop of this thread" in str(outcome), name
        assert time.monotonic() - began < AT_ONCE, name


async def _still_works(
    broker: Any, conn: stompy.AsyncConnection, sub: stompy.AsyncSubscription, tx: Any
) -> None:
    """Nothing was sent from the other loop; the connection goes on in its own."""
    assert conn.connected
    await conn.send(sub.destination, "here", receipt=True)
    message = await sub.get(timeout=TIMEOUT)
    assert message is not None
    assert message.text == "here"
    assert await sub.get(timeout=0.3) is None
    await tx.commit()


@pytest.mark.anyio
async def test_an_async_connection_used_from_another_loop_of_its_thread_says_so(
    anyio_backend: str,
) -> None:
    # A trio.run() inside an asyncio task, an asyncio.run() inside a trio task: the check
    # was by thread only. Before, a send went ahead from the other loop, and the calls
    # that wait failed from deep inside ("trio.run received unrecognized yield
    # message", "Task got bad yield") or left the connection unable to close.
    import asyncio

    import trio

    with run_broker() as broker, anyio.fail_after(TIMEOUT * 4):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
            sub = await conn.subscribe(queue())
            tx = await conn.transaction()
            await conn.send(queue(), "settled", receipt=True)
            calls = _calls_elsewhere(conn, sub, tx)

            async def in_asyncio() -> None:
                await asyncio.wait_for(_each_refused(calls), TIMEOUT * 2)

            async def in_trio() -> None:
                with trio.fail_after(TIMEOUT * 2):
                    await _each_refused(calls)

            # Each in the other library's loop: asyncio cannot run inside itself.
            if anyio_backend == "trio":
                asyncio.run(in_asyncio())
            else:
                trio.run(in_trio)
            await _still_works(broker, conn, sub, tx)


def test_an_async_connection_used_from_a_second_asyncio_loop_says_so() -> None:
    # The connection's loop stopped (run_until_complete returned), another one run in
    # the same thread (a test's loop using a connection of a fixture's): a send with a
    # receipt waited out its timeout, a get() forever.
    import asyncio

    with run_broker() as broker:
        first = asyncio.new_event_loop()
        opened: asyncio.Future[tuple[Any, ...]] = first.create_future()
        done = asyncio.Event()

        async def hold() -> None:
            async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
                sub = await conn.subscribe(queue())
                tx = await conn.transaction()
                await conn.send(queue(), "settled", receipt=True)
                opened.set_result((conn, sub, tx))
                await done.wait()
                await _still_works(broker, conn, sub, tx)

        try:
            holder = first.create_task(hold())
            conn, sub, tx = first.run_until_complete(asyncio.wait_for(opened, TIMEOUT))
            calls = _calls_elsewhere(conn, sub, tx)

            async def elsewhere() -> None:
                await asyncio.wait_for(_each_refused(calls), TIMEOUT * 2)

            asyncio.run(elsewhere())
            done.set()
            first.run_until_complete(asyncio.wait_for(holder, TIMEOUT * 2))
        finally:
            first.close()

"""The async flavours: ``stompy.AsyncConnection`` under asyncio and under trio, with tasks.

Every awaited client call also runs inside ``move_on_after(bound + HANG_GRACE)``, so a
call that hangs is reported (and cancelled) instead of hanging the soak.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import anyio
import trio

import stompy

from ._core import BATCH, ID_HEADER, PREFETCH, Faulter, Pacer, Settings, Tally

#: Seconds past its bound after which a call is cancelled and reported as a hang.
HANG_GRACE = 10.0
#: Seconds a producer waits before sending an unconfirmed message again.
RETRY_PAUSE = 0.05


def run(
    flavour: str,
    url: str,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> tuple[int, int]:
    """One run in a fresh event loop of ``flavour`` (``"asyncio"`` or ``"trio"``).

    Returns the number of tasks in the loop before the connections were made and
    after they were closed.
    """
    return anyio.run(
        _main, flavour, url, destination, headers, settings, tally, faulter, backend=flavour
    )


def count_tasks(flavour: str) -> int:
    """The event loop's tasks: asyncio lists them; trio's form a tree from its root."""
    if flavour == "trio":
        return _trio_tasks(trio.lowlevel.current_root_task())
    return len(asyncio.all_tasks())


def _trio_tasks(task: trio.lowlevel.Task | None) -> int:
    if task is None:  # pragma: no cover - only outside trio.run
        return 0
    return 1 + sum(_trio_tasks(child) for n in task.child_nurseries for child in n.child_tasks)


async def _main(
    flavour: str,
    url: str,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> tuple[int, int]:
    before = count_tasks(flavour)
    await _session(url, destination, headers, settings, tally, faulter)
    after = count_tasks(flavour)
    for _ in range(20):  # tasks told to end may need a few turns of the loop
        if after <= before:
            break
        await anyio.sleep(0.05)
        after = count_tasks(flavour)
    return before, after


@contextlib.asynccontextmanager
async def _connected(
    url: str, settings: Settings, tally: Tally
) -> AsyncIterator[stompy.AsyncConnection]:
    """A connection for the block: ``async with`` opens it (timed as the connect) and
    the close is awaited, timed, at the block's end, before ``async with`` exits."""
    conn = stompy.AsyncConnection(
        url,
        heartbeats=settings.heartbeats,
        connect_timeout=settings.connect_timeout,
        receipt_timeout=settings.receipt_timeout,
        reconnect=settings.reconnect,
    )
    started = time.monotonic()
    connected = False
    try:
        async with conn:
            connected = True
            tally.observe("connect", time.monotonic() - started)
            try:
                yield conn
            finally:
                await _close(conn, tally)
    finally:
        if not connected:
            tally.observe("connect", time.monotonic() - started)


async def _close(conn: stompy.AsyncConnection, tally: Tally) -> None:
    # Bounded like the other calls: close() may be awaited inside any cancel scope.
    try:
        with (
            tally.timed("close"),
            anyio.move_on_after(tally.bounds["close"] + HANG_GRACE) as scope,
        ):
            await conn.close()
    except Exception as exc:
        tally.problem(f"close raised {exc!r}")
    else:
        if scope.cancelled_caught:
            tally.problem("close hung and was cancelled")


async def _session(
    url: str,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> None:
    async with _connected(url, settings, tally) as consumer:
        with tally.timed("subscribe"):
            sub = await consumer.subscribe(
                destination, ack="client-individual", headers=PREFETCH, receipt=True
            )
        async with _connected(url, settings, tally) as producer:
            await _work(consumer, producer, sub, destination, headers, settings, tally, faulter)


async def _work(
    consumer: stompy.AsyncConnection,
    producer: stompy.AsyncConnection,
    sub: stompy.AsyncSubscription,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> None:
    stop_producing = anyio.Event()
    stop_consuming = anyio.Event()
    async with anyio.create_task_group() as consumers:
        consumers.start_soon(_consume, sub, consumer, tally, stop_consuming, settings)
        try:
            async with anyio.create_task_group() as producers:
                for n in range(settings.producers):
                    producers.start_soon(
                        _produce, producer, destination, n, settings, tally, stop_producing, headers
                    )
                faulter.start()
                await anyio.sleep(settings.duration)
                stop_producing.set()
                faulter.stop()
            # The fault thread heals the proxy as it ends; polled, so the loop never blocks.
            for _ in range(200):  # 10 s: a cut waits at most LINGER (5 s) for its connections
                if not faulter.alive:
                    break
                await anyio.sleep(0.05)
            else:
                tally.problem("the fault thread did not end")
            deadline = time.monotonic() + settings.drain_timeout
            while not tally.all_received() and time.monotonic() < deadline:
                await anyio.sleep(0.05)
        finally:
            stop_producing.set()
            faulter.stop()
            stop_consuming.set()


async def _pause(stop: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await stop.wait()


async def _produce(
    conn: stompy.AsyncConnection,
    destination: str,
    worker: int,
    settings: Settings,
    tally: Tally,
    stop: anyio.Event,
    headers: dict[str, str],
) -> None:
    """As in the blocking flavour: each id sent until confirmed, or until ``stop``."""
    pacer = Pacer(settings.producers / settings.rate if settings.rate else 0.0)
    bound = tally.bounds["send"] + HANG_GRACE
    seq = 0
    while not stop.is_set():  # bounded by the run's duration: stop is set at its end
        message_id = f"{worker}-{seq}"
        tally.attempt(message_id)
        while not stop.is_set():  # the same id until confirmed, or the run ends
            started = time.monotonic()
            try:
                with tally.timed("send"), anyio.move_on_after(bound) as scope:
                    await conn.send(
                        destination,
                        message_id,
                        headers={**headers, ID_HEADER: message_id},
                        receipt=True,
                    )
            except Exception as exc:
                tally.send_failed(exc, time.monotonic() - started)
                if conn.failure is not None:
                    tally.problem(f"producer {worker}: the connection failed for good: {exc!r}")
                    return
                tally.retry(message_id)
                await _pause(stop, RETRY_PAUSE)
                continue
            if scope.cancelled_caught:
                tally.problem(f"producer {worker}: a send hung and was cancelled after {bound} s")
                tally.retry(message_id)
                continue
            tally.confirm(message_id)
            break
        seq += 1
        await _pause(stop, pacer.wait())


async def _consume(
    sub: stompy.AsyncSubscription,
    conn: stompy.AsyncConnection,
    tally: Tally,
    stop: anyio.Event,
    settings: Settings,
) -> None:
    """Take messages, record each, then ack it, until ``stop``."""
    while not stop.is_set():  # bounded: stop is set once the drain ends
        batch: list[stompy.AsyncMessage] = []
        try:
            with (
                tally.timed("get"),
                anyio.move_on_after(tally.bounds["get"] + HANG_GRACE) as scope,
            ):
                batch = await sub.get_batch(BATCH, timeout=settings.get_timeout)
        except Exception as exc:
            tally.problem(f"consumer: get raised {exc!r} (connection failure: {conn.failure!r})")
            return
        if scope.cancelled_caught:
            tally.problem("consumer: get_batch hung and was cancelled")
        for message in batch:
            tally.receive(message.headers)
            try:
                with (
                    tally.timed("ack"),
                    anyio.move_on_after(tally.bounds["ack"] + HANG_GRACE) as scope,
                ):
                    await message.ack()
                if scope.cancelled_caught:
                    tally.problem("consumer: an ack hung and was cancelled")
            except Exception as exc:
                tally.ack_failed(exc)

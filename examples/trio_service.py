"""A trio service: the same client as with asyncio, under trio's structured concurrency.

``stompy.AsyncConnection`` is written against anyio, so it runs unchanged on trio.
Here a nursery handles up to four jobs at a time (a ``CapacityLimiter``), each one
acknowledged once its result is sent; cancelling the service's scope stops it, and
leaving the ``async with`` blocks unsubscribes and disconnects gracefully.

    python examples/trio_service.py                                   # embedded broker
    python examples/trio_service.py stomp://guest:guest@localhost:61613   # a real one
"""

from __future__ import annotations

import sys
import uuid

import trio

import stompy
from stompy.testing import serve


async def handle(
    conn: stompy.AsyncConnection,
    job: stompy.AsyncMessage,
    results: str,
    limiter: trio.CapacityLimiter,
) -> None:
    async with limiter:
        word = job.text
        await trio.sleep(0.01 * (len(word) % 3))  # pretend to work
        await conn.send(results, word.upper(), headers={"job": word})
        await job.ack()


async def service(url: str, jobs: str, results: str, *, task_status: trio.TaskStatus[None]) -> None:
    """Subscribe, report ready, then handle jobs until cancelled."""
    limiter = trio.CapacityLimiter(4)
    async with (
        stompy.AsyncConnection(url, heartbeats=(5000, 5000)) as conn,
        conn.subscribe(jobs, ack="client-individual") as sub,
        trio.open_nursery() as nursery,
    ):
        task_status.started()
        async for job in sub:
            nursery.start_soon(handle, conn, job, results, limiter)


async def main(url: str) -> None:
    run = uuid.uuid4().hex[:8]
    jobs, results = f"/queue/words-{run}", f"/queue/shouted-{run}"
    words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]

    async with trio.open_nursery() as nursery:
        await nursery.start(service, url, jobs, results)  # returns once it listens
        async with stompy.AsyncConnection(url) as client, client.subscribe(results) as answers:
            for word in words:
                await client.send(jobs, word)
            with trio.fail_after(10):
                shouted = [(await anext_message(answers)).text for _ in words]
        print(" ".join(sorted(shouted)))
        nursery.cancel_scope.cancel()  # stop the service
    print("service stopped cleanly")


async def anext_message(sub: stompy.AsyncSubscription) -> stompy.AsyncMessage:
    message = await sub.get()
    assert message is not None
    return message


async def with_embedded_broker() -> None:
    async with serve() as broker:  # the in-process broker, on trio
        await main(broker.url)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        trio.run(with_embedded_broker)

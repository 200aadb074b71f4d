"""An asyncio service: consume jobs, handle several at once, publish results.

The worker acknowledges a job only after its result is sent (``client-individual``
acks), so a job whose handling was interrupted is redelivered, not lost. The
``prefetch-count`` header bounds how many unacknowledged jobs the broker hands it;
RabbitMQ honours it, the embedded broker too, ActiveMQ uses
``activemq.prefetchSize``. Stopping the service (cancelling its task, as
``asyncio.run`` does on Ctrl-C) unsubscribes and disconnects gracefully.

    python examples/asyncio_service.py                                  # embedded broker
    python examples/asyncio_service.py stomp://guest:guest@localhost:61613  # a real one
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

import stompy
from stompy.testing import serve

CONCURRENCY = 4


async def handle(conn: stompy.AsyncConnection, job: stompy.AsyncMessage, results: str) -> None:
    n = int(job.text)
    await asyncio.sleep(0.01 * (n % 3))  # pretend to work, some jobs longer than others
    await conn.send(results, f"{n} squared is {n * n}", headers={"job": str(n)})
    await job.ack()  # only now is the job done


async def service(url: str, jobs: str, results: str) -> None:
    """Run until cancelled."""
    running: set[asyncio.Task[None]] = set()
    async with stompy.AsyncConnection(url, heartbeats=(5000, 5000)) as conn:
        headers = {"prefetch-count": str(CONCURRENCY), "activemq.prefetchSize": str(CONCURRENCY)}
        async with conn.subscribe(jobs, ack="client-individual", headers=headers) as sub:
            try:
                async for job in sub:
                    task = asyncio.create_task(handle(conn, job, results))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    while len(running) >= CONCURRENCY:
                        await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in running:
                    task.cancel()  # their jobs stay unacknowledged: redelivered
                await asyncio.gather(*running, return_exceptions=True)


async def main(url: str) -> None:
    run = uuid.uuid4().hex[:8]
    jobs, results = f"/queue/jobs-{run}", f"/queue/results-{run}"
    worker = asyncio.create_task(service(url, jobs, results))

    async with stompy.AsyncConnection(url) as client, client.subscribe(results) as answers:
        for n in range(1, 11):
            await client.send(jobs, str(n))
        seen: set[int] = set()
        while len(seen) < 10:
            answer = await answers.get(timeout=10.0)
            assert answer is not None, "the service did not answer in time"
            seen.add(int(answer.headers["job"]))
            print(answer.text)

    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    print("service stopped cleanly")


async def with_embedded_broker() -> None:
    async with serve() as broker:  # the in-process broker, in this event loop
        await main(broker.url)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        asyncio.run(with_embedded_broker())

"""Flow control against the broker under test: in the client ack modes the client asks
for a prefetch of ``max_pending`` (``prefetch-count`` for RabbitMQ and the in-process
broker, ``activemq.prefetchSize`` for ActiveMQ), so a subscription whose consumer falls
behind never stops the connection: another subscription's message and a receipt still
come at once.

Written with the clients themselves (the drivers know no ``max_pending``): the blocking
one, and the async one on asyncio and on trio.
"""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

import stompy
from tests.conformance._drivers import Target
from tests.quirks import COILMQ, ONE_AT_A_TIME

BACKLOG = 300
HELD = 5
WITHIN = 5.0  # seconds: generous; a stopped connection would never answer


def options(target: Target) -> stompy.ConnectionOptions:
    return {
        "login": target.login,
        "passcode": target.passcode,
        "host": target.connect_host,
        "receipt_timeout": 10.0,
    }


def queues() -> tuple[str, str]:
    name = uuid.uuid4().hex
    return f"/queue/stompy-flow-slow-{name}", f"/queue/stompy-flow-fast-{name}"


@pytest.mark.quirk(COILMQ, ONE_AT_A_TIME, effect="skip")
@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_blocking_slow_subscription_is_paced_by_the_broker(
    broker_target: Target, ack: stompy.AckMode
) -> None:
    slow_q, fast_q = queues()
    with stompy.Connection(broker_target.url, **options(broker_target)) as conn:
        slow = conn.subscribe(slow_q, ack=ack, max_pending=HELD, receipt=True)
        fast = conn.subscribe(fast_q, receipt=True)
        conn.send_many((stompy.Outgoing(slow_q, str(n)) for n in range(BACKLOG)), receipt=True)
        conn.send(fast_q, "urgent")
        started = time.monotonic()
        urgent = fast.get(timeout=WITHIN)
        assert urgent is not None
        assert urgent.text == "urgent"
        conn.send(fast_q + "-receipt", "confirmed", receipt=True)
        assert time.monotonic() - started < WITHIN
        time.sleep(0.2)  # what the broker would send beyond the prefetch had time to come
        assert slow.pending <= HELD
        texts = []
        for _ in range(BACKLOG):
            message = slow.get(timeout=WITHIN)
            assert message is not None
            texts.append(message.text)
            message.ack()
        assert texts == [str(n) for n in range(BACKLOG)]


@pytest.mark.quirk(COILMQ, ONE_AT_A_TIME, effect="skip")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_slow_subscription_is_paced_by_the_broker(
    broker_target: Target, backend: str
) -> None:
    slow_q, fast_q = queues()

    async def run() -> None:
        with anyio.fail_after(60):
            async with stompy.AsyncConnection(broker_target.url, **options(broker_target)) as conn:
                slow = await conn.subscribe(
                    slow_q, ack="client-individual", max_pending=HELD, receipt=True
                )
                fast = await conn.subscribe(fast_q, receipt=True)
                await conn.send_many(
                    (stompy.Outgoing(slow_q, str(n)) for n in range(BACKLOG)), receipt=True
                )
                await conn.send(fast_q, "urgent")
                urgent = await fast.get(timeout=WITHIN)
                assert urgent is not None
                assert urgent.text == "urgent"
                await conn.send(fast_q + "-receipt", "confirmed", receipt=True)
                await anyio.sleep(0.2)
                assert slow.pending <= HELD
                for n in range(BACKLOG):
                    message = await slow.get(timeout=WITHIN)
                    assert message is not None
                    assert message.text == str(n)
                    await message.ack()

    anyio.run(run, backend=backend)

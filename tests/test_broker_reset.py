"""``reset()`` of a running broker, and the dead-letter queue seen from real clients."""

from __future__ import annotations

import anyio
import pytest

import stompy
from stompy.errors import ConnectionLost
from stompy.testing import BrokerStats, run_broker, serve


def test_reset_cuts_connections_and_forgets_everything() -> None:
    with run_broker() as broker:
        stompy.send(broker.url, "/queue/held", "unacked")
        stompy.send(broker.url, "/queue/left", "for nobody")
        with stompy.Connection(broker.url) as conn:
            sub = conn.subscribe("/queue/held", ack="client-individual")
            message = sub.get(timeout=5)
            assert message is not None
            broker.reset()
            assert broker.connections == ()
            with pytest.raises(ConnectionLost):
                sub.get(timeout=5)
        assert broker.destinations() == ()
        assert broker.stats == BrokerStats()
        # Same address, as new.
        stompy.send(broker.url, "/queue/after", "fresh")
        assert broker.queue_depth("/queue/after") == 1
        assert broker.stats.messages_received == 1


@pytest.mark.anyio
async def test_async_reset() -> None:
    with anyio.fail_after(10):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                await conn.send("/queue/a", "x", receipt=True)
            await broker.reset()
            assert broker.queue_depth("/queue/a") == 0
            assert broker.stats.connections_opened == 0
            async with stompy.AsyncConnection(broker.url) as conn:
                await conn.send("/queue/a", "y", receipt=True)
            assert broker.queue_depth("/queue/a") == 1


def test_a_poison_message_ends_in_the_dead_letter_queue() -> None:
    with run_broker(max_redeliveries=2) as broker:
        stompy.send(broker.url, "/queue/jobs", "poison", headers={"job": "7"})
        with stompy.Connection(broker.url) as conn:
            with conn.subscribe("/queue/jobs", ack="client-individual") as sub:
                for _ in range(3):  # the delivery and two redeliveries
                    message = sub.get(timeout=5)
                    assert message is not None
                    message.nack(receipt=True)
                # The third NACK's receipt came after the move: nothing is left here.
                assert broker.queue_depth("/queue/jobs") == broker.unacked_count() == 0
                assert broker.queue_depth("/queue/DLQ.jobs") == 1
            with conn.subscribe("/queue/DLQ.jobs") as dead_letters:
                dead = dead_letters.get(timeout=5)
        assert dead is not None
        assert (dead.text, dead.headers["job"]) == ("poison", "7")
        assert dead.headers["original-destination"] == "/queue/jobs"
        assert broker.stats.messages_dead_lettered == 1

"""A transaction lost with its connection takes no more frames, on any later connection,
in the blocking, asyncio and trio clients (through the in-process broker).

The broker aborts a transaction when its connection ends. A SEND, ACK or NACK that
names it afterwards, by its id rather than through the transaction (``transaction=
tx.id``, a ``send_many()`` whose later chunks come after the reconnect), or one that
waited out the reconnect, raises ``TransactionLost`` and sends nothing. Each connection's
core numbered its transactions from ``tx-1``, so such a frame went into another task's
new transaction of the same id, and was committed with it. The window itself (the
transport saw the end, its verdict is still to come) is shown with the engine's fake
clock in tests/test_calls.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

import stompy
from stompy import Endpoint
from stompy.errors import StompError, TransactionLost
from stompy.testing import Broker, FaultProxy, run_broker

POLICY = stompy.Reconnect(initial_delay=0.01, max_delay=0.1, send_timeout=10.0)


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def test_blocking_frames_of_a_lost_transaction_go_nowhere(broker: Broker) -> None:
    dest, acked = queue(), queue()
    reconnected = threading.Event()

    def on_reconnected(endpoint: Endpoint) -> None:
        reconnected.set()

    with stompy.Connection(broker.url, reconnect=POLICY, on_reconnected=on_reconnected) as conn:
        lost = conn.transaction()
        lost.send(dest, "in the lost transaction")
        broker.drop_all_connections()
        assert reconnected.wait(10.0)
        # Another task's, say, on the next connection: tx-1 again, before, and the
        # stray frames below went into it.
        new = conn.transaction()
        with pytest.raises(TransactionLost, match=rf"'{lost.id}' was lost .* SEND was not sent"):
            conn.send(dest, "stray", transaction=lost.id)
        with pytest.raises(TransactionLost):
            conn.send(dest, "stray", receipt=True, transaction=lost.id)
        with pytest.raises(TransactionLost):
            conn.send_many([stompy.Outgoing(dest, "stray")], transaction=lost.id)
        sub = conn.subscribe(acked, ack="client-individual")
        conn.send(acked, "to ack", receipt=True)
        message = sub.get(timeout=5.0)
        assert message is not None
        with pytest.raises(TransactionLost, match="this ACK was not sent"):
            message.ack(lost.id)
        with pytest.raises(TransactionLost, match="this NACK was not sent"):
            message.nack(lost.id)
        new.send(dest, "committed")
        new.commit()
        assert broker.unacked_count(acked) == 1  # no ACK went in with the commit
        message.ack(receipt=True)  # still the caller's to answer
        with conn.subscribe(dest) as got:
            first = got.get(timeout=5.0)
            assert first is not None
            assert first.text == "committed"
            assert got.get(timeout=0.2) is None  # nothing of the lost transaction's


@pytest.mark.anyio
async def test_async_frames_of_a_lost_transaction_go_nowhere(broker: Broker) -> None:
    dest, acked = queue(), queue()
    reconnected = anyio.Event()

    def on_reconnected(endpoint: Endpoint) -> None:
        reconnected.set()

    with anyio.fail_after(30):
        async with stompy.AsyncConnection(
            broker.url, reconnect=POLICY, on_reconnected=on_reconnected
        ) as conn:
            lost = await conn.transaction()
            await lost.send(dest, "in the lost transaction")
            await anyio.to_thread.run_sync(broker.drop_all_connections)
            await reconnected.wait()
            new = await conn.transaction()
            with pytest.raises(TransactionLost, match=rf"'{lost.id}' was lost .* SEND was not"):
                await conn.send(dest, "stray", transaction=lost.id)
            with pytest.raises(TransactionLost):
                await conn.send(dest, "stray", receipt=True, transaction=lost.id)
            with pytest.raises(TransactionLost):
                await conn.send_many([stompy.Outgoing(dest, "stray")], transaction=lost.id)
            sub = await conn.subscribe(acked, ack="client-individual")
            await conn.send(acked, "to ack", receipt=True)
            message = await sub.get(timeout=5.0)
            assert message is not None
            with pytest.raises(TransactionLost, match="this ACK was not sent"):
                await message.ack(lost.id)
            with pytest.raises(TransactionLost, match="this NACK was not sent"):
                await message.nack(lost.id)
            await new.send(dest, "committed")
            await new.commit()
            assert broker.unacked_count(acked) == 1
            await message.ack(receipt=True)
            async with conn.subscribe(dest) as got:
                first = await got.get(timeout=5.0)
                assert first is not None
                assert first.text == "committed"
                assert await got.get(timeout=0.2) is None


def test_blocking_a_send_that_waited_out_the_reconnect_in_a_lost_transaction(
    stomp_fault_proxy: FaultProxy, stomp_broker: Broker
) -> None:
    """A send naming the transaction while the client reconnects waits for the next
    connection (as any send does), and then must not go out on it: before, that
    connection's core refused it as LocalProtocolError ("transaction 'tx-1' is not
    open"), or it joined a transaction of the same id begun there first."""
    proxy, dest = stomp_fault_proxy, queue()
    disconnected = threading.Event()

    def on_disconnected(error: StompError | None) -> None:
        disconnected.set()

    with stompy.Connection(proxy.url, reconnect=POLICY, on_disconnected=on_disconnected) as conn:
        lost = conn.transaction()
        lost.send(dest, "in the lost transaction")
        proxy.refuse()  # the client's attempts are turned away until reset()
        proxy.cut()
        assert disconnected.wait(10.0)  # the verdict is in: reconnecting
        raised: list[BaseException] = []

        def stray() -> None:
            try:
                conn.send(dest, "stray", transaction=lost.id)
            except StompError as exc:
                raised.append(exc)

        thread = threading.Thread(target=stray)
        thread.start()
        time.sleep(0.2)  # it waits for the next connection (were it late: the same case)
        proxy.reset()
        thread.join(15.0)
        assert not thread.is_alive()
        assert [type(exc) for exc in raised] == [TransactionLost]
        with conn.transaction() as new:
            new.send(dest, "committed")
    assert stomp_broker.queue_depth(dest) == 1


@pytest.mark.anyio
async def test_async_a_send_that_waited_out_the_reconnect_in_a_lost_transaction(
    stomp_fault_proxy: FaultProxy, stomp_broker: Broker
) -> None:
    proxy, dest = stomp_fault_proxy, queue()
    disconnected = anyio.Event()

    def on_disconnected(error: StompError | None) -> None:
        disconnected.set()

    with anyio.fail_after(30):
        async with stompy.AsyncConnection(
            proxy.url, reconnect=POLICY, on_disconnected=on_disconnected
        ) as conn:
            lost = await conn.transaction()
            await lost.send(dest, "in the lost transaction")
            proxy.refuse()
            proxy.cut()
            await disconnected.wait()
            raised: list[BaseException] = []

            async def stray() -> None:
                try:
                    await conn.send(dest, "stray", transaction=lost.id)
                except StompError as exc:
                    raised.append(exc)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(stray)
                await anyio.sleep(0.2)
                proxy.reset()
            assert [type(exc) for exc in raised] == [TransactionLost]
            async with conn.transaction() as new:
                await new.send(dest, "committed")
    assert stomp_broker.queue_depth(dest) == 1

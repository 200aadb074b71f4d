"""The async client against the in-process broker, on asyncio and on trio."""

from __future__ import annotations

import contextlib
import gc
import socket
import uuid
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import stompy
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    ProtocolError,
    ReceiptTimeout,
    ServerError,
    TransactionLost,
)
from stompy.testing import AsyncBroker, serve
from tests.test_sync_client import check_one_object_per_message, many_descriptors

pytestmark = pytest.mark.anyio


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def session_of(broker: AsyncBroker, conn: stompy.AsyncConnection) -> str:
    return next(c.session for c in broker.connections if c.session == conn.session)


async def test_send_receive_ack_and_text() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            assert conn.version == "1.2"
            async with conn.subscribe(dest, ack="client-individual") as sub:
                await conn.send(dest, b"\x00bin", headers={"priority": "9"}, receipt=True)
                msg = await sub.get(timeout=5)
                assert msg is not None
                assert msg.body == b"\x00bin"
                assert msg.headers["priority"] == "9"
                await msg.ack(receipt=True)
                await conn.send(dest, "héllo")
                async for text in sub:
                    assert text.text == "héllo"
                    await text.ack()
                    break
            await broker.wait_until(lambda: broker.unacked_count(dest) == 0)


@pytest.mark.parametrize("body", [5, None, bytearray(b"x")])
async def test_a_body_neither_bytes_nor_str_is_refused_and_nothing_is_sent(
    body: object,
) -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(TypeError):
                await conn.send(dest, body)  # type: ignore[arg-type]
            await conn.send(dest, b"after", receipt=True)
            async with conn.subscribe(dest) as sub:
                msg = await sub.get(timeout=5)
                assert msg is not None
                assert msg.body == b"after"
                assert await sub.get(timeout=0.2) is None


async def test_a_received_message_is_the_cores_event_and_compares_by_identity() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest, ack="client-individual") as sub:
                await conn.send(dest, b"same")
                await conn.send(dest, b"same", receipt=True)
                first, second = await sub.get(timeout=5), await sub.get(timeout=5)
                assert first is not None
                assert second is not None
                check_one_object_per_message(first, second, stompy.AsyncMessage, dest, sub.id)
                await first.ack()
                await second.ack(receipt=True)
            assert broker.unacked_count(dest) == 0


async def test_a_subscribe_or_transaction_not_awaited_says_to_await_it() -> None:
    """``sub = conn.subscribe(...)`` without ``await``, then ``sub.get()``, said "'_Opening'
    object has no attribute 'get'": a private class, and not what to do."""
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            opening: Any = conn.subscribe(dest)
            with pytest.raises(
                AttributeError,
                match=r"^no attribute 'get' before it is awaited: `sub = await conn\.subscribe",
            ):
                _ = opening.get
            began: Any = conn.transaction()
            with pytest.raises(
                AttributeError,
                match=r"'send' before it is awaited: .*`tx = await conn\.transaction\(\)`",
            ):
                _ = began.send
            sub = await opening  # awaited after all, both work as usual
            async with await began as tx:
                await tx.send(dest, "in the transaction")
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.text == "in the transaction"


async def test_a_transaction_of_another_connection_is_refused() -> None:
    dest = queue()
    said = r"^transaction 'tx-\d+' belongs to another connection: use it on the connection"
    with anyio.fail_after(20):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url) as a,
            stompy.AsyncConnection(broker.url) as c,
        ):
            mine, theirs = await a.transaction(), await c.transaction()
            assert mine.id == theirs.id
            sub = await a.subscribe(dest, ack="client-individual")
            with pytest.raises(LocalProtocolError, match=said):
                await a.send(dest, "in whose transaction?", transaction=theirs)
            await a.send(dest, "to ack", receipt=True)
            message = await sub.get(timeout=5)
            assert message is not None
            with pytest.raises(LocalProtocolError, match=said):
                await theirs.ack(message)
            await mine.commit()
            await theirs.commit()
            assert broker.queue_depth(dest) == 0
            assert broker.unacked_count(dest) == 1


async def test_send_many_refuses_what_is_not_an_outgoing() -> None:
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            for bad in ("a body", ("/queue/a", "a body")):
                messages: list[Any] = [stompy.Outgoing(dest, "before"), bad]
                with pytest.raises(
                    TypeError, match=r"^send_many\(\): each message must be a stompy\.Outgoing\("
                ):
                    await conn.send_many(messages, receipt=True)
            await conn.send(dest, "after", receipt=True)
            assert broker.queue_depth(dest) == 1


async def test_get_batch_takes_what_arrived_up_to_its_limit() -> None:
    dest = queue()
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest, ack="client-individual", max_pending=10) as sub:
                with pytest.raises(stompy.ConfigurationError, match="max_messages"):
                    await sub.get_batch(0)
                assert await sub.get_batch(5, timeout=0.05) == []
                # No receipt wait: the reader stops at max_pending (issue 17).
                messages = (stompy.Outgoing(dest, str(i)) for i in range(25))
                await conn.send_many(messages)
                got: list[str] = []
                for _ in range(50):
                    batch = await sub.get_batch(4, timeout=5)
                    assert 1 <= len(batch) <= 4
                    got += [m.text for m in batch]
                    for m in batch:
                        await m.ack()
                    if len(got) == 25:
                        break
                assert got == [str(i) for i in range(25)]
            assert await sub.get_batch(3, timeout=0) == []


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
async def test_versions(version: str) -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, versions=(version,)) as conn:
                assert conn.version == version
                sub = await conn.subscribe(dest, ack="client")
                await conn.send(dest, "x", receipt=True)
                msg = await sub.get(timeout=5)
                assert msg is not None
                await msg.ack(receipt=True)
                assert broker.unacked_count(dest) == 0


async def test_transactions_commit_and_abort() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.transaction() as tx:
                await tx.send(dest, "committed")
                assert broker.queue_depth(dest) == 0
            assert broker.queue_depth(dest) == 1
            with pytest.raises(ValueError, match="abort"):
                async with conn.transaction() as tx:
                    await tx.send(dest, "aborted")
                    raise ValueError("abort")
            await conn.send(dest, "after", receipt=True)
            assert broker.queue_depth(dest) == 2
            async with conn.subscribe(dest, ack="client") as sub:
                first = await sub.get(timeout=5)
                assert first is not None
                second = await sub.get(timeout=5)
                assert second is not None
                assert [first.text, second.text] == ["committed", "after"]
                async with conn.transaction() as tx:
                    await tx.ack(second)  # cumulative: acks both
            await broker.wait_until(lambda: broker.unacked_count(dest) == 0)
            tx2 = await conn.transaction()
            await tx2.abort()
            with pytest.raises(LocalProtocolError):
                await tx2.commit()


async def test_cancelling_get_loses_no_message() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest)
            with anyio.move_on_after(0.05):
                await sub.get()
            await conn.send(dest, "kept", receipt=True)
            msg = await sub.get(timeout=5)
            assert msg is not None
            assert msg.text == "kept"


async def test_cancelling_sends_never_leaves_half_a_frame() -> None:
    dest = queue()
    body = b"z" * 200_000
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            for delay in (0.0, 0.0001, 0.001):
                with anyio.move_on_after(delay):
                    for _ in range(20):
                        await conn.send(dest, body)
            await conn.send(dest, "last", receipt=True)
            # The broker parsed every frame: nothing was cut in half.
            assert broker.queue_depth(dest) >= 1
            async with conn.subscribe(dest) as sub:
                while True:
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    if msg.body == b"last":
                        break
                    assert msg.body == body


async def test_receipt_timeout() -> None:
    with anyio.fail_after(10):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, receipt_timeout=0.3) as conn:
                broker.pause()
                with pytest.raises(ReceiptTimeout):
                    await conn.send(queue(), "x", receipt=True)
                broker.resume()


async def test_heartbeat_loss_wakes_blocked_get() -> None:
    with anyio.fail_after(10):
        async with serve(heartbeats=(100, 100)) as broker:
            async with stompy.AsyncConnection(broker.url, heartbeats=(100, 100)) as conn:
                sub = await conn.subscribe(queue())
                await anyio.sleep(0.5)
                assert conn.connected
                broker.pause()
                with pytest.raises(HeartbeatTimeout):
                    await sub.get(timeout=8)
                with pytest.raises(HeartbeatTimeout):
                    await conn.send("/queue/x", "y")


async def test_dropped_connection_without_reconnect() -> None:
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(queue())
            await broker.drop_all_connections()
            with pytest.raises(ConnectionLost):
                await sub.get(timeout=5)


async def test_reconnect_resubscribes() -> None:
    dest = queue()
    policy = stompy.Reconnect(initial_delay=0.05, max_delay=0.2, send_timeout=5)
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, reconnect=policy) as conn:
                sub = await conn.subscribe(dest, ack="client-individual")
                await conn.send(dest, "before", receipt=True)
                before = await sub.get(timeout=5)
                assert before is not None
                tx = await conn.transaction()
                await broker.drop_all_connections()
                again = await sub.get(timeout=5)
                assert again is not None
                assert again.text == "before"
                assert again.redelivered
                await before.ack()  # stale: a no-op
                await again.ack(receipt=True)
                with pytest.raises(TransactionLost):
                    await tx.commit()
                await conn.send(dest, "after", receipt=True)
                after = await sub.get(timeout=5)
                assert after is not None
                assert after.text == "after"


async def test_malformed_and_oversized_frames() -> None:
    with anyio.fail_after(10):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(queue())
                broker.send_raw(session_of(broker, conn), b"MESSAGE\nbroken\n\n\x00")
                with pytest.raises(ProtocolError, match="colon"):
                    await sub.get(timeout=5)
            limits = stompy.FrameLimits(max_body=100)
            async with stompy.AsyncConnection(broker.url, limits=limits) as conn:
                sub = await conn.subscribe(queue())
                broker.send_raw(
                    session_of(broker, conn),
                    b"MESSAGE\ndestination:/q\nmessage-id:1\nsubscription:0\n\n" + b"z" * 500,
                )
                with pytest.raises(FrameTooLarge):
                    await sub.get(timeout=5)


async def test_wrong_passcode_and_unreachable() -> None:
    with anyio.fail_after(10):
        async with serve(users={"guest": "guest"}) as broker:
            with pytest.raises(ServerError) as info:
                async with stompy.AsyncConnection(broker.url, login="guest", passcode="hunter2"):
                    pass
            assert "hunter2" not in str(info.value)
            dead = broker.url
        with pytest.raises(ConnectFailed):
            async with stompy.AsyncConnection(dead, connect_timeout=2):
                pass


async def test_one_call_send_async() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker:
            await stompy.send_async(broker.url, dest, "hello")
            assert broker.queue_depth(dest) == 1


async def test_backpressure_bounds_the_subscription() -> None:
    dest = queue()
    with anyio.fail_after(30):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as producer:
                for _ in range(2000):
                    await producer.send(dest, b"y" * 4096)
                await producer.send(dest, b"end", receipt=True)
            async with stompy.AsyncConnection(broker.url, max_pending=5) as conn:
                sub = await conn.subscribe(dest)
                await anyio.sleep(0.3)
                assert sub.pending <= 5
                assert broker.queue_depth(dest) > 0
                count = 0
                async for msg in sub:
                    count += 1
                    if msg.body == b"end":
                        break
                assert count == 2001


async def test_many_subscriptions_on_one_connection() -> None:
    with anyio.fail_after(30):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            subs = [await conn.subscribe(f"/topic/t{i}") for i in range(1000)]
            await conn.send("/topic/t999", "last", receipt=True)
            msg = await subs[999].get(timeout=5)
            assert msg is not None
            assert msg.text == "last"
            assert subs[0].pending == 0


async def test_many_connections_in_one_process() -> None:
    dest = queue()
    with anyio.fail_after(60):
        async with serve() as broker:
            async with contextlib.AsyncExitStack() as stack:
                # Each connection's lifetime belongs to this task: entered here.
                conns = [
                    await stack.enter_async_context(stompy.AsyncConnection(broker.url))
                    for _ in range(200)
                ]
                assert len(broker.connections) == 200
                for conn in conns:
                    await conn.send(dest, "x")
                await conns[0].send(dest, "end", receipt=True)
                await broker.wait_until(lambda: broker.queue_depth(dest) == 201)
            await broker.wait_until(lambda: len(broker.connections) == 0)


async def test_cancelling_the_host_task_disconnects() -> None:
    with anyio.fail_after(10):
        async with serve() as broker:
            with anyio.move_on_after(0.2):
                async with stompy.AsyncConnection(broker.url) as conn:
                    sub = await conn.subscribe(queue())
                    await sub.get()
            await broker.wait_until(lambda: len(broker.connections) == 0)
            assert not conn.connected


async def test_send_with_receipt_is_repeated_after_a_reconnect() -> None:
    policy = stompy.Reconnect(initial_delay=0.01, send_timeout=10)
    with anyio.fail_after(60):
        async with serve() as broker:
            for _ in range(10):
                dest = queue()
                async with stompy.AsyncConnection(broker.url, reconnect=policy) as conn:
                    await broker.drop_all_connections()
                    await conn.send(dest, "x", receipt=True)
                assert broker.queue_depth(dest) >= 1


async def test_text_of_a_body_that_is_not_text_names_the_content_type() -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest) as sub:
                await conn.send(dest, b"\xff", content_type="text/plain", receipt=True)
                message = await sub.get(timeout=5)
                assert message is not None
                with pytest.raises(stompy.BodyNotText, match="content-type: text/plain"):
                    _ = message.text


async def serves_another_client(broker: AsyncBroker) -> None:
    """The broker in this loop still serves: a new client sends and receives."""
    dest = queue()
    async with stompy.AsyncConnection(broker.url) as other, other.subscribe(dest) as sub:
        await other.send(dest, "still serving", receipt=True)
        message = await sub.get(timeout=5)
        assert message is not None
        assert message.text == "still serving"


async def close_in_a_cancel_scope(conn: stompy.AsyncConnection) -> bool:
    with anyio.fail_after(5):
        return await conn.close()


async def close_in_a_nested_task_group(conn: stompy.AsyncConnection) -> bool:
    confirmed: list[bool] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep, 0)
        confirmed.append(await conn.close())
    return confirmed == [True]


async def close_from_another_task(conn: stompy.AsyncConnection) -> bool:
    """Another task closes while this one waits for a message: the wait ends with None."""
    sub = await conn.subscribe(queue())
    confirmed: list[bool] = []

    async def close() -> None:
        await anyio.sleep(0.05)
        confirmed.append(await conn.close())

    async with anyio.create_task_group() as tg:
        tg.start_soon(close)
        assert await sub.get(timeout=5) is None
    return confirmed == [True]


async def close_twice_at_once(conn: stompy.AsyncConnection) -> bool:
    """Two tasks close at once; the second waits for the first and says what it did."""
    confirmed: list[bool] = []

    async def close() -> None:
        with anyio.fail_after(5):
            confirmed.append(await conn.close())

    async with anyio.create_task_group() as tg:
        tg.start_soon(close)
        tg.start_soon(close)
    assert await conn.close() is True  # and a third, after them
    return confirmed == [True, True]


async def close_from_its_own_callback(conn: stompy.AsyncConnection) -> bool:
    """An on_message callback (a task of the connection) closes: close() waits for the
    other tasks, not for the one it runs in, which ends as close() returns to it."""
    dest = queue()
    confirmed: list[bool] = []
    ended = anyio.Event()

    async def on_message(message: stompy.AsyncMessage) -> None:
        try:
            confirmed.append(await conn.close())
            await anyio.sleep(5)  # cancelled: the connection's tasks are stopped
            confirmed.append(False)
        finally:
            ended.set()

    await conn.subscribe(dest, on_message=on_message)
    await conn.send(dest, "close now")
    with anyio.fail_after(2):
        await ended.wait()
    return confirmed == [True]


@pytest.mark.parametrize(
    "close",
    [
        close_in_a_cancel_scope,
        close_in_a_nested_task_group,
        close_from_another_task,
        close_twice_at_once,
        close_from_its_own_callback,
    ],
)
async def test_close_in_the_block_from_any_scope_or_task_leaves_the_loop_whole(
    close: Callable[[stompy.AsyncConnection], Awaitable[bool]],
) -> None:
    """close() inside the block of ``async with``, wherever it is awaited from, says
    goodbye and stops the tasks; the block ends normally, and the broker in the same
    loop serves on (a close that exited the task group there corrupted both loops)."""
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                assert await close(conn) is True
                assert not conn.connected
                with pytest.raises(LocalProtocolError, match="closed"):
                    await conn.send(queue(), "too late")
            await broker.wait_until(lambda: broker.stats.connections_open == 0)
            await serves_another_client(broker)


async def test_connect_by_hand_is_refused_and_says_to_use_async_with() -> None:
    """A task group opened by connect() and closed by close() could not be nested safely."""
    with anyio.fail_after(10):
        async with serve() as broker:
            conn = stompy.AsyncConnection(broker.url)
            with pytest.raises(LocalProtocolError, match=r"async with AsyncConnection\("):
                await conn.connect()
            assert broker.stats.connections_opened == 0
            async with conn:  # still new: it opens the usual way
                await conn.send(queue(), "x", receipt=True)
            with pytest.raises(LocalProtocolError, match="opened once"):
                async with conn:
                    pass
            await serves_another_client(broker)


async def test_an_error_in_the_block_closes_and_comes_out_unwrapped() -> None:
    """The block's exception comes out as it was raised (no ExceptionGroup), after the
    goodbye; also when close() had already been awaited in a cancel scope."""
    with anyio.fail_after(20):
        async with serve() as broker:
            conn = stompy.AsyncConnection(broker.url)
            with pytest.raises(ZeroDivisionError) as raised:
                async with conn:
                    await conn.send(queue(), "x", receipt=True)
                    _ = 1 / 0
            assert type(raised.value) is ZeroDivisionError
            assert not conn.connected
            await broker.wait_until(lambda: broker.stats.connections_open == 0)
            with pytest.raises(KeyError) as keyed:
                async with stompy.AsyncConnection(broker.url) as conn:
                    with anyio.move_on_after(5):
                        await conn.close()
                    raise KeyError("mine")
            assert type(keyed.value) is KeyError
            await serves_another_client(broker)


async def test_a_refused_connection_gives_its_cause_as_the_blocking_client_does() -> None:
    """anyio says only "All connection attempts failed": the cause is told instead."""
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"stomp://127.0.0.1:{bound.getsockname()[1]}"

        def blocking() -> str:
            with pytest.raises(ConnectFailed) as info:
                stompy.Connection(url, connect_timeout=5).connect()
            return str(info.value)

        with anyio.fail_after(10):
            with pytest.raises(ConnectFailed) as info:
                async with stompy.AsyncConnection(url, connect_timeout=5):
                    pass
            expected = await anyio.to_thread.run_sync(blocking)
    assert "Connection refused" in expected
    assert str(info.value) == expected


async def test_descriptors_above_1024_are_served() -> None:
    dest = queue()
    with many_descriptors(), anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, heartbeats=(100, 100)) as conn:
                sub = await conn.subscribe(dest)
                await conn.send(dest, "high", receipt=True)
                await anyio.sleep(0.3)  # a few heart-beats: the timer looks into the socket
                message = await sub.get(timeout=5)
                assert message is not None
                assert message.text == "high"


async def test_close_says_whether_the_broker_confirmed_it() -> None:
    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, receipt_timeout=0.5) as conn:
                assert await conn.close() is True
                assert await conn.close() is True
            async with stompy.AsyncConnection(broker.url, receipt_timeout=0.5) as conn:
                broker.pause()
                assert await conn.close() is False
                broker.resume()
                assert not conn.connected


async def test_a_message_kept_after_the_block_does_not_keep_its_connection() -> None:
    """A received message answers through the connection's link, not the connection:
    one kept (in a cache, a log record) lets the connection and its tasks' state go."""
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url) as conn:
                sub = await conn.subscribe(dest)
                await conn.send(dest, "kept", receipt=True)
                message = await sub.get(timeout=5)
            gone = weakref.ref(conn)
            del conn, sub
            gc.collect()
            assert message is not None
            assert message.text == "kept"
            assert gone() is None

"""Request/reply through the blocking, asyncio and trio clients and the in-process broker.

A responder answers with ``msg.reply(...)``; requesters wait with ``conn.request(...)``,
many at once on one connection. The broker makes the temporary queue the way RabbitMQ
does (tests/test_broker_temp_queues.py); the rules are the engine's
(tests/test_request.py), so here they are only shown to hold end to end.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import anyio
import anyio.abc
import pytest

import stompy
from stompy.errors import (
    ConnectionLost,
    LocalProtocolError,
    NoReplyTo,
    ReceiptTimeout,
    RequestTimeout,
)
from stompy.testing import Broker, run_broker, serve

#: Every wait of these tests is bounded by this many seconds.
LIMIT = 10.0


def queue() -> str:
    return f"/queue/rpc-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


@contextlib.contextmanager
def responder(url: str, destination: str) -> Iterator[stompy.Connection]:
    """A service on its own connection that answers every request with its text upper-cased."""
    with stompy.Connection(url) as conn:
        conn.subscribe(destination, on_message=lambda msg: msg.reply(msg.text.upper()))
        yield conn


def dropped_messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "stompy" and r.levelno == level and "dropping a" in r.getMessage()
    ]


# -- the blocking client -------------------------------------------------------------------


def test_a_responder_loop_answers_concurrent_requests_from_threads(broker: Broker) -> None:
    service = queue()
    with stompy.Connection(broker.url) as server:
        sub = server.subscribe(service, receipt=True)

        def serve_requests() -> None:
            for msg in sub:  # ends when the connection closes
                msg.reply(msg.text.upper(), headers={"served-by": "loop"})

        loop = threading.Thread(target=serve_requests)
        loop.start()
        with stompy.Connection(broker.url) as client, ThreadPoolExecutor(8) as pool:
            futures = [
                pool.submit(client.request, service, f"ping {i}", timeout=LIMIT) for i in range(16)
            ]
            replies = [f.result(timeout=LIMIT) for f in futures]
        assert [r.text for r in replies] == [f"PING {i}" for i in range(16)]
        assert {r.headers["served-by"] for r in replies} == {"loop"}
        assert len({r.headers["correlation-id"] for r in replies}) == 16
    loop.join(LIMIT)
    assert not loop.is_alive()


def test_a_request_nobody_answers_times_out_and_its_late_reply_is_dropped(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    service = queue()
    caplog.set_level(logging.DEBUG, logger="stompy")
    with stompy.Connection(broker.url) as client:
        with pytest.raises(RequestTimeout, match=service):
            client.request(service, "anyone?", timeout=0.2)
        with responder(broker.url, service):
            # The responder answers the old request first, then this one: by the time
            # this reply is back, the late one was handled.
            assert client.request(service, "now", timeout=LIMIT).text == "NOW"
    late = dropped_messages(caplog, logging.DEBUG)
    assert len(late) == 1
    assert "dropping a reply" in late[0]
    assert dropped_messages(caplog, logging.WARNING) == []


def test_reply_to_a_message_without_reply_to_raises(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(broker.url) as conn, conn.subscribe(dest) as sub:
        conn.send(dest, "no return address")
        msg = sub.get(timeout=LIMIT)
        assert msg is not None
        with pytest.raises(NoReplyTo, match="no reply-to"):
            msg.reply("lost")
        conn.send(dest, "still fine", receipt=True)  # nothing was sent: still connected


def test_a_message_for_no_subscription_of_the_client_is_logged_as_a_warning(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    service = queue()
    caplog.set_level(logging.DEBUG, logger="stompy")
    with stompy.Connection(broker.url) as client, responder(broker.url, service):
        # A temp queue of the user's own: its replies come on a subscription the
        # client never made and nobody waits on.
        client.send(service, "mine", headers={"reply-to": "/temp-queue/mine"})
        assert client.request(service, "after", timeout=LIMIT).text == "AFTER"
    (warning,) = dropped_messages(caplog, logging.WARNING)
    assert "'/temp-queue/mine'" in warning


def test_requests_in_flight_fail_after_a_reconnect_and_new_ones_work() -> None:
    service = queue()
    policy = stompy.Reconnect(initial_delay=0.05, max_delay=0.2, send_timeout=LIMIT)
    with (
        run_broker() as broker,
        stompy.Connection(broker.url, reconnect=policy) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        pending = pool.submit(client.request, service, "lost", timeout=LIMIT)
        broker.wait_until(lambda: broker.queue_depth(service) == 1)
        broker.drop_all_connections()
        with pytest.raises(ConnectionLost, match="lost before the reply"):
            pending.result(timeout=LIMIT)
        with responder(broker.url, service):
            assert client.request(service, "again", timeout=LIMIT).text == "AGAIN"


def test_a_request_in_flight_without_reconnect_raises_that_the_connection_was_lost() -> None:
    service = queue()
    with (
        run_broker() as broker,
        stompy.Connection(broker.url) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        pending = pool.submit(client.request, service, "lost", timeout=LIMIT)
        broker.wait_until(lambda: broker.queue_depth(service) == 1)
        broker.drop_all_connections()
        with pytest.raises(ConnectionLost) as raised:
            pending.result(timeout=LIMIT)
        assert not isinstance(raised.value, RequestTimeout)
        with pytest.raises(ConnectionLost):  # the connection is over: so is the next
            client.request(service, "again", timeout=LIMIT)


def test_a_request_on_a_connection_not_open_yet_is_refused() -> None:
    conn = stompy.Connection("stomp://127.0.0.1:9")  # never connected
    with pytest.raises(LocalProtocolError, match="not open yet"):
        conn.request("/queue/rpc", "ping", timeout=LIMIT)


# -- the async client, on asyncio and trio -----------------------------------------------


async def respond(url: str, destination: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    async with stompy.AsyncConnection(url) as conn, conn.subscribe(destination) as sub:
        task_status.started()
        async for msg in sub:
            await msg.reply(msg.text.upper())


@pytest.mark.anyio
async def test_async_concurrent_requests_each_get_their_own_reply() -> None:
    service = queue()
    replies: dict[int, str] = {}
    with anyio.fail_after(LIMIT):
        async with serve() as broker, anyio.create_task_group() as tg:
            await tg.start(respond, broker.url, service)
            async with stompy.AsyncConnection(broker.url) as client:

                async def ask(i: int) -> None:
                    reply = await client.request(service, f"ping {i}", timeout=LIMIT)
                    replies[i] = reply.text

                async with anyio.create_task_group() as requests:
                    for i in range(16):
                        requests.start_soon(ask, i)
                with pytest.raises(RequestTimeout):
                    await client.request(queue(), "nobody", timeout=0.1)
            tg.cancel_scope.cancel()
    assert replies == {i: f"PING {i}" for i in range(16)}


@pytest.mark.anyio
async def test_async_a_nearer_deadline_ends_its_wait_while_a_longer_one_waits() -> None:
    # Waits for answers time out by the connection's timer (TaskIO._await_answer): a
    # wait whose deadline is nearer than the one the timer is armed for re-arms it.
    with anyio.fail_after(LIMIT):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url, receipt_timeout=0.2) as client,
            anyio.create_task_group() as tg,
        ):
            ended: list[str] = []

            async def long_wait() -> None:
                with contextlib.suppress(RequestTimeout):
                    await client.request(queue(), "nobody", timeout=60.0)
                ended.append("long")

            tg.start_soon(long_wait)
            await anyio.sleep(0.05)  # the long wait armed the timer first
            with pytest.raises(RequestTimeout):
                await client.request(queue(), "nobody either", timeout=0.1)
            broker.pause()
            with pytest.raises(ReceiptTimeout):
                await client.send(queue(), "x", receipt=True)
            broker.resume()
            assert ended == []
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_async_reply_without_reply_to_and_an_unknown_subscription(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = queue()
    caplog.set_level(logging.WARNING, logger="stompy")
    with anyio.fail_after(LIMIT):
        async with serve() as broker, anyio.create_task_group() as tg:
            await tg.start(respond, broker.url, service)
            async with stompy.AsyncConnection(broker.url) as client:
                async with client.subscribe(queue()) as sub:
                    await client.send(sub.destination, "plain")
                    msg = await sub.get()
                    assert msg is not None
                    with pytest.raises(NoReplyTo):
                        await msg.reply("nowhere")
                await client.send(service, "mine", headers={"reply-to": "/temp-queue/mine"})
                assert (await client.request(service, "after")).text == "AFTER"
            tg.cancel_scope.cancel()
    (warning,) = dropped_messages(caplog, logging.WARNING)
    assert "'/temp-queue/mine'" in warning


@pytest.mark.anyio
async def test_async_requests_in_flight_fail_after_a_reconnect() -> None:
    service = queue()
    policy = stompy.Reconnect(initial_delay=0.05, max_delay=0.2, send_timeout=LIMIT)
    with anyio.fail_after(LIMIT):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url, reconnect=policy) as client,
        ):
            failed: list[BaseException] = []

            async def lost() -> None:
                try:
                    await client.request(service, "lost", timeout=LIMIT)
                except ConnectionLost as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(lost)
                await broker.wait_until(lambda: broker.queue_depth(service) == 1)
                await broker.drop_all_connections()
            assert len(failed) == 1
            async with anyio.create_task_group() as tg:
                await tg.start(respond, broker.url, service)
                assert (await client.request(service, "again")).text == "AGAIN"
                tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_async_a_request_nobody_answers_times_out_and_its_late_reply_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = queue()
    caplog.set_level(logging.DEBUG, logger="stompy")
    with anyio.fail_after(LIMIT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as client:
            with pytest.raises(RequestTimeout, match=service):
                await client.request(service, "anyone?", timeout=0.2)
            async with anyio.create_task_group() as tg:
                await tg.start(respond, broker.url, service)
                # The responder answers the old request first, then this one: by the
                # time this reply is back, the late one was handled.
                assert (await client.request(service, "now", timeout=LIMIT)).text == "NOW"
                tg.cancel_scope.cancel()
    late = dropped_messages(caplog, logging.DEBUG)
    assert len(late) == 1
    assert "dropping a reply" in late[0]
    assert dropped_messages(caplog, logging.WARNING) == []


@pytest.mark.anyio
async def test_async_a_request_in_flight_without_reconnect_raises_connection_lost() -> None:
    service = queue()
    with anyio.fail_after(LIMIT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as client:
            failed: list[BaseException] = []

            async def lost() -> None:
                try:
                    await client.request(service, "lost", timeout=LIMIT)
                except ConnectionLost as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(lost)
                await broker.wait_until(lambda: broker.queue_depth(service) == 1)
                await broker.drop_all_connections()
            assert len(failed) == 1
            assert not isinstance(failed[0], RequestTimeout)
            with pytest.raises(ConnectionLost):  # the connection is over: so is the next
                await client.request(service, "again", timeout=LIMIT)


@pytest.mark.anyio
async def test_async_a_request_on_a_connection_not_open_yet_is_refused() -> None:
    conn = stompy.AsyncConnection("stomp://127.0.0.1:9")  # never entered
    with anyio.fail_after(LIMIT), pytest.raises(LocalProtocolError, match="not open yet"):
        await conn.request("/queue/rpc", "ping", timeout=LIMIT)


@pytest.mark.parametrize("flavour", ["blocking", "asyncio", "trio"])
def test_a_request_is_logged_from_the_moment_debug_is_on(
    flavour: str, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """Each request's SEND is logged at DEBUG (as every frame sent is) as soon as DEBUG is
    switched on, and no longer once it is off: not as of the last bytes received. (The
    logger's level is set and reset here, not with caplog.set_level, which would put
    back the INFO it found at the test's end.)"""
    service = queue()
    stompy_log = logging.getLogger("stompy")
    stompy_log.setLevel(logging.INFO)

    def asks(request: Callable[[str], object]) -> None:
        request("quiet before")
        stompy_log.setLevel(logging.DEBUG)
        request("loud while on")
        stompy_log.setLevel(logging.INFO)
        request("quiet after")

    try:
        with responder(broker.url, service):
            if flavour == "blocking":
                with stompy.Connection(broker.url, heartbeats=(0, 0)) as conn:
                    asks(lambda text: conn.request(service, text, timeout=LIMIT))
            else:

                async def main() -> None:
                    async with stompy.AsyncConnection(broker.url, heartbeats=(0, 0)) as conn:
                        for text in ("quiet before", "loud while on", "quiet after"):
                            if text == "loud while on":
                                stompy_log.setLevel(logging.DEBUG)
                            await conn.request(service, text, timeout=LIMIT)
                            if text == "loud while on":
                                stompy_log.setLevel(logging.INFO)

                anyio.run(main, backend=flavour)
    finally:
        stompy_log.setLevel(logging.NOTSET)
    # The requester's SENDs, not the responder's (its replies are upper case, and it
    # logs what it receives as "received ...").
    sent = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG
        and r.getMessage().startswith("to ")
        and "reply-to:" in r.getMessage()
    ]
    assert len(sent) == 1
    assert "loud while on" in sent[0]

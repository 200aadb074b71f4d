"""The async client's read-through: on asyncio a call waiting for its answer (a receipt,
a reply, a ``get()``'s message) on a plain TCP connection is woken by the socket's bytes
itself and feeds them to the engine, while the reader task stays waiting, unwoken
(:class:`stompy._transports.rawsocket.ReadTurn`). On trio a call waiting for a receipt
or a reply, or a ``get()`` waiting for a message, waits on the socket itself once the
reader task lent it (:class:`stompy._transports.rawsocket.SocketTurn`). The behaviour
is the same on both: what the waiting call read is never lost, not even when it is
cancelled right after the read, the reader reads again once the call returns, a full
inbox still stops the reading, and room made as the reading stops is not lost."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import anyio
import anyio.abc
import pytest

import stompy
from stompy._transports.blocking import bytes_waiting
from stompy._transports.rawsocket import RawSocketStream, ReadTurn, SocketTurn
from stompy.testing import serve

pytestmark = pytest.mark.anyio


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


async def turn_of(conn: stompy.AsyncConnection, backend: str) -> ReadTurn | None:
    """The connection's asyncio turn, once its tasks run (on trio: none, the stream has
    a :class:`SocketTurn` instead)."""
    await anyio.wait_all_tasks_blocked()
    stream = conn._io.stream
    assert isinstance(stream, RawSocketStream)
    turn = conn._io.turn
    if backend == "asyncio":
        assert turn is stream.turn
        assert turn is not None
    else:
        assert turn is None
        assert isinstance(stream.turn, SocketTurn)
        assert conn._io.lending is stream.turn
    return turn


async def test_a_get_waiting_alone_reads_the_socket_and_hands_it_back(anyio_backend: str) -> None:
    mine, other = queue(), queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(mine, receipt=True)
            seen: list[bytes] = []
            await conn.subscribe(other, on_message=lambda m: seen.append(m.body), receipt=True)
            got: list[object] = []

            async def get() -> None:
                message = await sub.get()
                assert message is not None
                got.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                if turn is not None:
                    assert turn.caller is not None  # the get() waits on the socket
                await conn.send(mine, "for the get")
            assert got == [b"for the get"]
            if turn is not None:
                assert turn.caller is None  # handed back
            # Nobody waits now but the callback's task: the reader task reads again.
            await conn.send(other, "for the callback", receipt=True)
            with anyio.fail_after(5):
                while not seen:
                    await anyio.sleep(0.01)
            assert seen == [b"for the callback"]
            assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_get_cancelled_right_after_its_bytes_were_read_loses_nothing(
    anyio_backend: str,
) -> None:
    dest = queue()
    with anyio.fail_after(10):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            assert turn is not None
            sub = await conn.subscribe(dest, receipt=True)
            getter: list[asyncio.Task[None]] = []
            read = turn._readable

            def readable() -> None:
                # The loop's callback reads the MESSAGE for the waiting get() and wakes
                # it; the get() is cancelled before it runs, the bytes in its hands.
                read()
                if turn.inbound and turn.caller is not None:
                    getter[0].cancel()

            turn.disarm()
            turn._readable = readable  # type: ignore[method-assign]
            outcome: list[object] = []

            async def get() -> None:
                task = asyncio.current_task()
                assert task is not None
                getter.append(task)
                try:
                    outcome.append(await sub.get())
                except asyncio.CancelledError:
                    if sys.version_info >= (3, 11):
                        task.uncancel()
                    outcome.append("cancelled")

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                assert turn.caller is not None
                await conn.send(dest, "read by the cancelled get()")
            assert outcome == ["cancelled"]
            assert not turn.inbound
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"read by the cancelled get()"
            await conn.send(dest, "next", receipt=True)  # and the connection goes on
            message = await sub.get(timeout=5)
            assert message is not None
            assert message.body == b"next"


async def test_a_read_through_that_fills_an_inbox_stops_the_reading(anyio_backend: str) -> None:
    # A get() on one subscription reads through while another's inbox fills: the pause
    # is handed to the reader task, which reads no more until the inbox has room (the
    # bytes stay in the socket), then everything comes, in order.
    waiting_for, flooded = queue(), queue()
    count, body = 60, b"y" * 64 * 1024
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(waiting_for, receipt=True)
            slow = await conn.subscribe(flooded, max_pending=2, receipt=True)
            got: list[object] = []

            async def get() -> None:
                message = await sub.get()
                assert message is not None
                got.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                if turn is not None:
                    assert turn.caller is not None
                async with stompy.AsyncConnection(broker.url) as publisher:
                    for i in range(count):
                        await publisher.send(flooded, body + str(i).encode())
                    await publisher.send(waiting_for, "behind the flood", receipt=True)
                raw = conn._io.stream
                assert isinstance(raw, RawSocketStream)
                with anyio.fail_after(5):
                    while not (conn._engine.paused and bytes_waiting(raw.sock)):
                        await anyio.sleep(0.01)
                assert got == []  # its message is behind the unread bytes
                for i in range(count):
                    message = await slow.get(timeout=5)
                    assert message is not None
                    assert message.body == body + str(i).encode()
            assert got == [b"behind the flood"]
            assert conn.failure is None


async def test_two_tasks_waiting_for_receipts_and_a_get_all_get_their_answers(
    anyio_backend: str,
) -> None:
    # One of them reads through (on asyncio), the others wait on their events and are
    # woken by what it routes; as each returns the turn passes on, and nothing waits
    # for bytes nobody reads.
    dest = queue()
    rounds = 50
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            turn = await turn_of(conn, anyio_backend)
            sub = await conn.subscribe(dest, receipt=True)
            done: list[str] = []
            taken: list[bytes] = []

            async def sender(name: str) -> None:
                for i in range(rounds):
                    await conn.send(dest, f"{name}-{i}", receipt=True)
                done.append(name)

            async def getter() -> None:
                for _ in range(2 * rounds):
                    message = await sub.get()
                    assert message is not None
                    taken.append(message.body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(getter)
                tg.start_soon(sender, "a")
                tg.start_soon(sender, "b")
            assert sorted(done) == ["a", "b"]
            for name in ("a", "b"):
                mine = [body for body in taken if body.startswith(name.encode())]
                assert mine == [f"{name}-{i}".encode() for i in range(rounds)]
            if turn is not None:
                assert turn.caller is None
                assert not turn.inbound
            assert conn.failure is None


# -- trio: the socket lent to the calls it answered ---------------------------------------


class HeldBroker:
    """A broker of a few lines on a plain socket, for one connection: CONNECTED at once,
    then each SEND's RECEIPT only when the test lets it go (:meth:`answer`), the
    DISCONNECT's at once; :meth:`push` writes what the test says, :meth:`drop` ends the
    connection."""

    def __init__(self) -> None:
        self.port = 0
        self.stream: anyio.abc.SocketStream | None = None
        self.frames: list[bytes] = []
        self.unanswered: list[bytes] = []  # receipt ids of the SENDs read

    async def answer(self) -> None:
        """Send the RECEIPT of the oldest unanswered SEND (read by now)."""
        assert self.unanswered
        await self.push(b"RECEIPT\nreceipt-id:" + self.unanswered.pop(0) + b"\n\n\0")

    async def drop(self) -> None:
        assert self.stream is not None
        await self.stream.aclose()

    async def push(self, data: bytes) -> None:
        assert self.stream is not None
        await self.stream.send(data)

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        buffer = b""

        async def frame() -> tuple[bytes, dict[bytes, bytes]]:
            nonlocal buffer
            while b"\0" not in buffer:
                buffer += await stream.receive()
            raw, _, buffer = buffer.partition(b"\0")
            head = raw.lstrip(b"\r\n").partition(b"\n\n")[0].split(b"\n")
            return head[0], dict(line.split(b":", 1) for line in head[1:] if b":" in line)

        with contextlib.suppress(
            anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError
        ):
            async with stream:
                await frame()  # CONNECT
                await stream.send(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0")
                self.stream = stream
                while True:
                    command, headers = await frame()
                    self.frames.append(command)
                    receipt = headers.get(b"receipt")
                    if receipt is None:
                        continue
                    if command == b"DISCONNECT":
                        await stream.send(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\0")
                    else:
                        self.unanswered.append(receipt)


@contextlib.asynccontextmanager
async def held_broker() -> AsyncIterator[HeldBroker]:
    broker = HeldBroker()
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        broker.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, broker.handle)
        try:
            yield broker
        finally:
            tg.cancel_scope.cancel()


class Scripted(NamedTuple):
    broker: HeldBroker
    conn: stompy.AsyncConnection


@contextlib.asynccontextmanager
async def scripted(**options: Any) -> AsyncIterator[Scripted]:
    """:func:`held_broker` and a connection to it without heart-beats (``options`` go to
    it), its tasks settled; all of it within 10 s."""
    with anyio.fail_after(10):
        async with held_broker() as broker:
            url = f"stomp://127.0.0.1:{broker.port}"
            async with stompy.AsyncConnection(url, heartbeats=(0, 0), **options) as conn:
                await settled()
                yield Scripted(broker, conn)


def lent(conn: stompy.AsyncConnection) -> SocketTurn:
    """The trio connection's socket turn, which the reader task lends to the calls."""
    lending = conn._io.lending
    assert isinstance(lending, SocketTurn)
    return lending


async def sending(
    conn: stompy.AsyncConnection, count: int, outcome: list[object], **options: Any
) -> None:
    """``count`` receipt round trips one after the other, each outcome noted."""
    for i in range(count):
        try:
            await conn.send("/queue/held", f"m{i}", receipt=True, **options)
        except stompy.StompError as exc:
            outcome.append(type(exc))
            return
        outcome.append(i)


async def settled() -> None:
    await anyio.wait_all_tasks_blocked()


def state(lending: SocketTurn) -> tuple[bool, bool]:
    """Whether the reader task lent the socket, and whether a call reads it."""
    return lending.lent, lending.reading


async def the_second_reads_through(broker: HeldBroker, lending: SocketTurn) -> None:
    """With :func:`sending` under way: the broker answers the first send, and the second
    then waits on the socket the reader task lent it."""
    await settled()
    await broker.answer()
    await settled()
    assert state(lending) == (True, True)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_calls_after_an_answer_wait_on_the_socket_the_reader_lent(
    anyio_backend: str,
) -> None:
    # The reader task reads the first RECEIPT and, having woken a call, lends the socket:
    # the calls that follow, one after the other, wait on it themselves and read their
    # RECEIPTs; the last one hands it back, and the reader task reads what comes next.
    async with scripted() as (broker, conn):
        lending = lent(conn)
        assert state(lending) == (False, False)  # the reader task waits on the socket
        outcome: list[object] = []
        seen: list[bytes] = []
        sub = await conn.subscribe("/queue/pushed", on_message=lambda m: seen.append(m.body))
        async with anyio.create_task_group() as tg:
            tg.start_soon(sending, conn, 3, outcome)
            await settled()
            assert state(lending) == (False, False)  # the first waits for the reader
            await broker.answer()
            await settled()
            assert outcome == [0]
            assert state(lending) == (True, True)  # the second reads through
            await broker.answer()
            await settled()
            assert outcome == [0, 1]
            assert state(lending) == (True, True)  # and the third
            await broker.answer()
        assert outcome == [0, 1, 2]
        await settled()
        assert state(lending) == (False, False)  # handed back
        await broker.push(
            b"MESSAGE\nsubscription:" + sub.id.encode() + b"\nmessage-id:1\n"
            b"destination:/queue/pushed\n\nread by the reader task\0"
        )
        with anyio.fail_after(5):
            while not seen:
                await anyio.sleep(0.01)
        assert seen == [b"read by the reader task"]
        assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_a_call_reading_through_is_woken_at_its_deadline(anyio_backend: str) -> None:
    # The timer ends the socket wait of a call whose RECEIPT does not come: it raises
    # ReceiptTimeout on time, the socket goes back to the reader task, and the next
    # round trip is answered.
    async with scripted(receipt_timeout=0.5) as (broker, conn):
        lending = lent(conn)
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(sending, conn, 2, outcome)
            await the_second_reads_through(broker, lending)  # and is not answered
            started = anyio.current_time()
        assert outcome == [0, stompy.ReceiptTimeout]
        assert anyio.current_time() - started < 2
        await settled()
        assert state(lending) == (False, False)
        await broker.answer()  # the late RECEIPT
        async with anyio.create_task_group() as tg:
            tg.start_soon(sending, conn, 1, outcome)
            await settled()
            await broker.answer()  # and the next one's
        assert outcome[2:] == [0]
        assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_the_end_of_the_stream_read_by_a_call_is_the_reader_tasks_to_judge(
    anyio_backend: str,
) -> None:
    # The broker goes away while a call waits on the socket: the call reads the end of
    # the stream and hands it to the reader task, which ends the connection; the call
    # raises ConnectionLost at once, not at its deadline.
    async with scripted(receipt_timeout=5) as (broker, conn):
        lending = lent(conn)
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(sending, conn, 2, outcome)
            await the_second_reads_through(broker, lending)
            started = anyio.current_time()
            await broker.drop()
        assert outcome[0] == 0
        assert isinstance(outcome[1], type)
        assert issubclass(outcome[1], stompy.ConnectionLost)
        assert anyio.current_time() - started < 2
        assert isinstance(conn.failure, stompy.ConnectionLost)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_close_from_another_task_ends_a_call_reading_through(anyio_backend: str) -> None:
    # close() wakes the call waiting on the socket (the connection changed); the
    # goodbye is answered at once, not at the call's deadline.
    async with scripted(receipt_timeout=5) as (broker, conn):
        lending = lent(conn)
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(sending, conn, 2, outcome)
            await the_second_reads_through(broker, lending)
            started = anyio.current_time()
            await conn.close()
        # The DISCONNECT's RECEIPT, read by the call, confirms its SEND too.
        assert outcome == [0, 1]
        assert anyio.current_time() - started < 2
        assert broker.frames[-1] == b"DISCONNECT"


def pushed(sub: stompy.AsyncSubscription, body: bytes, number: int) -> bytes:
    return (
        b"MESSAGE\nsubscription:"
        + sub.id.encode()
        + b"\nmessage-id:"
        + str(number).encode()
        + b"\ndestination:/queue/pushed\n\n"
        + body
        + b"\0"
    )


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_gets_after_a_message_wait_on_the_socket_the_reader_lent(
    anyio_backend: str,
) -> None:
    # As for calls: the reader task reads the first MESSAGE and lends the socket to the
    # get() it woke; the get() that follows reads its message itself and hands the
    # socket back; one cancelled while it waits on the socket hands it back too, and
    # loses nothing.
    async with scripted() as (broker, conn):
        lending = lent(conn)
        # No time-paced checkpoint in the get()s: on a loaded machine one came between
        # a get()'s hand-back and the next get(), the reader task took the socket back
        # first, and the next get() waited for it as the first did (1 run in 12).
        conn._io.yield_at = float("inf")
        sub = await conn.subscribe("/queue/pushed")
        got: list[object] = []

        async def get(count: int) -> None:
            for _ in range(count):
                message = await sub.get()
                assert message is not None
                got.append(message.body)
            await anyio.sleep_forever()  # until cancelled, and not in a get()

        async with anyio.create_task_group() as tg:
            tg.start_soon(get, 2)
            await settled()
            assert state(lending) == (False, False)  # the first waits for the reader
            await broker.push(pushed(sub, b"first", 1))
            await settled()
            assert got == [b"first"]
            assert state(lending) == (True, True)  # the second reads through
            await broker.push(pushed(sub, b"second", 2))
            await settled()
            assert got == [b"first", b"second"]
            assert state(lending) == (False, False)  # handed back
            tg.cancel_scope.cancel()
        async with anyio.create_task_group() as tg:
            tg.start_soon(get, 2)
            await settled()
            await broker.push(pushed(sub, b"third", 3))
            await settled()
            assert state(lending) == (True, True)
            tg.cancel_scope.cancel()  # the get() waiting on the socket
        await settled()
        assert state(lending) == (False, False)
        await broker.push(pushed(sub, b"fourth", 4))  # read by the reader task
        message = await sub.get(timeout=5)
        assert message is not None
        assert message.body == b"fourth"
        assert got == [b"first", b"second", b"third"]
        assert conn.failure is None


def flood(sub: stompy.AsyncSubscription, first: int, count: int) -> bytes:
    """``count`` MESSAGEs for ``sub`` in one write, numbered from ``first``."""
    return b"".join(pushed(sub, f"m{i}".encode(), i) for i in range(first, first + count))


async def taken(sub: stompy.AsyncSubscription, count: int) -> list[bytes | None]:
    """``count`` get()s one after the other, each waiting at most 2 s."""
    bodies: list[bytes | None] = []
    for _ in range(count):
        message = await sub.get(timeout=2)
        bodies.append(None if message is None else message.body)
    return bodies


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_room_made_before_the_reader_task_saw_a_pause_read_through_is_kept(
    anyio_backend: str,
) -> None:
    # A call reading through fills an inbox: the pause goes to the reader task, which
    # has not run yet when the consumer empties the inbox, without a checkpoint, and then
    # waits for more. The room it made then still counts: the reader task moves the
    # backlog at once (it waited for room nobody would make again, the get() its 2 s).
    async with scripted() as (broker, conn):
        lending = lent(conn)
        slow = await conn.subscribe("/queue/pushed", max_pending=2)
        conn._io.yield_at = float("inf")  # no time-paced checkpoint in the get()s
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:

            async def send_then_take() -> None:
                await sending(conn, 2, outcome)
                outcome.append(await taken(slow, 4))

            tg.start_soon(send_then_take)
            await the_second_reads_through(broker, lending)
            assert broker.unanswered
            await broker.push(
                flood(slow, 1, 4) + b"RECEIPT\nreceipt-id:" + broker.unanswered.pop(0) + b"\n\n\0"
            )
        assert outcome == [0, 1, [b"m1", b"m2", b"m3", b"m4"]]
        assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_room_made_before_the_reader_task_saw_a_pause_a_get_read_is_kept(
    anyio_backend: str,
) -> None:
    # The same with a get() reading through: its read fills its own inbox, it returns
    # the first message, and the next get()s empty the inbox before the reader task ran.
    async with scripted() as (broker, conn):
        lending = lent(conn)
        slow = await conn.subscribe("/queue/pushed", max_pending=2)
        conn._io.yield_at = float("inf")
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:

            async def take() -> None:
                outcome.extend(await taken(slow, 5))

            tg.start_soon(take)
            await settled()
            await broker.push(flood(slow, 0, 1))  # read by the reader task
            await settled()
            assert state(lending) == (True, True)  # the second get() reads through
            await broker.push(flood(slow, 1, 4))
        assert outcome == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert conn.failure is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_room_made_before_the_reader_task_saw_a_pause_a_get_read_is_kept(
    anyio_backend: str,
) -> None:
    # The same on asyncio, where a get() waiting alone reads through: what it read fills
    # its own inbox, it returns the first message and the next get()s empty the inbox
    # before the reader task, handed the pause, ran.
    async with scripted() as (broker, conn):
        turn = await turn_of(conn, anyio_backend)
        assert turn is not None
        slow = await conn.subscribe("/queue/pushed", max_pending=2)
        conn._io.yield_at = float("inf")  # no time-paced checkpoint in the get()s
        outcome: list[bytes | None] = []
        async with anyio.create_task_group() as tg:

            async def take() -> None:
                outcome.extend(await taken(slow, 4))

            tg.start_soon(take)
            await settled()
            assert turn.caller is not None  # the get() waits on the socket
            await broker.push(flood(slow, 0, 4))
        assert outcome == [b"m0", b"m1", b"m2", b"m3"]
        assert conn.failure is None

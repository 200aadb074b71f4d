"""The front door of a session (issue 34): what a user who misuses a connection, or
uses one after it failed, is told, through the blocking, asyncio and trio clients
against the in-process broker."""

from __future__ import annotations

import traceback
import uuid

import anyio
import pytest

import stompy
from stompy import ClientProtocol, Frame, FrameLimits, encode
from stompy.errors import LocalProtocolError, MessageTooLarge, ServerError, TooLargeForServer
from stompy.testing import run_broker, serve

#: Seconds any wait of these tests may take.
TIMEOUT = 10.0
#: Calls made on a failed connection: the traceback of the last must not have grown.
CALLS = 200
#: Frames a failed call's traceback may have, its cause's included: the call's own
#: few, never one per earlier call.
MOST_FRAMES = 24

ERROR_FRAME = b"ERROR\nmessage:boom\ncontent-type:text/plain\n\nthe details\x00"


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def frames(exc: BaseException) -> int:
    """Frames of ``exc``'s traceback and of the tracebacks of its chain."""
    count = 0
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk down the chain
        if seen is None:
            break
        count += len(traceback.extract_tb(seen.__traceback__))
        seen = seen.__cause__ or seen.__context__
    return count


def check_fresh(errors: list[BaseException], failure: BaseException | None) -> None:
    """Each failed call raised a fresh error, chained to the stored failure, of its
    type, message and attributes, with a traceback that did not grow."""
    assert isinstance(failure, ServerError)
    assert len({id(e) for e in errors}) == len(errors)
    for error in errors:
        assert error is not failure
        assert type(error) is ServerError
        assert error.__cause__ is failure
        assert str(error) == str(failure) == "boom: the details"  # the body says more (issue 38)
        assert error.message == "boom"
        assert error.body == b"the details"
        assert error.frame is failure.frame
    assert frames(errors[-1]) <= MOST_FRAMES, frames(errors[-1])
    assert frames(errors[-1]) <= frames(errors[0]) + 2


# -- point 7: a fresh exception for each call after a failure ----------------------------


def test_each_call_after_a_failure_raises_a_fresh_error_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest)
        assert conn.session is not None
        broker.send_raw(conn.session, ERROR_FRAME)
        with pytest.raises(ServerError):
            for _ in range(1000):  # bounded: the ERROR ends the connection at once
                conn.send(dest, "x", receipt=True)
        errors: list[BaseException] = []
        for _ in range(CALLS):
            try:
                conn.send(dest, "x")
            except ServerError as exc:
                errors.append(exc)
        for _ in range(3):
            try:
                sub.get(timeout=1)
            except ServerError as exc:
                errors.append(exc)
        assert len(errors) == CALLS + 3
        check_fresh(errors, conn.failure)


@pytest.mark.anyio
async def test_each_call_after_a_failure_raises_a_fresh_error_async() -> None:
    dest = queue()
    errors: list[BaseException] = []
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest)
            assert conn.session is not None
            broker.send_raw(conn.session, ERROR_FRAME)
            with pytest.raises(ServerError):
                for _ in range(1000):  # bounded: the ERROR ends it at once
                    await conn.send(dest, "x", receipt=True)
            for _ in range(CALLS):
                try:
                    await conn.send(dest, "x")
                except ServerError as exc:
                    errors.append(exc)
            for _ in range(3):
                try:
                    await sub.get(timeout=1)
                except ServerError as exc:
                    errors.append(exc)
            failure = conn.failure
    assert len(errors) == CALLS + 3
    check_fresh(errors, failure)


def test_a_fresh_copy_keeps_what_an_error_says() -> None:
    """Errors whose ``__init__`` does not take their own args back are copied too."""
    closed = stompy.errors.WebSocketClosed(1011, "going away")
    again = stompy.errors._again(closed)
    assert again is not closed
    assert (type(again), str(again), again.code, again.reason) == (
        type(closed),
        str(closed),
        1011,
        "going away",
    )
    lost = stompy.errors.ConnectionLost("gone")
    assert str(stompy.errors._again(lost)) == "gone"


# -- point 6: a message answered twice is refused, and the connection lives on -------------


def refused_twice(error: BaseException, message: stompy.Message | stompy.AsyncMessage) -> None:
    assert isinstance(error, LocalProtocolError)
    assert repr(message.message_id) in str(error)
    assert "already acknowledged" in str(error)


def test_a_second_answer_to_a_message_is_refused_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        for body in ("a", "b"):
            conn.send(dest, body)
        first, second = sub.get(timeout=TIMEOUT), sub.get(timeout=TIMEOUT)
        assert first is not None
        assert second is not None
        first.ack(receipt=True)
        for answer in (first.ack, first.nack):
            with pytest.raises(LocalProtocolError) as info:
                answer()
            refused_twice(info.value, first)
        second.nack(receipt=True)
        with pytest.raises(LocalProtocolError) as info:
            second.ack(receipt=True)
        refused_twice(info.value, second)
        # The connection lives on: the broker saw one answer each.
        conn.send(dest, "c", receipt=True)
        assert conn.connected
        assert conn.failure is None
        assert (broker.stats.messages_acked, broker.stats.messages_nacked) == (1, 1)


def test_a_cumulative_ack_answers_every_earlier_message_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest, ack="client")
        for body in "abc":
            conn.send(dest, body)
        got = [sub.get(timeout=TIMEOUT) for _ in range(3)]
        a, b, c = (m for m in got if m is not None)
        b.ack(receipt=True)  # a and b
        for message in (a, b):
            with pytest.raises(LocalProtocolError) as info:
                message.ack()
            refused_twice(info.value, message)
        c.ack(receipt=True)  # after b: still unanswered
        assert conn.failure is None
        broker.wait_until(lambda: broker.unacked_count(dest) == 0)
        assert broker.stats.messages_acked == 3


def test_an_aborted_transaction_undoes_its_answers_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        conn.send(dest, "a")
        message = sub.get(timeout=TIMEOUT)
        assert message is not None
        tx = conn.transaction()
        tx.ack(message)
        with pytest.raises(LocalProtocolError) as info:
            message.ack()  # answered in the open transaction
        refused_twice(info.value, message)
        assert "tx" in str(info.value)
        tx.abort(receipt=True)
        with conn.transaction() as again:  # the ABORT undid the ACK: it may come again
            again.ack(message)
        with pytest.raises(LocalProtocolError):
            message.ack()  # committed: final
        conn.send(queue(), "b", receipt=True)
        assert conn.failure is None
        broker.wait_until(lambda: broker.unacked_count(dest) == 0)


def test_acking_an_auto_message_is_refused_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest)
        conn.send(dest, "a")
        message = sub.get(timeout=TIMEOUT)
        assert message is not None
        for answer in (message.ack, message.nack):
            with pytest.raises(LocalProtocolError, match="'auto', so the broker took it as ackn"):
                answer()
        conn.send(dest, "b", receipt=True)
        assert conn.failure is None


@pytest.mark.anyio
async def test_a_second_answer_to_a_message_is_refused_async() -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest, ack="client")
            for body in "abc":
                await conn.send(dest, body)
            got = [await sub.get(timeout=TIMEOUT) for _ in range(3)]
            a, b, c = (m for m in got if m is not None)
            await b.ack(receipt=True)
            for message in (a, b):
                with pytest.raises(LocalProtocolError) as info:
                    await message.nack()
                refused_twice(info.value, message)
            tx = await conn.transaction()
            await tx.ack(c)
            with pytest.raises(LocalProtocolError) as info:
                await c.ack()
            refused_twice(info.value, c)
            await tx.abort(receipt=True)
            await c.ack(receipt=True)
            with pytest.raises(LocalProtocolError) as info:
                await c.ack()
            refused_twice(info.value, c)
            await conn.send(queue(), "d", receipt=True)
            assert conn.failure is None
            await broker.wait_until(lambda: broker.unacked_count(dest) == 0)


# -- point 10: smaller things a user runs into ----------------------------------------------

#: Runs of the clean-exit check: the count was wrong in about 23 of 30 before.
RUNS = 30


def test_a_clean_exit_is_no_open_connection_right_after_blocking() -> None:
    with run_broker() as broker:
        for _ in range(RUNS):
            with stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
                assert broker.stats.connections_open == 1
            assert conn.close() is True  # the DISCONNECT's receipt came
            assert broker.stats.connections_open == 0
        assert broker.stats.connections_opened == RUNS


@pytest.mark.anyio
async def test_a_clean_exit_is_no_open_connection_right_after_async() -> None:
    with anyio.fail_after(TIMEOUT * 3):
        async with serve() as broker:
            for _ in range(RUNS):
                async with stompy.AsyncConnection(broker.url):
                    assert broker.stats.connections_open == 1
                assert broker.stats.connections_open == 0


def test_a_call_before_the_connection_is_open_says_how_to_open_it_blocking() -> None:
    with run_broker() as broker:
        conn = stompy.Connection(broker.url)
        for call in (
            lambda: conn.send("/queue/a", "x"),
            lambda: conn.send("/queue/a", "x", receipt=True),
            lambda: conn.subscribe("/queue/a"),
            conn.transaction,
        ):
            with pytest.raises(LocalProtocolError) as info:
                call()
            assert "call connect() first" in str(info.value)
            assert "`with Connection(...) as conn:`" in str(info.value)
        conn.connect()  # the refusals changed nothing
        conn.send("/queue/a", "x", receipt=True)
        conn.close()


@pytest.mark.anyio
async def test_a_call_before_the_connection_is_open_says_how_to_open_it_async() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker:
            conn = stompy.AsyncConnection(broker.url)
            with pytest.raises(LocalProtocolError) as info:
                await conn.send("/queue/a", "x")
            assert "`async with AsyncConnection(...) as conn:`" in str(info.value)
            assert "connect()" not in str(info.value)


def test_a_message_taking_call_refuses_anything_else_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        conn.send(dest, "a")
        message = sub.get(timeout=TIMEOUT)
        assert message is not None
        tx = conn.transaction()
        for answer, name in ((tx.ack, "Transaction.ack"), (tx.nack, "Transaction.nack")):
            with pytest.raises(TypeError, match=rf"{name}\(\) argument 'message' must be a "):
                answer("abc")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="argument 'transaction' must be"):
            message.ack(5)  # type: ignore[arg-type]
        tx.ack(message)  # the refusals changed nothing
        tx.commit()
        assert conn.failure is None
        broker.wait_until(lambda: broker.unacked_count(dest) == 0)


@pytest.mark.anyio
async def test_a_message_taking_call_refuses_anything_else_async() -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            sub = await conn.subscribe(dest, ack="client-individual")
            await conn.send(dest, "a")
            message = await sub.get(timeout=TIMEOUT)
            assert message is not None
            tx = await conn.transaction()
            with pytest.raises(TypeError, match=r"AsyncTransaction.ack\(\) argument 'message'"):
                await tx.ack("abc")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="argument 'transaction' must be"):
                await message.nack(b"tx")  # type: ignore[arg-type]
            await tx.ack(message)
            await tx.commit()
            await broker.wait_until(lambda: broker.unacked_count(dest) == 0)


# -- point 8: a frame too large for the broker -------------------------------------------

LIMIT = 1000
SMALL = FrameLimits(max_body=LIMIT, max_header_line=200, max_header_block=400)


def check_refused(error: MessageTooLarge, size: int) -> None:
    assert type(error) is MessageTooLarge
    assert (error.limit, error.size) == (LIMIT, size)
    assert f"a body of {size} bytes is over the broker's limit of {LIMIT} bytes" in str(error)
    assert "FrameLimits(max_body=...)" in str(error)
    assert error.option in str(error)


def test_a_body_over_the_announced_limit_is_refused_before_it_goes_out_blocking() -> None:
    dest = queue()
    with (
        run_broker(limits=SMALL) as broker,
        stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn,
    ):
        bodies: list[tuple[bytes | str, int]] = [(b"x" * (LIMIT + 1), LIMIT + 1), ("é" * 501, 1002)]
        for body, size in bodies:
            for receipt in (False, True):
                with pytest.raises(MessageTooLarge) as info:
                    conn.send(dest, body, receipt=receipt)
                check_refused(info.value, size)
        with pytest.raises(MessageTooLarge), conn.transaction() as tx:
            tx.send(dest, b"x" * (LIMIT + 1))
        conn.send(dest, b"x" * LIMIT, receipt=True)  # the connection lives on
        assert conn.failure is None
        assert broker.queue_depth(dest) == 1
        assert broker.stats.errors_sent == 0


@pytest.mark.anyio
async def test_a_body_over_the_announced_limit_is_refused_before_it_goes_out_async() -> None:
    dest = queue()
    with anyio.fail_after(TIMEOUT):
        async with serve(limits=SMALL) as broker, stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(MessageTooLarge) as info:
                await conn.send(dest, b"x" * (LIMIT + 5), receipt=True)
            check_refused(info.value, LIMIT + 5)
            await conn.send(dest, b"x" * LIMIT, receipt=True)
            assert broker.queue_depth(dest) == 1
            assert broker.stats.errors_sent == 0


def test_a_frame_the_broker_refuses_as_too_large_says_so_blocking() -> None:
    dest = queue()
    big = {"h": "y" * 300}  # a header line over the broker's limit: only it can tell
    with (
        run_broker(limits=SMALL) as broker,
        stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn,
    ):
        with pytest.raises(MessageTooLarge) as info:
            conn.send(dest, "x", headers=big, receipt=True)
        error = info.value
        assert isinstance(error, TooLargeForServer)
        assert isinstance(error, ServerError)
        assert error.limit == LIMIT
        assert str(error).startswith("frame too large: the broker refused a frame as too large")
        assert "header line over the limit of 200 bytes" in str(error)
        assert "FrameLimits(max_body=...)" in str(error)
        assert error.frame is not None
        assert isinstance(conn.failure, TooLargeForServer)


def test_a_frame_refused_as_too_large_is_not_sent_again_after_a_reconnect() -> None:
    dest = queue()
    reconnect = stompy.Reconnect(initial_delay=0.01, max_delay=0.01, send_timeout=TIMEOUT)
    with (
        run_broker(limits=SMALL) as broker,
        stompy.Connection(broker.url, receipt_timeout=TIMEOUT, reconnect=reconnect) as conn,
    ):
        with pytest.raises(TooLargeForServer) as info:
            conn.send(dest, "x", headers={"h": "y" * 300}, receipt=True)
        assert "header line over the limit" in str(info.value)
        assert broker.stats.errors_sent == 1  # sent once, not again on each new connection
        conn.send(dest, "small", receipt=True)  # reconnected: the connection lives on
        assert broker.queue_depth(dest) == 1


#: Announced limits: the one well-formed, and what is no limit (Arabic-Indic digits too).
ANNOUNCED = ["1000", " 1000", "lots", "1e3", "\u0661\u0660\u0660\u0660", None]


@pytest.mark.parametrize("announced", ANNOUNCED)
def test_the_core_takes_the_announced_limit_and_refuses_a_larger_body(
    announced: str | None,
) -> None:
    """Sans-IO: the limit comes from CONNECTED's max-body-length (a well-formed one
    only); a larger SEND is refused with nothing queued and no id taken."""
    proto = ClientProtocol()
    proto.connect("/")
    proto.data_to_send()
    headers = [("version", "1.2")]
    if announced is not None:
        headers.append(("max-body-length", announced))
    proto.receive_data(encode(Frame("CONNECTED", tuple(headers)), "1.2"))
    assert proto.next_event() is not None
    known = announced == "1000"
    assert proto.max_body == (LIMIT if known else None)
    for body in (b"x" * (LIMIT + 1), "x" * (LIMIT + 1)):
        for options in ({}, {"receipt": True}, {"headers": {"a": "b"}}):
            if known:
                with pytest.raises(MessageTooLarge):
                    proto.send("/queue/a", body, **options)
                assert proto.data_to_send() == b""
            else:
                proto.send("/queue/a", body, **options)
                assert proto.data_to_send()
    assert proto.new_receipt_id() == ("r-1" if known else "r-3")
    proto.send("/queue/a", b"x" * LIMIT)
    assert proto.data_to_send()

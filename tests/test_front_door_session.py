"""The front door of a session (issue 34): what a user who misuses a connection, or
uses one after it failed, is told, through the blocking, asyncio and trio clients
against the in-process broker."""

from __future__ import annotations

import traceback
import uuid

import anyio
import pytest

import stompy
from stompy.errors import ServerError
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
        assert str(error) == str(failure) == "boom"
        assert error.message == "boom"
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

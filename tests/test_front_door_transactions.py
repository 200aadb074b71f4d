"""A transaction's ``abort()`` after its ``commit()``: the broker has committed it, and
an abort that does nothing and raises nothing says it rolled back. It raises
``LocalProtocolError`` (errors.md said so), in the blocking, asyncio and trio clients
alike; an abort after a commit that raised, or after an abort, still does nothing."""

from __future__ import annotations

import uuid

import anyio
import pytest

import stompy
from stompy.errors import LocalProtocolError, ServerError
from stompy.testing import run_broker

#: Seconds any wait of these tests may take.
TIMEOUT = 10.0


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def test_abort_after_commit_is_refused_blocking() -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        tx = conn.transaction()
        conn.send(dest, "kept", transaction=tx)
        tx.commit()
        with pytest.raises(LocalProtocolError, match=r"already committed: abort\(\) cannot undo"):
            tx.abort()
        again = conn.transaction()
        again.abort()
        again.abort()  # nothing left to abort: nothing happens
        assert broker.queue_depth(dest) == 1
        # The end of a block that committed and then raised aborts quietly.
        with pytest.raises(KeyError), conn.transaction() as block:
            block.commit()
            raise KeyError("after the commit")


@pytest.mark.anyio
async def test_abort_after_commit_is_refused_async() -> None:
    dest = queue()
    with run_broker() as broker, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
            tx = await conn.transaction()
            await conn.send(dest, "kept", transaction=tx)
            await tx.commit()
            with pytest.raises(LocalProtocolError, match="already committed"):
                await tx.abort()
            again = await conn.transaction()
            await again.abort()
            await again.abort()
            assert broker.queue_depth(dest) == 1
            with pytest.raises(KeyError):
                async with conn.transaction() as block:
                    await block.commit()
                    raise KeyError("after the commit")


def test_abort_after_a_commit_that_raised_does_nothing() -> None:
    """``try: ... tx.commit() except: tx.abort(); raise`` keeps the commit's error: the
    broker refused the COMMIT here (a transaction it does not know)."""
    with run_broker() as broker:
        conn = stompy.Connection(broker.url, receipt_timeout=TIMEOUT)
        conn.connect()
        tx = conn.transaction()
        assert conn.session is not None
        broker.send_raw(conn.session, b"ERROR\nmessage:no such transaction\n\n\x00")
        with pytest.raises(ServerError):
            try:
                tx.commit()
            except ServerError:
                tx.abort()
                raise
        conn.close()

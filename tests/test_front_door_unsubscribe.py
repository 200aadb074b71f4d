"""``unsubscribe(receipt=True)`` when the connection ends before the receipt: the
subscription ended with its connection, and is not made again on the next one, so
the unsubscription took effect. It returns (it raised ``ConnectionLost``, "whether the
frame took effect is unknown"), in the blocking, asyncio and trio clients alike; the
rule is the engine's, shown first with a fake clock."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import pytest

import stompy
from stompy._engine.calls import Call
from stompy.errors import ConnectionLost
from tests.test_calls import drive, time_passes
from tests.test_lenient import Peer
from tests.test_session import T0, establish, make_session

#: Seconds any wait of these tests may take.
TIMEOUT = 10.0
#: Reconnect at once: the second connection is the test's.
QUICK = stompy.Reconnect(initial_delay=0.05, max_delay=0.05, jitter=0.0)


# -- the rule, with a fake clock -----------------------------------------------------------


@pytest.mark.parametrize("reconnect", [True, False])
def test_a_connection_lost_before_the_unsubscribes_receipt_ends_it_all_the_same(
    reconnect: bool,
) -> None:
    session = make_session(reconnect=stompy.Reconnect() if reconnect else None)
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, None, False).inbox
    session.outgoing.clear()

    def cut(wait: object) -> float:
        session.lost(ConnectionLost("cut"))
        return T0 + 1

    result, waits = drive(Call(session, T0).unsubscribe(inbox, True), cut)
    assert result is None
    assert len(waits) == 1  # it waited for the receipt, then the connection ended
    assert not inbox.active
    assert "s" not in session.delivery.inboxes  # not made again on the next connection


def test_an_unsubscribe_after_the_connection_ended_before_the_verdict_sends_nothing() -> None:
    """The transport saw the end (an ERROR, a cut) and has not yet chosen between a
    reconnect and failing: the UNSUBSCRIBE went to a dead connection, and the call
    waited for a receipt that could not come."""
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, None, False).inbox
    session.flush(T0)
    session.outgoing.clear()
    session.saw_end(ConnectionLost("cut"))
    result, waits = drive(Call(session, T0).unsubscribe(inbox, True), time_passes)
    assert result is None
    assert waits == []
    assert not session.outgoing
    assert not inbox.active


# -- the clients ------------------------------------------------------------------------


@contextmanager
def two_connections(first: Callable[[Peer], None], second: Callable[[Peer], None]) -> Iterator[str]:
    """Serve the first connection a client makes with ``first``, the next with
    ``second``; yield the URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for script in (first, second):
                sock, _ = listener.accept()
                with sock:
                    script(Peer(sock))
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"stomp://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        thread.join(TIMEOUT * 2)
        listener.close()
    assert not thread.is_alive()
    if failures:
        raise failures[0]


def drops_at_unsubscribe(peer: Peer) -> None:
    """Confirm each frame, until the UNSUBSCRIBE: then the connection is cut."""
    peer.connected()
    for _ in range(100):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        if frame.command == "UNSUBSCRIBE":
            return
        receipt = frame.get("receipt")
        if receipt is not None:
            peer.send("RECEIPT", ("receipt-id", receipt))
    raise AssertionError("no UNSUBSCRIBE")


def records_until_disconnect(seen: list[str]) -> Callable[[Peer], None]:
    def script(peer: Peer) -> None:
        peer.connected()
        for _ in range(100):
            frame = peer.frame()
            seen.append(frame.command)
            receipt = frame.get("receipt")
            if receipt is not None:
                peer.send("RECEIPT", ("receipt-id", receipt))
            if frame.command == "DISCONNECT":
                return
        raise AssertionError("no DISCONNECT")

    return script


def test_unsubscribe_with_a_receipt_cut_short_by_a_reconnect_returns_blocking() -> None:
    seen: list[str] = []
    with two_connections(drops_at_unsubscribe, records_until_disconnect(seen)) as url:
        with stompy.Connection(url, reconnect=QUICK, receipt_timeout=TIMEOUT) as conn:
            sub = conn.subscribe("/queue/a", receipt=True)
            sub.unsubscribe(receipt=True)
            assert not sub.active
            assert sub.get(timeout=0) is None
            conn.send("/queue/a", "after", receipt=True)  # on the next connection
    assert seen == ["SEND", "DISCONNECT"]  # the subscription was not made again


@pytest.mark.anyio
async def test_unsubscribe_with_a_receipt_cut_short_by_a_reconnect_returns_async() -> None:
    seen: list[str] = []
    with two_connections(drops_at_unsubscribe, records_until_disconnect(seen)) as url:
        with anyio.fail_after(TIMEOUT):
            async with stompy.AsyncConnection(
                url, reconnect=QUICK, receipt_timeout=TIMEOUT
            ) as conn:
                sub = await conn.subscribe("/queue/a", receipt=True)
                await sub.unsubscribe(receipt=True)
                assert not sub.active
                assert await sub.get(timeout=0) is None
                await conn.send("/queue/a", "after", receipt=True)
    assert seen == ["SEND", "DISCONNECT"]

"""``close()`` while other threads or tasks wait on the connection (issue 39, points 5
and 6), through the blocking, asyncio and trio clients against a raw server on the
loopback interface (``tests.test_lenient.scripted``), which answers as the test needs:
late, out of step, or not at all.

* A call waiting for its receipt (a send, a commit, an ack) when ``close()`` begins:
  the DISCONNECT's receipt means the broker received every frame before it (STOMP 1.2,
  RECEIPT), so the call returns as confirmed; without it, it raises
  :class:`~stompy.errors.ClosedBeforeReceipt` (the outcome is unknown), never "lost".
* A ``get()`` waiting for a message returns as soon as ``close()`` begins, also when the
  broker stopped answering (the goodbye then waits out ``receipt_timeout``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import pytest

import stompy
from stompy.errors import ConnectionLost, StompError
from stompy.testing import run_broker
from tests.test_lenient import TIMEOUT, Peer, scripted

#: The frames a racer sends with a receipt: a SEND, a COMMIT, an ACK.
RACERS = ("send", "commit", "ack")


class Held:
    """What a server that holds its receipts saw: set once every racer's frame came."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.receipts: list[str] = []


def holds_receipts(peer: Peer, held: Held, answer: str) -> None:
    """A broker slow to confirm: it delivers one message to the first SUBSCRIBE, holds
    the receipts of the racers' frames until the DISCONNECT comes, then answers as
    ``answer`` says: ``"each"`` (each receipt, the first alone and the rest a moment
    later, then the DISCONNECT's), ``"goodbye"`` (only the DISCONNECT's receipt) or
    ``"none"`` (it closes the connection, unanswered)."""
    peer.connected()
    for _ in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        receipt = frame.get("receipt")
        if frame.command == "SUBSCRIBE":
            peer.send(
                "MESSAGE",
                ("subscription", frame.get("id") or ""),
                ("message-id", "m-1"),
                ("ack", "a-1"),
                ("destination", "/queue/in"),
                body=b"ack me",
            )
        elif frame.command == "DISCONNECT":
            assert receipt is not None
            if answer == "each":
                first, *rest = held.receipts
                peer.send("RECEIPT", ("receipt-id", first))
                time.sleep(0.3)  # the first alone wakes every waiter
                for rid in rest:
                    peer.send("RECEIPT", ("receipt-id", rid))
            if answer != "none":
                peer.send("RECEIPT", ("receipt-id", receipt))
            return
        elif receipt is not None and frame.command in ("SEND", "COMMIT", "ACK"):
            held.receipts.append(receipt)
            if len(held.receipts) == len(RACERS):
                held.ready.set()
    raise AssertionError("more than 1,000 frames")


def check_outcomes(outcomes: dict[str, BaseException | None], answer: str) -> None:
    """Confirmed when the broker confirmed the DISCONNECT; else unknown, never lost."""
    assert sorted(outcomes) == sorted(RACERS), outcomes
    for name, outcome in outcomes.items():
        if answer == "none":
            assert isinstance(outcome, stompy.errors.ClosedBeforeReceipt), (name, outcome)
            assert isinstance(outcome, ConnectionLost)  # caught where ConnectionLost was
            assert "unknown" in str(outcome), outcome
        else:
            assert outcome is None, (name, outcome)


@pytest.mark.parametrize("answer", ["each", "goodbye", "none"])
def test_calls_waiting_for_receipts_when_close_begins(answer: str) -> None:
    held = Held()
    outcomes: dict[str, BaseException | None] = {}

    def race(name: str, call: Callable[[], object]) -> None:
        try:
            call()
            outcomes[name] = None
        except StompError as exc:
            outcomes[name] = exc

    with (
        scripted(partial(holds_receipts, held=held, answer=answer)) as url,
        stompy.Connection(url, receipt_timeout=TIMEOUT) as conn,
    ):
        sub = conn.subscribe("/queue/in", ack="client-individual")
        message = sub.get(timeout=TIMEOUT)
        assert message is not None
        tx = conn.transaction()
        tx.send("/queue/out", "in a transaction")
        calls: dict[str, Callable[[], object]] = {
            "send": partial(conn.send, "/queue/out", "racing", receipt=True),
            "commit": tx.commit,
            "ack": partial(message.ack, receipt=True),
        }
        threads = [threading.Thread(target=race, args=item) for item in calls.items()]
        for thread in threads:
            thread.start()
        assert held.ready.wait(TIMEOUT)
        clean = conn.close()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive()
    assert clean is (answer != "none")
    check_outcomes(outcomes, answer)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["each", "goodbye", "none"])
async def test_calls_waiting_for_receipts_when_close_begins_async(answer: str) -> None:
    held = Held()
    outcomes: dict[str, BaseException | None] = {}

    async def race(name: str, call: Callable[[], Awaitable[object]]) -> None:
        try:
            await call()
            outcomes[name] = None
        except StompError as exc:
            outcomes[name] = exc

    with scripted(partial(holds_receipts, held=held, answer=answer)) as url:
        with anyio.fail_after(TIMEOUT * 2):
            async with stompy.AsyncConnection(url, receipt_timeout=TIMEOUT) as conn:
                sub = await conn.subscribe("/queue/in", ack="client-individual")
                message = await sub.get(timeout=TIMEOUT)
                assert message is not None
                tx = await conn.transaction()
                await tx.send("/queue/out", "in a transaction")
                calls: dict[str, Callable[[], Awaitable[object]]] = {
                    "send": partial(conn.send, "/queue/out", "racing", receipt=True),
                    "commit": tx.commit,
                    "ack": partial(message.ack, receipt=True),
                }
                async with anyio.create_task_group() as tg:
                    for name, call in calls.items():
                        tg.start_soon(race, name, call)
                    assert await anyio.to_thread.run_sync(held.ready.wait, TIMEOUT)
                    clean = await conn.close()
    assert clean is (answer != "none")
    check_outcomes(outcomes, answer)


def stops_answering(peer: Peer, release: threading.Event) -> None:
    """A broker that stops answering at the DISCONNECT: no receipt, the connection kept
    open until ``release`` is set (then closed, so the test need not wait out the
    goodbye's receipt_timeout)."""
    peer.connected()
    for _ in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        if frame.command == "DISCONNECT":
            assert release.wait(TIMEOUT * 2)
            return
    raise AssertionError("more than 1,000 frames")


#: The goodbye's bound: a get() released only at its end would take this long.
SLOW_RECEIPT = 8.0
#: A get() released as close() begins returns well within this.
AT_ONCE = 3.0


def test_get_returns_as_close_begins() -> None:
    release = threading.Event()
    returned: list[tuple[object, float]] = []
    with scripted(partial(stops_answering, release=release)) as url:
        conn = stompy.Connection(url, receipt_timeout=SLOW_RECEIPT)
        conn.connect()
        sub = conn.subscribe("/queue/idle")

        def get() -> None:
            try:
                got: object = sub.get()
            except StompError as exc:
                got = exc
            returned.append((got, time.monotonic()))

        getters = [threading.Thread(target=get) for _ in range(2)]
        for thread in getters:
            thread.start()
        time.sleep(0.2)  # both wait in get()
        began = time.monotonic()
        closing = threading.Thread(target=conn.close)
        closing.start()
        for thread in getters:
            thread.join(AT_ONCE)
        release.set()  # the broker's end: close() returns
        closing.join(TIMEOUT)
        assert not closing.is_alive()
    assert len(returned) == 2, "get() still waits after close() began"
    for got, when in returned:
        assert got is None
        assert when - began < AT_ONCE


@pytest.mark.anyio
async def test_get_returns_as_close_begins_async() -> None:
    release = threading.Event()
    returned: list[tuple[object, float]] = []
    with scripted(partial(stops_answering, release=release)) as url:
        async with stompy.AsyncConnection(url, receipt_timeout=SLOW_RECEIPT) as conn:
            sub = await conn.subscribe("/queue/idle")

            async def get() -> None:
                try:
                    got: object = await sub.get()
                except StompError as exc:
                    got = exc
                returned.append((got, time.monotonic()))

            async def close() -> None:
                await conn.close()

            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(get)
                await anyio.sleep(0.2)  # both wait in get()
                began = time.monotonic()
                tg.start_soon(close)
                with anyio.move_on_after(AT_ONCE):
                    while len(returned) < 2:
                        await anyio.sleep(0.05)
                release.set()  # the broker's end: close() returns
    assert len(returned) == 2, "get() still waits after close() began"
    for got, when in returned:
        assert got is None
        assert when - began < AT_ONCE


# -- a request waiting for its reply when close() begins ---------------------------------


def check_closed_by_the_caller(outcome: object) -> None:
    """Said as what happened: the caller's close(), not a lost connection."""
    assert isinstance(outcome, ConnectionLost), outcome
    assert "closed by the caller" in str(outcome), outcome
    assert "lost" not in str(outcome), outcome


def test_a_request_waiting_when_close_begins_says_the_caller_closed() -> None:
    outcomes: list[object] = []
    with run_broker() as broker, stompy.Connection(broker.url) as conn:

        def request() -> None:
            try:
                outcomes.append(conn.request("/queue/nobody-answers", "ping", timeout=TIMEOUT))
            except StompError as exc:
                outcomes.append(exc)

        requester = threading.Thread(target=request)
        requester.start()
        deadline = time.monotonic() + TIMEOUT
        while not broker.queue_depth("/queue/nobody-answers") and time.monotonic() < deadline:
            time.sleep(0.01)  # the request went out: its call waits for the reply
        conn.close()
        requester.join(TIMEOUT)
        assert not requester.is_alive()
    assert len(outcomes) == 1
    check_closed_by_the_caller(outcomes[0])


@pytest.mark.anyio
async def test_a_request_waiting_when_close_begins_says_the_caller_closed_async() -> None:
    outcomes: list[object] = []
    with run_broker() as broker, anyio.fail_after(TIMEOUT * 2):
        async with stompy.AsyncConnection(broker.url) as conn:

            async def request() -> None:
                try:
                    reply = await conn.request("/queue/nobody-answers", "ping", timeout=TIMEOUT)
                    outcomes.append(reply)
                except StompError as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(request)
                while not broker.queue_depth("/queue/nobody-answers"):
                    await anyio.sleep(0.01)  # bounded by fail_after
                await conn.close()
    assert len(outcomes) == 1
    check_closed_by_the_caller(outcomes[0])

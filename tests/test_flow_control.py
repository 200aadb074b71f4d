"""Flow control: one slow subscription never stops the others, and a client that reads
late never takes the broker for dead.

The rules are the session engine's (shown first, with a fake clock); then each client
flavour (blocking, asyncio, trio) against the in-process broker.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

import stompy
from stompy._engine.delivery import STALL_WARNING
from stompy._engine.engine import Engine
from stompy._engine.inbox import MAX_PREFETCH, PREFETCH_HEADERS, subscribe_headers
from stompy._transports.blocking import bytes_waiting
from stompy.errors import (
    ConfigurationError,
    HeartbeatTimeout,
    SubscriptionOverflow,
)
from stompy.testing import Broker, run_broker
from tests.test_session import T0, Delivered, connected, establish, make_session, message

# -- the engine: prefetch ----------------------------------------------------------------


def test_client_ack_modes_ask_for_a_prefetch_of_max_pending() -> None:
    for ack in ("client", "client-individual"):
        assert subscribe_headers(ack, {}, 7) == dict.fromkeys(PREFETCH_HEADERS, "7")
    # The user's own prefetch header wins; the other broker's is still set.
    mine = subscribe_headers("client", {"prefetch-count": "1", "x": "y"}, 7)
    assert mine == {"prefetch-count": "1", "x": "y", "activemq.prefetchSize": "7"}
    # RabbitMQ's limit.
    assert subscribe_headers("client", {}, 10**6)["prefetch-count"] == str(MAX_PREFETCH)
    # auto: the broker forgets a message as it sends it; nothing to pace.
    assert subscribe_headers("auto", {"x": "y"}, 7) == {"x": "y"}


def test_the_prefetch_goes_out_with_subscribe_and_its_replay() -> None:
    session = make_session(reconnect=stompy.Reconnect(), max_pending=50)
    establish(session)
    made = session.subscribe("/queue/a", "client-individual", "s", {"k": "v"}, None, False)
    assert made.inbox.headers == {"k": "v"}  # what the user gave, as given
    session.flush(T0)
    first = bytes(session.outgoing)
    assert b"prefetch-count:50\n" in first
    assert b"activemq.prefetchSize:50\n" in first
    assert session.lost(stompy.ConnectionLost("cut")) is not None
    establish(session, T0 + 1)
    replayed = bytes(session.outgoing)
    assert replayed.startswith(b"SUBSCRIBE\n")
    assert b"prefetch-count:50\n" in replayed
    assert b"k:v\n" in replayed


def test_bad_flow_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="overflow"):
        make_session(overflow="drop")
    session = make_session()
    establish(session)
    with pytest.raises(ConfigurationError, match="overflow"):
        session.subscribe("/queue/a", "auto", None, None, None, False, "drop")  # type: ignore[arg-type]
    # max_pending is the callers' to check (ClientOptions, Call.subscribe): see
    # tests/test_config_errors.py, both clients.
    assert not session.delivery.inboxes


# -- the engine: overflow ----------------------------------------------------------------


def test_overflow_fail_ends_that_subscription_and_reading_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = make_session()
    establish(session)
    slow = session.subscribe("/queue/a", "auto", "slow", None, 3, False, "fail").inbox
    other = session.subscribe("/queue/b", "auto", "other", None, 3, False).inbox
    session.outgoing.clear()
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        for n in range(6):
            session.receive(message("slow", n), T0)
        session.receive(message("other", 99), T0)
        pumped = session.pump(T0)
    assert pumped.woke
    assert pumped.failure is None
    assert not session.paused  # nothing held back: the connection reads on
    assert slow.pending == 3  # what came before the limit stays for the consumer
    assert isinstance(slow.failure, SubscriptionOverflow)
    assert not slow.active
    assert "slow" not in session.delivery.inboxes
    assert b"UNSUBSCRIBE\nid:slow\n" in bytes(session.outgoing)
    assert [d.event.message_id for d in other] == ["m-99"]
    # One WARNING for the overflow; the messages still in flight for it only at DEBUG.
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "fell 3 messages behind" in warnings[0].getMessage()


def test_overflow_pause_keeps_everything_in_order() -> None:
    session = make_session(overflow="pause")
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, 2, False).inbox
    assert inbox.overflow == "pause"
    for n in range(5):
        session.receive(message("s", n), T0)
    session.pump(T0)
    assert session.paused
    assert inbox.failure is None
    assert inbox.pending + len(session.delivery.backlog) == 5


def written(session: Engine[Delivered]) -> None:
    """What the core has queued goes out: this test plays the transport."""
    session.flush(T0)
    session.outgoing.clear()
    session.wrote(T0)


def paused_since(session: Engine[Delivered]) -> float | None:
    """Read afresh: mypy would otherwise keep the narrowing of an earlier check."""
    return session.delivery.paused_since


# -- the engine: the stall warning -----------------------------------------------------------


def test_a_subscription_holding_the_connection_still_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = make_session()
    establish(session)
    assert session.next_deadline() is None  # no heart-beats, no stall: nothing to time
    inbox = session.subscribe("/queue/slow", "auto", "slow", None, 1, False).inbox
    written(session)
    for n in range(3):
        session.receive(message("slow", n), T0)
    session.pump(T0)
    assert session.paused
    assert paused_since(session) == T0
    assert session.next_deadline() == T0 + STALL_WARNING

    def nothing_waits() -> bool:
        return False

    with caplog.at_level(logging.INFO, logger="stompy"):
        session.tick(T0 + 1, nothing_waits)
        assert not caplog.records  # not yet
        session.tick(T0 + STALL_WARNING, nothing_waits)
        session.tick(T0 + 2 * STALL_WARNING, nothing_waits)
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert "subscription 'slow' to '/queue/slow' has held the connection" in warning.getMessage()
    assert session.next_deadline() is None  # said once per stall
    caplog.clear()
    inbox.take_many([], inbox.max_pending)
    with caplog.at_level(logging.INFO, logger="stompy"):
        assert session.drain_backlog(T0 + 12)
        inbox.take_many([], inbox.max_pending)
        session.drain_backlog(T0 + 12)
    assert not session.delivery.backlog
    assert paused_since(session) is None
    assert any("again after 12.0 s" in r.getMessage() for r in caplog.records)


# -- the engine: heart-beats judged after looking into the socket -----------------------


def beating_session() -> tuple[Engine[Delivered], float]:
    session = make_session(heartbeats=(0, 100))
    handshake = session.handshake(session.options.endpoints[0])
    handshake.receive(connected("100,0"), T0)
    session.install(handshake, T0)
    deadline = session.next_deadline()
    assert deadline is not None
    return session, deadline


@pytest.mark.parametrize(
    ("unread", "paused", "dead"),
    [
        (True, False, False),  # the broker's bytes wait in the socket: it is alive
        (True, True, False),
        (False, False, True),  # nothing at all: silence
        (False, True, True),  # paused, and still nothing came: silence too
        (None, True, False),  # cannot tell, but the client stopped reading itself
        (None, False, True),
    ],
)
def test_the_broker_is_dead_only_if_nothing_waits_unread(
    unread: bool | None, paused: bool, dead: bool
) -> None:
    session, deadline = beating_session()
    if paused:
        session.subscribe("/queue/a", "auto", "s", None, 1, False)
        written(session)
        for n in range(3):
            session.receive(message("s", n), T0)
        session.pump(T0)
        assert session.paused
    looked: list[float] = []

    def waiting() -> bool | None:
        looked.append(deadline)
        return unread

    pumped = session.tick(deadline + 10, waiting)
    assert looked  # it looked before judging
    assert isinstance(pumped.failure, HeartbeatTimeout) is dead
    if not dead:
        later = session.next_deadline()
        assert later is not None
        assert later > deadline + 10


def test_bytes_waiting_looks_without_reading() -> None:
    assert bytes_waiting(None) is None
    a, b = socket.socketpair()
    with a, b:
        assert bytes_waiting(a) is False
        b.send(b"\n")
        assert bytes_waiting(a) is True
        assert bytes_waiting(a) is True  # still there: nothing was read
        assert a.recv(10) == b"\n"
        b.close()
        assert bytes_waiting(a) is True  # the end of the stream waits too
    assert bytes_waiting(a) is None  # closed: cannot tell


# -- the clients -----------------------------------------------------------------------


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


SLOW_BACKLOG = 3000


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_blocking_a_slow_client_ack_subscription_never_stops_the_connection(
    broker: Broker, ack: stompy.AckMode
) -> None:
    slow_q, fast_q = queue(), queue()
    with stompy.Connection(broker.url, receipt_timeout=5) as conn:
        slow = conn.subscribe(slow_q, ack=ack, max_pending=5)
        fast = conn.subscribe(fast_q)
        conn.send_many(stompy.Outgoing(slow_q, b"x" * 1024) for _ in range(SLOW_BACKLOG))
        stompy.send(broker.url, fast_q, "urgent")
        started = time.monotonic()
        urgent = fast.get(timeout=5)
        assert urgent is not None
        assert urgent.text == "urgent"
        conn.send(queue(), "confirmed", receipt=True)  # receipts flow too
        assert time.monotonic() - started < 5
        assert slow.pending <= 5
        assert broker.queue_depth(slow_q) > 0  # the broker holds the rest back
        taken = 0
        while taken < SLOW_BACKLOG:
            message = slow.get(timeout=5)
            assert message is not None
            message.ack()
            taken += 1
    assert broker.queue_depth(slow_q) == 0


def test_blocking_auto_overflow_fail_ends_only_the_slow_subscription(broker: Broker) -> None:
    slow_q, fast_q = queue(), queue()
    with stompy.Connection(broker.url, receipt_timeout=5) as conn:
        slow = conn.subscribe(slow_q, max_pending=5, overflow="fail")
        assert slow.overflow == "fail"
        fast = conn.subscribe(fast_q)
        conn.send_many(stompy.Outgoing(slow_q, b"x" * 1024) for _ in range(SLOW_BACKLOG))
        stompy.send(broker.url, fast_q, "urgent")
        urgent = fast.get(timeout=5)
        assert urgent is not None
        assert urgent.text == "urgent"
        conn.send(queue(), "confirmed", receipt=True)
        handed = 0
        with pytest.raises(SubscriptionOverflow):
            while slow.get(timeout=5) is not None:
                handed += 1
        assert handed == 5  # what it held, then the error
        assert not slow.active
        assert conn.connected


def test_blocking_auto_overflow_pause_is_the_default(broker: Broker) -> None:
    with stompy.Connection(broker.url) as conn:
        sub = conn.subscribe(queue())
        assert sub.overflow == "pause"
    with stompy.Connection(broker.url, overflow="fail") as conn:
        assert conn.subscribe(queue()).overflow == "fail"
        assert conn.subscribe(queue(), overflow="pause").overflow == "pause"


CONSUMED = 1500
#: Heart-beats fast beside the consumption (1,500 x at least 1 ms of work: several
#: windows), not so fast that a pause of the whole process (coverage, a loaded CI
#: machine) makes a 300 ms window race; 100 ms did, once, under coverage.
BEATS = (200, 200)


def test_blocking_a_slow_consumer_with_fast_heartbeats_gets_everything() -> None:
    dest = queue()
    with run_broker(heartbeats=BEATS) as beating:
        with stompy.Connection(beating.url) as producer:
            producer.send_many(
                (stompy.Outgoing(dest, str(n)) for n in range(CONSUMED)), receipt=True
            )
        with stompy.Connection(beating.url, heartbeats=BEATS, max_pending=50) as conn:
            sub = conn.subscribe(dest)
            for n in range(CONSUMED):
                message = sub.get(timeout=10)
                assert message is not None
                assert message.text == str(n)
                time.sleep(0.001)  # the consumer's work
            assert conn.connected


pytestmark_anyio = pytest.mark.anyio


@pytestmark_anyio
@pytest.mark.parametrize("ack", ["client", "client-individual"])
async def test_async_a_slow_client_ack_subscription_never_stops_the_connection(
    ack: stompy.AckMode,
) -> None:
    slow_q, fast_q = queue(), queue()
    with run_broker() as broker, anyio.fail_after(60):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=5) as conn:
            slow = await conn.subscribe(slow_q, ack=ack, max_pending=5)
            fast = await conn.subscribe(fast_q)
            await conn.send_many(stompy.Outgoing(slow_q, b"x" * 1024) for _ in range(SLOW_BACKLOG))
            await stompy.send_async(broker.url, fast_q, "urgent")
            urgent = await fast.get(timeout=5)
            assert urgent is not None
            assert urgent.text == "urgent"
            await conn.send(queue(), "confirmed", receipt=True)
            assert slow.pending <= 5
            assert broker.queue_depth(slow_q) > 0
            for _ in range(SLOW_BACKLOG):
                message = await slow.get(timeout=5)
                assert message is not None
                await message.ack()
        assert broker.queue_depth(slow_q) == 0


@pytestmark_anyio
async def test_async_auto_overflow_fail_ends_only_the_slow_subscription() -> None:
    slow_q, fast_q = queue(), queue()
    with run_broker() as broker, anyio.fail_after(60):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=5) as conn:
            slow = await conn.subscribe(slow_q, max_pending=5, overflow="fail")
            fast = await conn.subscribe(fast_q)
            await conn.send_many(stompy.Outgoing(slow_q, b"x" * 1024) for _ in range(SLOW_BACKLOG))
            await stompy.send_async(broker.url, fast_q, "urgent")
            urgent = await fast.get(timeout=5)
            assert urgent is not None
            assert urgent.text == "urgent"
            await conn.send(queue(), "confirmed", receipt=True)
            handed = 0
            with pytest.raises(SubscriptionOverflow):
                while await slow.get(timeout=5) is not None:
                    handed += 1
            assert handed == 5
            assert conn.connected


@pytestmark_anyio
async def test_async_a_slow_consumer_with_fast_heartbeats_gets_everything() -> None:
    # The consumer never waits (its messages are there already) and works 1 ms on each:
    # heart-beats must still go out and come in.
    dest = queue()
    with run_broker(heartbeats=BEATS) as beating, anyio.fail_after(60):
        async with stompy.AsyncConnection(beating.url) as producer:
            await producer.send_many(
                (stompy.Outgoing(dest, str(n)) for n in range(CONSUMED)), receipt=True
            )
        async with stompy.AsyncConnection(beating.url, heartbeats=BEATS, max_pending=1000) as conn:
            sub = await conn.subscribe(dest)
            for n in range(CONSUMED):
                message = await sub.get(timeout=10)
                assert message is not None
                assert message.text == str(n)
                time.sleep(0.001)  # the consumer's work, holding the event loop
            assert conn.connected
        assert beating.stats.heartbeat_timeouts == 0


@pytestmark_anyio
async def test_async_a_blocked_event_loop_is_not_a_dead_broker() -> None:
    # The broker beats every 100 ms; user code holds the event loop for 1 s, three
    # times. Its beats wait in the socket: the broker is alive.
    with run_broker(heartbeats=(100, 100)) as beating, anyio.fail_after(60):
        async with stompy.AsyncConnection(beating.url, heartbeats=(0, 100)) as conn:
            assert conn.heartbeats == (0, 100)
            for _ in range(3):
                time.sleep(1.0)  # a CPU-bound step, say
                await anyio.sleep(0.05)
            assert conn.connected
            await conn.send(queue(), "still here", receipt=True)

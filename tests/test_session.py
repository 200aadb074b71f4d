"""The session engine alone: no sockets, no threads, a fake clock and fixed randomness.

Every decision both clients take from it is shown here once: the handshake, the replay
of subscriptions after a reconnect, the backoff, where a MESSAGE goes (inbox or
backlog) and when reading resumes, how a receipt wait ends, the ack-epoch rule and the
close sequence.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stompy
from stompy import Frame, encode
from stompy._core.events import Connected, MessageReceived
from stompy._engine.connecting import Handshake
from stompy._engine.delivery import Delivery
from stompy._engine.engine import Engine
from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.notices import Notice
from stompy._engine.options import ClientOptions
from stompy._engine.receipts import Receipts
from stompy._engine.requests import REPLY_QUEUE, Requests
from stompy._engine.state import ReceiptState, Status
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    HeartbeatTimeout,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
    SubscriptionOverflow,
)

URL = "stomp://guest:secret@127.0.0.1:61613/vhost"
T0 = 1000.0  # the fake clock's start


class Delivered(MessageBase):
    """The test's "transport"'s message class: the core makes one of each MESSAGE, and
    the session stamps it with its epoch."""

    __slots__ = ()

    @property
    def epoch(self) -> int:
        return self._epoch


def make_session(**options: object) -> Engine[Delivered]:
    return Engine(ClientOptions(URL, **options), Delivered, uniform=lambda a, b: b)  # type: ignore[arg-type]


def taken(inbox: Inbox[Delivered]) -> Delivered:
    """The consumer's take, of a message the test knows is there."""
    message = inbox.take()
    assert message is not None
    return message


def status_of(session: Engine[Delivered]) -> Status:
    """Read afresh: mypy would otherwise keep the narrowing of an earlier check."""
    return session.status


def connected_of(handshake: Handshake) -> Connected | None:
    return handshake.connected


def connected(heartbeats: str = "0,0") -> bytes:
    return encode(Frame("CONNECTED", (("version", "1.2"), ("heart-beat", heartbeats))))


def message(sub: str, n: int) -> bytes:
    headers = (("destination", "/queue/a"), ("message-id", f"m-{n}"), ("subscription", sub))
    return encode(Frame("MESSAGE", headers, f"body {n}".encode()))


def receipt(rid: str) -> bytes:
    return encode(Frame("RECEIPT", (("receipt-id", rid),)))


def establish(session: Engine[Delivered], now: float = T0) -> Handshake:
    handshake = session.handshake(session.options.endpoints[0])
    assert handshake.first.startswith(b"CONNECT\n")
    assert handshake.receive(connected(), now) == b""
    session.install(handshake, now)
    return handshake


def test_handshake_sends_connect_with_the_url_credentials_and_vhost() -> None:
    session = make_session()
    handshake = session.handshake(session.options.endpoints[0])
    assert b"login:guest\n" in handshake.first
    assert b"passcode:secret\n" in handshake.first
    assert b"host:vhost\n" in handshake.first
    assert connected_of(handshake) is None
    handshake.receive(connected()[:5], T0)
    assert connected_of(handshake) is None  # half a frame: not yet
    handshake.receive(connected()[5:], T0)
    reply = connected_of(handshake)
    assert reply is not None
    assert reply.version == "1.2"


def test_handshake_failures_are_typed() -> None:
    session = make_session()
    endpoint = session.options.endpoints[0]
    refused = encode(Frame("ERROR", (("message", "bad passcode"),)))
    with pytest.raises(ServerError, match="bad passcode"):
        session.handshake(endpoint).receive(refused, T0)
    with pytest.raises(ConnectFailed, match="closed the connection during CONNECT"):
        session.handshake(endpoint).receive(b"", T0)
    with pytest.raises(RemoteProtocolError):
        session.handshake(endpoint).receive(b"NONSENSE\n\n\x00", T0)


def test_install_starts_an_epoch_and_replays_subscriptions() -> None:
    session = make_session()
    assert status_of(session) is Status.NEW
    establish(session)
    assert status_of(session) is Status.CONNECTED
    assert session.epoch == 1
    made = session.subscribe("/queue/a", "client-individual", None, {"x": "1"}, None, True)
    assert made.receipt is not None
    assert made.inbox.max_pending == 1000
    assert session.flush(T0)
    first = bytes(session.outgoing)
    assert first.startswith(b"SUBSCRIBE\n")
    assert b"receipt:" in first
    # The connection ends; reconnect is on; the next connection subscribes again, same id.
    delays = session.lost(ConnectionLost("cut"))
    assert delays is None  # no reconnect policy: the session failed
    assert status_of(session) is Status.CLOSED
    assert isinstance(session.failure, ConnectionLost)

    session = make_session(reconnect=stompy.Reconnect(initial_delay=0.5, jitter=0.2))
    establish(session)
    made = session.subscribe("/queue/a", "client", "mine", None, 5, False)
    assert made.receipt is None
    attempts = session.lost(ConnectionLost("cut"))
    assert attempts is not None
    assert status_of(session) is Status.RECONNECTING
    assert session.epoch == 2
    tries = iter(attempts)
    waited = [next(tries)[0], next(tries)[0], next(tries)[0]]
    assert waited == [0.0, 0.6, 1.2]  # uniform: the top; one address, one try a round
    establish(session, T0 + 1)
    assert session.epoch == 3
    replayed = bytes(session.outgoing)
    assert replayed.startswith(b"SUBSCRIBE\n")
    assert b"id:mine\n" in replayed
    assert b"ack:client\n" in replayed


def test_reconnect_attempts_are_bounded_and_giving_up_fails() -> None:
    session = make_session(reconnect=stompy.Reconnect(max_attempts=3, jitter=0.0))
    establish(session)
    attempts = session.lost(HeartbeatTimeout("silence"))
    assert attempts is not None
    tried = 0
    for _delay, endpoint in attempts:
        attempts.failed(endpoint, ConnectFailed("refused"))
        tried += 1
    assert tried == 3
    session.give_up(attempts)
    assert status_of(session) is Status.CLOSED
    assert isinstance(session.failure, ConnectionLost)
    assert "could not reconnect: refused" in str(session.failure)
    with pytest.raises(ConnectionLost):
        session.ready()


def test_messages_go_to_inboxes_then_the_backlog_and_resume_at_half() -> None:
    session = make_session()
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, 4, False).inbox
    session.outgoing.clear()
    for n in range(10):
        session.receive(message("s", n), T0)
    pumped = session.pump(T0)
    assert pumped.woke
    assert pumped.failure is None
    assert [d.event.message_id for d in inbox] == ["m-0", "m-1", "m-2", "m-3"]
    assert len(session.delivery.backlog) == 6
    assert session.paused  # the transport stops reading now
    taken(inbox)
    assert not session.delivery.wants_resume(inbox)  # 3 of 4: not half empty yet
    taken(inbox)
    assert session.delivery.wants_resume(inbox)
    assert session.drain_backlog()
    assert [d.event.message_id for d in inbox] == ["m-2", "m-3", "m-4", "m-5"]
    assert all(d.epoch == 1 for d in inbox)
    assert session.paused


def test_what_the_core_makes_is_the_message_the_consumer_takes() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    owner = object()
    session.owner = owner
    establish(session)
    assert session.proto is not None
    assert session.proto.message_class is Delivered
    inbox = session.subscribe("/queue/a", "client", "s", None, 1, False).inbox
    session.receive(message("s", 1) + message("s", 2), T0)
    session.pump(T0)
    first = taken(inbox)
    assert type(first) is Delivered
    assert isinstance(first, MessageReceived)
    assert first.event is first  # no wrapper: the event is the message
    assert (first.message_id, first.body, first.epoch) == ("m-1", b"body 1", 1)
    assert first._owner is owner  # what answers it
    assert first.headers["message-id"] == "m-1"
    assert first.headers is first.headers  # made once
    # The one set aside is stamped as it arrived: a later epoch does not make it new.
    assert session.drain_backlog()
    second = taken(inbox)
    assert (second.message_id, second.epoch) == ("m-2", 1)
    assert session.lost(ConnectionLost("cut")) is not None
    establish(session, T0 + 1)
    assert session.is_stale(first.epoch)
    assert session.is_stale(second.epoch)
    # Messages compare by identity (hashable), not by value as the core's event does.
    session.receive(message("s", 2), T0 + 1)
    session.pump(T0 + 1)
    again = taken(inbox)
    assert (again.frame, again.subscription) == (second.frame, second.subscription)
    assert again != second
    assert again == again
    assert len({second, again}) == 2


def test_a_lost_connection_hands_the_backlog_to_the_consumer() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, 2, False).inbox
    for n in range(5):
        session.receive(message("s", n), T0)
    session.pump(T0)
    assert session.lost(ConnectionLost("cut")) is not None
    # Auto-acked messages are the consumer's now: nothing is dropped with the connection.
    assert [d.event.message_id for d in inbox] == [f"m-{n}" for n in range(5)]
    assert not session.paused


def test_an_inbox_keeps_what_fits_and_hands_it_out_oldest_first() -> None:
    inbox: Inbox[str] = Inbox("s", "/queue/a", "auto", {}, 4)
    assert inbox.take() is None  # nothing waits: no exception for the consumer to catch
    assert [inbox.offer(f"m-{n}") for n in range(5)] == [True] * 4 + [False]
    assert inbox.pending == 4
    assert not inbox.resume_due()
    inbox.keep("m-4")  # its connection ended: kept past the limit
    assert list(inbox) == [f"m-{n}" for n in range(5)]
    assert inbox.take() == "m-0"
    batch = ["first"]
    inbox.take_many(batch, 3)  # up to three in all
    assert batch == ["first", "m-1", "m-2"]
    assert inbox.resume_due()  # two of four: half empty
    inbox.end()
    assert not inbox.active
    inbox.take_many(batch, 10)
    assert batch[3:] == ["m-3", "m-4"]  # what came before the end stays for the consumer
    assert inbox.pending == 0


def test_delivery_on_its_own_routes_to_inboxes_requests_and_the_hook() -> None:
    """The delivery needs no session: a requests table, a queue of hook calls, and
    what ends a subscription whose consumer fell behind."""
    requests: Requests[Delivered] = Requests()
    notices: deque[Notice] = deque()
    ended: list[str] = []

    def end(inbox: Inbox[Delivered]) -> None:  # as the session does, less the frame
        inbox.end()
        assert delivery.remove(inbox)
        ended.append(inbox.id)

    options = ClientOptions(URL, on_unrouted=print)
    delivery: Delivery[Delivered] = Delivery(options, requests, notices, end)
    inbox: Inbox[Delivered] = Inbox("s", "/queue/a", "auto", {}, 1, "fail")
    delivery.add(inbox)

    def made(sub: str, *headers: tuple[str, str]) -> Delivered:
        frame = Frame("MESSAGE", (("destination", "/queue/a"), ("subscription", sub), *headers))
        return Delivered.made(frame, sub, "auto")

    first = made("s")
    delivery.route(first, 1, None)
    assert (first._epoch, first._seq) == (1, 1)  # stamped
    delivery.route(made("s"), 1, None)  # no room, and overflow="fail": the subscription ends
    assert ended == ["s"]
    assert isinstance(inbox.failure, SubscriptionOverflow)
    assert list(inbox) == [first]
    delivery.route(made("s"), 1, None)  # still in flight for it: dropped quietly
    request = requests.new("/queue/rpc", 1, "implicit")
    reply = made(REPLY_QUEUE, ("correlation-id", request.correlation_id))
    delivery.route(reply, 1, None)
    assert request.reply is reply
    assert list(requests.take_replied()) == [request.correlation_id]
    assert not requests.take_replied()  # told once
    assert not notices
    stray = made("nobody")
    delivery.route(stray, 1, None)
    assert [(n.what, n.argument) for n in notices] == [("on_unrouted", stray)]
    assert not delivery.paused


def test_receipts_keep_only_what_somebody_waits_for() -> None:
    receipts = Receipts()
    receipts.came("r-1")  # nobody waits: not kept
    receipts.expect("r-1")
    assert "r-1" in receipts
    assert not receipts.arrived("r-1")
    receipts.expect_all(["r-2"])
    receipts.came("r-1")
    assert receipts.arrived("r-1")
    assert not receipts.arrived("r-2")
    receipts.forget("r-1")
    assert "r-1" not in receipts
    assert not receipts.arrived("r-1")
    assert len(receipts) == 1


def test_a_message_for_a_closed_subscription_is_dropped() -> None:
    session = make_session()
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, 2, False).inbox
    assert session.unsubscribe(inbox, receipt=False) is None
    assert not inbox.active
    session.receive(message("s", 1), T0)
    assert session.pump(T0).failure is None
    assert not inbox.pending
    assert not session.paused


def test_receipt_waits_end_in_each_way() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    proto = session.ready()
    rid = proto.send("/queue/a", b"x", receipt=True)
    assert rid is not None
    session.receipts.expect(rid)
    assert session.receipt_state(rid, 1) is ReceiptState.PENDING
    # The transport saw the end: the wait goes on until its verdict...
    session.saw_end(ConnectionLost("cut"))
    assert session.settling
    assert session.usable() is None
    assert session.receipt_state(rid, 1) is ReceiptState.PENDING
    # ... unless nobody serves the session any more.
    session.serving = False
    assert session.receipt_state(rid, 1) is ReceiptState.LOST
    session.serving = True
    session.ending = None
    assert session.usable() is proto
    session.receive(receipt(rid), T0)
    assert session.pump(T0).woke
    assert session.receipt_state(rid, 1) is ReceiptState.ARRIVED
    session.receipts.forget(rid)
    # A receipt of an earlier epoch never comes: the wait is lost.
    other = proto.send("/queue/a", b"y", receipt=True)
    assert other is not None
    session.receipts.expect(other)
    session.lost(ConnectionLost("cut"))
    assert session.receipt_state(other, 1) is ReceiptState.LOST
    session.fail(ConnectionLost("for good"))
    assert session.receipt_state(other, 1) is ReceiptState.FAILED


def test_an_error_frame_is_the_connections_failure() -> None:
    session = make_session()
    establish(session)
    session.receive(encode(Frame("ERROR", (("message", "go away"),))), T0)
    pumped = session.pump(T0)
    assert isinstance(pumped.failure, ServerError)
    assert session.settling  # the core closed; the transport has not decided yet
    assert session.lost(pumped.failure) is None
    assert session.failure is pumped.failure


def test_heartbeat_silence_is_a_failure_with_the_fake_clock() -> None:
    session = make_session(heartbeats=(0, 1000))
    handshake = session.handshake(session.options.endpoints[0])
    handshake.receive(connected("1000,0"), T0)
    session.install(handshake, T0)
    proto = session.ready()
    deadline = proto.next_deadline()
    assert deadline is not None
    proto.handle_timer(deadline + 5)
    assert isinstance(session.pump(deadline + 5).failure, HeartbeatTimeout)


def test_stale_epochs_and_intents_when_not_connected() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    with pytest.raises(LocalProtocolError, match="the connection is new"):
        session.ready()
    establish(session)
    assert not session.is_stale(1)
    session.lost(ConnectionLost("cut"))
    assert session.is_stale(1)
    with pytest.raises(LocalProtocolError, match="the connection is reconnecting"):
        session.acknowledge("ACK", MessageReceived(Frame("MESSAGE"), "s", "client"), None, False)


def test_close_sends_disconnect_with_a_receipt_and_ends_every_inbox() -> None:
    session = make_session()
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, None, False).inbox
    session.flush(T0)
    session.outgoing.clear()
    rid = session.begin_close()
    assert rid is not None
    assert status_of(session) is Status.CLOSING
    session.flush(T0)
    assert bytes(session.outgoing).startswith(b"DISCONNECT\n")
    assert session.receipt_state(rid, 1) is ReceiptState.PENDING
    session.receive(receipt(rid), T0)
    session.pump(T0)
    assert session.receipt_state(rid, 1) is ReceiptState.ARRIVED
    session.closed()
    assert status_of(session) is Status.CLOSED
    assert not inbox.active
    assert session.failure is None
    assert session.lost(ConnectionLost("after close")) is None  # a closed session stays so


@settings(max_examples=200, deadline=None)
@given(
    max_pending=st.integers(1, 6),
    steps=st.lists(st.one_of(st.integers(1, 5), st.just(0)), max_size=40),
)
def test_delivery_keeps_order_and_bounds_whatever_the_consumer_does(
    max_pending: int, steps: list[int]
) -> None:
    """Positive steps receive that many messages; 0 takes one (and resumes when told)."""
    session = make_session()
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "s", None, max_pending, False).inbox
    sent = took = 0
    seen: list[str] = []
    for step in steps:
        if step:
            for _ in range(step):
                session.receive(message("s", sent), T0)
                sent += 1
            session.pump(T0)
        elif inbox.pending:
            seen.append(taken(inbox).event.message_id)
            took += 1
            if session.delivery.wants_resume(inbox):
                session.drain_backlog()
        assert inbox.pending <= max_pending
        assert session.paused == bool(session.delivery.backlog)
        assert inbox.pending + len(session.delivery.backlog) + took == sent
    while inbox.pending or session.delivery.backlog:  # bounded: each turn takes one message
        if inbox.pending:
            seen.append(taken(inbox).event.message_id)
        session.drain_backlog()
    assert seen == [f"m-{n}" for n in range(sent)]

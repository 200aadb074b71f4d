"""Request/reply in the engine (Engine + Call.request / Call.reply) with a fake clock.

The blocking, asyncio and trio clients all run these generators: which reply goes to
which request, how long a request waits, what happens to a late reply and to the
requests in flight when the connection is lost, and where a MESSAGE nobody
subscribed to goes.
"""

from __future__ import annotations

import logging

import pytest

import stompy
from stompy import Frame, encode
from stompy._engine.calls import REQUEST_TIMEOUT, Call, Running, Steps, Wait, Waiting
from stompy._engine.engine import Engine
from stompy._engine.keywords import RequestOptions
from stompy._engine.requests import REPLY_QUEUE
from stompy.errors import (
    ConfigurationError,
    ConnectionLost,
    NoReplyTo,
    RequestTimeout,
    StompTimeout,
)
from tests.test_calls import drive, time_passes
from tests.test_session import T0, Delivered, establish, make_session, message, taken


def reply(correlation_id: str | None, body: str, sub: str = REPLY_QUEUE, n: int = 1) -> bytes:
    """A MESSAGE as the broker delivers a reply to the session's temporary queue."""
    headers = [
        ("destination", "/reply-queue/amq.gen-x"),
        ("message-id", f"r-{n}-{body}"),
        ("subscription", sub),
    ]
    if correlation_id is not None:
        headers.append(("correlation-id", correlation_id))
    return encode(Frame("MESSAGE", tuple(headers), body.encode()))


def deliver(session: Engine[Delivered], data: bytes, now: float = T0) -> list[str]:
    """Feed what the broker sent and pump; the correlation ids that got their reply."""
    session.receive(data, now)
    return list(session.pump(now).replied)


def sent_frames(session: Engine[Delivered], command: str) -> list[dict[str, str]]:
    """The headers of each ``command`` frame in the outgoing buffer (taken from it)."""
    frames = []
    for chunk in bytes(session.outgoing).split(b"\x00"):
        lines = chunk.lstrip(b"\n").decode().split("\n")
        if lines[0] == command:
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if not line:
                    break
                name, _, value = line.partition(":")
                headers.setdefault(name, value)
            frames.append(headers)
    session.outgoing.clear()
    return frames


def ask(
    session: Engine[Delivered], destination: str = "/queue/rpc", **options: object
) -> Steps[Delivered]:
    opts: RequestOptions = options  # type: ignore[assignment]
    return Call(session, T0).request(destination, "ping", opts)


def connect(session: Engine[Delivered], server: str | None) -> None:
    """Establish a connection whose CONNECTED frame names ``server`` (or none)."""
    handshake = session.handshake(session.options.endpoints[0])
    headers = (("version", "1.2"), *((("server", server),) if server is not None else ()))
    handshake.receive(encode(Frame("CONNECTED", headers)), T0)
    session.install(handshake, T0)


def connected_session(
    server: str | None = "RabbitMQ/3.12.1", **options: object
) -> Engine[Delivered]:
    """A session connected to a broker that delivers replies implicitly (RabbitMQ)."""
    session = make_session(**options)
    connect(session, server)
    session.outgoing.clear()
    return session


def test_a_request_names_the_temp_queue_and_returns_the_reply_with_its_correlation_id() -> None:
    session = connected_session()

    def answer(wait: Wait) -> float:
        assert wait.what is Waiting.REPLY
        (request,) = sent_frames(session, "SEND")
        assert request["destination"] == "/queue/rpc"
        assert request["reply-to"] == REPLY_QUEUE
        assert wait.correlation_id == request["correlation-id"]
        # Someone else's reply first: it is not this request's.
        assert deliver(session, reply("not-ours", "other"), T0 + 1) == []
        assert deliver(session, reply(wait.correlation_id, "pong"), T0 + 1) == [wait.correlation_id]
        return T0 + 1

    result, waits = drive(ask(session, timeout=5.0), answer)
    assert result.event.frame.body == b"pong"
    assert [w.deadline for w in waits] == [T0 + 5.0]
    assert len(session.requests) == 0  # the wait is over: nothing kept


def test_concurrent_requests_each_get_their_own_reply() -> None:
    session = connected_session()
    running = [Running(ask(session, f"/queue/rpc-{i}")) for i in range(3)]
    waits = [r.resume() for r in running]
    ids = [w.correlation_id for w in waits if w is not None]
    assert len(set(ids)) == 3  # a fresh correlation-id each
    assert [f["destination"] for f in sent_frames(session, "SEND")] == [
        "/queue/rpc-0",
        "/queue/rpc-1",
        "/queue/rpc-2",
    ]
    # Replies come in another order than the requests went out, all in one read.
    data = b"".join(reply(cid, f"to {i}", n=i) for i, cid in reversed(list(enumerate(ids))))
    assert deliver(session, data) == list(reversed(ids))
    for i, r in enumerate(running):
        assert r.resume(T0 + 1) is None
        assert r.result.event.frame.body == f"to {i}".encode()
    assert len(session.requests) == 0


def test_a_request_without_reply_times_out_and_a_late_reply_is_dropped_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = connected_session()
    steps = ask(session, timeout=2.0)
    wait = next(steps)
    cid = wait.correlation_id
    with pytest.raises(RequestTimeout, match=r"within 2\.0 s") as raised:
        steps.send(wait.deadline)
    assert isinstance(raised.value, StompTimeout)
    assert len(session.requests) == 0
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        assert deliver(session, reply(cid, "too late"), T0 + 3) == []
    dropped = [r for r in caplog.records if "dropping a reply" in r.getMessage()]
    assert [r.levelno for r in dropped] == [logging.DEBUG]
    assert repr(cid) in dropped[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_default_timeout_and_a_timeout_of_zero() -> None:
    session = connected_session()
    wait = next(ask(session))
    assert wait.deadline == T0 + REQUEST_TIMEOUT
    with pytest.raises(RequestTimeout):
        drive(ask(session, timeout=0), time_passes)


def test_a_cancelled_request_is_forgotten() -> None:
    session = connected_session()
    steps = ask(session)
    wait = next(steps)
    assert wait.correlation_id in session.requests
    steps.close()  # what a transport does when the waiting call is cancelled
    assert len(session.requests) == 0


def test_requests_in_flight_fail_after_a_reconnect_and_new_ones_work() -> None:
    session = connected_session(reconnect=stompy.Reconnect())
    running = [Running(ask(session)) for _ in range(2)]
    old = [r.resume() for r in running]
    session.saw_end(ConnectionLost("cut"))
    for r, wait in zip(running, old, strict=True):
        # The transport saw the end but gave no verdict yet: the requests wait on.
        assert wait is not None
        again = r.resume(T0 + 0.5)
        assert again is not None
        assert again.what is Waiting.REPLY
    session.lost(ConnectionLost("cut"))
    for r in running:
        with pytest.raises(ConnectionLost, match=r"lost before the reply .* cut"):
            r.resume(T0 + 1)
    assert len(session.requests) == 0
    establish(session, T0 + 2)
    session.outgoing.clear()

    def answer(wait: Wait) -> float:
        deliver(session, reply(wait.correlation_id, "fresh"), T0 + 3)
        return T0 + 3

    result, _ = drive(Call(session, T0 + 2).request("/queue/rpc", "ping", {}), answer)
    assert result.event.frame.body == b"fresh"
    assert result.epoch == session.epoch


def test_a_request_in_flight_raises_the_failure_without_reconnect() -> None:
    session = connected_session()
    steps = ask(session)
    next(steps)
    session.lost(ConnectionLost("gone"))
    with pytest.raises(ConnectionLost, match="gone"):
        steps.send(T0 + 1)


def test_a_reply_that_came_before_the_connection_was_lost_is_returned() -> None:
    session = connected_session(reconnect=stompy.Reconnect())
    steps = ask(session)
    wait = next(steps)
    deliver(session, reply(wait.correlation_id, "just in time"))
    session.lost(ConnectionLost("cut"))
    with pytest.raises(StopIteration) as done:
        steps.send(T0 + 1)
    assert done.value.value.event.frame.body == b"just in time"


def test_a_request_refuses_the_headers_it_writes_itself() -> None:
    session = connected_session()
    for name in ("reply-to", "correlation-id"):
        with pytest.raises(ConfigurationError, match=name):
            drive(ask(session, headers={name: "x"}), time_passes)
    with pytest.raises(ConfigurationError, match="timeout"):
        drive(ask(session, timeout=-1.0), time_passes)
    assert not session.outgoing
    assert len(session.requests) == 0


@pytest.mark.parametrize("server", ["ActiveMQ/5.17.2", "coilmq/1.1.0", None])
def test_other_brokers_get_a_subscribe_to_a_reply_destination_once_per_connection(
    server: str | None,
) -> None:
    # Only RabbitMQ (and the in-process broker) deliver replies on a subscription of
    # their own: every other broker, or one that does not say what it is, needs one.
    session = make_session(reconnect=stompy.Reconnect())
    connect(session, server)
    for _ in range(2):
        Running(ask(session)).resume()
    (subscribe,) = sent_frames(session, "SUBSCRIBE")
    reply_to = subscribe["destination"]
    # A name of its own: on a broker without temporary queues, two requesters on one
    # name would take each other's replies.
    assert reply_to.startswith(REPLY_QUEUE + "-")
    assert subscribe == {"destination": reply_to, "id": REPLY_QUEUE, "ack": "auto"}
    session.lost(ConnectionLost("cut"))
    connect(session, server)
    assert sent_frames(session, "SUBSCRIBE") == []  # not replayed ...
    Running(ask(session)).resume()
    (again,) = sent_frames(session, "SUBSCRIBE")  # ... made at the first request
    assert again["destination"] != reply_to
    # The replies come on that subscription, as on RabbitMQ.
    steps = ask(session)
    wait = next(steps)
    (request,) = sent_frames(session, "SEND")
    assert request["reply-to"] == again["destination"]
    assert deliver(session, reply(wait.correlation_id, "pong")) == [wait.correlation_id]


@pytest.mark.parametrize("server", ["RabbitMQ/3.10.8", "stompy-broker/0.1"])
def test_rabbitmq_and_the_in_process_broker_subscribe_the_connection_themselves(
    server: str,
) -> None:
    session = make_session()
    connect(session, server)
    Running(ask(session)).resume()
    assert sent_frames(session, "SUBSCRIBE") == []  # RabbitMQ refuses one


@pytest.mark.parametrize(
    ("server", "asked", "subscribes"),
    [("RabbitMQ/3.10.8", "explicit", True), ("ActiveMQ/5.17.2", "implicit", False)],
)
def test_reply_subscription_overrides_the_choice(server: str, asked: str, subscribes: bool) -> None:
    session = make_session()
    connect(session, server)
    Running(ask(session, reply_subscription=asked)).resume()
    assert bool(sent_frames(session, "SUBSCRIBE")) is subscribes


def test_reply_subscription_is_checked_before_anything_is_sent() -> None:
    session = connected_session()
    with pytest.raises(ConfigurationError, match="reply_subscription"):
        drive(ask(session, reply_subscription="sometimes"), time_passes)
    with pytest.raises(TypeError, match="reply_subscription"):
        drive(ask(session, reply_subscription=True), time_passes)
    assert not session.outgoing
    assert len(session.requests) == 0


@pytest.mark.parametrize(
    ("server", "asked", "said"),
    [
        ("RabbitMQ/3.10.8", "auto", "implicit, for server 'RabbitMQ/3.10.8'"),
        ("RabbitMQ/3.10.8", "implicit", "implicit, asked for"),
        ("coilmq/1.1.0", "auto", "explicit, for server 'coilmq/1.1.0'"),
        (None, "explicit", "explicit, asked for"),
    ],
)
def test_the_timeout_says_how_the_replies_were_awaited(
    server: str | None, asked: str, said: str
) -> None:
    session = connected_session(server)
    with pytest.raises(RequestTimeout) as info:
        drive(ask(session, timeout=1.0, reply_subscription=asked), time_passes)
    text = str(info.value)
    assert said in text
    if said.startswith("implicit"):
        assert "reply_subscription='explicit'" in text
    else:
        assert f"SUBSCRIBE to {REPLY_QUEUE}-" in text


def test_reply_goes_to_reply_to_with_the_correlation_id() -> None:
    session = connected_session()
    inbox = session.subscribe("/queue/rpc", "auto", "svc", None, None, False).inbox
    request = encode(
        Frame(
            "MESSAGE",
            (
                ("destination", "/queue/rpc"),
                ("message-id", "m-1"),
                ("subscription", "svc"),
                ("reply-to", "/reply-queue/amq.gen-1"),
                ("correlation-id", "c-7"),
            ),
            b"ping",
        )
    )
    deliver(session, request)
    event = taken(inbox).event
    session.outgoing.clear()
    drive(Call(session, T0).reply(event, "pong", {"headers": {"x": "1"}}), time_passes)
    (sent,) = sent_frames(session, "SEND")
    assert sent["destination"] == "/reply-queue/amq.gen-1"
    assert sent["correlation-id"] == "c-7"
    assert sent["x"] == "1"


def test_reply_to_a_message_without_reply_to_raises_and_sends_nothing() -> None:
    session = connected_session()
    inbox = session.subscribe("/queue/a", "auto", "s", None, None, False).inbox
    deliver(session, message("s", 1))
    event = taken(inbox).event
    session.outgoing.clear()
    with pytest.raises(NoReplyTo, match="'m-1' from '/queue/a' has no reply-to"):
        drive(Call(session, T0).reply(event, "pong", {}), time_passes)
    assert not session.outgoing


def test_a_message_in_flight_when_its_subscription_ended_is_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The broker may still send a few after UNSUBSCRIBE: expected, so no WARNING.
    session = connected_session()
    inbox = session.subscribe("/queue/a", "auto", "gone", None, None, False).inbox
    session.unsubscribe(inbox, False)
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        deliver(session, message("gone", 1))  # in flight when we unsubscribed
    told = [r for r in caplog.records if "'m-1'" in r.getMessage() and "'gone'" in r.getMessage()]
    assert told
    assert {r.levelno for r in told} == {logging.DEBUG}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_message_set_aside_whose_subscription_ends_is_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = connected_session()
    inbox = session.subscribe("/queue/a", "auto", "s", None, 1, False).inbox
    deliver(session, message("s", 1) + message("s", 2))
    assert len(session.delivery.backlog) == 1  # the inbox holds one
    session.unsubscribe(inbox, False)
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        session.drain_backlog()
    told = [r for r in caplog.records if "'m-2'" in r.getMessage() and "'s'" in r.getMessage()]
    assert told
    assert {r.levelno for r in told} == {logging.DEBUG}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_reply_is_not_held_up_by_a_full_inbox() -> None:
    session = connected_session()
    session.subscribe("/queue/a", "auto", "s", None, 1, False)
    steps = ask(session)
    wait = next(steps)
    replied = deliver(session, message("s", 1) + message("s", 2) + reply(wait.correlation_id, "ok"))
    assert session.paused  # the second message waits in the backlog...
    assert replied == [wait.correlation_id]  # ... the reply does not
    with pytest.raises(StopIteration):
        steps.send(T0)

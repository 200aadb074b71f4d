"""``request()`` run straight (:class:`Asking`) and the general way (:meth:`Call.request`):
the same outcomes and errors, on the engine with a fake clock.

The clients run a request as an :class:`Asking`, which sends it at once and waits for
the reply with no generator in between when nothing is in its way, and hands everything
else (not connected yet, a reconnect, a full outgoing buffer) to the general way. A
traced connection runs the general way from the start. Each test here runs both
drivers through the same story: which reply is the request's, its timeout and a late
reply, the ends of a connection, a cancelled wait, the checks of its options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

import stompy
from stompy._engine.calls import Asking, Call, Running, Waiting
from stompy._engine.engine import MAX_OUTGOING, Engine
from stompy._engine.keywords import RequestOptions
from stompy.errors import (
    ConfigurationError,
    ConnectionLost,
    LocalProtocolError,
    RequestTimeout,
    StompTimeout,
)
from tests.test_request import connect, connected_session, deliver, reply, sent_frames
from tests.test_session import T0, Delivered, make_session

Start = Callable[[Engine[Delivered], float, RequestOptions], Running[Delivered]]


def straight(session: Engine[Delivered], now: float, options: RequestOptions) -> Running[Delivered]:
    return Asking(session, now, "/queue/rpc", "ping", options)


def general(session: Engine[Delivered], now: float, options: RequestOptions) -> Running[Delivered]:
    return Running(Call(session, now).request("/queue/rpc", "ping", options))


DRIVERS = pytest.mark.parametrize("start", [straight, general], ids=["straight", "general"])


@DRIVERS
def test_the_reply_is_the_one_its_correlation_id_names(start: Start) -> None:
    session = connected_session()
    running = [start(session, T0, {"timeout": 5.0}) for _ in range(2)]
    waits = [r.resume() for r in running]
    sent = sent_frames(session, "SEND")  # each went out as it started
    ids = [w.correlation_id for w in waits if w is not None]
    assert [f["correlation-id"] for f in sent] == ids
    assert len(set(ids)) == 2
    assert [w.deadline for w in waits if w is not None] == [T0 + 5.0] * 2
    # Another's reply, then the second request's, then the first's, in one read.
    data = reply("not-ours", "x", n=0) + reply(ids[1], "to 1", n=1) + reply(ids[0], "to 0", n=2)
    assert deliver(session, data, T0 + 1) == [ids[1], ids[0]]
    for i, r in enumerate(running):
        assert r.resume(T0 + 1) is None
        assert r.result.event.frame.body == f"to {i}".encode()
        assert r.result.headers["correlation-id"] == ids[i]
    assert len(session.requests) == 0


@DRIVERS
def test_woken_without_its_reply_it_waits_again_until_its_deadline(start: Start) -> None:
    session = connected_session()
    running = start(session, T0, {"timeout": 2.0})
    wait = running.resume()
    assert wait is not None
    assert wait.what is Waiting.REPLY
    deliver(session, reply("someone-else", "x"), T0 + 1)
    again = running.resume(T0 + 1)
    assert again is not None
    assert (again.what, again.deadline, again.correlation_id) == (
        Waiting.REPLY,
        T0 + 2.0,
        wait.correlation_id,
    )


@DRIVERS
def test_no_reply_by_the_deadline_is_a_timeout_and_a_late_reply_is_dropped(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    session = connected_session()
    running = start(session, T0, {"timeout": 2.0})
    wait = running.resume()
    assert wait is not None
    with pytest.raises(RequestTimeout, match=r"within 2\.0 s.*implicit") as raised:
        running.resume(T0 + 2.0)
    assert isinstance(raised.value, StompTimeout)
    assert len(session.requests) == 0
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        assert deliver(session, reply(wait.correlation_id, "too late"), T0 + 3) == []
    (dropped,) = [r for r in caplog.records if "dropping a reply" in r.getMessage()]
    assert dropped.levelno == logging.DEBUG
    assert repr(wait.correlation_id) in dropped.getMessage()


@DRIVERS
def test_a_lost_connection_ends_the_wait_once_the_transport_judged_it(start: Start) -> None:
    session = connected_session(reconnect=stompy.Reconnect())
    running = start(session, T0, {})
    assert running.resume() is not None
    session.saw_end(ConnectionLost("cut"))
    wait = running.resume(T0 + 0.5)  # no verdict yet: it waits on
    assert wait is not None
    assert wait.what is Waiting.REPLY
    session.lost(ConnectionLost("cut"))
    with pytest.raises(ConnectionLost, match=r"lost before the reply to the request .* cut"):
        running.resume(T0 + 1)
    assert len(session.requests) == 0


@DRIVERS
def test_without_reconnect_the_failure_ends_the_wait(start: Start) -> None:
    session = connected_session()
    running = start(session, T0, {})
    assert running.resume() is not None
    session.lost(ConnectionLost("gone"))
    with pytest.raises(ConnectionLost, match="gone"):
        running.resume(T0 + 1)
    assert len(session.requests) == 0


@DRIVERS
def test_close_ends_the_wait_saying_the_caller_closed(start: Start) -> None:
    session = connected_session()
    running = start(session, T0, {})
    assert running.resume() is not None
    session.begin_close()
    with pytest.raises(ConnectionLost, match=r"closed by the caller \(close\(\)\)"):
        running.resume(T0 + 1)
    assert len(session.requests) == 0


@DRIVERS
def test_a_reply_that_came_before_the_connection_ended_is_returned(start: Start) -> None:
    session = connected_session(reconnect=stompy.Reconnect())
    running = start(session, T0, {})
    wait = running.resume()
    assert wait is not None
    deliver(session, reply(wait.correlation_id, "just in time"))
    session.lost(ConnectionLost("cut"))
    assert running.resume(T0 + 1) is None
    assert running.result.event.frame.body == b"just in time"


@DRIVERS
def test_a_closed_wait_forgets_its_request(start: Start, caplog: pytest.LogCaptureFixture) -> None:
    session = connected_session()
    running = start(session, T0, {})
    wait = running.resume()
    assert wait is not None
    running.close()  # what a transport does when the waiting call is cancelled
    assert len(session.requests) == 0
    with caplog.at_level(logging.DEBUG, logger="stompy"):
        assert deliver(session, reply(wait.correlation_id, "nobody waits")) == []
    assert [r.levelno for r in caplog.records if "dropping a reply" in r.getMessage()] == [
        logging.DEBUG
    ]


@DRIVERS
def test_while_reconnecting_it_waits_for_the_connection_then_goes_out(start: Start) -> None:
    session = connected_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    session.lost(ConnectionLost("cut"))
    session.outgoing.clear()
    running = start(session, T0, {"timeout": 2.0})
    wait = running.resume()
    assert wait is not None
    assert (wait.what, wait.deadline) == (Waiting.CHANGE, T0 + 5.0)
    assert len(session.requests) == 0  # nothing sent yet
    connect(session, "RabbitMQ/3.12.1")
    session.outgoing.clear()
    wait = running.resume(T0 + 1)
    assert wait is not None
    # Its timeout counts from when it went out.
    assert (wait.what, wait.deadline) == (Waiting.REPLY, T0 + 1 + 2.0)
    (sent,) = sent_frames(session, "SEND")
    assert sent["correlation-id"] == wait.correlation_id
    deliver(session, reply(wait.correlation_id, "after the reconnect"), T0 + 1.5)
    assert running.resume(T0 + 1.5) is None
    assert running.result.event.frame.body == b"after the reconnect"
    assert running.result.epoch == session.epoch


@DRIVERS
def test_a_connection_not_open_yet_refuses_it(start: Start) -> None:
    session = make_session()
    running = start(session, T0, {})
    with pytest.raises(LocalProtocolError, match="the connection is new, not open yet"):
        running.resume()
    running.close()  # as the blocking transport does after an error: nothing to undo
    assert len(session.requests) == 0
    assert not session.outgoing


@DRIVERS
def test_a_full_outgoing_buffer_is_waited_out_before_the_reply(start: Start) -> None:
    session = connected_session()
    session.outgoing += b"\n" * (MAX_OUTGOING + 1)  # what the broker has not read yet
    running = start(session, T0, {"timeout": 2.0})
    wait = running.resume()
    assert wait is not None
    assert (wait.what, wait.deadline) == (Waiting.ROOM, T0 + 2.0)
    assert len(session.requests) == 1  # queued: its reply may come meanwhile
    del session.outgoing[: MAX_OUTGOING + 1]  # the transport wrote
    wait = running.resume(T0 + 0.5)
    assert wait is not None
    assert (wait.what, wait.deadline) == (Waiting.REPLY, T0 + 2.0)
    (sent,) = sent_frames(session, "SEND")
    deliver(session, reply(sent["correlation-id"], "pong"), T0 + 1)
    assert running.resume(T0 + 1) is None
    assert running.result.event.frame.body == b"pong"
    assert len(session.requests) == 0


@DRIVERS
def test_a_full_outgoing_buffer_until_the_deadline_is_a_timeout(start: Start) -> None:
    session = connected_session()
    session.outgoing += b"\n" * (MAX_OUTGOING + 1)
    running = start(session, T0, {"timeout": 2.0})
    assert running.resume() is not None
    session.wrote(T0 + 1.5)  # it reads, too slowly
    with pytest.raises(StompTimeout, match="reads too slowly"):
        running.resume(T0 + 2.0)
    assert len(session.requests) == 0


@DRIVERS
@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"timeout": -1.0}, ConfigurationError, "timeout"),
        ({"timeout": float("nan")}, ConfigurationError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
        ({"reply_subscription": "sometimes"}, ConfigurationError, "reply_subscription"),
        ({"reply_subscription": 5}, TypeError, "reply_subscription"),
        ({"headers": [("a", "b")]}, TypeError, "headers"),
        ({"headers": {"reply-to": "/queue/mine"}}, ConfigurationError, "reply-to"),
        ({"headers": {"Correlation-Id": "mine"}}, ConfigurationError, "correlation-id"),
    ],
)
def test_its_options_are_checked_before_anything_is_sent(
    start: Start, options: dict[str, object], error: type[Exception], named: str
) -> None:
    session = connected_session()
    running = start(session, T0, options)  # type: ignore[arg-type]
    with pytest.raises(error, match=named):
        running.resume()
    running.close()
    assert not session.outgoing
    assert len(session.requests) == 0


def test_an_int_timeout_is_taken_as_seconds() -> None:
    session = connected_session()
    wait = Asking(session, T0, "/queue/rpc", "ping", {"timeout": 3}).resume()
    assert wait is not None
    assert wait.deadline == T0 + 3.0


@DRIVERS
def test_a_connection_seen_ending_is_waited_out_before_it_goes_out(start: Start) -> None:
    session = connected_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    session.saw_end(ConnectionLost("cut"))  # the transport's verdict is yet to come
    running = start(session, T0, {"timeout": 2.0})
    wait = running.resume()
    assert wait is not None
    assert wait.what is Waiting.CHANGE
    assert not session.outgoing  # not on the connection that ended
    assert len(session.requests) == 0
    session.lost(ConnectionLost("cut"))
    connect(session, "RabbitMQ/3.12.1")
    session.outgoing.clear()
    wait = running.resume(T0 + 1)
    assert wait is not None
    assert (wait.what, wait.deadline) == (Waiting.REPLY, T0 + 1 + 2.0)
    (sent,) = sent_frames(session, "SEND")
    assert sent["correlation-id"] == wait.correlation_id

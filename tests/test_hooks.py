"""Lifecycle hooks (connected, disconnected, reconnected, ERROR frames, a MESSAGE no
subscription takes) and the async ``on_message``: the engine queues the calls, each
client makes them (a thread of their own, a task of the connection's task group).
"""

from __future__ import annotations

import logging
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import anyio
import pytest

import stompy
from stompy import Endpoint, Frame, encode
from stompy._core.events import MessageReceived
from stompy._engine.engine import Engine
from stompy._engine.notices import MAX_NOTICES
from stompy.errors import ConnectionLost, ServerError, StompError
from stompy.testing import Broker, run_broker
from tests.test_session import T0, Delivered, connected, establish, make_session, message

#: A temporary queue the user names in a reply-to with send(): its replies come on a
#: subscription the client never made.
TEMP = "/temp-queue/mine"

# -- the engine ------------------------------------------------------------------------


class Hooks(TypedDict):
    on_connected: Callable[[Endpoint], object]
    on_reconnected: Callable[[Endpoint], object]
    on_disconnected: Callable[[StompError | None], object]
    on_error: Callable[[ServerError], object]
    on_unrouted: Callable[[MessageReceived], object]


class Heard:
    """Every hook, writing down what it heard (from any thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self._lock = threading.Lock()

    def _add(self, what: str, argument: object) -> None:
        with self._lock:
            self.calls.append((what, argument))

    def on_connected(self, endpoint: Endpoint) -> None:
        self._add("connected", endpoint.port)

    def on_reconnected(self, endpoint: Endpoint) -> None:
        self._add("reconnected", endpoint.port)

    def on_disconnected(self, error: StompError | None) -> None:
        self._add("disconnected", None if error is None else type(error).__name__)

    def on_error(self, error: ServerError) -> None:
        self._add("error", error.message)

    def on_unrouted(self, event: MessageReceived) -> None:
        self._add("unrouted", event.subscription)

    def hooks(self) -> Hooks:
        return {
            "on_connected": self.on_connected,
            "on_reconnected": self.on_reconnected,
            "on_disconnected": self.on_disconnected,
            "on_error": self.on_error,
            "on_unrouted": self.on_unrouted,
        }

    def made(self) -> list[tuple[str, object]]:
        with self._lock:
            return list(self.calls)


def run(session: Engine[Delivered]) -> None:
    """Make the calls queued so far, as a transport does."""
    while session.notices:
        notice = session.notices.popleft()
        notice.hook(notice.argument)


def test_the_engine_queues_each_hook_call_once_in_order() -> None:
    heard = Heard()
    session = make_session(reconnect=stompy.Reconnect(), **heard.hooks())
    assert session.options.hooked
    establish(session)
    inbox = session.subscribe("/queue/a", "auto", "gone", None, None, False).inbox
    session.unsubscribe(inbox, False)
    # A MESSAGE for a subscription just ended is expected: no hook. A reply to a
    # temporary queue the user named (no subscription of the client's) goes to
    # on_unrouted.
    session.ready().send("/queue/rpc", "?", headers={"reply-to": TEMP})
    session.receive(message("gone", 1) + message(TEMP, 2), T0)
    session.pump(T0)
    error = encode(Frame("ERROR", (("message", "boom"),)))
    session.receive(error, T0)
    failure = session.pump(T0).failure
    assert isinstance(failure, ServerError)
    session.saw_end(failure)
    assert session.lost(failure) is not None
    assert session.lost(failure) is not None  # told once per connection
    establish(session, T0 + 1)
    session.begin_close()
    session.closed()
    session.closed()
    run(session)
    assert heard.made() == [
        ("connected", 61613),
        ("unrouted", TEMP),
        ("error", "boom"),
        ("disconnected", "ServerError"),
        ("reconnected", 61613),
        ("disconnected", None),
    ]


def test_hook_calls_waiting_for_a_slow_hook_are_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard = Heard()
    session = make_session(**heard.hooks())
    establish(session)
    session.notices.clear()  # on_connected
    session.ready().send("/queue/rpc", "?", headers={"reply-to": TEMP})
    with caplog.at_level(logging.WARNING, logger="stompy"):
        for seq in range(MAX_NOTICES + 3):  # nobody runs the hooks meanwhile
            session.receive(message(TEMP, seq), T0)
            session.pump(T0)
    assert len(session.notices) == MAX_NOTICES
    dropped = [r for r in caplog.records if "on_unrouted" in r.getMessage()]
    assert len(dropped) == 3  # never silently
    run(session)
    assert len(heard.made()) == MAX_NOTICES


def test_without_hooks_nothing_is_queued(caplog: pytest.LogCaptureFixture) -> None:
    session = make_session()
    assert not session.options.hooked
    establish(session)
    session.ready().send("/queue/rpc", "?", headers={"reply-to": TEMP})
    with caplog.at_level(logging.WARNING, logger="stompy"):
        session.receive(message(TEMP, 1), T0)
        session.pump(T0)
    assert not session.notices
    (warning,) = caplog.records  # not silently: a WARNING names it
    assert repr(TEMP) in warning.getMessage()
    session.closed()
    assert not session.notices


def test_a_failure_for_good_is_told_once() -> None:
    heard = Heard()
    session = make_session(heartbeats=(0, 100), **heard.hooks())
    handshake = session.handshake(session.options.endpoints[0])
    handshake.receive(connected("100,0"), T0)
    session.install(handshake, T0)

    def nothing_waits() -> bool:
        return False

    failure = session.tick(T0 + 10, nothing_waits).failure
    assert failure is not None
    assert session.lost(failure) is None  # no reconnect policy: failed
    session.closed()
    run(session)
    assert heard.made() == [("connected", 61613), ("disconnected", "HeartbeatTimeout")]


# -- the clients -------------------------------------------------------------------------

POLICY = stompy.Reconnect(initial_delay=0.01, max_delay=0.1)


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def session_of(broker: Broker, conn: stompy.Connection | stompy.AsyncConnection) -> str:
    return next(c.session for c in broker.connections if c.session == conn.session)


STRANGER = encode(
    Frame(
        "MESSAGE",
        (("destination", "/queue/x"), ("message-id", "m-1"), ("subscription", TEMP)),
        b"a reply nobody subscribed to",
    )
)
ERROR = encode(Frame("ERROR", (("message", "boom"),)))


def expected(port: int) -> list[tuple[str, object]]:
    return [
        ("connected", port),
        ("unrouted", TEMP),
        ("error", "boom"),
        ("disconnected", "ServerError"),
        ("reconnected", port),
        ("disconnected", None),
    ]


def wait_for(heard: Heard, count: int) -> None:
    for _ in range(200):  # bounded: 10 s
        if len(heard.made()) >= count:
            return
        time.sleep(0.05)


def test_blocking_hooks(broker: Broker) -> None:
    heard = Heard()
    conn = stompy.Connection(broker.url, reconnect=POLICY, **heard.hooks())
    with conn:
        wait_for(heard, 1)
        conn.send("/queue/rpc", "?", headers={"reply-to": TEMP}, receipt=True)
        broker.send_raw(session_of(broker, conn), STRANGER)
        wait_for(heard, 2)
        broker.send_raw(session_of(broker, conn), ERROR)
        wait_for(heard, 5)
        conn.send(f"/queue/{uuid.uuid4().hex}", "after", receipt=True)
        assert threading.current_thread().name == "MainThread"
    assert heard.made() == expected(broker.port)  # close() waited for the last


def test_blocking_hooks_run_in_a_thread_of_their_own_and_may_fail(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "unraisablehook", lambda report: None)  # printed, else
    threads: list[str] = []

    def connected(endpoint: Endpoint) -> None:
        threads.append(threading.current_thread().name)
        raise RuntimeError("a broken hook")

    with caplog.at_level(logging.ERROR, logger="stompy"):
        with stompy.Connection(broker.url, on_connected=connected) as conn:
            conn.send(f"/queue/{uuid.uuid4().hex}", "x", receipt=True)
    assert len(threads) == 1
    assert threads[0].startswith("stompy-hooks-")
    assert any("on_connected hook failed" in r.getMessage() for r in caplog.records)


def test_a_failing_hook_is_printed_to_stderr_without_logging(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With logging not configured (the NullHandler on ``stompy``), a raising hook was
    silent; it is reported as an ``on_message`` callback's: to :func:`sys.unraisablehook`,
    whose default prints it to stderr."""
    reports: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)

    def connected(endpoint: Endpoint) -> None:
        raise RuntimeError("a broken hook")

    with stompy.Connection(broker.url, on_connected=connected) as conn:
        conn.send(f"/queue/{uuid.uuid4().hex}", "x", receipt=True)
    check_one_hook_report(reports, broker.port)


@pytest.mark.anyio
async def test_a_failing_async_hook_is_printed_to_stderr_without_logging(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)

    async def connected(endpoint: Endpoint) -> None:
        raise RuntimeError("a broken hook")

    with anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url, on_connected=connected) as conn:
            await conn.send(f"/queue/{uuid.uuid4().hex}", "x", receipt=True)
    check_one_hook_report(reports, broker.port)


def check_one_hook_report(reports: list[Any], port: int) -> None:
    (report,) = reports
    assert report.exc_type is RuntimeError
    assert str(report.exc_value) == "a broken hook"
    assert report.err_msg == "Exception ignored in the on_connected hook, called with"
    assert isinstance(report.object, Endpoint)
    assert report.object.port == port


def test_close_inside_a_hook_returns_at_once(broker: Broker) -> None:
    done = threading.Event()
    took: list[float] = []

    def connected(endpoint: Endpoint) -> None:
        started = time.monotonic()
        assert conn.close() is True
        took.append(time.monotonic() - started)
        done.set()

    conn = stompy.Connection(broker.url, on_connected=connected, receipt_timeout=2)
    conn.connect()
    assert done.wait(10)
    assert took[0] < 1


@pytest.mark.anyio
async def test_async_close_inside_a_hook_returns_at_once(broker: Broker) -> None:
    done = anyio.Event()
    took: list[float] = []

    async def connected(endpoint: Endpoint) -> None:
        started = time.monotonic()
        assert await conn.close() is True
        took.append(time.monotonic() - started)
        done.set()

    # With receipt_timeout far past fail_after: a close that waited for its own task
    # would be cut short here, not return True.
    with anyio.fail_after(10):
        async with stompy.AsyncConnection(
            broker.url, on_connected=connected, receipt_timeout=60
        ) as conn:
            await done.wait()
    assert len(took) == 1


@pytest.mark.anyio
async def test_async_hooks(broker: Broker) -> None:
    heard = Heard()

    async def on_error(error: ServerError) -> None:  # a coroutine function is awaited
        await anyio.sleep(0)
        heard.on_error(error)

    hooks = heard.hooks()
    hooks["on_error"] = on_error
    with anyio.fail_after(30):
        async with stompy.AsyncConnection(broker.url, reconnect=POLICY, **hooks) as conn:
            await conn.send("/queue/rpc", "?", headers={"reply-to": TEMP}, receipt=True)
            await anyio.to_thread.run_sync(broker.send_raw, session_of(broker, conn), STRANGER)
            await anyio.to_thread.run_sync(broker.send_raw, session_of(broker, conn), ERROR)
            for _ in range(200):
                if len(heard.made()) >= 5:
                    break
                await anyio.sleep(0.05)
            await conn.send(f"/queue/{uuid.uuid4().hex}", "after", receipt=True)
    assert heard.made() == expected(broker.port)


# -- on_message for async subscriptions ------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.anyio
async def test_async_on_message_runs_in_the_connections_task_group(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dest = f"/queue/{uuid.uuid4().hex}"
    seen: list[str] = []
    done = anyio.Event()

    async def handle(message: stompy.AsyncMessage) -> None:
        if message.text == "bad":
            raise RuntimeError("cannot handle it")
        await message.ack()
        seen.append(message.text)
        if len(seen) == 2:
            done.set()

    with run_broker() as broker, anyio.fail_after(30):
        async with stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(dest, ack="client-individual", on_message=handle):
                for text in ("one", "bad", "two"):
                    await conn.send(dest, text)
                await done.wait()
            plain: list[str] = []
            await conn.subscribe(dest + "-plain", on_message=lambda m: plain.append(m.text))
            await conn.send(dest + "-plain", "sync callbacks too", receipt=True)
            for _ in range(200):
                if plain:
                    break
                await anyio.sleep(0.01)
            assert plain == ["sync callbacks too"]
    assert seen == ["one", "two"]  # the failing one was logged, and the next came
    assert any("on_message callback" in r.getMessage() for r in caplog.records)


# -- a failed connection says why (trio's errors say nothing themselves) -----------------------


def reset_after_connected() -> tuple[str, threading.Thread]:
    """A server that accepts one client, says CONNECTED, then resets the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)

    def serve() -> None:
        with listener:
            sock, _ = listener.accept()
            with sock:
                sock.settimeout(20)
                sock.recv(65536)  # CONNECT
                sock.sendall(encode(Frame("CONNECTED", (("version", "1.2"),))))
                sock.recv(65536)  # SUBSCRIBE
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"stomp://127.0.0.1:{listener.getsockname()[1]}", thread


def test_blocking_failed_connection_says_why() -> None:
    url, server = reset_after_connected()
    with stompy.Connection(url) as conn:
        sub = conn.subscribe("/queue/x", receipt=False)
        with pytest.raises(ConnectionLost) as lost:
            sub.get(timeout=10)
    server.join(10)
    assert not str(lost.value).rstrip().endswith(":")


@pytest.mark.anyio
async def test_async_failed_connection_says_why() -> None:
    url, server = reset_after_connected()
    with anyio.fail_after(20):
        async with stompy.AsyncConnection(url) as conn:
            sub = await conn.subscribe("/queue/x")
            with pytest.raises(ConnectionLost) as lost:
                await sub.get(timeout=10)
    await anyio.to_thread.run_sync(server.join, 10)
    text = str(lost.value)
    assert not text.rstrip().endswith(":"), text
    assert text.split("failed: ", 1)[1]  # a reason after the colon

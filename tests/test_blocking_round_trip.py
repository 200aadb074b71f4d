"""The blocking client's round trip kept short (issue 36): what its shortcuts must keep.

A ``send(receipt=True)`` skips the call's flag check and the logging call per frame
(logging's own cache of the logger's levels is read instead), and a caller that read
its answer through leaves the I/O thread standing aside (no ``epoll_ctl`` per round
trip), which takes the reading back itself once nobody reads. These tests hold what
those shortcuts must not change: what is logged when logging's settings change in the
middle of a connection; what comes when no caller waits any more (a message, the
broker's end) still reaches the connection, without a call to fetch it; and a
connection with hooks keeps the shortcut (its hooks thread sleeps through round trips).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from types import FrameType

import pytest

import stompy
from stompy.testing import run_broker


def queue() -> str:
    return f"/queue/round-trip-{uuid.uuid4().hex[:8]}"


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def test_frames_are_logged_from_the_moment_debug_is_switched_on_and_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stompy_log = logging.getLogger("stompy")
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        dest = queue()
        conn.send(dest, "before", receipt=True)  # logging's cache now says: not at DEBUG
        caplog.set_level(logging.DEBUG, logger="stompy")  # (setLevel empties the cache)
        conn.send(dest, "while on", receipt=True)
        stompy_log.setLevel(logging.INFO)
        conn.send(dest, "after", receipt=True)
        stompy_log.setLevel(logging.DEBUG)
        stompy_log.disabled = True  # as logging.config does to loggers it did not name
        try:
            conn.send(dest, "disabled", receipt=True)
        finally:
            stompy_log.disabled = False
        conn.send(dest, "again", receipt=True)
    frames = logged(caplog)
    assert "while on" in frames
    assert "again" in frames
    assert "before" not in frames
    assert "after" not in frames
    assert "disabled" not in frames


def round_trips(conn: stompy.Connection, count: int) -> None:
    """A loop of round trips: each reads its receipt through, the I/O thread aside."""
    dest = queue()
    for _ in range(count):
        conn.send(dest, "x", receipt=True)


def test_a_message_nobody_waits_for_reaches_the_inbox_after_round_trips() -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with stompy.Connection(broker.url) as sender:
            dest = queue()
            sub = conn.subscribe(dest, receipt=True)
            for i in range(3):
                round_trips(conn, 50)  # then no thread of conn waits or reads
                sender.send(dest, str(i), receipt=True)
                deadline = time.monotonic() + 5
                message = sub.get(timeout=0)  # takes from the inbox, never reads
                while message is None and time.monotonic() < deadline:
                    time.sleep(0.005)
                    message = sub.get(timeout=0)
                assert message is not None
                assert message.text == str(i)


def test_the_broker_gone_after_round_trips_is_seen_without_a_call() -> None:
    ended = threading.Event()
    with run_broker() as broker:
        conn = stompy.Connection(broker.url, on_disconnected=lambda error: ended.set())
        with conn:
            round_trips(conn, 50)
            assert broker.drop_all_connections() == 1
            # Nobody calls: the I/O thread, standing aside, wakes for the end itself.
            assert ended.wait(timeout=5)
            with pytest.raises(stompy.ConnectionLost):
                conn.send(queue(), "x", receipt=True)


def test_round_trips_leave_the_hooks_thread_asleep() -> None:
    """The hooks thread waits on a condition of its own: an answer read through does
    not wake it (nor, so, make the reading caller give the reading back to the I/O
    thread); a hook to call still does."""
    woken: list[str] = []  # the hooks thread's waits, each after it was woken

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is threading.Condition.wait.__code__:
            name = threading.current_thread().name
            if name.startswith("stompy-hooks-"):
                woken.append(name)

    called: list[str] = []
    ended = threading.Event()

    def disconnected(error: object) -> None:
        called.append("disconnected")
        ended.set()

    with run_broker() as broker:
        conn = stompy.Connection(
            broker.url,
            on_connected=lambda endpoint: called.append("connected"),
            on_disconnected=disconnected,
        )
        threading.setprofile(profile)  # for the threads the connection starts
        try:
            conn.connect()
        finally:
            threading.setprofile(None)
        try:
            round_trips(conn, 10)
            deadline = time.monotonic() + 5
            while "connected" not in called and time.monotonic() < deadline:
                time.sleep(0.005)
            assert called == ["connected"]
            before = len(woken)
            round_trips(conn, 200)
            assert woken[before:] == []  # woken again and again, before
        finally:
            conn.close()
        assert ended.wait(timeout=5)
    assert called == ["connected", "disconnected"]

"""A raising ``on_message`` callback cannot go unseen: without a hook it is printed to
stderr through :func:`sys.unraisablehook` (and logged), with ``on_callback_error`` the
hook gets the exception and the message; either way the next message comes. The same
in the blocking, asyncio and trio clients. What becomes of the message: docs/acks.md.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import stompy
from stompy.testing import run_broker, serve

FLAVOURS = ("blocking", "asyncio", "trio")

#: One failing message and one good one; logging is never configured. Prints what the
#: callback handled; stderr is what Python (and stompy) printed of the failure.
FAILING = {
    "blocking": """
        import threading

        import stompy
        from stompy.testing import run_broker

        done = threading.Event()


        def handle(message):
            if message.text == "bad":
                raise RuntimeError("cannot handle this one")
            print("handled", message.text, flush=True)
            done.set()


        with run_broker() as broker, stompy.Connection(broker.url) as conn:
            conn.subscribe("/queue/work", on_message=handle)
            conn.send("/queue/work", "bad")
            conn.send("/queue/work", "good", receipt=True)
            assert done.wait(20)
    """,
    "async": """
        import sys

        import anyio

        import stompy
        from stompy.testing import serve


        async def main():
            done = anyio.Event()

            async def handle(message):
                if message.text == "bad":
                    raise RuntimeError("cannot handle this one")
                print("handled", message.text, flush=True)
                done.set()

            with anyio.fail_after(20):
                async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
                    await conn.subscribe("/queue/work", on_message=handle)
                    await conn.send("/queue/work", "bad")
                    await conn.send("/queue/work", "good", receipt=True)
                    await done.wait()


        anyio.run(main, backend=sys.argv[1])
    """,
}


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_logging_the_traceback_is_printed_and_the_next_message_comes(
    flavour: str, tmp_path: Path
) -> None:
    script = tmp_path / "failing.py"  # a file, so that the traceback shows its lines
    script.write_text(textwrap.dedent(FAILING["blocking" if flavour == "blocking" else "async"]))
    result = subprocess.run(
        [sys.executable, str(script), flavour],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "handled good\n"
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Exception ignored in the on_message callback of <"), lines
    assert "body=b'bad'" in lines[0]  # the message it was called with
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: cannot handle this one"
    assert 'in handle\n    raise RuntimeError("cannot handle this one")' in result.stderr


# -- in process: the hook, and sys.unraisablehook --------------------------------------------


def run_flavour(
    flavour: str,
    bodies: list[str],
    handle: Callable[[Any], None],
    *,
    until: Callable[[], bool],
    **options: Any,
) -> None:
    """Subscribe ``handle`` (a plain function, in every flavour) to a fresh queue with
    ``options`` for the connection, send ``bodies``, and wait (20 s at most) until
    ``until()``."""
    dest = f"/queue/{uuid.uuid4().hex}"
    if flavour == "blocking":
        with run_broker() as broker, stompy.Connection(broker.url, **options) as conn:
            conn.subscribe(dest, on_message=handle)
            for body in bodies:
                conn.send(dest, body, receipt=True)
            for _ in range(2000):
                if until():
                    return
                time.sleep(0.01)
        raise AssertionError("not done in 20 s")

    async def main() -> None:
        with anyio.fail_after(20):
            async with serve() as broker:
                async with stompy.AsyncConnection(broker.url, **options) as conn:
                    await conn.subscribe(dest, on_message=handle)
                    for body in bodies:
                        await conn.send(dest, body, receipt=True)
                    while not until():
                        await anyio.sleep(0.01)

    anyio.run(main, backend=flavour)


class Boom(Exception):
    pass


def failing_on(bad: str, handled: list[str]) -> Callable[[Any], None]:
    def handle(message: Any) -> None:
        if message.text == bad:
            raise Boom(f"cannot handle {message.text}")
        handled.append(message.text)

    return handle


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_hook_gets_the_exception_and_the_message_and_dispatch_goes_on(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handled: list[str] = []
    failed: list[tuple[Exception, Any]] = []
    run_flavour(
        flavour,
        ["one", "bad", "two", "bad", "three"],
        failing_on("bad", handled),
        until=lambda: len(handled) == 3,
        on_callback_error=lambda exc, message: failed.append((exc, message)),
    )
    assert handled == ["one", "two", "three"]
    assert [(type(e), str(e), m.text) for e, m in failed] == [
        (Boom, "cannot handle bad", "bad")
    ] * 2
    message_class = stompy.Message if flavour == "blocking" else stompy.AsyncMessage
    assert all(type(m) is message_class for _, m in failed)
    assert unraisable == []  # the hook replaced the report


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_a_hook_it_goes_to_sys_unraisablehook(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handled: list[str] = []
    run_flavour(
        flavour, ["bad", "good"], failing_on("bad", handled), until=lambda: handled == ["good"]
    )
    (report,) = unraisable
    assert report.exc_type is Boom
    assert str(report.exc_value) == "cannot handle bad"
    assert report.exc_traceback is report.exc_value.__traceback__
    assert report.err_msg.startswith("Exception ignored in the on_message callback of <")
    assert report.object.text == "bad"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_raising_hook_is_reported_with_the_callbacks_error_chained(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handled: list[str] = []

    def broken_hook(exc: Exception, message: Any) -> None:
        raise ValueError("the hook is broken too")

    run_flavour(
        flavour,
        ["bad", "good"],
        failing_on("bad", handled),
        until=lambda: handled == ["good"],
        on_callback_error=broken_hook,
    )
    (report,) = unraisable
    assert report.exc_type is ValueError
    assert type(report.exc_value.__context__) is Boom
    assert report.err_msg.startswith("Exception ignored in the on_callback_error hook of <")


@pytest.mark.anyio
async def test_an_async_hook_is_awaited_and_can_nack_the_message() -> None:
    """In client-individual mode stompy leaves a failed message unanswered; a hook can
    nack it, and the broker delivers it again (redelivered), here to the same callback."""
    dest = f"/queue/{uuid.uuid4().hex}"
    seen: list[tuple[str, bool]] = []
    again = anyio.Event()

    async def handle(message: stompy.AsyncMessage) -> None:
        seen.append((message.text, message.redelivered))
        if not message.redelivered:
            raise Boom("first time")
        await message.ack()
        again.set()

    async def nack(exc: Exception, message: Any) -> None:
        await message.nack()

    with anyio.fail_after(20):
        async with serve() as broker:
            async with stompy.AsyncConnection(broker.url, on_callback_error=nack) as conn:
                await conn.subscribe(dest, ack="client-individual", on_message=handle)
                await conn.send(dest, "work", receipt=True)
                await again.wait()
    assert seen == [("work", False), ("work", True)]


# -- an on_message that cannot be called -----------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_on_message_that_is_not_callable_is_refused_and_nothing_is_subscribed(
    flavour: str,
) -> None:
    """``on_message=5`` (or a message handler's result, ``on_message=handle(m)``) was taken:
    the SUBSCRIBE went out, and each message then failed in the callback ("'int' object is
    not callable"), lost with ``ack="auto"``. It is a TypeError naming it, as the
    connection's hooks are, and the messages stay queued."""
    dest = f"/queue/{uuid.uuid4().hex}"
    expected = r"^on_message: expected a callable or None, got 5 \(int\)$"
    if flavour == "blocking":
        with run_broker() as broker, stompy.Connection(broker.url) as conn:
            conn.send(dest, "kept", receipt=True)
            with pytest.raises(TypeError, match=expected):
                conn.subscribe(dest, on_message=5)  # type: ignore[arg-type]
            (info,) = broker.connections
            assert info.subscriptions == ()
            conn.send(dest, "kept too", receipt=True)
            assert broker.queue_depth(dest) == 2
        return

    async def main() -> None:
        with anyio.fail_after(20):
            async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
                await conn.send(dest, "kept", receipt=True)
                with pytest.raises(TypeError, match=expected):
                    await conn.subscribe(dest, on_message=5)  # type: ignore[arg-type]
                (info,) = broker.connections
                assert info.subscriptions == ()
                await conn.send(dest, "kept too", receipt=True)
                assert broker.queue_depth(dest) == 2

    anyio.run(main, backend=flavour)


def test_the_blocking_client_refuses_a_coroutine_function_where_it_calls_one() -> None:
    """``async def`` on a blocking Connection only made a coroutine nobody awaited: an
    ``on_message`` one never ran and, with ack=auto, its message was gone (a
    RuntimeWarning at most); an ``on_connected`` one was dropped with a WARNING that a
    program without logging never saw. Each is a TypeError naming it, before anything is
    opened or subscribed."""

    async def handle(message: Any) -> None:
        raise AssertionError("never called")

    expected = r"^{}: Connection calls plain functions, got the coroutine function .*handle\(\)"
    for hook in ("on_connected", "on_disconnected", "on_error", "on_callback_error"):
        with pytest.raises(TypeError, match=expected.format(hook)):
            options: dict[str, Any] = {hook: handle}
            stompy.Connection("stomp://127.0.0.1:1", **options)
    dest = f"/queue/{uuid.uuid4().hex}"
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        conn.send(dest, "kept", receipt=True)
        with pytest.raises(TypeError, match=expected.format("on_message")):
            conn.subscribe(dest, on_message=handle)
        (info,) = broker.connections
        assert info.subscriptions == ()
        assert broker.queue_depth(dest) == 1


# -- SystemExit, KeyboardInterrupt: not an Exception -----------------------------------


def exiting_on(bad: str, handled: list[str]) -> Callable[[Any], None]:
    def handle(message: Any) -> None:
        if message.text == bad:
            sys.exit(3)  # a newcomer's way to stop after the message it waited for
        handled.append(message.text)

    return handle


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_callback_that_exits_ends_the_async_block_and_is_reported_in_a_thread(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async clients hand SystemExit on, as any task does: it ends the block. The
    blocking client's callback runs in a thread, which SystemExit cannot end the program
    from: it is reported as an exception is, and the next message comes (it ended the
    thread, unseen, and the subscription's later messages were never handed over)."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handled: list[str] = []
    handle = exiting_on("bad", handled)
    if flavour != "blocking":
        with pytest.raises(SystemExit):
            run_flavour(flavour, ["bad", "good"], handle, until=lambda: False)
        assert unraisable == []
        return
    run_flavour(flavour, ["bad", "good"], handle, until=lambda: handled == ["good"])
    (report,) = unraisable
    assert report.exc_type is SystemExit
    assert report.err_msg.startswith("Exception ignored in the on_message callback of <")
    assert "SystemExit cannot end the program" in report.err_msg
    assert report.object.text == "bad"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_hook_that_raises_keyboard_interrupt_is_reported_in_a_thread(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handled: list[str] = []
    disconnected: list[object] = []

    def on_connected(endpoint: object) -> None:
        raise KeyboardInterrupt

    options: dict[str, Any] = {
        "on_connected": on_connected,
        "on_disconnected": disconnected.append,
    }
    handle = failing_on("never", handled)
    if flavour != "blocking":
        with pytest.raises(KeyboardInterrupt):
            run_flavour(flavour, ["good"], handle, until=lambda: False, **options)
        return
    run_flavour(flavour, ["good"], handle, until=lambda: handled == ["good"], **options)
    (report,) = unraisable
    assert report.exc_type is KeyboardInterrupt
    assert report.err_msg.startswith("Exception ignored in the on_connected hook (")
    assert disconnected == [None]  # the hooks thread went on: the later hook was called

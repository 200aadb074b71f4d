"""A library's logging etiquette: silent unless the application configured logging, and
at DEBUG every frame sent, the passcode masked."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import anyio
import pytest

import stompy
from stompy.testing import run_broker, serve

#: Loses its connection three ways (no reconnect, reconnect, asyncio), printing only what
#: it was told; the application configures logging only when given an argument.
LOSING = """
import logging
import sys

import anyio

import stompy
from stompy.testing import run_broker, serve

if len(sys.argv) > 1:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")

with run_broker() as broker:
    conn = stompy.Connection(broker.url)
    conn.connect()
    sub = conn.subscribe("/queue/x")
    broker.drop_all_connections()
    try:
        sub.get(timeout=5)
    except stompy.ConnectionLost:
        print("lost")
    conn.close()

    policy = stompy.Reconnect(initial_delay=0.05)
    with stompy.Connection(broker.url, reconnect=policy) as conn:
        sub = conn.subscribe("/queue/x")
        broker.drop_all_connections()
        conn.send("/queue/x", "back", receipt=True)
        print(sub.get(timeout=5).text)


async def main():
    async with serve() as broker:
        policy = stompy.Reconnect(initial_delay=0.05)
        async with stompy.AsyncConnection(broker.url, reconnect=policy) as conn:
            async with conn.subscribe("/queue/x") as sub:
                await broker.drop_all_connections()
                await conn.send("/queue/x", "async back", receipt=True)
                print((await sub.get(timeout=5)).text)


anyio.run(main)
"""


def run_losing(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOSING), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_lost_connection_prints_nothing_when_logging_is_not_configured() -> None:
    result = run_losing()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["lost", "back", "async back", ""]
    assert result.stderr == ""


def test_an_application_that_configured_logging_sees_it() -> None:
    result = run_losing("configure")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("WARNING stompy ") and "lost" in line for line in lines), lines


def test_the_library_logger_has_a_null_handler_only() -> None:
    handlers = logging.getLogger("stompy").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
    assert logging.getLogger("stompy").level == logging.NOTSET  # the application decides


def sent_frames(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.parametrize("websocket", [False, True], ids=["tcp", "ws"])
def test_debug_log_shows_frames_with_the_passcode_masked(
    websocket: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stompy")
    with run_broker(users={"app": "hunter2"}, websocket=websocket) as broker:
        url = broker.ws_url if websocket else broker.url
        assert url is not None
        with stompy.Connection(url, login="app", passcode="hunter2") as conn:
            conn.send("/queue/logged", "visible body", receipt=True)
        url_with_passcode = url.replace("://", "://app:hunter2@")
        stompy.send(url_with_passcode, "/queue/logged", "again")
    frames = sent_frames(caplog)
    assert "CONNECT" in frames or "STOMP" in frames
    assert "passcode:********" in frames
    assert "SEND" in frames
    assert "visible body" in frames
    assert "hunter2" not in caplog.text


@pytest.mark.anyio
async def test_async_debug_log_masks_the_passcode(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="stompy")
    with anyio.fail_after(10):
        async with serve(users={"app": "hunter2"}) as broker:
            url = broker.url.replace("://", "://app:hunter2@")
            async with stompy.AsyncConnection(url) as conn:
                await conn.send("/queue/logged", "async body", receipt=True)
    frames = sent_frames(caplog)
    assert "passcode:********" in frames
    assert "async body" in frames
    assert "hunter2" not in caplog.text


def _debug_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.parametrize("flavour", ["blocking", "asyncio", "trio"])
def test_a_send_without_receipt_is_logged_from_the_moment_debug_is_on(
    flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A publisher that sends without receipts hears nothing from the broker (no heart-
    beats here): its sends are logged as soon as DEBUG is switched on, and no longer once
    it is off, not from whenever bytes next arrive."""
    # The level is set on the logger itself and put back as it was: caplog.set_level
    # would restore the INFO set here after the test, for every later test to find.
    stompy_log = logging.getLogger("stompy")
    level = stompy_log.level
    stompy_log.setLevel(logging.INFO)

    async def sends(conn: stompy.AsyncConnection) -> None:
        await conn.send("/queue/log-nr", "quiet before")
        stompy_log.setLevel(logging.DEBUG)
        await conn.send("/queue/log-nr", "loud while on")
        stompy_log.setLevel(logging.INFO)
        await conn.send("/queue/log-nr", "quiet after")
        await conn.send("/queue/log-nr", "last", receipt=True)

    try:
        with run_broker() as broker:
            if flavour == "blocking":
                with stompy.Connection(broker.url, heartbeats=(0, 0)) as conn:
                    conn.send("/queue/log-nr", "quiet before")
                    stompy_log.setLevel(logging.DEBUG)
                    conn.send("/queue/log-nr", "loud while on")
                    stompy_log.setLevel(logging.INFO)
                    conn.send("/queue/log-nr", "quiet after")
                    conn.send("/queue/log-nr", "last", receipt=True)
            else:

                async def main() -> None:
                    async with stompy.AsyncConnection(broker.url, heartbeats=(0, 0)) as conn:
                        await sends(conn)

                anyio.run(main, backend=flavour)
    finally:
        stompy_log.setLevel(level)
    text = _debug_text(caplog)
    assert "loud while on" in text
    assert "quiet before" not in text
    assert "quiet after" not in text

"""The blocking client's round trip kept short (issue 36): what its shortcuts must keep.

A ``send(receipt=True)`` skips the call's flag check and the logging call per frame
(logging's own cache of the logger's levels is read instead); these tests hold the
behaviour those shortcuts must not change: what is logged when logging's settings change
in the middle of a connection.
"""

from __future__ import annotations

import logging
import uuid

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

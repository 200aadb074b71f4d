"""Misuses a newcomer makes that Python would answer vaguely: each says what to do.

The blocking client in ``async with``, the async one in ``with``; a reconnect policy
whose longest delay is shorter than its first (issue 34, found by trying the docs).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import stompy
from stompy.testing import run_broker


def test_the_async_client_in_a_plain_with_says_async_with() -> None:
    conn: Any = stompy.AsyncConnection("stomp://127.0.0.1:1")
    with pytest.raises(TypeError, match="async with AsyncConnection"):
        with conn:
            pass


def test_the_blocking_client_in_async_with_says_with() -> None:
    async def main() -> None:
        with run_broker() as broker:
            conn = stompy.Connection(broker.url)
            opened: Any = conn  # as a newcomer's untyped code has it
            with pytest.raises(TypeError, match=r"`with Connection\(\.\.\.\) as conn:`"):
                async with opened:
                    pass
            assert not conn.connected  # nothing was opened

    anyio.run(main)


def test_a_reconnect_whose_longest_delay_is_shorter_than_its_first_is_refused() -> None:
    with pytest.raises(stompy.ConfigurationError, match="max_delay") as raised:
        stompy.Reconnect(initial_delay=10, max_delay=1)
    assert "initial_delay" in str(raised.value)
    stompy.Reconnect(initial_delay=1, max_delay=1)  # equal is fine

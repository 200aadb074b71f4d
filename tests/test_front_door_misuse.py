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


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda conn: conn.send("/queue/m", "x", headers=["ab"]), "headers"),
        (lambda conn: conn.send("/queue/m", "x", receipt=1), "receipt"),
        (lambda conn: conn.send("/queue/m", "x", receipt="yes"), "receipt"),
        (lambda conn: conn.send("/queue/m", "x", receipt=None), "receipt"),
        (lambda conn: conn.send_many([stompy.Outgoing("/queue/m", "x")], receipt=1), "receipt"),
        (lambda conn: conn.subscribe("/queue/n", id=5), "id"),
        (lambda conn: conn.subscribe("/queue/n", receipt="yes"), "receipt"),
    ],
)
def test_a_flag_or_header_of_the_wrong_type_is_refused_with_nothing_sent(
    call: Any, match: str
) -> None:
    # A two-letter str unpacked as a header pair ("ab" -> a:b), receipt="yes" became
    # the receipt's id, receipt=1 or id=5 named a header the user never wrote.
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises(TypeError, match=match):
            call(conn)
        conn.send("/queue/after", "ok", receipt=True)  # the connection lives on
        assert broker.queue_depth("/queue/m") == 0  # no SEND went out
        conn.send("/queue/n", "kept", receipt=True)  # no SUBSCRIBE went out: it stays
        assert broker.queue_depth("/queue/n") == 1


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_port_out_of_range_is_a_configuration_error(port: int) -> None:
    with pytest.raises(stompy.ConfigurationError, match="port"), run_broker(port=port):
        pass

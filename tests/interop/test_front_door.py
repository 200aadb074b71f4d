"""Issue 34's front door against real brokers: what the in-process broker's tests show
holds where a real broker answers.

* A body over ActiveMQ's frame limit (``transport.maxDataLength``, 100 MiB by default)
  is a :class:`stompy.TooLargeForServer` that quotes the broker and names where the
  limit is set; RabbitMQ takes such a body (its STOMP adapter sets no lower limit).
* A second ACK of a message is refused by the client, nothing sent: the connection
  lives on and the broker still takes a send with a receipt.
"""

from __future__ import annotations

import anyio
import pytest

import stompy
from tests.interop._support import TIMEOUT, BrokerTarget

#: Over ActiveMQ's default maxDataLength (104,857,600 bytes).
OVERSIZED = 110 * 1024 * 1024


def oversized_send(url: str, queue: str, backend: str) -> tuple[BaseException, BaseException]:
    """Send a body over the limit, then a small one: the two errors raised."""
    errors: list[BaseException] = []
    body = b"x" * OVERSIZED
    if backend == "blocking":
        with stompy.Connection(url, connect_timeout=TIMEOUT, receipt_timeout=60) as conn:
            for payload in (body, b"small"):
                try:
                    conn.send(queue, payload, receipt=True)
                except stompy.StompError as exc:
                    errors.append(exc)
        return errors[0], errors[1]

    async def main() -> None:
        async with stompy.AsyncConnection(url, connect_timeout=TIMEOUT, receipt_timeout=60) as conn:
            for payload in (body, b"small"):
                try:
                    await conn.send(queue, payload, receipt=True)
                except stompy.StompError as exc:
                    errors.append(exc)

    anyio.run(main, backend=backend)
    return errors[0], errors[1]


@pytest.mark.parametrize("backend", ["blocking", "asyncio", "trio"])
def test_a_body_over_activemq_s_limit_says_so(
    broker: BrokerTarget, unique: str, backend: str
) -> None:
    if broker.kind != "activemq":
        pytest.skip(f"{broker.kind} sets no frame limit below {OVERSIZED} bytes")
    error, again = oversized_send(broker.url, f"/queue/stompy-too-large-{unique}", backend)
    # The connection ended with it: the next call says so again, freshly raised.
    assert isinstance(again, stompy.TooLargeForServer)
    assert again is not error
    assert isinstance(error, stompy.TooLargeForServer), repr(error)
    assert isinstance(error, stompy.MessageTooLarge)
    assert isinstance(error, stompy.ServerError)
    assert "maxDataLength" in str(error)
    assert "maximum data length" in str(error).lower()  # the broker's own words


def test_a_second_ack_is_refused_and_the_connection_lives_on(
    broker: BrokerTarget, unique: str
) -> None:
    queue = f"/queue/stompy-ack-twice-{unique}"
    with stompy.Connection(broker.url, connect_timeout=TIMEOUT) as conn:
        conn.send(queue, "once", receipt=True)
        with conn.subscribe(queue, ack="client-individual") as sub:
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            message.ack(receipt=True)
            with pytest.raises(stompy.LocalProtocolError, match="already acknowledged"):
                message.ack()
            with pytest.raises(stompy.LocalProtocolError, match="already acknowledged"):
                message.nack()
            conn.send(queue, "still up", receipt=True)
            again = sub.get(timeout=TIMEOUT)
            assert again is not None
            assert again.text == "still up"
            again.ack(receipt=True)
        assert conn.connected

"""A broker that refuses a frame as it arrives: its ERROR is what the client reports.

ActiveMQ reads a SEND's ``content-length``, and when the body is over its limit sends
an ERROR and closes the connection while the client is still writing the body. The
client's write then fails (a broken pipe), before it has read the ERROR that says why.
The clients read what the broker sent before they report the failure, so the error is
the broker's (a :class:`stompy.TooLargeForServer` here), not "Broken pipe"; and when
the broker said nothing, the error names the likely cause. Against a raw server on the
loopback interface that does as ActiveMQ does (tests/interop/test_front_door.py runs the
same against ActiveMQ itself).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import anyio
import pytest

import stompy
from tests.test_lenient import Peer, scripted

#: Far more than the socket buffers of both ends hold: the write is still under way
#: when the server closes.
BODY = 32 * 1024 * 1024


def refuse_after_headers(say: bool) -> Callable[[Peer], None]:
    """A server that answers CONNECT, reads the start of the next frame, sends an
    ERROR (when ``say``) and closes with the rest unread (a reset, as ActiveMQ's)."""

    def script(peer: Peer) -> None:
        peer.connected()
        peer.sock.recv(65536)  # the SEND's headers and the start of its body
        if say:
            peer.send(
                "ERROR",
                ("message", "The maximum data length was exceeded"),
                body=b"ProtocolException: The maximum data length was exceeded",
            )
        time.sleep(0.05)  # the ERROR leaves before the reset
        peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")

    return script


def send_large(url: str, backend: str) -> BaseException:
    body = b"x" * BODY
    if backend == "blocking":
        with stompy.Connection(url, connect_timeout=5.0, receipt_timeout=10.0) as conn:
            with pytest.raises(stompy.StompError) as raised:
                conn.send("/queue/big", body, receipt=True)
        return raised.value

    errors: list[BaseException] = []

    async def main() -> None:
        async with stompy.AsyncConnection(url, connect_timeout=5.0, receipt_timeout=10.0) as conn:
            try:
                await conn.send("/queue/big", body, receipt=True)
            except stompy.StompError as exc:
                errors.append(exc)

    anyio.run(main, backend=backend)
    assert len(errors) == 1
    return errors[0]


BACKENDS = ["blocking", "asyncio", "trio"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_broker_s_error_is_reported_not_the_broken_pipe(backend: str) -> None:
    with scripted(refuse_after_headers(say=True)) as url:
        error = send_large(url, backend)
    assert isinstance(error, stompy.TooLargeForServer), repr(error)
    assert "maximum data length" in str(error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_silent_close_mid_write_names_the_likely_cause(backend: str) -> None:
    with scripted(refuse_after_headers(say=False)) as url:
        error = send_large(url, backend)
    assert isinstance(error, stompy.ConnectionLost), repr(error)
    assert "bytes were still to be written" in str(error)
    assert "size limit" in str(error)

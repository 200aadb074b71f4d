"""``Engine.send_now``, the clients' fast path of a send that waits for nothing.

It queues the SEND and moves its bytes to ``outgoing`` when the core takes intents at
once, and says False otherwise (the client then takes the long way, a call). It reads
the clock only when outgoing heart-beats need the time of the write.
"""

from __future__ import annotations

import stompy
from stompy import Frame, encode
from stompy._core.parser import FrameParser
from stompy.errors import ConnectionLost
from tests.test_session import T0, connected, establish, make_session


class Clock:
    """Counts its readings."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return T0 + 1.0


def sent_frames(data: bytes | bytearray) -> list[Frame]:
    parser = FrameParser("1.2")
    return parser.parse(bytes(data))


def test_a_send_goes_to_outgoing_without_reading_the_clock() -> None:
    session = make_session()
    establish(session)
    session.outgoing.clear()
    clock = Clock()
    headers = {"a": "b:c", "reply-to": "/queue/r"}
    assert session.send_now("/queue/x", "hé", headers, None, clock)
    assert session.send_now("/queue/x", b"\x00", None, "application/octet-stream", clock)
    assert clock.reads == 0
    first, second = sent_frames(session.outgoing)
    assert first.command == "SEND"
    assert first.headers == (
        ("destination", "/queue/x"),
        ("content-type", "text/plain;charset=utf-8"),
        ("a", "b:c"),
        ("reply-to", "/queue/r"),
        ("content-length", "3"),
    )
    assert first.body == "hé".encode()
    assert second.headers[:2] == (
        ("destination", "/queue/x"),
        ("content-type", "application/octet-stream"),
    )
    assert second.body == b"\x00"


def test_outgoing_heartbeats_have_the_clock_read_once_a_send() -> None:
    session = make_session(heartbeats=(1000, 0))
    handshake = session.handshake(session.options.endpoints[0])
    handshake.receive(connected("0,1000"), T0)
    session.install(handshake, T0)
    clock = Clock()
    assert session.send_now("/queue/x", b"1", None, None, clock)
    assert clock.reads == 1
    proto = session.ready()
    deadline = proto.next_deadline()
    assert deadline is not None
    assert deadline > T0 + 1.0  # counted from the write


def test_no_fast_path_unless_the_core_takes_intents_at_once() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    clock = Clock()
    assert not session.send_now("/queue/x", b"", None, None, clock)  # not connected yet
    establish(session)
    session.lost(ConnectionLost("cut"))
    assert not session.send_now("/queue/x", b"", None, None, clock)  # reconnecting
    assert clock.reads == 0


def test_a_send_encodes_as_the_codec_does() -> None:
    session = make_session()
    establish(session)
    session.outgoing.clear()
    headers = {"k\n": "v\\\r", "x": "y"}
    assert session.send_now("/q", b"body", headers, "t", Clock())
    want = encode(
        Frame(
            "SEND",
            (("destination", "/q"), ("content-type", "t"), ("k\n", "v\\\r"), ("x", "y")),
            b"body",
        ),
        "1.2",
    )
    assert bytes(session.outgoing) == want

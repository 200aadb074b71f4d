"""The receive path's shortcuts: the parser says when it holds nothing more
(``FrameParser.drained``), the core when ``next_event()`` would find nothing
(``ClientProtocol.exhausted``), so a reader stops without the call that finds nothing;
and what the core finds in a received block itself (a RECEIPT's id) is what
``Frame.get()`` finds."""

from __future__ import annotations

from typing import Any

import pytest

from stompy._core.encoder import encode
from stompy._core.events import ConnectionClosed, HeartbeatTimedOut, MessageReceived, Receipt
from stompy._core.frames import Frame
from stompy._core.parser import FrameParser
from stompy._core.protocol import ClientProtocol
from tests.test_protocol import connected, server_bytes


def drained(parser: FrameParser) -> bool:
    return parser.drained  # read through a call: mypy keeps no narrowing of it


def exhausted(proto: ClientProtocol) -> bool:
    return proto.exhausted


MESSAGE = encode(
    Frame(
        "MESSAGE",
        (("destination", "/queue/a"), ("message-id", "m-1"), ("subscription", "0")),
        b"body\x00with a NUL",
    ),
    "1.2",
)
RECEIPT = b"RECEIPT\nreceipt-id:r-1\n\n\x00"
#: A frame that takes each of the parser's ways: whole with a content-length, whole
#: without one, a body read up to its NUL, CRLF lines, an escaped header.
STREAM = (
    MESSAGE
    + RECEIPT
    + b"\n"
    + b"MESSAGE\r\ndestination:/queue/a\r\nmessage-id:m\\c2\r\nsubscription:0\r\n\r\nxy\x00"
    + b"ERROR\nmessage:no\n\nwhy\x00\r\n"
)


def test_drained_after_the_last_whole_frame() -> None:
    parser = FrameParser("1.2")
    assert not drained(parser)
    parser.feed(MESSAGE + RECEIPT)
    first = parser.next_frame()
    assert first is not None
    assert first.command == "MESSAGE"
    assert not drained(parser)  # the RECEIPT follows
    second = parser.next_frame()
    assert second is not None
    assert second.command == "RECEIPT"
    assert drained(parser)
    assert parser.buffered == 0
    assert parser.next_frame() is None
    parser.feed(b"\n")  # a heart-beat: not drained until it is counted
    assert not drained(parser)
    assert parser.next_frame() is None
    assert parser.heartbeats == 1


def test_not_drained_while_a_frame_or_a_heartbeat_waits() -> None:
    parser = FrameParser("1.2")
    parser.feed(MESSAGE + b"\n")
    assert parser.next_frame() is not None
    assert not drained(parser)  # the EOL after it is counted by the next call
    assert parser.next_frame() is None
    assert parser.heartbeats == 1
    parser.feed(MESSAGE[:-3])
    assert parser.next_frame() is None
    assert not drained(parser)
    parser.feed(MESSAGE[-3:])
    frame = parser.next_frame()
    assert frame is not None
    assert frame.body == b"body\x00with a NUL"
    assert drained(parser)


@pytest.mark.parametrize("step", [1, 2, 3, 7, 50, len(STREAM)])
def test_drained_only_when_nothing_follows_in_any_cut(step: int) -> None:
    """Fed in pieces of ``step`` bytes: whenever ``drained`` is True, nothing is
    buffered and ``next_frame()`` returns None; and the frames are those of one feed."""
    whole = FrameParser("1.2").parse(STREAM)
    assert [frame.command for frame in whole] == ["MESSAGE", "RECEIPT", "MESSAGE", "ERROR"]
    parser = FrameParser("1.2")
    frames: list[Frame] = []
    for start in range(0, len(STREAM), step):
        parser.feed(STREAM[start : start + step])
        for _ in range(10):
            frame = parser.next_frame()
            if frame is None:
                break
            frames.append(frame)
            if drained(parser):
                assert parser.buffered == 0
                assert parser.next_frame() is None
                break
    assert frames == whole
    assert parser.heartbeats == 2


def test_exhausted_after_the_last_event() -> None:
    proto = connected()
    proto.subscribe("/queue/a", id="0")
    proto.receive_data(MESSAGE + RECEIPT.replace(b"r-1", b"r-x"))
    event = proto.next_event()
    assert isinstance(event, MessageReceived)
    assert not exhausted(proto)  # a RECEIPT follows (for nothing: dropped)
    assert proto.next_event() is None
    receipt = proto.send("/queue/a", b"", receipt=True)
    assert receipt is not None
    proto.receive_data(MESSAGE + server_bytes("RECEIPT", (("receipt-id", receipt),)))
    assert isinstance(proto.next_event(), MessageReceived)
    assert not exhausted(proto)
    got = proto.next_event()
    assert isinstance(got, Receipt)
    assert got.receipt_id == receipt
    assert exhausted(proto)
    assert proto.next_event() is None


def test_not_exhausted_while_the_end_is_to_be_reported() -> None:
    proto = connected()
    proto.subscribe("/queue/a", id="0")
    proto.receive_data(MESSAGE)
    proto.receive_eof()
    assert isinstance(proto.next_event(), MessageReceived)
    assert not exhausted(proto)
    assert isinstance(proto.next_event(), ConnectionClosed)


def test_not_exhausted_once_a_timer_made_an_event() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    proto.subscribe("/queue/a", id="0")
    proto.receive_data(MESSAGE, 0.5)
    assert isinstance(proto.next_event(), MessageReceived)
    assert exhausted(proto)
    proto.handle_timer(10.0)  # the peer is silent too long: dead
    assert not exhausted(proto)
    assert isinstance(proto.next_event(), HeartbeatTimedOut)


@pytest.mark.parametrize(
    ("version", "asked"), [("1.2", "r:1\\x\r"), ("1.1", "r:1\\x"), ("1.0", "r\\c1")]
)
def test_receipt_id_read_as_frame_get_reads_it(version: str, asked: str) -> None:
    """The RECEIPT's id, found in its block by the core, is unescaped as the version
    says (1.0: not at all), as ``Frame.get()`` finds it."""
    proto = connected(version)
    proto.send("/queue/a", b"", receipt=asked)
    frame = Frame("RECEIPT", (("receipt-id", asked),))
    data = encode(frame, version)
    parsed = FrameParser(version).parse(data)[0]
    assert parsed.get("receipt-id") == asked
    proto.receive_data(data)
    got = proto.next_event()
    assert isinstance(got, Receipt)
    assert got.receipt_id == asked
    assert proto.pending_receipts == frozenset()


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_a_body_is_its_own_whatever_was_fed(kind: type) -> None:
    """A whole frame's body may be sliced from the bytes fed (bytes only: what the
    caller can change later is copied), and is the same after the caller's buffer
    changes."""
    parser = FrameParser("1.2")
    fed = bytearray(MESSAGE)
    data: Any = bytes(fed) if kind is bytes else fed if kind is bytearray else memoryview(fed)
    try:
        parser.feed(data)
    except TypeError:  # compiled (mypyc), feed() takes bytes only
        assert kind is not bytes
        pytest.skip("this build's FrameParser.feed() takes bytes only")
    frame = parser.next_frame()
    assert frame is not None
    fed[-5:-1] = b"ZZZZ"  # the caller reuses its buffer
    assert frame.body == b"body\x00with a NUL"
    assert type(frame.body) is bytes
    parser.feed(data)  # the same bytes again: the second frame is its own too
    again = parser.next_frame()
    assert again is not None
    assert again.body == (b"body\x00with a NUL" if kind is bytes else b"body\x00with aZZZZ")


def test_plain_names_found_as_escaped_ones_are() -> None:
    """A name of letters and dashes (found in a received block as it is) and one that
    is escaped (found escaped) each give the first entry's value, unescaped."""
    headers = (
        ("correlation-id", "c:1"),
        ("reply-to", "/queue/r"),
        ("a:b", "x"),
        ("correlation-id", "second"),
    )
    for version in ("1.0", "1.1", "1.2"):
        sent = headers[:2] if version == "1.0" else headers  # (1.0 cannot send "a:b")
        frame = FrameParser(version).parse(encode(Frame("MESSAGE", sent), version))[0]
        assert frame.get("correlation-id") == "c:1"
        assert frame.get("reply-to") == "/queue/r"
        assert "correlation-id" in frame
        if version != "1.0":
            assert frame.get("a:b") == "x"

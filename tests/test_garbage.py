"""A peer that sends garbage is flagged at once, and never buffered without end (issue 17).

A header block is judged line by line as it arrives: a first line that is no command is
refused when its LF arrives, a header line without a colon (or without a name) too, a
line over ``max_header_line`` as soon as it is longer, and the whole block once it
holds more than ``max_header_block`` bytes or ``max_headers`` lines. The hypothesis
test below states where the error must come, byte for byte, for streams of lines that
never end a block, cut into chunks at random; the others drive the state machine and
the blocking client with the stream the issue saw (``GARBAGE-NOT-A-COMMAND`` and
990 lines of 65 KB).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stompy
from stompy._core.frames import COMMANDS, VERSIONS, Frame
from stompy._core.parser import DEFAULT_LIMITS, FrameLimits, FrameParser
from stompy._engine.message import MessageBase
from stompy.errors import BodyNotText, FrameTooLarge, RemoteProtocolError
from tests.test_lenient import TIMEOUT, Peer, scripted

SMALL = FrameLimits(max_header_line=24, max_headers=3, max_body=40, max_header_block=60)
#: A block limit that the line and header limits reach first.
LOOSE_BLOCK = FrameLimits(max_header_line=24, max_headers=3, max_body=40, max_header_block=200)

# -- where the error must come -------------------------------------------------------------


def first_error(stream: bytes, limits: FrameLimits) -> int | None:
    """The index of the byte whose arrival must raise, or None if no byte must.

    ``stream`` is header lines that never end a block: each one not empty, holding no
    CR or LF but for the CR of a CRLF.
    """
    limit = limits.max_header_line
    found: list[int] = []
    if len(stream) > limits.max_header_block:
        # Past the limit, the byte of a line that is arriving: its LF can only be later.
        found.append(limits.max_header_block)
    start = 0
    for number, line in enumerate(stream.split(b"\n")):
        content = line.removesuffix(b"\r")
        if len(content) > limit:
            found.append(start + limit)  # the first byte too many
        end = start + len(line)  # where its LF is, or the end of the stream
        if end >= len(stream):
            break  # the line is not over: only its length can be judged
        if number == 0:
            if content.decode("utf-8", "replace") not in COMMANDS:
                found.append(end)
        elif content.find(b":") <= 0:
            found.append(end)
        if number == limits.max_headers + 1:
            found.append(end)  # the command line and one header too many
        start = end + 1
    return min(found, default=None)


allowed = st.sampled_from([b"a", b"-", b":", b" ", b"\\", b"\x00", b"\xff", b"\xc3\xa9"])
#: What a line is made of: a command, a header, or a run of anything but CR and LF.
contents = (
    st.sampled_from(sorted(c.encode() for c in COMMANDS))
    | st.sampled_from([b"k:v", b"destination:/queue/a", b"GARBAGE-NOT-A-COMMAND", b":v"])
    | st.builds(
        lambda parts, repeat: b"".join(parts) * repeat,
        st.lists(allowed, min_size=1, max_size=6),
        st.integers(1, 20_000),
    )
)
#: Header lines that break no rule but their length, to reach the block limit.
headers = st.builds(
    lambda size: b"h:" + b"v" * size,
    st.integers(0, 22) | st.integers(20_000, 65_533) | st.integers(0, 70_000),
)
commands = st.sampled_from(sorted(c.encode() for c in COMMANDS))


def ended(content: bytes, crlf: bool) -> bytes:
    return content + b"\r" if crlf else content


lines = st.builds(ended, contents | headers, st.booleans())
#: Most blocks start as a frame does, so that the rules on the lines after it are met;
#: some break no rule but the limits.
blocks = st.builds(
    lambda first, rest: [first, *rest],
    st.builds(ended, commands, st.booleans()),
    st.lists(st.builds(ended, headers, st.booleans()), max_size=11) | st.lists(lines, max_size=11),
) | st.lists(lines, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(VERSIONS),
    st.sampled_from([SMALL, LOOSE_BLOCK, DEFAULT_LIMITS]),
    blocks,
    st.booleans(),
    st.lists(st.integers(1, 70_000), min_size=1, max_size=8),
)
def test_garbage_is_refused_at_the_byte_that_shows_it(
    version: str, limits: FrameLimits, block: list[bytes], ends: bool, sizes: list[int]
) -> None:
    stream = b"\n".join(block) + (b"\n" if ends else b"")
    bound = first_error(stream, limits)
    parser = FrameParser(version, limits)
    fed = 0
    for size in sizes * (len(stream) // min(sizes) + 1):  # chunks until the stream is out
        chunk = stream[fed : fed + size]
        if not chunk:
            break
        parser.feed(chunk)
        fed += len(chunk)
        try:
            assert parser.next_frame() is None  # no blank line: no frame can end
        except RemoteProtocolError:
            # Raised by the chunk holding the byte, not one before it, not one after.
            assert bound is not None, "refused, though no byte broke a rule"
            assert fed - len(chunk) <= bound < fed
            return
        assert bound is None or bound >= fed, f"{fed} bytes and the error at {bound} unseen"
    assert bound is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stream_of_garbage_is_refused_within_a_line(version: str) -> None:
    # One byte at a time: the error comes with the LF of the first line, never later.
    stream = b"GARBAGE-NOT-A-COMMAND\n"
    parser = FrameParser(version)
    line_end = stream.index(b"\n")
    for byte in stream[:line_end]:
        parser.feed(bytes([byte]))
        assert parser.next_frame() is None
    parser.feed(b"\n")
    with pytest.raises(RemoteProtocolError, match="unknown command") as info:
        parser.next_frame()
    assert not isinstance(info.value, FrameTooLarge)
    assert parser.buffered == line_end + 1


# -- the state machine: the issue's stream -------------------------------------------------

LINE = b"y" * 65_000 + b"\n"  # a header line without a colon, within the line limit
CHUNK = 64 * 1024


def issue_stream() -> bytes:
    """What the issue's server sent after CONNECTED: 65 MB that never end a block."""
    return b"GARBAGE-NOT-A-COMMAND\n" + LINE * 990


def test_the_protocol_closes_on_the_first_line_and_keeps_nothing_after() -> None:
    proto = stompy.ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00", 0.0)
    assert isinstance(proto.next_event(), stompy.events.Connected)
    stream = memoryview(issue_stream())
    proto.receive_data(bytes(stream[:CHUNK]), 0.1)
    with pytest.raises(RemoteProtocolError, match="unknown command 'GARBAGE-NOT-A-COMMAND'"):
        proto.next_event()
    assert proto.state is stompy.State.CLOSED
    # What a transport reads after that is dropped: memory stays where it was.
    for at in range(CHUNK, 40 * CHUNK, CHUNK):
        proto.receive_data(bytes(stream[at : at + CHUNK]), 0.2)
        assert proto.next_event() is None
    assert proto._parser.buffered <= CHUNK


@pytest.mark.parametrize(
    ("after", "what"),
    [
        (b"MESSAGE\n", "header line without a colon"),  # a command, then no colon
        (b"MESSAGE\nk:" + b"v" * 70_000, "header line over the limit"),  # one line
        (b"MESSAGE\n" + b"k:" + b"v" * 60_000 + b"\n", "header block over the limit"),
    ],
)
def test_the_protocol_refuses_each_kind_within_the_limits(after: bytes, what: str) -> None:
    proto = stompy.ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00", 0.0)
    proto.next_event()
    stream = after + LINE * 4
    bound = first_error(stream, DEFAULT_LIMITS)
    assert bound is not None
    assert bound < len(stream)
    fed = 0
    with pytest.raises(RemoteProtocolError, match=what):
        while fed <= bound:
            proto.receive_data(stream[fed : fed + 4096], 0.1)
            fed += 4096
            assert proto.next_event() is None
    assert proto.state is stompy.State.CLOSED


# -- the blocking client, against a server that sends the garbage ---------------------------


def test_the_blocking_client_flags_a_garbage_stream() -> None:
    sent: list[int] = []

    def script(peer: Peer) -> None:
        peer.connected()
        stream = memoryview(issue_stream())
        try:
            for at in range(0, len(stream), CHUNK):  # bounded: about a thousand chunks
                peer.sock.sendall(stream[at : at + CHUNK])
                sent.append(at + CHUNK)
        except OSError:
            return  # the client hung up: what the test wants
        peer.sock.settimeout(TIMEOUT)
        peer.sock.recv(1)  # never left: wait for the client's close

    with scripted(script) as url:
        conn = stompy.Connection(url, receipt_timeout=TIMEOUT)
        conn.connect()
        try:
            with pytest.raises(stompy.StompError) as info:
                # Waits for a receipt the server never sends: the error ends it first.
                conn.send("/queue/a", "x", receipt=True)
            assert not isinstance(info.value, stompy.ReceiptTimeout)
            assert not conn.connected
            assert isinstance(conn.failure, RemoteProtocolError)
            assert "GARBAGE-NOT-A-COMMAND" in str(conn.failure)
        finally:
            conn.close()
    # The client stopped reading long before the 65 MB were out.
    assert not sent or sent[-1] < 990 * len(LINE) // 2


# -- a body that is not text in its charset ------------------------------------------------

charsets = st.sampled_from(
    [
        *("utf-8", "UTF-8", "latin-1", "utf-16", "ascii", "punycode", "undefined", "idna"),
        *("hex", "rot13", "zlib", "nonesuch", "", "x" * 300, '"utf-8"', "utf-8;q=1"),
    ]
)


@given(st.binary(max_size=40), charsets, st.booleans())
def test_message_text_raises_only_body_not_text(body: bytes, charset: str, labelled: bool) -> None:
    content_type = f"text/plain;charset={charset}" if labelled else None
    headers = [("message-id", "m1"), ("destination", "/queue/a"), ("subscription", "s1")]
    if content_type is not None:
        headers.append(("content-type", content_type))
    message = MessageBase.made(Frame("MESSAGE", tuple(headers), body), "s1", "auto", epoch=1)
    error: BodyNotText | None = None
    try:
        text = message.text
    except BodyNotText as exc:
        error = exc
    if error is None:
        assert isinstance(text, str)
        return
    # The peer's body, the peer's label: named, and still a UnicodeDecodeError.
    assert isinstance(error, UnicodeDecodeError)
    assert f"content-type: {content_type or 'none, so utf-8'}"[:60] in str(error)
    assert "'m1'" in str(error)

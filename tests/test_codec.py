"""The incremental frame parser, its limits, and the encoder (example-based)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from stompy._core.encoder import encode, encode_frame
from stompy._core.frames import V12, Frame
from stompy._core.parser import DEFAULT_LIMITS, FrameLimits, FrameParser
from stompy.errors import FrameTooLarge, RemoteProtocolError

# -- helpers -------------------------------------------------------------------------


def drain(parser: FrameParser) -> list[Frame]:
    """Every frame the parser can hand out now (bounded by what was fed)."""
    frames: list[Frame] = []
    for _ in range(10_000):
        frame = parser.next_frame()
        if frame is None:
            return frames
        frames.append(frame)
    raise AssertionError("parser never ran out of frames")


def whole(data: bytes, version: str = "1.2", **kwargs: object) -> tuple[list[Frame], int]:
    parser = FrameParser(version, **kwargs)  # type: ignore[arg-type]
    parser.feed(data)
    return drain(parser), parser.heartbeats


def bytewise(data: bytes, version: str = "1.2", **kwargs: object) -> tuple[list[Frame], int]:
    parser = FrameParser(version, **kwargs)  # type: ignore[arg-type]
    frames: list[Frame] = []
    for i in range(len(data)):
        parser.feed(data[i : i + 1])
        frames.extend(drain(parser))
    return frames, parser.heartbeats


def both(data: bytes, version: str = "1.2", **kwargs: object) -> tuple[list[Frame], int]:
    """Parse whole and one byte at a time; both must agree."""
    result = whole(data, version, **kwargs)
    assert bytewise(data, version, **kwargs) == result
    return result


def error_of(data: bytes, version: str = "1.2", **kwargs: object) -> RemoteProtocolError:
    """The error parsing ``data`` raises, the same whole and one byte at a time."""
    with pytest.raises(RemoteProtocolError) as whole_error:
        whole(data, version, **kwargs)
    with pytest.raises(RemoteProtocolError) as bytewise_error:
        bytewise(data, version, **kwargs)
    assert type(whole_error.value) is type(bytewise_error.value)
    return whole_error.value


# -- frames, bodies, EOLs ------------------------------------------------------------


def test_a_simple_frame() -> None:
    frames, beats = both(b"MESSAGE\ndestination:/q\nmessage-id:1\n\nhello\x00")
    assert frames == [Frame("MESSAGE", (("destination", "/q"), ("message-id", "1")), b"hello")]
    assert beats == 0


def test_frame_without_headers_or_body() -> None:
    frames, _ = both(b"DISCONNECT\n\n\x00")
    assert frames == [Frame("DISCONNECT")]


def test_repeated_headers_are_kept_in_order() -> None:
    frames, _ = both(b"MESSAGE\nfoo:World\nfoo:Hello\nbar:1\n\n\x00")
    assert frames[0].headers == (("foo", "World"), ("foo", "Hello"), ("bar", "1"))
    assert frames[0].get("foo") == "World"


def test_content_length_body_may_hold_nul_octets() -> None:
    frames, _ = both(b"SEND\ndestination:/q\ncontent-length:5\n\na\x00b\x00c\x00")
    assert frames[0].body == b"a\x00b\x00c"


def test_content_length_zero() -> None:
    frames, _ = both(b"SEND\ncontent-length:0\n\n\x00MESSAGE\n\n\x00")
    assert [f.body for f in frames] == [b"", b""]


def test_body_without_content_length_ends_at_the_first_nul() -> None:
    frames, _ = both(b"SEND\ndestination:/q\n\nab\x00cd\x00")
    # The second "frame" starts with "cd": not a command, so only the first is whole.
    with pytest.raises(RemoteProtocolError):
        whole(b"SEND\n\nab\x00cd\n\n\x00")
    assert frames[0].body == b"ab"


def test_first_content_length_wins() -> None:
    frames, _ = both(b"SEND\ncontent-length:3\ncontent-length:5\n\nabc\x00")
    assert frames[0].body == b"abc"


def test_a_header_that_only_mentions_content_length_is_no_length() -> None:
    frames, _ = both(b"SEND\nx-content-length:1\nk:content-length:1\n\nabc\x00")
    assert frames[0].body == b"abc"


@pytest.mark.parametrize("with_length", [True, False])
def test_large_bodies_arrive_whole(with_length: bool) -> None:
    body = bytes(range(1, 256)) * 400  # 100 kB without a NUL
    head = b"MESSAGE\ncontent-length:%d\n\n" % len(body) if with_length else b"MESSAGE\n\n"
    data = head + body + b"\x00" + b"MESSAGE\n\nsmall\x00"
    assert whole(data)[0] == [
        Frame("MESSAGE", (("content-length", str(len(body))),) if with_length else (), body),
        Frame("MESSAGE", (), b"small"),
    ]
    parser = FrameParser("1.2")
    frames: list[Frame] = []
    for i in range(0, len(data), 1000):
        frames += parser.parse(data[i : i + 1000])
    assert frames == whole(data)[0]
    parser.feed(b"x")  # the buffer is not held by a view any longer


def test_body_is_binary_and_kept_verbatim() -> None:
    body = bytes(range(1, 256)) + b"\r\n\n\r"
    frames, _ = both(b"MESSAGE\n\n" + body + b"\x00")
    assert frames[0].body == body


def test_many_frames_in_one_chunk_and_parse() -> None:
    parser = FrameParser("1.2")
    data = b"".join(b"MESSAGE\nn:%d\n\n%d\x00" % (i, i) for i in range(50))
    frames = parser.parse(data)
    assert [f.get("n") for f in frames] == [str(i) for i in range(50)]
    assert [f.body for f in frames] == [str(i).encode() for i in range(50)]
    assert parser.parse(b"") == []


@pytest.mark.parametrize("eols", [b"", b"\n", b"\r\n", b"\n\n\n", b"\r\n\n\r\n"])
def test_any_number_of_eols_between_frames_counts_heartbeats(eols: bytes) -> None:
    data = eols + b"MESSAGE\n\n\x00" + eols + b"MESSAGE\n\n\x00" + eols
    frames, beats = both(data)
    assert len(frames) == 2
    assert beats == 3 * (eols.count(b"\n"))


def test_heartbeats_alone() -> None:
    parser = FrameParser("1.2")
    assert parser.parse(b"\n\r\n\n") == []
    assert parser.heartbeats == 3
    assert parser.buffered == 0


def test_lone_cr_at_a_chunk_boundary_between_frames() -> None:
    parser = FrameParser("1.2")
    assert parser.parse(b"MESSAGE\n\n\x00\r") == [Frame("MESSAGE")]
    assert parser.heartbeats == 0  # half an EOL is not a beat yet
    assert parser.parse(b"\n") == []
    assert parser.heartbeats == 1
    assert parser.parse(b"\r") == []
    assert parser.parse(b"\nRECEIPT\nreceipt-id:1\n\n\x00") == [
        Frame("RECEIPT", (("receipt-id", "1"),))
    ]
    assert parser.heartbeats == 2


def test_cr_not_followed_by_lf_between_frames() -> None:
    error = error_of(b"MESSAGE\n\n\x00\rX")
    assert "carriage return" in str(error)
    assert "at byte 10 " in str(error)


def test_a_lone_cr_that_never_completes_is_not_a_frame() -> None:
    parser = FrameParser("1.2")
    assert parser.parse(b"\r") == []
    assert parser.buffered == 1
    with pytest.raises(RemoteProtocolError, match="carriage return"):
        parser.parse(b"\r")


# -- CRLF ----------------------------------------------------------------------------


def test_crlf_line_endings_in_12() -> None:
    data = b"MESSAGE\r\ndestination:/q\r\ncontent-length:4\r\n\r\na\r\nb\x00\r\n"
    frames, beats = both(data, "1.2")
    assert frames == [Frame("MESSAGE", (("destination", "/q"), ("content-length", "4")), b"a\r\nb")]
    assert beats == 1


def test_crlf_without_content_length_in_12() -> None:
    frames, _ = both(b"MESSAGE\r\nk:v\r\n\r\n\r\nbody\x00", "1.2")
    assert frames[0].headers == (("k", "v"),)
    assert frames[0].body == b"\r\nbody"  # the blank line is one EOL; the next is body


def test_mixed_eols_in_12() -> None:
    frames, _ = both(b"MESSAGE\nk:v\r\nj:w\n\r\n\x00", "1.2")
    assert frames[0].headers == (("k", "v"), ("j", "w"))


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_crlf_connected_before_the_version_is_known(version: str) -> None:
    # The client reads CONNECTED with whatever parser version it starts with.
    data = b"CONNECTED\r\nversion:1.2\r\nheart-beat:0,0\r\nserver:x/1\r\n\r\n\x00"
    frames, _ = both(data, version)
    assert frames[0].headers == (("version", "1.2"), ("heart-beat", "0,0"), ("server", "x/1"))


def test_crlf_error_before_connected_is_readable_with_the_10_parser() -> None:
    # A 1.2 server with CRLF ends answers a bad CONNECT with an ERROR; the client
    # still parses as 1.0 then. The content-length must not read as "5\r".
    data = b"ERROR\r\nmessage:bad login\r\ncontent-length:5\r\n\r\noops!\x00"
    frames, _ = both(data, "1.0")
    assert frames[0].get("message") == "bad login"
    assert frames[0].body == b"oops!"


def test_11_keeps_a_carriage_return_in_a_value() -> None:
    # STOMP 1.1 ends lines with LF only and does not escape CR: it is part of the value.
    frames, _ = both(b"MESSAGE\nk:v\r\n\n\x00", "1.1")
    assert frames[0].headers == (("k", "v\r"),)


# -- header decoding per version -----------------------------------------------------


@pytest.mark.parametrize(
    ("version", "line", "expected"),
    [
        ("1.0", b"a\\cb:x\\ny\\\\z", ("a\\cb", "x\\ny\\\\z")),
        ("1.1", b"a\\cb:x\\ny\\\\z", ("a:b", "x\ny\\z")),
        ("1.2", b"a\\cb:x\\ny\\\\z\\r", ("a:b", "x\ny\\z\r")),
        ("1.2", b"k: padded ", ("k", " padded ")),
        ("1.2", b"k:a:b", ("k", "a:b")),
        ("1.2", b"k:", ("k", "")),
        ("1.2", "k:caf\u00e9 \u2603".encode(), ("k", "caf\u00e9 \u2603")),
    ],
)
def test_header_decoding(version: str, line: bytes, expected: tuple[str, str]) -> None:
    frames, _ = both(b"MESSAGE\n" + line + b"\n\n\x00", version)
    assert frames[0].headers == (expected,)


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP", b"CONNECTED"])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_connect_and_connected_are_never_unescaped(command: bytes, version: str) -> None:
    # "The CONNECT and CONNECTED frames do not escape": a backslash is a backslash,
    # even before a letter that is no escape.
    frames, _ = both(command + b"\nlogin:dom\\user\npasscode:a\\cb\\t\n\n\x00", version)
    assert frames[0].headers == (("login", "dom\\user"), ("passcode", "a\\cb\\t"))


@pytest.mark.parametrize(
    ("version", "line"),
    [("1.1", b"k:a\\tb"), ("1.1", b"k:a\\r"), ("1.2", b"k:a\\tb"), ("1.2", b"k\\x:v")],
)
def test_undefined_escape_is_a_protocol_error(version: str, line: bytes) -> None:
    error = error_of(b"MESSAGE\n" + line + b"\n\n\x00", version)
    assert "undefined escape" in str(error)
    assert "MESSAGE" in str(error)
    assert "at byte 0 " in str(error)


def test_trailing_backslash_before_crlf_is_an_undefined_escape() -> None:
    error_of(b"MESSAGE\r\nk:v\\\r\n\r\n\x00", "1.2")


def test_lenient_parser_keeps_undefined_escapes() -> None:
    frames, _ = both(b"MESSAGE\nk:a\\tb\\n\n\n\x00", "1.2", strict=False)
    assert frames[0].headers == (("k", "a\\tb\n"),)


# -- header lines seen before ---------------------------------------------------------


def test_repeated_header_lines_are_remembered() -> None:
    # Blocks with a CR take the line-by-line path, which keeps the pairs it makes (an
    # LF-only block is checked whole and its pairs are made on first use instead).
    parser = FrameParser("1.2")
    first, second = parser.parse(b"MESSAGE\r\nk:v\r\ne:a\\cb\r\n\r\n\x00" * 2)
    assert first == second == Frame("MESSAGE", (("k", "v"), ("e", "a:b")))
    # A line with a backslash is not kept: what it means depends on the version.
    assert parser._known_pairs == {"k:v": ("k", "v")}


def test_a_line_read_without_unescaping_is_unescaped_later() -> None:
    # CONNECTED is never unescaped; the same line in a MESSAGE is.
    parser = FrameParser("1.2")
    frames = parser.parse(b"CONNECTED\nk:a\\cb\n\n\x00MESSAGE\nk:a\\cb\n\n\x00")
    assert [f.headers for f in frames] == [(("k", "a\\cb"),), (("k", "a:b"),)]
    parser.parse(b"CONNECTED\nk:a\\tb\n\n\x00")
    with pytest.raises(RemoteProtocolError, match="undefined escape"):
        parser.parse(b"MESSAGE\nk:a\\tb\n\n\x00")


def test_the_pairs_kept_are_bounded() -> None:
    parser = FrameParser("1.2")
    for i in range(10):
        lines = b"".join(b"h%d:%d\n" % (j, i) for j in range(100))
        parser.parse(b"MESSAGE\n" + lines + b"long:" + b"x" * 300 + b"\n\n\x00")
        assert len(parser._known_pairs) <= 128
    assert all(len(line) <= 200 for line in parser._known_pairs)
    (frame,) = parser.parse(b"MESSAGE\nh1:9\n\n\x00")
    assert frame.headers == (("h1", "9"),)


# -- malformed input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"FOO\n\n\x00", "unknown command 'FOO'"),
        (b"send\n\n\x00", "unknown command 'send'"),
        (b"SEND \n\n\x00", "unknown command 'SEND '"),
        (b"X" * 100 + b"\n\n\x00", "unknown command 'XXXX"),
        (b"SEND\nno colon here\n\n\x00", "without a colon"),
        (b"SEND\n:value\n\n\x00", "with an empty name"),
        (b"SEND\nk:\xff\xfe\n\n\x00", "not valid UTF-8"),
        (b"SEND\ncontent-length:abc\n\n\x00", "invalid content-length 'abc'"),
        (b"SEND\ncontent-length:-1\n\n\x00", "invalid content-length"),
        (b"SEND\ncontent-length:\n\n\x00", "invalid content-length"),
        (b"SEND\ncontent-length: 1\n\nx\x00", "invalid content-length"),
        (b"SEND\ncontent-length:1 \n\nx\x00", "invalid content-length"),
        (b"SEND\ncontent-length:0x1\n\nx\x00", "invalid content-length"),
        ("SEND\ncontent-length:\uff11\n\nx\x00".encode(), "invalid content-length"),
        ("SEND\ncontent-length:\u00b2\n\nxx\x00".encode(), "invalid content-length"),
        (b"SEND\ncontent-length:2\n\nabc\x00", "not followed by NUL"),
        (b"SEND\ncontent-length:0\n\nx\x00", "not followed by NUL"),
        (b"RECEIPT\nreceipt-id:1\n\nbody\x00", "must not have a body"),
    ],
)
def test_malformed_frames(data: bytes, what: str) -> None:
    error = error_of(data)
    assert type(error) is RemoteProtocolError
    assert what in str(error)
    assert "of the stream" in str(error)


@pytest.mark.parametrize(
    "data",
    [
        b"X" * 60_000 + b"\n\n\x00",
        b"SEND\n" + b"x" * 60_000 + b"\n\n\x00",
        b"SEND\ncontent-length:" + b"y" * 60_000 + b"\n\n\x00",
        b"SEND\nk:" + b"z" * 60_000 + b"\\t\n\n\x00",
    ],
)
def test_error_messages_stay_short(data: bytes) -> None:
    assert len(str(error_of(data))) < 200


def test_error_positions_count_from_the_start_of_the_stream() -> None:
    first = b"MESSAGE\n\nhello\x00\n"
    error = error_of(first + b"SEND\ncontent-length:1\n\nxy\x00")
    # The NUL should have been right after the "x", at offset len(first) + 24.
    assert f"at byte {len(first) + 24} " in str(error)


def test_error_position_survives_buffer_compaction() -> None:
    parser = FrameParser("1.2")
    for _ in range(3):
        parser.feed(b"MESSAGE\n\nx\x00")
        assert drain(parser) == [Frame("MESSAGE", (), b"x")]
    parser.feed(b"BAD\n\n\x00")
    with pytest.raises(RemoteProtocolError, match="at byte 33 "):
        parser.next_frame()


def test_the_error_is_sticky() -> None:
    parser = FrameParser("1.2")
    parser.feed(b"BAD\n\n\x00")
    with pytest.raises(RemoteProtocolError) as first:
        parser.next_frame()
    parser.feed(b"MESSAGE\n\n\x00")
    with pytest.raises(RemoteProtocolError) as second:
        parser.next_frame()
    assert second.value is first.value


def test_parse_raises_the_same_sticky_error() -> None:
    parser = FrameParser("1.2")
    with pytest.raises(RemoteProtocolError, match="unknown command") as first:
        parser.parse(b"MESSAGE\n\n\x00BAD\n\n\x00")
    with pytest.raises(RemoteProtocolError) as second:
        parser.parse(b"MESSAGE\n\n\x00")
    assert second.value is first.value
    with pytest.raises(RemoteProtocolError) as third:
        parser.next_frame()
    assert third.value is first.value


def test_frames_before_an_error_are_handed_out() -> None:
    parser = FrameParser("1.2")
    parser.feed(b"MESSAGE\n\n\x00BAD\n\n\x00")
    assert parser.next_frame() == Frame("MESSAGE")
    with pytest.raises(RemoteProtocolError):
        parser.next_frame()


def test_a_body_on_a_bodiless_frame_is_accepted_when_lenient() -> None:
    frames, _ = both(b"RECEIPT\nreceipt-id:1\n\nbody\x00", strict=False)
    assert frames[0].body == b"body"


def test_empty_content_length_body_on_a_bodiless_frame_is_fine() -> None:
    frames, _ = both(b"RECEIPT\nreceipt-id:1\ncontent-length:0\n\n\x00")
    assert frames[0].body == b""


def test_version_is_settable_and_checked() -> None:
    parser = FrameParser()
    assert parser.version == "1.0"
    parser.version = "1.2"
    assert parser.version == "1.2"
    with pytest.raises(ValueError, match="version: must be a STOMP version"):
        parser.version = "2.0"
    with pytest.raises(ValueError, match="version: must be a STOMP version"):
        FrameParser("1.3")


def test_version_change_applies_to_the_next_frame() -> None:
    parser = FrameParser("1.0")
    parser.feed(b"CONNECTED\nversion:1.2\n\n\x00MESSAGE\nk:a\\cb\n\n\x00")
    assert parser.next_frame() == Frame("CONNECTED", (("version", "1.2"),))
    parser.version = "1.2"
    assert parser.next_frame() == Frame("MESSAGE", (("k", "a:b"),))


def test_a_body_split_across_feeds_after_a_compaction() -> None:
    parser = FrameParser("1.2")
    parser.feed(b"MESSAGE\n\n\x00MESSAGE\n\nab")
    assert parser.next_frame() == Frame("MESSAGE")
    assert parser.next_frame() is None  # headers read, body still arriving
    parser.feed(b"c")  # drops the first frame's bytes: the body start moves
    assert parser.next_frame() is None
    parser.feed(b"d\x00MESSAGE\ncontent-length:2\n\nx")
    assert parser.next_frame() == Frame("MESSAGE", (), b"abcd")
    assert parser.next_frame() is None
    parser.feed(b"y\x00")
    assert parser.next_frame() == Frame("MESSAGE", (("content-length", "2"),), b"xy")


def test_buffered_counts_unconsumed_bytes() -> None:
    parser = FrameParser("1.2")
    assert parser.buffered == 0
    parser.feed(b"MESSAGE\n\nab")
    assert parser.next_frame() is None
    assert parser.buffered == 11
    parser.feed(b"\x00MESS")
    assert parser.next_frame() == Frame("MESSAGE", (), b"ab")
    assert parser.buffered == 4


# -- incremental scanning --------------------------------------------------------------


def test_header_scan_state_is_incremental() -> None:
    """Fed one byte at a time, the header scan never goes back nor counts a line twice."""
    parser = FrameParser("1.2")
    block = b"MESSAGE\n" + b"".join(b"h%d:v\n" % i for i in range(200))
    seen = 0
    for i in range(len(block)):
        parser.feed(block[i : i + 1])
        assert parser.next_frame() is None
        fed = i + 1
        assert parser._scan >= fed - 2  # resumes near the end, not from the start
        if fed > 2:
            seen = block.count(b"\n", 0, fed)
            assert parser._lines == seen
    parser.feed(b"\n\x00")
    frame = parser.next_frame()
    assert frame is not None
    assert len(frame.headers) == 200 == seen - 1


def test_body_scan_state_is_incremental() -> None:
    parser = FrameParser("1.2")
    parser.feed(b"MESSAGE\n\n")
    for i in range(1, 300):
        parser.feed(b"x")
        assert parser.next_frame() is None
        assert parser._scan == 9 + i  # where the NUL search resumes
    parser.feed(b"\x00")
    frame = parser.next_frame()
    assert frame is not None
    assert frame.body == b"x" * 299


# -- limits --------------------------------------------------------------------------


def test_default_limits() -> None:
    assert FrameLimits() == DEFAULT_LIMITS
    assert FrameLimits().max_header_line == 64 * 1024
    assert FrameLimits().max_headers == 1000
    assert FrameLimits().max_body == 64 * 1024 * 1024
    assert FrameParser().limits is DEFAULT_LIMITS


@pytest.mark.parametrize("kwargs", [{"max_header_line": 15}, {"max_headers": 0}, {"max_body": -1}])
def test_unusable_limits_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=f"^{next(iter(kwargs))}: must be at least"):
        FrameLimits(**kwargs)


SMALL = FrameLimits(max_header_line=32, max_headers=4, max_body=100)


@pytest.mark.parametrize(
    "data",
    [
        b"MESSAGE\nk:" + b"v" * 30 + b"\n\n\x00",  # 32 bytes: the limit
        b"MESSAGE\r\nk:" + b"v" * 30 + b"\r\n\r\n\x00",  # the CR is the EOL's
        b"MESSAGE\n" + b"a:1\n" * 4 + b"\n\x00",
        b"MESSAGE\n\n" + b"x" * 100 + b"\x00",
        b"MESSAGE\ncontent-length:100\n\n" + b"\x00" * 100 + b"\x00",
    ],
)
def test_frames_at_the_limits_pass(data: bytes) -> None:
    frames, _ = both(data, limits=SMALL)
    assert len(frames) == 1


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"MESSAGE\nk:" + b"v" * 31 + b"\n\n\x00", "header line over the limit of 32"),
        (b"MESSAGE\r\nk:" + b"v" * 31 + b"\r\n\r\n\x00", "header line over the limit"),
        (b"MESSAGE" + b"E" * 30 + b"\n\n\x00", "header line over the limit"),
        (b"MESSAGE\n" + b"a:1\n" * 5 + b"\n\x00", "limit of 4 headers"),
        (b"MESSAGE\n\n" + b"x" * 101 + b"\x00", "body over the limit of 100"),
        (b"MESSAGE\ncontent-length:101\n\n" + b"x" * 101 + b"\x00", "content-length '101'"),
    ],
)
def test_crossing_a_limit_is_frame_too_large(data: bytes, what: str) -> None:
    error = error_of(data, limits=SMALL)
    assert isinstance(error, FrameTooLarge)
    assert what in str(error)


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"GARBAGE-NOT-A-COMMAND\n", "unknown command 'GARBAGE-NOT-A-COMMAND'"),
        (b"GARBAGE\r\n", "unknown command 'GARBAGE'"),
        (b"MESSAGE\nk:v\nno colon here\n", "header line without a colon: 'no colon here'"),
        (b"MESSAGE\n:v\n", "header line with an empty name"),
    ],
)
def test_garbage_is_refused_as_soon_as_its_line_ends(head: bytes, what: str) -> None:
    # A server that never sends the blank line must not be buffered block after block:
    # the line that cannot start a frame is refused when its LF arrives.
    for cut in (len(head), len(head) - 1):
        parser = FrameParser(V12)
        parser.feed(head[:cut])
        if cut < len(head):
            assert parser.next_frame() is None  # the line is not over yet
            parser.feed(head[cut:])
        with pytest.raises(RemoteProtocolError, match=re.escape(what)) as info:
            parser.next_frame()
        assert not isinstance(info.value, FrameTooLarge)


def test_the_header_block_has_a_limit_of_its_own() -> None:
    limits = FrameLimits(max_header_line=32, max_headers=1000, max_header_block=64)
    line = b"k:" + b"v" * 20 + b"\n"  # 23 bytes: within the line limit
    # Whole: refused when the blank line comes; in pieces: as soon as it is crossed.
    error = error_of(b"MESSAGE\n" + line * 3 + b"\n\x00", limits=limits)
    assert isinstance(error, FrameTooLarge)
    assert "header block over the limit of 64 bytes" in str(error)
    parser = FrameParser(V12, limits)
    parser.feed(b"MESSAGE\n" + line * 2)
    assert parser.next_frame() is None  # 55 bytes: fine so far
    parser.feed(line[:15])
    with pytest.raises(FrameTooLarge, match="header block"):
        parser.next_frame()
    assert FrameLimits().max_header_block == 96 * 1024
    with pytest.raises(ValueError, match="max_header_block: must be at least max_header_line"):
        FrameLimits(max_header_line=1024, max_header_block=512)


def test_a_huge_content_length_is_frame_too_large_with_default_limits() -> None:
    # Longer than int() converts (sys.get_int_max_str_digits): must still be ours.
    digits = max(5000, sys.get_int_max_str_digits() + 10) if sys.version_info >= (3, 11) else 5000
    error = error_of(b"SEND\ncontent-length:" + b"1" * digits + b"\n\n\x00")
    assert isinstance(error, FrameTooLarge)
    assert len(str(error)) < 200  # what was wrong, not the peer's whole header


def test_leading_zeros_do_not_make_a_content_length_large() -> None:
    # Not even more of them than int() converts.
    frames, _ = both(b"SEND\ncontent-length:" + b"0" * 5000 + b"3\n\nabc\x00")
    assert frames[0].body == b"abc"
    frames, _ = both(b"SEND\ncontent-length:" + b"0" * 5000 + b"\n\n\x00")
    assert frames[0].body == b""


def test_line_limit_counts_bytes_not_characters() -> None:
    # 2 + 3 * 12 = 38 bytes of UTF-8, but only 14 characters.
    line = "k:" + "\u20ac" * 12
    data = b"MESSAGE\n" + line.encode() + b"\n\n\x00"
    error = error_of(data, limits=SMALL)
    assert isinstance(error, FrameTooLarge)


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
def test_never_ending_header_line_is_cut_off_early(chunk: int) -> None:
    limits = FrameLimits(max_header_line=1024)
    parser = FrameParser("1.2", limits)
    parser.feed(b"SEND\nk:")
    with pytest.raises(FrameTooLarge):
        for _ in range(100_000):
            parser.feed(b"v" * chunk)
            assert parser.next_frame() is None
            assert parser.buffered <= 5 + 1024 + 2 + chunk
    assert parser.buffered <= 5 + 1024 + 2 + chunk


@pytest.mark.parametrize("chunk", [1, 64, 4096])
def test_never_ending_command_line_is_cut_off_early(chunk: int) -> None:
    parser = FrameParser("1.2", FrameLimits(max_header_line=1024))
    with pytest.raises(FrameTooLarge):
        for _ in range(100_000):
            parser.feed(b"S" * chunk)
            assert parser.next_frame() is None
    assert parser.buffered <= 1024 + 2 + chunk


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_never_ending_header_block_is_cut_off_early(chunk: int) -> None:
    parser = FrameParser("1.2", FrameLimits(max_headers=50))
    stream = b"a:b\n" * (chunk + 1)
    parser.feed(b"SEND\n")
    with pytest.raises(FrameTooLarge, match="limit of 50 headers"):
        for i in range(100_000):
            start = i * chunk % 4
            parser.feed(stream[start : start + chunk])
            assert parser.next_frame() is None
    assert parser.buffered <= 5 + 52 * 4 + chunk


@pytest.mark.parametrize("chunk", [1, 100, 65536])
def test_never_ending_body_is_cut_off_early(chunk: int) -> None:
    parser = FrameParser("1.2", FrameLimits(max_body=10_000))
    parser.feed(b"SEND\ndestination:/q\n\n")
    with pytest.raises(FrameTooLarge, match="body over the limit"):
        for _ in range(100_000):
            parser.feed(b"x" * chunk)
            assert parser.next_frame() is None
    assert parser.buffered <= 21 + 10_000 + chunk


def test_an_oversized_content_length_fails_before_the_body_arrives() -> None:
    parser = FrameParser("1.2", FrameLimits(max_body=1000))
    parser.feed(b"SEND\ncontent-length:1001\n\n")
    with pytest.raises(FrameTooLarge):
        parser.next_frame()


def test_heartbeat_flood_stays_bounded() -> None:
    parser = FrameParser("1.2")
    for _ in range(1000):
        parser.feed(b"\n" * 1000)
        assert parser.next_frame() is None
        assert parser.buffered == 0
    assert parser.heartbeats == 1_000_000


# -- encoding ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    "headers", [[("a",), ("b", "c", "d")], [("a", "b", "c"), ("d",)], [("a",)], [("a", 1)]]
)
def test_encode_refuses_what_is_not_a_pair_of_str(version: str, headers: list[Any]) -> None:
    """A 1-tuple beside a 3-tuple has as many separators as two pairs: still refused,
    with the header named, and never written as a line without its colon."""
    with pytest.raises(TypeError, match="a header must be a \\(name, value\\) pair of str"):
        encode_frame("SEND", headers, b"", version)


def test_encode_exact_bytes() -> None:
    frame = Frame("SEND", (("destination", "/q"), ("x", "1")), b"hi")
    assert encode(frame) == b"SEND\ndestination:/q\nx:1\ncontent-length:2\n\nhi\x00"
    assert encode(Frame("DISCONNECT")) == b"DISCONNECT\n\n\x00"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.1", b"SEND\na\\cb:x\\ny\\\\z\r\n\n\x00"),
        ("1.2", b"SEND\na\\cb:x\\ny\\\\z\\r\n\n\x00"),
    ],
)
def test_encode_escapes_per_version(version: str, expected: bytes) -> None:
    assert encode(Frame("SEND", (("a:b", "x\ny\\z\r"),)), version) == expected


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.1", b"SEND\na\\cb:x\\\\y\r\nid:1\\c2\n\n\x00"),
        ("1.2", b"SEND\na\\cb:x\\\\y\\r\nid:1\\c2\n\n\x00"),
    ],
)
def test_encode_escapes_without_line_feeds_per_version(version: str, expected: bytes) -> None:
    frame = Frame("SEND", (("a:b", "x\\y\r"), ("id", "1:2")))
    assert encode(frame, version) == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ((("k", "a\x00b:c"),), b"k:a\x00b\\cc"),
        ((("k\x00", "v"), ("x", "y")), b"k\x00:v\nx:y"),
        ((("k", "a\nb"), ("n\nm", "c:d")), b"k:a\\nb\nn\\nm:c\\cd"),
    ],
)
def test_encode_escapes_nul_and_line_feeds_too(
    headers: tuple[tuple[str, str], ...], expected: bytes
) -> None:
    assert encode(Frame("SEND", headers), "1.2") == b"SEND\n" + expected + b"\n\n\x00"
    (back,) = FrameParser("1.2").parse(encode(Frame("SEND", headers), "1.2"))
    assert back.headers == headers


def test_encode_10_writes_backslashes_and_colons_in_values_as_they_are() -> None:
    assert encode(Frame("SEND", (("k", "a:b\\c"),)), "1.0") == b"SEND\nk:a:b\\c\n\n\x00"


def test_encode_never_pads_or_trims() -> None:
    data = encode(Frame("SEND", ((" k ", " v "), ("e", ""))), "1.2")
    assert data == b"SEND\n k : v \ne:\n\n\x00"


def test_encode_sets_content_length_whenever_there_is_a_body() -> None:
    frame = Frame("SEND", (("content-length", "999"), ("a", "b")), b"\x00\x00\x00")
    assert encode(frame) == b"SEND\na:b\ncontent-length:3\n\n\x00\x00\x00\x00"
    # No body: a stale content-length is dropped rather than left to lie.
    assert encode(Frame("SEND", (("content-length", "5"),))) == b"SEND\n\n\x00"
    # Nor is it kept where nothing is escaped.
    assert encode(frame, "1.0") == b"SEND\na:b\ncontent-length:3\n\n\x00\x00\x00\x00"


def test_encode_utf8_headers() -> None:
    data = encode(Frame("SEND", (("k", "\u00e9\u2603"),)))
    assert data == "SEND\nk:\u00e9\u2603\n\n\x00".encode()


@pytest.mark.parametrize(
    ("command", "version", "headers"),
    [
        ("SEND", "1.0", (("k", "a\nb"),)),
        ("SEND", "1.0", (("k", "a\rb"),)),
        ("SEND", "1.0", (("a\nb", "v"),)),
        ("SEND", "1.0", (("a:b", "v"),)),
        ("SEND", "1.0", (("a\r", "v"),)),
        ("CONNECT", "1.2", (("login", "a\nb"),)),
        ("CONNECT", "1.1", (("a:b", "v"),)),
        ("STOMP", "1.2", (("passcode", "x\r"),)),
        ("CONNECTED", "1.2", (("server", "a\nb"),)),
    ],
)
def test_encode_refuses_what_cannot_be_carried(
    command: str, version: str, headers: tuple[tuple[str, str], ...]
) -> None:
    with pytest.raises(ValueError, match="cannot"):
        encode(Frame(command, headers), version)


def test_encode_allows_colons_in_raw_values() -> None:
    data = encode(Frame("CONNECT", (("host", "a:b"),)), "1.2")
    assert data == b"CONNECT\nhost:a:b\n\n\x00"


@pytest.mark.parametrize(
    ("frame", "version", "what"),
    [
        (Frame("FOO"), "1.2", "unknown STOMP command"),
        (Frame("send"), "1.2", "unknown STOMP command"),
        (Frame("SEND", (("a", "x\ny"),)), "1.3", "version: must be a STOMP version"),
        (Frame("SEND"), "", "version: must be a STOMP version"),
        (Frame("ACK", (), b"x"), "1.2", "cannot have a body"),
        (Frame("SEND", (("", "v"),)), "1.2", "empty header name"),
        (Frame("SEND", (("", "v"),)), "1.0", "empty header name"),
        (Frame("SEND", (("a", "b"), ("", "v"))), "1.1", "empty header name"),
        (Frame("SEND", (("", "a\nb"),)), "1.2", "empty header name"),
        (Frame("CONNECT", (("host", "h"), ("", "v"))), "1.2", "empty header name"),
        (Frame("SEND", (("k", "\ud800"),)), "1.2", "surrogates not allowed"),
    ],
)
def test_encode_refuses_invalid_frames(frame: Frame, version: str, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        encode(frame, version)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_encoded_frames_parse_back(version: str) -> None:
    frame = Frame("MESSAGE", (("destination", "/q"), ("k", "v"), ("k", "w")), b"a\x00b")
    parser = FrameParser(version)
    (back,) = parser.parse(encode(frame, version) + b"\n")
    assert back.headers == (*frame.headers, ("content-length", "3"))
    assert back.body == frame.body
    assert parser.heartbeats == 1


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    ("headers", "culprit"),
    [
        ((("destination", "/q"), ("priority", 4)), "('priority', 4)"),
        ((("destination", "/q"), (b"x", "y")), "(b'x', 'y')"),
        ((("destination", "/q"), ("a", "b", "c")), "('a', 'b', 'c')"),
        ((("destination", "/q"), ("a\n", "b", "c")), "('a\\n', 'b', 'c')"),
    ],
)
def test_encode_names_the_header_that_is_not_a_pair_of_str(
    headers: tuple[tuple[str, str], ...], culprit: str, version: str
) -> None:
    # Whichever path the encoder takes (all lines at once, one by one, or unescaped),
    # a value that is not text is refused, never written as its repr.
    frame = Frame("SEND", headers, b"body")
    with pytest.raises(TypeError) as info:
        encode(frame, version)
    assert culprit in str(info.value)

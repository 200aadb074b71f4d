"""Received frames make their header pairs on first use: the shortcuts must not show.

A header block that is LF only, with one colon per line and escapes the version
defines, is checked whole and kept as text (``ReceivedFrame``); any other takes the
line-by-line path. Either way the frame must look the same: same pairs, same
``get()``, same ``in``, same errors, whatever is read first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import stompy
from stompy._core.encoder import encode
from stompy._core.frames import (
    Frame,
    ReceivedFrame,
    received_block,
    received_escaping,
)
from stompy._core.parser import FrameParser
from stompy.errors import RemoteProtocolError
from tests.test_codec_properties import frames, run, split, versions

#: Names to look up besides a frame's own: absent ones, and ones that need escaping.
EXTRA_NAMES = ("content-length", "missing", "", "a:b", "a\nb", "a\\b", "a\rb", "k")


def first_entries(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, value in pairs:
        result.setdefault(key, value)
    return result


def parse_all(stream: bytes, version: str) -> list[Frame]:
    frames_out, _, error = run([stream], version)
    assert error is None
    return frames_out


@given(versions, st.data())
def test_lookups_before_the_pairs_agree_with_the_pairs(version: str, data: st.DataObject) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    stream = b"".join(encode(f, version) for f in sent)
    names = [name for frame in sent for name, _ in frame.headers] + list(EXTRA_NAMES)
    extra = data.draw(st.lists(st.text(max_size=6), max_size=4))
    lazy = parse_all(stream, version)
    # Looked up first, while the frame holds its block as text...
    looked = [
        [(name, frame.get(name), name in frame, frame.get(name, "dflt")) for name in names + extra]
        for frame in lazy
    ]
    # ...then compared with what the pairs, made afterwards, say.
    for frame, lookups in zip(lazy, looked, strict=True):
        entries = first_entries(frame.headers)
        for name, value, present, with_default in lookups:
            assert value == entries.get(name)
            assert present == (name in entries)
            assert with_default == entries.get(name, "dflt")
    # The pairs do not depend on whether lookups came first.
    assert parse_all(stream, version) == lazy
    assert [f.headers for f in parse_all(stream, version)] == [f.headers for f in lazy]


def test_a_received_block_is_the_text_that_arrived_until_the_pairs_are_made() -> None:
    parser = FrameParser("1.1")
    data = b"MESSAGE\nsubscription:s\\c1\nmessage-id:m\\n2\n\n\x00"
    (frame,) = parser.parse(data)
    assert received_block(frame) == "MESSAGE\nsubscription:s\\c1\nmessage-id:m\\n2"
    assert received_escaping(frame) == "1.1"
    assert frame.headers == (("subscription", "s:1"), ("message-id", "m\n2"))
    assert received_block(frame) == ""
    (connected,) = FrameParser("1.2").parse(b"CONNECTED\nversion:1.2\nsession:a\\c\n\n\x00")
    assert received_escaping(connected) == "1.0"  # CONNECTED escapes nothing
    assert received_block(Frame("SEND", (("destination", "/q"),))) == ""


def test_only_the_frames_module_reads_what_is_behind_a_received_block() -> None:
    """The parser's frames are read through ``received_block`` and ``received_escaping``
    elsewhere: the attributes behind them are frames.py's own."""
    package = Path(stompy.__file__).parent
    readers = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "_core" / "frames.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("_block", "_escaping"):
                readers.append(f"{path.relative_to(package)}:{node.lineno}")
    assert readers == []


def with_crlf(stream: bytes) -> bytes:
    """Each frame's header lines ended with CRLF instead of LF (bodies untouched)."""
    out = bytearray()
    rest = stream
    while rest:
        head, _, rest = rest.partition(b"\n\n")
        out += head.replace(b"\n", b"\r\n") + b"\r\n\r\n"
        length = next(
            (int(line[15:]) for line in head.split(b"\n") if line.startswith(b"content-length:")),
            None,
        )
        end = rest.index(b"\x00") if length is None else length
        out += rest[: end + 1]
        rest = rest[end + 1 :]
    return bytes(out)


@given(st.sampled_from(["1.0", "1.2"]), st.data())
def test_the_checked_block_and_the_line_by_line_path_agree(
    version: str, data: st.DataObject
) -> None:
    # 1.0 and 1.2 strip the CR of a CRLF (1.1 keeps it in the value), so the same frames
    # with CRLF line ends take the line-by-line path and must come out the same.
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    stream = b"".join(encode(f, version) for f in sent)
    fast = parse_all(stream, version)
    slow = parse_all(with_crlf(stream), version)
    assert all(type(f) is Frame for f in slow)
    assert fast == slow
    for a, b in zip(fast, slow, strict=True):
        for name, _ in b.headers:
            assert a.get(name) == b.get(name)


@given(versions, st.data())
def test_chunked_feeding_equals_whole_feeding_for_received_frames(
    version: str, data: st.DataObject
) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    stream = b"".join(encode(f, version) for f in sent)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    chunked, _, error = run(split(stream, cuts), version)
    assert error is None
    whole = parse_all(stream, version)
    # Looked up before the pairs are made, on both.
    for a, b in zip(chunked, whole, strict=True):
        assert a.get("content-length") == b.get("content-length")
    assert chunked == whole


# -- which path a block takes ----------------------------------------------------------


def test_a_plain_block_is_kept_as_text_until_read() -> None:
    (frame,) = FrameParser("1.2").parse(b"MESSAGE\nk:a\\cb\nk:second\n\nbody\x00")
    assert isinstance(frame, ReceivedFrame)
    assert frame.get("k") == "a:b"
    assert "k" in frame
    assert frame.headers == (("k", "a:b"), ("k", "second"))
    assert frame == Frame("MESSAGE", (("k", "a:b"), ("k", "second")), b"body")


@pytest.mark.parametrize(
    ("data", "headers"),
    [
        # A raw colon in a value (lenient in 1.2): the line-by-line path.
        (b"MESSAGE\nk:a:b\n\n\x00", (("k", "a:b"),)),
        # An escaped backslash, then a c: not the \c of a colon.
        (b"MESSAGE\nk:a\\\\c\n\n\x00", (("k", "a\\c"),)),
        (b"MESSAGE\nk:\\\\\\n\n\n\x00", (("k", "\\\n"),)),
        # A NUL in a header block.
        (b"MESSAGE\nk:a\x00b\\c\n\n\x00", (("k", "a\x00b:"),)),
        # Escaped names.
        (b"MESSAGE\na\\cb:1\na\\nb:2\na\\\\b:3\na\\rb:4\n\n\x00", ()),
    ],
)
def test_unusual_blocks_give_the_same_pairs(
    data: bytes, headers: tuple[tuple[str, str], ...]
) -> None:
    (frame,) = FrameParser("1.2").parse(data)
    if not headers:
        headers = (("a:b", "1"), ("a\nb", "2"), ("a\\b", "3"), ("a\rb", "4"))
    lookups = {name: frame.get(name) for name, _ in headers}
    assert lookups == first_entries(headers)
    assert frame.headers == headers


def test_connected_and_stomp_10_blocks_are_not_unescaped() -> None:
    parser = FrameParser("1.2")
    (connected,) = parser.parse(b"CONNECTED\nsession:a\\cb\nversion:1.2\n\n\x00")
    assert connected.get("session") == "a\\cb"
    (message,) = FrameParser("1.0").parse(b"MESSAGE\nk:a\\cb\\t\n\n\x00")
    assert message.get("k") == "a\\cb\\t"
    assert message.headers == (("k", "a\\cb\\t"),)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"MESSAGE\nk:v\nno colon\n\n\x00", "without a colon"),
        (b"MESSAGE\nk:v\n:v\n\n\x00", "with an empty name"),
        (b"MESSAGE\nk:v:w\nno colon\n\n\x00", "without a colon"),  # colons still balance
        (b"MESSAGE\nk:a\\tb\n\n\x00", "undefined escape"),
        (b"MESSAGE\nk:a\\\n\n\x00", "undefined escape"),
        (b"MESSAGE\ncontent-length:1\\c\n\nx\x00", "invalid content-length '1:'"),
        (b"MESSAGE\ncontent-length:99999999999999999999\n\nx\x00", "over the body limit"),
    ],
)
def test_problems_in_plain_looking_blocks_are_still_reported(data: bytes, what: str) -> None:
    with pytest.raises(RemoteProtocolError, match=what):
        FrameParser("1.2").parse(data)


def test_undefined_escapes_are_kept_by_a_lenient_parser() -> None:
    (frame,) = FrameParser("1.1", strict=False).parse(b"MESSAGE\nk:a\\rb\\cc\n\n\x00")
    assert frame.get("k") == "a\\rb:c"
    assert frame.headers == (("k", "a\\rb:c"),)


def test_setting_headers_replaces_the_block() -> None:
    (frame,) = FrameParser("1.2").parse(b"MESSAGE\nk:v\n\n\x00")
    frame.headers = (("x", "y"),)
    assert frame.get("k") is None
    assert frame.get("x") == "y"
    assert "k" not in frame


def test_frames_are_unhashable_and_match_like_dataclasses() -> None:
    frame = Frame("SEND", (("a", "b"),), b"x")
    with pytest.raises(TypeError):
        hash(frame)
    match frame:
        case Frame("SEND", headers, body):
            assert (headers, body) == ((("a", "b"),), b"x")
        case _:
            raise AssertionError("no match")
    assert frame != "SEND"
    assert frame.__eq__("SEND") is NotImplemented

"""The codec's optional Cython accelerator (``stompy/_core/cscan.pyx``) changes nothing but speed.

``FrameParser`` checks each complete header block with ``cscan.block_escaping`` when a
wheel built it, and in a few ``bytes``/``str`` passes otherwise; ``encode_frame`` has
``cscan.encode_frame`` write the frame, and joins and replaces ``str`` otherwise.
Hypothesis compares:

* the C function with a plain model of what it decides, on arbitrary blocks, when it
  is built (``nox -s wheel`` tests an installed wheel, where it is);
* the parser with that check (the C one, or the model where none is built) and the
  parser without it, on arbitrary streams: frames of every command in every version,
  CRLF, escapes defined and not, content-length bodies holding NULs, and bytes flipped,
  inserted, dropped; whole or cut anywhere. Frames, heart-beats and errors (kind and
  message) are the same;
* the C encoder with the Python one, on arbitrary frames: any command and version,
  names and values holding what is escaped or refused (and NULs, non-ASCII, lone
  surrogates, empty names, content-length), pairs that are not pairs of ``str``,
  bodies with NULs. It writes the same bytes, or leaves the frame to Python (which
  raises any error), but only where the input is not a list or tuple of pairs of
  ``str`` or the body not ``bytes``, or Python raises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stompy import _compiled
from stompy._core import accelerator, encoder
from stompy._core.encoder import encode
from stompy._core.frames import BODY_COMMANDS, COMMANDS, UNESCAPED_COMMANDS, VERSIONS, Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy.errors import RemoteProtocolError
from tests.test_codec_properties import SMALL_BLOCK, frames, mutated, split

Check = Callable[[bytearray, str, bool], str]
Blank = Callable[[bytearray, int], int]
Encode = Callable[..., "bytes | None"]


def _built() -> tuple[Check, Blank, Encode] | None:
    try:
        from stompy._core.cscan import blank_line, block_escaping, encode_frame
    except ImportError:
        return None
    return block_escaping, blank_line, encode_frame


BUILT = _built()
built_check = None if BUILT is None else BUILT[0]
built_blank = None if BUILT is None else BUILT[1]
built_encode = None if BUILT is None else BUILT[2]
Outcome = tuple[list[tuple[str, tuple[tuple[str, str], ...], bytes]], int, str | None]

_UNDEFINED_11 = re.compile(rb"\\[cn]")
_UNDEFINED_12 = re.compile(rb"\\[cnr]")


def model(block: bytearray, version: str, raw: bool) -> str:
    """What ``block_escaping`` decides, said plainly: the fast path takes a block with no
    CR, no colon on its command line, one colon per header line and not first, and
    (where escaping applies) every backslash beginning a sequence the version defines."""
    if b"\r" in block:
        return ""
    command, *lines = bytes(block).split(b"\n")
    if b":" in command or any(line.count(b":") != 1 or line[:1] == b":" for line in lines):
        return ""
    if raw or version == "1.0":
        return "1.0" if raw else version
    defined = _UNDEFINED_12 if version == "1.2" else _UNDEFINED_11
    return "" if b"\\" in defined.sub(b"", bytes(block)) else version


def find_blank(buf: bytearray, start: int) -> int:
    return buf.find(b"\n\n", start)


# What the parser is compared with: the built functions, or the models.
check: Check = built_check if built_check is not None else model
blank: Blank = built_blank if built_blank is not None else find_blank

versions = st.sampled_from(VERSIONS)
# Header-block bytes: the ones the check looks at, often.
block_bytes = st.lists(
    st.sampled_from(b"\n\r:\\cnrtAZaz09-\xc3\xa9\x00") | st.integers(0, 255), max_size=60
).map(bytes)


def test_the_accelerator_is_used_when_built_and_allowed() -> None:
    wanted = built_check is not None and os.environ.get("STOMPY_NO_EXTENSIONS", "") in ("", "0")
    assert _compiled.ACCELERATED is wanted
    assert (FrameParser()._block_escaping is not None) is wanted
    assert (FrameParser()._blank_line is not None) is wanted
    assert accelerator.block_escaping is (built_check if wanted else None)
    assert accelerator.blank_line is (built_blank if wanted else None)
    assert accelerator.encode_frame is (built_encode if wanted else None)


def test_the_wheel_session_has_the_accelerator() -> None:
    if os.environ.get("STOMPY_COMPILED") != "1":
        pytest.skip("only nox -s wheel asks for the built extensions (STOMPY_COMPILED=1)")
    assert built_check is not None
    assert _compiled.ACCELERATED


@pytest.mark.skipif(built_check is None, reason="the accelerator is not built")
@given(st.sampled_from(sorted(COMMANDS)), block_bytes, versions, st.booleans())
@example("MESSAGE", b"\na:b\\\\cn", "1.2", False)  # the model is strict: a slow path
@example("MESSAGE", b"\na:b\\", "1.1", False)
@example("SEND", b"\na:b\\r", "1.1", False)
@example("SEND", b"\na:b\\r", "1.2", False)
@example("CONNECT", b"\na:b\\t", "1.2", True)
def test_the_built_check_decides_as_the_model(
    command: str, rest: bytes, version: str, raw: bool
) -> None:
    assert built_check is not None
    block = bytearray(command.encode() + rest)
    assert built_check(block, version, raw) == model(block, version, raw)
    assert built_check(block, version, raw) in ("", "1.0", version)


@pytest.mark.skipif(built_blank is None, reason="the accelerator is not built")
@given(block_bytes, block_bytes, st.integers(-130, 130))
def test_the_built_blank_line_search_finds_what_find_does(
    head: bytes, tail: bytes, start: int
) -> None:
    assert built_blank is not None
    buf = bytearray(head + tail)
    assert built_blank(buf, start) == buf.find(b"\n\n", start)
    for at in range(len(buf) + 2):
        assert built_blank(buf, at) == buf.find(b"\n\n", at)


def outcome(
    chunks: list[bytes], version: str, limits: FrameLimits, strict: bool, with_check: bool
) -> Outcome:
    parser = FrameParser(version, limits, strict=strict)
    parser._block_escaping = check if with_check else None
    parser._blank_line = blank if with_check else None
    got: list[Frame] = []
    try:
        for chunk in chunks:
            got += parser.parse(chunk)
    except RemoteProtocolError as exc:
        error: str | None = f"{type(exc).__name__}: {exc}"
    else:
        error = None
    return [(f.command, f.headers, f.body) for f in got], parser.heartbeats, error


def same_either_way(stream: bytes, version: str, data: st.DataObject) -> None:
    limits = data.draw(st.sampled_from([FrameLimits(), SMALL_BLOCK]))
    strict = data.draw(st.booleans())
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    for chunks in ([stream], split(stream, cuts)):
        fast = outcome(chunks, version, limits, strict, with_check=True)
        assert fast == outcome(chunks, version, limits, strict, with_check=False)


@st.composite
def crlf(draw: st.DrawFn, version: str) -> bytes:
    """Encoded frames with some of their LFs made CRLF (the blank line's too)."""
    sent = draw(st.lists(frames(version), min_size=1, max_size=3))
    stream = b"\n".join(encode(f, version) for f in sent)
    parts = stream.split(b"\n")
    eols = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(parts)))
    return b"".join(p + e for p, e in zip(parts, eols, strict=False))[:-1]


@st.composite
def handmade(draw: st.DrawFn) -> bytes:
    """A frame written by hand: any command, header lines of bytes the check cares
    about (escapes defined or not, colons, CRs), maybe a content-length and a body with
    NULs in it."""
    command = draw(st.sampled_from(sorted(COMMANDS | {"BOGUS"}))).encode()
    piece = st.lists(st.sampled_from([b"a", b"b", b":", b"\\", b"c", b"n", b"r", b"t", b"\r"]))
    lines = draw(st.lists(piece.map(b"".join), max_size=5))
    body = draw(st.binary(max_size=12) | st.sampled_from([b"\x00", b"a\x00b", b"\x00\x00"]))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b"content-length:%d" % len(body))
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    return eol.join([command, *lines]) + eol + eol + body + b"\x00"


@given(versions, st.data())
def test_encoded_frames_parse_the_same_with_and_without_the_check(
    version: str, data: st.DataObject
) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    same_either_way(b"\n".join(encode(f, version) for f in sent), version, data)


@given(versions, st.data())
def test_crlf_frames_parse_the_same_with_and_without_the_check(
    version: str, data: st.DataObject
) -> None:
    same_either_way(data.draw(crlf(version)), version, data)


@given(versions, st.lists(handmade(), min_size=1, max_size=3), st.data())
def test_handmade_frames_parse_the_same_with_and_without_the_check(
    version: str, streams: list[bytes], data: st.DataObject
) -> None:
    same_either_way(b"".join(streams), version, data)


@given(versions, st.data())
def test_mutated_frames_parse_the_same_with_and_without_the_check(
    version: str, data: st.DataObject
) -> None:
    same_either_way(data.draw(mutated(version)), version, data)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_escaped_backslash_before_c_reads_the_same_either_way(version: str) -> None:
    """The Python check lets "\\\\cn" through (its replace passes remove "\\c", then
    "\\n"), the C one leaves it to the slow path: the frame is the same."""
    stream = b"MESSAGE\nk:a\\\\cn\n\n\x00"
    fast = outcome([stream], version, FrameLimits(), True, with_check=True)
    assert fast == outcome([stream], version, FrameLimits(), True, with_check=False)
    want = "a\\\\cn" if version == "1.0" else "a\\cn"
    assert fast[0] == [("MESSAGE", (("k", want),), b"")]


@pytest.mark.parametrize("version", VERSIONS)
def test_unescaped_commands_keep_their_backslashes_either_way(version: str) -> None:
    for command in sorted(UNESCAPED_COMMANDS):
        stream = command.encode() + b"\nk:a\\tb\\c\n\n\x00"
        fast = outcome([stream], version, FrameLimits(), True, with_check=True)
        assert fast == outcome([stream], version, FrameLimits(), True, with_check=False)
        assert fast[0] == [(command, (("k", "a\\tb\\c"),), b"")]


# -- the encoder -------------------------------------------------------------------------

#: Header text: what the encoder escapes or refuses, and what it copies.
header_text = st.lists(
    st.sampled_from(["\\", ":", "\n", "\r", "\x00", "c", "n", "a", "-", "é", "€", "\U0001f600"]),
    max_size=8,
).map("".join) | st.sampled_from(["", "content-length", "x" * 700, "\ud800"])


class Text(str):
    """A str subclass: the encoder leaves it to Python."""


#: A header: a pair of str mostly; now and then what is not one.
header = st.tuples(header_text, header_text) | st.sampled_from(
    [
        ("content-length", "12"),
        ["a", "b"],
        ("a", "b", "c"),
        ("a",),
        ("a", 1),
        (Text("a"), "b"),
        ("a", Text("b")),
        ("content-length", None),
    ]
)
encoder_bodies = st.binary(max_size=20) | st.sampled_from(
    [b"\x00", b"a\x00b", b"x" * 3000, bytearray(b"ab")]
)


def python_encoding(
    command: str, headers: Sequence[Any], body: bytes, version: str, more: Any = None
) -> bytes | str:
    """What the Python encoder writes, or the error it raises (type and message)."""
    raw = version == "1.0" or command in UNESCAPED_COMMANDS
    if more:
        headers = [*headers, *more.items()]
    try:
        return encoder._frame_bytes(command, headers, body, version, raw)
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def plain(headers: Sequence[Any], body: object, more: Any) -> bool:
    """Whether the C encoder must write this itself (given Python does not raise)."""
    pairs = [*headers, *(() if more is None else more.items())]
    return (
        type(headers) in (list, tuple)
        and (more is None or type(more) is dict)
        and all(type(h) is tuple and len(h) == 2 for h in pairs)
        and all(type(text) is str for h in pairs for text in h)
        and type(body) is bytes
    )


class Headers(dict[str, str]):
    """A dict subclass: the encoder leaves it to Python."""


#: Headers after the others: a dict (of anything), mostly.
more_headers = (
    st.none()
    | st.dictionaries(header_text, header_text, max_size=4)
    | st.sampled_from([{"a": 1}, {1: "a"}, Headers(a="b")])
)


@pytest.mark.skipif(built_encode is None, reason="the accelerator is not built")
@settings(max_examples=500)
@given(
    st.sampled_from(sorted(COMMANDS)),
    st.lists(header, max_size=6),
    st.booleans(),
    encoder_bodies,
    versions,
    more_headers,
)
@example("SEND", [("a", "x" * 2000)] * 3, True, b"", "1.2", None)  # past the stack buffer
@example("SEND", [("a", "\\:" * 600)], False, b"b", "1.1", {"b": "\\:" * 600})
@example("CONNECT", [("a", "b:c")], False, b"", "1.2", None)
@example("SEND", [("", "b")], False, b"", "1.2", None)
@example("SEND", [("a",), ("b", "c", "d")], False, b"", "1.2", None)  # counts that add up
@example("SEND", [("a", "\ud800")], False, b"", "1.2", None)
@example("SEND", [], False, b"", "1.2", {"": "b"})
def test_the_built_encoder_writes_what_python_writes(
    command: str, headers: list[Any], as_tuple: bool, body: bytes, version: str, more: Any
) -> None:
    assert built_encode is not None
    if as_tuple:
        headers = tuple(headers)  # type: ignore[assignment]
    if command not in BODY_COMMANDS:
        body = b""
    raw = version == "1.0" or command in UNESCAPED_COMMANDS
    want = python_encoding(command, headers, body, version, more)
    got = built_encode(command, headers, body, raw, version == "1.2", more)
    if isinstance(want, str) or not plain(headers, body, more):
        assert got is None or got == want  # an error, or the unusual: Python's to do
        if isinstance(want, str):
            assert got is None
    else:
        assert got == want
    # And the codec's entry point, whichever way it takes.
    try:
        encoded: bytes | str = encoder.encode_frame(command, headers, body, version, more)
    except (TypeError, ValueError) as exc:
        encoded = f"{type(exc).__name__}: {exc}"
    assert encoded == want


@pytest.mark.skipif(built_encode is None, reason="the accelerator is not built")
def test_the_built_encoder_leaves_other_inputs_to_python() -> None:
    """Headers that are not a list or tuple (or, after them, a dict), a body not bytes:
    left to Python."""
    assert built_encode is not None
    assert built_encode("SEND", iter([("a", "b")]), b"", False, True) is None
    assert built_encode("SEND", [("a", "b")], bytearray(b"x"), False, True) is None
    assert built_encode("SEND", [], b"", False, True, Headers(a="b")) is None
    frame = b"SEND\na:b\ncontent-length:1\n\nx\x00"
    assert built_encode("SEND", [("a", "b")], b"x", False, True) == frame


#: Names and values with nothing to escape, mostly (what the layout takes), and now
#: and then what it leaves to the general way.
plain_text = st.text(alphabet="ab-/ é€\U0001f600%\x00", max_size=6)
plain_name = st.text(alphabet="ab-/ é€\U0001f600%\x00", min_size=1, max_size=6)
layout_text = st.one_of(plain_text, plain_text, header_text)
layout_header = st.one_of(
    st.tuples(plain_name, plain_text), st.tuples(plain_name, plain_text), header
)
layout_more = st.one_of(
    st.dictionaries(plain_name, plain_text, max_size=5),
    st.dictionaries(plain_name, plain_text, max_size=5),
    st.dictionaries(layout_text, layout_text, max_size=5),
    more_headers,
)


@settings(max_examples=500)
@given(
    st.sampled_from(sorted(COMMANDS)),
    st.lists(layout_header, max_size=3),
    st.booleans(),
    encoder_bodies,
    versions,
    layout_more,
)
@example("SEND", [("", "b")], False, b"", "1.2", {"a": "b"})
@example("SEND", [("a", "\ud800")], False, b"x", "1.2", {"a": "b"})
@example("SEND", [("a", "b")], False, b"", "1.2", {"content-length": "1"})
@example("SEND", [("content-length", "1")], False, b"x", "1.1", {"a": "b"})
@example("SEND", [("a", "b", "c")], False, b"", "1.2", {"a": "b"})
@example("SEND", [("a", "b\r")], False, b"", "1.1", {"a\r": "b"})
@example("ERROR", [], False, bytearray(b"ab"), "1.1", {})  # found by CI against the wheel
def test_a_dict_of_headers_is_written_as_the_general_way_writes_it(
    command: str, headers: list[Any], as_tuple: bool, body: bytes, version: str, more: Any
) -> None:
    """The Python encoder writes a caller's dict into a layout of its names, cached
    (``_head_in_layout``): the same bytes as the general way, or it leaves the frame
    to that (which raises any error). Twice: the second time, the layout is cached."""
    if as_tuple:
        headers = tuple(headers)  # type: ignore[assignment]
    if command not in BODY_COMMANDS:
        body = b""
    # The layout is about the headers; a body that is not bytes is the general way's
    # (compiled by mypyc, that refuses a bytearray, which Python would write).
    body = bytes(body)
    raw = version == "1.0" or command in UNESCAPED_COMMANDS
    want = python_encoding(command, headers, body, version, more)
    for _ in range(2):
        if type(more) is dict and not raw:
            values = encoder._pair_texts(headers)
            head = None
            if values is not None:
                head = encoder._head_in_layout(
                    command, len(headers), values, more, len(body), version == "1.2", frozenset()
                )
            if head is not None:
                got: bytes | str
                try:
                    start = head.encode()
                    got = b"".join((start, body, b"\x00")) if body else start
                except ValueError as exc:
                    got = f"{type(exc).__name__}: {exc}"
                assert got == want
        try:
            encoded: bytes | str = encoder.encode_frame(command, headers, body, version, more)
        except (TypeError, ValueError) as exc:
            encoded = f"{type(exc).__name__}: {exc}"
        assert encoded == want


@settings(max_examples=500)
@given(
    layout_text,
    st.none() | layout_text,
    st.one_of(
        st.dictionaries(plain_name, plain_text, max_size=5),
        st.dictionaries(layout_text, layout_text, max_size=5),
        st.sampled_from([{"a": 1}, {1: "a"}, {"content-length": "3"}]),
    ),
    st.binary(max_size=20),
    versions,
    st.none() | st.sampled_from(["r-1", "r:2"]),
)
@example("/q", "a:b", {"x": "y"}, b"", "1.2", None)  # a content type the layout leaves
@example("/q\r", None, {"x": "y"}, b"b", "1.1", None)  # a CR: escaped in 1.2 only
@example("/q", "t", {"x": "y"}, b"b", "1.0", None)
@example("/q", "t", {"x": "\ud800"}, b"b", "1.2", None)
@example("/q", "t", {"x": "y", "receipt": "r"}, b"b", "1.2", None)
@example("/q", None, {"content-type": "t"}, b"b", "1.2", None)
@example("/q", None, {"Destination": "/r"}, b"b", "1.2", None)  # any case: left
@example("/q", "t", {"x": "y", "Content-Length": "1"}, b"b", "1.1", "r-1")
@example("/q", "t", {"x": "y"}, b"b", "1.2", "r-1")
@example("/q", None, {}, b"", "1.1", "r-1")
def test_the_send_entry_writes_what_encode_frame_writes_or_leaves_it(
    destination: str,
    content_type: str | None,
    more: Any,
    body: bytes,
    version: str,
    receipt: str | None,
) -> None:
    """``encode_send``, the protocol's common SEND, writes the bytes ``encode_frame``
    writes given the destination, content-type and receipt as pairs, or leaves the
    frame to it (None; never an error); it always leaves a dict naming a header of
    ``SEND_OWN`` (in any case), and with nothing to escape or refuse in 1.1 and 1.2 it
    leaves nothing else. Twice: the second time, the layout is cached."""
    pairs = [("destination", destination)]
    if content_type is not None:
        pairs.append(("content-type", content_type))
    if receipt is not None:
        pairs.append(("receipt", receipt))
    owned = any(type(name) is str and name.lower() in encoder.SEND_OWN for name in more)
    for _ in range(2):
        try:
            want: bytes | str = encoder.encode_frame("SEND", pairs, body, version, more)
        except (TypeError, ValueError) as exc:
            want = f"{type(exc).__name__}: {exc}"
        got = encoder.encode_send(destination, content_type, more, body, version, receipt)
        if got is not None:
            assert not owned
            assert got == want
        else:
            assert (
                owned
                or version == "1.0"
                or not isinstance(want, bytes)
                or escaped([*pairs, *more.items()])
            )


def escaped(headers: list[tuple[Any, Any]]) -> bool:
    """Whether a name or value of ``headers`` is escaped in 1.1 / 1.2 (or is not a str)."""
    return any(
        type(text) is not str or any(c in text for c in ":\n\\\r")
        for pair in headers
        for text in pair
    )


def test_many_lists_of_names_are_written_right() -> None:
    """More lists of names than the layouts kept: each frame still has its own."""
    for i in range(600):
        more = {f"n{i}": "v", "x": str(i)}
        frame = encoder.encode_frame("SEND", [("destination", "/q")], b"", "1.2", more)
        assert frame == f"SEND\ndestination:/q\nn{i}:v\nx:{i}\n\n\x00".encode()

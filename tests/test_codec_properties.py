"""Hypothesis: the codec round-trips every frame and fails only with RemoteProtocolError."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import BODY_COMMANDS, COMMANDS, UNESCAPED_COMMANDS, VERSIONS, Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy.errors import RemoteProtocolError

Outcome = tuple[list[Frame], int, type[RemoteProtocolError] | None]

# -- strategies ----------------------------------------------------------------------

versions = st.sampled_from(VERSIONS)
commands = st.sampled_from(sorted(COMMANDS))
# Headers where nothing is escaped (STOMP 1.0; CONNECT and CONNECTED everywhere) can
# carry neither a line break nor, in a name, a colon.
raw_names = st.text(
    st.characters(codec="utf-8", exclude_characters="\n\r:"), min_size=1, max_size=12
)
raw_values = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=20)
any_names = st.text(min_size=1, max_size=12)
any_values = st.text(max_size=20)
# A few characters the codec cares about, so that they show up often.
tricky = st.text(st.sampled_from("\n\r:\\ c\x00\u00e9\u2603"), max_size=8)


def is_raw(command: str, version: str) -> bool:
    return version == "1.0" or command in UNESCAPED_COMMANDS


@st.composite
def frames(draw: st.DrawFn, version: str) -> Frame:
    command = draw(commands)
    if is_raw(command, version):
        names, values = raw_names, raw_values
        names = names | st.text(st.sampled_from("ab\\ c\u00e9"), min_size=1, max_size=6)
        values = values | st.text(st.sampled_from("ab\\: \x00\u2603"), max_size=8)
    else:
        names = any_names | tricky.filter(bool)
        values = any_values | tricky
    headers = draw(
        st.lists(st.tuples(names, values).filter(lambda h: h[0] != "content-length"), max_size=6)
    )
    body = draw(st.binary(max_size=64)) if command in BODY_COMMANDS else b""
    return Frame(command, tuple(headers), body)


eols = st.lists(st.sampled_from([b"\n", b"\r\n"]), max_size=3)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def run(
    chunks: list[bytes],
    version: str,
    limits: FrameLimits | None = None,
    *,
    strict: bool = True,
) -> Outcome:
    """Feed the chunks, draining after each; return frames, heart-beats and the error."""
    parser = FrameParser(version, limits or FrameLimits(), strict=strict)
    frames_out: list[Frame] = []
    total = sum(len(c) for c in chunks)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            # Each frame consumes at least one byte: this bounds the loop.
            for _ in range(total + 2):
                frame = parser.next_frame()
                if frame is None:
                    break
                frames_out.append(frame)
            else:
                raise AssertionError("next_frame() kept returning frames")
    except RemoteProtocolError as exc:
        return frames_out, parser.heartbeats, type(exc)
    return frames_out, parser.heartbeats, None


def run_parse(
    chunks: list[bytes],
    version: str,
    limits: FrameLimits | None = None,
    *,
    strict: bool = True,
) -> Outcome:
    """Like :func:`run`, through ``parse()``, which has its own copy of the loop.

    When a chunk fails, the frames it completed before the error are lost with it.
    """
    parser = FrameParser(version, limits or FrameLimits(), strict=strict)
    frames_out: list[Frame] = []
    try:
        for chunk in chunks:
            frames_out += parser.parse(chunk)
    except RemoteProtocolError as exc:
        return frames_out, parser.heartbeats, type(exc)
    return frames_out, parser.heartbeats, None


def without_length(headers: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return [h for h in headers if h[0] != "content-length"]


# -- round trip ----------------------------------------------------------------------


@given(st.data(), versions)
def test_encode_then_parse_is_the_identity(data: st.DataObject, version: str) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    gaps = data.draw(st.lists(eols, min_size=len(sent), max_size=len(sent)))
    stream = b"".join(encode(f, version) + b"".join(gap) for f, gap in zip(sent, gaps, strict=True))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    received, beats, error = run(split(stream, cuts), version)
    assert error is None
    assert run_parse(split(stream, cuts), version) == (received, beats, None)
    assert len(received) == len(sent)
    for back, frame in zip(received, sent, strict=True):
        assert back.command == frame.command
        assert without_length(back.headers) == without_length(frame.headers)
        assert back.body == frame.body
        if frame.body:
            assert back.get("content-length") == str(len(frame.body))
    assert beats == sum(len(gap) for gap in gaps)


@given(versions, st.data())
def test_one_byte_at_a_time_equals_the_whole_stream(version: str, data: st.DataObject) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=3))
    stream = b"\n".join(encode(f, version) for f in sent)
    whole = run([stream], version)
    assert run([stream[i : i + 1] for i in range(len(stream))], version) == whole
    assert whole[0]
    assert whole[2] is None


# -- hostile input -------------------------------------------------------------------

SMALL = FrameLimits(max_header_line=24, max_headers=3, max_body=40)
#: The same with a header block limit below what the line and header limits allow.
SMALL_BLOCK = FrameLimits(max_header_line=24, max_headers=3, max_body=40, max_header_block=40)
interesting = st.sampled_from(b"\n\r\x00:\\cnrtA\xff\xc3")


@st.composite
def mutated(draw: st.DrawFn, version: str) -> bytes:
    """A stream of valid frames with a few bytes flipped, inserted, dropped or cut."""
    sent = draw(st.lists(frames(version), min_size=1, max_size=3))
    stream = bytearray(b"\n".join(encode(f, version) for f in sent))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "digits"]))
        at = draw(st.integers(0, max(0, len(stream) - 1)))
        if kind == "flip" and stream:
            stream[at] = draw(interesting)
        elif kind == "insert":
            stream.insert(at, draw(interesting))
        elif kind == "delete" and stream:
            del stream[at]
        elif kind == "truncate":
            del stream[at:]
        elif kind == "digits":
            stream[at:at] = b"content-length:" + str(draw(st.integers(0, 10**30))).encode()
    return bytes(stream)


def check_hostile(stream: bytes, version: str, data: st.DataObject) -> None:
    limits = data.draw(st.sampled_from([FrameLimits(), SMALL, SMALL_BLOCK]))
    strict = data.draw(st.booleans())
    whole = run([stream], version, limits, strict=strict)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    # Any chunking gives the same frames, heart-beats and kind of error...
    assert run(split(stream, cuts), version, limits, strict=strict) == whole
    # ...including one byte at a time...
    bytewise = [stream[i : i + 1] for i in range(len(stream))]
    assert run(bytewise, version, limits, strict=strict) == whole
    # ...and through parse().
    frames_out, beats, error = run_parse(split(stream, cuts), version, limits, strict=strict)
    assert error == whole[2]
    assert frames_out == whole[0][: len(frames_out)]
    assert error is not None or (frames_out, beats) == whole[:2]


@given(versions, st.binary(max_size=300), st.data())
def test_random_bytes_raise_only_protocol_error(
    version: str, stream: bytes, data: st.DataObject
) -> None:
    check_hostile(stream, version, data)


@given(versions, st.data())
def test_mutated_frames_raise_only_protocol_error(version: str, data: st.DataObject) -> None:
    stream = data.draw(mutated(version))
    check_hostile(stream, version, data)


@given(
    versions,
    st.lists(st.sampled_from([b"SEND\n", b"MESSAGE\r\n", b"k:v\n", b"\n", b"\r\n", b"\x00"])),
    st.data(),
)
def test_frame_shaped_noise_raises_only_protocol_error(
    version: str, pieces: list[bytes], data: st.DataObject
) -> None:
    check_hostile(b"".join(pieces), version, data)


@given(
    versions,
    st.lists(
        st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b),
        min_size=1,
    ),
    st.booleans(),
)
def test_garbage_is_refused_within_a_bounded_number_of_bytes(
    version: str, lines: list[bytes], as_command: bool
) -> None:
    """Lines that never end a header block: refused by the time the block limit is crossed
    (or its first line if that is no command), never buffered without end."""
    limits = SMALL_BLOCK
    head = b"SEND\n" if as_command else b""
    stream = head + b"\n".join(lines * 40) + b"\n"
    parser = FrameParser(version, limits)
    bound = limits.max_header_block + 2
    for index in range(len(stream)):
        parser.feed(stream[index : index + 1])
        try:
            while parser.next_frame() is not None:
                pass
        except RemoteProtocolError:
            return
        # No blank line, so no frame can end: all of it is one header block.
        assert index < bound, f"{index + 1} bytes of garbage and no error"
    raise AssertionError("the garbage was never refused")


# -- encoder ---------------------------------------------------------------------------


def refused(command: str, headers: list[tuple[str, str]], version: str) -> bool:
    """Whether ``encode`` must refuse these headers (content-length is dropped first)."""
    for name, value in headers:
        if name == "content-length":
            continue
        if not name:
            return True
        if is_raw(command, version) and (
            any(c in name for c in "\n\r:") or any(c in value for c in "\n\r")
        ):
            return True
    return False


@given(versions, commands, st.lists(st.tuples(any_names | tricky, any_values | tricky)))
def test_encode_refuses_exactly_what_it_cannot_carry(
    version: str, command: str, headers: list[tuple[str, str]]
) -> None:
    frame = Frame(command, tuple(headers))
    if refused(command, headers, version):
        with pytest.raises(ValueError, match=r"cannot|empty header name"):
            encode(frame, version)
        return
    # Whatever it wrote is exactly one frame, with the headers it was given.
    (back,) = FrameParser(version).parse(encode(frame, version))
    assert without_length(back.headers) == without_length(frame.headers)


def plain_escape(text: str, version: str) -> str:
    """Escaping one character at a time, as the specs describe it."""
    table = {"\\": "\\\\", "\n": "\\n", ":": "\\c"}
    if version == "1.2":
        table["\r"] = "\\r"
    return "".join(table.get(c, c) for c in text)


def plain_encode(frame: Frame, version: str) -> bytes:
    """A straightforward encoder to hold the fast one to."""
    lines = [frame.command]
    for name, value in frame.headers:
        if name != "content-length":
            if not is_raw(frame.command, version):
                name, value = plain_escape(name, version), plain_escape(value, version)
            lines.append(f"{name}:{value}")
    if frame.body:
        lines.append(f"content-length:{len(frame.body)}")
    return ("\n".join(lines) + "\n\n").encode() + frame.body + b"\x00"


@given(versions, commands, st.lists(st.tuples(any_names | tricky, any_values | tricky)))
def test_encode_writes_what_a_plain_encoder_writes(
    version: str, command: str, headers: list[tuple[str, str]]
) -> None:
    body = b"b\x00dy" if command in BODY_COMMANDS else b""
    frame = Frame(command, tuple(headers), body)
    if not refused(command, headers, version):
        assert encode(frame, version) == plain_encode(frame, version)

"""Codec throughput: frames per second parsed and encoded, stompy against its peers.

Every contender gets the same bytes (``parse``) or the same messages (``encode``) in
the same run. What is timed is each library's real per-frame work:

* stompy: ``FrameParser.parse`` on 64 KiB chunks; ``encode(frame, "1.2")``.
* stomp.py: its transport's receive loop (split the buffer at NUL, honour
  ``content-length``, skip EOLs, slice the buffer) followed by ``utils.parse_frame``,
  reproduced from ``stomp/transport.py`` with its own regexes and helpers; for
  encoding what ``Protocol12.send_frame`` and ``Transport.transmit`` do:
  ``_escape_headers``, ``utils.Frame``, ``convert_frame`` and ``pack``. stomp.py's
  ``auto_decode`` of the body to ``str`` is left out, which flatters stomp.py.
* stompman: ``serde.FrameParser.parse_frames_from_chunk`` and ``serde.dump_frame``.

Each run's output is checked (frame count, and headers and body of sample frames, for
encoders after decoding them again), so a contender that skips work fails loudly.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any, Final

from benchmarks import workload
from benchmarks._core import (
    STOMPY,
    Contender,
    Row,
    Settings,
    Target,
    alternate,
    log,
    register,
    rows_from_rates,
)
from stompy import Frame, FrameParser, encode

GROUP: Final = "codec"
CHUNK: Final = 64 * 1024
V12: Final = "1.2"


def _count(settings: Settings) -> int:
    return settings.pick_count(50_000, 10_000)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(5, 2)


def _samples(count: int) -> list[int]:
    return sorted({0, 1, count // 3, count // 2, count - 1})


def _expect(
    count: int, got: int, check: Callable[[int], tuple[dict[str, str], bytes]], who: str
) -> None:
    """Raise unless ``got == count`` and the sample frames are the ones sent."""
    if got != count:
        raise AssertionError(f"{who}: {got} frames instead of {count}")
    for i in _samples(count):
        headers, body = check(i)
        want = dict(workload.message_headers(i))
        if headers != want or body != workload.body(i):
            raise AssertionError(f"{who}: frame {i} is {headers!r} {body!r}, not {want!r}")


# -- parse ------------------------------------------------------------------------------


def _stompy_parse(chunks: list[bytes]) -> list[Frame]:
    parser = FrameParser(V12)
    frames: list[Frame] = []
    for chunk in chunks:
        frames += parser.parse(chunk)
    return frames


def _stomppy_parser() -> Callable[[list[bytes]], list[Any]]:
    """stomp.py's receive path, from ``BaseTransport.__read`` and ``__read_frames``."""
    from stomp import transport, utils

    content_length_re = transport.BaseTransport._BaseTransport__content_length_re
    preamble_end_re = utils.PREAMBLE_END_RE
    parse_frame = utils.parse_frame
    is_eol = utils.is_eol_default

    def parse(chunks: list[bytes]) -> list[Any]:
        recvbuf = b""
        frames: list[Any] = []
        fastbuf = BytesIO()
        for c in chunks:  # each chunk is one socket.recv()
            if is_eol(c) and not recvbuf and not fastbuf.tell():
                continue  # a heart-beat
            fastbuf.write(c)
            if b"\x00" not in c:
                continue  # __read keeps receiving until a chunk holds a NUL
            recvbuf += fastbuf.getvalue()
            fastbuf.close()
            fastbuf = BytesIO()
            while True:
                pos = recvbuf.find(b"\x00")
                if pos < 0:
                    break
                frame = recvbuf[0:pos]
                preamble_end_match = preamble_end_re.search(frame)
                if preamble_end_match:
                    preamble_end = preamble_end_match.start()
                    content_length_match = content_length_re.search(frame[0:preamble_end])
                    if content_length_match:
                        content_length = int(content_length_match.group("value"))
                        frame_size = preamble_end_match.end() + content_length
                        if frame_size > len(frame):
                            if frame_size < len(recvbuf):
                                pos = frame_size
                                frame = recvbuf[0:pos]
                            else:
                                break
                pos += 1
                while True:
                    if is_eol(recvbuf[pos : pos + 1]):
                        pos += 1
                    elif is_eol(recvbuf[pos : pos + 2]):
                        pos += 2
                    else:
                        break
                recvbuf = recvbuf[pos:]
                # __read_frames: parse each split frame.
                parsed = parse_frame(frame)
                if parsed is not None:
                    frames.append(parsed)
        return frames

    return parse


def _stompman_parse(chunks: list[bytes]) -> list[Any]:
    from stompman.serde import FrameParser as StompmanParser

    parser = StompmanParser()
    frames: list[Any] = []
    for chunk in chunks:
        frames.extend(parser.parse_frames_from_chunk(chunk))
    return frames


def _parse_contenders(count: int) -> tuple[list[Contender], list[str]]:
    chunks = workload.chunks(workload.message_stream(count), CHUNK)
    contenders = [
        Contender(
            STOMPY,
            lambda _: _stompy_parse(chunks),
            lambda out: _expect(
                count,
                len(out),
                lambda i: (dict(out[i].headers), out[i].body),
                STOMPY,
            ),
            len,
        )
    ]
    missing: list[str] = []
    try:
        stomppy_parse = _stomppy_parser()
    except ImportError:
        missing.append("stomp.py")
    else:
        contenders.append(
            Contender(
                "stomp.py",
                lambda _: stomppy_parse(chunks),
                lambda out: _expect(
                    count,
                    sum(f.cmd == "MESSAGE" for f in out),
                    lambda i: (out[i].headers, out[i].body),
                    "stomp.py",
                ),
                len,
            )
        )
    try:
        import stompman.serde  # noqa: F401
    except ImportError:
        missing.append("stompman")
    else:
        contenders.append(
            Contender(
                "stompman",
                lambda _: _stompman_parse(chunks),
                lambda out: _expect(
                    count,
                    len(out),
                    lambda i: (dict(out[i].headers), out[i].body),
                    "stompman",
                ),
                len,
            )
        )
    return contenders, missing


# -- encode -----------------------------------------------------------------------------


def _check_encoded(count: int, out: Sequence[bytes], who: str) -> None:
    """Decode sample frames with stompy's parser and compare them with the messages."""

    def decoded(i: int) -> tuple[dict[str, str], bytes]:
        (frame,) = FrameParser(V12).parse(out[i])
        if frame.command != "MESSAGE":
            raise AssertionError(f"{who}: frame {i} has command {frame.command!r}")
        return frame.header_map(), frame.body

    _expect(count, len(out), decoded, who)


def _encode_contenders(count: int) -> tuple[list[Contender], list[str]]:
    messages = [(workload.message_headers(i), workload.body(i)) for i in range(count)]
    stompy_frames = [Frame("MESSAGE", headers, body) for headers, body in messages]
    contenders = [
        Contender(
            STOMPY,
            lambda _: [encode(frame, V12) for frame in stompy_frames],
            lambda out: _check_encoded(count, out, STOMPY),
            len,
        )
    ]
    missing: list[str] = []
    try:
        from stomp import protocol, utils
    except ImportError:
        missing.append("stomp.py")
    else:
        escape_headers = protocol.Protocol12._escape_headers
        stomp_frame = utils.Frame
        convert_frame = utils.convert_frame
        pack = utils.pack

        def stomppy_encode(header_maps: list[dict[str, str]]) -> list[bytes]:
            out: list[bytes] = []
            for headers, (_, body) in zip(header_maps, messages, strict=True):
                escape_headers(None, headers)  # Protocol12.send_frame; self is unused
                out.append(pack(convert_frame(stomp_frame("MESSAGE", headers, body))))
            return out

        contenders.append(
            Contender(
                "stomp.py",
                stomppy_encode,
                lambda out: _check_encoded(count, out, "stomp.py"),
                len,
                # stomp.py escapes the caller's dict in place: give it fresh dicts,
                # built outside the timer (send() would copy them inside it).
                prepare=lambda: [dict(headers) for headers, _ in messages],
            )
        )
    try:
        from stompman import MessageFrame, dump_frame
    except ImportError:
        missing.append("stompman")
    else:
        stompman_frames = [
            MessageFrame(headers=dict(headers), body=body)  # type: ignore[arg-type]
            for headers, body in messages
        ]
        contenders.append(
            Contender(
                "stompman",
                lambda _: [dump_frame(frame) for frame in stompman_frames],
                lambda out: _check_encoded(count, out, "stompman"),
                len,
            )
        )
    return contenders, missing


# -- the group --------------------------------------------------------------------------


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    stream = workload.message_stream(count)
    return {
        "frames": count,
        "rounds": _rounds(settings),
        "chunk_bytes": CHUNK,
        "headers_per_frame": len(workload.message_headers(0)),
        "body_bytes": workload.BODY_SIZE,
        "stream_bytes": len(stream),
        "mean_frame_bytes": round(len(stream) / count, 1),
        "stomp_version": V12,
        "versions": {
            "python": platform.python_version(),
            "stomp.py": _version("stomp.py"),
            "stompman": _version("stompman"),
        },
    }


@register(
    GROUP,
    "parse and encode 10-header MESSAGE frames (frames/s)",
    targets=(Target("parse", "stomp.py", 4.0), Target("encode", "stomp.py", 3.0)),
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    count = _count(settings)
    rounds = _rounds(settings)
    rows: list[Row] = []
    for name, build in (("parse", _parse_contenders), ("encode", _encode_contenders)):
        log(settings, f"codec {name}: {count:,} frames, {rounds} rounds")
        contenders, missing = build(count)
        contenders = [c for c in contenders if settings.wants(c.name)]
        missing = [m for m in missing if settings.wants(m)]
        rates, failed = alternate(contenders, rounds, settings, name)
        rows += rows_from_rates(GROUP, name, rates, "frames/s")
        notes = {**failed, **dict.fromkeys(missing, "not installed")}
        rows += [
            Row(GROUP, name, who, float("nan"), "frames/s", note=why) for who, why in notes.items()
        ]
    return rows

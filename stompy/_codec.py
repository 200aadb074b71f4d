"""The incremental frame parser and the encoder.

The parser is fed arbitrary chunks of bytes and hands out complete frames one at a
time (h11's ``receive_data`` / ``next_event`` split), so that the state machine can
switch the STOMP version right after CONNECTED, before the next frame is decoded.

Speed comes from working on whole slices: ``bytes.find`` locates the blank line that
ends the headers and the NUL that ends a body, the header block is decoded once, and
unescaping runs only on lines that hold a backslash. Memory is bounded by
:class:`FrameLimits`: a frame that crosses a limit raises :class:`FrameTooLarge` as
soon as the crossing is seen, without waiting for (or buffering) the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from stompy._frames import (
    BODY_COMMANDS,
    COMMANDS,
    UNESCAPED_COMMANDS,
    V10,
    V11,
    V12,
    VERSIONS,
    Frame,
    escape,
    unescape,
)
from stompy.errors import FrameTooLarge, ProtocolError

__all__ = ("FrameLimits", "FrameParser", "encode")

_DIGITS: Final = re.compile(r"[0-9]+")


def _shown(text: str) -> str:
    """``text`` for an error message: a peer's megabyte of garbage is cut short."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


_NEEDS_ESCAPE: Final = re.compile(r"[\\\n:\r]").search


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Upper bounds on what one received frame may hold.

    They mirror a broker's ``max_header_length``, ``max_headers`` and
    ``max_data_length``; the defaults are generous for real traffic and small enough
    that a hostile peer cannot exhaust memory.
    """

    #: Longest header line (or command line) in bytes, EOL excluded.
    max_header_line: int = 64 * 1024
    #: Most header entries in one frame.
    max_headers: int = 1000
    #: Largest body in bytes.
    max_body: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_header_line < 16 or self.max_headers < 1 or self.max_body < 0:
            raise ValueError(f"unusable frame limits: {self!r}")


DEFAULT_LIMITS: Final = FrameLimits()


class FrameParser:
    """Turns a stream of bytes into :class:`Frame` objects.

    ``feed(data)`` buffers bytes; ``next_frame()`` returns the next complete frame or
    ``None`` when more bytes are needed. ``parse(data)`` does both and returns every
    complete frame. EOLs between frames (heart-beats) are counted in ``heartbeats``.

    Every problem with the input raises :class:`ProtocolError` (or
    :class:`FrameTooLarge`) naming what was wrong and at which byte offset of the
    stream; after that the parser is unusable and raises the same error again. The
    outcome never depends on how the stream was cut into chunks.

    ``strict=False`` keeps undefined escapes literally and accepts a body on a frame
    that may not have one, instead of raising.
    """

    def __init__(
        self,
        version: str = V10,
        limits: FrameLimits = DEFAULT_LIMITS,
        *,
        strict: bool = True,
    ) -> None:
        self.version = version
        self.limits = limits
        self.strict = strict
        #: EOLs seen between frames: heart-beats, or padding after a NUL.
        self.heartbeats = 0
        self._buf = bytearray()
        self._pos = 0  # start of the unconsumed bytes in _buf
        self._offset = 0  # stream offset of _buf[0], for error messages
        self._error: ProtocolError | None = None
        # Header scanning state, kept across calls so no byte is scanned twice.
        self._scan = 0  # where the search for the blank line resumes
        self._line_start = 0  # start of the header line being scanned
        self._lines = 0  # complete lines seen in the current header block
        # A frame whose headers are parsed and whose body is still arriving.
        self._command = ""
        self._headers: tuple[tuple[str, str], ...] = ()
        self._body_start = -1
        self._length = -1  # the content-length, or -1 to read up to the NUL

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        if version not in VERSIONS:
            raise ValueError(f"unknown STOMP version {version!r}")
        self._version = version

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet part of a returned frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Buffer ``data``; call :meth:`next_frame` until it returns ``None``."""
        if self._pos:
            # Compact: drop what was consumed and rebase every saved index.
            pos = self._pos
            del self._buf[:pos]
            self._offset += pos
            self._pos = 0
            self._scan = max(0, self._scan - pos)
            self._line_start = max(0, self._line_start - pos)
            if self._body_start >= 0:
                self._body_start -= pos
        self._buf += data

    def parse(self, data: bytes) -> list[Frame]:
        """Feed ``data`` and return every frame it completes."""
        self.feed(data)
        frames: list[Frame] = []
        frame = self.next_frame()
        while frame is not None:
            frames.append(frame)
            frame = self.next_frame()
        return frames

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, or ``None`` if more bytes are needed."""
        if self._error is not None:
            raise self._error
        try:
            return self._next_frame()
        except ProtocolError as exc:
            self._error = exc
            raise

    def _fail(self, message: str, at: int, *, too_large: bool = False) -> ProtocolError:
        where = f" (at byte {self._offset + at} of the stream)"
        cls = FrameTooLarge if too_large else ProtocolError
        return cls(message + where)

    def _next_frame(self) -> Frame | None:
        if self._body_start < 0 and not self._read_headers():
            return None
        return self._read_body()

    def _read_headers(self) -> bool:
        buf = self._buf
        end = len(buf)
        pos = self._pos
        if self._scan <= pos:
            # Between frames: skip EOLs, which are heart-beats or frame padding.
            while pos < end:
                byte = buf[pos]
                if byte == 10:
                    pos += 1
                elif byte == 13:
                    if pos + 1 >= end:
                        break
                    if buf[pos + 1] != 10:
                        self._pos = pos
                        raise self._fail("carriage return not followed by a line feed", pos)
                    pos += 2
                else:
                    break
                self.heartbeats += 1
            self._pos = pos
            if pos >= end or buf[pos] == 13:
                return False
            self._scan = self._line_start = pos
            self._lines = 0

        scan = self._scan
        stop = buf.find(b"\n\n", scan)
        crlf = buf.find(b"\n\r\n", scan, end if stop < 0 else stop + 2)
        if crlf >= 0:
            stop = crlf
        if stop < 0:
            self._check_partial_header(scan, end)
            return False

        limits = self.limits
        size = stop - pos
        # Size checks come first and work on bytes, so that a frame too large is
        # reported the same way whether it arrived whole or in pieces.
        if size > 2 * limits.max_headers:  # else it cannot hold too many lines
            count = buf.count(b"\n", pos, stop)
            if count > limits.max_headers:
                raise self._fail(
                    f"{count} headers, more than the limit of {limits.max_headers} headers",
                    pos,
                    too_large=True,
                )
        if size > limits.max_header_line:  # else no line can be too long
            self._check_line_lengths(pos, stop)
        try:
            text = buf[pos:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(
                f"header block is not valid UTF-8: {exc.reason}", pos + exc.start
            ) from None
        lines = text.split("\n")
        command = lines[0]
        if command.endswith("\r"):
            command = command[:-1]
        if command not in COMMANDS:
            raise self._fail(f"unknown command {_shown(command)}", pos)
        raw = command in UNESCAPED_COMMANDS
        version = self.version
        # "EOL = [CR] LF" (1.2). STOMP 1.1 ends lines with LF only and lets a value
        # hold a CR, so it keeps one. 1.0 says LF too, but a 1.0 value cannot carry
        # a CR reliably, and a 1.0 parser is what reads an ERROR that arrives before
        # CONNECTED names the version: strip it there, as for CONNECT/CONNECTED.
        strip_cr = raw or version != V11
        do_unescape = not raw and version != V10
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if strip_cr and line.endswith("\r"):
                line = line[:-1]
            colon = line.find(":")
            if colon <= 0:
                what = "without a colon" if colon < 0 else "with an empty name"
                raise self._fail(f"header line {what}: {_shown(line)} in {command}", pos)
            if do_unescape and "\\" in line:
                try:
                    headers.append(
                        (
                            unescape(line[:colon], version, strict=self.strict),
                            unescape(line[colon + 1 :], version, strict=self.strict),
                        )
                    )
                except ProtocolError as exc:
                    raise self._fail(f"{exc} in {command}", pos) from None
            else:
                headers.append((line[:colon], line[colon + 1 :]))

        length = -1
        for key, value in headers:
            if key == "content-length":
                if _DIGITS.fullmatch(value) is None:
                    raise self._fail(f"invalid content-length {_shown(value)} in {command}", pos)
                # Measured before int(): a long run of digits is both too large and
                # beyond what int() converts (sys.get_int_max_str_digits).
                digits = value.lstrip("0")
                length = int(digits or "0") if len(digits) <= 18 else limits.max_body + 1
                if length > limits.max_body:
                    raise self._fail(
                        f"content-length {_shown(value)} is over the body limit of "
                        f"{limits.max_body}",
                        pos,
                        too_large=True,
                    )
                break
        self._command = command
        self._headers = tuple(headers)
        self._length = length
        # Skip the blank line: "\n\n" or "\n\r\n".
        self._body_start = stop + (3 if buf[stop + 1] == 13 else 2)
        self._scan = self._body_start
        return True

    def _line_too_long(self, start: int) -> ProtocolError:
        limit = self.limits.max_header_line
        return self._fail(f"header line over the limit of {limit} bytes", start, too_large=True)

    def _check_line_lengths(self, start: int, stop: int) -> None:
        """Enforce ``max_header_line`` on the complete header block ``buf[start:stop]``."""
        buf = self._buf
        limit = self.limits.max_header_line
        while True:
            newline = buf.find(b"\n", start, stop)
            end = stop if newline < 0 else newline
            length = end - start
            if length > limit and (length > limit + 1 or buf[end - 1] != 13):
                raise self._line_too_long(start)
            if newline < 0:
                return
            start = newline + 1

    def _check_partial_header(self, scan: int, end: int) -> None:
        """Enforce the header limits on a header block that is not complete yet.

        The limits are the same as for a complete block (line length in bytes without
        the EOL; lines after the command), checked as the bytes arrive.
        """
        buf = self._buf
        limits = self.limits
        limit = limits.max_header_line
        line_start = self._line_start
        lines = self._lines
        newline = buf.find(b"\n", max(scan, line_start), end)
        while newline >= 0:
            length = newline - line_start
            if length > limit and (length > limit + 1 or buf[newline - 1] != 13):
                raise self._line_too_long(line_start)
            lines += 1
            line_start = newline + 1
            newline = buf.find(b"\n", line_start, end)
        # The line still arriving may end in the CR of its CRLF: allow one byte for it.
        length = end - line_start
        if length > limit and (length > limit + 1 or buf[end - 1] != 13):
            raise self._line_too_long(line_start)
        if lines > limits.max_headers + 1:
            raise self._fail(
                f"more than the limit of {limits.max_headers} headers", self._pos, too_large=True
            )
        self._line_start = line_start
        self._lines = lines
        # Resume one byte back: the "\n" of a "\n\n" or "\n\r\n" may already be here.
        self._scan = max(self._pos, end - 2)

    def _read_body(self) -> Frame | None:
        buf = self._buf
        start = self._body_start
        length = self._length
        if length >= 0:
            nul = start + length
            if len(buf) <= nul:
                return None
            if buf[nul] != 0:
                raise self._fail(
                    f"{self._command} body of content-length {length} is not followed by NUL",
                    nul,
                )
        else:
            nul = buf.find(b"\x00", self._scan)
            if nul < 0:
                if len(buf) - start > self.limits.max_body:
                    raise self._fail(
                        f"body over the limit of {self.limits.max_body} bytes",
                        start,
                        too_large=True,
                    )
                self._scan = len(buf)
                return None
            length = nul - start
            if length > self.limits.max_body:
                raise self._fail(
                    f"body over the limit of {self.limits.max_body} bytes", start, too_large=True
                )
        command = self._command
        if length and self.strict and command not in BODY_COMMANDS:
            raise self._fail(f"{command} frame must not have a body", start)
        frame = Frame(command, self._headers, bytes(buf[start:nul]))
        self._pos = self._scan = nul + 1
        self._body_start = -1
        self._headers = ()
        return frame


def encode(frame: Frame, version: str = V12) -> bytes:
    """Encode ``frame`` for the given STOMP version.

    Headers are escaped as the version requires and never padded or trimmed. Any
    ``content-length`` in ``frame.headers`` is dropped and the true length is written
    whenever there is a body, so the body may hold NUL octets.

    Raises :class:`ValueError`, before anything is produced, for what cannot be
    written safely: an unknown version or command, a body on a frame that may not
    have one, an empty header name, text that is not encodable as UTF-8 (a lone
    surrogate), and wherever no escaping exists (STOMP 1.0, and CONNECT / CONNECTED
    in every version) a line break in a header or a colon in a name: a header value
    must never be able to inject a header or a frame.
    """
    if version not in VERSIONS:
        # An unknown version would escape nothing and let a newline through.
        raise ValueError(f"unknown STOMP version {version!r}")
    command = frame.command
    if command not in COMMANDS:
        raise ValueError(f"unknown STOMP command {command!r}")
    body = frame.body
    if body and command not in BODY_COMMANDS:
        raise ValueError(f"a {command} frame cannot have a body")
    raw = version == V10 or command in UNESCAPED_COMMANDS
    parts = [command]
    for key, value in frame.headers:
        if key == "content-length":
            continue
        if not key:
            raise ValueError(f"empty header name in {command}")
        if raw:
            if "\n" in key or ":" in key or "\r" in key:
                raise ValueError(f"header name {key!r} cannot be sent in {command} {version}")
            if "\n" in value or "\r" in value:
                raise ValueError(
                    f"value of header {key!r} holds a line break, which STOMP {version} "
                    f"cannot carry in {command}"
                )
            parts.append(f"{key}:{value}")
        else:
            if _NEEDS_ESCAPE(key) is not None:
                key = escape(key, version)
            if _NEEDS_ESCAPE(value) is not None:
                value = escape(value, version)
            parts.append(f"{key}:{value}")
    if body:
        parts.append(f"content-length:{len(body)}")
    parts.append("\n")
    return "\n".join(parts).encode("utf-8") + body + b"\x00"

"""The incremental frame parser, and the limits on what one received frame may hold.

The parser is fed arbitrary chunks of bytes and hands out complete frames one at a
time (h11's ``receive_data`` / ``next_event`` split), so that the state machine can
switch the STOMP version right after CONNECTED, before the next frame is decoded.

Speed comes from working on whole slices: ``bytes.find`` locates the blank line that
ends the headers and the NUL that ends a body, the header block is decoded once, CRs
and backslashes are dealt with only where there are any, and the ``(name, value)``
pairs of header lines seen lately are shared rather than made again (with the Cython
accelerator, ``cscan.pyx``, a header block is checked in one pass in C).
Memory is bounded by :class:`FrameLimits`: a frame that crosses a limit raises
:class:`FrameTooLarge` as soon as the crossing is seen, without waiting for (or
buffering) the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from stompy._checks import bad_value, check_integer, check_type, check_version
from stompy._core.accelerator import blank_line as _blank_line
from stompy._core.accelerator import block_escaping as _block_escaping
from stompy._core.frames import (
    BODY_COMMANDS,
    COMMANDS,
    UNESCAPED_COMMANDS,
    V10,
    V11,
    V12,
    VERSIONS,
    Frame,
    ReceivedFrame,
    unescape,
)
from stompy.errors import FrameTooLarge, ProtocolError, RemoteProtocolError

__all__ = ("DEFAULT_LIMITS", "FrameLimits", "FrameParser", "shown")

#: How many recent header lines (of at most ``_KNOWN_LINE_MAX`` characters, without a
#: backslash) the parser remembers the ``(name, value)`` pair of.
_KNOWN_PAIRS: Final = 128
_KNOWN_LINE_MAX: Final = 200
#: From this size on a body leaves the buffer through a memoryview (one copy, not two).
_VIEW_COPY_MIN: Final = 16 * 1024
#: Every byte but the colon and the LF, for ``bytes.translate`` to delete.
_NOT_SEPARATORS: Final = bytes(b for b in range(256) if b not in b":\n")
#: What is left of a header block whose lines each hold one colon, for up to 4,096 lines
#: (a longer block takes the slow path).
_SEPARATORS: Final = b"\n:" * 4096
_NO_BLOCK: Final = bytearray()
#: Stands for "no frame" in the parser's state, so that the attribute is never None.
_NO_FRAME: Final = Frame("")


def shown(text: str) -> str:
    """``text`` for an error message: a peer's megabyte of garbage is cut short."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


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
    #: Largest header block (command and header lines) in bytes: without it, a frame
    #: could hold ``max_headers`` lines of ``max_header_line`` bytes each.
    max_header_block: int = 96 * 1024

    def __post_init__(self) -> None:
        # ConfigurationError naming the limit (compiled, a wrong type is a TypeError
        # before this runs; in Python, check_integer's).
        check_integer("max_header_line", self.max_header_line, 16)
        check_integer("max_headers", self.max_headers, 1)
        check_integer("max_body", self.max_body, 0)
        check_integer("max_header_block", self.max_header_block, 16)
        if self.max_header_block < self.max_header_line:
            rule = f"must be at least max_header_line ({self.max_header_line})"
            raise bad_value("max_header_block", rule, self.max_header_block)


DEFAULT_LIMITS: Final = FrameLimits()


class FrameParser:
    """Turns a stream of bytes into :class:`Frame` objects.

    ``feed(data)`` buffers bytes; ``next_frame()`` returns the next complete frame or
    ``None`` when more bytes are needed. ``parse(data)`` does both and returns every
    complete frame. EOLs between frames (heart-beats) are counted in ``heartbeats``.

    Every problem with the input raises :class:`RemoteProtocolError` (or
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
        #: True when every byte fed is part of a frame returned: :meth:`next_frame`
        #: would return ``None`` until :meth:`feed` (it may be False then too), so a
        #: reader can skip the call that finds nothing.
        self.drained = False
        self._buf = bytearray()
        #: What was fed last, while it is the whole buffer and bytes (else b""): a
        #: whole frame's body is sliced from it, one copy rather than two.
        self._chunk = b""
        self._pos = 0  # start of the unconsumed bytes in _buf
        self._offset = 0  # stream offset of _buf[0], for error messages
        self._error: ProtocolError | None = None
        self._known_pairs: dict[str, tuple[str, str]] = {}  # line -> (name, value)
        #: The accelerator's functions, or None (the tests compare the two ways).
        self._block_escaping = _block_escaping
        self._blank_line = _blank_line
        # Header scanning state, kept across calls so no byte is scanned twice.
        self._scan = 0  # where the search for the blank line resumes
        self._line_start = 0  # start of the header line being scanned
        self._lines = 0  # complete lines seen in the current header block
        # A frame whose headers are parsed and whose body is still arriving.
        self._frame = _NO_FRAME
        self._body_start = -1
        self._length = -1  # the content-length, or -1 to read up to the NUL

    @property
    def limits(self) -> FrameLimits:
        return self._limits

    @limits.setter
    def limits(self, limits: FrameLimits) -> None:
        check_type("limits", limits, FrameLimits, "a FrameLimits")
        self._limits = limits
        self._max_body = limits.max_body
        # A header block no longer than this is within every limit, whatever it holds.
        self._small_block = min(
            limits.max_header_block, 2 * limits.max_headers, limits.max_header_line
        )

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        if version not in VERSIONS:
            check_version("version", version, VERSIONS)  # TypeError or ConfigurationError
        self._version = version

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet part of a returned frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Buffer ``data``; call :meth:`next_frame` until it returns ``None``."""
        buf = self._buf
        pos = self._pos
        if pos:
            # Compact: drop what was consumed and rebase every saved index.
            if pos == len(buf):
                # Every byte was consumed, as mostly (a frame whose body is still
                # arriving starts at _pos, so none is): every index goes back to 0.
                del buf[:]
                self._scan = self._line_start = 0
            else:
                del buf[:pos]
                scan = self._scan - pos
                self._scan = scan if scan > 0 else 0
                line_start = self._line_start - pos
                self._line_start = line_start if line_start > 0 else 0
                if self._body_start >= 0:
                    self._body_start -= pos
            self._offset += pos
            self._pos = 0
        # Bytes fed into an empty buffer are kept too, for a whole frame's body to be
        # sliced from (a bytes object at once, where the buffer's slice is copied again).
        self._chunk = b"" if buf or type(data) is not bytes else data
        buf += data
        self.drained = False

    def parse(self, data: bytes) -> list[Frame]:
        """Feed ``data`` and return every frame it completes."""
        self.feed(data)
        if self._error is not None:
            raise self._error
        frames: list[Frame] = []
        next_frame = self.next_frame
        frame = next_frame()
        while frame is not None:
            frames.append(frame)
            frame = next_frame()
        return frames

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, or ``None`` if more bytes are needed."""
        # The hot path of every consumer, in one function (a call costs).
        if self._error is not None:
            raise self._error
        try:
            if self._body_start >= 0:
                return self._read_body()
            buf = self._buf
            end = len(buf)
            pos = self._pos
            scan = self._scan
            fresh = scan <= pos  # between frames: no byte of this one scanned yet
            if fresh:
                if pos >= end:
                    return None
                if buf[pos] < 14:  # an EOL, probably (no command starts below "A")
                    pos = self._skip_eols(pos, end)
                    if pos >= end or buf[pos] == 13:
                        return None
                scan = pos
            blank_line = self._blank_line
            stop = buf.find(b"\n\n", scan) if blank_line is None else blank_line(buf, scan)
            block = buf[pos:stop] if stop >= 0 else _NO_BLOCK
            skip = 2  # the blank line: "\n\n" or "\n\r\n"
            has_cr = stop < 0 or 13 in block
            if has_cr:
                # A block ended by "\n\r\n" may end sooner. Most peers send no CR at all,
                # and looking for one byte (memchr) is much cheaper than for three.
                if buf.find(b"\r", scan, end if stop < 0 else stop) >= 0:
                    crlf = buf.find(b"\n\r\n", scan, end if stop < 0 else stop + 2)
                    if crlf >= 0:
                        stop = crlf
                        skip = 3
                        block = buf[pos:stop]
                        has_cr = 13 in block
                if stop < 0:
                    if fresh:
                        self._line_start = pos
                        self._lines = 0
                    self._check_partial_header(scan, end)
                    return None
            body_start = stop + skip
            if stop - pos > self._small_block:
                if fresh:
                    self._line_start = pos
                    self._lines = 0
                self._check_block_size(pos, pos + len(block))
            try:
                text = block.decode()
            except UnicodeDecodeError as exc:
                raise self._fail(
                    f"header block is not valid UTF-8: {exc.reason}", pos + exc.start
                ) from None
            # The usual block: LF only, one colon per header line after a name, escapes
            # that the version defines. It is checked here in a few C-level passes (in
            # one, by the accelerator), and its pairs are made only if somebody reads
            # them (see ReceivedFrame).
            head = text[:8]  # the two commands a client receives most, compared whole
            known = True
            if head == "MESSAGE\n":
                command = "MESSAGE"
            elif head == "RECEIPT\n":
                command = "RECEIPT"
            else:
                command = text.partition("\n")[0]
                known = command in COMMANDS
            escaping = ""  # stays "" for a block that takes the line-by-line path
            if known:
                block_escaping = self._block_escaping
                if block_escaping is not None:
                    # The same checks in one pass in C (stompy/_core/cscan.pyx), when built.
                    raw = command in UNESCAPED_COMMANDS
                    escaping = block_escaping(block, self._version, raw)
                elif not has_cr:
                    # What separates names from values and lines, alone, must alternate.
                    separators = block.translate(None, _NOT_SEPARATORS)
                    size = len(separators)
                    if (
                        not size & 1
                        # (bytes methods parse their arguments slowly: a slice compares faster)
                        and separators == _SEPARATORS[:size]
                        and "\n:" not in text
                    ):
                        escaping = V10 if command in UNESCAPED_COMMANDS else self._version
                        if escaping != V10 and "\\" in text:
                            # Each backslash must begin a sequence the version defines (one
                            # after an escaped backslash, "\\\\c", is left to the slow path).
                            rest = text.replace("\\c", "")
                            if "\\" in rest:
                                rest = rest.replace("\\n", "")
                                if escaping == V12:
                                    rest = rest.replace("\\r", "")
                                if "\\" in rest:
                                    escaping = ""
            if not escaping:
                self._read_lines(text, pos)
                self._body_start = self._scan = body_start
                return self._read_body()
            length = -1
            at = text.find("\ncontent-length:")
            if at >= 0:
                at += 16
                value_end = text.find("\n", at)
                value = text[at:value_end] if value_end >= 0 else text[at:]
                if len(value) < 19 and value.isdigit() and value.isascii():
                    length = int(value)
                    if length > self._max_body:
                        self._length_of(value, command, pos)  # raises
                else:
                    if "\\" in value and escaping != V10:  # for the error message
                        value = unescape(value, escaping)
                    length = self._length_of(value, command, pos)
                nul = body_start + length
                if (
                    nul < end
                    and not buf[nul]
                    and length < _VIEW_COPY_MIN
                    and (command in BODY_COMMANDS or not length or not self.strict)
                ):
                    # The whole frame is here, as it mostly is: done in one go.
                    chunk = self._chunk  # the buffer's bytes, or b""
                    body = chunk[body_start:nul] if chunk else bytes(buf[body_start:nul])
                    nul += 1
                    self._pos = self._scan = nul
                    self.drained = nul == end
                    return ReceivedFrame(command, text, escaping, body)
            elif body_start < end and not buf[body_start]:
                # No body and no content-length, as a RECEIPT mostly comes: done in one
                # go too (what _read_body would find: an empty body, its NUL).
                self._pos = self._scan = body_start + 1
                self.drained = body_start + 1 == end
                return ReceivedFrame(command, text, escaping, b"")
            self._frame = ReceivedFrame(command, text, escaping, b"")
            self._length = length
            self._body_start = self._scan = body_start
            return self._read_body()
        except ProtocolError as exc:
            self._error = exc
            raise

    def _fail(self, message: str, at: int, *, too_large: bool = False) -> RemoteProtocolError:
        where = f" (at byte {self._offset + at} of the stream)"
        cls = FrameTooLarge if too_large else RemoteProtocolError
        return cls(message + where)

    def _check_block_size(self, pos: int, stop: int) -> None:
        """Check a complete header block that may cross a limit."""
        limits = self._limits
        size = stop - pos
        # Size checks come first and work on bytes. A block that crosses a limit is
        # checked line by line, as one arriving in pieces is: the first problem in the
        # stream wins, so the error does not depend on how the bytes were cut.
        if size > limits.max_header_block or (
            size > 2 * limits.max_headers  # else it cannot hold too many lines
            and self._buf.count(b"\n", pos, stop) > limits.max_headers
        ):
            self._check_lines(stop + 1, complete=True)
            raise self._fail(
                f"header block over the limit of {limits.max_header_block} bytes or "
                f"{limits.max_headers} headers",
                pos,
                too_large=True,
            )
        if size > limits.max_header_line:  # else no line can be too long
            self._check_lines(stop + 1, complete=True)

    def _read_lines(self, text: str, pos: int) -> None:
        """Parse a header block line by line: the one with CRs, colons in values,
        escapes to refuse or to keep, or a problem to report."""
        lines = text.split("\n")
        command = lines[0]
        # Most peers end lines with LF alone: CRs are looked for only if there are any.
        has_cr = "\r" in text
        if has_cr and command.endswith("\r"):
            command = command[:-1]
        if command not in COMMANDS:
            raise self._fail(f"unknown command {shown(command)}", pos)
        raw = command in UNESCAPED_COMMANDS
        version = self._version
        del lines[0]
        # "EOL = [CR] LF" (1.2). STOMP 1.1 ends lines with LF only and lets a value
        # hold a CR, so it keeps one. 1.0 says LF too, but a 1.0 value cannot carry
        # a CR reliably, and a 1.0 parser is what reads an ERROR that arrives before
        # CONNECTED names the version: strip it there, as for CONNECT/CONNECTED.
        if has_cr and (raw or version != V11):
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        unescaping = not raw and version != V10
        strict = self.strict
        # Header lines repeat from frame to frame (destination, subscription,
        # content-type, ...): the pair made for a recent line is shared rather than
        # made again, which saves the work and the garbage collector's time.
        known = self._known_pairs
        headers: list[tuple[str, str]] = []
        for line in lines:
            pair = known.get(line)
            if pair is None:
                name, colon, value = line.partition(":")
                if not name or not colon:
                    what = "with an empty name" if colon else "without a colon"
                    raise self._fail(f"header line {what}: {shown(line)} in {command}", pos)
                if "\\" in line:
                    # Not kept: what it means depends on the version and the command.
                    if unescaping:
                        try:
                            if "\\" in name:
                                name = unescape(name, version, strict=strict)
                            value = unescape(value, version, strict=strict)
                        except ProtocolError as exc:
                            raise self._fail(f"{exc} in {command}", pos) from None
                    pair = (name, value)
                else:
                    pair = (name, value)
                    if len(line) <= _KNOWN_LINE_MAX:
                        if len(known) >= _KNOWN_PAIRS:
                            known.clear()
                        known[line] = pair
            headers.append(pair)

        length = -1
        # No escape sequence stands for a letter or a dash: the name is in the text.
        if "content-length" in text:
            length = self._content_length(command, headers, pos)
        self._frame = Frame(command, tuple(headers))
        self._length = length

    def _skip_eols(self, pos: int, end: int) -> int:
        """Consume the EOLs at ``pos``: heart-beats, or padding after a frame's NUL.

        Returns where they end; a CR whose LF has not arrived yet stays unconsumed.
        """
        buf = self._buf
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
        return pos

    def _content_length(self, command: str, headers: list[tuple[str, str]], pos: int) -> int:
        """The value of the first ``content-length`` header, or -1 if there is none."""
        for key, value in headers:
            if key == "content-length":
                return self._length_of(value, command, pos)
        return -1

    def _length_of(self, value: str, command: str, pos: int) -> int:
        """The body length a ``content-length`` value gives, checked."""
        # ASCII digits only: str.isdigit() alone accepts other scripts' digits.
        if not (value.isascii() and value.isdigit()):
            raise self._fail(f"invalid content-length {shown(value)} in {command}", pos)
        if len(value) <= 18:
            length = int(value)
        else:
            # Measured before int(): a long run of digits is both too large and beyond
            # what int() converts (sys.get_int_max_str_digits).
            digits = value.lstrip("0")
            length = int(digits or "0") if len(digits) <= 18 else self.limits.max_body + 1
        if length > self.limits.max_body:
            raise self._fail(
                f"content-length {shown(value)} is over the body limit of {self.limits.max_body}",
                pos,
                too_large=True,
            )
        return length

    def _line_too_long(self, start: int) -> RemoteProtocolError:
        limit = self.limits.max_header_line
        return self._fail(f"header line over the limit of {limit} bytes", start, too_large=True)

    def _check_partial_header(self, scan: int, end: int) -> None:
        """Check a header block that is not complete yet, as far as it has arrived."""
        self._check_lines(end, complete=False)
        # Resume one byte back: the "\n" of a "\n\n" or "\n\r\n" may already be here.
        self._scan = max(self._pos, end - 2)

    def _check_lines(self, end: int, *, complete: bool) -> None:
        """Check the header block's lines that end before ``end``, in stream order.

        What can be judged of a line alone is judged as soon as its LF is here: its
        length, the block's size and line count so far, and that the first line is a
        command and every other one has a colon after a name. Garbage is refused within
        a line, not after a whole block of it. Unless ``complete``, the line still
        arriving is checked for what it already crossed. Raises the first problem.
        """
        buf = self._buf
        limits = self.limits
        limit = limits.max_header_line
        last = self._pos + limits.max_header_block  # the last LF may stand here
        line_start = self._line_start
        lines = self._lines
        newline = buf.find(b"\n", line_start, end)
        while newline >= 0:
            length = newline - line_start
            if length > limit and (length > limit + 1 or buf[newline - 1] != 13):
                raise self._line_too_long(line_start)
            if newline > last:
                raise self._block_too_large()
            lines += 1
            if lines > limits.max_headers + 1:
                raise self._fail(
                    f"more than the limit of {limits.max_headers} headers",
                    self._pos,
                    too_large=True,
                )
            self._check_line(line_start, newline, lines == 1)
            line_start = newline + 1
            newline = buf.find(b"\n", line_start, end)
        if not complete:
            # The line still arriving may end in the CR of its CRLF: allow one byte for it.
            length = end - line_start
            if length > limit and (length > limit + 1 or buf[end - 1] != 13):
                raise self._line_too_long(line_start)
            # Its LF will stand at ``end`` or later (a lone CR may be the blank line's).
            if length and end > last and not (length == 1 and buf[line_start] == 13):
                raise self._block_too_large()
        self._line_start = line_start
        self._lines = lines

    def _check_line(self, start: int, newline: int, first: bool) -> None:
        """Refuse a command line that is no command, a header line without a name."""
        buf = self._buf
        if first:
            line = bytes(buf[start:newline])
            if line.endswith(b"\r"):
                line = line[:-1]
            command = line.decode("utf-8", "replace")
            if command not in COMMANDS:
                raise self._fail(f"unknown command {shown(command)}", self._pos)
        elif buf.find(b":", start, newline) <= start:
            text = bytes(buf[start:newline]).decode("utf-8", "replace")
            what = "with an empty name" if text.startswith(":") else "without a colon"
            raise self._fail(f"header line {what}: {shown(text)}", self._pos)

    def _block_too_large(self) -> RemoteProtocolError:
        limit = self.limits.max_header_block
        return self._fail(
            f"header block over the limit of {limit} bytes", self._pos, too_large=True
        )

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
                    f"{self._frame.command} body of content-length {length} is not followed by NUL",
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
        frame = self._frame
        command = frame.command
        if command not in BODY_COMMANDS and length and self.strict:
            raise self._fail(f"{command} frame must not have a body", start)
        if length < _VIEW_COPY_MIN:
            body = bytes(buf[start:nul])
        else:
            # One copy through a view instead of two (a bytearray slice, then bytes):
            # worth the view's own cost for a large body only.
            with memoryview(buf) as view:
                body = view[start:nul].tobytes()
        frame.body = body
        self._frame = _NO_FRAME
        self._pos = self._scan = nul + 1
        self._body_start = -1
        self.drained = nul + 1 == len(buf)
        return frame

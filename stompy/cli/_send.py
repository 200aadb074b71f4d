"""``stompy send``: one message, or one per line, each confirmed by a receipt."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final, TextIO

from stompy import FrameLimits
from stompy.cli._connecting import connection
from stompy.cli._output import binary, isatty
from stompy.cli._status import EXIT_OK, EXIT_USAGE, CommandError
from stompy.errors import ServerError

__all__ = ("DEFAULT_MAX_BODY", "Progress", "run_send")

#: The largest body ``stompy send`` reads by default (``--max-body``): what stompy's
#: broker takes (``FrameLimits.max_body``), and more than RabbitMQ's default message size
#: (16 MiB in 4.x). Standard input or a file is read into memory, a message at a time:
#: without a bound, a pipe that never ends (``yes |``) or a file of gigabytes would take
#: all of it before the broker could refuse the frame.
DEFAULT_MAX_BODY: Final = FrameLimits().max_body


class Progress:
    """A one-line progress report on a terminal: ``[=====>    ]  52%  1,024 sent``.

    Draws at most ten times a second, and only when ``stream`` is a terminal; with a
    ``total`` (bytes) it shows a bar, without one a running count.
    """

    def __init__(self, stream: TextIO, total: int | None = None) -> None:
        self.stream = stream
        self.total = total
        self.enabled = isatty(stream)
        self._last = 0.0
        self._drawn = False

    def update(self, count: int, done: int = 0, *, force: bool = False) -> None:
        """Show ``count`` messages sent, ``done`` bytes of ``total`` consumed."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        width = shutil.get_terminal_size((80, 24)).columns
        label = f"{count:,} sent"
        if self.total:
            fraction = min(1.0, done / self.total)
            bar_width = max(10, min(40, width - len(label) - 10))
            filled = int(fraction * bar_width)
            arrow = ">" if filled < bar_width else ""
            bar = ("=" * filled + arrow).ljust(bar_width)
            line = f"[{bar}] {fraction:4.0%}  {label}"
        else:
            line = label
        self.stream.write("\r" + line[: width - 1] + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line, so the final summary starts on a clean one."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def _open_body(body: str) -> tuple[BinaryIO | None, bytes | str, int | None]:
    """``(stream, literal, size)``: a stream for ``-`` and ``@FILE``, else the literal text."""
    if body == "-":
        return binary(sys.stdin), b"", None
    if body.startswith("@") and len(body) > 1:
        path = Path(body[1:])
        try:
            stream = path.open("rb")
            status = os.fstat(stream.fileno())
            # A FIFO's or a device's size (@/dev/stdin) says nothing of what it holds.
            return stream, b"", status.st_size if stat.S_ISREG(status.st_mode) else None
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not body.isascii():
        try:
            body.encode("utf-8")
        except UnicodeEncodeError:
            # Bytes that are not UTF-8 (a Latin-1 terminal's), which Python took as lone
            # surrogates: sent as they were given, as stdin's would be, without a charset.
            return None, os.fsencode(body), None
    return None, body, None


def _charset(content_type: str) -> str | None:
    """The charset a content type names, if it names one."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def _in_charset(literal: bytes | str, content_type: str | None) -> bytes | str:
    """The BODY argument as sent: typed as text, it is written in the charset the
    content type names (a str is sent as UTF-8, which the library refuses to label
    otherwise); without one, as it is (a str then goes as UTF-8, labelled so)."""
    charset = _charset(content_type) if content_type and isinstance(literal, str) else None
    if charset is None:
        return literal
    assert isinstance(literal, str)
    try:
        return literal.encode(charset)
    except LookupError:
        raise CommandError(
            f"the content type names the charset {charset!r}, which Python does not know",
            EXIT_USAGE,
        ) from None
    except UnicodeEncodeError as exc:
        raise CommandError(
            f"the body cannot be written in {charset} ({exc.reason}): give its bytes with "
            "- (standard input) or @FILE, or name another charset",
            EXIT_USAGE,
        ) from None


def _too_large(what: str, limit: int) -> CommandError:
    """The error for a body over ``--max-body``, read no further than the limit."""
    return CommandError(
        f"{what} is over --max-body ({limit:,} bytes); nothing of it was sent: give a "
        "larger --max-body (the broker must take it too), or --lines for a message per line"
    )


def _read_body(stream: BinaryIO, size: int | None, limit: int) -> bytes:
    """The whole of ``stream``, at most ``limit`` bytes: a file's size is known before
    it is read, a pipe's only once one byte more than the limit was read."""
    what = "the body" if size is None else f"the file ({size:,} bytes)"
    if size is not None and size > limit:
        raise _too_large(what, limit)
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise _too_large(what, limit)
    return body


def _lines(stream: BinaryIO, limit: int) -> Iterator[tuple[bytes, int]]:
    """Each line without its line ending, with the bytes it took; a line over ``limit``
    bytes is an error once ``limit`` and two bytes of it were read (``\\r\\n`` ends it)."""
    number = 0
    while raw := stream.readline(limit + 2):
        number += 1
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > limit:
            raise _too_large(f"line {number:,}", limit)
        yield line, len(raw)


def run_send(args: argparse.Namespace) -> int:
    """Send the body (or each of its lines); the exit status."""
    headers = dict(args.extra_headers)
    # The broker's ERROR frames: one that refused a message sent without a receipt
    # arrives after the send returned. The end of the block raises it, but with
    # --reconnect one that came before the close was followed by a reconnect, which
    # no call raises: the command fails all the same.
    refused: list[ServerError] = []
    conn = connection(args, on_error=refused.append)
    stream, literal, size = _open_body(args.body)
    literal = _in_charset(literal, args.content_type or headers.get("content-type"))
    send = functools.partial(
        conn.send,
        args.destination,
        headers=headers,
        content_type=args.content_type,
        receipt=args.receipt,
    )
    stdin = binary(sys.stdin)
    if stream is stdin and isatty(sys.stdin):
        print("stompy send: reading from the terminal; end with Ctrl-D", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        if stream is not None and stream is not stdin:
            stack.enter_context(stream)
        limit = args.max_body
        if not args.lines:
            if stream is None:
                body = literal
                if len(literal.encode() if isinstance(literal, str) else literal) > limit:
                    raise _too_large("the body", limit)
            else:
                body = _read_body(stream, size, limit)
            with conn:
                send(body)
            _check_refused(refused)
            return EXIT_OK
        if stream is None:
            text = literal.encode() if isinstance(literal, str) else literal
            stream, size = io.BytesIO(text), len(text)
        lines = _lines(stream, limit)
        progress = Progress(sys.stderr, size)
        sent = 0
        try:
            with conn:
                done = 0
                for line, taken in lines:
                    send(line)
                    sent += 1
                    done += taken
                    progress.update(sent, done)
                progress.update(sent, done, force=True)
        finally:
            progress.close()
            noun = "message" if sent == 1 else "messages"
            confirmed = "confirmed" if args.receipt else "sent"
            print(f"{sent:,} {noun} {confirmed}", file=sys.stderr)
        _check_refused(refused)
    return EXIT_OK


def _check_refused(refused: list[ServerError]) -> None:
    """Raise the broker's first ERROR, if it sent one: then a message sent without a
    receipt may not have been taken (a full queue, a destination not allowed), and
    the exit status must not say that all went well."""
    if refused:
        raise refused[0]

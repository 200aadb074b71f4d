"""Standard streams as the commands use them: bytes in and out, and a stdout on which
a message counts as printed only once the next command in the pipeline read it."""

from __future__ import annotations

import array
import errno
import os
import select
import stat
import time
from typing import IO, Any, BinaryIO

__all__ = ("Stdout", "binary", "isatty")


def isatty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def binary(stream: IO[Any]) -> BinaryIO:
    """The bytes beneath a text stream (``sys.stdin``), or the stream itself."""
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else stream  # type: ignore[return-value]


class Stdout:
    """Standard output as ``subscribe`` writes it: a message counts as printed once it
    was written, flushed and, when stdout is a pipe, taken by the reader.

    The last part is what ``| head -3`` needs: a reader that reads a block of lines,
    prints three and exits would otherwise take (and drop) messages that were acked
    as "printed" because they sat in the pipe. So a message goes into the pipe only
    once the one before it was read (the pipe's unread byte count, ``FIONREAD``, is
    0); a reader that left (the pipe's write end polls as an error) is a
    :class:`BrokenPipeError`, as a write would be.
    """

    def __init__(self, stream: IO[Any]) -> None:
        self._out = binary(stream)
        self._fd = -1
        try:
            fd = stream.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and _unread(fd) >= 0:
                self._fd = fd
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation too
            pass  # not a file (tests), or a system without FIONREAD on pipes

    def write(self, data: bytes) -> None:
        """Write ``data`` and return once the reader has it (see the class)."""
        self._out.write(data)
        self._out.flush()
        if self._fd < 0:
            return
        poller = select.poll()
        poller.register(self._fd, 0)  # POLLERR and POLLHUP are always reported
        turns = 0
        while _unread(self._fd) > 0:
            if poller.poll(0):
                raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away")
            # A reader that keeps up has it within a few scheduler turns; one that
            # does not is waited for in sleeps growing to 20 ms.
            turns += 1
            if turns <= 20:
                os.sched_yield()
            else:
                time.sleep(min(0.00005 * 2 ** min(turns - 20, 9), 0.02))


def _unread(fd: int) -> int:
    """Bytes written to pipe ``fd`` and not read yet (-1 where that cannot be known)."""
    try:
        import fcntl
        import termios

        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except (ImportError, OSError):
        return -1
    return count[0]

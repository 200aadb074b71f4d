"""The exit statuses of ``stompy``, and the error that carries one."""

from __future__ import annotations

from typing import Final

__all__ = (
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "CommandError",
)

EXIT_OK: Final = 0
#: It did not work: no connection, a refused login, a timeout...
EXIT_FAILURE: Final = 1
#: A bad option or argument, said in one line.
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED: Final = 143  # 128 + SIGTERM
EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE: the reader of stdout went away


class CommandError(Exception):
    """A failure reported as one line on stderr with ``status`` as the exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status

"""What becomes of an exception from the application's ``on_message`` callback.

Nothing can catch it: the callback runs in a thread or task of the connection's own, on
behalf of nobody's call. Python has a path for such an exception, the one it uses for
an error in a ``__del__`` or a callback of a finalizer: :func:`sys.unraisablehook`,
which prints "Exception ignored in: ..." and the traceback to stderr by default (pytest
turns it into a warning, an application may install its own). Every client flavour
reports a failed callback there, and logs it at ERROR on the ``stompy`` logger too, so
that a program which never configured logging still sees it. An application that
handles failures itself sets the ``on_callback_error`` hook, which then replaces this
report (and is reported the same way if it raises itself). A lifecycle hook that raises
(``on_connected``...) is reported the same way too.

Nothing here answers the message: see "A failing callback" in ``docs/acks.md``.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Final

__all__ = ("report_callback_error",)

log: Final = logging.getLogger("stompy")


class _Unraisable:
    """The fields of ``sys.UnraisableHookArgs``, for a hook the application or pytest
    installed (the interpreter's own hook takes only its own type, which Python code
    cannot make: :func:`report_callback_error` prints what it would)."""

    __slots__ = ("err_msg", "exc_traceback", "exc_type", "exc_value", "object")

    def __init__(self, error: BaseException, err_msg: str, about: object) -> None:
        self.exc_type = type(error)
        self.exc_value = error
        self.exc_traceback = error.__traceback__
        self.err_msg = err_msg
        self.object = about


def report_callback_error(error: BaseException, what: str, about: object) -> None:
    """Report ``error``, raised by ``what`` (``"the on_message callback of <...>"``)
    while handling ``about`` (the message): logged at ERROR on the ``stompy`` logger,
    and passed to :func:`sys.unraisablehook`. Raises nothing."""
    log.error("%s failed", what, exc_info=error)
    err_msg = f"Exception ignored in {what}, called with"
    hook = sys.unraisablehook
    try:
        if hook is not sys.__unraisablehook__:
            hook(_Unraisable(error, err_msg, about))  # type: ignore[arg-type]
            return
        stderr = sys.stderr
        if stderr is None:  # pythonw, a daemon: nowhere to print, as for Python itself
            return
        stderr.write(f"{err_msg}: {about!r}\n")
        traceback.print_exception(error, file=stderr)
        stderr.flush()
    except Exception:  # a broken hook or stderr must not end the subscription
        log.exception("reporting the failure of %s failed", what)

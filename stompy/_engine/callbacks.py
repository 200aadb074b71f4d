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

Calling the application's functions is written once here for both clients: each call
is a generator (:func:`handle_message`, :func:`call_hook`) that calls the function and,
when what it returned is awaitable (a coroutine function's), yields it; a client runs
it with :func:`call_plainly` (the blocking one: an awaitable cannot be awaited there,
it is closed with a WARNING) or :func:`call_awaiting` (the anyio one: awaited, and what
it raises thrown back in), so the rules of what is reported where cannot drift apart.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from stompy._engine.state import CLOSED

if TYPE_CHECKING:
    from stompy._engine.engine import Engine
    from stompy._engine.notices import Notice

__all__ = (
    "Calling",
    "call_awaiting",
    "call_hook",
    "call_plainly",
    "handle_message",
    "hooks_over",
    "in_hook",
    "report_callback_error",
)

#: A call of the application's function: yields what it returned when awaitable,
#: and is sent nothing back (or thrown what the awaitable raised).
Calling = Generator[Awaitable[object], None, None]

#: The context of a call that nothing traces.
UNTRACED: Final = contextlib.nullcontext()

log: Final = logging.getLogger("stompy")

#: Whether the current thread or task is in a lifecycle hook's call (see :func:`in_hook`).
_IN_HOOK: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "stompy_in_hook", default=False
)


def in_hook() -> bool:
    """Whether the caller runs inside a lifecycle hook (``on_error``,
    ``on_disconnected``...): a ``close()`` there does not raise the broker's ERROR,
    which the hook was handed."""
    return _IN_HOOK.get()


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


def handle_message(
    callback: Callable[[Any], object],
    message: object,
    subscription: object,
    on_error: Callable[[Exception, Any], object] | None,
    around: contextlib.AbstractContextManager[object] = UNTRACED,
) -> Calling:
    """``callback(message)``, ``subscription``'s ``on_message``, inside ``around`` (its
    ``process`` span when traced). What it raises goes to ``on_error`` (the
    ``on_callback_error`` hook), or without one is reported (:func:`report_callback_error`);
    what the hook raises is reported too. Raises nothing: the next message comes."""
    try:
        with around:
            result = callback(message)
            if inspect.isawaitable(result):
                yield result
    except Exception as exc:
        if on_error is None:
            report_callback_error(exc, f"the on_message callback of {subscription!r}", message)
            return
        try:
            result = on_error(exc, message)
            if inspect.isawaitable(result):
                yield result
        except Exception as hook_exc:
            what = f"the on_callback_error hook of {subscription!r}"
            report_callback_error(hook_exc, what, message)


def call_hook(notice: Notice) -> Calling:
    """The lifecycle hook call ``notice``; what it raises is reported, as an
    ``on_message`` callback's is (:func:`report_callback_error`). It runs
    :func:`in_hook`: the hooks' own thread or task, which runs nothing else, is marked
    for good (a reset could come from another context, as a generator closed by the
    garbage collector)."""
    _IN_HOOK.set(True)
    try:
        result = notice.hook(notice.argument)
        if inspect.isawaitable(result):
            yield result
    except Exception as exc:
        report_callback_error(exc, f"the {notice.what} hook", notice.argument)


def hooks_over(engine: Engine[Any]) -> bool:
    """Whether the hooks' thread or task may end: the engine is over and every hook
    call it queued was made (none is queued once it is closed)."""
    return engine.status is CLOSED and not engine.notices


def call_plainly(calling: Calling, what: str, about: object = None, who: str | None = None) -> None:
    """Run ``calling`` where nothing can be awaited (the blocking client, which calls
    plain functions): an awaitable it returns is closed, with a WARNING naming ``what``.

    What ``calling`` lets through of the function's own errors, a ``SystemExit`` or a
    ``KeyboardInterrupt`` (``calling`` handles an ``Exception``), is reported as an
    ``Exception`` is (:func:`report_callback_error`: ``who``, the ``what`` hook by
    default, called with ``about``), and the next call comes. The blocking client calls
    in a thread of its own, which cannot end the program: ended by it, the thread would
    leave its subscription's messages undelivered (or the hooks uncalled) without a word.
    The anyio client's tasks hand it on instead, which ends the ``async with`` block."""
    try:
        for result in calling:
            if inspect.iscoroutine(result):
                result.close()
            # A function that passed subscribe()'s check, an object whose __call__ is
            # async, or a lambda calling an async def: what it was for did not happen
            # (an on_message's message is gone, with ack="auto"). Said as its errors are,
            # not in a WARNING that a program without logging never sees.
            where = f"the {what} hook" if who is None else who
            report_callback_error(
                TypeError(
                    f"it returned {type(result).__name__} {result!r}, which a Connection "
                    "does not await: it did not run (use def, or AsyncConnection)"
                ),
                where,
                about,
            )
    except Exception:
        raise  # not the function's: ``calling`` handled those
    except BaseException as exc:
        where = f"the {what} hook" if who is None else who
        kind = type(exc).__name__
        note = f"in a thread of the Connection, where {kind} cannot end the program"
        report_callback_error(exc, f"{where} ({note})", about)


async def call_awaiting(calling: Calling) -> None:
    """Run ``calling``, awaiting what it yields (the anyio client)."""
    try:
        awaitable = next(calling)
        while True:
            try:
                await awaitable
            except Exception as exc:
                awaitable = calling.throw(exc)
            else:
                awaitable = calling.send(None)
    except StopIteration:
        pass

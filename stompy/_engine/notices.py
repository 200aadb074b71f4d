"""Lifecycle hook calls waiting to be made: what one is, and how many may wait.

What the application asked to hear of (a connection made, lost, made again; an ERROR
frame; a MESSAGE for no known subscription) the engine queues, in order, as
:class:`Notice` s in :attr:`Engine.notices` (:func:`queue_notice`); the transport
makes the calls outside its own work (a thread of their own, a task), so a slow hook
never stalls the connection. When to call which hook is the engine's decision.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final

__all__ = ("MAX_NOTICES", "Notice", "queue_notice")

log: Final = logging.getLogger("stompy")

#: Hook calls waiting for slow hooks at most: beyond, a call is dropped with a WARNING
#: (only ``on_unrouted``, one per message, can come that fast).
MAX_NOTICES: Final = 10_000


class Notice:
    """One call of a lifecycle hook, queued by the engine for the transport to make:
    ``hook(argument)``. ``what`` names the hook (``"on_connected"``...)."""

    __slots__ = ("argument", "hook", "what")

    def __init__(self, what: str, hook: Callable[[Any], object], argument: object) -> None:
        self.what = what
        self.hook = hook
        self.argument = argument

    def __repr__(self) -> str:
        return f"<Notice {self.what}({self.argument!r})>"


def queue_notice(
    notices: deque[Notice], what: str, hook: Callable[[Any], object] | None, argument: object
) -> None:
    """Queue ``hook(argument)`` in ``notices``, if the user set ``hook`` (the option named
    ``what``). Beyond :data:`MAX_NOTICES` waiting calls it is dropped with a WARNING."""
    if hook is None:
        return
    if len(notices) >= MAX_NOTICES:
        log.warning(
            "%s(%r) not called: %d hook calls already wait for the hooks to return",
            what,
            argument,
            len(notices),
        )
        return
    notices.append(Notice(what, hook, argument))

"""A wake-up that tasks can be given again and again, for the anyio side.

An :class:`anyio.Event` is set once for good; the tasks of a connection are woken
many times (there is more to write, the status changed, hooks are due). Each such
wake-up was an event replaced by a fresh one at the right moment: :class:`Signal`
is that idiom, in one place.
"""

from __future__ import annotations

import anyio

__all__ = ("Signal",)


class Signal:
    """An event renewed as it is used: :meth:`set` is kept until a :meth:`take`;
    :meth:`pulse` wakes only the tasks waiting at that moment."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        """Wake the tasks waiting now, and those that wait next, until a :meth:`take`."""
        self._event.set()

    def pulse(self) -> None:
        """Wake the tasks waiting now; those that wait afterwards wait for the next."""
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        """Until the signal is set (at once if it is)."""
        await self._event.wait()

    async def take(self) -> None:
        """Until the signal is set; then clear it, for the next :meth:`set`. Meant for
        one task: the one that serves what the signal announces."""
        await self._event.wait()
        self._event = anyio.Event()

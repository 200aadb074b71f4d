"""The RECEIPTs that calls wait for, and which of them came.

A call that asks for a receipt (a send, a subscribe, the goodbye's DISCONNECT) tells
:class:`Receipts` to :meth:`~Receipts.expect` it before its frame can be answered; the
engine's pump records each RECEIPT that comes (:meth:`~Receipts.came`), and the call,
woken, asks the engine how its wait stands
(:meth:`~stompy._engine.engine.Engine.receipt_state`) and :meth:`~Receipts.forget` s
it when done. A RECEIPT nobody waits for is not kept: the table stays as small as the
waits.

The DISCONNECT's receipt settles every wait still open (:meth:`~Receipts.expect_last`):
"A RECEIPT frame is an acknowledgment that the corresponding client frame has been
processed by the server. Since STOMP is stream based, the receipt is also a cumulative
acknowledgment that all the previous frames have been received by the server. [...] If
the client disconnects, previously received frames SHOULD continue to get processed by
the server" (STOMP 1.2, RECEIPT). Nothing can be sent after the DISCONNECT, so every
frame whose receipt is still awaited went before it: it arrived, and is processed. A
call that raced ``close()`` then returns as confirmed, rather than report a frame lost
that the broker has.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ("Receipts",)


class Receipts:
    """The receipt ids somebody waits for, and which of them arrived."""

    __slots__ = ("_arrived", "_expected", "_last")

    def __init__(self) -> None:
        self._expected: set[str] = set()
        self._arrived: set[str] = set()
        self._last: str | None = None  # the DISCONNECT's receipt id, once it is sent

    def __contains__(self, rid: object) -> bool:
        """Whether somebody waits for the receipt ``rid``."""
        return rid in self._expected

    def __len__(self) -> int:
        return len(self._expected)

    def expect(self, rid: str) -> None:
        """Keep the RECEIPT ``rid`` when it comes: somebody will wait for it."""
        self._expected.add(rid)

    def expect_all(self, rids: Iterable[str]) -> None:
        """Keep each of ``rids`` when it comes."""
        self._expected.update(rids)

    def expect_last(self, rid: str) -> None:
        """Keep the RECEIPT ``rid`` of the DISCONNECT, after which nothing is sent:
        when it comes, every receipt still awaited counts as come."""
        self._expected.add(rid)
        self._last = rid

    def came(self, rid: str) -> None:
        """The RECEIPT ``rid`` came; kept if somebody waits for it (the DISCONNECT's:
        with every receipt still awaited)."""
        if rid in self._expected:
            if rid == self._last:
                self._arrived.update(self._expected)
            else:
                self._arrived.add(rid)

    def arrived(self, rid: str) -> bool:
        """Whether the receipt ``rid`` that somebody waits for came."""
        return rid in self._arrived

    def forget(self, rid: str) -> None:
        """The wait for ``rid`` is over, however it ended."""
        self._expected.discard(rid)
        self._arrived.discard(rid)

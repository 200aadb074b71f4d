"""A COMMIT whose receipt is lost with its connection: the outcome is unknown, and the
error says so, in the blocking, asyncio and trio clients alike.

The broker may have committed the transaction before the connection went, or not
("Any transaction which has not been committed is implicitly aborted if the client
sends a DISCONNECT frame or if the TCP connection fails for any reason", STOMP 1.2,
BEGIN): the client cannot tell, so :class:`~stompy.errors.CommitOutcomeUnknown` (a
``TransactionLost``, as this case raised before, and a ``ConnectionLost``, as a send
whose receipt was lost) says it is unknown, where a plain ``TransactionLost`` (a
transaction whose connection went before its COMMIT was sent) says it was aborted.
"""

from __future__ import annotations

import threading

import anyio
import pytest

import stompy
from stompy.errors import CommitOutcomeUnknown, ConnectionLost, StompError, TransactionLost
from tests.test_lenient import TIMEOUT, Peer, scripted

FLAVOURS = ["blocking", "asyncio", "trio"]
#: Reconnects once, quickly, to a server that never answers again.
POLICY = stompy.Reconnect(max_attempts=1, initial_delay=0.0, jitter=0.0)


def drops_at_commit(peer: Peer, committed: threading.Event) -> None:
    """Take the transaction's frames; at the COMMIT, close the connection unanswered."""
    peer.connected()
    for _ in range(100):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        if frame.command == "COMMIT":
            committed.set()
            return
    raise AssertionError("more than 100 frames")


def commit_on(flavour: str, url: str) -> StompError | None:
    """Open a transaction, send in it, commit; what the commit raised."""
    options: dict[str, object] = {
        "reconnect": POLICY,
        "connect_timeout": 1.0,
        "receipt_timeout": TIMEOUT,
    }
    if flavour == "blocking":
        with stompy.Connection(url, **options) as conn:  # type: ignore[arg-type]
            tx = conn.transaction()
            tx.send("/queue/ledger", "debit")
            try:
                tx.commit()
            except StompError as exc:
                return exc
            return None

    async def main() -> StompError | None:
        with anyio.fail_after(TIMEOUT * 2):
            async with stompy.AsyncConnection(url, **options) as conn:  # type: ignore[arg-type]
                tx = await conn.transaction()
                await tx.send("/queue/ledger", "debit")
                try:
                    await tx.commit()
                except StompError as exc:
                    return exc
                return None

    return anyio.run(main, backend=flavour)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_commit_whose_receipt_is_lost_says_the_outcome_is_unknown(flavour: str) -> None:
    committed = threading.Event()
    with scripted(lambda peer: drops_at_commit(peer, committed)) as url:
        outcome = commit_on(flavour, url)
    assert committed.is_set()
    assert isinstance(outcome, CommitOutcomeUnknown), outcome
    # Caught as before (TransactionLost), and as a loss whose outcome is unknown.
    assert isinstance(outcome, TransactionLost)
    assert isinstance(outcome, ConnectionLost)
    assert "unknown" in str(outcome), outcome
    assert "aborted" not in str(outcome), outcome

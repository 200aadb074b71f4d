"""A consumer with client acknowledgements and transactions: exactly one result per order.

Each order is handled in a transaction that holds two frames: the SEND of its result
and the ACK of the order. They take effect together at COMMIT, or not at all: when
handling fails, ABORT drops both, the order stays unacknowledged, and the consumer
tries it again in a fresh transaction.

    python examples/transactions.py                                   # embedded broker
    python examples/transactions.py stomp://guest:guest@localhost:61613   # a real one
"""

from __future__ import annotations

import contextlib
import sys
import uuid

import stompy
from stompy.testing import run_broker


class TransientFailure(Exception):
    """Something that may work on a second try (a busy database, say)."""


def handle(order: str, attempt: int) -> str:
    if order == "order-3" and attempt == 1:
        raise TransientFailure(f"{order}: the stock service timed out")
    return f"{order}: shipped"


def main(url: str) -> None:
    run = uuid.uuid4().hex[:8]
    orders, results = f"/queue/orders-{run}", f"/queue/results-{run}"

    with stompy.Connection(url) as conn:
        for n in range(1, 6):
            conn.send(orders, f"order-{n}", receipt=True)

        # client-individual: each ACK covers exactly one message.
        with conn.subscribe(orders, ack="client-individual") as sub:
            for _ in range(5):
                msg = sub.get(timeout=10.0)
                assert msg is not None, "the broker did not deliver"
                for attempt in (1, 2, 3):
                    try:
                        # Leaving the block commits (and waits for the broker's
                        # receipt); an exception aborts instead.
                        with conn.transaction() as tx:
                            tx.ack(msg)  # sent now, takes effect at COMMIT
                            tx.send(results, handle(msg.text, attempt))
                    except TransientFailure as exc:
                        print(f"aborted: {exc}; retrying")  # the ACK was dropped
                        continue
                    print(f"committed {msg.text} (attempt {attempt})")
                    break

        # Exactly one result per order, the retried one included.
        with conn.subscribe(results) as sub:
            got = []
            for _ in range(5):
                msg = sub.get(timeout=10.0)
                assert msg is not None, "a result is missing"
                got.append(msg.text)
            assert sub.get(timeout=0.2) is None, "a result arrived twice"
    print("results:", ", ".join(sorted(got)))


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        target = sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(run_broker()).url
        main(target)

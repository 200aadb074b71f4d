"""A consumer that survives its broker going away: client acks, reconnect, idempotence.

* Messages are sent ``persistent:true`` to a queue, so a real broker keeps them on
  disk across a restart.
* The consumer acknowledges each message after handling it (``client-individual``):
  whatever was delivered but not acknowledged when the connection broke is
  redelivered after it comes back.
* ``stompy.Reconnect`` reconnects with backoff and re-subscribes on its own; the
  ``for`` loop does not notice, except that a message may now come twice (the one
  in hand when the connection broke). Delivery is *at least once*, so handling is
  idempotent: each event carries an id, and a seen id is acknowledged and skipped.

With the embedded broker the example cuts every connection itself, halfway through
(``broker.drop_all_connections()``). Against a real broker, restart it while the
example runs with ``--slow``:

    python examples/durable_consumer.py                                    # embedded
    python examples/durable_consumer.py stomp://guest:guest@localhost:61613 --slow
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Callable

import stompy
from stompy.testing import run_broker

EVENTS = 10


def main(url: str, outage: Callable[[], object] | None = None, slow: bool = False) -> str:
    queue = f"/queue/events-{uuid.uuid4().hex[:8]}"
    with stompy.Connection(url) as producer:
        for n in range(EVENTS):
            producer.send(
                queue,
                f"event {n}",
                headers={"event-id": str(n), "persistent": "true"},
                receipt=True,
            )

    policy = stompy.Reconnect(initial_delay=0.1, max_delay=2.0, max_attempts=50)
    handled: set[str] = set()
    with (
        stompy.Connection(url, reconnect=policy, heartbeats=(2000, 2000)) as conn,
        conn.subscribe(queue, ack="client-individual") as sub,
    ):
        while len(handled) < EVENTS:
            msg = sub.get(timeout=30.0)
            assert msg is not None, "no message within 30 s"
            event = msg.headers["event-id"]
            if event in handled:
                print(f"skipped {msg.text!r}: already handled (redelivered={msg.redelivered})")
            else:
                handled.add(event)
                print(f"handled {msg.text!r}")
            msg.ack()  # after a reconnect, acking an old delivery does nothing
            if slow:
                time.sleep(1.0)
            if len(handled) == EVENTS // 2 and outage is not None:
                print("-- the broker drops every connection --")
                outage()
                outage = None
        # Messages taken before the outage but redelivered after it come again:
        # acknowledge them too, or they stay in the queue for the next consumer.
        while (msg := sub.get(timeout=0.5)) is not None:
            print(f"skipped {msg.text!r}: already handled (redelivered={msg.redelivered})")
            msg.ack()
    print(f"all {EVENTS} events handled, each exactly once")
    return queue


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("stompy.testing").setLevel(logging.WARNING)  # the broker's own log
    args = [a for a in sys.argv[1:] if a != "--slow"]
    if args:
        main(args[0], slow="--slow" in sys.argv)
    else:
        with run_broker() as broker:
            queue = main(broker.url, outage=broker.drop_all_connections)
            # Nothing left behind: every event was acknowledged on the live connection.
            broker.wait_until(lambda: not broker.connections)
            assert broker.queue_depth(queue) == broker.unacked_count(queue) == 0

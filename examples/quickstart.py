"""stompy in a minute: send, subscribe, acknowledge, use a transaction.

Runs against the in-process broker when no URL is given, so it needs no server:

    python examples/quickstart.py                                  # embedded broker
    python examples/quickstart.py stomp://guest:guest@localhost:61613   # a real one
"""

from __future__ import annotations

import contextlib
import sys
import uuid

import stompy
from stompy.testing import run_broker


def main(url: str) -> None:
    queue = f"/queue/quickstart-{uuid.uuid4().hex[:8]}"

    # One call: connect, send with a receipt, disconnect.
    stompy.send(url, queue, "hello from stompy.send")

    with stompy.Connection(url, heartbeats=(10_000, 10_000)) as conn:
        print(f"connected: STOMP {conn.version} to {conn.server or 'a broker'}")
        conn.send(queue, b"\x00binary bodies are fine", headers={"priority": "9"}, receipt=True)

        with conn.subscribe(queue, ack="client-individual") as sub:
            for _ in range(2):
                msg = sub.get(timeout=5.0)
                assert msg is not None, "the broker did not deliver"
                print(f"received {msg.body!r} from {msg.destination}")
                msg.ack()

            # Sends and acks in a transaction take effect together, at commit.
            with conn.transaction() as tx:
                tx.send(queue, "sent inside a transaction")
            msg = sub.get(timeout=5.0)
            assert msg is not None
            print(f"received {msg.text!r}")
            msg.ack()
    print("disconnected cleanly")


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        if len(sys.argv) > 1:
            target = sys.argv[1]
        else:
            target = stack.enter_context(run_broker()).url
            print(f"started the embedded broker at {target}")
        main(target)

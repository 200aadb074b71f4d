"""Request / reply over STOMP: ``reply-to``, ``correlation-id`` and a private reply queue.

The server answers every request on the destination named by its ``reply-to``
header, copying the ``correlation-id`` so the client can match answers to questions.
The client's reply queue is a queue with a unique name that only it reads.

Temporary queues differ between brokers (see docs/brokers.md):

* RabbitMQ: send with ``reply-to:/temp-queue/replies`` and do *not* subscribe (that is
  refused); the broker makes a private queue, rewrites ``reply-to`` for the server,
  and delivers replies on an implicit subscription whose id is ``/temp-queue/replies``.
* ActiveMQ: subscribe to ``/temp-queue/replies`` yourself; the broker rewrites
  ``reply-to`` to a ``/remote-temp-queue/...`` for the server.
* The embedded broker has no temporary queues: a unique ``/queue/`` name does the job,
  and works on every broker, which is what this example uses.

    python examples/request_reply.py                                  # embedded broker
    python examples/request_reply.py stomp://guest:guest@localhost:61613  # a real one
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid

import stompy
from stompy.testing import run_broker


def serve_requests(url: str, requests: str, ready: threading.Event, count: int) -> None:
    """The server: answer ``count`` requests, then stop."""
    with stompy.Connection(url) as conn, conn.subscribe(requests) as sub:
        ready.set()
        for _ in range(count):
            request = sub.get(timeout=10.0)
            if request is None:
                return
            answer = request.text[::-1]  # the service: reverse the text
            conn.send(
                request.headers["reply-to"],
                answer,
                headers={"correlation-id": request.headers["correlation-id"]},
            )


def main(url: str) -> None:
    requests = f"/queue/reverse-{uuid.uuid4().hex[:8]}"
    questions = ["stressed", "drawer", "stompy"]
    ready = threading.Event()
    server = threading.Thread(target=serve_requests, args=(url, requests, ready, len(questions)))
    server.start()
    assert ready.wait(10.0), "the server did not start"

    reply_queue = f"/queue/replies-{uuid.uuid4().hex}"  # only this client reads it
    with stompy.Connection(url) as conn, conn.subscribe(reply_queue) as replies:
        waiting = {}
        for text in questions:
            correlation = uuid.uuid4().hex
            waiting[correlation] = text
            conn.send(
                requests, text, headers={"reply-to": reply_queue, "correlation-id": correlation}
            )
        while waiting:  # replies may come in any order: match them by correlation id
            reply = replies.get(timeout=10.0)
            assert reply is not None, "no reply in time"
            question = waiting.pop(reply.headers["correlation-id"])
            print(f"{question!r} -> {reply.text!r}")
    server.join(timeout=10.0)


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        target = sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(run_broker()).url
        main(target)

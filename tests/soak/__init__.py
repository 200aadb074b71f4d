"""The soak run (issue 21): ``python -m tests.soak`` or ``nox -s soak``.

Theory of operation
-------------------
For each flavour (blocking, asyncio, trio) and each broker (the in-process one,
RabbitMQ, ActiveMQ), one run puts a :func:`stompy.testing.run_fault_proxy` in front of
the broker and, through it:

* producers (threads or tasks sharing one connection) send messages with a unique
  ``x-soak-id`` header and ``receipt=True``, persistent on the real brokers; an id is
  *confirmed* once a send of it returned without error; a send that raised is sent
  again, same id, until confirmed or the run ends;
* a consumer on its own connection subscribes with ``ack="client-individual"``, takes
  batches, records each id, then acks it;
* a fault thread breaks the proxy about every second (seeded: see ``--seed``).

Then the faults stop, the proxy heals, and the consumer drains until it has seen every
confirmed id (or the drain timeout). *Lost* is confirmed minus received and must be 0;
duplicates are allowed (at least once) and counted by why they came (a redelivery, a
send stompy repeated, a send the producer repeated after it raised). A send that raised
``ConnectionLost`` after ``send_timeout`` met an outage longer than it (docs/reconnect.md).
The three flavours meet the same faults (the seed and the broker pick them). The
in-process broker must answer no frame with an ERROR but a heart-beat timeout: no fault
alters a frame, so any other ERROR answered a frame a correct client never sends. Each
client call is timed and must stay within its bound (:meth:`Settings.bounds`): no hang
under any fault. Threads and file descriptors (and, for the async flavours, the loop's
tasks) are counted before and after each run, with everything closed; any growth is a
leak.
"""

from __future__ import annotations

from ._core import FAULTS, FLAVOURS, Result, Settings, Tally, details, table
from ._run import BROKERS, soak, soak_one

__all__ = (
    "BROKERS",
    "FAULTS",
    "FLAVOURS",
    "Result",
    "Settings",
    "Tally",
    "details",
    "soak",
    "soak_one",
    "table",
)

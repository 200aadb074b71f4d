"""The engine, for people who write their own transport (provisional API).

:class:`~stompy.protocol.ClientProtocol` knows one STOMP connection; the engine knows a client's
whole life above it: reconnects and the replay of subscriptions, where a received
message goes and when to stop reading, receipts, the ack-epoch rule, the goodbye, and
the calls that wait (a send with a receipt, a subscribe...) as generators of waits.
``Connection`` and ``AsyncConnection`` are two thin drivers of it; ``docs/sans-io.md``
shows how to write a third.
"""

from __future__ import annotations

from stompy._engine.calls import Call, Running, Steps, Wait, Waiting
from stompy._engine.connecting import Attempts, Handshake
from stompy._engine.engine import MAX_OUTGOING, Engine, Pumped
from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.notices import Notice
from stompy._engine.options import ClientOptions
from stompy._engine.state import ReceiptState, Status
from stompy._public import publish

__all__ = (
    "MAX_OUTGOING",
    "Attempts",
    "Call",
    "ClientOptions",
    "Engine",
    "Handshake",
    "Inbox",
    "MessageBase",
    "Notice",
    "Pumped",
    "ReceiptState",
    "Running",
    "Status",
    "Steps",
    "Wait",
    "Waiting",
)

# Documented, shown and pickled as this module's (stompy/_public.py).
publish(globals(), __all__, __name__)

#: The engine's name until "session" was left to STOMP's (the CONNECTED frame's
#: ``session``): kept for transports written against it; not in ``__all__``.
ClientSession = Engine

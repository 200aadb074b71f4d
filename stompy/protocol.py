"""The sans-IO core: STOMP frames in and out, and one connection's rules, without I/O.

For people who write their own transport or need the wire itself: :class:`FrameParser`
turns bytes into :class:`Frame`\\ s, :func:`encode` turns frames into bytes, and
:class:`ClientProtocol` keeps one client connection's state (version negotiation,
heart-beats, receipts, subscriptions) and reports what happened as the events of
:mod:`stompy.events`. No sockets, threads or clocks: time comes in as an argument.
``docs/sans-io.md`` shows how to drive it. Its size limits are :class:`stompy.FrameLimits`,
shared with the clients.
"""

from __future__ import annotations

from stompy._core.encoder import encode
from stompy._core.frames import VERSIONS, Frame
from stompy._core.parser import FrameParser
from stompy._core.protocol import ClientProtocol, State, SubscriptionInfo
from stompy._public import publish

__all__ = (
    "VERSIONS",
    "ClientProtocol",
    "Frame",
    "FrameParser",
    "State",
    "SubscriptionInfo",
    "encode",
)

# Documented, shown and pickled as this module's (stompy/_public.py).
publish(globals(), __all__, __name__)

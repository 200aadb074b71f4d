"""stompy: a STOMP 1.0 / 1.1 / 1.2 client for Python.

The protocol lives in a sans-IO core (:class:`FrameParser`, :func:`encode`,
:class:`ClientProtocol`, whose events are in :mod:`stompy.events`); thin transports
run it over blocking sockets (:class:`Connection`) and anyio (:class:`AsyncConnection`).
"""

from __future__ import annotations

import logging

from stompy import errors, events
from stompy._client.asynchronous import (
    AsyncConnection,
    AsyncMessage,
    AsyncSubscription,
    AsyncTransaction,
    send_async,
)
from stompy._client.blocking import Connection, Message, Subscription, Transaction, send
from stompy._compiled import COMPILED
from stompy._core.codec import FrameLimits, FrameParser, encode
from stompy._core.events import AckMode
from stompy._core.frames import VERSIONS, Frame
from stompy._core.protocol import ClientProtocol, State, SubscriptionInfo
from stompy._engine.keywords import ConnectionOptions
from stompy._engine.options import Outgoing, Overflow, Reconnect
from stompy._engine.urls import Endpoint, parse_url
from stompy._public import publish
from stompy._version import __version__ as __version__
from stompy.errors import (
    AckLost,
    BodyNotText,
    ConfigurationError,
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    MessageTooLarge,
    NetworkError,
    NoReplyTo,
    ProtocolError,
    ReceiptTimeout,
    RemoteProtocolError,
    RequestTimeout,
    ServerError,
    StompError,
    StompTimeout,
    SubscriptionOverflow,
    TooLargeForServer,
    TransactionLost,
    WebSocketClosed,
)

# A library logs only where the application configured logging: without this handler,
# logging's last resort would print WARNINGs (a lost connection) to stderr.
logging.getLogger("stompy").addHandler(logging.NullHandler())

__all__ = (
    "COMPILED",
    "VERSIONS",
    "AckLost",
    "AckMode",
    "AsyncConnection",
    "AsyncMessage",
    "AsyncSubscription",
    "AsyncTransaction",
    "BodyNotText",
    "ClientProtocol",
    "ConfigurationError",
    "ConnectFailed",
    "Connection",
    "ConnectionLost",
    "ConnectionOptions",
    "Endpoint",
    "Frame",
    "FrameLimits",
    "FrameParser",
    "FrameTooLarge",
    "HeartbeatTimeout",
    "LocalProtocolError",
    "Message",
    "MessageTooLarge",
    "NetworkError",
    "NoReplyTo",
    "Outgoing",
    "Overflow",
    "ProtocolError",
    "ReceiptTimeout",
    "Reconnect",
    "RemoteProtocolError",
    "RequestTimeout",
    "ServerError",
    "State",
    "StompError",
    "StompTimeout",
    "Subscription",
    "SubscriptionInfo",
    "SubscriptionOverflow",
    "TooLargeForServer",
    "Transaction",
    "TransactionLost",
    "WebSocketClosed",
    "encode",
    "errors",
    "events",
    "parse_url",
    "send",
    "send_async",
)

# Documented, shown and pickled as this module's (stompy/_public.py).
publish(globals(), __all__, __name__)

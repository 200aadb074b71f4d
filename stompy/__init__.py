"""stompy: a STOMP 1.0 / 1.1 / 1.2 client for Python.

This module is the client: :class:`Connection` (blocking) and :class:`AsyncConnection`
(asyncio and trio), the objects they hand out, their options, and :func:`send` for a
script's one message. Around it: :mod:`stompy.errors` (every error stompy raises, one
hierarchy), :mod:`stompy.testing` (an in-process broker for your tests),
:mod:`stompy.protocol` and :mod:`stompy.events` (the sans-IO core, for writing your own
transport), :mod:`stompy.engine` (the session engine, provisional) and
:mod:`stompy.spark` (the Spark data source).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from stompy import errors
from stompy import events as events
from stompy import protocol as protocol
from stompy._client.blocking import Connection, Message, Subscription, Transaction, send
from stompy._compiled import COMPILED
from stompy._core.events import AckMode
from stompy._core.parser import FrameLimits
from stompy._engine.keywords import ConnectionOptions
from stompy._engine.options import Overflow, Reconnect
from stompy._engine.outgoing import Outgoing
from stompy._engine.urls import Endpoint, parse_url
from stompy._public import publish
from stompy._version import __version__ as __version__

if TYPE_CHECKING:
    from stompy._client.asynchronous import (
        AsyncConnection,
        AsyncMessage,
        AsyncSubscription,
        AsyncTransaction,
        send_async,
    )

# Also importable from here, for code written before stompy.protocol and stompy.errors
# were their one documented home (not in __all__: documented there, once).
from stompy.errors import *  # noqa: F403
from stompy.protocol import *  # noqa: F403

# A library logs only where the application configured logging: without this handler,
# logging's last resort would print WARNINGs (a lost connection) to stderr.
logging.getLogger("stompy").addHandler(logging.NullHandler())

__all__ = (
    "COMPILED",
    "AckMode",
    "AsyncConnection",
    "AsyncMessage",
    "AsyncSubscription",
    "AsyncTransaction",
    "Connection",
    "ConnectionOptions",
    "Endpoint",
    "FrameLimits",
    "Message",
    "Outgoing",
    "Overflow",
    "Reconnect",
    "Subscription",
    "Transaction",
    "errors",
    "parse_url",
    "send",
    "send_async",
)

#: The async client's names, loaded on first use: it brings anyio and the task
#: transport, about a third of ``import stompy``, which a process that only uses the
#: blocking client (a script, a Spark worker) need not pay.
_ASYNC_NAMES = frozenset(
    ("AsyncConnection", "AsyncMessage", "AsyncSubscription", "AsyncTransaction", "send_async")
)

# Documented, shown and pickled as this module's (stompy/_public.py).
publish(globals(), [name for name in __all__ if name not in _ASYNC_NAMES], __name__)


def __getattr__(name: str) -> Any:
    if name not in _ASYNC_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module("stompy._client.asynchronous")
    loaded = {each: getattr(module, each) for each in _ASYNC_NAMES}
    publish(loaded, _ASYNC_NAMES, __name__)
    globals().update(loaded)
    return loaded[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_ASYNC_NAMES})

"""An in-process STOMP broker with true STOMP semantics, for tests.

Built on the same codec as the client and on anyio::

    async with stompy.testing.serve(port=0) as broker:      # asyncio or trio
        ... connect to broker.url ...

    with stompy.testing.run_broker() as broker:             # a background thread
        ... connect to broker.url ...

With the package installed, pytest gets a ``stomp_broker`` fixture (a running
:class:`Broker`), and ``stompy broker`` runs one standalone.

A fault-injection TCP proxy goes in front of any broker to cut, stall, delay,
throttle, refuse and corrupt what passes (``stomp_fault_proxy`` in pytest,
``stompy proxy`` on the command line)::

    with stompy.testing.run_fault_proxy(broker.url) as proxy:
        ... connect to proxy.url, then proxy.cut(), proxy.stall(0.5) ...

Queues (``/queue/...`` and any other prefix) deliver each message to one subscriber,
round-robin, and keep it while nobody subscribes; topics (``/topic/...``) deliver to
every current subscriber. Storage is in memory and bounded (see
:class:`BrokerConfig`): this is a broker for tests, not for production.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stompy._public import publish

if TYPE_CHECKING:
    from stompy.testing._core.records import (
        BrokerConfig,
        BrokerOptions,
        BrokerStats,
        ConnectionInfo,
        SubscriberInfo,
    )
    from stompy.testing._proxy import (
        AsyncFaultProxy,
        FaultProxy,
        ProxyConnectionInfo,
        ProxyStats,
        fault_proxy,
        run_fault_proxy,
    )
    from stompy.testing._server import AsyncBroker, serve
    from stompy.testing._thread import Broker, run_broker

__all__ = (
    "AsyncBroker",
    "AsyncFaultProxy",
    "Broker",
    "BrokerConfig",
    "BrokerOptions",
    "BrokerStats",
    "ConnectionInfo",
    "FaultProxy",
    "ProxyConnectionInfo",
    "ProxyStats",
    "SubscriberInfo",
    "fault_proxy",
    "run_broker",
    "run_fault_proxy",
    "serve",
)

# What a test of an application needs: a broker (in a thread, or in an event loop),
# its options and what it reports, and the fault proxy. The broker's insides (the
# store, the per-connection protocol handler) are private: stompy.testing._core.

# Imported on first use: the pytest plugin lives in this package and is loaded by
# every pytest run, so importing the package must cost next to nothing.
_HOMES = {
    "AsyncBroker": "_server",
    "serve": "_server",
    "Broker": "_thread",
    "run_broker": "_thread",
    "AsyncFaultProxy": "_proxy",
    "FaultProxy": "_proxy",
    "ProxyConnectionInfo": "_proxy",
    "ProxyStats": "_proxy",
    "fault_proxy": "_proxy",
    "run_fault_proxy": "_proxy",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOMES.get(name, "_core.records")
    module = importlib.import_module(f"{__name__}.{home}")
    # Every public name of that module at once, documented, shown and pickled as
    # stompy.testing's (stompy/_public.py).
    names = [public for public in __all__ if _HOMES.get(public, "_core.records") == home]
    publish(vars(module), names, __name__)
    globals().update((public, getattr(module, public)) for public in names)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

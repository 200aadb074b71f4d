"""The pytest plugin of stompy: ``stomp_broker`` and ``stomp_fault_proxy``, registered on install.

pytest loads this module in every run once the package is installed, so it imports
nothing but pytest up front; the broker and the proxy are imported when a test asks
for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from stompy.testing import Broker, FaultProxy

__all__ = (
    "stomp_broker",
    "stomp_broker_options",
    "stomp_fault_proxy",
    "stomp_fault_proxy_options",
)


@pytest.fixture
def stomp_broker_options() -> dict[str, Any]:
    """Keyword arguments for the ``stomp_broker`` fixture's :func:`run_broker`.

    Override it in a ``conftest.py`` (or a test module) to configure the broker, e.g.
    ``return {"users": {"app": "secret"}}``.
    """
    return {}


@pytest.fixture
def stomp_broker(stomp_broker_options: dict[str, Any]) -> Iterator[Broker]:
    """A STOMP broker running for one test; connect to ``stomp_broker.url``."""
    from stompy.testing import run_broker

    with run_broker(**stomp_broker_options) as broker:
        yield broker


@pytest.fixture
def stomp_fault_proxy_options() -> dict[str, Any]:
    """Keyword arguments for the ``stomp_fault_proxy`` fixture's :func:`run_fault_proxy`.

    ``"target"`` is the URL to put the proxy in front of; without it, the proxy goes
    in front of the ``stomp_broker`` fixture. Override it to use another broker, e.g.
    ``return {"target": "stomp://guest:guest@localhost:61613/%2F"}``.
    """
    return {}


@pytest.fixture
def stomp_fault_proxy(
    request: pytest.FixtureRequest, stomp_fault_proxy_options: dict[str, Any]
) -> Iterator[FaultProxy]:
    """A fault proxy running for one test; connect to ``stomp_fault_proxy.url``.

    In front of ``stomp_broker`` unless ``stomp_fault_proxy_options`` names a target.
    """
    from stompy.testing import run_fault_proxy

    options = dict(stomp_fault_proxy_options)
    target = options.pop("target", None)
    if target is None:
        broker: Broker = request.getfixturevalue("stomp_broker")
        target = broker.url
    with run_fault_proxy(target, **options) as proxy:
        yield proxy

"""The pytest plugin of stompy: a ``stomp_broker`` fixture, registered on install.

pytest loads this module in every run once the package is installed, so it imports
nothing but pytest up front; the broker is imported when a test asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from stompy.testing import Broker

__all__ = ("stomp_broker", "stomp_broker_options")


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

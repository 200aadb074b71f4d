"""The conformance suite's broker and clients.

The broker is stompy's in-process one unless ``STOMPY_BROKER_URL`` names another
(with ``STOMPY_BROKER_LOGIN``, ``STOMPY_BROKER_PASSCODE`` and ``STOMPY_BROKER_VHOST``).
Tests marked ``broker_specific`` rely on behaviour STOMP leaves to the broker; they
are skipped against another broker.

Every test gets ``client`` (one connection) and ``connect`` (a factory for more),
parametrized over the client flavours of :data:`FLAVOURS`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from stompy.testing import Broker, run_broker
from tests.conformance._client_drivers import FLAVOURS
from tests.conformance._drivers import Driver, Target

#: The login of the in-process broker's only user.
LOGIN = "guest"
PASSCODE = "guest"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "broker_specific: relies on behaviour STOMP leaves to the broker "
        "(skipped when STOMPY_BROKER_URL names another broker)",
    )


@pytest.fixture(scope="session")
def inprocess_broker() -> Iterator[Broker | None]:
    """The in-process broker, or None when the suite runs against another one."""
    if os.environ.get("STOMPY_BROKER_URL"):
        yield None
        return
    # Generous tolerance: a loaded CI machine must not turn jitter into failures.
    with run_broker(
        users={LOGIN: PASSCODE}, heartbeats=(50, 50), heartbeat_tolerance=3.0
    ) as broker:
        yield broker
        # Whatever the tests did, the broker itself must not have failed.
        assert broker.stats.internal_errors == 0


@pytest.fixture(scope="session")
def broker_target(inprocess_broker: Broker | None) -> Target:
    if inprocess_broker is None:
        return Target.from_url(
            os.environ["STOMPY_BROKER_URL"],
            login=os.environ.get("STOMPY_BROKER_LOGIN"),
            passcode=os.environ.get("STOMPY_BROKER_PASSCODE"),
            vhost=os.environ.get("STOMPY_BROKER_VHOST"),
            external=True,
        )
    return Target(inprocess_broker.host, inprocess_broker.port, LOGIN, PASSCODE)


@pytest.fixture(scope="session")
def broker_url(broker_target: Target) -> str:
    """``stomp://host:port`` of the broker under test."""
    return broker_target.url


@pytest.fixture(autouse=True)
def _skip_broker_specific(request: pytest.FixtureRequest, broker_target: Target) -> None:
    if broker_target.external and request.node.get_closest_marker("broker_specific"):
        pytest.skip("relies on stompy's in-process broker")


@pytest.fixture
def broker(inprocess_broker: Broker | None) -> Broker:
    """The in-process broker, for tests that look inside it (skipped elsewhere)."""
    if inprocess_broker is None:
        pytest.skip("needs stompy's in-process broker")
    return inprocess_broker


@pytest.fixture(params=sorted(FLAVOURS))
def flavour(request: pytest.FixtureRequest) -> type[Driver]:
    cls: type[Driver] = FLAVOURS[request.param]
    return cls


class Connect(Protocol):
    def __call__(self, **options: Any) -> Driver: ...


@pytest.fixture
def connect(flavour: type[Driver], broker_target: Target) -> Iterator[Connect]:
    """Open a client of the flavour under test; all are closed after the test."""
    opened: list[Driver] = []

    def factory(**options: Any) -> Driver:
        driver = flavour.open(broker_target, **options)
        opened.append(driver)
        return driver

    yield factory
    for driver in opened:
        driver.close()


@pytest.fixture
def client(connect: Connect) -> Driver:
    """One client of the flavour under test, with every version offered."""
    return connect()


@pytest.fixture
def queue() -> str:
    """A queue name no other test (or run) uses."""
    return f"/queue/stompy-conformance-{uuid.uuid4().hex}"


@pytest.fixture
def topic() -> str:
    """A topic name no other test (or run) uses."""
    return f"/topic/stompy-conformance-{uuid.uuid4().hex}"

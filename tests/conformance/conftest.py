"""The conformance suite's broker and clients.

The broker is stompy's in-process one unless ``STOMPY_BROKER_URL`` names another
(with ``STOMPY_BROKER_LOGIN``, ``STOMPY_BROKER_PASSCODE`` and ``STOMPY_BROKER_VHOST``;
``STOMPY_BROKER_WS_URL`` is its STOMP-over-WebSocket address, without which the
``-ws`` flavours are skipped).
Tests marked ``broker_specific`` rely on behaviour STOMP leaves to the broker; they
are skipped against another broker. A test marked ``quirk(kind, reason, ...)`` meets a
known difference of a real broker (``kind`` is ``rabbitmq``, ``activemq`` or ``coilmq``, told by
the CONNECTED ``server`` header): against that broker it is an expected failure, or
skipped; docs/brokers.md lists them all.

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
from tests.conformance._client_drivers import FLAVOURS, WebSocketFlavour
from tests.conformance._drivers import CoreDriver, Driver, Target

#: The login of the in-process broker's only user.
LOGIN = "guest"
PASSCODE = "guest"
#: The real brokers whose differences the suite knows (``quirk`` marks).
QUIRK_KINDS = ("rabbitmq", "activemq", "coilmq")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "broker_specific: relies on behaviour STOMP leaves to the broker "
        "(skipped when STOMPY_BROKER_URL names another broker)",
    )
    config.addinivalue_line(
        "markers",
        "quirk(kind, reason, versions=None, effect='xfail'): the broker of this kind "
        "differs here (xfail: a strict expected failure; flaky: a loose one; skip: not run)",
    )


@pytest.fixture(scope="session")
def inprocess_broker() -> Iterator[Broker | None]:
    """The in-process broker, or None when the suite runs against another one."""
    if os.environ.get("STOMPY_BROKER_URL"):
        yield None
        return
    # Generous tolerance: a loaded CI machine must not turn jitter into failures.
    # One core behind a TCP and a WebSocket listener: the -ws flavours see the same
    # queues and sessions.
    with run_broker(
        users={LOGIN: PASSCODE}, heartbeats=(50, 50), heartbeat_tolerance=3.0, websocket=True
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
            ws_url=os.environ.get("STOMPY_BROKER_WS_URL") or None,
        )
    return Target(
        inprocess_broker.host,
        inprocess_broker.port,
        LOGIN,
        PASSCODE,
        ws_url=inprocess_broker.ws_url,
    )


@pytest.fixture(scope="session")
def broker_url(broker_target: Target) -> str:
    """``stomp://host:port`` of the broker under test."""
    return broker_target.url


@pytest.fixture(autouse=True)
def _skip_broker_specific(request: pytest.FixtureRequest, broker_target: Target) -> None:
    if broker_target.external and request.node.get_closest_marker("broker_specific"):
        pytest.skip("relies on stompy's in-process broker")


@pytest.fixture(scope="session")
def broker_kind(broker_target: Target) -> str:
    """``stompy``, ``rabbitmq``, ``activemq``, or STOMPY_BROKER_NAME for another broker.

    Told by the CONNECTED ``server`` header, so pointing the suite at any RabbitMQ or
    ActiveMQ applies their quirks without further configuration.
    """
    if not broker_target.external:
        return "stompy"
    probe = CoreDriver.open(broker_target)
    try:
        server = (probe.server or "").lower()
    finally:
        probe.close()
    for kind in QUIRK_KINDS:
        if server.startswith(kind):
            return kind
    return os.environ.get("STOMPY_BROKER_NAME", "other")


@pytest.fixture(autouse=True)
def _broker_quirks(request: pytest.FixtureRequest, broker_kind: str) -> None:
    callspec = getattr(request.node, "callspec", None)
    version = callspec.params.get("version") if callspec is not None else None
    for mark in request.node.iter_markers("quirk"):
        kind, reason = mark.args
        versions = mark.kwargs.get("versions")
        if kind != broker_kind or (versions is not None and version not in versions):
            continue
        effect = mark.kwargs.get("effect", "xfail")
        why = f"{kind}: {reason} (docs/brokers.md)"
        if effect == "skip":
            pytest.skip(why)
        request.applymarker(pytest.mark.xfail(reason=why, strict=effect == "xfail"))


@pytest.fixture
def tx_receipt(broker_kind: str) -> bool:
    """Whether a SEND inside a transaction may wait for its RECEIPT.

    RabbitMQ holds that RECEIPT until COMMIT (and never sends it after ABORT), so a
    client waiting for it before committing waits forever: against RabbitMQ such
    SENDs go without a receipt and the COMMIT's or ABORT's receipt orders them.
    """
    return broker_kind != "rabbitmq"


@pytest.fixture
def broker(inprocess_broker: Broker | None) -> Broker:
    """The in-process broker, for tests that look inside it (skipped elsewhere)."""
    if inprocess_broker is None:
        pytest.skip("needs stompy's in-process broker")
    return inprocess_broker


@pytest.fixture(params=sorted(FLAVOURS))
def flavour(request: pytest.FixtureRequest, broker_target: Target) -> type[Driver]:
    cls: type[Driver] = FLAVOURS[request.param]
    if issubclass(cls, WebSocketFlavour) and broker_target.ws_url is None:
        pytest.skip("the broker has no WebSocket URL (STOMPY_BROKER_WS_URL)")
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

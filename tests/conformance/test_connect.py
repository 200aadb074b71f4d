"""Connecting, negotiating, heart-beats and disconnecting."""

from __future__ import annotations

import pytest

from stompy._core.frames import VERSIONS
from stompy.errors import ConnectionLost, ServerError
from stompy.testing import Broker
from tests.conformance._drivers import Target
from tests.conformance.conftest import Connect
from tests.quirks import COILMQ, HEART_BEATS


@pytest.mark.parametrize("version", VERSIONS)
def test_connect_with_each_version(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    assert client.version == version
    client.subscribe(queue)
    client.send(queue, "hello")
    assert client.receive().text == "hello"
    client.disconnect()
    assert client.closed


def test_negotiates_the_highest_common_version(connect: Connect) -> None:
    assert connect().version == "1.2"
    assert connect(versions=("1.0", "1.1")).version == "1.1"


def test_connected_names_session_and_server(connect: Connect) -> None:
    first, second = connect(), connect()
    assert first.session
    assert first.session != second.session
    assert first.server


def test_wrong_passcode_is_refused(connect: Connect, broker_target: Target) -> None:
    if broker_target.login is None:
        pytest.skip("the broker under test takes no login")
    with pytest.raises(ServerError) as info:
        connect(passcode="not-the-passcode")
    assert info.value.message


@pytest.mark.quirk(COILMQ, HEART_BEATS, effect="skip")
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_heart_beats_keep_an_idle_connection_alive(
    connect: Connect, version: str, queue: str
) -> None:
    # 200 ms beats: 100 ms ones timed out twice on a machine with a load average of 8
    # (a pause of the whole test process longer than two intervals).
    client = connect(versions=(version,), heartbeats=(200, 200))
    outgoing, incoming = client.heartbeats
    assert outgoing >= 200
    assert incoming >= 200
    idle = max(outgoing, incoming) * 4 / 1000
    client.idle(idle)  # from CONNECTED on
    client.subscribe(queue)
    client.send(queue, "still here")
    assert client.receive().text == "still here"
    # From a frame on: ActiveMQ's next beat comes up to two intervals after it.
    client.idle(idle)
    client.send(queue, "and here")
    assert client.receive().text == "and here"
    received = getattr(client, "heartbeats_received", None)
    if received is not None and incoming <= 250:
        assert received > 0


@pytest.mark.quirk("rabbitmq", "negotiates heart-beats on a STOMP 1.0 connection")
@pytest.mark.quirk("activemq", "negotiates heart-beats on a STOMP 1.0 connection")
def test_no_heart_beats_in_stomp_10(connect: Connect) -> None:
    client = connect(versions=("1.0",), heartbeats=(50, 50))
    assert client.heartbeats == (0, 0)


@pytest.mark.broker_specific
def test_client_notices_a_silent_server(connect: Connect, broker: Broker) -> None:
    client = connect(heartbeats=(50, 50))
    assert client.session is not None
    broker.pause(client.session)
    try:
        with pytest.raises(ConnectionLost):
            client.idle(3.0)
    finally:
        broker.resume(client.session)


@pytest.mark.broker_specific
def test_graceful_disconnect_releases_the_connection(connect: Connect, broker: Broker) -> None:
    client = connect()
    session = client.session
    assert any(c.session == session for c in broker.connections)
    client.disconnect()
    broker.wait_until(lambda: all(c.session != session for c in broker.connections))

"""How clients see the server's ERROR frames."""

from __future__ import annotations

import pytest

from stompy.errors import LocalProtocolError, ServerError
from stompy.testing import Broker
from tests.conformance._drivers import CoreDriver, Driver
from tests.conformance.conftest import Connect


@pytest.mark.broker_specific
def test_acking_twice_is_a_server_error(
    connect: Connect, flavour: type[Driver], queue: str
) -> None:
    if not issubclass(flavour, CoreDriver):
        pytest.skip("the clients refuse a second answer themselves (test_ack.py)")
    client = connect()
    client.subscribe(queue, ack="client-individual")
    client.send(queue, "x")
    message = client.receive()
    client.ack(message)
    with pytest.raises(ServerError):
        client.ack(message)
    with pytest.raises(ServerError):
        client.send(queue, "after the error")
    assert client.closed


@pytest.mark.broker_specific
def test_error_frame_sent_out_of_the_blue(connect: Connect, broker: Broker) -> None:
    client = connect()
    assert client.session is not None
    broker.send_raw(client.session, b"ERROR\nmessage:going away\n\nbye\x00")
    with pytest.raises(ServerError) as info:
        client.idle(2.0)
    assert info.value.message == "going away"


@pytest.mark.broker_specific
def test_malformed_frame_from_the_server(connect: Connect, broker: Broker) -> None:
    client = connect()
    assert client.session is not None
    broker.send_raw(client.session, b"NONSENSE\n\n\x00")
    with pytest.raises(Exception) as info:  # noqa: PT011 - checked below
        client.idle(2.0)
    from stompy.errors import ProtocolError

    assert isinstance(info.value, ProtocolError)
    assert client.closed


@pytest.mark.broker_specific
def test_other_clients_survive_an_error(connect: Connect, queue: str) -> None:
    good = connect()
    good.subscribe(queue)
    bad = connect()
    bad.subscribe(f"{queue}-other", ack="client-individual")
    bad.send(f"{queue}-other", "x")
    message = bad.receive()
    bad.ack(message)
    with pytest.raises((ServerError, LocalProtocolError)):
        bad.ack(message)
    good.send(queue, "fine")
    assert good.receive().text == "fine"

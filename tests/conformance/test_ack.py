"""Acknowledgement modes, NACK and redelivery."""

from __future__ import annotations

import pytest

from stompy._core.frames import VERSIONS
from stompy.errors import LocalProtocolError
from stompy.testing import Broker
from tests.conformance._drivers import CoreDriver, Driver, Received
from tests.conformance.conftest import Connect
from tests.quirks import COILMQ, INDIVIDUAL_IS_AUTO, NO_NACK, ONE_AT_A_TIME


def fill(client: Driver, queue: str, count: int) -> None:
    for n in range(count):
        client.send(queue, str(n))


@pytest.mark.parametrize("version", VERSIONS)
def test_auto_ack(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue)
    fill(client, queue, 2)
    assert [m.text for m in client.receive_many(2)] == ["0", "1"]
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None  # auto-acked on delivery: nothing comes back


@pytest.mark.quirk(COILMQ, ONE_AT_A_TIME, effect="skip")
@pytest.mark.parametrize("version", VERSIONS)
def test_client_ack_is_cumulative(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client")
    fill(client, queue, 3)
    messages = client.receive_many(3)
    client.ack(messages[1])  # acks 0 and 1
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.receive().text == "2"
    assert again.poll(0.2) is None


@pytest.mark.quirk(
    "rabbitmq",
    "a client ACK covers every earlier delivery of the connection, other subscriptions' "
    "included (the spec: of the subscription)",
)
def test_a_client_ack_covers_its_own_subscription_only(connect: Connect, queue: str) -> None:
    # "the acknowledgment operates on the message specified in the ACK frame and all
    # messages sent to the subscription before the ACK'ed message" (1.2)
    other = queue + "-other"
    client = connect()
    client.subscribe(other, ack="client")
    client.send(other, "earlier, elsewhere")
    assert client.receive().text == "earlier, elsewhere"  # delivered first, never acked
    client.subscribe(queue, ack="client")
    client.send(queue, "acked")
    client.ack(client.receive())
    client.close()
    again = connect()
    again.subscribe(other)
    assert again.receive().text == "earlier, elsewhere"  # it comes back


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO, effect="skip")
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_client_individual_ack(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client-individual")
    fill(client, queue, 3)
    messages = client.receive_many(3)
    client.ack(messages[1])  # only 1
    client.close()
    again = connect()
    again.subscribe(queue)
    assert sorted(m.text for m in again.receive_many(2)) == ["0", "2"]
    assert again.poll(0.2) is None


@pytest.mark.quirk(COILMQ, NO_NACK)
@pytest.mark.quirk(
    "activemq",
    "NACK sends the message to ActiveMQ.DLQ (persistent) or drops it, never redelivers "
    "(pinned by tests/interop: test_nack, test_nack_destination)",
    effect="skip",
)
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_nack_redelivers(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client-individual")
    fill(client, queue, 1)
    first = client.receive()
    client.nack(first)
    second = client.receive()
    assert second.body == first.body
    client.ack(second)
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None


@pytest.mark.quirk(COILMQ, ONE_AT_A_TIME, effect="skip")
@pytest.mark.parametrize("version", VERSIONS)
def test_unacked_messages_are_redelivered_after_the_connection_ends(
    connect: Connect, version: str, queue: str
) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client")
    fill(client, queue, 2)
    client.receive_many(2)
    client.close()  # no ACK, no DISCONNECT
    again = connect(versions=(version,))
    again.subscribe(queue, ack="client")
    messages = again.receive_many(2)
    assert sorted(m.text for m in messages) == ["0", "1"]
    again.ack(max(messages, key=lambda m: m.text))


@pytest.mark.broker_specific
def test_redelivered_messages_are_marked_and_keep_their_order(
    connect: Connect, queue: str, broker: Broker
) -> None:
    client = connect()
    client.subscribe(queue, ack="client")
    fill(client, queue, 3)
    client.receive_many(3)
    assert broker.unacked_count(queue) == 3
    client.disconnect()
    assert broker.queue_depth(queue) == 3
    again = connect()
    again.subscribe(queue)
    messages = again.receive_many(3)
    assert [m.text for m in messages] == ["0", "1", "2"]
    assert all(m.header("redelivered") == "true" for m in messages)


@pytest.mark.broker_specific
def test_dropped_connections_give_their_messages_back(
    connect: Connect, queue: str, broker: Broker
) -> None:
    client = connect()
    client.subscribe(queue, ack="client-individual")
    fill(client, queue, 2)
    client.receive_many(2)
    assert broker.unacked_count(queue) == 2
    assert broker.drop_all_connections() >= 1
    assert broker.unacked_count(queue) == 0
    assert broker.queue_depth(queue) == 2
    with pytest.raises(Exception) as info:  # noqa: PT011 - whichever StompError
        client.idle(2.0)
    from stompy.errors import StompError

    assert isinstance(info.value, StompError)


@pytest.mark.broker_specific
def test_prefetch_limits_messages_in_flight(connect: Connect, queue: str, broker: Broker) -> None:
    client = connect()
    client.subscribe(queue, ack="client-individual", headers={"prefetch-count": "2"})
    fill(client, queue, 5)
    messages = client.receive_many(2)
    assert client.poll(0.2) is None
    assert broker.queue_depth(queue) == 3
    client.ack(messages[0])
    assert client.receive().text == "2"


def refused_twice(client: Driver, message: Received, *, nack: bool = False) -> None:
    """A second answer to ``message`` is refused by the client, naming it."""
    with pytest.raises(LocalProtocolError) as info:
        if nack:
            client.nack(message)
        else:
            client.ack(message)
    assert "already acknowledged" in str(info.value)
    assert repr(message.header("message-id")) in str(info.value)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_a_second_answer_is_refused_and_the_connection_lives_on(
    connect: Connect, flavour: type[Driver], version: str, queue: str
) -> None:
    # Every broker ends the connection for a second ACK or NACK of a message (an
    # ERROR): the clients know what they answered and refuse it before it goes out.
    if issubclass(flavour, CoreDriver):
        pytest.skip("the sans-IO core keeps no book of answers: the session engine does")
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client-individual")
    fill(client, queue, 2)
    first, second = client.receive_many(2)
    client.ack(first)
    refused_twice(client, first)
    refused_twice(client, first, nack=True)
    client.ack(second)
    refused_twice(client, second)
    client.send(queue, "after")  # the connection lives on
    third = client.receive()
    assert third.text == "after"
    client.ack(third)
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None  # each acked once, and for good


@pytest.mark.quirk(COILMQ, ONE_AT_A_TIME, effect="skip")
@pytest.mark.parametrize("version", VERSIONS)
def test_a_cumulative_ack_answers_the_earlier_messages(
    connect: Connect, flavour: type[Driver], version: str, queue: str
) -> None:
    if issubclass(flavour, CoreDriver):
        pytest.skip("the sans-IO core keeps no book of answers: the session engine does")
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client")
    fill(client, queue, 3)
    messages = client.receive_many(3)
    client.ack(messages[1])  # acks 0 and 1
    refused_twice(client, messages[0])
    refused_twice(client, messages[1])
    client.ack(messages[2])
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None

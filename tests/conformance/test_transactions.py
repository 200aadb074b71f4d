"""Transactions: commit and abort of sends and of acks."""

from __future__ import annotations

import pytest

from stompy._core.frames import VERSIONS
from tests.conformance.conftest import Connect
from tests.quirks import ACK_10, COILMQ


@pytest.mark.parametrize("version", VERSIONS)
def test_commit_delivers_sends(
    connect: Connect, version: str, queue: str, tx_receipt: bool
) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue)
    tx = client.begin()
    client.send(queue, "a", transaction=tx, receipt=tx_receipt)
    client.send(queue, "b", transaction=tx, receipt=tx_receipt)
    assert client.poll(0.2) is None
    client.commit(tx)
    assert [m.text for m in client.receive_many(2)] == ["a", "b"]


@pytest.mark.parametrize("version", VERSIONS)
def test_abort_drops_sends(connect: Connect, version: str, queue: str, tx_receipt: bool) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue)
    tx = client.begin()
    client.send(queue, "dropped", transaction=tx, receipt=tx_receipt)
    client.abort(tx)
    client.send(queue, "kept")
    assert client.receive().text == "kept"
    assert client.poll(0.2) is None


@pytest.mark.quirk(COILMQ, ACK_10, versions=("1.0",))
@pytest.mark.parametrize("version", VERSIONS)
def test_commit_of_acks(connect: Connect, version: str, queue: str) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client")
    client.send(queue, "x")
    message = client.receive()
    tx = client.begin()
    client.ack(message, transaction=tx)
    client.commit(tx)
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_abort_of_acks_leaves_the_message_unacked(
    connect: Connect, version: str, queue: str
) -> None:
    client = connect(versions=(version,))
    client.subscribe(queue, ack="client")
    client.send(queue, "x")
    message = client.receive()
    tx = client.begin()
    client.ack(message, transaction=tx)
    client.abort(tx)
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.receive().text == "x"


def test_transaction_ends_with_its_connection(
    connect: Connect, queue: str, tx_receipt: bool
) -> None:
    client = connect()
    tx = client.begin()
    client.send(queue, "never", transaction=tx, receipt=tx_receipt)
    client.close()
    again = connect()
    again.subscribe(queue)
    assert again.poll(0.2) is None


def test_transactions_are_independent(
    client: object, connect: Connect, queue: str, tx_receipt: bool
) -> None:
    producer = connect()
    consumer = connect()
    consumer.subscribe(queue)
    first = producer.begin()
    second = producer.begin()
    producer.send(queue, "first", transaction=first, receipt=tx_receipt)
    producer.send(queue, "second", transaction=second, receipt=tx_receipt)
    producer.commit(second)
    assert consumer.receive().text == "second"
    producer.abort(first)
    assert consumer.poll(0.2) is None

"""SEND and MESSAGE: bodies, headers, receipts, queues, topics, unsubscribe."""

from __future__ import annotations

import pytest

from stompy import Outgoing
from stompy._core.frames import VERSIONS
from tests.conformance._drivers import Driver
from tests.conformance.conftest import Connect
from tests.quirks import BURST, COILMQ, COLON_IN_10


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def versioned(connect: Connect, version: str) -> Driver:
    return connect(versions=(version,))


def test_text_message(versioned: Driver, queue: str) -> None:
    versioned.subscribe(queue)
    versioned.send(queue, "héllo wörld")
    message = versioned.receive()
    assert message.text == "héllo wörld"
    assert message.destination == queue
    assert message.message_id
    assert message.subscription
    assert (message.header("content-type") or "").startswith("text/plain")


@pytest.mark.quirk(COILMQ, COLON_IN_10, versions=("1.0",))
@pytest.mark.quirk(
    "rabbitmq", "escapes header values in STOMP 1.0 (a:b arrives as a\\cb)", versions=("1.0",)
)
def test_headers_with_colons_and_unicode(versioned: Driver, version: str, queue: str) -> None:
    headers = {"x-colon": "a:b:c", "x-ünïcode": "ça va ✓", "x-empty": ""}
    if version != "1.0":  # only 1.1 and later can escape these
        headers["x-newline"] = "two\nlines"
        headers["x-back:slash"] = "c:\\path\\"
    versioned.subscribe(queue)
    versioned.send(queue, b"", headers=headers)
    message = versioned.receive()
    for key, value in headers.items():
        assert message.header(key) == value, key


def test_binary_body_with_nuls(versioned: Driver, queue: str) -> None:
    body = bytes(range(256)) * 4 + b"\x00\x00end\x00"
    versioned.subscribe(queue)
    versioned.send(queue, body, content_type="application/octet-stream")
    message = versioned.receive()
    assert message.body == body
    assert message.header("content-type") == "application/octet-stream"
    assert message.header("content-length") == str(len(body))


def test_empty_body(client: Driver, queue: str) -> None:
    client.subscribe(queue)
    client.send(queue, b"")
    assert client.receive().body == b""


def test_large_body(client: Driver, queue: str) -> None:
    body = bytes(range(251)) * (2 * 1024 * 1024 // 251)
    client.subscribe(queue)
    client.send(queue, body)
    assert client.receive(timeout=20).body == body


@pytest.mark.quirk(COILMQ, BURST, effect="flaky")
def test_many_messages_keep_their_order(client: Driver, queue: str) -> None:
    client.subscribe(queue)
    for n in range(200):
        client.send(queue, str(n), receipt=n == 199)
    assert [m.text for m in client.receive_many(200)] == [str(n) for n in range(200)]


def test_message_ids_differ(client: Driver, queue: str) -> None:
    client.subscribe(queue)
    for n in range(5):
        client.send(queue, str(n))
    ids = {m.message_id for m in client.receive_many(5)}
    assert len(ids) == 5


def test_queue_keeps_messages_until_subscribed(connect: Connect, queue: str) -> None:
    producer = connect()
    producer.send(queue, "waiting")
    producer.disconnect()
    consumer = connect()
    consumer.subscribe(queue)
    assert consumer.receive().text == "waiting"


def test_queue_delivers_each_message_once(connect: Connect, queue: str) -> None:
    first, second = connect(), connect()
    first.subscribe(queue)
    second.subscribe(queue)
    producer = connect()
    for n in range(10):
        producer.send(queue, str(n))
    got: list[str] = []
    for consumer in (first, second):
        while (message := consumer.poll(0.2)) is not None and len(got) <= 10:
            got.append(message.text)
    assert sorted(got, key=int) == [str(n) for n in range(10)]


@pytest.mark.broker_specific
def test_queue_round_robin(connect: Connect, queue: str) -> None:
    first, second = connect(), connect()
    first.subscribe(queue)
    second.subscribe(queue)
    producer = connect()
    for n in range(4):
        producer.send(queue, str(n))
    assert [m.text for m in first.receive_many(2)] == ["0", "2"]
    assert [m.text for m in second.receive_many(2)] == ["1", "3"]


def test_topic_reaches_every_subscriber(connect: Connect, topic: str) -> None:
    subscribers = [connect(), connect()]
    for subscriber in subscribers:
        subscriber.subscribe(topic)
    producer = connect()
    producer.send(topic, "to all")
    for subscriber in subscribers:
        assert subscriber.receive().text == "to all"


def test_two_subscriptions_on_one_connection(client: Driver, queue: str, topic: str) -> None:
    queue_sub = client.subscribe(queue)
    topic_sub = client.subscribe(topic)
    client.send(topic, "t")
    client.send(queue, "q")
    received = {m.subscription: m.text for m in client.receive_many(2)}
    assert received == {queue_sub: "q", topic_sub: "t"}


def test_unsubscribe_stops_delivery(client: Driver, queue: str) -> None:
    sub = client.subscribe(queue)
    client.send(queue, "one")
    assert client.receive().text == "one"
    client.unsubscribe(sub)
    client.send(queue, "two")
    assert client.poll(0.2) is None
    client.subscribe(queue)
    assert client.receive().text == "two"


def test_receipts_for_every_kind_of_frame(client: Driver, queue: str) -> None:
    # Each call waits for its RECEIPT: a missing one raises StompTimeout.
    sub = client.subscribe(queue, ack="client", receipt=True)
    client.send(queue, "x", receipt=True)
    message = client.receive()
    tx = client.begin(receipt=True)
    client.ack(message, transaction=tx, receipt=True)
    client.commit(tx, receipt=True)
    client.abort(client.begin(receipt=True), receipt=True)
    client.unsubscribe(sub, receipt=True)
    client.disconnect()


@pytest.mark.quirk(COILMQ, BURST)
def test_send_many_in_order_confirmed_by_one_receipt(client: Driver, queue: str) -> None:
    other = queue + "-other"
    messages = [
        Outgoing(other if i % 100 == 0 else queue, f"m{i}", headers={"n": str(i)})
        for i in range(1500)
    ]
    assert client.send_many(messages) == 1500
    client.subscribe(queue)
    got = client.receive_many(1485, timeout=30)
    assert [m.text for m in got] == [f"m{i}" for i in range(1500) if i % 100]
    assert [m.header("n") for m in got[:2]] == ["1", "2"]
    client.subscribe(other)
    assert [m.text for m in client.receive_many(15)] == [f"m{i}" for i in range(0, 1500, 100)]
    assert client.send_many([]) == 0


def test_send_many_in_a_transaction(client: Driver, queue: str, tx_receipt: bool) -> None:
    client.subscribe(queue)
    tx = client.begin()
    messages = [Outgoing(queue, b"a"), Outgoing(queue, b"b")]
    client.send_many(messages, transaction=tx, receipt=tx_receipt)
    assert client.poll(0.3) is None  # nothing before the commit
    client.commit(tx)
    assert [m.body for m in client.receive_many(2)] == [b"a", b"b"]

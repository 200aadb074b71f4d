"""stompy's sans-IO ClientProtocol, over a plain socket, against real brokers."""

from __future__ import annotations

import time

import pytest

from stompy import State
from stompy.events import Connected, ConnectionClosed, Error, MessageReceived, Receipt
from tests.interop._support import BrokerTarget, ProtocolSession
from tests.quirks import (
    COILMQ,
    HEART_BEATS,
    NO_ACK_HEADER,
    NO_NACK,
    NO_REDELIVERED,
    OPEN_AFTER_DISCONNECT,
)


def split(events: list[object]) -> tuple[list[Receipt], list[MessageReceived]]:
    receipts = [e for e in events if isinstance(e, Receipt)]
    messages = [e for e in events if isinstance(e, MessageReceived)]
    assert len(receipts) + len(messages) == len(events), events
    return receipts, messages


def test_connect_negotiates_the_highest_version(broker: BrokerTarget) -> None:
    with ProtocolSession(broker) as session:
        connected = session.connect()
        assert isinstance(connected, Connected)
        assert connected.version == "1.2"
        assert connected.server == broker.server
        assert session.proto.state is State.CONNECTED


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_send_and_receive_with_receipts(broker: BrokerTarget, unique: str, version: str) -> None:
    destination = f"/queue/stompy-basic-{unique}"
    with ProtocolSession(broker, versions=[version]) as session:
        connected = session.connect()
        assert isinstance(connected, Connected)
        assert connected.version == version
        sub = session.proto.subscribe(destination, receipt="sub-1")
        session.flush()
        assert session.expect(Receipt).receipt_id == "sub-1"

        session.proto.send(destination, "héllo", headers={"x-stompy": "plain"}, receipt="send-1")
        session.flush()
        # RabbitMQ delivers the MESSAGE before the SEND's RECEIPT, ActiveMQ after.
        receipts, messages = split(list(session.events(2)))
        assert [r.receipt_id for r in receipts] == ["send-1"]
        (message,) = messages
        assert message.body == "héllo".encode()
        assert message.subscription == sub
        assert message.destination == destination
        assert message.frame.get("x-stompy") == "plain"
        assert message.frame.get("content-type") == "text/plain;charset=utf-8"

        session.proto.disconnect(receipt="bye")
        session.flush()
        assert session.expect(Receipt).receipt_id == "bye"
        assert session.proto.state is State.CLOSED


def test_binary_body_with_nul_octets(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stompy-binary-{unique}"
    body = bytes(range(256)) * 4
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, body)
        session.flush()
        message = session.expect(MessageReceived)
        assert message.body == body
        assert message.frame.get("content-length") == str(len(body))


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_header_escaping_round_trips(broker: BrokerTarget, unique: str, version: str) -> None:
    """Both brokers escape ``:``, LF and ``\\`` in 1.1 and 1.2 as the spec says."""
    destination = f"/queue/stompy-escape-{unique}"
    value = "colon:newline\nbackslash\\end"
    with ProtocolSession(broker, versions=[version]) as session:
        session.connect()
        session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, b"x", headers=[("x-escaped", value), ("x:name", "v")])
        session.flush()
        message = session.expect(MessageReceived)
        assert message.frame.get("x-escaped") == value
        assert message.frame.get("x:name") == "v"


@pytest.mark.quirk(COILMQ, NO_ACK_HEADER)
def test_client_individual_ack_removes_the_message(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stompy-ack-{unique}"
    with ProtocolSession(broker) as session:
        session.connect()
        sub = session.proto.subscribe(destination, ack="client-individual", receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, b"one")
        session.flush()
        message = session.expect(MessageReceived)
        assert message.ack_mode == "client-individual"
        assert message.ack_id, "a 1.2 broker must send the ack header"
        session.proto.ack(message, receipt="ack-1")
        session.proto.unsubscribe(sub, receipt="unsub-1")
        session.flush()
        assert [e.receipt_id for e in session.events(2) if isinstance(e, Receipt)] == [
            "ack-1",
            "unsub-1",
        ]
    # Acknowledged: a new consumer finds the queue empty.
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        with pytest.raises(TimeoutError):
            session.next_event(timeout=1.0)


@pytest.mark.quirk(COILMQ, NO_REDELIVERED)
def test_unacked_message_is_redelivered_to_the_next_consumer(
    broker: BrokerTarget, unique: str
) -> None:
    destination = f"/queue/stompy-redeliver-{unique}"
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, ack="client", receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, b"again")
        session.flush()
        first = session.expect(MessageReceived)
        assert first.frame.get("redelivered") in (None, "false")
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination)
        session.flush()
        again = session.expect(MessageReceived)
        assert again.body == b"again"
        assert again.frame.get("redelivered") == "true"


@pytest.mark.quirk(COILMQ, NO_NACK)
def test_nack(broker: BrokerTarget, unique: str) -> None:
    """NACK differs: RabbitMQ requeues at once; ActiveMQ dead-letters or drops."""
    destination = f"/queue/stompy-nack-{unique}"
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, ack="client-individual", receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, b"unwanted")
        session.flush()
        message = session.expect(MessageReceived)
        session.proto.nack(message, receipt="nack-1")
        session.flush()
        assert session.expect(Receipt).receipt_id == "nack-1"
        if broker.kind == "rabbitmq":
            again = session.expect(MessageReceived)
            assert again.body == b"unwanted"
            assert again.frame.get("redelivered") == "true"
        elif broker.kind == "activemq":
            # Non-persistent (the STOMP default on ActiveMQ): dropped, not even DLQ'd.
            with pytest.raises(TimeoutError):
                session.next_event(timeout=1.0)
        else:
            pytest.skip(f"no NACK expectation for {broker.kind}")


def test_transaction_commit_and_abort(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/stompy-tx-{unique}"
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        tx = session.proto.begin()
        session.proto.send(destination, b"committed", transaction=tx)
        session.flush()
        with pytest.raises(TimeoutError):
            session.next_event(timeout=0.5)
        session.proto.commit(tx, receipt="commit")
        session.flush()
        receipts, messages = split(list(session.events(2)))
        assert [r.receipt_id for r in receipts] == ["commit"]
        assert [m.body for m in messages] == [b"committed"]

        tx = session.proto.begin()
        session.proto.send(destination, b"aborted", transaction=tx)
        session.proto.abort(tx, receipt="abort")
        session.flush()
        assert session.expect(Receipt).receipt_id == "abort"
        with pytest.raises(TimeoutError):
            session.next_event(timeout=0.5)


def test_topic_fans_out_to_every_subscription(broker: BrokerTarget, unique: str) -> None:
    destination = f"/topic/stompy-fan-{unique}"
    with ProtocolSession(broker) as session:
        session.connect()
        one = session.proto.subscribe(destination)
        two = session.proto.subscribe(destination, receipt=True)
        session.flush()
        session.expect(Receipt)
        session.proto.send(destination, b"all")
        session.flush()
        messages = [session.expect(MessageReceived) for _ in range(2)]
        assert sorted(m.subscription for m in messages) == sorted([one, two])


def test_host_header(broker: BrokerTarget) -> None:
    """RabbitMQ takes ``host`` as the vhost and refuses a hostname; ActiveMQ ignores it."""
    with ProtocolSession(broker) as session:
        answer = session.connect(host="127.0.0.1")
        if broker.kind == "rabbitmq":
            assert isinstance(answer, Error)
            assert answer.message == "Bad CONNECT"
            assert b"Virtual host '127.0.0.1' access denied" in answer.frame.body
            assert session.proto.state is State.CLOSED
        elif broker.kind == "activemq":
            assert isinstance(answer, Connected)
        else:
            pytest.skip(f"no host-header expectation for {broker.kind}")


def test_wrong_passcode_is_an_error(broker: BrokerTarget) -> None:
    wrong = BrokerTarget(broker.name, broker.host, broker.port, broker.login, "wrong", broker.vhost)
    with ProtocolSession(wrong) as session:
        answer = session.connect()
        assert isinstance(answer, Error)
        assert session.proto.state is State.CLOSED


@pytest.mark.quirk(COILMQ, HEART_BEATS, effect="skip")
def test_heartbeats_keep_the_connection_alive(broker: BrokerTarget, unique: str) -> None:
    """1000 ms both ways for 3.5 s: both sides beat, nobody is declared dead.

    ActiveMQ's first beat comes two intervals after CONNECTED (its timer only
    writes after a whole period without output), so a tolerance of 2.0 races it.
    """
    destination = f"/queue/stompy-hb-{unique}"
    with ProtocolSession(broker, heartbeats=(1000, 1000), heartbeat_tolerance=3.0) as session:
        connected = session.connect()
        assert isinstance(connected, Connected)
        assert connected.frame.get("heart-beat") == "1000,1000"
        assert connected.heartbeats == (1000, 1000)
        end = time.monotonic() + 3.5
        with pytest.raises(TimeoutError):
            session.next_event(timeout=end - time.monotonic())
        assert session.proto.state is State.CONNECTED
        session.proto.send(destination, b"still here", receipt="alive")
        session.flush()
        assert session.expect(Receipt).receipt_id == "alive"


def test_heartbeat_answer_to_1500(broker: BrokerTarget) -> None:
    """RabbitMQ rounds intervals down to whole seconds; ActiveMQ echoes them."""
    with ProtocolSession(broker, heartbeats=(1500, 1500)) as session:
        connected = session.connect()
        assert isinstance(connected, Connected)
        answer = connected.frame.get("heart-beat")
        if broker.kind == "rabbitmq":
            assert answer == "1000,1000"
        elif broker.kind == "activemq":
            assert answer == "1500,1500"
        # The spec's rule: each direction is the larger of what the two sides asked.
        assert connected.heartbeats == (1500, 1500)


@pytest.mark.quirk(COILMQ, OPEN_AFTER_DISCONNECT, effect="skip")
def test_eof_after_disconnect_is_expected(broker: BrokerTarget) -> None:
    with ProtocolSession(broker) as session:
        session.connect()
        session.proto.disconnect(receipt="bye")
        session.flush()
        assert session.expect(Receipt).receipt_id == "bye"
        # Both brokers close the socket after the DISCONNECT receipt.
        session.sock.settimeout(2.0)
        assert session.sock.recv(1) == b""
        session.proto.receive_eof()
        assert session.proto.next_event() in (None, ConnectionClosed(expected=True))


def test_request_reply_through_a_temp_queue(broker: BrokerTarget, unique: str) -> None:
    """A ``reply-to:/temp-queue/`` request; the reply reaches the requester's protocol.

    RabbitMQ delivers it on an implicit subscription whose id is the temp queue's
    name, which ClientProtocol learnt from the SEND; on ActiveMQ the requester
    subscribes to the temp queue itself, as usual.
    """
    if broker.kind not in ("rabbitmq", "activemq"):
        pytest.skip(f"no temp-queue expectation for {broker.kind}")
    service = f"/queue/stompy-service-{unique}"
    temp = f"/temp-queue/stompy-replies-{unique}"
    with ProtocolSession(broker) as server, ProtocolSession(broker) as client:
        server.connect()
        server.proto.subscribe(service, receipt=True)
        server.flush()
        server.expect(Receipt)
        client.connect()
        expected_sub = temp
        if broker.kind == "activemq":
            expected_sub = client.proto.subscribe(temp, receipt=True)
            client.flush()
            client.expect(Receipt)
        client.proto.send(service, "question", headers={"reply-to": temp}, receipt="asked")
        client.flush()
        assert client.expect(Receipt).receipt_id == "asked"

        request = server.expect(MessageReceived)
        reply_to = request.frame.get("reply-to")
        assert reply_to is not None
        assert reply_to != temp  # both rewrite it into a name others can send to
        server.proto.send(reply_to, f"answer to {request.body.decode()}", receipt="answered")
        server.flush()
        assert server.expect(Receipt).receipt_id == "answered"

        reply = client.expect(MessageReceived)
        assert reply.body == b"answer to question"
        assert reply.subscription == expected_sub
        assert reply.ack_mode == "auto"
        assert client.proto.state is State.CONNECTED

"""What each broker puts on the wire: the findings of docs/brokers.md, pinned.

Frames are written by hand and read back raw (escapes not decoded), so these tests
say exactly what a client must cope with. Each test states its expectation per
broker; a broker of another kind is skipped.
"""

from __future__ import annotations

import pytest

from stompy import Frame
from tests.interop._support import BrokerTarget, RawConn, need, raw_connect
from tests.quirks import BARE_NAME, COILMQ, COLON_IN_10, NO_NACK, UNKNOWN_COMMAND


def expect(broker: BrokerTarget, **by_kind: object) -> object:
    if broker.kind not in by_kind:
        pytest.skip(f"no recorded behaviour for {broker.kind}")
    return by_kind[broker.kind]


def subscribe(conn: RawConn, destination: str, *extra: tuple[str, str]) -> None:
    conn.frame("SUBSCRIBE", [("destination", destination), ("receipt", "sub"), *extra])
    need(conn.read_frame(), "RECEIPT")


def message(conn: RawConn) -> Frame:
    return need(conn.read_frame(), "MESSAGE")


def test_host_header_rules(broker: BrokerTarget) -> None:
    accepted = {}
    for host in ("/", "localhost", "127.0.0.1", "", None):
        with RawConn(broker.host, broker.port) as conn:
            answer = conn.connect(host, broker.login, broker.passcode)
            assert answer is not None
            accepted[host] = answer.command == "CONNECTED"
    assert accepted == expect(
        broker,
        rabbitmq={"/": True, "localhost": False, "127.0.0.1": False, "": False, None: True},
        activemq=dict.fromkeys(("/", "localhost", "127.0.0.1", "", None), True),
    )


@pytest.mark.parametrize(
    ("asked", "rabbitmq", "activemq"),
    [
        ("1500,1500", "1000,1000", "1500,1500"),
        ("100,100", "1000,1000", "100,100"),
        ("2500,0", "0,2000", "0,2500"),
        ("0,999", "1000,0", "999,0"),
    ],
)
def test_heartbeat_answers(broker: BrokerTarget, asked: str, rabbitmq: str, activemq: str) -> None:
    """RabbitMQ: whole seconds, rounded down, at least 1 s. ActiveMQ: echoed as asked."""
    with RawConn(broker.host, broker.port) as conn:
        answer = need(
            conn.connect(broker.vhost, broker.login, broker.passcode, ("heart-beat", asked)),
            "CONNECTED",
        )
        assert answer.get("heart-beat") == expect(broker, rabbitmq=rabbitmq, activemq=activemq)


def test_message_headers(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/wire-headers-{unique}"
    with raw_connect(broker) as conn:
        subscribe(conn, destination, ("id", "s1"), ("ack", "client-individual"))
        conn.frame("SEND", [("destination", destination), ("receipt", "r1")], b"body")
        frames = [conn.read_frame(), conn.read_frame()]
        assert all(f is not None for f in frames)
        (msg,) = [f for f in frames if f is not None and f.command == "MESSAGE"]
        message_id, ack = msg.get("message-id") or "", msg.get("ack") or ""
        if expect(broker, rabbitmq=True, activemq=False):
            # message-id == ack == T_<subscription>@@<session>@@<n>; SEND headers,
            # even ``receipt``, are copied into the MESSAGE; content-length always.
            assert message_id.startswith("T_s1@@session-")
            assert ack == message_id
            assert msg.get("redelivered") == "false"
            assert msg.get("receipt") == "r1"
            assert msg.get("content-length") == "4"
        else:
            # ID:<host>-<port>-<time>-<n>:<n>:-1:1:<n>, colons escaped on the wire;
            # the ack id is another one; JMS headers; content-length only if sent.
            assert message_id.startswith("ID\\c")
            assert ack.startswith("ID\\c")
            assert ack != message_id
            assert msg.get("redelivered") is None
            assert msg.get("receipt") is None
            assert msg.get("content-length") is None
            for name in ("expires", "priority", "timestamp"):
                assert msg.get(name) is not None


@pytest.mark.quirk(COILMQ, COLON_IN_10)
def test_escaping_in_stomp_1_0(broker: BrokerTarget, unique: str) -> None:
    """STOMP 1.0 has no escapes; RabbitMQ escapes anyway, ActiveMQ writes raw values."""
    destination = f"/queue/wire-escape10-{unique}"
    with RawConn(broker.host, broker.port) as conn:
        conn.frame("CONNECT", [("login", broker.login), ("passcode", broker.passcode)])
        answer = need(conn.read_frame(), "CONNECTED")
        assert answer.get("version", "1.0") == "1.0"
        subscribe(conn, destination, ("id", "s1"))
        conn.frame("SEND", [("destination", destination), ("x-colon", "raw:colon")], b"x")
        got = message(conn).get("x-colon")
    assert got == expect(broker, rabbitmq="raw\\ccolon", activemq="raw:colon")


def test_undefined_escape(broker: BrokerTarget, unique: str) -> None:
    """1.2 makes ``\\t`` a fatal error: RabbitMQ drops the socket, ActiveMQ keeps it."""
    destination = f"/queue/wire-badescape-{unique}"
    with raw_connect(broker) as conn:
        subscribe(conn, destination, ("id", "s1"))
        conn.send(f"SEND\ndestination:{destination}\nx-bad:a\\tb\n\nbody\0".encode())
        if expect(broker, rabbitmq=True, activemq=False):
            assert conn.read_frame(2.0) is None
            assert conn.closed
        else:
            assert message(conn).get("x-bad") == "a\\\\tb"  # the backslash, escaped


@pytest.mark.parametrize(
    "junk",
    [
        b"SEND\ndestination:/queue/x\ncontent-length:abc\n\nhi\0",
        b"SEND\ndestination:/queue/x\ncontent-length:1\n\nhi\0",
    ],
    ids=["content-length-not-a-number", "content-length-too-short"],
)
def test_malformed_frame(broker: BrokerTarget, junk: bytes) -> None:
    """RabbitMQ closes without an ERROR frame; ActiveMQ sends ERROR, then closes."""
    with raw_connect(broker) as conn:
        conn.send(junk)
        answer = conn.read_frame(3.0)
        assert conn.wait_closed(3.0)
    sent_error = answer is not None and answer.command == "ERROR"
    assert sent_error == expect(broker, rabbitmq=False, activemq=True)


@pytest.mark.quirk(COILMQ, UNKNOWN_COMMAND)
def test_unknown_command(broker: BrokerTarget) -> None:
    with raw_connect(broker) as conn:
        conn.frame("FOO", [("receipt", "x")])
        answer = need(conn.read_frame(), "ERROR")
        closed = conn.wait_closed(1.5)
        # Only ActiveMQ sets receipt-id on the ERROR (spec: SHOULD).
        assert (closed, answer.get("receipt-id")) == expect(
            broker, rabbitmq=(False, None), activemq=(True, "x")
        )


def test_connection_after_a_refused_connect(broker: BrokerTarget) -> None:
    """After ERROR the server MUST close; RabbitMQ even accepts a second CONNECT."""
    with RawConn(broker.host, broker.port) as conn:
        need(conn.connect(broker.vhost, broker.login, "wrong"), "ERROR")
        second = conn.connect(broker.vhost, broker.login, broker.passcode)
        command = None if second is None else second.command
    assert command == expect(broker, rabbitmq="CONNECTED", activemq=None)


def test_prefetch_header(broker: BrokerTarget, unique: str) -> None:
    destination = f"/queue/wire-prefetch-{unique}"
    header = str(expect(broker, rabbitmq="prefetch-count", activemq="activemq.prefetchSize"))
    with raw_connect(broker) as conn:
        for n in range(3):
            conn.frame("SEND", [("destination", destination)], f"m{n}".encode())
        subscribe(conn, destination, ("id", "s1"), ("ack", "client-individual"), (header, "1"))
        first = message(conn)
        assert conn.read_frame(1.0) is None, "prefetch 1: one unacked message at a time"
        conn.frame("ACK", [("id", first.get("ack") or "")])
        assert message(conn).body == b"m1"


@pytest.mark.quirk(COILMQ, NO_NACK)
def test_nack_destination(broker: BrokerTarget, unique: str) -> None:
    """RabbitMQ requeues (requeue:false drops); ActiveMQ sends persistent ones to its DLQ."""
    destination = f"/queue/wire-nack-{unique}"
    with raw_connect(broker) as conn:
        subscribe(conn, destination, ("id", "s1"), ("ack", "client-individual"))
        conn.frame("SEND", [("destination", destination), ("persistent", "true")], b"n")
        first = message(conn)
        extra = [("requeue", "false")] if broker.kind == "rabbitmq" else []
        conn.frame("NACK", [("id", first.get("ack") or ""), ("receipt", "n"), *extra])
        need(conn.read_frame(), "RECEIPT")
        assert conn.read_frame(1.0) is None
    if expect(broker, rabbitmq=False, activemq=True):
        with raw_connect(broker) as conn:
            subscribe(conn, "/queue/ActiveMQ.DLQ", ("id", "dlq"))
            dead = conn.read_frame()
            while dead is not None and dead.get("original-destination") != destination:
                dead = conn.read_frame()  # bounded: each read waits at most TIMEOUT
            assert need(dead, "MESSAGE").body == b"n"


def test_temp_queue_reply_to(broker: BrokerTarget, unique: str) -> None:
    """RabbitMQ: implicit subscription named after the temp queue; ActiveMQ: subscribe."""
    service = f"/queue/wire-service-{unique}"
    with raw_connect(broker) as server, raw_connect(broker) as client:
        subscribe(server, service, ("id", "svc"))
        if broker.kind == "activemq":
            subscribe(client, "/temp-queue/replies", ("id", "replies"))
        elif broker.kind == "rabbitmq":
            client.frame("SUBSCRIBE", [("destination", "/temp-queue/replies"), ("id", "r")])
            need(client.read_frame(), "ERROR")
            client.close()
            client = raw_connect(broker)
        else:
            pytest.skip(f"no recorded behaviour for {broker.kind}")
        client.frame("SEND", [("destination", service), ("reply-to", "/temp-queue/replies")], b"q")
        reply_to = message(server).get("reply-to") or ""
        assert reply_to.startswith(
            str(expect(broker, rabbitmq="/reply-queue/", activemq="/remote-temp-queue/ID\\c"))
        )
        server.frame("SEND", [("destination", reply_to)], b"answer")
        reply = message(client)
        client.close()
        assert reply.body == b"answer"
        assert reply.get("subscription") == expect(
            broker, rabbitmq="/temp-queue/replies", activemq="replies"
        )


def test_durable_topic_subscription(broker: BrokerTarget, unique: str) -> None:
    topic = f"/topic/wire-durable-{unique}"
    connect_extra: list[tuple[str, str]] = []
    if broker.kind == "rabbitmq":
        sub_extra = [("id", f"d-{unique}"), ("durable", "true"), ("auto-delete", "false")]
    elif broker.kind == "activemq":
        connect_extra = [("client-id", f"c-{unique}")]
        sub_extra = [("id", "d"), ("activemq.subscriptionName", "d")]
    else:
        pytest.skip(f"no recorded behaviour for {broker.kind}")
    with raw_connect(broker, *connect_extra) as conn:
        subscribe(conn, topic, *sub_extra)
    with raw_connect(broker) as conn:
        conn.frame("SEND", [("destination", topic), ("persistent", "true"), ("receipt", "s")])
        assert conn.read_frame() is not None
    with raw_connect(broker, *connect_extra) as conn:
        conn.frame("SUBSCRIBE", [("destination", topic), *sub_extra])
        assert message(conn).get("destination") == topic


@pytest.mark.quirk(COILMQ, BARE_NAME)
def test_send_without_destination_prefix(broker: BrokerTarget, unique: str) -> None:
    """Both treat a bare name as a queue of that name."""
    with raw_connect(broker) as conn:
        subscribe(conn, f"/queue/wire-bare-{unique}", ("id", "s1"))
        conn.frame("SEND", [("destination", f"wire-bare-{unique}")], b"bare")
        assert message(conn).get("destination") == f"/queue/wire-bare-{unique}"


def test_receipt_for_a_send_in_a_transaction(broker: BrokerTarget, unique: str) -> None:
    """RabbitMQ holds the SEND's RECEIPT until COMMIT (after the COMMIT's own, and the
    MESSAGE) and never sends it when the transaction is aborted; ActiveMQ answers at once.
    """
    destination = f"/queue/wire-txreceipt-{unique}"
    deferred = expect(broker, rabbitmq=True, activemq=False)
    with raw_connect(broker) as conn:
        subscribe(conn, destination, ("id", "s1"))
        for tx, finish in (("t1", "COMMIT"), ("t2", "ABORT")):
            conn.frame("BEGIN", [("transaction", tx)])
            conn.frame(
                "SEND", [("destination", destination), ("transaction", tx), ("receipt", "s")]
            )
            early = conn.read_frame(1.0)
            assert (early is None) == deferred
            conn.frame(finish, [("transaction", tx), ("receipt", "end")])
            frames: list[tuple[str, str | None]] = []
            while (frame := conn.read_frame(1.0)) is not None and len(frames) < 5:
                frames.append((frame.command, frame.get("receipt-id")))
            if not deferred:
                assert frames[0] == ("RECEIPT", "end")
            elif finish == "COMMIT":
                assert frames == [("RECEIPT", "end"), ("MESSAGE", None), ("RECEIPT", "s")]
            else:
                assert frames == [("RECEIPT", "end")]

"""The broker's sans-IO side: client connections driven with bytes and a fake clock, no
sockets, over one store."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import V10, V11, V12, VERSIONS, Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy.testing import BrokerConfig
from stompy.testing._core.connection import ClientConnection
from stompy.testing._core.destinations import DESTINATION_OVERHEAD, MESSAGE_OVERHEAD
from stompy.testing._core.records import ConnectionState
from stompy.testing._core.store import MessageStore

Headers = dict[str, str]


class Peer:
    """The client end of one :class:`ClientConnection`: frames in, frames out."""

    def __init__(self, store: MessageStore, now: float = 0.0) -> None:
        self.store = store
        self.client: ClientConnection = store.open_connection(now, "peer")
        self.version = V10
        self._parser = FrameParser(V10)

    def raw(self, data: bytes, now: float = 0.0) -> None:
        self.client.receive_data(data, now)

    def send(
        self, command: str, headers: Headers | None = None, body: bytes = b"", now: float = 0.0
    ) -> None:
        version = V10 if command in ("CONNECT", "STOMP") else self.version
        frame = Frame(command, tuple((headers or {}).items()), body)
        self.raw(encode(frame, version), now)

    def output(self, now: float = 0.0) -> bytes:
        return self.client.data_to_send(now)

    def frames(self, now: float = 0.0) -> list[Frame]:
        found: list[Frame] = []
        for frame in self._parser.parse(self.output(now)):
            if frame.command == "CONNECTED":
                self.version = frame.get("version", V10) or V10
                self._parser.version = self.version
            found.append(frame)
        return found

    def frame(self, now: float = 0.0) -> Frame:
        frames = self.frames(now)
        assert len(frames) == 1, frames
        return frames[0]

    def connect(self, version: str = V12, **headers: str) -> Frame:
        connect = {"accept-version": version, "host": "test"}
        connect.update(headers)
        self.send("CONNECT", connect)
        frame = self.frame()
        assert frame.command == "CONNECTED", frame
        return frame

    def subscribe(self, destination: str, id: str = "s1", ack: str = "auto", **extra: str) -> None:
        self.send("SUBSCRIBE", {"destination": destination, "id": id, "ack": ack, **extra})

    def error(self) -> Frame:
        frames = self.frames()
        assert frames, "expected an ERROR"
        assert frames[-1].command == "ERROR", frames
        assert self.client.state is ConnectionState.CLOSING
        return frames[-1]


def make(**options: object) -> MessageStore:
    return MessageStore(BrokerConfig(**options))  # type: ignore[arg-type]


@pytest.fixture
def store() -> MessageStore:
    return make()


def connected(store: MessageStore, version: str = V12, **headers: str) -> Peer:
    peer = Peer(store)
    peer.connect(version, **headers)
    return peer


def bodies(frames: list[Frame]) -> list[bytes]:
    return [f.body for f in frames if f.command == "MESSAGE"]


# -- CONNECT ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_connect_negotiates_the_one_offered_version(store: MessageStore, version: str) -> None:
    frame = connected(store, version).client
    assert frame.version == version
    assert frame.state is ConnectionState.CONNECTED


def test_connect_picks_the_highest_common_version(store: MessageStore) -> None:
    peer = Peer(store)
    frame = peer.connect("1.0,1.1,2.0")
    assert frame.get("version") == V11
    assert frame.get("session") == peer.client.id
    assert frame.get("server") == store.config.server_name
    assert frame.get("heart-beat") == "100,100"


def test_connect_without_accept_version_is_stomp_10(store: MessageStore) -> None:
    peer = Peer(store)
    peer.send("CONNECT", {})
    frame = peer.frame()
    assert frame.command == "CONNECTED"
    assert frame.get("version") == V10
    assert frame.get("heart-beat") is None  # 1.0 has no heart-beating


def test_stomp_command_connects_like_connect(store: MessageStore) -> None:
    peer = Peer(store)
    peer.send("STOMP", {"accept-version": "1.2", "host": "h"})
    assert peer.frame().command == "CONNECTED"
    assert peer.client.host == "h"


def test_no_common_version_gets_error_naming_supported_versions() -> None:
    store = make(versions=("1.1", "1.2"))
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.0,3.0", "host": "h"})
    error = peer.error()
    assert error.get("version") == "1.1,1.2"
    assert b"Supported protocol versions are 1.1 1.2" in error.body
    assert "no common STOMP version" in (error.get("message") or "")


def test_broker_limited_to_old_versions_negotiates_down() -> None:
    store = make(versions=("1.0", "1.1"))
    peer = Peer(store)
    assert peer.connect("1.0,1.1,1.2").get("version") == V11


def test_missing_host_is_accepted_unless_virtual_hosts_are_checked() -> None:
    peer = Peer(make())
    peer.send("CONNECT", {"accept-version": "1.1"})
    assert peer.frame().command == "CONNECTED"
    assert peer.client.host is None
    peer = Peer(make(virtual_hosts=["h"]))
    peer.send("CONNECT", {"accept-version": "1.2"})
    assert "no host header" in (peer.error().get("message") or "")


def test_authentication() -> None:
    store = make(users={"alice": "secret"})
    assert connected(store, login="alice", passcode="secret").client.login == "alice"
    for headers in ({"login": "alice", "passcode": "hunter2"}, {"login": "bob"}, {}):
        peer = Peer(store)
        peer.send("CONNECT", {"accept-version": "1.2", "host": "h", **headers})
        error = peer.error()
        assert "authentication failed" in (error.get("message") or "")
        assert b"********" in error.body or "passcode" not in headers
        assert b"hunter2" not in error.body  # never echo a passcode


def test_virtual_hosts() -> None:
    store = make(virtual_hosts=["/", "prod"])
    assert connected(store, host="prod").client.host == "prod"
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "other"})
    assert "virtual host" in (peer.error().get("message") or "")


def test_bad_heart_beat_header(store: MessageStore) -> None:
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "soon"})
    assert "heart-beat" in (peer.error().get("message") or "")


def test_frame_before_connect_is_an_error(store: MessageStore) -> None:
    peer = Peer(store)
    peer.send("SEND", {"destination": "/queue/a", "receipt": "r-7"})
    error = peer.error()
    assert "expected a CONNECT" in (error.get("message") or "")
    assert error.get("receipt-id") == "r-7"


def test_second_connect_is_an_error(store: MessageStore) -> None:
    peer = connected(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h"})
    assert "already connected" in (peer.error().get("message") or "")


def test_server_frames_from_a_client_are_errors(store: MessageStore) -> None:
    peer = connected(store)
    peer.send("MESSAGE", {"destination": "/queue/a", "message-id": "1", "subscription": "1"})
    assert "server frame" in (peer.error().get("message") or "")


def test_connect_timeout() -> None:
    store = make(connect_timeout=5.0)
    peer = Peer(store, now=100.0)
    assert peer.client.next_deadline() == 105.0
    peer.client.handle_timer(104.0)
    assert peer.frames() == []
    peer.client.handle_timer(105.0)
    assert "no CONNECT frame within 5 s" in (peer.error().get("message") or "")
    assert peer.client.next_deadline() is None


def test_connect_frames_split_byte_by_byte(store: MessageStore) -> None:
    peer = Peer(store)
    data = (
        b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00"
        b"SUBSCRIBE\nid:0\ndestination:/q\nreceipt:1\n\n\x00"
    )
    for i in range(len(data)):
        peer.raw(data[i : i + 1])
    assert [f.command for f in peer.frames()] == ["CONNECTED", "RECEIPT"]


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"HELLO\n\n\x00", "malformed frame"),
        (b"\xff\xfe\n\n\x00", "malformed frame"),
        (b"SEND\ndestination/queue/a\n\n\x00", "malformed frame"),
        (b"SEND\ndestination:/q\ncontent-length:x\n\nab\x00", "malformed frame"),
        (b"SEND\ndestination:/q\ncontent-length:2\n\nabc\x00", "malformed frame"),
        (b"SUBSCRIBE\nid:1\ndestination:/q\n\nbody\x00", "malformed frame"),
        (b"SEND\nbad:\\t\n\n\x00", "malformed frame"),
        (b"\r\r", "malformed frame"),
    ],
)
def test_garbage_gets_error_and_close(store: MessageStore, data: bytes, message: str) -> None:
    peer = connected(store)
    peer.raw(data)
    error = peer.error()
    assert message in (error.get("message") or "")
    assert error.body  # says what was wrong
    peer.raw(b"SEND\ndestination:/q\n\n\x00")  # ignored from now on
    assert peer.frames() == []
    assert store.stats.errors_sent == 1


@pytest.mark.parametrize(
    ("command", "headers", "missing"),
    [
        ("SEND", {}, "destination"),
        ("SEND", {"destination": ""}, "destination"),
        ("SUBSCRIBE", {"id": "1"}, "destination"),
        ("SUBSCRIBE", {"destination": "/q"}, "id"),
        ("UNSUBSCRIBE", {}, "id"),
        ("ACK", {}, "id"),
        ("NACK", {}, "id"),
        ("BEGIN", {}, "transaction"),
        ("COMMIT", {}, "transaction"),
        ("ABORT", {}, "transaction"),
    ],
)
def test_missing_required_header(
    store: MessageStore, command: str, headers: Headers, missing: str
) -> None:
    peer = connected(store)
    peer.send(command, {**headers, "receipt": "r-1"})
    error = peer.error()
    assert missing in (error.get("message") or "")
    assert error.get("receipt-id") == "r-1"
    assert error.get("content-type") == "text/plain"
    assert command.encode() in error.body


def test_missing_ack_headers_per_version(store: MessageStore) -> None:
    peer = connected(store, V11)
    peer.send("ACK", {"message-id": "m"})
    assert "subscription" in (peer.error().get("message") or "")
    peer = connected(store, V10)
    peer.send("ACK", {})
    assert "message-id" in (peer.error().get("message") or "")


def test_frame_over_the_limits() -> None:
    store = make(limits=FrameLimits(max_header_line=64, max_headers=4, max_body=10))
    for data in (
        b"SEND\ndestination:/q\n\n" + b"x" * 11 + b"\x00",
        b"SEND\ndestination:/q\ncontent-length:11\n\n",
        b"SEND\n" + b"a:b\n" * 6 + b"\n\x00",
        b"SEND\nx:" + b"y" * 100,
    ):
        peer = connected(store)
        peer.raw(data)
        assert peer.error().get("message") == "frame too large"


def test_error_in_a_batch_stops_processing(store: MessageStore) -> None:
    peer = connected(store)
    peer.raw(
        b"SEND\ndestination:/queue/a\n\none\x00SEND\n\n\x00SEND\ndestination:/queue/a\n\ntwo\x00"
    )
    peer.error()
    assert store.queue_depth("/queue/a") == 1


def test_unknown_subscription_and_duplicates(store: MessageStore) -> None:
    peer = connected(store)
    peer.send("UNSUBSCRIBE", {"id": "nope"})
    assert "nope" in (peer.error().get("message") or "")

    peer = connected(store)
    peer.subscribe("/queue/a", id="1")
    peer.subscribe("/queue/b", id="1")
    assert "already in use" in (peer.error().get("message") or "")

    peer = connected(store)
    peer.subscribe("/queue/a", ack="sometimes")
    assert "invalid ack mode" in (peer.error().get("message") or "")

    peer = connected(store)
    peer.subscribe("/queue/a", **{"prefetch-count": "0"})
    assert "prefetch-count" in (peer.error().get("message") or "")

    peer = connected(store, V11)
    peer.send("ACK", {"message-id": "m", "subscription": "ghost"})
    assert "ghost" in (peer.error().get("message") or "")


def test_unknown_transactions(store: MessageStore) -> None:
    for command, headers in (
        ("COMMIT", {"transaction": "t"}),
        ("ABORT", {"transaction": "t"}),
        ("SEND", {"destination": "/q", "transaction": "t"}),
    ):
        peer = connected(store)
        peer.send(command, headers)
        assert "'t'" in (peer.error().get("message") or "")
    peer = connected(store)
    peer.send("BEGIN", {"transaction": "t"})
    peer.send("BEGIN", {"transaction": "t"})
    assert "already open" in (peer.error().get("message") or "")


def test_ack_of_unknown_message(store: MessageStore) -> None:
    peer = connected(store)
    peer.send("ACK", {"id": "999"})
    assert "no unacknowledged message" in (peer.error().get("message") or "")
    peer = connected(store, V10)
    peer.send("ACK", {"message-id": "m-1"})
    assert "m-1" in (peer.error().get("message") or "")


def test_nack_in_stomp_10_is_an_error(store: MessageStore) -> None:
    peer = connected(store, V10)
    peer.send("NACK", {"message-id": "m"})
    assert "NACK" in (peer.error().get("message") or "")


def test_resource_limits() -> None:
    store = make(max_subscriptions=2, max_transactions=1, max_transaction_frames=2)
    peer = connected(store)
    peer.subscribe("/q/1", id="1")
    peer.subscribe("/q/2", id="2")
    peer.subscribe("/q/3", id="3")
    assert "too many subscriptions" in (peer.error().get("message") or "")

    peer = connected(store)
    peer.send("BEGIN", {"transaction": "a"})
    peer.send("BEGIN", {"transaction": "b"})
    assert "too many open transactions" in (peer.error().get("message") or "")

    peer = connected(store)
    peer.send("BEGIN", {"transaction": "a"})
    for _ in range(3):
        peer.send("SEND", {"destination": "/q", "transaction": "a"})
    assert "limit is 2" in (peer.error().get("message") or "")


def test_queue_full_rejects_the_send() -> None:
    # Room for the two of /queue/a and the one of /queue/b: each counts its body and
    # MESSAGE_OVERHEAD, each queue DESTINATION_OVERHEAD.
    limit = 4 * MESSAGE_OVERHEAD + 12 + 2 * DESTINATION_OVERHEAD
    store = make(max_queue=2, max_stored_bytes=limit)
    peer = connected(store)
    peer.send("SEND", {"destination": "/queue/a"}, b"1")
    peer.send("SEND", {"destination": "/queue/a"}, b"2")
    peer.send("SEND", {"destination": "/queue/a", "receipt": "r"}, b"3")
    error = peer.error()
    message = error.get("message") or ""
    # The ERROR says which limit was hit and how to raise it.
    assert "'/queue/a' is full" in message
    assert "max_queue limit is 2" in message
    assert "--max-queue" in message
    assert error.get("receipt-id") == "r"
    assert store.queue_depth("/queue/a") == 2

    peer = connected(store)
    peer.send("SEND", {"destination": "/queue/b"}, b"x" * 9)
    peer.send("SEND", {"destination": "/queue/c"}, b"x" * 2)
    message = peer.error().get("message") or ""
    assert "broker is full" in message
    assert f"max_stored_bytes limit is {limit}" in message
    assert "--max-stored-bytes" in message


def test_max_queue_defaults_to_a_million_and_keeps_its_old_name() -> None:
    assert BrokerConfig().max_queue == 1_000_000
    with pytest.warns(DeprecationWarning, match="max_queue") as warned:
        config = BrokerConfig(max_queue_depth=7)
    assert config.max_queue == 7
    # Where the config is made, whether the broker's store runs compiled or not.
    assert warned[0].filename == __file__


def test_a_dropping_topic_backlog_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    store = make(max_queue=2, write_buffer=1)
    peer = connected(store)
    peer.send("SUBSCRIBE", {"destination": "/topic/t", "id": "s"})
    sender = connected(store)
    with caplog.at_level(logging.WARNING, logger="stompy.testing"):
        for _ in range(6):
            sender.send("SEND", {"destination": "/topic/t"}, b"x")
    warnings = [r for r in caplog.records if "reached max_queue" in r.getMessage()]
    assert len(warnings) == 1
    assert "'s'" in warnings[0].getMessage()


def test_commit_over_capacity_applies_nothing() -> None:
    store = make(max_queue=2)
    peer = connected(store)
    peer.send("BEGIN", {"transaction": "t"})
    for _ in range(3):
        peer.send("SEND", {"destination": "/queue/a", "transaction": "t"}, b"x")
    peer.send("COMMIT", {"transaction": "t"})
    peer.error()
    assert store.queue_depth("/queue/a") == 0


def test_one_bad_client_does_not_disturb_others(store: MessageStore) -> None:
    good = connected(store)
    good.subscribe("/queue/a")
    bad = connected(store)
    bad.send("SEND", {"destination": "/queue/a"}, b"before")
    bad.raw(b"\x00\x01garbage\n\n")
    bad.error()
    other = connected(store)
    other.send("SEND", {"destination": "/queue/a"}, b"after")
    assert bodies(good.frames()) == [b"before", b"after"]
    assert good.client.state is ConnectionState.CONNECTED


# -- receipts, headers, bodies -------------------------------------------------------


def test_receipts_for_every_frame(store: MessageStore) -> None:
    peer = connected(store)
    steps: list[tuple[str, Headers]] = [
        ("SUBSCRIBE", {"destination": "/queue/a", "id": "1", "ack": "client"}),
        ("SEND", {"destination": "/queue/b"}),
        ("BEGIN", {"transaction": "t"}),
        ("SEND", {"destination": "/queue/b", "transaction": "t"}),
        ("COMMIT", {"transaction": "t"}),
        ("BEGIN", {"transaction": "u"}),
        ("ABORT", {"transaction": "u"}),
        ("UNSUBSCRIBE", {"id": "1"}),
        ("DISCONNECT", {}),
    ]
    for number, (command, headers) in enumerate(steps):
        peer.send(command, {**headers, "receipt": f"r{number}"})
        frame = peer.frame()
        assert frame.command == "RECEIPT"
        assert frame.get("receipt-id") == f"r{number}"
    assert peer.client.state is ConnectionState.CLOSING
    assert peer.client.finished


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("receipt", ["r-1", "é 7", "a:b", "back\\slash", "cr\rhere", "two\nlines"])
def test_a_receipt_is_written_as_encode_writes_it(
    store: MessageStore, version: str, receipt: str
) -> None:
    """The RECEIPT written without a Frame (an id with nothing to escape) and the one
    encoded (any other) are the bytes encode() makes; in 1.0, which cannot escape, a
    line break is flattened as in every frame the broker writes."""
    peer = connected(store, version)
    if version == V10 and ("\n" in receipt or "\r" in receipt):
        # The frame to send: a 1.0 header cannot hold a line break.
        peer.raw(b"SEND\ndestination:/queue/a\nreceipt:x\n\n\x00")
        peer.output()
        peer.client._send_receipt(receipt)
        flat = receipt.replace("\n", " ").replace("\r", " ")
        expected = encode(Frame("RECEIPT", (("receipt-id", flat),)), V10)
        assert peer.output() == expected
        return
    peer.send("SEND", {"destination": "/queue/a", "receipt": receipt})
    assert peer.output() == encode(Frame("RECEIPT", (("receipt-id", receipt),)), version)


def test_message_headers_and_body_pass_through(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a", id="sub-9")
    consumer.frames()
    producer = connected(store)
    body = b"\x00binary\x00\xff" * 100
    headers = {
        "destination": "/queue/a",
        "content-type": "application/octet-stream",
        "user:key": "value:with\nnewline\\",
        "ünïcode": "välue",
        "message-id": "forged",
        "receipt": "r",
        "content-length": str(len(body)),
    }
    producer.send("SEND", headers, body)
    message = consumer.frame()
    assert message.command == "MESSAGE"
    assert message.body == body
    assert message.get("destination") == "/queue/a"
    assert message.get("subscription") == "sub-9"
    assert (message.get("message-id") or "").startswith("message-")
    assert message.get("content-type") == "application/octet-stream"
    assert message.get("content-length") == str(len(body))
    assert message.get("user:key") == "value:with\nnewline\\"
    assert message.get("ünïcode") == "välue"
    assert message.get("receipt") is None
    assert [k for k, _ in message.headers].count("message-id") == 1
    assert message.get("ack") is None  # auto mode


def test_repeated_user_headers_keep_their_order(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    consumer.frames()
    producer = connected(store)
    producer.raw(b"SEND\ndestination:/queue/a\nx:1\nx:2\n\n\x00")
    message = consumer.frame()
    assert [v for k, v in message.headers if k == "x"] == ["1", "2"]


_TEXT = st.text(alphabet=st.sampled_from("ab:\\\n\ré-"), max_size=6)


@given(
    sender=st.sampled_from(VERSIONS),
    receiver=st.sampled_from(VERSIONS),
    user=st.lists(st.tuples(_TEXT.filter(bool), _TEXT), max_size=4),
    destination=st.sampled_from(["/queue/a", "/topic/t", "/queue/a:b", "/queue/\\x"]),
    sub_id=st.sampled_from(["s1", "s:2", "s\\3"]),
    ack=st.sampled_from(["auto", "client-individual"]),
    body=st.sampled_from([b"", b"x", b"\x00nul\x00"]),
    layout=st.sampled_from(
        ["usual", "destination-last", "no-length", "length-early", "receipt", "reply-to"]
    ),
)
def test_a_message_is_written_as_encode_writes_it(
    sender: str,
    receiver: str,
    user: list[tuple[str, str]],
    destination: str,
    sub_id: str,
    ack: str,
    body: bytes,
    layout: str,
) -> None:
    """Whatever the SEND held and however it was laid out, the MESSAGE (and its
    redelivery) is the bytes encode() makes of its headers in the subscriber's version,
    a 1.0 subscriber's line breaks flattened: a SEND kept as the lines that arrived is
    spliced into the same bytes as one kept as pairs."""
    store = make()
    consumer = connected(store, receiver)
    consumer.subscribe(destination, id=sub_id, ack=ack)
    consumer.frames()
    producer = connected(store, sender)
    headers = [("destination", destination), *user]
    if layout == "destination-last":
        headers = [*user, ("destination", destination)]
    elif layout == "receipt":
        headers.append(("receipt", "r"))
    elif layout == "reply-to":
        headers.insert(1, ("reply-to", "/queue/r"))  # passed through: no temporary queue
    try:
        data = encode(Frame("SEND", tuple(headers), body), sender)
    except ValueError:
        return  # not a SEND this version can carry
    if layout == "no-length":
        data = data.replace(b"\ncontent-length:%d\n" % len(body), b"\n")
        if b"\x00" in body:
            return
    elif layout == "length-early" and body:
        # content-length right after the destination, as some clients write it
        head, _, rest = data.partition(b"\n\n")
        lines = head.split(b"\n")
        lines.insert(2, lines.pop())
        data = b"\n".join(lines) + b"\n\n" + rest
    producer.raw(data)
    parsed = FrameParser(sender).parse(data)[0]
    passed = [(k, v) for k, v in parsed.headers if k not in _BROKER_HEADER_NAMES]
    output = consumer.output()
    message = FrameParser(receiver).parse(output)[0]
    control = [("destination", destination), ("message-id", message.get("message-id") or "")]
    control.append(("subscription", sub_id))
    if ack != "auto" and receiver == V12:
        control.append(("ack", message.get("ack") or ""))
    expected = Frame("MESSAGE", (*control, *passed), body)
    assert output == consumer.client._encode(expected)
    if ack == "auto" or receiver == V10:
        return
    consumer.send("NACK", ack_headers(receiver, message))
    output = consumer.output()
    again = FrameParser(receiver).parse(output)[0]
    control = control[:3]
    if receiver == V12:
        control.append(("ack", again.get("ack") or ""))
    control.append(("redelivered", "true"))
    expected = Frame("MESSAGE", (*control, *passed), body)
    assert output == consumer.client._encode(expected)


_BROKER_HEADER_NAMES = frozenset(
    {"destination", "transaction", "receipt", "content-length"}
    | {"message-id", "subscription", "ack", "redelivered"}
)


def test_message_ids_are_unique(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    producer = connected(store)
    for _ in range(50):
        producer.send("SEND", {"destination": "/queue/a"}, b"x")
    ids = [f.get("message-id") for f in consumer.frames() if f.command == "MESSAGE"]
    assert len(ids) == 50
    assert len(set(ids)) == 50


def test_stomp_10_subscriber_gets_flattened_newlines(store: MessageStore) -> None:
    old = connected(store, V10)
    old.subscribe("/queue/a")
    old.frames()
    new = connected(store)
    new.send("SEND", {"destination": "/queue/a", "note": "two\nlines", "a:b": "c"}, b"x")
    message = old.frame()
    assert message.get("note") == "two lines"
    assert message.get("a_b") == "c"


def test_stomp_10_subscribe_without_id_and_unsubscribe_by_destination(store: MessageStore) -> None:
    peer = connected(store, V10)
    peer.send("SUBSCRIBE", {"destination": "/queue/a", "receipt": "r"})
    assert peer.frame().command == "RECEIPT"
    peer.send("SEND", {"destination": "/queue/a"}, b"x")
    message = peer.frame()
    assert message.get("subscription") == "/queue/a"
    peer.send("UNSUBSCRIBE", {"destination": "/queue/a", "receipt": "u"})
    assert peer.frame().command == "RECEIPT"
    peer.send("UNSUBSCRIBE", {"destination": "/queue/a"})
    assert "no subscription" in (peer.error().get("message") or "")


# -- queues and topics ---------------------------------------------------------------


def test_queue_keeps_messages_until_someone_subscribes(store: MessageStore) -> None:
    producer = connected(store)
    for n in range(3):
        producer.send("SEND", {"destination": "/queue/a"}, str(n).encode())
    assert store.queue_depth("/queue/a") == 3
    assert store.destinations() == ("/queue/a",)
    consumer = connected(store)
    consumer.subscribe("/queue/a", receipt="r")
    frames = consumer.frames()
    assert frames[0].command == "RECEIPT"  # the receipt comes before the backlog
    assert bodies(frames) == [b"0", b"1", b"2"]
    assert store.queue_depth("/queue/a") == 0


def test_queue_round_robin(store: MessageStore) -> None:
    consumers = [connected(store) for _ in range(3)]
    for consumer in consumers:
        consumer.subscribe("/queue/rr")
        consumer.frames()
    producer = connected(store)
    for n in range(9):
        producer.send("SEND", {"destination": "/queue/rr"}, str(n).encode())
    received = [bodies(c.frames()) for c in consumers]
    assert received == [[b"0", b"3", b"6"], [b"1", b"4", b"7"], [b"2", b"5", b"8"]]


def test_other_prefixes_are_queues(store: MessageStore) -> None:
    producer = connected(store)
    producer.send("SEND", {"destination": "/exchange/x"}, b"kept")
    assert store.queue_depth("/exchange/x") == 1


def test_topic_fans_out_and_drops_without_subscribers(store: MessageStore) -> None:
    producer = connected(store)
    producer.send("SEND", {"destination": "/topic/t"}, b"lost")
    assert store.stats.messages_dropped == 1
    assert store.destinations() == ()
    subscribers = [connected(store) for _ in range(3)]
    for subscriber in subscribers:
        subscriber.subscribe("/topic/t")
        subscriber.frames()
    producer.send("SEND", {"destination": "/topic/t"}, b"all")
    assert [bodies(s.frames()) for s in subscribers] == [[b"all"]] * 3


def test_unsubscribe_stops_delivery(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a", id="1")
    consumer.send("UNSUBSCRIBE", {"id": "1"})
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/a"}, b"x")
    assert consumer.frames() == []
    assert store.queue_depth("/queue/a") == 1


# -- acknowledgement -----------------------------------------------------------------


def deliver(
    store: MessageStore, consumer: Peer, count: int, destination: str = "/queue/a"
) -> list[Frame]:
    producer = connected(store)
    for n in range(count):
        producer.send("SEND", {"destination": destination}, str(n).encode())
    return [f for f in consumer.frames() if f.command == "MESSAGE"]


def ack_headers(version: str, message: Frame) -> Headers:
    if version == V12:
        return {"id": message.get("ack") or ""}
    if version == V11:
        return {
            "message-id": message.get("message-id") or "",
            "subscription": message.get("subscription") or "",
        }
    return {"message-id": message.get("message-id") or ""}


@pytest.mark.parametrize("version", VERSIONS)
def test_client_ack_is_cumulative(store: MessageStore, version: str) -> None:
    consumer = connected(store, version)
    consumer.subscribe("/queue/a", ack="client")
    messages = deliver(store, consumer, 3)
    assert (messages[0].get("ack") is not None) == (version == V12)
    assert store.unacked_count() == 3
    consumer.send("ACK", ack_headers(version, messages[1]))
    assert store.unacked_count("/queue/a") == 1
    assert store.stats.messages_acked == 2
    consumer.send("ACK", {**ack_headers(version, messages[2]), "receipt": "r"})
    assert consumer.frame().command == "RECEIPT"
    assert store.unacked_count() == 0


@pytest.mark.parametrize("version", [V11, V12])
def test_client_individual_ack_is_not_cumulative(store: MessageStore, version: str) -> None:
    consumer = connected(store, version)
    consumer.subscribe("/queue/a", ack="client-individual")
    messages = deliver(store, consumer, 3)
    consumer.send("ACK", ack_headers(version, messages[1]))
    assert store.unacked_count() == 2
    consumer.send("ACK", ack_headers(version, messages[1]))  # twice: no longer pending
    assert consumer.error()


@pytest.mark.parametrize("version", [V11, V12])
def test_nack_redelivers(store: MessageStore, version: str) -> None:
    consumer = connected(store, version)
    consumer.subscribe("/queue/a", ack="client-individual")
    (message,) = deliver(store, consumer, 1)
    consumer.send("NACK", ack_headers(version, message))
    again = consumer.frame()
    assert again.body == message.body
    assert again.get("message-id") == message.get("message-id")
    assert again.get("redelivered") == "true"
    assert store.stats.messages_nacked == 1
    assert store.stats.messages_redelivered == 1


def test_nack_in_client_mode_is_cumulative_and_keeps_order(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client")
    messages = deliver(store, consumer, 3)
    consumer.send("NACK", ack_headers(V12, messages[1]))
    assert bodies(consumer.frames()) == [b"0", b"1"]
    assert store.unacked_count() == 3


def test_nack_on_a_topic_redelivers_to_the_same_subscription(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/topic/t", ack="client-individual")
    (message,) = deliver(store, consumer, 1, "/topic/t")
    consumer.send("NACK", ack_headers(V12, message))
    again = consumer.frame()
    assert (again.body, again.get("redelivered")) == (message.body, "true")


def test_auto_mode_needs_no_ack(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    deliver(store, consumer, 2)
    assert store.unacked_count() == 0
    consumer.client.close()
    assert store.queue_depth("/queue/a") == 0


@pytest.mark.parametrize("how", ["eof", "disconnect", "error", "unsubscribe"])
def test_unacked_messages_return_to_the_queue(store: MessageStore, how: str) -> None:
    first = connected(store)
    first.subscribe("/queue/a", ack="client", id="1")
    messages = deliver(store, first, 3)
    first.send("ACK", ack_headers(V12, messages[0]))
    if how == "eof":
        first.client.receive_eof()
        assert first.client.state is ConnectionState.CLOSED
        assert first.client.id not in store.connections
    elif how == "disconnect":
        first.send("DISCONNECT", {})
    elif how == "error":
        first.raw(b"junk\n\n\x00")
    else:
        first.send("UNSUBSCRIBE", {"id": "1"})
    assert store.queue_depth("/queue/a") == 2
    assert store.unacked_count() == 0
    second = connected(store)
    second.subscribe("/queue/a")
    frames = second.frames()
    assert bodies(frames) == [b"1", b"2"]
    assert all(f.get("redelivered") == "true" for f in frames)


def test_unacked_topic_messages_are_dropped_on_close(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/topic/t", ack="client")
    deliver(store, consumer, 2, "/topic/t")
    consumer.client.close()
    assert store.stats.messages_dropped == 2
    assert store.destinations() == ()


def test_requeued_messages_go_to_another_subscriber(store: MessageStore) -> None:
    first = connected(store)
    first.subscribe("/queue/a", ack="client")
    second = connected(store)
    second.subscribe("/queue/a", ack="client")
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/a"}, b"only")
    assert bodies(first.frames()) == [b"only"]
    first.client.receive_eof()
    (again,) = second.frames()
    assert (again.body, again.get("redelivered")) == (b"only", "true")


# -- transactions --------------------------------------------------------------------


def test_transactional_sends_take_effect_at_commit(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    producer = connected(store)
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/a", "transaction": "t"}, b"1")
    producer.send("SEND", {"destination": "/topic/x", "transaction": "t"}, b"t")
    producer.send("SEND", {"destination": "/queue/a", "transaction": "t"}, b"2")
    assert consumer.frames() == []
    assert producer.client.info().transactions == ("t",)
    producer.send("COMMIT", {"transaction": "t"})
    assert bodies(consumer.frames()) == [b"1", b"2"]
    assert producer.client.info().transactions == ()


def test_transactional_sends_are_dropped_at_abort(store: MessageStore) -> None:
    producer = connected(store)
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/a", "transaction": "t"}, b"1")
    producer.send("ABORT", {"transaction": "t"})
    assert store.queue_depth("/queue/a") == 0
    producer.send("BEGIN", {"transaction": "t"})  # the id is free again
    producer.send("SEND", {"destination": "/queue/a", "transaction": "t"}, b"2")
    producer.client.receive_eof()  # an open transaction dies with its connection
    assert store.queue_depth("/queue/a") == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_transactional_acks(store: MessageStore, version: str) -> None:
    consumer = connected(store, version)
    consumer.subscribe("/queue/a", ack="client")
    messages = deliver(store, consumer, 2)
    consumer.send("BEGIN", {"transaction": "t"})
    consumer.send("ACK", {**ack_headers(version, messages[0]), "transaction": "t"})
    assert store.unacked_count() == 2
    consumer.send("ABORT", {"transaction": "t"})
    assert store.unacked_count() == 2  # still pending: it can be acked again
    consumer.send("BEGIN", {"transaction": "u"})
    consumer.send("ACK", {**ack_headers(version, messages[1]), "transaction": "u"})
    consumer.send("COMMIT", {"transaction": "u"})
    assert store.unacked_count() == 0


def test_transactional_nack_and_ack_settled_meanwhile(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual")
    messages = deliver(store, consumer, 2)
    consumer.send("BEGIN", {"transaction": "t"})
    consumer.send("NACK", {**ack_headers(V12, messages[0]), "transaction": "t"})
    consumer.send("ACK", {**ack_headers(V12, messages[1]), "transaction": "t"})
    consumer.send("ACK", ack_headers(V12, messages[1]))  # settled outside first
    consumer.send("COMMIT", {"transaction": "t", "receipt": "c"})
    frames = consumer.frames()
    assert frames[0].command == "MESSAGE"  # the NACKed one, redelivered at COMMIT
    assert frames[0].get("redelivered") == "true"
    assert frames[1].get("receipt-id") == "c"
    assert store.stats.messages_acked == 1


# -- flow control --------------------------------------------------------------------


def test_prefetch_limits_unacked_in_flight() -> None:
    store = make(prefetch=2)
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client-individual")
    messages = deliver(store, consumer, 5)
    assert len(messages) == 2
    assert store.queue_depth("/queue/a") == 3
    consumer.send("ACK", ack_headers(V12, messages[0]))
    assert bodies(consumer.frames()) == [b"2"]
    info = consumer.client.info().subscriptions[0]
    assert (info.prefetch, info.unacked) == (2, 2)


def test_prefetch_count_header_overrides(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a", ack="client", **{"prefetch-count": "1"})
    assert len(deliver(store, consumer, 3)) == 1


def test_slow_reader_output_is_bounded() -> None:
    store = make(write_buffer=1000)
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    producer = connected(store)
    for _ in range(100):
        producer.send("SEND", {"destination": "/queue/a"}, b"x" * 100)
    # Nothing was drained: deliveries stopped once the output crossed the bound.
    assert consumer.client.buffered < 1000 + 200
    assert not consumer.client.wants_data
    waiting = store.queue_depth("/queue/a")
    assert waiting > 80
    # Each drain makes room for more, until everything arrived.
    total = 0
    for _ in range(100):
        got = bodies(consumer.frames())
        if not got:
            break
        total += len(got)
        assert consumer.client.buffered < 1200
    assert total == 100
    assert consumer.client.wants_data


def test_topic_backlog_is_bounded() -> None:
    store = make(write_buffer=100, max_queue=5)
    consumer = connected(store)
    consumer.subscribe("/topic/t")
    producer = connected(store)
    for n in range(20):
        producer.send("SEND", {"destination": "/topic/t"}, b"%02d" % n + b"x" * 98)
    assert store.queue_depth("/topic/t") == 5
    assert store.stats.messages_dropped == 14  # one went out, five wait
    received: list[bytes] = []
    for _ in range(20):
        got = bodies(consumer.frames())
        if not got:
            break
        received.extend(b[:2] for b in got)
    assert received == [b"00", b"15", b"16", b"17", b"18", b"19"]


def test_client_sending_without_reading_gets_backpressure() -> None:
    store = make(write_buffer=200)
    peer = connected(store)
    for n in range(20):
        peer.send("BEGIN", {"transaction": f"t{n}", "receipt": f"r{n}"})
    assert not peer.client.wants_data  # the transport stops reading
    peer.output()
    assert peer.client.wants_data


# -- heart-beats, pause, raw output --------------------------------------------------


def test_heart_beats_both_ways_with_a_fake_clock() -> None:
    store = make(heartbeats=(100, 100), heartbeat_tolerance=2.0)
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "500,1000"})
    assert peer.frame().get("heart-beat") == "100,100"
    client = peer.client
    assert client.heartbeats == (1000, 500)  # (to the client, from the client)
    assert client.next_deadline() == 1.0
    client.handle_timer(0.5)
    assert peer.output(0.5) == b""
    peer.raw(b"\n", now=0.9)  # the client's beat keeps it alive
    client.handle_timer(1.0)
    assert peer.output(1.0) == b"\n"
    assert client.next_deadline() == pytest.approx(1.9)
    client.handle_timer(1.8)
    assert client.state is ConnectionState.CONNECTED
    assert peer.output(1.8) == b""
    client.handle_timer(1.9)  # 1.0 s of silence = 500 ms * 2.0
    error = peer.error()
    assert "heart-beat timeout" in (error.get("message") or "")
    assert store.stats.heartbeat_timeouts == 1
    assert client.next_deadline() is None


def test_beat_only_when_nothing_else_was_sent() -> None:
    store = make(heartbeats=(100, 0))
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "0,100"})
    peer.frames(0.0)
    peer.subscribe("/queue/a")
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/a"}, b"x")
    peer.client.handle_timer(0.1)  # a MESSAGE is waiting: it counts as the beat
    assert bodies(peer.frames(0.1)) == [b"x"]
    assert peer.client.next_deadline() == pytest.approx(0.2)


def test_no_heart_beats_when_either_side_declines() -> None:
    store = make(heartbeats=(0, 0))
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "100,100"})
    assert peer.frame().get("heart-beat") == "0,0"
    assert peer.client.next_deadline() is None
    peer.client.handle_timer(1000.0)
    assert peer.output() == b""


def test_pause_stops_deliveries_and_timers() -> None:
    store = make(heartbeats=(100, 100))
    peer = Peer(store)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "100,100"})
    peer.frames()
    peer.subscribe("/queue/a")
    client = peer.client
    client.pause()
    assert client.info().paused
    assert client.next_deadline() is None
    assert not client.wants_data
    client.handle_timer(10.0)
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/a"}, b"x")
    assert peer.frames() == []
    client.resume(10.0)
    client.resume(10.0)  # idempotent
    assert bodies(peer.frames(10.0)) == [b"x"]
    assert client.next_deadline() == pytest.approx(10.1)


def test_send_raw(store: MessageStore) -> None:
    peer = connected(store)
    peer.client.send_raw(b"garbage\x00")
    assert peer.output() == b"garbage\x00"
    peer.client.close()
    peer.client.send_raw(b"more")
    assert peer.output() == b""


def test_connection_info_and_stats(store: MessageStore) -> None:
    peer = connected(store, V11, login="me")
    peer.subscribe("/queue/a", ack="client", id="7")
    deliver(store, peer, 1)
    (info, producer_info) = store.connection_infos()
    assert info.session == peer.client.id
    assert (info.version, info.login, info.state, info.peer) == ("1.1", "me", "CONNECTED", "peer")
    assert info.subscriptions[0].id == "7"
    assert info.subscriptions[0].unacked == 1
    assert producer_info.subscriptions == ()
    stats = store.stats
    assert (stats.connections_opened, stats.connections_open) == (2, 2)
    assert (stats.messages_received, stats.messages_delivered) == (1, 1)
    store.record_internal_error()
    assert store.stats.internal_errors == 1


def test_ready_sessions_are_reported_once(store: MessageStore) -> None:
    consumer = connected(store)
    consumer.subscribe("/queue/a")
    producer = connected(store)
    store.pop_ready()
    producer.send("SEND", {"destination": "/queue/a"}, b"x")
    assert store.pop_ready() == [consumer.client]
    assert store.pop_ready() == []


@pytest.mark.parametrize(
    "options",
    [
        {"versions": ()},
        {"versions": ("1.3",)},
        {"heartbeats": (-1, 0)},
        {"heartbeat_tolerance": 0.5},
        {"prefetch": 0},
        {"write_buffer": 0},
        {"connect_timeout": 0},
        {"server_name": "a\nb"},
    ],
)
def test_bad_config(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        make(**options)


def test_config_normalises() -> None:
    config = BrokerConfig(versions=("1.2", "1.0"), virtual_hosts=["a"], users={"u": "p"})
    assert config.versions == ("1.0", "1.2")
    assert config.virtual_hosts == frozenset({"a"})


def test_broker_options_mirror_the_config_fields() -> None:
    from dataclasses import fields

    from stompy.testing import BrokerOptions

    names = {f.name for f in fields(BrokerConfig)} | {"max_queue_depth"}  # its old name
    assert set(BrokerOptions.__annotations__) == names


def test_round_robin_survives_unsubscribes(store: MessageStore) -> None:
    a, b, c = (connected(store) for _ in range(3))
    for peer in (a, b, c):
        peer.subscribe("/queue/rr", id="s")
        peer.frames()
    producer = connected(store)
    producer.send("SEND", {"destination": "/queue/rr"}, b"0")  # to a; b is next
    a.send("UNSUBSCRIBE", {"id": "s"})
    producer.send("SEND", {"destination": "/queue/rr"}, b"1")
    producer.send("SEND", {"destination": "/queue/rr"}, b"2")
    assert (bodies(a.frames()), bodies(b.frames()), bodies(c.frames())) == (
        [b"0"],
        [b"1"],
        [b"2"],
    )
    c.send("UNSUBSCRIBE", {"id": "s"})
    b.send("UNSUBSCRIBE", {"id": "s"})
    assert store.destinations() == ()


def test_empty_input_changes_nothing(store: MessageStore) -> None:
    peer = connected(store)
    peer.raw(b"")
    assert peer.frames() == []
    assert peer.client.state is ConnectionState.CONNECTED


_COMMANDS = ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT"]
_HEADER_NAMES = ["destination", "id", "ack", "transaction", "receipt", "message-id", "subscription"]


@given(
    version=st.sampled_from(VERSIONS),
    frames=st.lists(
        st.tuples(
            st.sampled_from(_COMMANDS),
            st.dictionaries(
                st.sampled_from(_HEADER_NAMES),
                st.sampled_from(["/queue/a", "/topic/b", "1", "2", "client", "auto", "t", ""]),
                max_size=4,
            ),
            st.binary(max_size=8),
        ),
        max_size=12,
    ),
)
def test_any_frame_sequence_gets_answers_never_exceptions(
    version: str, frames: list[tuple[str, Headers, bytes]]
) -> None:
    store = make()
    peer = connected(store, version)
    other = connected(store, version)
    other.subscribe("/queue/a", ack="client")
    for command, headers, body in frames:
        peer.send(command, headers, body if command == "SEND" else b"")
        for frame in peer.frames():
            assert frame.command in ("RECEIPT", "MESSAGE", "ERROR")
            if frame.command == "ERROR":
                assert frame.get("message")
        if peer.client.state is not ConnectionState.CONNECTED:
            assert peer.client.state is ConnectionState.CLOSING
            break
    peer.client.close()
    other.client.close()
    assert store.connections == {}
    assert store.unacked_count() == 0


@given(data=st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    store = make()
    peer = connected(store)
    peer.raw(data)
    for frame in peer.frames():
        assert frame.command in ("RECEIPT", "MESSAGE", "ERROR")
    assert peer.client.state in (ConnectionState.CONNECTED, ConnectionState.CLOSING)

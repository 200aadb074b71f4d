"""The sans-IO client state machine, example by example (no I/O, no clock)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from stompy._core.encoder import encode, encode_send
from stompy._core.events import (
    Connected,
    ConnectionClosed,
    Error,
    Event,
    MessageReceived,
    Receipt,
)
from stompy._core.frames import SEND_RESERVED, Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy._core.protocol import ClientProtocol, State, SubscriptionInfo, check_send
from stompy.errors import (
    ConfigurationError,
    FrameTooLarge,
    LocalProtocolError,
    RemoteProtocolError,
)

# -- helpers (also used by the other protocol test modules) ---------------------------


def server_bytes(
    command: str, headers: tuple[tuple[str, str], ...] = (), body: bytes = b"", version: str = "1.2"
) -> bytes:
    return encode(Frame(command, headers, body), version)


def connected(
    version: str = "1.2",
    *,
    versions: tuple[str, ...] = ("1.0", "1.1", "1.2"),
    heartbeats: tuple[int, int] = (0, 0),
    server_heartbeat: str | None = None,
    tolerance: float = 2.0,
    now: float = 0.0,
    strict: bool = True,
    limits: FrameLimits | None = None,
    message_class: type[MessageReceived] = MessageReceived,
) -> ClientProtocol:
    """A protocol that sent CONNECT and got CONNECTED; its outgoing buffer is drained."""
    proto = ClientProtocol(
        versions=versions,
        heartbeats=heartbeats,
        heartbeat_tolerance=tolerance,
        strict=strict,
        limits=limits or FrameLimits(),
        message_class=message_class,
    )
    proto.connect("/")
    proto.data_to_send()
    headers = [("version", version), ("server", "test/1"), ("session", "s-1")]
    if server_heartbeat is not None:
        headers.append(("heart-beat", server_heartbeat))
    proto.receive_data(server_bytes("CONNECTED", tuple(headers)), now)
    event = proto.next_event()
    assert isinstance(event, Connected)
    proto.start_heartbeats(now)
    return proto


def sent(proto: ClientProtocol) -> list[Frame]:
    """Parse what the protocol wants to write."""
    return FrameParser(proto.version).parse(proto.data_to_send())


def events(proto: ClientProtocol) -> list[Event]:
    out: list[Event] = []
    for _ in range(1000):
        event = proto.next_event()
        if event is None:
            return out
        out.append(event)
    raise AssertionError("next_event() never returned None")


def deliver(
    proto: ClientProtocol, command: str, *headers: tuple[str, str], body: bytes = b""
) -> Event:
    proto.receive_data(server_bytes(command, headers, body, proto.version))
    event = proto.next_event()
    assert event is not None
    return event


def message(
    proto: ClientProtocol, sub: str, mid: str = "m-1", ack: str | None = "a-1"
) -> MessageReceived:
    headers = [("destination", "/q"), ("message-id", mid), ("subscription", sub)]
    if ack is not None:
        headers.append(("ack", ack))
    event = deliver(proto, "MESSAGE", *headers, body=b"hi")
    assert isinstance(event, MessageReceived)
    return event


def state(proto: ClientProtocol) -> State:
    """The state, read through a call so that mypy does not narrow it across intents."""
    return proto.state


def snapshot(proto: ClientProtocol) -> tuple[Any, ...]:
    """Everything an intent may change (white-box, so that "nothing" means nothing)."""
    return (
        proto.state,
        proto.version,
        dict(proto.subscriptions),
        proto.transactions,
        proto.pending_receipts,
        list(proto._out),
        proto._next_id,
        dict(proto._closed_subscriptions),
        proto._disconnect_receipt,
    )


# -- construction and CONNECT ----------------------------------------------------------


def test_connect_frame() -> None:
    proto = ClientProtocol()
    assert proto.state is State.IDLE
    proto.connect("vhost", login="me", passcode="pw", headers={"client-id": "c1"})
    assert state(proto) is State.CONNECTING
    (frame,) = FrameParser("1.0").parse(proto.data_to_send())
    assert frame == Frame(
        "CONNECT",
        (
            ("accept-version", "1.0,1.1,1.2"),
            ("host", "vhost"),
            ("login", "me"),
            ("passcode", "pw"),
            ("client-id", "c1"),
        ),
    )


def test_connect_with_heartbeats_and_the_stomp_command() -> None:
    proto = ClientProtocol(versions=["1.2", "1.1"], heartbeats=(4000, 5000))
    proto.connect("h", headers=[("x", "1"), ("x", "2")], command="STOMP")
    (frame,) = FrameParser().parse(proto.data_to_send())
    assert frame == Frame(
        "STOMP",
        (
            ("accept-version", "1.1,1.2"),
            ("host", "h"),
            ("heart-beat", "4000,5000"),
            ("x", "1"),
            ("x", "2"),
        ),
    )


def test_connect_offering_only_10_sends_no_accept_version() -> None:
    # "If the accept-version header is missing, it means that the client only
    # supports version 1.0 of the protocol."
    proto = ClientProtocol(versions=["1.0"])
    proto.connect("h")
    assert proto.data_to_send() == b"CONNECT\nhost:h\n\n\x00"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"versions": []},
        {"versions": ["1.3"]},
        {"versions": ["1.2", "2.0"]},
        {"heartbeats": (-1, 0)},
        {"heartbeats": (0, -5)},
        {"heartbeat_tolerance": 0.5},
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the messages vary
        ClientProtocol(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"command": "SEND"}, "CONNECT or STOMP"),
        ({"headers": {"host": "other"}}, "'host' is set by stompy"),
        ({"headers": {"heart-beat": "1,1"}}, "'heart-beat' is set by stompy"),
        ({"headers": {"accept-version": "1.2"}}, "'accept-version'"),
        ({"login": "a\nb"}, "line break"),
        ({"headers": {"a:b": "v"}}, "cannot be sent"),
    ],
)
def test_bad_connect_changes_nothing(kwargs: dict[str, Any], what: str) -> None:
    proto = ClientProtocol()
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match=what):
        proto.connect("h", **kwargs)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""
    proto.connect("h")  # still usable
    assert proto.state is State.CONNECTING


def test_connected_event() -> None:
    proto = ClientProtocol(heartbeats=(1000, 2000))
    proto.connect("/")
    frame = Frame(
        "CONNECTED",
        (("version", "1.1"), ("server", "b/2"), ("session", "abc"), ("heart-beat", "3000,500")),
    )
    proto.receive_data(encode(frame, "1.1"))
    assert events(proto) == [Connected("1.1", "b/2", "abc", (1000, 3000), frame)]
    assert proto.state is State.CONNECTED
    assert proto.version == "1.1"
    assert (proto.server, proto.session) == ("b/2", "abc")
    assert proto.negotiated_heartbeats == (1000, 3000)


def test_connected_without_version_is_10() -> None:
    proto = ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nsession:1\n\n\x00")
    (event,) = events(proto)
    assert isinstance(event, Connected)
    assert event.version == "1.0"
    assert event.server is None
    assert event.heartbeats == (0, 0)


@pytest.mark.parametrize(
    ("offered", "reply"),
    [
        (("1.1", "1.2"), b"CONNECTED\n\n\x00"),  # a 1.0 server
        (("1.0", "1.1"), b"CONNECTED\nversion:1.2\n\n\x00"),
        (("1.2",), b"CONNECTED\nversion:1.1,1.2\n\n\x00"),
        (("1.2",), b"CONNECTED\nversion:2.0\n\n\x00"),
    ],
)
def test_a_version_we_did_not_offer_is_a_protocol_error(
    offered: tuple[str, ...], reply: bytes
) -> None:
    proto = ClientProtocol(versions=offered)
    proto.connect("/")
    proto.receive_data(reply)
    with pytest.raises(RemoteProtocolError, match="did not offer"):
        proto.next_event()
    assert proto.state is State.CLOSED
    assert proto.next_event() is None


def test_crlf_connected_then_frames_in_the_negotiated_version() -> None:
    proto = ClientProtocol()
    proto.connect("/")
    proto.receive_data(
        b"CONNECTED\r\nversion:1.2\r\n\r\n\x00\r\n"
        b"ERROR\r\nmessage:a\\cb\\r\r\ncontent-length:2\r\n\r\nno\x00"
    )
    connected_event, error = events(proto)
    assert isinstance(connected_event, Connected)
    assert isinstance(error, Error)
    assert error.message == "a:b\r"  # unescaped with the 1.2 rules
    assert error.frame.body == b"no"


def test_the_frame_right_after_connected_uses_the_new_version() -> None:
    proto = ClientProtocol(versions=["1.0", "1.1"])
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nversion:1.0\n\n\x00ERROR\nmessage:a\\cb\n\n\x00")
    _, error = events(proto)
    assert isinstance(error, Error)
    assert error.message == "a\\cb"  # 1.0: no unescaping


def test_crlf_error_answering_connect() -> None:
    # Before CONNECTED the version is unknown; a CRLF ERROR must still be understood.
    proto = ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"ERROR\r\nmessage:bad login\r\ncontent-length:3\r\n\r\nno!\x00")
    proto.receive_eof()
    error, closed = events(proto)
    assert isinstance(error, Error)
    assert error.message == "bad login"
    assert error.frame.body == b"no!"
    assert closed == ConnectionClosed(expected=True)
    assert proto.state is State.CLOSED


def test_a_second_connected_is_a_protocol_error() -> None:
    proto = connected()
    proto.receive_data(server_bytes("CONNECTED", (("version", "1.2"),)))
    with pytest.raises(RemoteProtocolError, match="unexpected CONNECTED"):
        proto.next_event()
    assert proto.state is State.CLOSED


def test_frames_before_connect_are_protocol_errors() -> None:
    proto = ClientProtocol()
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    with pytest.raises(RemoteProtocolError):
        proto.next_event()
    assert proto.state is State.CLOSED


def test_heartbeats_before_connect_are_fine() -> None:
    proto = ClientProtocol()
    proto.receive_data(b"\n\n")
    assert proto.next_event() is None
    assert proto.state is State.IDLE


@pytest.mark.parametrize(
    "frame",
    [
        b"MESSAGE\ndestination:/q\nmessage-id:1\nsubscription:1\n\n\x00",
        b"RECEIPT\nreceipt-id:r-1\n\n\x00",
    ],
)
def test_frames_while_connecting_are_protocol_errors(frame: bytes) -> None:
    proto = ClientProtocol()
    proto.connect("/")
    proto.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match="in state CONNECTING"):
        proto.next_event()


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE", "ACK", "CONNECT", "STOMP", "DISCONNECT"])
def test_client_commands_from_the_server_are_protocol_errors(command: str) -> None:
    proto = connected()
    proto.receive_data(server_bytes(command))
    with pytest.raises(RemoteProtocolError, match="only clients send"):
        proto.next_event()
    assert proto.state is State.CLOSED


def test_garbage_is_a_protocol_error_and_closes() -> None:
    proto = connected()
    proto.receive_data(b"HELLO\n\n\x00")
    with pytest.raises(RemoteProtocolError):
        proto.next_event()
    assert proto.state is State.CLOSED
    proto.receive_data(b"MESSAGE\n\n\x00")
    assert proto.next_event() is None
    with pytest.raises(LocalProtocolError):
        proto.send("/q", b"x")


def test_limits_apply_to_received_frames() -> None:
    proto = connected(limits=FrameLimits(max_body=10))
    proto.subscribe("/q")
    proto.receive_data(b"MESSAGE\nsubscription:1\ncontent-length:11\n\n")
    with pytest.raises(FrameTooLarge):
        proto.next_event()


# -- SEND ----------------------------------------------------------------------------


def test_send_bytes() -> None:
    proto = connected()
    assert proto.send("/q", b"\x00\x01", headers={"persistent": "true"}) is None
    assert sent(proto) == [
        Frame(
            "SEND",
            (("destination", "/q"), ("persistent", "true"), ("content-length", "2")),
            b"\x00\x01",
        )
    ]


def test_send_str_is_utf8_text() -> None:
    proto = connected()
    proto.send("/q", "h\u00e9")
    (frame,) = sent(proto)
    assert frame.body == "h\u00e9".encode()
    assert frame.get("content-type") == "text/plain;charset=utf-8"


def test_send_content_type_choices() -> None:
    proto = connected()
    proto.send("/q", "{}", content_type="application/json")
    proto.send("/q", "x", headers={"content-type": "text/x-mine"})
    # Two values: one would be dropped without a word. Nothing is queued.
    for headers in ({"content-type": "a/b"}, [("content-type", "a/b")]):
        with pytest.raises(ConfigurationError, match="content_type"):
            proto.send("/q", b"x", headers=headers, content_type="c/d", receipt=True)
    proto.send("/q", b"x", headers={"content-type": "c/d"}, content_type="c/d")
    proto.send("/q", b"x")
    types = [f.headers for f in sent(proto)]
    assert [dict(h).get("content-type") for h in types] == [
        "application/json",
        "text/x-mine",
        "c/d",
        None,
    ]
    assert sum(k == "content-type" for k, _ in types[2]) == 1
    assert [dict(h).get("receipt") for h in types] == [None] * 4


def test_send_with_transaction_and_receipts() -> None:
    proto = connected()
    tx = proto.begin()
    assert proto.send("/q", b"x", transaction=tx, receipt=True) == "r-2"
    assert proto.send("/q", b"y", receipt="mine") == "mine"
    frames = sent(proto)
    assert frames[1].headers[:3] == (("destination", "/q"), ("transaction", tx), ("receipt", "r-2"))
    assert frames[2].get("receipt") == "mine"
    assert proto.pending_receipts == {"r-2", "mine"}


def test_user_content_length_is_taken_when_true_and_refused_when_not() -> None:
    """A caller's content-length that says the body's length is written once; one that
    does not is refused (it was replaced without a word), nothing queued."""
    proto = connected()
    proto.send("/q", b"abc", headers=[("content-length", "3")])
    proto.send("/q", "é", headers={"content-length": "2", "a": "b"})
    frames = sent(proto)
    assert [f.body for f in frames] == [b"abc", "é".encode()]
    assert [[v for k, v in f.headers if k == "content-length"] for f in frames] == [["3"], ["2"]]
    for headers in ([("content-length", "99")], {"content-length": "3 "}):
        with pytest.raises(ConfigurationError, match=r"'content-length' is .* the body is 3"):
            proto.send("/q", b"abc", headers=headers)
    assert proto.data_to_send() == b""


def test_send_escapes_headers_in_12() -> None:
    proto = connected("1.2")
    proto.send("/q", b"", headers={"k": "a:b\nc"})
    assert b"k:a\\cb\\nc\n" in proto.data_to_send()


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"destination": ""}, "needs a destination"),
        ({"transaction": "nope"}, "not open"),
        ({"headers": {"destination": "/other"}}, "'destination' is set by stompy"),
        ({"headers": {"receipt": "r"}}, "'receipt'"),
        ({"headers": {"transaction": "t"}}, "'transaction'"),
        ({"receipt": ""}, "must not be empty"),
        ({"receipt": "dup"}, "already awaited"),
        ({"receipt": True, "headers": {"k": "a\nb"}}, "line break"),
        ({"receipt": True, "headers": {"k": "\ud800"}}, "surrogates not allowed"),
        ({"receipt": True, "body": "\udc80"}, "not valid text"),
    ],
)
def test_bad_send_changes_nothing(kwargs: dict[str, Any], what: str) -> None:
    proto = connected("1.0")
    proto.send("/q", b"", receipt="dup")
    proto.data_to_send()
    before = snapshot(proto)
    args = {"destination": "/q", "body": b"x", **kwargs}
    with pytest.raises(LocalProtocolError, match=what):
        proto.send(**args)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


@pytest.mark.parametrize(
    "kwargs",
    [
        {"destination": None},
        {"destination": 5},
        {"body": 5},  # bytes(5) would be five NUL bytes
        {"body": None},
        {"body": bytearray(b"x")},  # what the compiled core's check refuses, too
        {"body": memoryview(b"x")},
        {"body": 5, "headers": [("k", "v")], "receipt": True},
    ],
)
def test_a_send_of_the_wrong_type_is_refused_and_changes_nothing(
    kwargs: dict[str, Any],
) -> None:
    """The same TypeError with the core compiled (mypyc checks the arguments) or not
    (the core checks them itself): nothing of it is sent."""
    proto = connected("1.2")
    before = snapshot(proto)
    with pytest.raises(TypeError):
        proto.send(**{"destination": "/q", "body": b"x", **kwargs})
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


@pytest.mark.parametrize("destination", [None, 5, b"/q"])
def test_a_subscribe_to_a_destination_not_a_str_is_refused(destination: object) -> None:
    proto = connected("1.2")
    before = snapshot(proto)
    with pytest.raises(TypeError):
        proto.subscribe(destination)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


def test_a_failed_intent_gives_its_ids_back() -> None:
    """The ids of the next intents are the same as if the failed one never happened."""

    def run(fail: Callable[[ClientProtocol], object] | None) -> tuple[bytes, list[str]]:
        proto = connected("1.0")
        ids: list[str] = []
        if fail is not None:
            with pytest.raises(LocalProtocolError):
                fail(proto)
        ids.append(proto.subscribe("/q", receipt=True))
        ids.append(str(proto.send("/q", b"", receipt=True)))
        ids.append(proto.begin())
        return proto.data_to_send(), ids

    clean = run(None)
    assert clean[1] == ["2", "r-3", "tx-4"]
    assert run(lambda p: p.send("/q", b"", headers={"a": "\n"}, receipt=True)) == clean
    assert run(lambda p: p.subscribe("/q", headers={"id": "x"})) == clean
    assert run(lambda p: p.subscribe("/q", headers={"a": "\n"}, receipt=True)) == clean
    assert run(lambda p: p.begin("a\nb", receipt=True)) == clean
    assert run(lambda p: p.disconnect(receipt="")) == clean


# -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------


def test_subscribe_generates_ids_and_keeps_the_ack_mode() -> None:
    proto = connected()
    assert proto.subscribe("/a") == "1"
    assert proto.subscribe("/b", ack="client", headers={"selector": "x = 1"}) == "2"
    assert proto.subscribe("/c", ack="client-individual", id="mine", receipt="r") == "mine"
    assert sent(proto) == [
        Frame("SUBSCRIBE", (("destination", "/a"), ("id", "1"), ("ack", "auto"))),
        Frame(
            "SUBSCRIBE",
            (("destination", "/b"), ("id", "2"), ("ack", "client"), ("selector", "x = 1")),
        ),
        Frame(
            "SUBSCRIBE",
            (("destination", "/c"), ("id", "mine"), ("ack", "client-individual"), ("receipt", "r")),
        ),
    ]
    assert proto.subscriptions == {
        "1": SubscriptionInfo("1", "/a", "auto"),
        "2": SubscriptionInfo("2", "/b", "client"),
        "mine": SubscriptionInfo("mine", "/c", "client-individual"),
    }


def test_generated_ids_skip_ids_in_use() -> None:
    proto = connected()
    proto.subscribe("/a", id="1")
    proto.subscribe("/a", id="2")
    assert proto.subscribe("/b") == "3"


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"destination": ""}, "needs a destination"),
        ({"ack": "sometimes"}, "ack mode must be one of"),
        ({"id": ""}, "must not be empty"),
        ({"id": "taken"}, "already in use"),
        ({"headers": {"id": "x"}}, "'id' is set by stompy"),
        ({"headers": {"ack": "client"}}, "'ack'"),
        ({"receipt": "dup"}, "already awaited"),
    ],
)
def test_bad_subscribe_changes_nothing(kwargs: dict[str, Any], what: str) -> None:
    proto = connected()
    proto.subscribe("/t", id="taken", receipt="dup")
    proto.data_to_send()
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match=what):
        proto.subscribe(**{"destination": "/q", **kwargs})
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


def test_client_individual_needs_11() -> None:
    proto = connected("1.0")
    with pytest.raises(LocalProtocolError, match=r"1\.1 or later"):
        proto.subscribe("/q", ack="client-individual")
    assert proto.subscribe("/q", ack="client") == "1"


def test_unsubscribe() -> None:
    proto = connected()
    sub = proto.subscribe("/q")
    proto.data_to_send()
    assert proto.unsubscribe(sub, receipt=True) == "r-2"
    # The destination too: CoilMQ refuses an UNSUBSCRIBE without it (issue 38).
    headers = (("id", sub), ("destination", "/q"), ("receipt", "r-2"))
    assert sent(proto) == [Frame("UNSUBSCRIBE", headers)]
    assert proto.subscriptions == {}
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match="no open subscription"):
        proto.unsubscribe(sub)
    assert snapshot(proto) == before


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_a_message_for_a_subscription_just_closed_is_delivered(version: str) -> None:
    proto = connected(version)
    sub = proto.subscribe("/q", ack="client")
    proto.unsubscribe(sub)
    event = message(proto, sub)
    assert event.subscription == sub
    assert event.ack_mode == "auto"  # nobody can ack it any more
    assert proto.state is State.CONNECTED
    with pytest.raises(LocalProtocolError, match="not open"):
        proto.ack(event)


def test_a_resubscribed_id_routes_to_the_new_subscription() -> None:
    proto = connected()
    proto.subscribe("/q", id="s")
    proto.unsubscribe("s")
    proto.subscribe("/r", id="s", ack="client")
    assert message(proto, "s").ack_mode == "client"


def test_closed_subscriptions_are_remembered_within_a_bound() -> None:
    proto = connected()
    first = proto.subscribe("/q")
    proto.unsubscribe(first)
    for _ in range(1100):
        proto.unsubscribe(proto.subscribe("/q"))
    assert len(proto._closed_subscriptions) == 1024
    proto.receive_data(server_bytes("MESSAGE", (("subscription", first), ("message-id", "1"))))
    with pytest.raises(RemoteProtocolError, match="never made"):
        proto.next_event()


# -- MESSAGE routing ---------------------------------------------------------------------


def test_message_event() -> None:
    proto = connected()
    sub = proto.subscribe("/q", ack="client-individual")
    event = message(proto, sub, mid="m-7", ack="a-7")
    assert event.subscription == sub
    assert event.ack_mode == "client-individual"
    assert (event.destination, event.message_id, event.ack_id, event.body) == (
        "/q",
        "m-7",
        "a-7",
        b"hi",
    )


def test_message_properties_when_headers_are_missing() -> None:
    event = MessageReceived(Frame("MESSAGE"), "1", "auto")
    assert (event.destination, event.message_id, event.ack_id) == ("", "", None)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_message_without_a_known_subscription_is_a_protocol_error(version: str) -> None:
    proto = connected(version)
    proto.subscribe("/q")
    proto.receive_data(server_bytes("MESSAGE", (("destination", "/q"), ("message-id", "1"))))
    with pytest.raises(RemoteProtocolError, match="without the subscription header"):
        proto.next_event()
    proto = connected(version)
    proto.receive_data(server_bytes("MESSAGE", (("subscription", "9"), ("message-id", "1"))))
    with pytest.raises(RemoteProtocolError, match="never made"):
        proto.next_event()
    assert proto.state is State.CLOSED


def test_10_message_with_subscription_header() -> None:
    proto = connected("1.0")
    proto.subscribe("/a")
    sub = proto.subscribe("/a", ack="client")
    assert message(proto, sub, ack=None).subscription == sub


def test_10_routes_by_destination_without_a_subscription_header() -> None:
    proto = connected("1.0")
    first = proto.subscribe("/a", ack="client")
    proto.subscribe("/a")
    second = proto.subscribe("/b")
    routed = deliver(proto, "MESSAGE", ("destination", "/a"), ("message-id", "1"))
    assert isinstance(routed, MessageReceived)
    assert (routed.subscription, routed.ack_mode) == (first, "client")
    routed = deliver(proto, "MESSAGE", ("destination", "/b"), ("message-id", "2"))
    assert isinstance(routed, MessageReceived)
    assert routed.subscription == second


def test_10_message_for_a_destination_just_unsubscribed_is_delivered() -> None:
    proto = connected("1.0")
    sub = proto.subscribe("/a", ack="client")
    proto.subscribe("/b")
    proto.subscribe("/c")
    proto.unsubscribe(sub)
    routed = deliver(proto, "MESSAGE", ("destination", "/a"), ("message-id", "1"))
    assert isinstance(routed, MessageReceived)
    assert (routed.subscription, routed.ack_mode) == (sub, "auto")
    assert proto.state is State.CONNECTED


def test_10_message_for_an_older_closed_subscription() -> None:
    proto = connected("1.0")
    old = proto.subscribe("/a")
    proto.unsubscribe(old)
    proto.unsubscribe(proto.subscribe("/b"))
    proto.subscribe("/c")
    proto.subscribe("/d")
    routed = deliver(proto, "MESSAGE", ("destination", "/a"), ("message-id", "1"))
    assert isinstance(routed, MessageReceived)
    assert routed.subscription == old


def test_10_the_only_subscription_takes_any_destination() -> None:
    # A wildcard subscription ("/topic/a.>") gets messages for "/topic/a.b".
    proto = connected("1.0")
    sub = proto.subscribe("/topic/a.>", ack="client")
    routed = deliver(proto, "MESSAGE", ("destination", "/topic/a.b"), ("message-id", "1"))
    assert isinstance(routed, MessageReceived)
    assert (routed.subscription, routed.ack_mode) == (sub, "client")


@pytest.mark.parametrize("subscriptions", [0, 2])
def test_10_unroutable_message_is_a_protocol_error(subscriptions: int) -> None:
    proto = connected("1.0")
    for i in range(subscriptions):
        proto.subscribe(f"/{i}")
    proto.receive_data(server_bytes("MESSAGE", (("destination", "/x"), ("message-id", "1"))))
    with pytest.raises(RemoteProtocolError, match="matches none"):
        proto.next_event()


class Tagged(MessageReceived):
    """A transport's own message class, made by the core (as the clients' messages are)."""

    __slots__ = ("tag",)

    tag: str


def test_a_message_is_a_message_received_unless_the_transport_names_its_class() -> None:
    proto = connected("1.2")
    assert proto.message_class is MessageReceived
    proto.subscribe("/q", id="S", ack="client")
    assert type(message(proto, "S")) is MessageReceived
    proto = connected("1.2", message_class=Tagged)
    assert proto.message_class is Tagged
    proto.subscribe("/q", id="S", ack="client")
    made = message(proto, "S", mid="m-2")
    assert type(made) is Tagged
    assert (made.subscription, made.ack_mode, made.message_id, made.body) == (
        "S",
        "client",
        "m-2",
        b"hi",
    )
    # Its own fields are its own: the core's event leaves them alone.
    made.tag = "mine"
    assert made.tag == "mine"


def test_the_message_class_is_fixed_when_the_protocol_is_made() -> None:
    proto = ClientProtocol(message_class=Tagged)
    with pytest.raises(AttributeError):
        proto.message_class = MessageReceived  # type: ignore[misc]
    assert proto.message_class is Tagged
    wrongs: list[Any] = [Frame, "Tagged", Tagged(Frame("MESSAGE"), "S", "auto")]
    for wrong in wrongs:
        with pytest.raises(TypeError):
            ClientProtocol(message_class=wrong)


@pytest.mark.parametrize("how", ["subscription", "closed", "1.0"])
def test_every_routing_makes_the_transports_class(how: str) -> None:
    proto = connected("1.0" if how == "1.0" else "1.2", message_class=Tagged)
    sub = proto.subscribe("/q", id="S", ack="client")
    if how == "closed":
        proto.unsubscribe(sub)
    headers = [("destination", "/q"), ("message-id", "m-1")]
    if how != "1.0":
        headers.append(("subscription", "S"))
    made = deliver(proto, "MESSAGE", *headers)
    assert type(made) is Tagged
    assert made.subscription == "S"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.2", (("id", "a-1"),)),
        ("1.1", (("message-id", "m-1"), ("subscription", "S"))),
        ("1.0", (("message-id", "m-1"),)),
    ],
)
def test_a_transports_message_is_acked_as_the_event_is(
    version: str, expected: tuple[tuple[str, str], ...]
) -> None:
    proto = connected(version, message_class=Tagged)
    proto.subscribe("/q", id="S", ack="client")
    made = message(proto, "S")
    assert type(made) is Tagged
    proto.data_to_send()
    proto.ack(made)
    assert sent(proto) == [Frame("ACK", expected)]


# -- ACK / NACK ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "command", "expected"),
    [
        ("1.2", "ACK", (("id", "a-1"),)),
        ("1.2", "NACK", (("id", "a-1"),)),
        ("1.1", "ACK", (("message-id", "m-1"), ("subscription", "S"))),
        ("1.1", "NACK", (("message-id", "m-1"), ("subscription", "S"))),
        ("1.0", "ACK", (("message-id", "m-1"),)),
    ],
)
def test_ack_frame_per_version(
    version: str, command: str, expected: tuple[tuple[str, str], ...]
) -> None:
    proto = connected(version)
    proto.subscribe("/q", id="S", ack="client")
    event = message(proto, "S")
    proto.data_to_send()
    assert (proto.ack if command == "ACK" else proto.nack)(event) is None
    assert sent(proto) == [Frame(command, expected)]


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_a_1_2_message_without_an_ack_header_is_answered_the_1_1_way(command: str) -> None:
    # CoilMQ's 1.2 MESSAGEs have no ack header; its ACK reads message-id and takes id
    # for the subscription (tests/interop, docs/brokers.md).
    proto = connected("1.2")
    proto.subscribe("/q", id="S", ack="client")
    event = message(proto, "S", ack=None)
    proto.data_to_send()
    (proto.ack if command == "ACK" else proto.nack)(event, transaction=None)
    expected = (("id", "S"), ("message-id", "m-1"), ("subscription", "S"))
    assert sent(proto) == [Frame(command, expected)]


def test_ack_in_a_transaction_with_a_receipt() -> None:
    proto = connected("1.2")
    proto.subscribe("/q", id="S", ack="client-individual")
    event = message(proto, "S")
    tx = proto.begin()
    proto.data_to_send()
    receipt = proto.nack(event, transaction=tx, receipt=True)
    assert sent(proto) == [
        Frame("NACK", (("id", "a-1"), ("transaction", tx), ("receipt", str(receipt))))
    ]
    assert proto.pending_receipts == {receipt}


def test_nack_does_not_exist_in_10() -> None:
    proto = connected("1.0")
    proto.subscribe("/q", id="S", ack="client")
    event = message(proto, "S")
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match="NACK does not exist"):
        proto.nack(event)
    assert snapshot(proto) == before


@pytest.mark.parametrize(
    ("setup", "what"),
    [
        ("auto", "ack mode is 'auto'"),
        ("unknown", "not open"),
        ("no-ids", "without an ack or message-id"),
        ("bad-tx", "not open"),
        ("dup-receipt", "already awaited"),
    ],
)
@pytest.mark.parametrize("command", ["ack", "nack"])
def test_bad_ack_changes_nothing(setup: str, what: str, command: str) -> None:
    proto = connected("1.2")
    proto.subscribe("/q", id="auto")
    proto.subscribe("/q", id="C", ack="client")
    proto.send("/q", b"", receipt="dup")
    kwargs: dict[str, Any] = {}
    if setup == "auto":
        event = message(proto, "auto")
    elif setup == "unknown":
        event = MessageReceived(Frame("MESSAGE", (("message-id", "1"),)), "gone", "client")
    elif setup == "no-ids":
        event = MessageReceived(Frame("MESSAGE"), "C", "client")
    else:
        event = message(proto, "C")
        kwargs = {"transaction": "nope"} if setup == "bad-tx" else {"receipt": "dup"}
    proto.data_to_send()
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match=what):
        getattr(proto, command)(event, **kwargs)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


def test_ids_can_be_numbered_after_those_of_a_previous_connection() -> None:
    """A reconnecting client numbers the next connection's ids after the last one's, so
    that a wait for a receipt of the old connection never takes one of the new."""
    old = connected()
    assert old.send("/queue/a", b"x", receipt=True) == "r-1"
    assert old.last_id == 1
    new = connected()
    new.number_ids_after(old.last_id)
    new.number_ids_after(0)  # never backwards
    assert new.send("/queue/a", b"x", receipt=True) == "r-2"
    assert new.begin() == "tx-3"
    with pytest.raises(ConfigurationError, match="last_id"):
        new.number_ids_after(-1)


# -- transactions ----------------------------------------------------------------------


def test_transactions_are_tracked() -> None:
    proto = connected()
    first = proto.begin()
    second = proto.begin("mine", receipt=True)
    assert (first, second) == ("tx-1", "mine")
    assert proto.transactions == {"tx-1", "mine"}
    assert proto.commit(first) is None
    assert proto.transactions == {"mine"}
    assert proto.abort(second, receipt="r") == "r"
    assert proto.transactions == frozenset()
    assert [(f.command, f.headers) for f in sent(proto)] == [
        ("BEGIN", (("transaction", "tx-1"),)),
        ("BEGIN", (("transaction", "mine"), ("receipt", "r-2"))),
        ("COMMIT", (("transaction", "tx-1"),)),
        ("ABORT", (("transaction", "mine"), ("receipt", "r"))),
    ]


@pytest.mark.parametrize(
    ("intent", "what"),
    [
        (lambda p: p.begin(""), "must not be empty"),
        (lambda p: p.begin("open"), "already open"),
        (lambda p: p.begin(receipt="dup"), "already awaited"),
        (lambda p: p.commit("unknown"), "not open"),
        (lambda p: p.abort("unknown"), "not open"),
        (lambda p: p.commit("open", receipt="dup"), "already awaited"),
        (lambda p: p.begin("a\nb"), "line break"),
    ],
)
def test_bad_transaction_intents_change_nothing(
    intent: Callable[[ClientProtocol], object], what: str
) -> None:
    proto = connected("1.0")
    proto.begin("open", receipt="dup")
    proto.data_to_send()
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match=what):
        intent(proto)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


def test_commit_twice_is_refused() -> None:
    proto = connected()
    tx = proto.begin()
    proto.commit(tx)
    with pytest.raises(LocalProtocolError, match="not open"):
        proto.commit(tx)


@pytest.mark.parametrize(
    "ending",
    ["disconnect", "error", "eof", "close", "protocol-error", "disconnect-no-receipt"],
)
def test_open_transactions_end_with_the_connection(ending: str) -> None:
    proto = connected()
    proto.begin()
    if ending == "disconnect":
        proto.disconnect()
    elif ending == "disconnect-no-receipt":
        proto.disconnect(receipt=False)
    elif ending == "error":
        deliver(proto, "ERROR", ("message", "x"))
    elif ending == "eof":
        proto.receive_eof()
        events(proto)
    elif ending == "close":
        proto.close()
    else:
        proto.receive_data(b"BAD\n\n\x00")
        with pytest.raises(RemoteProtocolError):
            proto.next_event()
    assert proto.transactions == frozenset()


# -- DISCONNECT, receipts ------------------------------------------------------------


def test_disconnect_with_receipt() -> None:
    proto = connected()
    receipt = proto.disconnect()
    assert receipt == "r-1"
    assert proto.state is State.DISCONNECTING
    assert sent(proto) == [Frame("DISCONNECT", (("receipt", "r-1"),))]
    event = deliver(proto, "RECEIPT", ("receipt-id", "r-1"))
    assert isinstance(event, Receipt)
    assert event.receipt_id == "r-1"
    assert state(proto) is State.CLOSED
    assert proto.pending_receipts == frozenset()
    proto.receive_eof()
    assert proto.next_event() is None


def test_disconnect_without_receipt_closes_at_once() -> None:
    proto = connected()
    assert proto.disconnect(receipt=False) is None
    assert proto.state is State.CLOSED
    assert sent(proto) == [Frame("DISCONNECT")]


def test_messages_and_receipts_still_arrive_while_disconnecting() -> None:
    proto = connected()
    sub = proto.subscribe("/q")
    proto.send("/q", b"", receipt="s")
    proto.disconnect(receipt="d")
    assert message(proto, sub).subscription == sub
    assert isinstance(deliver(proto, "RECEIPT", ("receipt-id", "s")), Receipt)
    assert proto.state is State.DISCONNECTING
    proto.receive_eof()
    assert events(proto) == [ConnectionClosed(expected=True)]
    assert proto.pending_receipts == {"d"}


@pytest.mark.parametrize(
    "intent",
    [
        lambda p: p.send("/q", b""),
        lambda p: p.subscribe("/q"),
        lambda p: p.begin(),
        lambda p: p.disconnect(),
    ],
)
def test_nothing_may_follow_disconnect(intent: Callable[[ClientProtocol], object]) -> None:
    # "Clients MUST NOT send any more frames after the DISCONNECT frame is sent."
    proto = connected()
    proto.disconnect()
    proto.data_to_send()
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match="DISCONNECTING"):
        intent(proto)
    assert snapshot(proto) == before


def test_receipts_on_every_frame() -> None:
    proto = connected("1.2")
    sub = proto.subscribe("/q", ack="client", receipt=True)
    event = message(proto, sub)
    tx = proto.begin(receipt=True)
    ids = [
        proto.send("/q", b"", receipt=True),
        proto.ack(event, receipt=True),
        proto.nack(event, receipt=True),
        proto.commit(tx, receipt=True),
        proto.unsubscribe(sub, receipt=True),
        proto.disconnect(),
    ]
    frames = sent(proto)
    assert [f.get("receipt") for f in frames] == ["r-1", "r-3", *ids]
    assert proto.pending_receipts == {"r-1", "r-3", *ids}
    for receipt in ["r-1", "r-3", *ids]:
        assert deliver(proto, "RECEIPT", ("receipt-id", str(receipt))) == Receipt(
            str(receipt), Frame("RECEIPT", (("receipt-id", str(receipt)),))
        )
    assert proto.pending_receipts == frozenset()
    assert proto.state is State.CLOSED


def test_new_receipt_id_names_the_receipt_of_subscribe_and_begin() -> None:
    """What a caller passes as ``receipt=`` when the intent returns another id."""
    proto = connected("1.2")
    rid = proto.new_receipt_id()
    assert rid not in proto.pending_receipts
    sub = proto.subscribe("/q", receipt=rid)
    other = proto.new_receipt_id()
    assert other != rid
    tx = proto.begin(receipt=other)
    assert proto.pending_receipts == {rid, other}
    assert [(f.command, f.get("receipt")) for f in sent(proto)] == [
        ("SUBSCRIBE", rid),
        ("BEGIN", other),
    ]
    assert sub not in (rid, other)
    assert tx not in (rid, other)
    assert proto.new_receipt_id() not in proto.pending_receipts


def test_a_receipt_without_an_id_is_a_protocol_error() -> None:
    proto = connected()
    proto.receive_data(server_bytes("RECEIPT", ()))
    with pytest.raises(RemoteProtocolError, match="without a receipt-id"):
        proto.next_event()
    assert proto.state is State.CLOSED


def test_a_receipt_is_matched_only_once() -> None:
    # A second RECEIPT for the same id answers nothing: dropped (see test_lenient.py).
    proto = connected()
    proto.send("/q", b"", receipt="once")
    assert isinstance(deliver(proto, "RECEIPT", ("receipt-id", "once")), Receipt)
    proto.receive_data(server_bytes("RECEIPT", (("receipt-id", "once"),)))
    assert proto.next_event() is None
    assert proto.state is State.CONNECTED


# -- ERROR and EOF -------------------------------------------------------------------


def test_error_event_closes() -> None:
    proto = connected()
    proto.send("/q", b"", receipt="r")
    error = deliver(proto, "ERROR", ("message", "boom"), ("receipt-id", "r"), body=b"details")
    assert isinstance(error, Error)
    assert (error.message, error.receipt_id, error.frame.body) == ("boom", "r", b"details")
    assert proto.state is State.CLOSED
    assert proto.pending_receipts == frozenset()  # the ERROR answered it
    proto.receive_data(server_bytes("MESSAGE"))
    assert proto.next_event() is None
    with pytest.raises(LocalProtocolError, match="CLOSED"):
        proto.send("/q", b"")
    proto.receive_eof()
    assert events(proto) == [ConnectionClosed(expected=True)]
    proto.receive_eof()
    assert events(proto) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [(b"  the reason\n", "the reason"), (b"", "(no message)"), (b"\xff" + b"x" * 300, None)],
)
def test_error_message_from_the_body(body: bytes, expected: str | None) -> None:
    proto = connected()
    error = deliver(proto, "ERROR", body=body)
    assert isinstance(error, Error)
    assert error.receipt_id is None
    if expected is None:
        assert error.message == "\ufffd" + "x" * 199
    else:
        assert error.message == expected


def test_eof_is_reported_after_the_frames_before_it() -> None:
    proto = connected()
    sub = proto.subscribe("/q")
    proto.receive_data(
        server_bytes("MESSAGE", (("subscription", sub), ("message-id", "1")))
        + server_bytes("MESSAGE", (("subscription", sub), ("message-id", "2")))
    )
    proto.receive_eof()
    assert proto.state is State.CONNECTED  # until the frames are out
    got = events(proto)
    assert [type(e) for e in got] == [MessageReceived, MessageReceived, ConnectionClosed]
    assert got[2] == ConnectionClosed(expected=False)
    assert state(proto) is State.CLOSED


def test_error_then_eof_in_one_read() -> None:
    proto = connected()
    proto.receive_data(server_bytes("ERROR", (("message", "bye"),)))
    proto.receive_eof()
    error, closed = events(proto)
    assert isinstance(error, Error)
    assert error.message == "bye"
    assert closed == ConnectionClosed(expected=True)


def test_disconnect_receipt_then_eof_in_one_read() -> None:
    proto = connected()
    receipt = proto.disconnect()
    proto.receive_data(server_bytes("RECEIPT", (("receipt-id", str(receipt)),)))
    proto.receive_eof()
    assert [type(e) for e in events(proto)] == [Receipt]
    assert proto.state is State.CLOSED


def test_eof_mid_frame_is_an_unexpected_close() -> None:
    proto = connected()
    proto.receive_data(b"MESSAGE\nsubscription:1\n")
    proto.receive_eof()
    proto.receive_eof()
    proto.receive_data(b"\n\x00")  # after the EOF: ignored
    assert events(proto) == [ConnectionClosed(expected=False)]


@pytest.mark.parametrize("state", ["idle", "connecting"])
def test_eof_before_connected(state: str) -> None:
    proto = ClientProtocol()
    if state == "connecting":
        proto.connect("/")
    proto.receive_eof()
    assert events(proto) == [ConnectionClosed(expected=False)]
    assert proto.state is State.CLOSED


def test_close_forgets_the_connection() -> None:
    proto = connected()
    proto.close()
    assert proto.state is State.CLOSED
    proto.receive_data(server_bytes("ERROR"))
    proto.receive_eof()
    assert events(proto) == []


# -- lenient receiving ---------------------------------------------------------------


def test_receiving_is_strict_by_default() -> None:
    proto = connected()
    sub = proto.subscribe("/q")
    proto.receive_data(b"MESSAGE\nsubscription:" + sub.encode() + b"\nk:a\\tb\n\n\x00")
    with pytest.raises(RemoteProtocolError, match="undefined escape"):
        proto.next_event()


def test_lenient_receiving() -> None:
    proto = connected(strict=False)
    sub = proto.subscribe("/q")
    proto.receive_data(
        b"MESSAGE\nmessage-id:m1\nsubscription:" + sub.encode() + b"\nk:a\\tb\n\n\x00"
    )
    event = proto.next_event()
    assert isinstance(event, MessageReceived)
    assert event.frame.get("k") == "a\\tb"
    proto.send("/q", b"", receipt="r")
    proto.receive_data(b"RECEIPT\nreceipt-id:r\n\nunexpected body\x00")
    assert isinstance(proto.next_event(), Receipt)


# -- every intent in every state -----------------------------------------------------


def in_state(state: State) -> ClientProtocol:
    if state is State.IDLE:
        return ClientProtocol()
    if state is State.CONNECTING:
        proto = ClientProtocol()
        proto.connect("/")
        proto.data_to_send()
        return proto
    proto = connected()
    if state is State.DISCONNECTING:
        proto.disconnect()
    elif state is State.CLOSED:
        proto.close()
    proto.data_to_send()
    return proto


A_MESSAGE = MessageReceived(Frame("MESSAGE", (("message-id", "m"), ("ack", "a"))), "1", "client")
INTENTS: dict[str, Callable[[ClientProtocol], object]] = {
    "connect": lambda p: p.connect("/"),
    "send": lambda p: p.send("/q", b"x"),
    "subscribe": lambda p: p.subscribe("/q"),
    "unsubscribe": lambda p: p.unsubscribe("1"),
    "ack": lambda p: p.ack(A_MESSAGE),
    "nack": lambda p: p.nack(A_MESSAGE),
    "begin": lambda p: p.begin(),
    "commit": lambda p: p.commit("tx"),
    "abort": lambda p: p.abort("tx"),
    "disconnect": lambda p: p.disconnect(),
}
ALLOWED = {State.IDLE: {"connect"}, State.CONNECTED: set(INTENTS) - {"connect"}}


FORBIDDEN = [
    (state, intent)
    for state in State
    for intent in sorted(INTENTS)
    if intent not in ALLOWED.get(state, set())
]


@pytest.mark.parametrize(("state", "intent"), FORBIDDEN)
def test_intents_outside_their_states_change_nothing(state: State, intent: str) -> None:
    proto = in_state(state)
    before = snapshot(proto)
    with pytest.raises(LocalProtocolError, match=f"state {state.name}"):
        INTENTS[intent](proto)
    assert snapshot(proto) == before
    assert proto.data_to_send() == b""


def test_data_to_send_joins_and_forgets() -> None:
    proto = connected()
    assert proto.data_to_send() == b""
    proto.send("/a", b"")
    proto.send("/b", b"")
    data = proto.data_to_send()
    assert data == b"SEND\ndestination:/a\n\n\x00SEND\ndestination:/b\n\n\x00"
    assert proto.data_to_send() == b""


# -- replies through a temp queue (RabbitMQ) ------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_replies_to_a_temp_queue_arrive_on_an_implicit_subscription(version: str) -> None:
    """RabbitMQ sends replies to ``reply-to:/temp-queue/x`` with ``subscription:/temp-queue/x``."""
    proto = connected(version)
    proto.send("/queue/service", b"q", headers={"reply-to": "/temp-queue/replies"})
    assert proto.implicit_subscriptions == {"/temp-queue/replies"}
    assert proto.subscriptions == {}  # nothing to UNSUBSCRIBE or to make again
    event = message(proto, "/temp-queue/replies", ack=None)
    assert (event.subscription, event.ack_mode, event.body) == (
        "/temp-queue/replies",
        "auto",
        b"hi",
    )
    with pytest.raises(LocalProtocolError, match="not open"):
        proto.ack(event)  # auto: the broker expects no ACK
    assert proto.state is State.CONNECTED


def test_only_temp_queue_reply_to_makes_an_implicit_subscription() -> None:
    proto = connected()
    proto.send("/q", b"", headers={"reply-to": "/queue/replies"})
    proto.send("/q", b"", headers=[("x-reply-to", "/temp-queue/a")])
    # "If a client or a server receives repeated frame header entries, only the first
    # header entry SHOULD be used as the value of header entry."
    proto.send("/q", b"", headers=[("reply-to", "/queue/b"), ("reply-to", "/temp-queue/b")])
    assert proto.implicit_subscriptions == frozenset()
    message = (("subscription", "/temp-queue/a"), ("message-id", "m"))
    proto.receive_data(server_bytes("MESSAGE", message))
    with pytest.raises(RemoteProtocolError, match="never made"):
        proto.next_event()


def test_a_failed_send_makes_no_implicit_subscription() -> None:
    proto = connected()
    with pytest.raises(LocalProtocolError):
        proto.send("/q", b"", headers={"reply-to": "/temp-queue/x", "bad": "\ud800"})
    assert proto.implicit_subscriptions == frozenset()


def test_a_real_subscription_wins_over_an_implicit_one() -> None:
    proto = connected()
    sub = proto.subscribe("/temp-queue/x", id="/temp-queue/x", ack="client")
    proto.send("/q", b"", headers={"reply-to": "/temp-queue/x"})
    assert message(proto, sub).ack_mode == "client"


def test_implicit_subscriptions_are_remembered_within_a_bound() -> None:
    proto = connected()
    for n in range(1100):
        proto.send("/q", b"", headers={"reply-to": f"/temp-queue/{n}"})
        proto.send("/q", b"", headers={"reply-to": "/temp-queue/0"})  # known: no new entry
    assert len(proto.implicit_subscriptions) == 1024
    assert "/temp-queue/1099" in proto.implicit_subscriptions
    assert "/temp-queue/75" not in proto.implicit_subscriptions  # the oldest went first
    assert message(proto, "/temp-queue/1099").subscription == "/temp-queue/1099"


# -- one entry per frame, for WebSocket -----------------------------------------------


def test_frames_to_send_gives_one_entry_per_frame_and_beat() -> None:
    joined = connected(heartbeats=(1000, 0), server_heartbeat="0,1000")
    framed = connected(heartbeats=(1000, 0), server_heartbeat="0,1000")
    assert framed.frames_to_send(0.5) == []
    for proto in (joined, framed):
        proto.send("/a", b"x\x00y")
        proto.subscribe("/b", id="s")
    frames = framed.frames_to_send(2.0)
    parsed = [FrameParser("1.2").parse(frame) for frame in frames]
    assert [[f.command for f in one] for one in parsed] == [["SEND"], ["SUBSCRIBE"]]
    assert parsed[0][0].body == b"x\x00y"
    assert b"".join(frames) == joined.data_to_send(2.0)
    # The same heart-beat bookkeeping as data_to_send: the write at 2.0 moved the beat.
    assert framed.next_deadline() == joined.next_deadline()
    deadline = framed.next_deadline()
    assert deadline is not None
    assert deadline > 2.0
    framed.handle_timer(deadline)
    assert framed.frames_to_send(deadline) == [b"\n"]  # the EOL is a message of its own
    assert framed.frames_to_send(deadline) == []


def test_send_with_a_header_that_is_not_text_changes_nothing() -> None:
    proto = connected()
    with pytest.raises(TypeError, match="priority"):
        proto.send("/q", "x", headers={"priority": 4}, receipt=True)  # type: ignore[arg-type]
    assert proto.data_to_send() == b""
    assert proto.pending_receipts == frozenset()
    # The receipt id it took was given back: the next one is the first.
    assert proto.send("/q", "x", receipt=True) == "r-1"


def test_a_message_without_message_id_is_the_servers_fault() -> None:
    # Accepted, it could not be acknowledged later: the caller would get the blame.
    proto = connected()
    sub = proto.subscribe("/q", ack="client-individual")
    proto.receive_data(server_bytes("MESSAGE", (("subscription", sub), ("ack", "a1"))))
    with pytest.raises(RemoteProtocolError, match="without the message-id header") as info:
        proto.next_event()
    assert not isinstance(info.value, LocalProtocolError)


@pytest.mark.parametrize(
    ("version", "sub"),
    [("1.0", "s-1"), ("1.1", "s:1"), ("1.2", "s:1"), ("1.2", "s:1\\x"), ("1.2", "s\r1")],
)
def test_a_message_is_routed_by_its_own_subscription_header_as_sent(version: str, sub: str) -> None:
    # The lookups a MESSAGE needs search the received block: header names that only
    # contain the ones looked for, or values that look like them, must not match; an
    # escaped id is unescaped.
    proto = connected(version)
    # Client acks: a MESSAGE without message-id is refused (see below).
    assert proto.subscribe("/q", id=sub, ack="client") == sub
    other = proto.subscribe("/r", id="other")
    headers = (
        ("x-subscription", other),
        ("note", "subscription:other"),
        ("message-id", "m:1"),
        ("subscription", sub),
        ("subscription", other),  # a repeat: the first entry wins
    )
    proto.receive_data(server_bytes("MESSAGE", headers, b"hi", version))
    event = proto.next_event()
    assert isinstance(event, MessageReceived)
    assert event.subscription == sub
    assert event.frame.get("subscription") == sub
    # Only a header whose name holds "message-id": the header itself is missing.
    proto.receive_data(
        server_bytes("MESSAGE", (("x-message-id", "m2"), ("subscription", sub)), b"", version)
    )
    with pytest.raises(RemoteProtocolError, match="without the message-id header"):
        proto.next_event()


@pytest.mark.parametrize("name", sorted(SEND_RESERVED))
@pytest.mark.parametrize("form", [dict, list])
def test_a_send_header_stompy_writes_is_refused_in_every_form(name: str, form: type) -> None:
    """SEND_RESERVED is what the protocol refuses, what check_send (an Outgoing) refuses
    and what the encoder's fast way leaves to the general one: a caller's dict or pairs
    naming one raise, nothing is queued."""
    proto = connected("1.2")
    headers = {name: "x", "a": "b"}
    given = headers if form is dict else list(headers.items())
    with pytest.raises(LocalProtocolError, match=f"header '{name}' is set by stompy for SEND"):
        proto.send("/q", b"", headers=given)
    with pytest.raises(LocalProtocolError, match=f"header '{name}' is set by stompy for SEND"):
        check_send("/q", b"", given, None)
    assert proto.data_to_send() == b""
    assert encode_send("/q", None, headers, b"", "1.2") is None


_send_names = st.sampled_from(
    ("a", "b:c", "", "reply-to", "content-type", "content-length", *sorted(SEND_RESERVED))
)
_send_values = st.sampled_from(
    ["v", "/temp-queue/t", "/queue/q", "x:y", "a\\b", "l\nf", "c\rr", "é", "\ud800", ""]
) | st.integers(0, 3)


def _send_outcome(
    proto: ClientProtocol,
    destination: str,
    body: bytes | str,
    headers: Any,
    ctype: str | None,
    receipt: bool = False,
) -> tuple[object, ...]:
    try:
        result: object = proto.send(
            destination, body, headers=headers, content_type=ctype, receipt=receipt
        )
    except (LocalProtocolError, ConfigurationError) as exc:
        result = f"{type(exc).__name__}: {exc}"
    except TypeError:
        result = TypeError  # worded after the form of the headers given: pairs or a dict
    return (
        result,
        proto.data_to_send(),
        proto.implicit_subscriptions,
        proto.pending_receipts,
        proto.new_receipt_id(),
    )


@given(
    st.sampled_from(["1.0", "1.1", "1.2"]),
    st.sampled_from(["/q", "/q:1", "", "/q\n"]),
    st.binary(max_size=3) | st.sampled_from(["hé", "\ud800"]),
    st.dictionaries(_send_names, _send_values, max_size=4),
    st.none() | st.sampled_from(["t/p", "a:b", "\ud800"]),
    st.booleans(),
)
@example("1.2", "/q", b"x", {"reply-to": "/temp-queue/t"}, "t/p", False)
@example("1.2", "/q", b"x", {"a": 1}, None, False)
@example("1.2", "/q", b"x", {"content-type": "a"}, "t/p", False)
@example("1.2", "/q", b"x", {}, None, True)
@example("1.2", "/q", b"x", {"receipt": "r"}, None, True)
@example("1.0", "/q", b"x", {"a": "b"}, "t/p", True)
def test_a_dict_of_headers_sends_what_its_pairs_send(
    version: str,
    destination: str,
    body: bytes | str,
    headers: Any,
    ctype: str | None,
    receipt: bool,
) -> None:
    """A dict of headers (or None for none) takes the common send's short way when it
    can, with a receipt too; the same headers as pairs always take the general way: the
    same frame (or error), the same implicit subscriptions, the same receipts awaited
    and ids after."""
    # Two faults at once (a body and a header) are named in either order.
    assume(body != "\ud800" or all(type(v) is str for v in headers.values()))
    # A content-type header the argument overrides is dropped from a dict unread; two
    # faults at once (two content types and a header not a str) in either order.
    assume(ctype is None or type(headers.get("content-type", "")) is str)
    assume(
        ctype is None
        or headers.get("content-type", ctype) == ctype
        or all(type(v) is str for v in headers.values())
    )
    fast = connected(version)
    general = connected(version)
    given = headers or None  # none at all: None, which the short way takes too
    got = _send_outcome(fast, destination, body, given, ctype, receipt)
    want = _send_outcome(general, destination, body, list(headers.items()), ctype, receipt)
    assert got == want
    assert fast.state is general.state is State.CONNECTED


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_receive_data_takes_what_it_says_in_every_build(kind: type) -> None:
    """bytes, a bytearray and a memoryview are read alike, the compiled core too (whose
    argument check took bytes only), and a buffer the caller reuses changes nothing."""
    proto = connected()
    sub = proto.subscribe("/q")
    raw = bytearray(
        b"MESSAGE\nsubscription:%s\nmessage-id:m\ndestination:/q\n\nbody\x00" % sub.encode()
    )
    data: Any = bytes(raw) if kind is bytes else raw if kind is bytearray else memoryview(raw)
    proto.receive_data(data, 1.0)
    raw[-5:-1] = b"ZZZZ"
    event = proto.next_event()
    assert isinstance(event, MessageReceived)
    assert event.frame.body == b"body"


@pytest.mark.parametrize("data", ["text", "", 5, None])
def test_receive_data_refuses_what_is_not_bytes(data: Any) -> None:
    proto = ClientProtocol()
    proto.connect("h")
    with pytest.raises(TypeError):
        proto.receive_data(data)

"""The pieces the blocking and async clients share (no I/O)."""

from __future__ import annotations

import ssl

import pytest

import stompy
from stompy import Frame, Reconnect
from stompy._core.events import ConnectionClosed, Error, HeartbeatTimedOut, Receipt
from stompy._engine.failures import error_for_event
from stompy._engine.message import MessageBase
from stompy._engine.options import ClientOptions
from stompy._engine.urls import parse_url
from stompy.errors import (
    ConfigurationError,
    ConnectionLost,
    HeartbeatTimeout,
    LocalProtocolError,
    ProtocolError,
    ServerError,
)


def test_vhost_rule() -> None:
    plain = parse_url("stomp://h")
    with_path = parse_url("stomp://h/prod")
    assert ClientOptions("stomp://h").vhost(plain) == "/"
    assert ClientOptions("stomp://h").vhost(with_path) == "prod"
    assert ClientOptions("stomp://h", host="explicit").vhost(with_path) == "explicit"


def test_credentials_arguments_win_over_url() -> None:
    ep = parse_url("stomp://u:p@h")
    assert ClientOptions("stomp://h").credentials(ep) == ("u", "p")
    assert ClientOptions("stomp://h", login="a", passcode="b").credentials(ep) == ("a", "b")


def test_passcode_not_in_repr() -> None:
    opts = ClientOptions("stomp://u:hunter2@h", passcode="swordfish")
    assert "hunter2" not in repr(opts)
    assert "swordfish" not in repr(opts)


def test_connect_frame_carries_vhost_and_credentials() -> None:
    opts = ClientOptions("stomp://u:p@h/v", heartbeats=(1000, 2000), headers={"client-id": "c"})
    proto = opts.start(opts.endpoints[0])
    data = proto.data_to_send()
    assert b"host:v\n" in data
    assert b"login:u\n" in data
    assert b"passcode:p\n" in data
    assert b"heart-beat:1000,2000\n" in data
    assert b"client-id:c\n" in data


def test_invalid_options_fail_early() -> None:
    with pytest.raises(ConfigurationError, match=r"^versions: "):
        ClientOptions("stomp://h", versions=("2.0",))
    with pytest.raises(ConfigurationError, match=r"^max_pending: "):
        ClientOptions("stomp://h", max_pending=0)
    with pytest.raises(ConfigurationError, match=r"^receipt_timeout: "):
        ClientOptions("stomp://h", receipt_timeout=0)


def test_ssl_context_selection() -> None:
    plain = parse_url("stomp://h")
    tls = parse_url("stomp+ssl://h")
    assert ClientOptions("stomp://h").ssl_context(plain) is None
    ctx = ClientOptions("stomp://h").ssl_context(tls)
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    mine = ssl.create_default_context()
    assert ClientOptions("stomp://h", ssl=mine).ssl_context(plain) is mine
    assert ClientOptions("stomp://h", ssl=True).ssl_context(plain) is not None
    with pytest.raises(ValueError, match="needs TLS"):
        ClientOptions("stomp://h", ssl=False).ssl_context(tls)


def test_reconnect_delays_grow_and_are_bounded() -> None:
    policy = Reconnect(max_attempts=6, initial_delay=1.0, max_delay=4.0, jitter=0.0)
    assert list(policy.delays()) == [0.0, 1.0, 2.0, 4.0, 4.0, 4.0]
    jittery = Reconnect(max_attempts=50, initial_delay=1.0, max_delay=1.0, jitter=0.5)
    assert all(0.5 <= d <= 1.5 for d in list(jittery.delays())[1:])


@pytest.mark.parametrize(
    "kwargs",
    [{"initial_delay": -1.0}, {"multiplier": 0.5}, {"jitter": 2.0}, {"max_attempts": 0}],
)
def test_reconnect_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError, match=f"^{next(iter(kwargs))}: "):
        Reconnect(**kwargs)  # type: ignore[arg-type]


def test_error_for_event() -> None:
    error_frame = Frame("ERROR", (("message", "bad"),))
    failure = error_for_event(Error("bad", None, error_frame))
    assert isinstance(failure, ServerError)
    assert failure.frame is error_frame
    assert isinstance(error_for_event(HeartbeatTimedOut(3.0)), HeartbeatTimeout)
    assert isinstance(error_for_event(ConnectionClosed(expected=False)), ConnectionLost)
    assert error_for_event(Receipt("r", Frame("RECEIPT"))) is None


def _message(headers: tuple[tuple[str, str], ...], body: bytes) -> MessageBase:
    frame = Frame("MESSAGE", (("destination", "/q"), ("message-id", "m1"), *headers), body)
    return MessageBase.made(frame, "s1", "client", epoch=1)


def test_message_text_uses_charset() -> None:
    msg = _message((("content-type", "text/plain;charset=latin-1"),), "é".encode("latin-1"))
    assert msg.text == "é"
    assert _message((), "é".encode()).text == "é"


def test_message_headers_first_entry_wins_and_read_only() -> None:
    msg = _message((("foo", "World"), ("foo", "Hello"), ("redelivered", "true")), b"")
    assert msg.headers["foo"] == "World"
    assert msg.redelivered
    assert msg.destination == "/q"
    assert msg.message_id == "m1"
    assert msg.subscription == "s1"
    assert msg.ack_mode == "client"
    with pytest.raises(TypeError):
        msg.headers["foo"] = "x"  # type: ignore[index]
    assert "m1" in repr(msg)


@pytest.mark.parametrize("headers", [{"host": "other"}, {"login": "x"}, {"bad": "line\nbreak"}])
def test_connect_headers_are_checked_by_the_constructors(headers: dict[str, str]) -> None:
    """A CONNECT header stompy sets, or one that cannot be sent, is the caller's mistake:
    ``LocalProtocolError`` from the constructor, never a connect attempt's error."""
    for make in (ClientOptions, stompy.Connection, stompy.AsyncConnection):
        with pytest.raises(LocalProtocolError) as caught:
            make("stomp://127.0.0.1:1", headers=headers)
        assert isinstance(caught.value, ProtocolError)

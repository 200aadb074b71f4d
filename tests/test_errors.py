"""The one error hierarchy."""

from __future__ import annotations

import ast
import inspect

import pytest

import stompy
from stompy import errors
from stompy._core.frames import Frame
from stompy._core.parser import FrameLimits, FrameParser
from stompy._core.protocol import ClientProtocol, State
from stompy.errors import (
    CommitOutcomeUnknown,
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    NetworkError,
    ProtocolError,
    ReceiptTimeout,
    RemoteProtocolError,
    ServerError,
    StompError,
    StompTimeout,
    TransactionLost,
    WebSocketClosed,
    _again,
)

PARENTS: dict[type[Exception], tuple[type[BaseException], ...]] = {
    StompError: (Exception,),
    ProtocolError: (StompError,),
    LocalProtocolError: (ProtocolError,),
    RemoteProtocolError: (ProtocolError,),
    FrameTooLarge: (RemoteProtocolError,),
    ServerError: (StompError,),
    NetworkError: (StompError,),
    ConnectFailed: (NetworkError,),
    ConnectionLost: (NetworkError,),
    StompTimeout: (StompError, TimeoutError),
    ReceiptTimeout: (StompTimeout,),
    HeartbeatTimeout: (ConnectionLost, StompTimeout),
    TransactionLost: (StompError,),
    CommitOutcomeUnknown: (TransactionLost, ConnectionLost),
    WebSocketClosed: (ConnectionLost,),
}


@pytest.mark.parametrize(
    ("cls", "parents"), PARENTS.items(), ids=lambda v: getattr(v, "__name__", "")
)
def test_each_error_has_its_place(
    cls: type[Exception], parents: tuple[type[BaseException], ...]
) -> None:
    assert cls.__bases__ == parents


def test_every_error_is_a_stomp_error() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), StompError)


def test_protocol_error_is_the_base_of_both_kinds() -> None:
    # h11's split: one base to catch both, and the caller's mistake is never
    # confused with the peer's.
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert issubclass(FrameTooLarge, RemoteProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)
    assert not issubclass(FrameTooLarge, LocalProtocolError)


def test_a_malformed_frame_from_the_peer_is_a_remote_protocol_error() -> None:
    parser = FrameParser("1.2")
    with pytest.raises(ProtocolError) as info:
        parser.parse(b"SEND\nno-colon-here\n\nx\x00")
    assert type(info.value) is RemoteProtocolError
    assert "without a colon" in str(info.value)


def test_a_frame_over_the_limits_is_a_remote_protocol_error() -> None:
    parser = FrameParser("1.2", FrameLimits(max_body=4))
    with pytest.raises(RemoteProtocolError) as info:
        parser.parse(b"SEND\ncontent-length:5\n\n")
    assert type(info.value) is FrameTooLarge


def test_a_frame_the_state_forbids_is_a_remote_protocol_error() -> None:
    proto = ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00CONNECTED\nversion:1.2\n\n\x00", 0.0)
    proto.next_event()
    try:
        proto.next_event()
    except ProtocolError as exc:
        caught: ProtocolError = exc
    else:
        pytest.fail("a second CONNECTED was accepted")
    assert type(caught) is RemoteProtocolError
    assert "unexpected CONNECTED" in str(caught)
    assert proto.state is State.CLOSED


def test_a_local_misuse_is_a_local_protocol_error_caught_as_protocol_error() -> None:
    proto = ClientProtocol()
    try:
        proto.send("/queue/a", b"too early")
    except ProtocolError as exc:
        caught: ProtocolError = exc
    else:
        pytest.fail("send() before connect() was accepted")
    assert type(caught) is LocalProtocolError
    assert not isinstance(caught, RemoteProtocolError)
    assert proto.state is State.IDLE
    assert proto.data_to_send() == b""


def test_both_kinds_are_exported_at_the_top() -> None:
    assert stompy.ProtocolError is ProtocolError
    assert stompy.LocalProtocolError is LocalProtocolError
    assert stompy.RemoteProtocolError is RemoteProtocolError
    assert "RemoteProtocolError" in errors.__all__


def test_errors_imports_no_other_stompy_module() -> None:
    # The base of every module's errors depends on none of them: no import circle,
    # not even one under TYPE_CHECKING.
    tree = ast.parse(inspect.getsource(errors))
    imported = [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or "." * node.level]
        )
    ]
    assert imported
    assert [name for name in imported if name.startswith((".", "stompy"))] == []


def test_timeouts_are_builtin_timeouts() -> None:
    for cls in (StompTimeout, ReceiptTimeout, HeartbeatTimeout):
        with pytest.raises(TimeoutError):
            raise cls("late")
    # A dead peer is both a lost connection and a timeout.
    with pytest.raises(ConnectionLost):
        raise HeartbeatTimeout("silent")


def test_server_error_carries_the_frame() -> None:
    frame = Frame("ERROR", (("message", "no"),), b"details")
    error = ServerError("no", frame)
    assert error.message == "no"
    assert error.frame is frame
    # The body's first line too: some brokers put the cause only there (issue 38).
    assert str(error) == "no: details"
    assert error.body == b"details"
    bare = ServerError("gone")
    assert bare.frame is None
    assert bare.body == b""
    assert bare.args == ("gone",)


def test_server_error_shows_the_first_line_of_the_body_cut_short() -> None:
    # stompserver: "See below" in the header, the cause and a backtrace in the body.
    body = b"\n  undefined method `find' for nil:NilClass\n  /usr/lib/ruby/queue.rb:12\n"
    error = ServerError("See below", Frame("ERROR", (("message", "See below"),), body))
    assert str(error) == "See below: undefined method `find' for nil:NilClass"
    assert error.body == body  # the whole of it
    long = ServerError("m", Frame("ERROR", (("message", "m"),), b"x" * 5000))
    assert str(long) == "m: " + "x" * 200 + "..."
    # Without a message header the core takes the body as the message: not said twice.
    same = ServerError("only the body", Frame("ERROR", (), b"only the body"))
    assert str(same) == "only the body"
    # A copy raised again (errors._again) says the same and keeps the body.
    again = _again(error)
    assert (str(again), again.body, again.message) == (str(error), body, "See below")


def test_websocket_closed_carries_the_close_code_and_reason() -> None:
    exc = WebSocketClosed(1008, "policy", "the broker")
    assert (exc.code, exc.reason) == (1008, "policy")
    assert str(exc) == "the broker closed the WebSocket with code 1008 (policy)"
    assert str(WebSocketClosed(1006, "")) == "the peer closed the WebSocket with code 1006"

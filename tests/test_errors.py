"""The one error hierarchy."""

from __future__ import annotations

import pytest

from stompy import errors
from stompy._frames import Frame
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    NetworkError,
    ProtocolError,
    ReceiptTimeout,
    ServerError,
    StompError,
    StompTimeout,
    TransactionLost,
    WebSocketClosed,
)

PARENTS: dict[type[Exception], tuple[type[BaseException], ...]] = {
    StompError: (Exception,),
    ProtocolError: (StompError,),
    FrameTooLarge: (ProtocolError,),
    LocalProtocolError: (StompError,),
    ServerError: (StompError,),
    NetworkError: (StompError,),
    ConnectFailed: (NetworkError,),
    ConnectionLost: (NetworkError,),
    StompTimeout: (StompError, TimeoutError),
    ReceiptTimeout: (StompTimeout,),
    HeartbeatTimeout: (ConnectionLost, StompTimeout),
    TransactionLost: (StompError,),
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


def test_local_and_remote_protocol_errors_are_distinct() -> None:
    # h11's split: the caller's mistake is never confused with the peer's.
    assert not issubclass(LocalProtocolError, ProtocolError)
    assert not issubclass(ProtocolError, LocalProtocolError)


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
    assert str(error) == "no"
    bare = ServerError("gone")
    assert bare.frame is None
    assert bare.args == ("gone",)


def test_websocket_closed_carries_the_close_code_and_reason() -> None:
    exc = WebSocketClosed(1008, "policy", "the broker")
    assert (exc.code, exc.reason) == (1008, "policy")
    assert str(exc) == "the broker closed the WebSocket with code 1008 (policy)"
    assert str(WebSocketClosed(1006, "")) == "the peer closed the WebSocket with code 1006"

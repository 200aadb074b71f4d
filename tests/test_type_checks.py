"""Wrong types and unusable values given to the sans-IO cores, stompy.testing and
``send_many``, as a user without a type checker passes them: a ``TypeError`` naming the
argument (in the pure-Python core as in mypyc's build, whose own TypeError comes first
and is worded its way), or a ``ConfigurationError`` (a ``ValueError`` and a
``StompError``) naming the option and showing the value. Never an ``AttributeError``,
a ``KeyError``, a plain ``ValueError`` from inside, or a wrong value taken silently.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

import stompy
from stompy import ClientProtocol, ConfigurationError, Frame, FrameParser, StompError, encode
from stompy._heartbeat import format_heartbeat


def wrong_type(call: Callable[[], object], name: str) -> TypeError:
    """The TypeError ``call()`` raises; it names ``name`` in the pure-Python core (mypyc
    words its own, for the compiled modules, and may not)."""
    with pytest.raises(TypeError) as caught:
        call()
    if not stompy.COMPILED:
        assert name in str(caught.value), caught.value
    return caught.value


def bad_value(call: Callable[[], object], name: str, shown: str) -> ConfigurationError:
    """The ConfigurationError ``call()`` raises, ``name: ...`` showing ``shown``."""
    with pytest.raises(ConfigurationError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith((f"{name}: ", f"{name} ")), message
    assert shown in message, message
    assert isinstance(caught.value, (ValueError, StompError))
    return caught.value


# -- the sans-IO core ------------------------------------------------------------------------


def test_a_frame_of_wrong_types_is_refused() -> None:
    loose: Any = Frame
    wrong_type(lambda: loose(7), "command")
    wrong_type(lambda: loose("SEND", [("a", "b")]), "headers")
    wrong_type(lambda: loose("SEND", (), "text"), "body")
    # What mypyc's build takes, the pure core takes too: a bytearray body, subclasses.
    body: Any = bytearray(b"x")
    assert Frame("SEND", (), body).body == b"x"


def test_a_header_lookup_of_a_wrong_type_is_refused() -> None:
    sent = Frame("SEND", (("destination", "/queue/a"),))
    received = FrameParser("1.2").parse(b"MESSAGE\ndestination:/queue/a\n\n\x00")[0]
    for frame in (sent, received):
        loose: Any = frame.get
        wrong_type(partial(loose, 7), "name")
        wrong_type(partial(loose, "destination", 7), "default")
        assert frame.get("absent", "x") == "x"


def test_the_parser_and_the_encoder_refuse_a_version_naming_it() -> None:
    loose: Any = FrameParser
    bad_value(lambda: FrameParser("2.0"), "version", "'2.0'")
    wrong_type(lambda: loose(1.2), "version")
    wrong_type(lambda: loose("1.2", limits=object()), "limits")
    frame = Frame("SEND", (("destination", "/queue/a"),))
    bad_value(lambda: encode(frame, "1.3"), "version", "'1.3'")
    loose_encode: Any = encode
    wrong_type(lambda: loose_encode(("SEND", ()), "1.2"), "frame")


def test_client_protocol_options_are_configuration_errors() -> None:
    """The public sans-IO client refuses as the clients do (stompy._checks)."""
    loose: Any = ClientProtocol
    # A str is a sequence of characters: it said "got ('.', '1', '2')".
    bad_value(lambda: ClientProtocol(versions="1.2"), "versions", "'1.2'")
    bad_value(lambda: ClientProtocol(versions=["2.0"]), "versions", "['2.0']")
    bad_value(lambda: ClientProtocol(heartbeats=(-1, 0)), "heartbeats", "(-1, 0)")
    bad_value(lambda: ClientProtocol(heartbeat_tolerance=0.5), "heartbeat_tolerance", "0.5")
    wrong_type(lambda: loose(heartbeats=[None, 0]), "heartbeats")
    wrong_type(lambda: loose(limits={"max_body": 1}), "limits")
    loose_format: Any = format_heartbeat
    wrong_type(lambda: loose_format("10,10"), "heartbeats")
    bad_value(lambda: format_heartbeat((0, -5)), "heartbeats", "(0, -5)")


def test_client_protocol_refuses_a_wrong_time_or_data() -> None:
    """Even where the value is not needed yet (no heart-beats, nothing to send)."""
    proto: Any = ClientProtocol()
    for call in (
        proto.data_to_send,
        proto.frames_to_send,
        proto.handle_timer,
        proto.note_alive,
        proto.start_heartbeats,
    ):
        wrong_type(partial(call, "soon"), "now")
    wrong_type(lambda: proto.receive_data(b"", "soon"), "now")
    for data in (None, "", "MESSAGE", 0):
        wrong_type(partial(proto.receive_data, data, 0.0), "data")
    wrong_type(lambda: proto.connect("localhost", headers="client-id"), "headers")
    proto.receive_data(b"", 1)  # an int is a time, as mypyc's float takes it
    assert proto.data_to_send(0) == b""

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

import anyio
import pytest

import stompy
from stompy import ClientProtocol, ConfigurationError, Frame, FrameParser, StompError, encode
from stompy._core.heartbeat import format_heartbeat
from stompy.testing import Broker, BrokerConfig, serve
from stompy.testing._core.store import MessageStore

#: Every wait of these tests is bounded by this many seconds.
LIMIT = 10.0


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
    wrong_type(lambda: loose("SEND", (), bytearray(b"x")), "body")  # as mypyc's build
    # What mypyc's build takes, the pure core takes too: subclasses.
    assert Frame(type("Command", (str,), {})("SEND")).command == "SEND"


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


# -- stompy.testing --------------------------------------------------------------------------


def test_broker_config_names_the_field() -> None:
    make: Any = BrokerConfig
    shown = "got dead_letter_queue='/queue/dlq' and max_redeliveries=None"
    bad_value(lambda: BrokerConfig(dead_letter_queue="/queue/dlq"), "dead_letter_queue", shown)
    bad_value(lambda: BrokerConfig(prefetch=0), "prefetch", "0")
    bad_value(lambda: BrokerConfig(versions=("2.0",)), "versions", "('2.0',)")
    bad_value(lambda: BrokerConfig(heartbeats=(-1, 0)), "heartbeats", "(-1, 0)")
    bad_value(lambda: BrokerConfig(virtual_hosts="localhost"), "virtual_hosts", "'localhost'")
    bad_value(lambda: BrokerConfig(server_name="a\nb"), "server_name", "'a\\nb'")
    wrong_type(lambda: make(dead_letter_queue=7, max_redeliveries=1), "dead_letter_queue")
    wrong_type(lambda: make(max_redeliveries=1.5), "max_redeliveries")
    wrong_type(lambda: make(prefetch=2.5), "prefetch")
    wrong_type(lambda: make(limits={}), "limits")
    wrong_type(lambda: make(virtual_hosts=[1]), "virtual_hosts")
    caught = wrong_type(lambda: make(users={"guest": 1234}), "users")
    assert "1234" not in str(caught)  # a passcode is not shown
    wrong_type(lambda: make(users=["guest"]), "users")


def test_broker_store_refuses_wrong_types() -> None:
    loose: Any = MessageStore
    wrong_type(lambda: loose({"prefetch": 1}), "config")
    core: Any = MessageStore()
    wrong_type(lambda: core.open_connection("now"), "now")
    wrong_type(lambda: core.open_connection(0.0, 7), "peer")
    wrong_type(lambda: core.queue_depth(7), "destination")
    wrong_type(lambda: core.unacked_count(7), "destination")
    session = core.open_connection(0.0)
    wrong_type(lambda: session.receive_data(b"", "now"), "now")
    wrong_type(lambda: session.receive_data(None, 0.0), "data")
    wrong_type(lambda: session.data_to_send("now"), "now")
    wrong_type(lambda: session.resume("now"), "now")
    wrong_type(lambda: session.close(7), "reason")
    wrong_type(lambda: session.send_raw(5), "data")  # bytes(5) was five NULs
    assert session.data_to_send(0.0) == b""


def test_a_broker_refuses_a_session_id_of_a_wrong_type(stomp_broker: Broker) -> None:
    loose: Any = stomp_broker
    with stompy.Connection(stomp_broker.url) as conn:
        session = conn.session
        assert session is not None
        for call in (loose.pause, loose.resume):
            wrong_type(partial(call, session=7), "session")
        wrong_type(lambda: loose.send_raw(None, b"x"), "session")
        wrong_type(lambda: loose.send_raw(session, 5), "data")
        with pytest.raises(KeyError):  # an unknown id of the right type: as documented
            stomp_broker.pause("no-such-session")
        conn.send("/queue/type-checks", b"x", receipt=True)  # the connection lives on
    wrong_type(lambda: loose.queue_depth(7), "destination")
    wrong_type(lambda: loose.wait_until(lambda: True, timeout=None), "timeout")


@pytest.mark.anyio
async def test_an_async_broker_refuses_wrong_types() -> None:
    with anyio.fail_after(LIMIT):
        async with serve() as broker:
            loose: Any = broker
            with pytest.raises(TypeError, match="stream"):
                await loose.serve_stream(object())
            with pytest.raises(TypeError, match="timeout"):
                await loose.wait_until(lambda: True, timeout=None)  # trio's: no limit
            with pytest.raises(ConfigurationError, match="timeout"):
                await broker.wait_until(lambda: True, timeout=-1)
            assert broker.stats.connections_opened == 0


# -- the client's options --------------------------------------------------------------------


def test_reconnect_delays_refuses_what_is_not_callable_at_once() -> None:
    loose: Any = stompy.Reconnect()
    with pytest.raises(TypeError, match="uniform"):
        loose.delays(uniform=0.5)  # was refused at the second attempt, if ever


def test_send_many_refuses_a_tuple_naming_outgoing(stomp_broker: Broker) -> None:
    """Nothing of the chunk that holds it is sent."""
    with stompy.Connection(stomp_broker.url) as conn:
        loose: Any = conn
        messages = [stompy.Outgoing("/queue/type-checks-many", b"1"), ("/queue/a", "x")]
        with pytest.raises(TypeError, match=r"stompy\.Outgoing.*\('/queue/a', 'x'\) \(tuple\)"):
            loose.send_many(messages, receipt=True)
        conn.send("/queue/type-checks-many-done", b"x", receipt=True)
    assert stomp_broker.queue_depth("/queue/type-checks-many") == 0


@pytest.mark.anyio
async def test_async_send_many_refuses_a_tuple_naming_outgoing() -> None:
    with anyio.fail_after(LIMIT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            loose: Any = conn
            with pytest.raises(TypeError, match=r"stompy\.Outgoing"):
                await loose.send_many([("/queue/a", "x")])
            await conn.send("/queue/type-checks-done", b"x", receipt=True)
            assert broker.queue_depth("/queue/a") == 0

"""Heart-beat negotiation and deadlines, alone and in the client (time is an argument)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stompy._events import HeartbeatTimedOut
from stompy._heartbeat import Heartbeat, format_heartbeat, negotiate, parse_heartbeat
from stompy._protocol import ClientProtocol, State
from stompy.errors import RemoteProtocolError
from tests.test_protocol import connected, events, server_bytes

# -- the header ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (0, 0)),  # "A missing heart-beat header MUST be treated ... as 0,0"
        ("0,0", (0, 0)),
        ("10000,5000", (10000, 5000)),
        ("007,0", (7, 0)),
        (" 10 , 20 ", (10, 20)),
        ("2147483647,2147483648", (2**31 - 1, 2**31 - 1)),
        ("9" * 5000 + ",0" + "0" * 5000, (2**31 - 1, 0)),  # beyond what int() reads
        ("0" * 5000 + "15,1", (15, 1)),
    ],
)
def test_parse_heartbeat(value: str | None, expected: tuple[int, int]) -> None:
    assert parse_heartbeat(value) == expected


@pytest.mark.parametrize("value", ["", "x,0", "0,x", "10", "1,2,3", "-1,0", "1.5,2", "1;2", ","])
def test_parse_heartbeat_refuses_garbage(value: str) -> None:
    with pytest.raises(RemoteProtocolError, match="invalid heart-beat"):
        parse_heartbeat(value)


def test_format_heartbeat() -> None:
    assert format_heartbeat((0, 0)) == "0,0"
    assert format_heartbeat((4000, 250)) == "4000,250"
    with pytest.raises(ValueError, match="negative"):
        format_heartbeat((-1, 0))
    with pytest.raises(ValueError, match="negative"):
        format_heartbeat((0, -1))


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ((0, 0), (0, 0), (0, 0)),
        ((1000, 1000), (0, 0), (0, 0)),  # the server can do nothing
        ((0, 0), (1000, 1000), (0, 0)),  # we can do nothing
        ((1000, 0), (0, 2000), (2000, 0)),  # only we send: MAX(cx, sy)
        ((0, 1000), (3000, 0), (0, 3000)),  # only they send: MAX(sx, cy)
        ((1000, 2000), (3000, 500), (1000, 3000)),
        ((5000, 5000), (100, 100), (5000, 5000)),
        ((100, 0), (100, 100), (100, 0)),
    ],
)
def test_negotiate(
    mine: tuple[int, int], theirs: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert negotiate(mine, theirs) == expected


pairs = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))


@given(pairs, pairs)
def test_negotiate_is_the_same_rule_both_ways(
    mine: tuple[int, int], theirs: tuple[int, int]
) -> None:
    outgoing, incoming = negotiate(mine, theirs)
    # The server, negotiating with the same two headers, gets the mirror image.
    assert negotiate(theirs, mine) == (incoming, outgoing)
    # 0 on either side disables a direction; otherwise neither side is asked to go
    # faster than it said it could.
    assert (outgoing == 0) == (mine[0] == 0 or theirs[1] == 0)
    assert outgoing == 0 or outgoing >= max(mine[0], theirs[1])


# -- the deadlines -------------------------------------------------------------------


def test_tolerance_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"at least 1\.0"):
        Heartbeat(1000, 1000, 0.99, 0.0)


def test_deadlines() -> None:
    assert Heartbeat(0, 0, 2.0, 5.0).deadline() is None
    assert Heartbeat(1000, 0, 2.0, 5.0).deadline() == 6.0
    # Before anything arrived the incoming window is one interval longer (grace).
    assert Heartbeat(0, 1000, 2.0, 5.0).deadline() == 8.0
    assert Heartbeat(3000, 1000, 2.0, 5.0).deadline() == 8.0
    assert Heartbeat(1000, 1000, 1.5, 5.0).deadline() == 6.0


def test_first_incoming_interval_has_a_grace_period() -> None:
    # ActiveMQ sends its first beat two intervals after CONNECTED: with tolerance
    # 2.0 that must not count as a dead peer.
    beat = Heartbeat(0, 1000, 2.0, 0.0)
    assert not beat.peer_dead(2.0)
    assert not beat.peer_dead(2.999)
    assert beat.peer_dead(3.0)
    beat.received(2.0)  # the first beat: from now on the plain window applies
    assert beat.deadline() == 4.0
    assert beat.peer_dead(4.0)


def test_beat_due_and_peer_dead_at_their_boundaries() -> None:
    beat = Heartbeat(1000, 2000, 2.0, 10.0)
    assert not beat.beat_due(10.999)
    assert beat.beat_due(11.0)
    assert not beat.peer_dead(15.999)  # 2 s x 2.0, plus the first interval's grace
    assert beat.peer_dead(16.0)
    beat.sent(11.0)
    beat.received(13.0)
    assert beat.deadline() == 12.0
    assert not beat.beat_due(11.5)
    assert not beat.peer_dead(16.9)
    assert beat.peer_dead(17.0)
    assert beat.silence(17.5) == 4.5


def test_directions_that_are_off_never_fire() -> None:
    beat = Heartbeat(0, 0, 2.0, 0.0)
    assert not beat.beat_due(1e9)
    assert not beat.peer_dead(1e9)


def test_peer_dead_at_its_own_deadline_despite_rounding() -> None:
    # 0.7 + 0.1 == 0.7999999999999999, and 0.7999999999999999 - 0.7 < 0.1: a check
    # written as "now - last >= window" says "not yet" at the deadline it announced.
    beat = Heartbeat(0, 100, 1.0, 0.7)
    deadline = beat.deadline()
    assert deadline is not None
    assert beat.peer_dead(deadline)


times = st.floats(0, 1e7, allow_nan=False)
intervals = st.integers(0, 100_000)


@given(intervals, intervals, st.floats(1.0, 5.0), times, times, times)
def test_something_is_due_at_every_deadline(
    out_ms: int, in_ms: int, tolerance: float, start: float, sent: float, received: float
) -> None:
    beat = Heartbeat(out_ms, in_ms, tolerance, start)
    beat.sent(sent)
    beat.received(received)
    deadline = beat.deadline()
    if deadline is None:
        assert out_ms == in_ms == 0
        return
    # A timer set for the deadline always finds work: it never spins.
    assert beat.beat_due(deadline) or beat.peer_dead(deadline)
    # ...and nothing is due before it.
    before = deadline - max(1e-6, abs(deadline) * 1e-12)
    assert not beat.beat_due(before)
    assert not beat.peer_dead(before)


# -- in the client -------------------------------------------------------------------


def test_connect_announces_heartbeats() -> None:
    proto = ClientProtocol(heartbeats=(1000, 2000))
    proto.connect("/")
    assert b"\nheart-beat:1000,2000\n" in proto.data_to_send()


@pytest.mark.parametrize(
    ("server", "expected"),
    [(None, (0, 0)), ("0,0", (0, 0)), ("3000,500", (1000, 3000)), ("0,5000", (5000, 0))],
)
def test_client_negotiation(server: str | None, expected: tuple[int, int]) -> None:
    proto = connected(heartbeats=(1000, 2000), server_heartbeat=server)
    assert proto.negotiated_heartbeats == expected
    if expected == (0, 0):
        assert proto.next_deadline() is None


def test_invalid_server_heartbeat_is_a_protocol_error() -> None:
    proto = ClientProtocol(heartbeats=(1000, 1000))
    proto.connect("/")
    proto.receive_data(server_bytes("CONNECTED", (("version", "1.2"), ("heart-beat", "x,0"))))
    with pytest.raises(RemoteProtocolError, match="invalid heart-beat"):
        proto.next_event()
    assert proto.state is State.CLOSED
    assert proto.next_deadline() is None


def test_no_deadline_before_heartbeats_start_or_after_close() -> None:
    proto = ClientProtocol(heartbeats=(1000, 1000))
    assert proto.next_deadline() is None
    proto.handle_timer(100.0)
    assert proto.data_to_send() == b""
    proto = connected(heartbeats=(1000, 1000), server_heartbeat="1000,1000", now=5.0)
    assert proto.next_deadline() == 6.0
    proto.close()
    assert proto.next_deadline() is None
    proto.handle_timer(100.0)
    assert events(proto) == []


def test_start_heartbeats_before_connected_does_nothing() -> None:
    proto = ClientProtocol(heartbeats=(1000, 1000))
    proto.connect("/")
    proto.start_heartbeats(0.0)
    assert proto.next_deadline() is None


def test_an_eol_goes_out_when_a_beat_is_due() -> None:
    proto = connected(heartbeats=(1000, 0), server_heartbeat="0,1000", now=10.0)
    assert proto.negotiated_heartbeats == (1000, 0)
    assert proto.next_deadline() == 11.0
    proto.handle_timer(10.5)  # early wake-up: nothing to do
    assert proto.data_to_send(10.5) == b""
    proto.handle_timer(11.0)
    assert proto.data_to_send(11.0) == b"\n"
    assert proto.next_deadline() == 12.0
    proto.handle_timer(12.25)  # late wake-up: one EOL, next deadline from now
    assert proto.data_to_send(12.25) == b"\n"
    assert proto.next_deadline() == 13.25


def test_no_eol_when_something_else_was_sent_in_the_interval() -> None:
    proto = connected(heartbeats=(1000, 0), server_heartbeat="0,1000", now=0.0)
    proto.send("/q", b"x")
    assert proto.data_to_send(0.6).startswith(b"SEND")
    assert proto.next_deadline() == 1.6
    proto.handle_timer(1.0)
    assert proto.data_to_send(1.0) == b""
    proto.handle_timer(1.6)
    assert proto.data_to_send(1.6) == b"\n"


def test_a_frame_waiting_to_be_written_is_the_beat() -> None:
    proto = connected(heartbeats=(1000, 0), server_heartbeat="0,1000", now=0.0)
    proto.send("/q", b"x")
    proto.handle_timer(1.0)
    data = proto.data_to_send(1.0)
    assert data.startswith(b"SEND")
    assert data.endswith(b"\x00")
    assert proto.next_deadline() == 2.0


def test_data_to_send_without_now_does_not_move_the_deadline() -> None:
    proto = connected(heartbeats=(1000, 0), server_heartbeat="0,1000", now=0.0)
    proto.send("/q", b"x")
    proto.data_to_send()
    assert proto.next_deadline() == 1.0


def test_peer_declared_dead_after_interval_times_tolerance() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    assert proto.negotiated_heartbeats == (0, 1000)
    assert proto.next_deadline() == 3.0  # tolerance 2.0, plus one interval of grace
    proto.receive_data(b"\n", 1.5)  # a heart-beat
    assert proto.next_event() is None
    assert proto.next_deadline() == 3.5
    proto.handle_timer(3.4)
    assert events(proto) == []
    proto.handle_timer(3.5)
    assert events(proto) == [HeartbeatTimedOut(2.0)]
    assert proto.state is State.CLOSED
    assert proto.next_deadline() is None


def test_any_byte_is_a_sign_of_life() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    proto.receive_data(b"MESS", 1.9)  # part of a frame, no heart-beat
    proto.handle_timer(2.0)
    assert proto.state is State.CONNECTED
    assert proto.next_deadline() == 3.9
    proto.receive_data(b"", 3.0)  # nothing is not life
    assert proto.next_deadline() == 3.9


def test_note_alive_counts_as_life() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    proto.note_alive(1.0)
    assert proto.next_deadline() == 3.0
    ClientProtocol().note_alive(1.0)  # no heart-beats: nothing to note


def test_tolerance_is_configurable() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", tolerance=1.5, now=0.0)
    proto.receive_data(b"\n", 0.5)
    assert proto.next_deadline() == 2.0
    proto.handle_timer(2.0)
    assert events(proto) == [HeartbeatTimedOut(1.5)]


def test_both_directions_share_one_deadline() -> None:
    proto = connected(heartbeats=(1000, 1000), server_heartbeat="3000,500", now=0.0)
    assert proto.negotiated_heartbeats == (1000, 3000)
    assert proto.next_deadline() == 1.0
    for now in (1.0, 2.0, 3.0, 4.0, 5.0):
        proto.handle_timer(now)
        assert proto.data_to_send(now) == b"\n"
        proto.receive_data(b"\n", now)
    assert proto.next_deadline() == 6.0
    assert proto.state is State.CONNECTED


def test_heartbeats_go_on_while_disconnecting() -> None:
    proto = connected(heartbeats=(1000, 0), server_heartbeat="0,1000", now=0.0)
    proto.disconnect()
    proto.data_to_send(0.0)
    proto.handle_timer(1.0)
    assert proto.data_to_send(1.0) == b"\n"


@pytest.mark.parametrize("start", [0.7, 12345.678, 1e6 + 0.1])
def test_handle_timer_at_next_deadline_always_acts(start: float) -> None:
    proto = connected(heartbeats=(0, 50), server_heartbeat="50,0", tolerance=2.0, now=start)
    deadline = proto.next_deadline()
    assert deadline is not None
    proto.handle_timer(deadline)
    assert [type(e) for e in events(proto)] == [HeartbeatTimedOut]

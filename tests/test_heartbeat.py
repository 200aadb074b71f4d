"""Heart-beat negotiation and deadlines, alone and in the client (time is an argument)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import stompy
from stompy._core.events import HeartbeatTimedOut
from stompy._core.heartbeat import (
    Heartbeat,
    format_heartbeat,
    negotiate,
    only_heartbeats,
    parse_heartbeat,
)
from stompy._core.protocol import ClientProtocol, State
from stompy.errors import ConfigurationError, RemoteProtocolError
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
    beats: Any
    for beats in ((-1, 0), (0, -1), (0, 2**31)):
        with pytest.raises(ConfigurationError, match=r"^heartbeats: each interval .* got \("):
            format_heartbeat(beats)
    # No tuple[int, int]: compiled, mypyc's own TypeError comes first, worded its way.
    for beats in ("10,10", None, (1,), (1, "2"), (0.5, 0)):
        with pytest.raises((TypeError, ConfigurationError)) as caught:
            format_heartbeat(beats)
        assert stompy.COMPILED or str(caught.value).startswith("heartbeats: ")


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
    # CONNECTED is a frame: the first window is one interval longer.
    assert Heartbeat(0, 1000, 2.0, 5.0).deadline() == 8.0
    assert Heartbeat(3000, 1000, 2.0, 5.0).deadline() == 8.0
    assert Heartbeat(1000, 1000, 1.5, 5.0).deadline() == 6.0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\n", True),
        (b"\r\n", True),
        (b"\n\n\r\n", True),
        (b"", False),  # nothing is not a beat
        (b"MESSAGE\n", False),
        (b"\nMESSAGE\n", False),  # a beat, then a frame
        (b"\x00\n", False),  # the end of a frame
        (b" \n", False),
    ],
)
def test_only_heartbeats(data: bytes, expected: bool) -> None:
    assert only_heartbeats(data) is expected


def test_a_frame_gets_one_more_interval_than_a_beat() -> None:
    # ActiveMQ's first beat after CONNECTED, or after any other frame, comes up to two
    # intervals after it: with tolerance 2.0 that must not count as a dead peer.
    beat = Heartbeat(0, 1000, 2.0, 0.0)
    assert not beat.peer_dead(2.999)
    assert beat.peer_dead(3.0)
    beat.received(2.0, beat_only=True)  # a beat: the plain window
    assert beat.deadline() == 4.0
    beat.received(3.5)  # a frame (or bytes nobody looked at)
    assert beat.deadline() == 6.5
    assert not beat.peer_dead(6.499)
    beat.received(4.0, beat_only=True)
    assert beat.deadline() == 6.0
    assert beat.peer_dead(6.0)


def test_beat_due_and_peer_dead_at_their_boundaries() -> None:
    beat = Heartbeat(1000, 2000, 2.0, 10.0)
    assert not beat.beat_due(10.999)
    assert beat.beat_due(11.0)
    assert not beat.peer_dead(15.999)  # 2 s x 2.0, plus one interval after CONNECTED
    assert beat.peer_dead(16.0)
    beat.sent(11.0)
    beat.received(13.0, beat_only=True)
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


@given(intervals, intervals, st.floats(1.0, 5.0), times, times, times, st.booleans())
def test_something_is_due_at_every_deadline(
    out_ms: int,
    in_ms: int,
    tolerance: float,
    start: float,
    sent: float,
    received: float,
    beat_only: bool,
) -> None:
    beat = Heartbeat(out_ms, in_ms, tolerance, start)
    beat.sent(sent)
    beat.received(received, beat_only)
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


# -- the rule, against models of the peer --------------------------------------------


def documented_window(interval: float, tolerance: float, after_beat: bool) -> float:
    """docs/heartbeats.md: interval x tolerance after a beat, one interval more otherwise."""
    return interval * (tolerance if after_beat else tolerance + 1)


# (fraction of the window the next arrival uses, whether it holds only heart-beats)
arrivals = st.lists(st.tuples(st.floats(0.0, 0.99), st.booleans()), max_size=40)


def within_the_rule(
    interval: float, tolerance: float, start: float, steps: list[tuple[float, bool]]
) -> Iterator[tuple[float, bool]]:
    """``(time, only heart-beats)`` of arrivals, each inside the window that the
    documented rule opens at the one before (CONNECTED, a frame, opens the first)."""
    last, after_beat = start, False
    for fraction, beat_only in steps:
        last += fraction * documented_window(interval, tolerance, after_beat)
        after_beat = beat_only
        yield last, beat_only


@given(st.integers(1, 100_000), st.floats(1.0, 5.0), times, arrivals)
def test_a_peer_within_the_rule_is_never_declared_dead(
    in_ms: int, tolerance: float, start: float, steps: list[tuple[float, bool]]
) -> None:
    beat = Heartbeat(0, in_ms, tolerance, start)
    for arrival, beat_only in within_the_rule(in_ms / 1000, tolerance, start, steps):
        assert not beat.peer_dead(arrival)
        deadline = beat.deadline()
        assert deadline is not None
        assert deadline > arrival
        beat.received(arrival, beat_only)


@given(st.integers(1, 100_000), st.floats(1.0, 5.0), times, arrivals)
def test_a_silent_peer_is_declared_dead_within_the_documented_bound(
    in_ms: int, tolerance: float, start: float, steps: list[tuple[float, bool]]
) -> None:
    interval = in_ms / 1000
    beat = Heartbeat(0, in_ms, tolerance, start)
    last, after_beat = start, False
    for last, after_beat in within_the_rule(interval, tolerance, start, steps):
        beat.received(last, after_beat)
    bound = documented_window(interval, tolerance, after_beat)
    assert bound <= interval * (tolerance + 1)  # the bound whatever came last
    limit = last + bound
    slack = 1e-9 * max(1.0, abs(limit))  # float rounding, nothing more
    deadline = beat.deadline()
    assert deadline is not None
    assert deadline <= limit + slack
    assert beat.peer_dead(limit + slack)
    # ...and not before the rule says so.
    assert not beat.peer_dead(last + bound * 0.999)


def broker_arrivals(
    interval: float,
    check_every: float,
    beats_are_output: bool,
    first_check: float,
    frames: list[float],
    delays: list[float],
) -> list[tuple[float, bool]]:
    """When a broker's bytes arrive: ``(time, only heart-beats)``, CONNECTED written at 0.

    The broker looks every ``check_every`` seconds (first at ``first_check``) and writes
    a beat if it wrote nothing since its last look; ``beats_are_output`` says whether
    its own beats count as something written. ActiveMQ 5.17 (measured, docs/brokers.md):
    ``check_every=interval``, beats not counted, so the first beat after a frame comes
    up to two intervals after it. RabbitMQ: ``check_every=interval / 2``, beats counted.
    Each write arrives ``delays[i]`` seconds later, in order (TCP).
    """
    horizon = max(frames, default=0.0) + 3 * interval
    writes: list[tuple[float, bool]] = [(0.0, False)] + [(t, False) for t in sorted(frames)]
    checks = [first_check + k * check_every for k in range(int(horizon / check_every) + 2)]
    previous = float("-inf")
    for check in checks:
        # A write at the very time of a look counts for the next one.
        wrote = [
            t for t, beat in writes if previous <= t < check and (beats_are_output or not beat)
        ]
        if not wrote:
            writes.append((check, True))
        previous = check
    writes.sort()
    out: list[tuple[float, bool]] = []
    for i, (written, beat_only) in enumerate(writes):
        arrival = written + delays[i % len(delays)]
        out.append((max(arrival, out[-1][0]) if out else arrival, beat_only))
    return out


broker_shapes = st.sampled_from([("activemq", 1.0, False), ("rabbitmq", 0.5, True)])


@example(  # found by hypothesis: a frame and a beat at one instant, the next beat 2 intervals on
    in_ms=10,
    shape=("activemq", 1.0, False),
    first_check=0.5,
    frames=[2.5],
    delays=[0.0],
)
@example(  # measured: a RECEIPT just after ActiveMQ's look, its next beat 2.03 intervals on
    in_ms=100,
    shape=("activemq", 1.0, False),
    first_check=1.0,
    frames=[1.001],
    delays=[0.0, 0.0, 0.03],
)
@given(
    st.integers(10, 10_000),
    broker_shapes,
    st.floats(0.01, 1.0),
    st.lists(st.floats(0.0, 20.0), max_size=20),
    st.lists(st.floats(0.0, 0.25), min_size=1, max_size=20),
)
def test_brokers_we_test_are_never_taken_for_dead_with_the_default_tolerance(
    in_ms: int,
    shape: tuple[str, float, bool],
    first_check: float,
    frames: list[float],
    delays: list[float],
) -> None:
    # Times in intervals (frames, delays, the first check), scaled by the interval.
    interval = in_ms / 1000
    _, check_every, beats_are_output = shape
    got = broker_arrivals(
        interval,
        check_every * interval,
        beats_are_output,
        first_check * check_every * interval,
        [t * interval for t in frames],
        [d * interval for d in delays],
    )
    connected_at, _ = got[0]
    # What arrives at one instant reaches the core as one chunk, beat-only if all of it is.
    merged: list[tuple[float, bool]] = []
    for arrival, beat_only in got[1:]:
        if merged and merged[-1][0] == arrival:
            merged[-1] = (arrival, merged[-1][1] and beat_only)
        else:
            merged.append((arrival, beat_only))
    beat = Heartbeat(0, in_ms, 2.0, connected_at)
    for arrival, beat_only in merged:
        assert not beat.peer_dead(arrival), (arrival, beat.last_received)
        beat.received(arrival, beat_only)


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
    assert proto.next_deadline() == 4.9  # after a frame, one interval more
    proto.receive_data(b"", 3.0)  # nothing is not life
    assert proto.next_deadline() == 4.9


def test_after_a_frame_the_window_is_one_interval_longer() -> None:
    # ActiveMQ's first beat after a frame comes up to two intervals after it.
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    proto.receive_data(server_bytes("RECEIPT", (("receipt-id", "r1"),)), 1.0)
    assert proto.next_deadline() == 4.0
    proto.handle_timer(3.05)  # two intervals and a bit: not dead
    assert proto.state is State.CONNECTED
    proto.receive_data(b"\n", 3.05)  # a beat: from now on the plain window
    assert proto.next_deadline() == 5.05
    proto.receive_data(b"\r\n", 4.0)
    assert proto.next_deadline() == 6.0
    proto.handle_timer(6.0)
    assert events(proto)[-1] == HeartbeatTimedOut(2.0)


def test_note_alive_counts_as_life() -> None:
    proto = connected(heartbeats=(0, 1000), server_heartbeat="1000,0", now=0.0)
    proto.note_alive(1.0)  # bytes nobody looked at yet: maybe a frame
    assert proto.next_deadline() == 4.0
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

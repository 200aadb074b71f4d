"""Heart-beat negotiation and deadlines, with no clock inside.

Both roles use this: the client state machine and the in-process broker. Time is
always an argument (seconds, from any monotonic clock), so tests drive it with a
fake clock and transports re-arm a single deadline, the aioquic way.
"""

from __future__ import annotations

import re
from typing import Final

from stompy._checks import check_heartbeats
from stompy.errors import RemoteProtocolError

__all__ = (
    "MAX_INTERVAL",
    "Heartbeat",
    "format_heartbeat",
    "negotiate",
    "only_heartbeats",
    "parse_heartbeat",
)

_HEADER: Final = re.compile(r"\s*([0-9]+)\s*,\s*([0-9]+)\s*")
#: The longest interval kept, in ms (about 24.8 days): longer means "never" in practice,
#: and a peer's thousand-digit number must not reach int() (sys.get_int_max_str_digits).
MAX_INTERVAL: Final = 2**31 - 1


def _interval(digits: str) -> int:
    digits = digits.lstrip("0")
    if len(digits) > 10:
        return MAX_INTERVAL
    return min(int(digits or "0"), MAX_INTERVAL)


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """Parse a ``heart-beat`` header; a missing one means ``0,0``.

    "A missing heart-beat header MUST be treated the same way as a heart-beat:0,0
    header" (1.2, Heart-beating). Anything but two non-negative integers separated by
    a comma raises :class:`RemoteProtocolError`; intervals above :data:`MAX_INTERVAL`
    are cut down to it.
    """
    if value is None:
        return (0, 0)
    match = _HEADER.fullmatch(value)
    if match is None:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise RemoteProtocolError(
            f"invalid heart-beat header {shown!r}: want two integers like '10000,10000'"
        )
    return (_interval(match.group(1)), _interval(match.group(2)))


def format_heartbeat(beats: tuple[int, int]) -> str:
    """The ``heart-beat`` header value for ``(can send, want to receive)`` in ms.

    Raises :class:`~stompy.errors.ConfigurationError` (a :class:`ValueError`) naming
    ``heartbeats`` for an interval below 0, above :data:`MAX_INTERVAL` or not whole,
    and a :class:`TypeError` for what is no pair of numbers.
    """
    send, receive = check_heartbeats("heartbeats", beats, MAX_INTERVAL)
    return f"{send},{receive}"


def negotiate(mine: tuple[int, int], theirs: tuple[int, int]) -> tuple[int, int]:
    """Return ``(outgoing, incoming)`` intervals in ms; 0 disables a direction.

    With ``mine = (cx, cy)`` and ``theirs = (sx, sy)``: "if cx is 0 or sy is 0 then
    there will be none; otherwise, there will be heart-beats every MAX(cx, sy)
    milliseconds. In the other direction, sx and cy are used the same way."
    """
    cx, cy = mine
    sx, sy = theirs
    outgoing = 0 if cx == 0 or sy == 0 else max(cx, sy)
    incoming = 0 if sx == 0 or cy == 0 else max(sx, cy)
    return (outgoing, incoming)


def only_heartbeats(data: bytes) -> bool:
    """Whether ``data`` holds heart-beat EOLs and nothing else (b"" holds nothing)."""
    # A frame starts with its command, so one byte decides for almost every chunk.
    return bool(data) and data[0] in b"\r\n" and not data.strip(b"\r\n")


class Heartbeat:
    """The two heart-beat deadlines of one connection.

    ``sent(now)`` and ``received(now)`` record traffic (any byte received is a sign of
    life, not only an EOL); ``deadline()`` is the next time something must be
    checked; ``beat_due(now)`` says an EOL must go out, because nothing else was sent
    for a whole outgoing interval; ``peer_dead(now)`` says the peer stayed silent
    longer than its window.

    The window is the incoming interval times ``tolerance`` after a heart-beat, and
    one incoming interval longer after anything else: CONNECTED, a frame, part of
    one, or bytes nobody looked at. Some brokers only check every interval whether
    they wrote something since the last check, so their first beat after a frame
    comes up to two intervals after it (ActiveMQ: 1.04 to 2.03 intervals, measured),
    which a window of two intervals races; their later beats keep the interval.
    Either way the peer is declared dead at most ``incoming * (tolerance + 1)``
    seconds after its last byte, and ``incoming * tolerance`` after its last beat.
    """

    def __init__(self, outgoing_ms: int, incoming_ms: int, tolerance: float, now: float) -> None:
        if tolerance < 1.0:
            raise ValueError(f"heart-beat tolerance must be at least 1.0, got {tolerance}")
        self.outgoing = outgoing_ms / 1000.0
        self.incoming = incoming_ms / 1000.0
        self.tolerance = tolerance
        self.last_sent = now
        self.last_received = now
        # The clocks start at CONNECTED, a frame: the longer window applies.
        self._grace = self.incoming

    def sent(self, now: float) -> None:
        self.last_sent = now

    def received(self, now: float, beat_only: bool = False) -> None:
        """The peer showed life at ``now``.

        ``beat_only`` says the bytes were heart-beat EOLs and nothing else (see
        :func:`only_heartbeats`); then the plain window applies, otherwise the longer
        one (see the class docstring).
        """
        self.last_received = now
        self._grace = 0.0 if beat_only else self.incoming

    def _dead_at(self) -> float:
        return self.last_received + self.incoming * self.tolerance + self._grace

    def deadline(self) -> float | None:
        """When :meth:`beat_due` or :meth:`peer_dead` may next become true."""
        best: float | None = None
        if self.outgoing > 0:
            best = self.last_sent + self.outgoing
        if self.incoming > 0:
            dead = self._dead_at()
            best = dead if best is None else min(best, dead)
        return best

    def beat_due(self, now: float) -> bool:
        return self.outgoing > 0 and now >= self.last_sent + self.outgoing

    def peer_dead(self, now: float) -> bool:
        # The same sum as in deadline(): ``now - last >= window`` can be False at the
        # deadline itself through rounding, and a timer would then fire for nothing.
        return self.incoming > 0 and now >= self._dead_at()

    def silence(self, now: float) -> float:
        """Seconds since anything arrived."""
        return now - self.last_received

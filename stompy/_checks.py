"""The checks of what users pass in: the options of the constructors and of the Spark
source, and the numbers and choices the calls take. Written once, so that every front
door answers a mistake the same way.

The rule: a value of the wrong type is a :class:`TypeError`; a value of the right type
that stompy cannot use is a :class:`~stompy.errors.ConfigurationError` (a
:class:`ValueError` too). Both name the option and show the value, as in
``max_pending: must be at least 1, got 0``, and are raised where the object is made
or the call begins: before anything is opened, sent or waited for.

Nothing here does I/O; the compiled codec (:class:`~stompy.FrameLimits`) uses it too.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Final

from stompy.errors import ConfigurationError

__all__ = (
    "MAX_SECONDS",
    "bad_value",
    "check_choice",
    "check_flag",
    "check_heartbeats",
    "check_integer",
    "check_number",
    "check_seconds",
    "check_timeout",
    "check_type",
    "check_version",
    "check_versions",
    "refuse_time",
    "wrong_type",
)

_INF: Final = math.inf
#: The most seconds an option or argument in seconds may say (about 11.6 days; ``None``
#: waits with no limit where a call allows it). Far more would be an ``OverflowError``
#: from deep inside a lock, a socket or a selector: a thread waits at most
#: ``threading.TIMEOUT_MAX`` (49.7 days on Windows), ``epoll`` 24.8 days, and a
#: reconnect delay may grow by its jitter to twice this.
MAX_SECONDS: Final = 1_000_000.0


def bad_value(name: str, rule: str, value: object) -> ConfigurationError:
    """The error for ``name``'s ``value``, which breaks ``rule`` (``must be ...``)."""
    return ConfigurationError(f"{name}: {rule}, got {value!r}")


def wrong_type(name: str, expected: str, value: object) -> TypeError:
    """The error for ``name``'s ``value``, which is not ``expected`` (``a str``...)."""
    return TypeError(f"{name}: expected {expected}, got {value!r} ({type(value).__name__})")


def check_type(name: str, value: object, kinds: type | tuple[type, ...], expected: str) -> None:
    """Raise :func:`wrong_type` unless ``value`` is one of ``kinds``."""
    if not isinstance(value, kinds):
        raise wrong_type(name, expected, value)


def check_flag(name: str, value: object) -> bool:
    """``value``, a ``bool``: ``"no"`` or ``0`` would read as a yes or a no by accident."""
    if value is True or value is False:
        return value
    raise wrong_type(name, "True or False", value)


def _real(name: str, value: object, expected: str) -> float:
    """``value`` as a float, if it is a real number (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise wrong_type(name, expected, value)
    return float(value)


def check_seconds(name: str, value: object, *, positive: bool = False) -> float:
    """``value``, a number of seconds ``>= 0`` (``> 0`` with ``positive``) and at most
    :data:`MAX_SECONDS` (not NaN, not infinite)."""
    seconds = _real(name, value, "a number of seconds")
    if not (seconds > 0.0 if positive else seconds >= 0.0) or not seconds <= MAX_SECONDS:
        low = "> 0" if positive else ">= 0"
        rule = f"must be a number of seconds {low} and <= {MAX_SECONDS:.0f}"
        raise bad_value(name, rule, value)
    return seconds


def check_number(name: str, value: object, minimum: float, maximum: float = _INF) -> float:
    """``value``, a finite number from ``minimum`` (to ``maximum``)."""
    number = _real(name, value, "a number")
    if not minimum <= number <= maximum or number == _INF:
        rule = f">= {minimum}" if maximum == _INF else f"from {minimum} to {maximum}"
        raise bad_value(name, f"must be a finite number {rule}", value)
    return number


def check_timeout(timeout: float | None) -> float | None:
    """A wait's ``timeout``: ``None`` (no limit) or :func:`check_seconds`.

    ``get()`` and ``request()`` alike: a negative one is an error, as for
    :meth:`queue.Queue.get`, not a wait of no time.
    """
    if timeout is None or (type(timeout) is float and 0.0 <= timeout <= MAX_SECONDS):
        return timeout  # the usual case, at the cost of a comparison
    if isinstance(timeout, float) and timeout == _INF:
        # "Forever", as some waits take it: here that is None.
        rule = f"must be a number of seconds >= 0 and <= {MAX_SECONDS:.0f} (None: no limit)"
        raise bad_value("timeout", rule, timeout)
    return check_seconds("timeout", timeout)


def check_integer(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """``value``, a whole number from ``minimum`` (to ``maximum``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise wrong_type(name, "an int", value)
    number = int(value)
    if number < minimum:
        raise bad_value(name, f"must be at least {minimum}", value)
    if maximum is not None and number > maximum:
        raise bad_value(name, f"must be at most {maximum}", value)
    return number


def check_choice(name: str, value: object, allowed: Iterable[str]) -> str:
    """``value``, one of the strings ``allowed``."""
    choices = tuple(allowed)
    if isinstance(value, str) and value in choices:
        return value
    listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
    if not isinstance(value, str):
        raise wrong_type(name, listed, value)
    raise bad_value(name, f"must be {listed}", value)


def check_heartbeats(name: str, value: object, maximum: int) -> tuple[int, int]:
    """``value``, a pair ``(can send, want to receive)`` of whole milliseconds from 0
    to ``maximum``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise wrong_type(name, "a pair (can send, want to receive) of ms", value)
    if len(value) != 2:
        raise bad_value(name, "must be a pair (can send, want to receive) of ms", value)
    beats: list[int] = []
    for beat in value:
        if isinstance(beat, bool) or not isinstance(beat, numbers.Real):
            raise wrong_type(name, "a pair (can send, want to receive) of ms", value)
        interval = float(beat)
        if not (0.0 <= interval <= maximum and interval.is_integer()):
            rule = f"each interval must be a whole number of ms from 0 to {maximum}"
            raise bad_value(name, rule, value)
        beats.append(int(interval))
    return (beats[0], beats[1])


def check_versions(name: str, value: object, known: tuple[str, ...]) -> tuple[str, ...]:
    """``value``, a non-empty sequence of the STOMP versions ``known``, as a tuple."""
    listed = ", ".join(repr(v) for v in known)
    if isinstance(value, str):
        # A str is a sequence of one-character strings: "1.2" would be '.', '1' and '2'.
        raise bad_value(name, f"must be a sequence of versions like ({known[-1]!r},)", value)
    if not isinstance(value, Iterable):
        raise wrong_type(name, f"a sequence of versions among {listed}", value)
    versions = tuple(value)
    if not versions or any(v not in known for v in versions):
        raise bad_value(name, f"must be a non-empty sequence of versions among {listed}", value)
    return versions


def check_version(name: str, value: object, known: tuple[str, ...]) -> str:
    """``value``, one of the STOMP versions ``known`` (a str)."""
    if isinstance(value, str) and value in known:
        return value
    listed = ", ".join(repr(v) for v in known)
    if not isinstance(value, str):
        raise wrong_type(name, f"a STOMP version among {listed}", value)
    raise bad_value(name, f"must be a STOMP version among {listed}", value)


def refuse_time(name: str, value: object) -> None:
    """Raise :func:`wrong_type` unless ``value`` is a time in seconds (an int or a float,
    as a compiled ``float`` parameter takes): for the sans-IO cores' ``now``, checked
    only off their busy paths (a ``type(now) is float`` there is the usual case)."""
    if not isinstance(value, (int, float)):
        raise wrong_type(name, "a time in seconds (a float)", value)

"""The types of the command-line values: each turns an argument's text into the value
the command uses, or raises :class:`argparse.ArgumentTypeError` saying what it wants
(argparse makes that the one-line usage error, exit status 2)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any, Final

from stompy import VERSIONS

# The library's own bound on seconds, so that the command line refuses what it would.
from stompy._checks import MAX_SECONDS as _MAX_SECONDS

__all__ = (
    "MAX_HEARTBEAT",
    "MAX_SECONDS",
    "accepted_vhost",
    "at_least_zero",
    "byte_size",
    "destination",
    "header",
    "heartbeat",
    "listen_host",
    "port",
    "positive",
    "seconds",
    "stomp_versions",
    "user",
    "vhost",
    "ws_header",
)

#: The longest heart-beat interval, in ms: what a poll() timeout can hold (2**31 - 1).
MAX_HEARTBEAT: Final = 2**31 - 1
#: The most seconds a timeout may be: the library's bound (about 11.5 days), which a
#: larger --timeout or --connect-timeout met only once connected, in its own words.
MAX_SECONDS: Final = _MAX_SECONDS


def user(text: str) -> tuple[str, str]:
    login, sep, passcode = text.partition(":")
    if not sep or not login:
        raise argparse.ArgumentTypeError(f"want LOGIN:PASSCODE, got {text!r}")
    return login, passcode


def heartbeat(text: str) -> tuple[int, int]:
    want = f"want two numbers of ms from 0 to {MAX_HEARTBEAT} like 1000,1000, got {text!r}"
    send, sep, receive = text.partition(",")
    try:
        beats = (int(send), int(receive))
    except ValueError:
        raise argparse.ArgumentTypeError(want) from None
    if not sep:
        raise argparse.ArgumentTypeError(want)
    if any(beat < 0 for beat in beats):
        raise argparse.ArgumentTypeError(
            f"{want}: a heart-beat is an interval, never negative (0 for none; 0,0 turns them off)"
        )
    if any(beat > MAX_HEARTBEAT for beat in beats):
        raise argparse.ArgumentTypeError(want)
    return beats


def stomp_versions(text: str) -> tuple[str, ...]:
    """``1.0``, ``1.1,1.2``...: the STOMP versions to offer (the library's ``versions``
    option), each once, in the library's order."""
    given = [version.strip() for version in text.split(",")]
    if not all(version in VERSIONS for version in given):
        raise argparse.ArgumentTypeError(
            f"want STOMP versions among {','.join(VERSIONS)} separated by commas, "
            f"like 1.0 or 1.1,1.2, got {text!r}"
        )
    return tuple(version for version in VERSIONS if version in given)


def _utf8(text: str, want: str) -> str:
    """``text`` if it is UTF-8 (what STOMP headers are); else the error, showing the
    argument's bytes (Python took those that are not UTF-8 as lone surrogates)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise argparse.ArgumentTypeError(
                f"want {want} in UTF-8, as STOMP headers are, got {os.fsencode(text)!r}"
            ) from None
    return text


def header(text: str) -> tuple[str, str]:
    name, sep, value = _utf8(text, "NAME:VALUE").partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"want NAME:VALUE, got {text!r}")
    return name.strip(), value


def ws_header(text: str) -> tuple[str, str]:
    # HTTP ignores the white space around a field value: "Cookie: a=b" means "a=b".
    name, value = header(text)
    return name, value.strip()


def positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """A whole number (``int``) or a number of seconds (``float``, finite and at most
    :data:`MAX_SECONDS`) above 0."""

    # "want a number" of 1.5 where a whole one is wanted would say 1.5 is none.
    what = "a whole number" if kind is int else "a number"

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"want {what}, got {text!r}") from None
        if not value > 0:  # also NaN
            raise argparse.ArgumentTypeError(f"want {what} above 0, got {text!r}")
        if kind is float and not value <= MAX_SECONDS:
            raise argparse.ArgumentTypeError(
                f"want a number of seconds up to {MAX_SECONDS:,.0f}, got {text!r}"
            )
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its messages
    return convert


#: The units of :func:`byte_size`, binary as in ``ls -h``: 64M is 64 MiB.
_BYTE_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_size(text: str) -> int:
    """A number of bytes above 0: ``1000``, or with a binary unit, ``64K``, ``64M``, ``1G``
    (``KiB``, ``MiB``, ``GiB`` too)."""
    found = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    value = int(found[1]) * _BYTE_UNITS[found[2].upper()] if found else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"want a number of bytes above 0, like 1000000, 64K, 64M or 1G, got {text!r}"
        )
    return value


def at_least_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"want a whole number >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"want a port from 0 to 65535, got {text!r}")
    return value


def listen_host(text: str) -> str:
    """The address a serving command listens on: not empty (the resolver would not say
    that the name it could not find is the empty one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"want an address to listen on, like 127.0.0.1 (this machine only), 0.0.0.0 "
            f"(every IPv4 interface) or :: (every IPv6 one), got {text!r}"
        )
    return text


def vhost(text: str) -> str:
    """A virtual host for the CONNECT ``host`` header: not empty, which names none."""
    if not text:
        raise argparse.ArgumentTypeError(
            "want a virtual host like / or staging, got '': an empty host header names "
            "none (leave --vhost out for the URL's path, else /)"
        )
    return text


def accepted_vhost(text: str) -> str:
    """A virtual host the broker accepts: not empty, which no stompy client sends."""
    if not text:
        raise argparse.ArgumentTypeError(
            "want a virtual host like / or staging, got '' (without --vhost, any is accepted)"
        )
    return text


def destination(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"want a destination like /queue/orders, got {text!r}")
    return _utf8(text, "a destination")


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a number of seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"want a number of seconds >= 0, got {text!r}")
    return value

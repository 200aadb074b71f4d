"""Broker addresses: ``stomp://``, ``stomp+ssl://`` (and ``ws://``, ``wss://``), failover lists.

``stomp://[login[:passcode]@]host[:port][/vhost]``. The path, when present, names the
virtual host sent in the ``host`` header (``%2F`` for a ``/`` inside it). Several
addresses are given as a sequence, or as one string separated by commas, and are
tried in turn by the failover logic. Only a comma followed by a scheme (``stomp://``)
separates two addresses, so a passcode may hold commas.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import SplitResult, unquote, urlsplit

from stompy.errors import ConfigurationError

__all__ = ("Endpoint", "parse_url", "parse_urls")

DEFAULT_PORTS: Final = {"stomp": 61613, "stomp+ssl": 61614, "ws": 80, "wss": 443}
TLS_SCHEMES: Final = frozenset({"stomp+ssl", "wss"})
SCHEMES: Final = frozenset(DEFAULT_PORTS)
#: What an error about a URL that urlsplit misreads says.
_ENCODE: Final = (
    "a login or passcode must percent-encode '/', '?', '#', '@', '[' and ']' "
    "(%2F, %3F, %23, %40, %5B, %5D)"
)
#: A host an error message may show: a name, an IPv4 or a bracketed IPv6 address.
_PLAIN_HOST: Final = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
#: Where a comma-separated list of URLs is cut: before each next scheme.
_NEXT_URL: Final = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One broker address, parsed."""

    scheme: str
    host: str
    port: int
    login: str | None = None
    passcode: str | None = field(default=None, repr=False)
    #: The virtual host from the URL path, if any.
    vhost: str | None = None
    #: The HTTP path, for WebSocket URLs.
    path: str = "/"

    @property
    def tls(self) -> bool:
        return self.scheme in TLS_SCHEMES

    @property
    def websocket(self) -> bool:
        return self.scheme in ("ws", "wss")

    def __str__(self) -> str:
        """The URL without the passcode (safe to log)."""
        user = f"{self.login}@" if self.login else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        tail = self.path if self.websocket else (f"/{self.vhost}" if self.vhost else "")
        return f"{self.scheme}://{user}{host}:{self.port}{tail}"


def _place(parts: SplitResult) -> str:
    """Where a URL points, for an error message: never a passcode.

    Only the scheme and what follows the userinfo's ``@`` are shown; without an ``@``,
    nothing after the host's colon (``stomp://guest:guest`` lacks its host: the "port"
    is a passcode). After an ``@``, a host or a (bad) port is shown only if it is made
    of ASCII letters, digits and the dots of a name: a passcode holding a raw ``@``
    makes what follows it look like a host (``stomp://app:@:sécret``). The path is
    left out too: a passcode holding a raw ``/``, ``?`` or ``#`` spills into it.
    """
    _, at, place = parts.netloc.rpartition("@")
    if not at and not place.startswith("["):
        host, colon, _ = place.partition(":")
        return f"{parts.scheme}://{host}{':...' if colon else ''}"
    if place.startswith("["):
        end = place.find("]") + 1
        host, port = place[:end], place[end + 1 :] if place[end : end + 1] == ":" else None
    else:
        host, colon, rest = place.partition(":")
        port = rest if colon else None
    if not _PLAIN_HOST.fullmatch(host):
        host = "..."
    if port is not None and not (port.isascii() and port.isalnum()):
        port = "..."
    return f"{parts.scheme}://{host}{'' if port is None else ':' + port}"


def parse_url(url: str) -> Endpoint:
    """Parse one address.

    Raises :class:`~stompy.errors.ConfigurationError` (a :class:`ValueError`) naming
    what is wrong, and never showing a passcode; :class:`TypeError` for anything but a
    str.
    """
    if not isinstance(url, str):
        raise TypeError(f"a broker URL must be a str, got {type(url).__name__}")
    text = url.strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        # urlsplit's own message quotes the text, passcode and all.
        raise ConfigurationError(
            f"not a valid URL: {_ENCODE}, and an IPv6 host in brackets"
        ) from None
    scheme = parts.scheme.lower()
    # "stomp://app:pa/ss@host": urlsplit takes "app" for the host, the rest for a path.
    spilled = "@" in parts.path or "@" in parts.query or "@" in parts.fragment
    if scheme not in SCHEMES or "://" not in text:
        shown = f" {_place(parts)!r}" if parts.netloc and not spilled else ""
        # A destination where the URL goes (send("/queue/x", body)): shown, since a
        # text with neither colon nor @ holds no passcode.
        swapped = text.startswith("/") and ":" not in text and "@" not in text
        hint = f"; {text!r} looks like a destination: the broker's URL comes first" * swapped
        raise ConfigurationError(
            f"unsupported URL{shown}: the scheme must be one of {', '.join(sorted(SCHEMES))} "
            f"(as in stomp://host:61613){hint}"
        )
    if spilled:
        # Where the userinfo ends is unknown: nothing of the netloc is shown.
        raise ConfigurationError(f"a {scheme}:// URL is not valid: {_ENCODE}")
    host = parts.hostname
    if not host:
        raise ConfigurationError(f"URL {_place(parts)!r} has no host")
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(
            f"URL {_place(parts)!r} has an invalid port: want a number from 1 to 65535 "
            "after the host, as in stomp://login:passcode@host:61613"
        ) from None
    if port == 0:
        # Not the default port: 0 means "a free port" only where a broker listens.
        raise ConfigurationError(
            f"URL {_place(parts)!r} has port 0: a client connects to the port its broker "
            "listens on (leave it out for the default), as in stomp://host:61613"
        )
    if port is None:
        port = DEFAULT_PORTS[scheme]
    login = unquote(parts.username) if parts.username is not None else None
    passcode = unquote(parts.password) if parts.password is not None else None
    if scheme in ("ws", "wss"):
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return Endpoint(scheme, host, port, login, passcode, None, path)
    if parts.query or parts.fragment:
        # Other clients take options there; ignored, they would mislead.
        raise ConfigurationError(
            f"URL {_place(parts)!r} has a query or fragment (?...#...), which a {scheme}:// "
            "URL does not take: give options as keyword arguments (heartbeats=..., "
            "connect_timeout=...), or as the stompy command's options"
        )
    raw_path = parts.path[1:] if parts.path.startswith("/") else parts.path
    vhost = unquote(raw_path) if raw_path else None
    return Endpoint(scheme, host, port, login, passcode, vhost)


def parse_urls(urls: str | Endpoint | Sequence[str | Endpoint]) -> tuple[Endpoint, ...]:
    """Parse one address, a comma-separated list, or a sequence of them (each a str or
    an :class:`Endpoint`); raises as :func:`parse_url`."""
    if isinstance(urls, Endpoint):
        return (urls,)
    given: object = urls  # what a caller without a type checker may pass
    if isinstance(given, (bytes, bytearray)):  # a sequence too, of ints
        raise TypeError(f"a broker URL must be a str, got {type(given).__name__}")
    items: list[str | Endpoint] = (
        [u for u in _NEXT_URL.split(urls.strip().rstrip(",")) if u.strip()]
        if isinstance(urls, str)
        else list(urls)
    )
    if not items:
        raise ConfigurationError("no broker URL given")
    return tuple(u if isinstance(u, Endpoint) else parse_url(u) for u in items)

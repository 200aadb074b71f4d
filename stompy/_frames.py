"""Frames, commands and the header rules of each STOMP version.

A frame's headers are an ordered sequence of ``(name, value)`` pairs: repeated
entries are kept, because "only the first header entry SHOULD be used as the value
of header entry. Subsequent values are only used to maintain a history" (1.2, Repeated
Header Entries). Looking a name up therefore returns the *first* entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from stompy.errors import RemoteProtocolError

Version = Literal["1.0", "1.1", "1.2"]
Headers = tuple[tuple[str, str], ...]

V10: Final = "1.0"
V11: Final = "1.1"
V12: Final = "1.2"
#: Every version stompy speaks, lowest first (the order ``accept-version`` wants).
VERSIONS: Final[tuple[Version, ...]] = ("1.0", "1.1", "1.2")

CLIENT_COMMANDS: Final = frozenset(
    {
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "ACK",
        "NACK",
        "DISCONNECT",
        "CONNECT",
        "STOMP",
    }
)
SERVER_COMMANDS: Final = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
COMMANDS: Final = CLIENT_COMMANDS | SERVER_COMMANDS
#: "Only the SEND, MESSAGE, and ERROR frames MAY have a body." (1.2, Body)
BODY_COMMANDS: Final = frozenset({"SEND", "MESSAGE", "ERROR"})
#: "The CONNECT and CONNECTED frames do not escape ..." (1.1 and 1.2, Value Encoding)
UNESCAPED_COMMANDS: Final = frozenset({"CONNECT", "STOMP", "CONNECTED"})


@dataclass(slots=True)
class Frame:
    """One STOMP frame: a command, ordered headers and a binary body.

    Treat it as read-only. It is not a frozen dataclass because every received
    message makes one, and a frozen dataclass's ``__init__`` (an ``object.__setattr__``
    call per field) costs more than half again as much as the rest of it.
    """

    command: str
    headers: Headers = ()
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        """Return the value of the first header entry called ``name``."""
        for key, value in self.headers:
            if key == name:
                return value
        return default

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self.headers)

    def header_map(self) -> dict[str, str]:
        """The headers as a dict in which the first entry of each name wins."""
        result: dict[str, str] = {}
        for key, value in self.headers:
            result.setdefault(key, value)
        return result

    def __repr__(self) -> str:
        shown = tuple((k, "********") if k == "passcode" else (k, v) for k, v in self.headers)
        body = self.body if len(self.body) <= 64 else self.body[:64] + b"..."
        return f"Frame(command={self.command!r}, headers={shown!r}, body={body!r})"


def make_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> Headers:
    """Normalise a mapping or a sequence of pairs into the frame's header tuple."""
    if headers is None:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    result: list[tuple[str, str]] = []
    for key, value in items:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {key!r}: {value!r}")
        result.append((key, value))
    return tuple(result)


# -- escaping --------------------------------------------------------------------------
#
# Escaping and unescaping are chains of ``str.replace``: each call is one C-level pass,
# several times faster than ``str.translate`` with a dict or ``re.sub`` with a Python
# callback, which matters because brokers put colons in every ``message-id``.


def _escape_11(text: str) -> str:
    # The backslash goes first, so the backslashes added afterwards stay single.
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def _escape_12(text: str) -> str:
    return _escape_11(text).replace("\r", "\\r")


def escape(text: str, version: str) -> str:
    """Escape a header name or value for ``version`` (1.0 has no escaping)."""
    if version == V12:
        return _escape_12(text)
    if version == V11:
        return _escape_11(text)
    return text


def _replace_sequences(text: str, version: str) -> str:
    """Unescape ``text``, which holds no escaped backslash ("\\\\")."""
    # In such a text every backslash starts a sequence of its own, and none of the
    # replacements writes a backslash, so their order does not matter.
    text = text.replace("\\n", "\n").replace("\\c", ":")
    return text.replace("\\r", "\r") if version == V12 else text


def _undefined_sequence(text: str, version: str) -> str:
    """The first escape sequence in ``text`` that ``version`` does not define."""
    defined = ("\\\\", "\\n", "\\c", "\\r") if version == V12 else ("\\\\", "\\n", "\\c")
    at = text.find("\\")
    while text[at : at + 2] in defined:
        at = text.find("\\", at + 2)
    return text[at : at + 2]


def unescape(text: str, version: str, *, strict: bool = True) -> str:
    """Undo :func:`escape`.

    "Undefined escape sequences such as \\t (octet 92 and 116) MUST be treated as a
    fatal protocol error" (1.2, Value Encoding): with ``strict`` they raise
    :class:`RemoteProtocolError`; without, they are kept literally for brokers that
    send them anyway.
    """
    if version == V10 or "\\" not in text:
        return text
    if "\\\\" in text:
        # Sequences are read left to right, so the escaped backslashes are split out
        # first; each piece is then free of them.
        pieces = [_replace_sequences(piece, version) for piece in text.split("\\\\")]
        result = "\\".join(pieces)
        # A backslash beyond those that joined the pieces began an undefined sequence.
        undefined = result.count("\\") >= len(pieces)
    else:
        result = _replace_sequences(text, version)
        undefined = "\\" in result
    if undefined and strict:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise RemoteProtocolError(
            f"undefined escape sequence {_undefined_sequence(text, version)!r} "
            f"in header {shown!r} (STOMP {version})"
        )
    return result

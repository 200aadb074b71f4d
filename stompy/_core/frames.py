"""Frames, commands and the header rules of each STOMP version.

A frame's headers are an ordered sequence of ``(name, value)`` pairs: repeated
entries are kept, because "only the first header entry SHOULD be used as the value
of header entry. Subsequent values are only used to maintain a history" (1.2, Repeated
Header Entries). Looking a name up therefore returns the *first* entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from typing import ClassVar, Final, Literal

from stompy._checks import check_type, wrong_type
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
#: The SEND headers a client writes from its own arguments (the destination, a
#: transaction, a receipt): the client refuses them among a caller's headers, which would
#: otherwise lose to its own or win over them ("only the first header entry SHOULD be
#: used"), and the encoder's fast way leaves them to the general one.
SEND_RESERVED: Final = frozenset({"destination", "receipt", "transaction"})


class Frame:
    """One STOMP frame: a command, ordered headers and a binary body.

    ``Frame(command, headers=(), body=b"")``; frames compare by value. Treat it as
    read-only. A plain class rather than a dataclass: every received message makes one,
    and a frame from the parser keeps its header block as the text that arrived and
    makes the ``(name, value)`` pairs only when ``headers`` is first read (see
    :class:`ReceivedFrame`): a consumer that reads two headers of ten pays for two.
    """

    __slots__ = ("_block", "_escaping", "_headers", "body", "command")

    #: As a dataclass has them, for ``match`` statements.
    __match_args__: ClassVar[tuple[str, ...]] = ("command", "headers", "body")

    def __init__(self, command: str, headers: Headers = (), body: bytes = b"") -> None:
        if type(command) is not str or type(headers) is not tuple or type(body) is not bytes:
            # A subclass is taken, as mypyc's build takes it (there a wrong type never
            # gets here: its TypeError comes first).
            _check_frame(command, headers, body)
        self.command = command
        self._headers: Headers | None = headers
        self.body = body
        #: The received header block (command line included) whose pairs are not made
        #: yet, or "" once they are (or if the frame was not received).
        self._block = ""
        #: The version whose escaping the block uses ("1.0": none).
        self._escaping = V10

    def __reduce__(self) -> tuple[type[Frame], tuple[str, Headers, bytes]]:
        # Made again by its public constructor: mypyc's classes have no other way back
        # from a pickle, and a received frame's block is the parser's business.
        cls = Frame if type(self) is ReceivedFrame else type(self)
        return cls, (self.command, self.headers, self.body)

    @property
    def headers(self) -> Headers:
        """Every header entry, in the order received, repeats kept."""
        headers = self._headers
        if headers is None:
            headers = self._headers = self._make_headers()
        return headers

    @headers.setter
    def headers(self, headers: Headers) -> None:
        self._headers = headers
        self._block = ""

    def _make_headers(self) -> Headers:
        """The pairs of a received block (see :class:`ReceivedFrame`), in a few C-level
        passes."""
        block = self._block
        self._block = ""
        at = block.find("\n")
        if at < 0:
            return ()
        flat = split_header_lines(block[at + 1 :], self._escaping)
        return tuple(zip(flat[::2], flat[1::2], strict=True))

    def get(self, name: str, default: str | None = None) -> str | None:
        """Return the value of the first header entry called ``name``."""
        if default is not None and not isinstance(default, str):
            raise wrong_type("default", "a str or None", default)
        block = self._block
        if block:
            # The first line that starts with the name as sent, and a colon, is the
            # name's first entry: a line holds one colon (and a name no colon, no LF,
            # no CR), and an escaped name has one spelling only.
            try:
                sent = name if name in _PLAIN_NAMES else escape(name, self._escaping)
            except (AttributeError, TypeError):  # no str: costs nothing until raised
                raise wrong_type("name", "a str", name) from None
            at = block.find(f"\n{sent}:")
            if at < 0:
                return default
            start = at + len(sent) + 2
            end = block.find("\n", start)
            value = block[start:end] if end >= 0 else block[start:]
            if "\\" in value and self._escaping != V10:
                value = unescape(value, self._escaping, strict=False)
            return value
        for key, value in self.headers:
            if key == name:
                return value
        if not isinstance(name, str):  # no pair matched it: looked at only now
            raise wrong_type("name", "a str", name)
        return default

    def __contains__(self, name: object) -> bool:
        block = self._block
        if block and isinstance(name, str):
            sent = name if name in _PLAIN_NAMES else escape(name, self._escaping)
            return block.find(f"\n{sent}:") >= 0  # as in get(), the value left alone
        return any(key == name for key, _ in self.headers)

    def header_map(self) -> dict[str, str]:
        """The headers as a dict in which the first entry of each name wins."""
        result: dict[str, str] = {}
        block = self._block
        if block:
            # Made from a received block at once, its pairs left unmade (``headers``
            # makes them if read): a received message's handler reads the map, and
            # the pairs would cost it half as much again (docs/performance.md).
            at = block.find("\n")
            if at >= 0:
                flat = split_header_lines(block[at + 1 :], self._escaping)
                # Names and values alternate, as many of each (one colon per line:
                # the parser checked).
                for i in range(0, len(flat) - 1, 2):
                    name = flat[i]
                    if name not in result:
                        result[name] = flat[i + 1]
            return result
        for key, value in self.headers:
            if key not in result:
                result[key] = value
        return result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (
            self.command == other.command
            and self.body == other.body
            and self.headers == other.headers
        )

    #: Unhashable, as a dataclass that compares by value and is not frozen.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = tuple((k, "********") if k == "passcode" else (k, v) for k, v in self.headers)
        body = self.body if len(self.body) <= 64 else self.body[:64] + b"..."
        return f"Frame(command={self.command!r}, headers={shown!r}, body={body!r})"


def _check_frame(command: object, headers: object, body: object) -> None:
    """A :class:`TypeError` naming the argument of a wrong type, if one is."""
    check_type("command", command, str, "a str")
    check_type("headers", headers, tuple, "a tuple of (name, value) pairs of str")
    check_type("body", body, bytes, "bytes")


class ReceivedFrame(Frame):
    """A frame from the parser, whose pairs are made from its header block on first use.

    The parser has checked ``block`` (the command line and the header lines, LF only,
    no EOL at the end) as it checks every block, and more: each header line holds
    exactly one colon, after a name that is not empty, and every escape sequence in it
    is one that ``escaping`` defines ("1.0": none is unescaped). That is what makes the
    shortcuts of :meth:`Frame.get` and :meth:`Frame._make_headers` exact. Otherwise
    it is a :class:`Frame` like any other, and compares equal to one.
    """

    __slots__ = ()

    def __init__(self, command: str, block: str, escaping: str, body: bytes) -> None:
        # Frame.__init__ is not called: one call per received message is saved.
        self.command = command
        self._headers = None
        self.body = body
        self._block = block
        self._escaping = escaping


#: Header names that no version escapes (letters and dashes), looked up often:
#: :meth:`Frame.get` searches for them as they are, without escaping them first.
_PLAIN_NAMES: Final = frozenset(
    {
        "ack",
        "content-length",
        "content-type",
        "correlation-id",
        "destination",
        "expires",
        "heart-beat",
        "id",
        "message",
        "message-id",
        "persistent",
        "priority",
        "receipt",
        "receipt-id",
        "redelivered",
        "reply-to",
        "server",
        "session",
        "subscription",
        "timestamp",
        "transaction",
        "version",
    }
)


# -- received header blocks -----------------------------------------------------------
#
# What the rest of the package reads of a frame from the parser, besides what any frame
# offers: the state machine and the test broker find the header or two they route every
# frame by in its block (without making the pairs, and without Frame.get()'s argument
# checks), and a table of many messages splits their blocks at once. They read these,
# never the attributes behind them.


def received_block(frame: Frame) -> str:
    """The header block of a frame from the parser, as it arrived, while its pairs are not
    made (see :class:`ReceivedFrame` for what the parser checked of it); "" once they
    are, and for a frame that was not received."""
    return frame._block


def received_escaping(frame: Frame) -> str:
    """The version whose escaping :func:`received_block` uses ("1.0": none)."""
    return frame._escaping


def make_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> Headers:
    """Normalise a mapping or a sequence of pairs into the frame's header tuple.

    Raises :class:`TypeError` for anything else (a str is no sequence of pairs here),
    and for a name or value that is not a str.
    """
    if headers is None:
        return ()
    given: object = headers  # what the caller passed, whatever its annotation says
    if isinstance(given, (str, bytes)):
        raise wrong_type("headers", _HEADER_INPUT, headers)
    items = headers.items() if isinstance(headers, Mapping) else headers
    try:
        pairs = tuple([(key, value) for key, value in items])
    except (TypeError, ValueError):  # not iterable, or an item that is no pair
        raise wrong_type("headers", _HEADER_INPUT, headers) from None
    # The items are read as objects (pairs of object): compiled (mypyc), pairs of str
    # would be asserted as they are read, refusing what is no str before this names it.
    if len(pairs) and not isinstance(headers, Mapping):
        each: Iterable[object] = headers
        for item in each:
            # A two-letter str unpacks as a pair ("ab" -> a:b): no pair was meant.
            if isinstance(item, (str, bytes)):
                raise wrong_type("headers", _HEADER_INPUT, headers)
    loose: Iterable[tuple[object, object]] = pairs
    for key, value in loose:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {key!r}: {value!r}")
    return pairs


_HEADER_INPUT: Final = "a mapping of str to str or (name, value) pairs of str"


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
        # Brokers' message ids are full of colons: the one sequence most values hold.
        result = text.replace("\\c", ":")
        if "\\" in result:
            result = _replace_sequences(result, version)
        undefined = "\\" in result
    if undefined and strict:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise RemoteProtocolError(
            f"undefined escape sequence {_undefined_sequence(text, version)!r} "
            f"in header {shown!r} (STOMP {version})"
        )
    return result


def header_columns(frames: Sequence[Frame]) -> tuple[list[int], list[str], list[str]]:
    """The header entries of many frames as columns: ``(starts, names, values)``.

    Frame ``i``'s entries are ``names[starts[i]:starts[i + 1]]`` (and the same slice
    of ``values``), in the order received, repeats kept. For a table of received
    messages: the header blocks of frames from the parser (see :class:`ReceivedFrame`)
    are split in a few C-level passes over many of them at once, with no tuple of pairs
    per frame.
    """
    counts: list[int] = []
    names: list[str] = []
    values: list[str] = []
    run: list[str] = []  # received blocks of one escaping
    escaping = ""  # the run's
    for frame in frames:
        block = received_block(frame)
        if block and (not run or received_escaping(frame) == escaping):
            if not run:
                escaping = received_escaping(frame)
            run.append(block)
            continue
        if run:
            _split_blocks(run, escaping, counts, names, values)
            run = [block] if block else []
            escaping = received_escaping(frame)
        if not run:
            pairs = frame.headers
            counts.append(len(pairs))
            names += [name for name, _ in pairs]
            values += [value for _, value in pairs]
    if run:
        _split_blocks(run, escaping, counts, names, values)
    return list(accumulate(counts, initial=0)), names, values


def _split_blocks(
    blocks: list[str], escaping: str, counts: list[int], names: list[str], values: list[str]
) -> None:
    """:func:`header_columns` for received blocks of one escaping, appended."""
    # Each block without its command line (a block of no header adds nothing).
    text = "\n".join([block[block.find("\n") + 1 :] for block in blocks if "\n" in block])
    flat = split_header_lines(text, escaping) if text else []
    counts += [block.count("\n") for block in blocks]
    names += flat[::2]
    values += flat[1::2]


def split_header_lines(text: str, escaping: str) -> list[str]:
    """Names and values, alternating, of LF-separated header lines of received blocks
    (see :class:`ReceivedFrame`), unescaped, in a few C-level passes over the text."""
    # One colon per line: splitting at both separators alternates names and values.
    if escaping == V10 or "\\" not in text:
        return text.replace("\n", ":").split(":")
    if "\x00" not in text:
        # Unescaping makes colons and LFs: mark the separators with a NUL first.
        text = text.replace(":", "\x00").replace("\n", "\x00")
        return unescape(text, escaping, strict=False).split("\x00")
    return [unescape(part, escaping, strict=False) for part in text.replace("\n", ":").split(":")]

"""The encoder: frames into bytes, escaped as the version requires.

The encoder escapes all header lines at once, in a few ``str.replace`` passes (with the
Cython accelerator, ``cscan.pyx``, it copies each header's bytes into the frame
instead), and refuses, before anything is produced, whatever could not be read back as
it was meant: a header value must never be able to inject a header or a frame. The
client's send path writes a SEND without making a :class:`Frame` (:func:`encode_send`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

from stompy._checks import check_version, wrong_type
from stompy._core.accelerator import encode_frame as _encode_frame
from stompy._core.frames import (
    BODY_COMMANDS,
    COMMANDS,
    SEND_RESERVED,
    UNESCAPED_COMMANDS,
    V10,
    V12,
    VERSIONS,
    Frame,
    escape,
)

__all__ = ("SEND_OWN", "encode", "encode_frame", "encode_send", "plain_send_names")


def encode(frame: Frame, version: str = V12) -> bytes:
    """Encode ``frame`` for the given STOMP version.

    Headers are escaped as the version requires and never padded or trimmed. Any
    ``content-length`` in ``frame.headers`` is dropped and the true length is written
    whenever there is a body, so the body may hold NUL octets.

    Raises :class:`ValueError`, before anything is produced, for what cannot be
    written safely: an unknown version (a :class:`~stompy.errors.ConfigurationError`
    naming it; a :class:`TypeError` for what is no str) or command, a body on a frame
    that may not have one, an empty header name, text that is not encodable as UTF-8 (a lone
    surrogate), and wherever no escaping exists (STOMP 1.0, and CONNECT / CONNECTED
    in every version) a line break in a header or a colon in a name: a header value
    must never be able to inject a header or a frame. A name or value that is not a
    ``str`` is a :class:`TypeError`.
    """
    try:
        headers = frame._headers  # a received frame's pairs are made when first read
    except AttributeError:  # no Frame (compiled, refused before): costs nothing till then
        raise wrong_type("frame", "a Frame", frame) from None
    return encode_frame(
        frame.command, frame.headers if headers is None else headers, frame.body, version
    )


def encode_frame(
    command: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    version: str = V12,
    more: Mapping[str, str] | None = None,
) -> bytes:
    """:func:`encode` without a :class:`Frame`: the client's send path builds none.

    ``more`` are headers written after ``headers`` (a caller's dict, taken as it is).
    """
    if version != V12 and version not in VERSIONS:
        # An unknown version would escape nothing and let a newline through.
        check_version("version", version, VERSIONS)  # TypeError or ConfigurationError
    if command not in COMMANDS:
        raise ValueError(f"unknown STOMP command {command!r}")
    if body and command not in BODY_COMMANDS:
        raise ValueError(f"a {command} frame cannot have a body")
    raw = version == V10 or command in UNESCAPED_COMMANDS
    if _encode_frame is not None:
        # In C (stompy/_core/cscan.pyx), when built: None leaves the unusual to Python.
        frame = _encode_frame(command, headers, body, raw, version == V12, more)
        if frame is not None:
            return frame
    if type(more) is dict and not raw:
        values = _pair_texts(headers)
        if values is not None:
            v12 = version == V12
            head = _head_in_layout(command, len(headers), values, more, len(body), v12, _NO_NAMES)
            if head is not None:
                return b"".join((head.encode(), body, b"\x00")) if body else head.encode()
    if more:
        headers = [*headers, *more.items()]
    return _frame_bytes(command, headers, body, version, raw)


def encode_send(
    destination: str,
    content_type: object,
    more: dict[str, str],
    body: bytes,
    version: str,
    receipt: str | None = None,
) -> bytes | None:
    """A connected client's common SEND, when this entry can write it at once: what
    ``encode_frame("SEND", pairs, body, version, more)`` writes, ``pairs`` being
    ``destination`` and, unless None, ``content-type`` and ``receipt``; ``version`` is
    the negotiated one and ``more`` the caller's other headers. None when the SEND is
    not that simple: ``more`` names a header the SEND writes itself or the client sets
    (:data:`SEND_OWN`), in any case (``Destination``, ``Content-Type``), or a name or
    value needs escaping or refusing, or what is not a str; then the caller takes the
    general way (``encode_frame``), which writes the same bytes or raises the error.
    Raises nothing: the errors are said in one place.
    """
    if content_type is not None and type(content_type) is not str:
        return None  # the caller's (object: see ClientProtocol.send), named the general way
    if _encode_frame is not None:
        if not _PLAIN.issuperset(more) and not plain_send_names(more):
            return None
        pairs = [("destination", destination)]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        if receipt is not None:
            pairs.append(("receipt", receipt))
        return _encode_frame("SEND", pairs, body, version == V10, version == V12, more)
    if type(more) is not dict or version == V10:
        return None
    # What :func:`_head_in_layout` does, for the SEND alone: its pairs' names are in
    # the layout (keyed by which of them there are), so only the values fill slots.
    # Any: the caller's values, checked here (see _head_in_layout).
    values: list[Any]
    if content_type is None:
        if receipt is None:
            values = [destination]
            shape = 0
        else:
            values = [destination, receipt]
            shape = 1
    elif receipt is None:
        values = [destination, content_type]
        shape = 2
    else:
        values = [destination, content_type, receipt]
        shape = 3
    if more:
        values += more.values()
        layout = _SEND_LAYOUTS[shape].get(tuple(more))  # (a tuple made so costs least)
        if layout is None:
            layout = _send_layout(shape, more)
            if layout is None:
                return None
    else:  # no headers of the caller's: no names to look up
        layout = _BARE_LAYOUTS[shape]
    try:
        # str.join, unlike a slot, refuses what is not a str.
        text = "".join(values)
    except TypeError:
        return None
    if ":" in text or "\n" in text or "\\" in text or ("\r" in text and version == V12):
        return None
    parts = layout.copy()
    parts[1::2] = values
    size = len(body)
    end = _ENDS.get(size)
    if end is None:
        end = f"content-length:{size}\n\n"
        if len(_ENDS) < _ENDS_MAX:
            _ENDS[size] = end
    parts.append(end)
    try:
        start = "".join(parts).encode()
    except UnicodeEncodeError:  # a lone surrogate: the general way names it
        return None
    return b"".join((start, body, b"\x00")) if size else start


def _pair_texts(headers: Sequence[Any]) -> list[Any] | None:
    """The names and values of ``headers`` in turn, for :func:`_head_in_layout`; None
    for what is not a pair, an empty name or a content-length (the general way's)."""
    values: list[Any] = []
    for item in headers:
        if type(item) is not tuple or len(item) != 2 or not item[0] or item[0] == "content-length":
            return None
        values += item
    return values


def _head_in_layout(
    command: str,
    pairs: int,
    values: list[Any],
    more: dict[Any, Any],
    size: int,
    v12: bool,
    refused: frozenset[str],
) -> str | None:
    """The command and header lines of a 1.1 / 1.2 frame whose last headers are a
    caller's dict (the client's send path), up to the body; or None, when the frame
    must be written the general way (:func:`_frame_bytes`): a name or value to escape
    or refuse, or what is not a str, or a name of ``more`` in ``refused``. ``values``
    holds the name and value of each of the ``pairs`` headers before the dict, in turn;
    the dict's values are added to it.

    The names seldom change from frame to frame: the text around the values (the
    command, the dict's names, the separators) is kept per list of names, and the
    values are put into its slots by one slice assignment, so that a frame costs a few
    C-level passes over the values and no work per header in Python but for the
    (usually two) pairs before the dict. The values are checked at once, joined: none
    may hold what would need escaping. ``values`` and ``more`` are typed ``Any`` on
    purpose: they are the caller's, checked here, and compiled by mypyc a narrower type
    would refuse a malformed header with its own TypeError before the general way could
    name it."""
    values += more.values()
    try:
        # str.join, unlike a slot, refuses what is not a str.
        text = "".join(values)
    except TypeError:
        return None
    if ":" in text or "\n" in text or "\\" in text or ("\r" in text and v12):
        return None
    key = (command, pairs, refused, *more)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _layout(key, command, pairs, more, refused)
        if layout is None:
            return None
    parts = layout.copy()
    parts[1::2] = values
    end = _ENDS.get(size)
    if end is None:
        end = f"content-length:{size}\n\n"
        if len(_ENDS) < _ENDS_MAX:
            _ENDS[size] = end
    parts.append(end)
    return "".join(parts)


#: What ends a head, by the body's size: the content-length line and the blank line (a
#: lookup costs less than the f-string). Sizes repeat; those past the limit are not kept.
_ENDS: Final[dict[int, str]] = {0: "\n\x00"}
_ENDS_MAX: Final = 4096


#: The layouts of :func:`_head_in_layout`, by command, number of pairs, names refused
#: and the dict's names; the names are the caller's, so the cache is emptied when full.
_LAYOUTS: Final[dict[tuple[object, ...], list[str]]] = {}
_LAYOUTS_MAX: Final = 256
#: No names refused (:func:`encode_frame`'s layouts).
_NO_NAMES: Final[frozenset[str]] = frozenset()
#: The names :func:`encode_send` leaves to the general way in the caller's headers, in
#: any case: the SEND's own (written from the arguments, or by the client: receipt,
#: transaction). Another spelling (``Destination``, ``Content-Length``) would be sent
#: beside the one written, header names being case-sensitive, and a receiver would read
#: one or the other: the general way refuses it (or, for ``Content-Type``, sends it
#: where stompy writes no content-type).
SEND_OWN: Final = SEND_RESERVED | {"content-type", "content-length"}
#: Names seen in a caller's headers that are no spelling of :data:`SEND_OWN`'s (and
#: str): a dict of such names takes the short way after one C-level pass, as a lookup
#: of the refused names themselves would cost. Caller's names, so emptied when full.
_PLAIN: Final[set[str]] = set()
_PLAIN_MAX: Final = 4096


def plain_send_names(names: Iterable[object]) -> bool:
    """Whether no name of ``names`` is, in any case, one of :data:`SEND_OWN` (nor other
    than a str); the names are remembered if so, for the next SEND's ``_PLAIN`` check."""
    for name in names:
        if type(name) is not str or name.lower() in SEND_OWN:
            return False
    if len(_PLAIN) >= _PLAIN_MAX:
        _PLAIN.clear()
    _PLAIN.update(cast("Iterable[str]", names))
    return True


def _layout(
    key: tuple[object, ...],
    command: str,
    pairs: int,
    more: dict[Any, Any],
    refused: frozenset[str],
) -> list[str] | None:
    """The text of a frame's head around its values, one slot (an odd index) per
    value: a name and value of each of ``pairs`` pairs, then the value of each of
    ``more``'s names. None if a name of ``more`` needs escaping, is empty or not a str,
    is content-length or, in any case, in ``refused``: those frames take the general
    way."""
    layout = [f"{command}\n"]
    for _ in range(pairs):
        layout += ("", ":", "", "\n")
    for name in more:
        if type(name) is not str or not _plain_name(name, refused):
            return None
        layout[-1] += name + ":"  # (an f-string would call a subclass's __str__)
        layout += ("", "\n")
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[key] = layout
    return layout


#: :func:`encode_send`'s layouts, by which of its own headers a SEND has (its shape:
#: content-type, receipt) and then the caller's names; emptied when full, as
#: :data:`_LAYOUTS`.
_SEND_LAYOUTS: Final[tuple[dict[tuple[object, ...], list[str]], ...]] = ({}, {}, {}, {})
#: The names of the headers :func:`encode_send` writes before the caller's, by shape.
_SEND_PAIRS: Final[tuple[tuple[str, ...], ...]] = (
    ("destination",),
    ("destination", "receipt"),
    ("destination", "content-type"),
    ("destination", "content-type", "receipt"),
)


def _send_layout(shape: int, more: dict[Any, Any], kept: bool = True) -> list[str] | None:
    """The text of a SEND's head around its values, one slot (an odd index) per value:
    the headers of ``shape`` (see :data:`_SEND_PAIRS`), then ``more``'s; kept in
    :data:`_SEND_LAYOUTS` unless not ``kept``. None if a name of ``more`` needs
    escaping, is empty or not a str or, in any case, one of :data:`SEND_OWN`: those
    SENDs take the general way."""
    for name in more:
        if type(name) is not str or not _plain_name(name, SEND_OWN):
            return None
    layout: list[str] = []
    start = "SEND\n"
    for name in (*_SEND_PAIRS[shape], *more):
        layout += (start + name + ":", "")  # (an f-string would call a subclass's __str__)
        start = "\n"
    layout.append("\n")
    if not kept:
        return layout
    kept_by_names = _SEND_LAYOUTS[shape]
    if len(kept_by_names) >= _LAYOUTS_MAX:
        kept_by_names.clear()
    kept_by_names[tuple(more)] = layout
    return layout


def _plain_name(name: str, refused: frozenset[str]) -> bool:
    """Whether the header name ``name`` can be written as it is, in a layout: not empty,
    nor content-length or, in any case, one of ``refused``, nor holding what would
    need escaping."""
    return not (
        not name
        or name == "content-length"
        or (refused and name.lower() in refused)
        or ":" in name
        or "\n" in name
        or "\\" in name
        or "\r" in name
    )


#: The layouts of the SENDs without headers of the caller's, by shape.
_BARE_LAYOUTS: Final[tuple[list[str], ...]] = tuple(
    cast("list[str]", _send_layout(shape, {}, kept=False)) for shape in range(len(_SEND_PAIRS))
)


def _frame_bytes(
    command: str, headers: Sequence[tuple[str, str]], body: bytes, version: str, raw: bool
) -> bytes:
    """:func:`encode_frame` in Python once the command, body and version are checked
    (``raw``: nothing is escaped); the accelerator's encoder writes the same bytes."""
    if raw:
        text = _raw_header_text(command, headers, version)
    else:
        text = _escaped_header_text(headers, version)
    end = f"content-length:{len(body)}\n\n" if body else "\n\x00"
    head = f"{command}\n{text}\n{end}" if text else f"{command}\n{end}"
    if "\n:" in head:
        # Every colon inside a name or value is escaped (or refused): this one
        # follows an empty name.
        raise ValueError(f"empty header name in {command}")
    return b"".join((head.encode(), body, b"\x00")) if body else head.encode()


def _escaped_header_text(headers: Sequence[tuple[str, str]], version: str) -> str:
    """The header lines of a 1.1 / 1.2 frame, escaped, without the true content-length.

    Escaping replaces each character on its own, so all lines can be escaped at once,
    in a few C-level passes, if what separates a name from its value is left alone: a
    NUL stands for that colon until the end. That needs no name or value to hold a NUL
    or a line feed, which the two counts confirm. Each pass runs only where its
    character occurs: ``str.replace`` counts before it copies, ``in`` only looks.
    """
    try:
        # Unpacking refuses what is not a pair (a 1-tuple and a 3-tuple would otherwise
        # pass the counts below together); str.join, unlike an f-string, refuses a name
        # or value that is not a str.
        lines = ["\x00".join((key, value)) for key, value in headers if key != "content-length"]
    except (TypeError, ValueError) as exc:
        raise (_not_pairs(headers) or exc) from None
    text = "\n".join(lines)
    count = len(lines)
    if text.count("\x00") != count or text.count("\n") != count - 1:
        # No headers, or a NUL or a line feed to escape (or a malformed pair): one by one.
        problem = _not_pairs(headers)
        if problem is not None:
            raise problem
        return "\n".join(
            [
                f"{escape(key, version)}:{escape(value, version)}"
                for key, value in headers
                if key != "content-length"
            ]
        )
    if "\\" in text:
        # The backslash goes first, so the backslashes added after it stay single.
        text = text.replace("\\", "\\\\")
    if ":" in text:
        text = text.replace(":", "\\c")
    if version == V12 and "\r" in text:
        text = text.replace("\r", "\\r")
    return text.replace("\x00", ":")


def _not_pairs(headers: Sequence[object]) -> TypeError | None:
    """The error naming the first header that is not a (name, value) pair of str, if any
    (``str.join`` would not say which)."""
    for item in headers:
        if not (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], str)
        ):
            return TypeError(f"a header must be a (name, value) pair of str, got {item!r}")
    return None


def _raw_header_text(command: str, headers: Sequence[tuple[str, str]], version: str) -> str:
    """The header lines where nothing is escaped (STOMP 1.0; CONNECT and CONNECTED).

    What cannot be written unescaped is refused.
    """
    problem = _not_pairs(headers)
    if problem is not None:
        raise problem
    lines: list[str] = []
    for key, value in headers:
        if key == "content-length":
            continue
        if not key:
            raise ValueError(f"empty header name in {command}")
        if "\n" in key or ":" in key or "\r" in key:
            raise ValueError(f"header name {key!r} cannot be sent in {command} {version}")
        if "\n" in value or "\r" in value:
            raise ValueError(
                f"value of header {key!r} holds a line break, which STOMP {version} "
                f"cannot carry in {command}"
            )
        lines.append(f"{key}:{value}")
    return "\n".join(lines)

"""What goes out: the messages :meth:`~stompy.Connection.send_many` takes and the chunks
it queues them in, and the core's encoded frames taken as wire bytes and logged.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from stompy._core.protocol import ClientProtocol, check_send
from stompy.errors import LocalProtocolError

if TYPE_CHECKING:
    from stompy._engine.websocket import WebSocket

__all__ = (
    "SEND_CHUNK",
    "Outgoing",
    "log",
    "log_sent",
    "note_sent",
    "split_for_sending",
    "take_output",
)

log: Final = logging.getLogger("stompy")

#: Messages :meth:`~stompy.Connection.send_many` queues per turn: enough that locking
#: and waking the writer cost nothing per message, few enough that the writer is not
#: kept waiting long (and a paused connection is noticed soon).
SEND_CHUNK: Final = 512

_PASSCODE_LINE: Final = re.compile(rb"^passcode:[^\r\n]*", re.MULTILINE)
_LOGGED_BYTES: Final = 4096


#: logging's own record of the levels the stompy logger logs at, which
#: ``Logger.isEnabledFor`` fills and logging empties whenever its settings change (a
#: ``setLevel()``, ``disable()``...): read here without that call, once per flush.
#: (An empty dict where the logger has none: every look is then the call.)
_ENABLED: Final[dict[int, bool]] = getattr(log, "_cache", {})


def log_sent(data: bytes, where: object) -> None:
    """Log outgoing frames at DEBUG, the passcode masked (never in a log line)."""
    enabled = _ENABLED.get(logging.DEBUG)
    if enabled is None:  # not looked up since logging's settings changed
        enabled = log.isEnabledFor(logging.DEBUG)
    if enabled and not log.disabled:
        shown = _PASSCODE_LINE.sub(b"passcode:********", data[:_LOGGED_BYTES])
        more = f" (+{len(data) - _LOGGED_BYTES} bytes)" if len(data) > _LOGGED_BYTES else ""
        log.debug("to %s: %r%s", where, shown, more)


def take_output(
    proto: ClientProtocol, ws: WebSocket | None, now: float | None, where: object = None
) -> bytes:
    """Drain the core's frames as wire bytes: as they are, or one WebSocket message each.

    With ``where`` they are logged, as STOMP: a masked WebSocket frame carries its key,
    so logging the wire bytes would not even hide the passcode.
    """
    if ws is None:
        data = proto.data_to_send(now)
        if data and where is not None:
            log_sent(data, where)
        return data
    frames = proto.frames_to_send(now)
    if not frames:
        return b""
    if where is not None and log.isEnabledFor(logging.DEBUG):
        log_sent(b"".join(frames), where)
    return ws.send_frames(frames)


@dataclass(slots=True, init=False)
class Outgoing:
    """One message for :meth:`~stompy.Connection.send_many`: what :meth:`~stompy.Connection.send`
    takes, as one object, so that many can be handed over at once.

    Made, it raises what :meth:`~stompy.Connection.send` would for the same values (a
    destination not a ``str``, a body neither ``bytes`` nor ``str``, or a ``str`` that is
    not text, headers not a mapping of str to str, a ``content_type`` another
    ``content-type`` header contradicts...): a ``send_many()`` never stops at it with
    part of the batch sent. What a send can only check on a connection (a body over
    the broker's limit) may still stop one: its error then says how many went out.
    """

    destination: str
    body: bytes | str
    headers: Mapping[str, str] | None
    content_type: str | None

    def __init__(
        self,
        destination: str,
        body: bytes | str = b"",
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        # Refused here as send() refuses them, rather than in send_many(), after the
        # messages before this one went out. Written out (not __post_init__): one call
        # less per message, and none at all for a message without headers.
        if (
            headers is not None
            or content_type is not None
            or type(destination) is not str
            or not destination
            # A str is text unless it holds what UTF-8 cannot encode (a lone surrogate):
            # never so of ASCII, which isascii() reads from a flag at once.
            or (type(body) is not bytes and (type(body) is not str or not body.isascii()))
        ):
            check_send(destination, body, headers, content_type)
            if type(body) is str and not body.isascii():
                _check_text(body)
        self.destination = destination
        self.body = body
        self.headers = headers
        self.content_type = content_type


def _check_text(body: str) -> None:
    """Refuse a ``str`` body that is not text (a lone surrogate) as a send does:
    UTF-8 cannot encode it."""
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"the body is not valid text: {exc.reason}") from None


def split_for_sending(messages: Iterable[Outgoing]) -> Iterator[list[Outgoing] | Outgoing]:
    """``send_many``'s order of work: chunks of at most :data:`SEND_CHUNK` messages to
    queue at once, then the last message alone, since it may carry the receipt.

    A message that is not an :class:`Outgoing` (a body, a ``(destination, body)``
    tuple) is a :class:`TypeError` naming it, raised before its chunk is sent; so is one
    ``Outgoing`` or ``None`` where the iterable of them belongs.
    """
    if isinstance(messages, Outgoing):
        raise TypeError(
            "send_many() takes an iterable of stompy.Outgoing, got one Outgoing: "
            "pass [message], or use send()"
        )
    try:
        each = iter(messages)
    except TypeError:
        raise TypeError(
            f"send_many() takes an iterable of stompy.Outgoing, got {type(messages).__name__}"
        ) from None
    chunk: list[Outgoing] = []
    held: Outgoing | None = None
    for message in each:
        if type(message) is not Outgoing and not isinstance(message, Outgoing):
            raise _not_outgoing(message)
        if held is not None:
            chunk.append(held)
            if len(chunk) == SEND_CHUNK:
                yield chunk
                chunk = []
        held = message
    if chunk:
        yield chunk
    if held is not None:
        yield held


def note_sent(error: BaseException, sent: int, receipt: bool, last: bool = False) -> None:
    """Say on ``error``, which stopped a ``send_many()`` after the first ``sent`` of its
    messages went out, how many did: a note under its traceback (PEP 678), once.

    The error is what a send raises of its message (``nothing was sent``: of that one),
    or of the ``last`` message, which went alone (a receipt that did not come), or what
    the iterable raised making the next one: without the note, what went out of the
    batch before it could not be told. Nothing is said when nothing was sent.
    """
    notes = getattr(error, "__notes__", None)
    if not sent or (notes and any(note.startswith("send_many(): ") for note in notes)):
        return
    if last:
        note = (
            f"send_many(): the {sent:,} messages of the batch before the last went out; "
            "the last is the one this error is about"
        )
    else:
        unconfirmed = " (unconfirmed: the receipt was to come with the last)" if receipt else ""
        note = (
            f"send_many(): the first {sent:,} message{'s' if sent > 1 else ''} of the "
            f"batch went out{unconfirmed}, none after {'them' if sent > 1 else 'it'}"
        )
    if isinstance(notes, list):
        notes.append(note)
    else:  # add_note()'s work (3.11+); not for an exception class with __slots__
        with contextlib.suppress(AttributeError):
            error.__notes__ = [note]  # type: ignore[attr-defined]


def _not_outgoing(item: object) -> TypeError:
    shown = repr(item) if len(repr(item)) <= 80 else repr(item)[:80] + "..."
    return TypeError(
        "send_many(): each message must be a stompy.Outgoing(destination, body, "
        f"headers=..., content_type=...), got {shown} ({type(item).__name__})"
    )

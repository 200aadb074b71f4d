"""What a received message looks like to the user, in either client.

:class:`MessageBase` is the core's :class:`~stompy._core.events.MessageReceived`, made by the
core itself (:attr:`ClientProtocol.message_class
<stompy._core.protocol.ClientProtocol.message_class>`): one object per received message, not
an event and a wrapper around it. The engine stamps it with the connection it
came on (its *epoch*, for the ack rule) and the transport that answers it; the blocking
``Message`` and the ``AsyncMessage`` add only how they are answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from typing_extensions import Self

from stompy._core.events import AckMode, MessageReceived
from stompy._core.frames import Frame
from stompy.errors import BodyNotText

__all__ = ("MessageBase",)


def _charset(content_type: str | None) -> str:
    if content_type:
        for param in content_type.split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip('"')
    return "utf-8"


class MessageBase(MessageReceived):
    """A received message: body, headers and where it came from.

    ``headers`` is a read-only mapping in which the first entry of a repeated header
    wins; ``frame.headers`` keeps every entry in order. ``frame``, ``subscription``,
    ``ack_mode``, ``body``, ``destination`` and ``message_id`` are the core's
    (:class:`~stompy.events.MessageReceived`).

    No ``__init__`` of its own: the core makes it as a ``MessageReceived`` (compiled,
    natively), and :meth:`stompy._engine.engine.Engine.pump` sets the fields below
    before anyone sees it. Unlike the core's event it compares by identity and is
    hashable, as a message always was.
    """

    __slots__ = ("_answered", "_epoch", "_headers", "_owner", "_seq")

    #: The engine's epoch when it arrived: answering it in a later one does nothing.
    _epoch: int
    #: Its delivery number on its connection (the order of a ``client`` ack's reach).
    _seq: int
    #: How it was answered (``"ACK"``, ``"NACK in transaction 'tx-1'"``); unset or
    #: ``None`` while it was not (see :mod:`stompy._engine.acks`).
    _answered: str | None
    #: ``headers``, made when first asked for.
    _headers: Mapping[str, str] | None
    #: What answers it: the client's link to its connection (``stompy._client``).
    _owner: Any

    #: How to open a connection whose messages are of this class: what the error of a
    #: call made before it was opened advises (the blocking client's; the async
    #: message class says its own).
    opening: ClassVar[str] = "call connect() first, or open it with `with Connection(...) as conn:`"

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]  # (the event has none)

    def __copy__(self) -> Self:
        # One delivery, answered once: a copy that could be answered again, or not at
        # all (without the engine's stamps), would be a second handle on it.
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        return self

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a received {type(self).__name__} is answered on its connection and cannot "
            "be pickled: pickle its frame (message.frame, a stompy.Frame) or its body "
            "and headers, and answer the message where it was received"
        )

    @classmethod
    def made(
        cls,
        frame: Frame,
        subscription: str,
        ack_mode: AckMode,
        *,
        epoch: int = 0,
        owner: Any = None,
    ) -> Self:
        """One made outside the core and the engine, with what they would set
        (for tests, and for a transport that makes its own)."""
        message = cls(frame, subscription, ack_mode)
        message._epoch = epoch
        message._owner = owner
        message._seq = 0
        message._answered = None
        message._headers = None
        return message

    @property
    def event(self) -> MessageReceived:
        """The core's :class:`~stompy.events.MessageReceived` for it: the message
        itself, which is one."""
        return self

    @property
    def text(self) -> str:
        """The body decoded with the content-type's charset (UTF-8 by default).

        Raises :class:`~stompy.errors.BodyNotText` naming the content type when the
        body is not text in that charset (or the charset is unknown).
        """
        charset = _charset(self.content_type)
        body = self.body
        try:
            return body.decode(charset)
        except UnicodeDecodeError as exc:
            start, end, reason = exc.start, exc.end, exc.reason
        except UnicodeError as exc:
            # Some codecs (punycode, "undefined") fail without saying where.
            start, end, reason = 0, len(body), str(exc)
        except LookupError:
            start, end, reason = 0, len(body), f"unknown charset {charset!r}"
        shown = self.content_type or f"none, so {charset}"
        raise BodyNotText(
            f"the body of message {self.message_id!r} is not text in its charset "
            f"(content-type: {shown}): {reason} at byte {start}",
            charset,
            body,
            start,
            end,
            reason,
        )

    @property
    def headers(self) -> Mapping[str, str]:
        headers = self._headers
        if headers is None:
            headers = self._headers = MappingProxyType(self.frame.header_map())
        return headers

    @property
    def content_type(self) -> str | None:
        return self.frame.get("content-type")

    @property
    def redelivered(self) -> bool:
        return self.frame.get("redelivered") == "true"

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return (
            f"<{type(self).__name__} {self.message_id!r} from {self.destination!r} "
            f"sub={self.subscription!r} body={body!r}>"
        )

"""What a received message looks like to the user, in either client.

:class:`MessageBase` wraps the core's :class:`~stompy._events.MessageReceived`; the
blocking ``Message`` and the ``AsyncMessage`` add only how they are answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from stompy._events import AckMode, MessageReceived
from stompy._frames import Frame
from stompy.errors import BodyNotText

__all__ = ("MessageBase",)


def _charset(content_type: str | None) -> str:
    if content_type:
        for param in content_type.split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip('"')
    return "utf-8"


class MessageBase:
    """A received message: body, headers and where it came from.

    ``headers`` is a read-only mapping in which the first entry of a repeated header
    wins; ``frame.headers`` keeps every entry in order.
    """

    __slots__ = ("_epoch", "_headers", "event")

    def __init__(self, event: MessageReceived, epoch: int) -> None:
        self.event = event
        self._epoch = epoch
        self._headers: Mapping[str, str] | None = None

    @property
    def frame(self) -> Frame:
        return self.event.frame

    @property
    def body(self) -> bytes:
        return self.event.frame.body

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
        if self._headers is None:
            self._headers = MappingProxyType(self.event.frame.header_map())
        return self._headers

    @property
    def destination(self) -> str:
        return self.event.destination

    @property
    def message_id(self) -> str:
        return self.event.message_id

    @property
    def subscription(self) -> str:
        return self.event.subscription

    @property
    def ack_mode(self) -> AckMode:
        return self.event.ack_mode

    @property
    def content_type(self) -> str | None:
        return self.event.frame.get("content-type")

    @property
    def redelivered(self) -> bool:
        return self.event.frame.get("redelivered") == "true"

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return (
            f"<{type(self).__name__} {self.message_id!r} from {self.destination!r} "
            f"sub={self.subscription!r} body={body!r}>"
        )

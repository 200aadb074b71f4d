"""How a connection's end becomes the exception a user sees, and its words.

An event that ends a connection (an ERROR frame, heart-beats gone silent, the socket
closed) is :func:`error_for_event`; an ERROR about a frame too large names the limit and
what sets it (:func:`too_large`); a socket that failed is :func:`transport_failed`, whose
words say when a frame too large is the likely cause (:func:`while_writing`).
"""

from __future__ import annotations

from typing import Final

from stompy._core.events import ConnectionClosed, Error, Event, HeartbeatTimedOut
from stompy._core.protocol import MAX_BODY_OPTION, ClientProtocol
from stompy.errors import (
    ConnectionLost,
    HeartbeatTimeout,
    ServerError,
    StompError,
    TooLargeForServer,
)

__all__ = (
    "LARGE_UNSENT",
    "error_for_event",
    "failure_reason",
    "too_large",
    "transport_failed",
    "while_writing",
)


def error_for_event(event: Event) -> StompError | None:
    """The exception a connection-ending event becomes, or ``None`` for other events."""
    if isinstance(event, Error):
        return ServerError(event.message, event.frame)
    if isinstance(event, HeartbeatTimedOut):
        return HeartbeatTimeout(f"no data from the server for {event.silence:.1f} s")
    if isinstance(event, ConnectionClosed):
        return ConnectionLost("the server closed the connection")
    return None


#: What a broker's ERROR says when a frame was over its size limit (lower case): ours
#: "frame too large", ActiveMQ "... larger than max allowed ..." or "The maximum data
#: length was exceeded".
_TOO_LARGE_WORDS: Final = ("too large", "too big", "larger than max", "maximum data length")
#: Where a broker's frame size limit is set, for a broker that did not announce it.
_SIZE_OPTIONS: Final = (
    "the broker's configuration (stompy.testing's broker: BrokerConfig(limits=FrameLimits("
    "max_body=...)); ActiveMQ: transport.maxDataLength and transport.maxFrameSize on its "
    "STOMP transport connector)"
)


def too_large(failure: ServerError, proto: ClientProtocol) -> ServerError:
    """``failure``, the ERROR frame's error, as a :class:`TooLargeForServer` when it says
    a frame was too large, naming the broker's limit (when it announced one) and what
    sets it; else ``failure`` itself."""
    frame = failure.frame
    said = frame.body[:1000].decode("utf-8", "replace").strip() if frame is not None else ""
    text = f"{failure.message}\n{said}".lower()
    if not any(words in text for words in _TOO_LARGE_WORDS):
        return failure
    detail = said.splitlines()[0] if said else ""
    limit = proto.max_body
    if limit is not None:
        known = (
            f"it announced a body limit of {limit} bytes; its limits are set by {MAX_BODY_OPTION}"
        )
        option = MAX_BODY_OPTION
    else:
        known = f"it did not say its limits, which are set by {_SIZE_OPTIONS}"
        option = _SIZE_OPTIONS
    return TooLargeForServer(
        f"{failure.message}: the broker refused a frame as too large"
        f"{f' ({detail})' if detail and detail != failure.message else ''} and closed the "
        f"connection; {known}",
        failure.frame,
        limit=limit,
        option=option,
    )


def failure_reason(exc: BaseException) -> str:
    """What went wrong, in words: the exception's message, else its cause's (trio's
    ``BrokenResourceError`` says nothing itself), else its type's name."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk down the chain
        if seen is None:
            break
        text = str(seen)
        if text:
            return text
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


#: Unsent bytes past which a failed write is said to look like a frame refused for its
#: size: a broker that closes on a frame over its limit may send no ERROR first.
LARGE_UNSENT: Final = 1024 * 1024


def transport_failed(endpoint: object, exc: BaseException, unsent: int) -> ConnectionLost:
    """The error of a connection whose socket failed with ``exc`` while ``unsent`` bytes
    were still to go (see :func:`while_writing`)."""
    lost = ConnectionLost(f"connection to {endpoint} failed: {failure_reason(exc)}")
    return while_writing(lost, unsent)


def while_writing(lost: ConnectionLost, unsent: int) -> ConnectionLost:
    """``lost``, the error of a connection that ended while ``unsent`` bytes were still
    to be written; with many, it names the likely cause: a broker that refuses a frame
    too large closes the connection while the frame is still being written, and may
    say nothing first."""
    if unsent < LARGE_UNSENT or type(lost) is not ConnectionLost:
        return lost
    return ConnectionLost(
        f"{lost} ({unsent} bytes were still to be written: a broker closes the connection "
        "like this when a frame is over its size limit, e.g. ActiveMQ's "
        "transport.maxDataLength)"
    )

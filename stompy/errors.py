"""The one error hierarchy of stompy.

Everything stompy raises on purpose derives from :class:`StompError`. Protocol errors
are split the h11 way under :class:`ProtocolError`: :class:`LocalProtocolError` means
*you* asked for something the protocol or the current state forbids (nothing was sent);
:class:`RemoteProtocolError` means the *peer* broke the protocol (the connection is
done). ``except ProtocolError`` catches both. Network failures, timeouts and ERROR
frames from the server each have their own branch, so that
``except stompy.errors.StompError`` is the only clause a user needs.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from typing import Protocol, TypeVar

__all__ = (
    "AckLost",
    "BodyNotText",
    "ClosedBeforeReceipt",
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "ConnectFailed",
    "ConnectionLost",
    "FrameTooLarge",
    "HeartbeatTimeout",
    "ListenFailed",
    "LocalProtocolError",
    "MessageTooLarge",
    "NetworkError",
    "NoReplyTo",
    "ProtocolError",
    "ReceiptTimeout",
    "RemoteProtocolError",
    "RequestTimeout",
    "ServerError",
    "StompError",
    "StompTimeout",
    "SubscriptionOverflow",
    "TooLargeForServer",
    "TransactionLost",
    "WebSocketClosed",
)


class StompError(Exception):
    """Base class of every error stompy raises."""


class BodyNotText(StompError, UnicodeDecodeError):
    """A message's body is not text in the charset its ``content-type`` names.

    Raised by ``Message.text``; ``Message.body`` still has the bytes. A
    :class:`UnicodeDecodeError` too (the charset may be unknown: then ``reason`` says
    so), so code written for the bare decoding error still catches it.
    """

    def __init__(
        self, message: str, encoding: str, body: bytes, start: int, end: int, reason: str
    ) -> None:
        UnicodeDecodeError.__init__(self, encoding, body, start, end, reason)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[BodyNotText], tuple[object, ...], dict[str, object]]:
        # Pickle makes an exception again from its args, which here are
        # UnicodeDecodeError's five, not this __init__'s six.
        made = (self.message, self.encoding, self.object, self.start, self.end, self.reason)
        return type(self), made, vars(self)


class ConfigurationError(StompError, ValueError):
    """An option or argument has a value stompy cannot use; the message names the
    option and shows the value (``max_pending: must be at least 1, got 0``), never a
    passcode.

    Raised where the object is made (``Connection``, ``AsyncConnection``,
    ``Reconnect``, ``FrameLimits``, a broker URL, the Spark source's options) or where
    the call begins (``subscribe``, ``get``, ``get_batch``, ``request``), before
    anything is opened, sent or waited for. A :class:`ValueError` too, so code that
    checks input the usual way catches it. A value of the wrong type (a ``str`` for a
    number) is a plain :class:`TypeError`, as in Python itself, naming the option too.
    """


class ProtocolError(StompError):
    """The STOMP protocol was broken, by either side; catch this for both kinds.

    stompy raises one of its two subclasses, which says whose fault it was.
    """


class LocalProtocolError(ProtocolError):
    """The caller asked for something the protocol or the current state forbids.

    Nothing was sent and the state did not change: the connection is still usable.
    """


class NoReplyTo(LocalProtocolError):
    """``Message.reply()`` on a message without a ``reply-to`` header: there is nowhere
    to send the reply. Nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the STOMP specification does not allow.

    Raised by the parser for malformed bytes and by the state machine for frames
    that make no sense in the current state. The connection cannot be trusted after
    it and should be closed.
    """


class FrameTooLarge(RemoteProtocolError):
    """A frame from the peer crossed one of the configured :class:`~stompy.FrameLimits`.

    Raised as soon as the limit is crossed, before the rest of the frame is buffered.
    """


class _Frame(Protocol):
    """What :attr:`ServerError.frame` offers: a :class:`~stompy.protocol.Frame`, read-only.

    Described here rather than imported, so that this module depends on nothing.
    """

    @property
    def command(self) -> str: ...
    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def body(self) -> bytes: ...
    def get(self, name: str, default: str | None = None) -> str | None: ...
    def header_map(self) -> dict[str, str]: ...
    def __contains__(self, name: object) -> bool: ...


#: The most of an ERROR body's first line that a :class:`ServerError`'s text shows.
_BODY_LINE_SHOWN = 200


def _body_line(body: bytes) -> str:
    """The first line of an ERROR frame's body that says something, cut short."""
    for line in body[: 4 * _BODY_LINE_SHOWN].decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line:
            if len(line) > _BODY_LINE_SHOWN:
                return line[:_BODY_LINE_SHOWN] + "..."
            return line
    return ""


class ServerError(StompError):
    """The server sent an ERROR frame; it closes the connection after it.

    ``frame`` is the ERROR frame, ``message`` its ``message`` header (or its body
    when the header is missing), ``body`` the frame's whole body (``b""`` without a
    frame). The error's text is the ``message``, then the body's first line (cut
    short) when it says more: some brokers put the cause there ("See below" in the
    header, the cause in the body: stompserver); then ``note``, what stompy knows of
    the cause (a refused CONNECT: the ``host`` it sent and what sets it).
    """

    def __init__(self, message: str, frame: _Frame | None = None, *, note: str = "") -> None:
        body = frame.body if frame is not None else b""
        said = _body_line(body)
        text = f"{message}: {said}" if said and said not in message else message
        super().__init__(f"{text} ({note})" if note else text)
        self.message = message
        self.frame = frame
        self.body = body


class NetworkError(StompError):
    """The transport failed: refused, reset, closed, or unreachable."""


class ConnectFailed(NetworkError):
    """No connection could be established to any of the given servers."""


class ListenFailed(NetworkError, OSError):
    """A server of :mod:`stompy.testing` (the broker, the fault proxy) could not listen
    on ``host:port``: the port is taken, the host does not resolve to an address of this
    machine, the port needs privileges.

    ``host`` and ``port`` are the address it was asked for, ``errno`` and ``strerror``
    the cause's (also its ``__cause__``: a :class:`socket.gaierror` for a host that does
    not resolve). An :class:`OSError` too, which these servers raised before, so code
    written for that still catches it.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str = "",
        port: int = 0,
        errno: int | None = None,
        strerror: str | None = None,
    ) -> None:
        OSError.__init__(self, message)
        self.errno = errno
        self.strerror = strerror
        self.host = host
        self.port = port

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[type[ListenFailed], tuple[object, ...], dict[str, object]]:
        # errno and strerror are OSError's slots, not in __dict__: pickle them too.
        state = {**vars(self), "errno": self.errno, "strerror": self.strerror}
        return type(self), self.args, state


class ConnectionLost(NetworkError):
    """An established connection ended without a graceful DISCONNECT."""


class ClosedBeforeReceipt(ConnectionLost):
    """``close()`` ended the connection while a call waited for a RECEIPT (a send, a
    commit, an ack or a subscribe with a receipt), and the broker did not confirm the
    DISCONNECT: whether the frame took effect is unknown.

    Had the broker confirmed the DISCONNECT, it would have received every frame sent
    before it, and the call would have returned as confirmed. A
    :class:`ConnectionLost` too, which this case raised before it had a name of its
    own, and which says the same of a receipt: the frame may or may not have arrived.
    """


class StompTimeout(StompError, TimeoutError):
    """Something did not happen in the time allowed."""


class HeartbeatTimeout(ConnectionLost, StompTimeout):
    """Nothing arrived from the peer within the negotiated heart-beat window."""


class ReceiptTimeout(StompTimeout):
    """The RECEIPT for a frame did not arrive in time."""


class RequestTimeout(StompTimeout):
    """No reply to a ``request()`` arrived in time; a reply that comes later is dropped."""


class TransactionLost(StompError):
    """The connection was lost (and perhaps re-established) while a transaction was open.

    The broker aborted the transaction; nothing sent or acked in it took effect. Not so
    for its subclass :class:`CommitOutcomeUnknown`: the COMMIT went out, and whether it
    took effect is unknown.
    """


class CommitOutcomeUnknown(TransactionLost, ConnectionLost):
    """The connection was lost after a transaction's COMMIT was sent and before the
    broker confirmed it: the broker may have committed the transaction, or aborted it
    with the connection. Which is unknown.

    A :class:`TransactionLost`, which this case raised before it had a name of its own,
    and a :class:`ConnectionLost`, which says the same of a send whose receipt was lost:
    the frame may or may not have taken effect.
    """


class WebSocketClosed(ConnectionLost):
    """The peer closed the WebSocket; ``code`` and ``reason`` are what its close frame said.

    Code 1006 means the connection ended with no close frame at all.
    """

    def __init__(self, code: int, reason: str, who: str = "the peer") -> None:
        shown = f" ({reason})" if reason else ""
        super().__init__(f"{who} closed the WebSocket with code {code}{shown}")
        self.code = code
        self.reason = reason
        self._who = who

    def __reduce__(self) -> tuple[type[WebSocketClosed], tuple[object, ...], dict[str, object]]:
        # Pickle makes an exception again from its args: the message, not these three.
        return type(self), (self.code, self.reason, self._who), vars(self)


class AckLost(ConnectionLost):
    """``ack(receipt=True)`` or ``nack(receipt=True)`` of a message received on an
    earlier connection: nothing was sent, since that connection's deliveries ended with
    it. The broker took the message back and delivers it again (``redelivered``); what
    the consumer did with it must be safe to do twice.
    """


class SubscriptionOverflow(StompError):
    """A subscription with ``overflow="fail"`` fell ``max_pending`` messages behind, and
    the client ended it rather than stop reading the connection for it.

    Raised by its ``get()`` (and iteration) once the messages received before were
    handed out. Messages that came after the limit were not kept: with ``ack="auto"``
    they are lost, with client acks the broker delivers them again.
    """


# -- a frame too large for the broker ---------------------------------------------------


class MessageTooLarge(StompError):
    """A frame to send is larger than the broker takes; catch this for both cases.

    ``limit`` is the broker's limit on a body in bytes (``None`` when the broker did not
    say), ``size`` the size of the body that was too large (``None`` when unknown),
    ``option`` what sets the limit. Raised as it is, before anything goes out, when the broker
    announced its limit in CONNECTED (stompy's in-process broker does, in
    ``max-body-length``; RabbitMQ and ActiveMQ do not): nothing was sent and the
    connection is still usable. When the broker refused the frame itself, the error is
    a :class:`TooLargeForServer`.
    """

    def __init__(
        self, message: str, *, limit: int | None = None, size: int | None = None, option: str = ""
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.size = size
        self.option = option


class TooLargeForServer(MessageTooLarge, ServerError):
    """The broker's ERROR said a frame was too large; the broker closed the connection.

    A :class:`MessageTooLarge` and a :class:`ServerError` (``frame`` is the ERROR
    frame): the connection's failure, raised by the calls after it.
    """

    def __init__(
        self,
        message: str,
        frame: _Frame | None = None,
        *,
        limit: int | None = None,
        size: int | None = None,
        option: str = "",
    ) -> None:
        MessageTooLarge.__init__(self, message, limit=limit, size=size, option=option)
        self.message = message
        self.frame = frame
        self.body = frame.body if frame is not None else b""


# -- raising a stored failure again ---------------------------------------------------

_E = TypeVar("_E", bound=BaseException)

#: The stored failures some call raised (a copy of): a broker's ERROR that no call
#: raised is what ``close()`` raises (see :func:`_untold`). Weak: a failure goes with
#: its connection.
_RAISED: weakref.WeakSet[BaseException] = weakref.WeakSet()


def _again(error: _E) -> _E:
    """A fresh copy of ``error``, the failure a connection stored, to raise once more:
    ``raise _again(failure) from failure``.

    Same type, message and attributes (a :class:`ServerError`'s ``frame``), and a
    traceback of its own: raising the stored object itself would add every raising
    call's frames to its one traceback, which grows without end and shows calls that
    have nothing to do with the current one.
    """
    try:
        fresh = copy.copy(error)  # type(error)(*args), then its __dict__
    except Exception:
        # An __init__ that does not take its own args back (WebSocketClosed): made
        # without it, which keeps args (its message) and every attribute.
        cls = type(error)
        fresh = cls.__new__(cls, *error.args)
        fresh.__dict__.update(error.__dict__)
    # Chained here, as ``from failure`` says: mypyc compiles ``raise ... from ...`` as a
    # plain raise, so in the wheel the engine's raises would chain nothing.
    fresh.__cause__ = error
    with contextlib.suppress(TypeError):  # a class without weak references: not noted
        _RAISED.add(error)
    return fresh


def _untold(error: _E | None) -> _E | None:
    """``error``, a stored failure, if no call raised it yet (with :func:`_again`),
    else ``None``."""
    return error if error is not None and error not in _RAISED else None

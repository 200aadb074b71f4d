"""The sans-IO STOMP client state machine.

Theory of operation
-------------------
:class:`ClientProtocol` does no I/O and reads no clock. A transport drives it with
four kinds of call:

* intents (``connect``, ``send``, ``subscribe``, ``ack``, ``begin``, ...) encode a
  frame into the outgoing buffer, or raise :class:`LocalProtocolError` and change
  nothing when the intent is invalid in the current state;
* ``receive_data(data, now)`` / ``receive_eof()`` hand over what the peer sent;
  ``next_event()`` then returns typed events one at a time (``None`` when it needs
  more bytes), the frames that arrived before the EOF first;
* ``data_to_send(now)`` drains the outgoing buffer (heart-beat EOLs included: STOMP
  produces bytes nobody asked for);
* ``next_deadline()`` / ``handle_timer(now)`` run the heart-beats: the transport
  sleeps until the deadline, or until bytes arrive, whichever is first.

States move only forward::

    IDLE --connect()--> CONNECTING --CONNECTED--> CONNECTED --disconnect()--> DISCONNECTING
      ERROR frame, EOF, heart-beat loss or a peer protocol error: any state --> CLOSED
      RECEIPT for the DISCONNECT:                            DISCONNECTING --> CLOSED
      close(), or disconnect(receipt=False):                     any state --> CLOSED

An intent that is not allowed raises :class:`LocalProtocolError` before anything
changes: no byte is queued and no id, receipt, subscription or transaction is
recorded. Entering CLOSED forgets open transactions (the server aborts them).

What the peer sends is refused as a :class:`RemoteProtocolError` when the spec forbids
it, and accepted where the spec leaves room or the fault is harmless: a RECEIPT that
answers no frame (CoilMQ sends a transacted SEND's receipt again at COMMIT) is logged at
INFO and dropped; a MESSAGE without ``message-id`` (stompserver, stomp-broker-js) is
delivered where no ACK must name it, with one WARNING per connection.

Every decision the protocol makes lives here: version negotiation, which ACK frame a
version needs, receipt matching, subscription routing, transaction bookkeeping and
heart-beat deadlines. Transports only move bytes and keep time.
"""

from __future__ import annotations

import codecs
import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, cast

from stompy._checks import (
    check_heartbeats,
    check_integer,
    check_number,
    check_type,
    check_versions,
    refuse_time,
    wrong_type,
)
from stompy._core.encoder import encode, encode_frame, encode_send, plain_send_names
from stompy._core.events import (
    AckMode,
    Connected,
    ConnectionClosed,
    Error,
    Event,
    HeartbeatTimedOut,
    MessageReceived,
    Receipt,
)
from stompy._core.frames import (
    SEND_RESERVED,
    V10,
    V11,
    V12,
    VERSIONS,
    Frame,
    make_headers,
    received_block,
    received_escaping,
    unescape,
)
from stompy._core.heartbeat import (
    MAX_INTERVAL,
    Heartbeat,
    format_heartbeat,
    negotiate,
    only_heartbeats,
    parse_heartbeat,
)
from stompy._core.parser import DEFAULT_LIMITS, FrameLimits, FrameParser, shown
from stompy.errors import (
    ConfigurationError,
    LocalProtocolError,
    MessageTooLarge,
    ProtocolError,
    RemoteProtocolError,
)

__all__ = (
    "ACK_MODES",
    "MAX_BODY_HEADER",
    "MAX_BODY_OPTION",
    "ClientProtocol",
    "State",
    "SubscriptionInfo",
    "check_send",
)

ACK_MODES: Final[tuple[AckMode, ...]] = ("auto", "client", "client-individual")

log: Final = logging.getLogger("stompy")

HeaderInput = Mapping[str, str] | Iterable[tuple[str, str]] | None

#: Headers that stompy writes itself; passing them among user headers is a mistake
#: that would otherwise be silently overridden ("first entry wins"). SEND's are
#: SEND_RESERVED.
_RESERVED_SUBSCRIBE: Final = frozenset({"destination", "receipt", "id", "ack"})
#: What a SEND's headers taken as the caller's dict must not name.
_SEND_WRITTEN: Final = SEND_RESERVED | {"content-length"}
_TEXT_TYPE: Final = "text/plain;charset=utf-8"
_NO_MESSAGE_ID: Final = "MESSAGE frame without the message-id header STOMP requires"
#: How many unsubscribed ids are remembered, so that MESSAGE frames still in flight
#: for them are delivered rather than treated as a protocol error.
_CLOSED_SUBSCRIPTIONS_KEPT: Final = 1024
#: RabbitMQ delivers replies to a ``reply-to:/temp-queue/<name>`` on a subscription the
#: client never made, whose id is that header value; this many such ids are remembered.
_TEMP_QUEUE_PREFIX: Final = "/temp-queue/"
#: The headers of a SEND given none, for the encoder's common way (never changed).
_NO_HEADERS: Final[dict[str, str]] = {}
_TEMP_QUEUES_KEPT: Final = 1024
#: The CONNECTED header in which a broker announces the largest body it takes, in
#: bytes. No STOMP version defines one: stompy's in-process broker sends it (RabbitMQ
#: and ActiveMQ do not), and a client that sees it refuses a larger SEND before it goes
#: out, rather than have the broker end the connection for it.
MAX_BODY_HEADER: Final = "max-body-length"
#: What sets the limit a broker announces in :data:`MAX_BODY_HEADER` (only stompy's
#: in-process broker announces one).
MAX_BODY_OPTION: Final = (
    "the broker's limits (stompy.testing's broker: BrokerConfig(limits=FrameLimits("
    "max_body=...)), or limits=... to run_broker() and serve())"
)
#: No announced limit: larger than any body (one comparison per SEND, no None check).
_NO_LIMIT: Final = 1 << 62


def _bad_destination(command: str, destination: object) -> Exception:
    """The error for a destination that is empty or not a ``str``.

    A TypeError names the type, as the compiled core's argument check does (it stops
    ``None`` before this is reached): the pure one must not send ``None`` or a number.
    """
    kind = type(destination)
    if kind is str:
        return LocalProtocolError(f"{command} needs a destination")
    if isinstance(destination, str):
        # A StrEnum's member, say: compared and hashed as its text but not that (its
        # repr, its str() in a plain Enum), so named rather than taken as empty.
        given = "str(...) of it"
        if isinstance(destination, enum.Enum):
            given = f"{kind.__name__}.{destination.name}.value"
        return TypeError(
            f"a destination must be a str, not {kind.__name__} (a subclass of str): pass {given}"
        )
    return TypeError(f"a destination must be a str, not {kind.__name__}")


def _two_content_types() -> ConfigurationError:
    """The error for a send given a ``content_type`` and a ``content-type`` header that
    differ: one would be dropped without a word (the header values are not shown)."""
    return ConfigurationError(
        "content_type: the headers give a 'content-type' header too, with another value; "
        "give the content type once, as content_type= or as the header"
    )


def _not_utf8_label(content_type: str) -> ConfigurationError | None:
    """The error for a ``str`` body, which is sent as UTF-8, labelled with a content
    type that names another charset: every receiver would decode it wrongly (a
    ``text/plain;charset=latin-1`` "é" read as "Ã©"). ``None`` when it names UTF-8 or
    no charset."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() != "charset":
            continue
        charset = value.strip().strip('"')
        try:
            if codecs.lookup(charset).name == "utf-8":
                return None
        except LookupError:
            pass
        # A header value is not shown: only a charset that looks like one.
        token = charset.replace("-", "").replace("_", "")
        named = f" {charset!r}" if token.isascii() and token.isalnum() and len(token) < 40 else ""
        return ConfigurationError(
            f"content_type: a str body is sent as UTF-8, but the content type names the "
            f"charset{named}: pass the body as bytes in that charset, or name utf-8"
        )
    return None


def _content_type_in_another_case(names: Iterable[object]) -> ConfigurationError | None:
    """The error for a header spelled ``Content-Type`` (any case but the lower), given
    where stompy writes ``content-type`` itself: the frame would carry both, header names
    being case-sensitive in STOMP, and a receiver reads only ``content-type``."""
    # Iterable[object]: a name that is no str is the encoder's to name (compiled, a
    # narrower type would be asserted for each name, naming nothing).
    for name in names:
        if (
            type(name) is str
            and len(name) == 12
            and name != "content-type"
            and name.lower() == "content-type"
        ):
            return ConfigurationError(
                f"headers: {name!r} would be sent beside the content-type stompy writes "
                "(content_type=, or text/plain;charset=utf-8 for a str body): STOMP header "
                "names are case-sensitive, and receivers read 'content-type'; write it so, "
                "or give content_type= alone"
            )
    return None


#: What to give instead of a header stompy writes itself, by its name.
_ARGUMENTS: Final = {
    "destination": "give the destination argument",
    "receipt": "ask for one with receipt=True (a one-shot send always does)",
    "transaction": "send in a transaction with its send(), or send(..., transaction=)",
    "id": "give the id argument",
    "ack": "give the ack argument",
    "content-length": "leave it out: stompy writes the body's length itself",
    "accept-version": "give the versions option",
    "host": "give the host option (or the URL's path)",
    "login": "give the login option (or put it in the URL)",
    "passcode": "give the passcode option (or put it in the URL)",
    "heart-beat": "give the heartbeats option",
}


def _owned_in_another_case(name: str, owned: str, what: str) -> ConfigurationError:
    """The error for a header ``name`` that spells ``owned``, a header stompy writes
    itself in ``what``, in another case: sent as written, beside stompy's or alone,
    a receiver would read one or the other, or neither."""
    return ConfigurationError(
        f"headers: {name!r} is the {owned!r} header, which stompy writes itself in {what}: "
        "STOMP header names are case-sensitive, so it would be sent as written and a "
        f"receiver would read one or the other, or neither; {_ARGUMENTS.get(owned, owned)}"
    )


def _spelled_otherwise(names: Iterable[object]) -> str | None:
    """The first of ``names`` that spells a header a SEND writes itself (its
    destination, receipt, transaction or content-length) in another case, if any."""
    for name in names:
        if isinstance(name, str):
            lowered = name.lower()
            if lowered != name and lowered in _SEND_WRITTEN:
                return name
    return None


def _check_length(given: str, size: int) -> None:
    """Refuse a caller's ``content-length`` header that does not say ``size``, the
    body's length in bytes: stompy writes the true one (one of that value is taken)."""
    if not (given.isascii() and given.isdigit() and int(given) == size):
        raise ConfigurationError(
            f"headers: 'content-length' is {given!r} and the body is {size} bytes: stompy "
            "writes the body's length itself; leave the header out"
        )


def _not_text(
    command: str, headers: list[tuple[str, str]], exc: UnicodeEncodeError
) -> LocalProtocolError:
    """The error for a frame whose header UTF-8 cannot encode (a lone surrogate, as
    ``os.fsdecode`` makes of bytes that are not UTF-8), naming the header."""
    for name, value in headers:
        for part, text in (("name", name), ("value", value)):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as bad:
                return LocalProtocolError(
                    f"{command} header {name!r}: its {part} is not valid text "
                    f"({bad.reason}: {text[bad.start : bad.end]!r}); nothing was sent"
                )
    return LocalProtocolError(str(exc))


def _body_bytes(body: object) -> bytes:
    """A ``bytes`` subclass as bytes; anything else but ``str`` is refused.

    ``bytes(body)`` alone would take an int as that many NUL bytes and a bytearray
    that the compiled core's argument check refuses: both flavours refuse the same.
    """
    if isinstance(body, bytes):
        return bytes(body)
    raise TypeError(f"a body must be bytes or str, not {type(body).__name__}")


def check_send(destination: object, body: object, headers: object, content_type: object) -> None:
    """Raise what :meth:`ClientProtocol.send` raises for these arguments in any state:
    a destination that is empty or not a ``str``, a body neither ``bytes`` nor ``str``,
    headers that are not a mapping of str to str (or pairs of str), a header stompy
    sets itself, a ``content_type`` that is not a ``str`` or that another
    ``content-type`` header contradicts. What a send checks only on a connection (the
    text of a ``str`` body, its size, what a version cannot carry) is left to it.

    For :class:`~stompy.Outgoing`, which is checked where it is made: a
    ``send_many()`` would otherwise fail at it, with the messages before it sent.
    """
    if type(destination) is not str or not destination:
        raise _bad_destination("SEND", destination)
    if type(body) is not bytes and type(body) is not str and not isinstance(body, (bytes, str)):
        _body_bytes(body)  # raises
    given: object = None  # the content-type header's value
    names: Iterable[str] = ()  # the header names
    pairs: list[tuple[str, str]] = []
    if headers is None:
        pass
    elif type(headers) is dict:
        for item in headers.items():
            if (type(item[0]) is not str or type(item[1]) is not str) and not (
                isinstance(item[0], str) and isinstance(item[1], str)  # as send() takes
            ):
                # The encoder's words, which send() says of a dict.
                raise TypeError(f"a header must be a (name, value) pair of str, got {item!r}")
        if not plain_send_names(headers):  # a name stompy writes, in some case
            pairs = ClientProtocol._user_headers(headers, SEND_RESERVED, "SEND", lengths=True)
        given = headers.get("content-type")
        names = headers
    else:
        loose = cast(HeaderInput, headers)
        pairs = ClientProtocol._user_headers(loose, SEND_RESERVED, "SEND", lengths=True)
        given = next((value for name, value in pairs if name == "content-type"), None)
        names = [name for name, _ in pairs]
    for name, value in pairs:
        if name == "content-length":
            # A str body's length as send() writes it (one that is not text, it refuses).
            data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
            _check_length(value, len(cast(bytes, data)))
    if content_type is not None:
        if not isinstance(content_type, str):
            raise wrong_type("content_type", "a str or None", content_type)
        if given is not None and given != content_type:
            raise _two_content_types()
    if given is None and (content_type is not None or type(body) is str):
        other = _content_type_in_another_case(names)
        if other is not None:
            raise other
    label = content_type if content_type is not None else given
    if isinstance(body, str) and isinstance(label, str):
        mislabelled = _not_utf8_label(label)
        if mislabelled is not None:
            raise mislabelled


class State(enum.Enum):
    """Where a client connection stands."""

    #: Nothing sent yet; only ``connect()`` is allowed.
    IDLE = "IDLE"
    #: CONNECT sent, waiting for CONNECTED.
    CONNECTING = "CONNECTING"
    #: CONNECTED received; every intent is allowed.
    CONNECTED = "CONNECTED"
    #: DISCONNECT sent; waiting for its RECEIPT (or the peer's close).
    DISCONNECTING = "DISCONNECTING"
    #: Finished: after the DISCONNECT receipt, an ERROR, EOF, a dead peer or a protocol error.
    CLOSED = "CLOSED"


#: The states as module constants, for the methods that run per frame: an Enum's member
#: looked up on its class (``State.CONNECTED``) costs many times what a module constant
#: does (docs/performance.md, "Figures behind the core's comments").
_IDLE: Final = State.IDLE
_CONNECTING: Final = State.CONNECTING
_CONNECTED: Final = State.CONNECTED
_DISCONNECTING: Final = State.DISCONNECTING
_CLOSED: Final = State.CLOSED


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """What the client remembers of one of its subscriptions."""

    id: str
    destination: str
    ack: AckMode


class ClientProtocol:
    """A STOMP client connection, without I/O. See the module docstring.

    ``versions`` are offered in ``accept-version``; ``heartbeats`` is what we can send
    and want to receive, in ms; the peer is declared dead after the incoming interval
    times ``heartbeat_tolerance``; ``limits`` bound every received frame. Receiving is
    strict by default: ``strict=False`` keeps undefined escapes such as ``\\t``
    literally and accepts a body on a frame that may not have one, for brokers that
    send them anyway. What we send is always strict.

    ``message_class`` is the class of the :class:`MessageReceived` events: the event
    itself, or a subclass made with the same arguments (a client's message, so that what
    the core makes of a MESSAGE is the object the user receives). It is fixed for the
    connection: :attr:`message_class` is read-only.
    """

    def __init__(
        self,
        *,
        versions: Iterable[str] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        heartbeat_tolerance: float = 2.0,
        limits: FrameLimits = DEFAULT_LIMITS,
        strict: bool = True,
        message_class: type[MessageReceived] = MessageReceived,
    ) -> None:
        # The clients' checks (ClientOptions), here too: the core is public.
        offered = tuple(sorted(set(check_versions("versions", versions, VERSIONS))))
        self.versions: tuple[str, ...] = offered
        self.heartbeats = check_heartbeats("heartbeats", heartbeats, MAX_INTERVAL)
        self.heartbeat_tolerance = check_number("heartbeat_tolerance", heartbeat_tolerance, 1.0)
        check_type("limits", limits, FrameLimits, "a FrameLimits")
        if not (isinstance(message_class, type) and issubclass(message_class, MessageReceived)):
            raise wrong_type("message_class", "MessageReceived or a subclass", message_class)
        #: "Receiving is strict by default": with ``strict=False`` undefined escapes are
        #: kept literally and a body on a bodiless frame is accepted.
        self.strict = strict
        self.state = _IDLE
        #: The negotiated version; the lowest offered one until CONNECTED arrives.
        self.version: str = offered[0]
        self.server: str | None = None
        self.session: str | None = None
        #: Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms.
        self.negotiated_heartbeats: tuple[int, int] = (0, 0)
        #: The largest body the broker takes, in bytes, when its CONNECTED frame said
        #: (:data:`MAX_BODY_HEADER`); ``None``: unknown.
        self.max_body: int | None = None
        self._max_body = _NO_LIMIT
        self._message_class = message_class
        self._parser = FrameParser(V10, limits, strict=strict)
        self._out: list[bytes] = []
        self._events: list[Event] = []  # made by timers, not frames (at most one)
        self._heartbeat: Heartbeat | None = None
        self._subscriptions: dict[str, SubscriptionInfo] = {}
        # Unsubscribed, oldest first (bounded by _CLOSED_SUBSCRIPTIONS_KEPT).
        self._closed_subscriptions: dict[str, SubscriptionInfo] = {}
        # reply-to temp queues named in SENDs: implicit auto-ack subscriptions, oldest first.
        self._temp_queues: dict[str, None] = {}
        self._transactions: set[str] = set()
        self._receipts: dict[str, str] = {}  # receipt id -> the command that asked for it
        self._disconnect_receipt: str | None = None
        self._error_seen = False
        self._eof = False  # the peer closed; reported once the buffered frames are out
        #: True when :meth:`next_event` is known to return ``None`` until more bytes,
        #: a timer or the end come (it may be False then too): a reader that just got
        #: an event can stop there rather than ask again for nothing.
        self.exhausted = False
        # Leniencies said once per connection at WARNING, not once per MESSAGE.
        self._warned_no_message_id = False
        self._warned_ambiguous = False
        self._next_id = 0

    # -- read-only views ---------------------------------------------------------------

    @property
    def message_class(self) -> type[MessageReceived]:
        """The class of the :class:`MessageReceived` events, given when it was made."""
        return self._message_class

    @property
    def subscriptions(self) -> Mapping[str, SubscriptionInfo]:
        """Open subscriptions by id."""
        return self._subscriptions

    @property
    def transactions(self) -> frozenset[str]:
        """Ids of the transactions begun and not yet committed or aborted."""
        return frozenset(self._transactions)

    @property
    def implicit_subscriptions(self) -> frozenset[str]:
        """Subscription ids the broker may use without a SUBSCRIBE: the ``/temp-queue/``
        names sent in ``reply-to`` headers (RabbitMQ routes the replies that way)."""
        return frozenset(self._temp_queues)

    @property
    def pending_receipts(self) -> frozenset[str]:
        """Receipt ids asked for and not yet received."""
        return frozenset(self._receipts)

    @property
    def last_id(self) -> int:
        """The number in the last id this connection made (a receipt's ``r-N``, a
        transaction's ``tx-N``, a subscription's): see :meth:`number_ids_after`."""
        return self._next_id

    def number_ids_after(self, last_id: int) -> None:
        """Number the ids this connection makes after ``last_id``, if it is later. A
        client that reconnects passes its previous connection's :attr:`last_id`: each
        connection would number from 1, and a call still waiting for the previous one's
        receipt ``r-1`` would take this one's ``r-1`` for its own."""
        last_id = check_integer("last_id", last_id, 0)
        if last_id > self._next_id:
            self._next_id = last_id

    # -- outgoing ----------------------------------------------------------------------

    def data_to_send(self, now: float | None = None) -> bytes:
        """Return (and forget) the bytes to write; ``now`` is when they are written.

        Pass ``now`` whenever heart-beats may be on: the time of the last write is
        what decides when an outgoing heart-beat is due.
        """
        if not self._out:
            if now is not None and type(now) is not float:
                refuse_time("now", now)
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        if now is not None:
            # Checked only here, with heart-beats on: a send without them passes None.
            if type(now) is not float:
                refuse_time("now", now)
            if self._heartbeat is not None:
                self._heartbeat.sent(now)
        return data

    def frames_to_send(self, now: float | None = None) -> list[bytes]:
        """Like :meth:`data_to_send`, but one entry per frame (or heart-beat EOL).

        For framings that carry one STOMP frame per message, such as WebSocket.
        """
        if now is not None and type(now) is not float:
            refuse_time("now", now)
        if not self._out:
            return []
        frames = list(self._out)
        self._out.clear()
        if now is not None and self._heartbeat is not None:
            self._heartbeat.sent(now)
        return frames

    def _new_id(self, prefix: str, taken: Iterable[str] | Mapping[str, object]) -> str:
        while True:
            self._next_id += 1
            candidate = f"{prefix}{self._next_id}"
            if candidate not in taken:
                return candidate

    def _require(self, *states: State) -> None:
        if self.state not in states:
            wanted = " or ".join(s.name for s in states)
            raise LocalProtocolError(f"not allowed in state {self.state.name} (needs {wanted})")

    def new_receipt_id(self) -> str:
        """A receipt id no frame awaits yet, to pass as ``receipt=`` to an intent.

        For a caller that must know the id of an intent returning something else:
        ``subscribe()`` returns the subscription id, ``begin()`` the transaction id.
        """
        return self._new_id("r-", self._receipts)

    def _receipt(self, receipt: bool | str, command: str) -> str | None:
        if receipt is False:
            return None
        if receipt is True:
            receipt_id = self._new_id("r-", self._receipts)
        else:
            receipt_id = receipt
            if not receipt_id:
                raise LocalProtocolError("a receipt id must not be empty")
            if receipt_id in self._receipts:
                raise LocalProtocolError(f"receipt {receipt_id!r} is already awaited")
        return receipt_id

    def _emit(
        self,
        command: str,
        headers: list[tuple[str, str]],
        mark: int,
        receipt_id: str | None,
        body: bytes = b"",
        more: dict[str, str] | None = None,
    ) -> None:
        """Queue a frame and record its receipt; on failure change nothing.

        ``mark`` is the id counter before the intent began: ids generated for a frame
        that cannot be encoded are given back. ``more`` are headers after ``headers``.
        """
        try:
            data = encode_frame(command, headers, body, self.version, more)
        except ValueError as exc:
            self._next_id = mark
            if isinstance(exc, UnicodeEncodeError):  # the codec names a place in the frame
                raise _not_text(command, [*headers, *(more or {}).items()], exc) from None
            raise LocalProtocolError(str(exc)) from None
        except TypeError:
            self._next_id = mark
            raise
        self._out.append(data)
        if receipt_id is not None:
            self._receipts[receipt_id] = command

    def _close(self) -> None:
        """Enter CLOSED. The server aborts whatever transaction was open."""
        self.state = _CLOSED
        self._transactions.clear()

    def _check_transaction(self, transaction: str | None) -> None:
        if transaction is not None and transaction not in self._transactions:
            raise LocalProtocolError(f"transaction {transaction!r} is not open")

    @staticmethod
    def _user_headers(
        headers: HeaderInput, reserved: frozenset[str], what: str, *, lengths: bool = False
    ) -> list[tuple[str, str]]:
        """The caller's extra headers as pairs, ``content-length`` left out (the encoder
        writes the true one) unless ``lengths`` (a SEND's, checked against its body); a
        header stompy sets itself is refused, in any case (and with ``lengths`` a
        content-length in another case)."""
        if headers is None:
            return []
        items = list(make_headers(headers))
        for key, _ in items:
            if key in reserved:
                raise LocalProtocolError(
                    f"header {key!r} is set by stompy for {what}: "
                    f"{_ARGUMENTS.get(key, 'use the argument')}"
                )
            lowered = key.lower()
            if lowered != key and (
                lowered in reserved or (lengths and lowered == "content-length")
            ):
                raise _owned_in_another_case(key, lowered, what)
        if lengths:
            return items
        return [(k, v) for k, v in items if k != "content-length"]

    def connect(
        self,
        host: str,
        *,
        login: str | None = None,
        passcode: str | None = None,
        headers: HeaderInput = None,
        command: str = "CONNECT",
    ) -> None:
        """Queue the CONNECT (or STOMP) frame. Allowed only in IDLE.

        ``host`` is the virtual host, ``headers`` extra headers such as ``client-id``.
        Raises :class:`LocalProtocolError` in another state, and for a header no
        version can carry in CONNECT (a line break), before anything is queued.
        """
        self._require(_IDLE)
        if command not in ("CONNECT", "STOMP"):
            raise LocalProtocolError("the connect command is CONNECT or STOMP")
        items: list[tuple[str, str]] = []
        if self.versions != (V10,):
            items.append(("accept-version", ",".join(self.versions)))
        items.append(("host", host))
        if login is not None:
            items.append(("login", login))
        if passcode is not None:
            items.append(("passcode", passcode))
        if self.heartbeats != (0, 0):
            items.append(("heart-beat", format_heartbeat(self.heartbeats)))
        reserved = frozenset({"accept-version", "host", "login", "passcode", "heart-beat"})
        items.extend(self._user_headers(headers, reserved, command))
        try:
            data = encode(Frame(command, tuple(items)), V10)
        except ValueError as exc:
            raise LocalProtocolError(str(exc)) from None
        self._out.append(data)
        self.state = _CONNECTING

    def send(
        self,
        # A str, bytes | str and str | None, typed object: checked here, which names
        # them (compiled by mypyc, a narrower type is asserted first, naming nothing).
        destination: object,
        body: object = b"",
        *,
        headers: HeaderInput = None,
        content_type: object = None,
        transaction: str | None = None,
        receipt: bool | str = False,
    ) -> str | None:
        """Queue a SEND frame; return the receipt id asked for, if any.

        A ``str`` body is encoded as UTF-8 and, unless ``content_type`` or a
        ``content-type`` header says otherwise, labelled ``text/plain;charset=utf-8``.
        A body of another type than ``bytes`` or ``str``, or a destination not a ``str``,
        is a TypeError (compiled or not), raised before anything changes; a body over the
        limit the broker announced (:attr:`max_body`) is a :class:`MessageTooLarge`.
        """
        if self.state is not _CONNECTED:
            self._require(_CONNECTED)
        if not destination or type(destination) is not str:
            raise _bad_destination("SEND", destination)
        if (
            (type(headers) is dict or headers is None)
            and type(body) is bytes
            and len(body) <= self._max_body
            and transaction is None
        ):
            # The common case: the encoder takes the caller's dict as it is (it names
            # none of the headers stompy sets, nor content-type or content-length: see
            # encode_send), and there is no transaction to check, nor a receipt id of
            # the caller's. Else (None) the general way below writes it or says why not.
            given = headers if headers is not None else _NO_HEADERS
            if receipt is False:
                data = encode_send(destination, content_type, given, body, self.version)
                if data is not None:
                    self._out.append(data)
                    reply_to = given.get("reply-to")
                    if (
                        reply_to is not None
                        and reply_to.startswith(_TEMP_QUEUE_PREFIX)
                        and reply_to not in self._temp_queues  # (a request's: noted, mostly)
                    ):
                        self._note_temp_queue(reply_to)
                    return None
            elif receipt is True:
                mark = self._next_id
                self._next_id = mark + 1  # _new_id, written out: a round trip's
                rid = f"r-{mark + 1}"
                if rid in self._receipts:
                    rid = self._new_id("r-", self._receipts)
                data = encode_send(destination, content_type, given, body, self.version, rid)
                if data is not None:
                    self._out.append(data)
                    self._receipts[rid] = "SEND"
                    reply_to = given.get("reply-to")
                    if reply_to is not None and reply_to.startswith(_TEMP_QUEUE_PREFIX):
                        self._note_temp_queue(reply_to)
                    return rid
                self._next_id = mark  # the general way takes the id again
        if transaction is not None:
            self._check_transaction(transaction)
        user: list[tuple[str, str]] = []
        more: dict[str, str] | None = None  # the caller's dict, when taken as it is
        names: Mapping[str, str]  # for lookups at C speed
        if (
            type(headers) is dict
            # No header stompy writes itself (the encoder writes the true content-length),
            # nor one in another case (Destination), which would be sent beside it.
            and _SEND_WRITTEN.isdisjoint(headers)
            and (plain_send_names(headers) or _spelled_otherwise(headers) is None)
        ):
            # Checked at C speed (the encoder checks the types) and given to the
            # encoder as it is.
            more = names = headers
        else:
            user = self._user_headers(headers, SEND_RESERVED, "SEND", lengths=True)
            names = dict(reversed(user))  # the first entry of a name wins, as on the wire
        mark = self._next_id
        items = [("destination", destination)]
        if isinstance(body, str):
            try:
                body = body.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise LocalProtocolError(f"the body is not valid text: {exc.reason}") from None
            if content_type is None and "content-type" not in names:
                content_type = _TEXT_TYPE
            else:
                label = content_type if content_type is not None else names["content-type"]
                if isinstance(label, str):
                    mislabelled = _not_utf8_label(label)
                    if mislabelled is not None:
                        raise mislabelled
        elif type(body) is not bytes:
            body = _body_bytes(body)  # before any id is taken
        if len(body) > self._max_body:
            raise self._too_large(len(body))
        if "content-length" in names:
            # The caller's: taken if it says the body's length (written once, by the
            # encoder), refused if not (stompy wrote the true one in its place).
            for key, value in user:
                if key == "content-length":
                    _check_length(value, len(body))
            user = [(k, v) for k, v in user if k != "content-length"]
        if content_type is not None:
            if not isinstance(content_type, str):
                raise wrong_type("content_type", "a str or None", content_type)
            if "content-type" in names:
                if names["content-type"] != content_type:
                    raise _two_content_types()
                pairs = user if more is None else more.items()
                user = [(k, v) for k, v in pairs if k != "content-type"]
                more = None
            elif names and (other := _content_type_in_another_case(names)) is not None:
                raise other
            items.append(("content-type", content_type))
        if transaction is not None:
            items.append(("transaction", transaction))
        receipt_id = self._receipt(receipt, "SEND") if receipt is not False else None
        if receipt_id is not None:
            items.append(("receipt", receipt_id))
        if user:
            items += user
        self._emit("SEND", items, mark, receipt_id, body, more)
        reply_to = names.get("reply-to")
        if reply_to is not None and reply_to.startswith(_TEMP_QUEUE_PREFIX):
            self._note_temp_queue(reply_to)
        return receipt_id

    def _too_large(self, size: int) -> MessageTooLarge:
        """The error for a body of ``size`` bytes, over the broker's announced limit."""
        limit = self._max_body
        return MessageTooLarge(
            f"a body of {size} bytes is over the broker's limit of {limit} bytes (its "
            f"CONNECTED frame said {MAX_BODY_HEADER}:{limit}); nothing was sent, the "
            f"connection is still usable. The limit is set by {MAX_BODY_OPTION}",
            limit=limit,
            size=size,
            option=MAX_BODY_OPTION,
        )

    def _note_temp_queue(self, reply_to: str) -> None:
        """Remember a ``reply-to:/temp-queue/...`` as an implicit subscription."""
        if reply_to.startswith(_TEMP_QUEUE_PREFIX) and reply_to not in self._temp_queues:
            self._temp_queues[reply_to] = None
            if len(self._temp_queues) > _TEMP_QUEUES_KEPT:
                del self._temp_queues[next(iter(self._temp_queues))]

    def subscribe(
        self,
        destination: object,  # a str, checked here (as send()'s)
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: HeaderInput = None,
        receipt: bool | str = False,
    ) -> str:
        """Queue a SUBSCRIBE frame and return the subscription id (generated if not given)."""
        self._require(_CONNECTED)
        if not destination or type(destination) is not str:
            raise _bad_destination("SUBSCRIBE", destination)
        if ack not in ACK_MODES:
            raise LocalProtocolError(f"ack mode must be one of {ACK_MODES}, got {ack!r}")
        if ack == "client-individual" and self.version == V10:
            raise LocalProtocolError("ack mode 'client-individual' needs STOMP 1.1 or later")
        if id is not None:
            if not id:
                raise LocalProtocolError("a subscription id must not be empty")
            if id in self._subscriptions:
                raise LocalProtocolError(f"subscription id {id!r} is already in use")
        user = self._user_headers(headers, _RESERVED_SUBSCRIBE, "SUBSCRIBE")
        mark = self._next_id
        receipt_id = self._receipt(receipt, "SUBSCRIBE")
        if id is None:
            id = self._new_id("", self._subscriptions.keys() | self._closed_subscriptions.keys())
        items = [("destination", destination), ("id", id), ("ack", ack)]
        if receipt_id is not None:
            items.append(("receipt", receipt_id))
        items.extend(user)
        self._emit("SUBSCRIBE", items, mark, receipt_id)
        self._subscriptions[id] = SubscriptionInfo(id, destination, ack)
        self._closed_subscriptions.pop(id, None)
        return id

    def unsubscribe(self, id: str, *, receipt: bool | str = False) -> str | None:
        """Queue an UNSUBSCRIBE frame; return the receipt id asked for, if any."""
        self._require(_CONNECTED)
        if id not in self._subscriptions:
            raise LocalProtocolError(f"no open subscription with id {id!r}")
        mark = self._next_id
        # The destination too, which every version allows (1.0 takes either header):
        # CoilMQ refuses an UNSUBSCRIBE without it, stompserver (1.0) ignores one.
        items = [("id", id), ("destination", self._subscriptions[id].destination)]
        receipt_id = self._receipt(receipt, "UNSUBSCRIBE")
        if receipt_id is not None:
            items.append(("receipt", receipt_id))
        self._emit("UNSUBSCRIBE", items, mark, receipt_id)
        # MESSAGE frames already on the wire for it are not a protocol error.
        closed = self._closed_subscriptions
        closed[id] = self._subscriptions.pop(id)
        if len(closed) > _CLOSED_SUBSCRIPTIONS_KEPT:
            del closed[next(iter(closed))]
        return receipt_id

    def ack(
        self,
        message: MessageReceived,
        *,
        transaction: str | None = None,
        receipt: bool | str = False,
    ) -> str | None:
        """Queue the ACK frame the negotiated version needs for ``message``."""
        return self._acknowledge("ACK", message, transaction, receipt)

    def nack(
        self,
        message: MessageReceived,
        *,
        transaction: str | None = None,
        receipt: bool | str = False,
    ) -> str | None:
        """Queue the NACK frame for ``message``; STOMP 1.0 has no NACK."""
        if self.state is _CONNECTED and self.version == V10:
            raise LocalProtocolError("NACK does not exist in STOMP 1.0")
        return self._acknowledge("NACK", message, transaction, receipt)

    def _acknowledge(
        self, command: str, message: MessageReceived, transaction: str | None, receipt: bool | str
    ) -> str | None:
        self._require(_CONNECTED)
        info = self._subscriptions.get(message.subscription)
        if info is None:
            raise LocalProtocolError(
                f"cannot {command} a message of subscription {message.subscription!r}: "
                "it is not open on this connection"
            )
        if info.ack == "auto":
            raise LocalProtocolError(
                f"cannot {command} a message of subscription {info.id!r}: its ack mode is "
                "'auto', so the broker took it as acknowledged when it sent it (subscribe "
                "with ack='client-individual' to acknowledge messages yourself)"
            )
        self._check_transaction(transaction)
        # The frame's headers rather than the event's properties: compiled, those of a
        # subclass (a client's message) are looked up as a Python attribute each.
        frame = message.frame
        message_id = frame.get("message-id") or ""
        items: list[tuple[str, str]]
        if self.version == V12:
            # "The ACK frame MUST include an id header matching the ack header of the
            # MESSAGE being acknowledged."
            ack_id = frame.get("ack") or ""
            if ack_id:
                items = [("id", ack_id)]
            else:
                # A server that gave none answers 1.1's way: CoilMQ, the one known, reads
                # message-id and takes id for the subscription (docs/brokers.md).
                ack_id = message_id
                sub = message.subscription
                items = [("id", sub), ("message-id", message_id), ("subscription", sub)]
        elif self.version == V11:
            ack_id = message_id
            items = [("message-id", message_id), ("subscription", message.subscription)]
        else:
            ack_id = message_id
            items = [("message-id", message_id)]
        if not ack_id:
            raise LocalProtocolError(
                f"cannot {command} a message without an ack or message-id header"
            )
        mark = self._next_id
        if transaction is not None:
            items.append(("transaction", transaction))
        receipt_id = self._receipt(receipt, command)
        if receipt_id is not None:
            items.append(("receipt", receipt_id))
        self._emit(command, items, mark, receipt_id)
        return receipt_id

    def begin(self, transaction: str | None = None, *, receipt: bool | str = False) -> str:
        """Queue BEGIN and return the transaction id (generated if not given)."""
        self._require(_CONNECTED)
        if transaction is not None:
            if not transaction:
                raise LocalProtocolError("a transaction id must not be empty")
            if transaction in self._transactions:
                raise LocalProtocolError(f"transaction {transaction!r} is already open")
        mark = self._next_id
        receipt_id = self._receipt(receipt, "BEGIN")
        if transaction is None:
            transaction = self._new_id("tx-", self._transactions)
        self._transaction_frame("BEGIN", transaction, receipt_id, mark)
        self._transactions.add(transaction)
        return transaction

    def commit(self, transaction: str, *, receipt: bool | str = False) -> str | None:
        """Queue COMMIT of an open transaction."""
        return self._finish_transaction("COMMIT", transaction, receipt)

    def abort(self, transaction: str, *, receipt: bool | str = False) -> str | None:
        """Queue ABORT of an open transaction."""
        return self._finish_transaction("ABORT", transaction, receipt)

    def _finish_transaction(
        self, command: str, transaction: str, receipt: bool | str
    ) -> str | None:
        self._require(_CONNECTED)
        if transaction not in self._transactions:
            raise LocalProtocolError(f"transaction {transaction!r} is not open")
        mark = self._next_id
        receipt_id = self._receipt(receipt, command)
        self._transaction_frame(command, transaction, receipt_id, mark)
        self._transactions.discard(transaction)
        return receipt_id

    def _transaction_frame(
        self, command: str, transaction: str, receipt_id: str | None, mark: int
    ) -> None:
        items = [("transaction", transaction)]
        if receipt_id is not None:
            items.append(("receipt", receipt_id))
        self._emit(command, items, mark, receipt_id)

    def disconnect(self, *, receipt: bool | str = True) -> str | None:
        """Queue DISCONNECT; with a receipt (the default) the state closes when it arrives.

        "Clients MUST NOT send any more frames after the DISCONNECT frame is sent."
        Open transactions are aborted by the server and forgotten here.
        """
        self._require(_CONNECTED)
        mark = self._next_id
        receipt_id = self._receipt(receipt, "DISCONNECT")
        items = [("receipt", receipt_id)] if receipt_id is not None else []
        self._emit("DISCONNECT", items, mark, receipt_id)
        self._transactions.clear()
        if receipt_id is None:
            self._close()
        else:
            self._disconnect_receipt = receipt_id
            self.state = _DISCONNECTING
        return receipt_id

    def close(self) -> None:
        """Forget the connection without a DISCONNECT (the transport is gone).

        Nothing is reported after it, not even an EOF that follows an ERROR.
        """
        self._close()
        self._error_seen = False

    # -- incoming ----------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float | None = None) -> None:
        """Buffer bytes from the peer; ``now`` is when they arrived (any byte is life).

        A ``bytearray`` or ``memoryview`` is copied (the caller may reuse it), in the
        compiled core as in plain Python."""
        if self.state is _CLOSED or self._eof:
            return  # after an ERROR, our close or the EOF, what follows is noise
        if now is not None and type(now) is not float:  # once a read, not a frame
            refuse_time("now", now)
        if type(data) is not bytes:
            check_type("data", data, (bytes, bytearray, memoryview), "bytes")
            data = bytes(data)
        if data:
            self.exhausted = False
            self._parser.feed(data)
            if now is not None and self._heartbeat is not None:
                self._heartbeat.received(now, only_heartbeats(data))

    def receive_eof(self) -> None:
        """The peer closed the transport.

        :meth:`next_event` reports it as :class:`ConnectionClosed` once the frames
        that arrived before it are out (a RECEIPT or an ERROR is often the last thing
        a server sends). Nothing is reported after our own close, a DISCONNECT
        receipt, a dead peer or a protocol error: the transport knows already.
        """
        self._eof = True
        self.exhausted = False

    def next_event(self) -> Event | None:
        """Return the next event, or ``None`` until more data arrives.

        Raises :class:`RemoteProtocolError` when the peer broke the protocol; the state is
        then CLOSED.
        """
        if self._events:
            return self._events.pop(0)
        if self.state is _CLOSED:
            if self._eof and self._error_seen:
                # "the server MUST close the connection right after sending the ERROR".
                self._error_seen = False
                return ConnectionClosed(expected=True)
            return None
        # Frames are parsed in IDLE too: a peer that talks first is still bounded by
        # the limits (and anything it can send there is a protocol error or ERROR).
        parser = self._parser
        try:
            frame = parser.next_frame()
            while frame is not None:
                # The parser says whether a frame may follow (and the end is reported
                # after the frames): the reader's next call is spared when none can.
                self.exhausted = parser.drained and not self._eof
                command = frame.command
                if command == "MESSAGE":  # the ones that matter for speed, called here
                    return self._handle_message(frame)
                event = (
                    self._handle_receipt(frame)
                    if command == "RECEIPT"
                    else self._handle_frame(frame)
                )
                if event is not None:
                    return event
                frame = parser.next_frame()  # a frame to ignore: the next one
        except ProtocolError:
            self._close()
            raise
        if not self._eof:
            return None
        expected = self.state is _DISCONNECTING
        self._close()
        return ConnectionClosed(expected=expected)

    def _handle_frame(self, frame: Frame) -> Event | None:
        """The event for a frame other than MESSAGE; None for one that is ignored."""
        command = frame.command  # not MESSAGE: next_event() takes those (and RECEIPT)
        if command == "RECEIPT":
            return self._handle_receipt(frame)
        if command == "ERROR":
            message = frame.get("message")
            if message is None:
                message = frame.body[:200].decode("utf-8", "replace").strip() or "(no message)"
            receipt_id = frame.get("receipt-id")
            if receipt_id is not None:
                # The ERROR answers the frame that asked for this receipt.
                self._receipts.pop(receipt_id, None)
            self._close()
            self._error_seen = True
            return Error(message, receipt_id, frame)
        if command == "CONNECTED":
            return self._handle_connected(frame)
        raise RemoteProtocolError(f"the server sent a {command} frame, which only clients send")

    def _handle_connected(self, frame: Frame) -> Connected:
        if self.state is not _CONNECTING:
            raise RemoteProtocolError(f"unexpected CONNECTED frame in state {self.state.name}")
        # "If the accept-version header is missing, it means that the client only
        # supports version 1.0": such servers answer without a version header too.
        version = frame.get("version", V10) or V10
        if version not in self.versions:
            raise RemoteProtocolError(
                f"the server chose STOMP {version}, "
                f"which we did not offer ({','.join(self.versions)})"
            )
        theirs = parse_heartbeat(frame.get("heart-beat"))
        self.version = version
        self._parser.version = version
        self.server = frame.get("server")
        self.session = frame.get("session")
        announced = frame.get(MAX_BODY_HEADER)
        if (
            announced is not None
            and announced.isascii()
            and announced.isdigit()
            and len(announced) < 19
        ):
            self.max_body = self._max_body = int(announced)
        self.negotiated_heartbeats = negotiate(self.heartbeats, theirs)
        self.state = _CONNECTED
        return Connected(version, self.server, self.session, self.negotiated_heartbeats, frame)

    def _handle_message(self, frame: Frame) -> MessageReceived:
        state = self.state
        if state is not _CONNECTED and state is not _DISCONNECTING:
            raise RemoteProtocolError(f"MESSAGE frame in state {state.name}")
        # "MESSAGE frames MUST also include the message-id header" (1.1, 1.2; 1.0 says
        # it will): one without it takes the slow path, which accepts it where no ACK
        # needs it and refuses it, as the peer's fault, where one would.
        block = received_block(frame)
        sub_id: str | None
        if block:
            # Searched as Frame.get() searches a received block, for the two names every
            # MESSAGE is routed by (no version escapes them), here rather than in a
            # function: a call per name would cost a consumer more than the search.
            if "\nmessage-id:" not in block:
                return self._without_message_id(frame)
            at = block.find("\nsubscription:")
            if at < 0:
                sub_id = None
            else:
                at += 14
                end = block.find("\n", at)
                sub_id = block[at:end] if end >= 0 else block[at:]
                if "\\" in sub_id:
                    escaping = received_escaping(frame)
                    if escaping != V10:
                        sub_id = unescape(sub_id, escaping, strict=False)
        else:
            if "message-id" not in frame:  # (not get(): the value would be unescaped)
                return self._without_message_id(frame)
            sub_id = frame.get("subscription")
        if sub_id is None:
            if self.version != V10:
                raise RemoteProtocolError("MESSAGE frame without the subscription header")
            return self._route_v10(frame)
        info = self._subscriptions.get(sub_id)
        if info is None:
            return self._route_unknown(frame, sub_id)
        cls = self._message_class
        if cls is MessageReceived:  # compiled, made natively rather than by calling a type
            return MessageReceived(frame, sub_id, info.ack)
        return cls(frame, sub_id, info.ack)

    def _route_unknown(self, frame: Frame, sub_id: str) -> MessageReceived:
        """Route a MESSAGE for ``sub_id``, which is no open subscription."""
        if sub_id in self._closed_subscriptions:
            # In flight when we unsubscribed: delivered, though nobody waits for it.
            return self._message_class(frame, sub_id, "auto")
        if sub_id in self._temp_queues:
            # A reply through a temp queue we named in reply-to (RabbitMQ).
            return self._message_class(frame, sub_id, "auto")
        raise RemoteProtocolError(f"MESSAGE for subscription {sub_id!r}, which we never made")

    def _without_message_id(self, frame: Frame) -> MessageReceived:
        """Route a MESSAGE that lacks the ``message-id`` header.

        "MESSAGE frames MUST also include the message-id header" (1.1, 1.2), but some
        brokers send none (stompserver on live queues, stomp-broker-js always). Where
        nothing will name the message, an ``auto`` subscription's, it is harmless: the
        message is delivered and the broker's fault said once per connection at
        WARNING. Where an ACK must name it (client acks) it is refused, as the peer's
        fault: acknowledging it later could not work.
        """
        sub_id = frame.get("subscription")
        event: MessageReceived
        if sub_id is None:
            if self.version != V10:
                raise RemoteProtocolError("MESSAGE frame without the subscription header")
            event = self._route_v10(frame)
        else:
            info = self._subscriptions.get(sub_id)
            if info is None:
                event = self._route_unknown(frame, sub_id)
            else:
                event = self._message_class(frame, sub_id, info.ack)
        ack = event.ack_mode
        if ack != "auto":
            raise RemoteProtocolError(
                f"{_NO_MESSAGE_ID}, on subscription {event.subscription!r} with "
                f"ack={ack!r}: an ACK could not name it (with ack='auto' it is accepted)"
            )
        if not self._warned_no_message_id:
            self._warned_no_message_id = True
            log.warning(
                "the broker sent a MESSAGE without the message-id header STOMP requires "
                "(destination %s); delivered, since subscription %s needs no ACK (said "
                "once per connection)",
                shown(frame.get("destination") or ""),
                shown(event.subscription),
            )
        return event

    def _route_v10(self, frame: Frame) -> MessageReceived:
        """Route a MESSAGE without a ``subscription`` header, which 1.0 allows.

        By destination: the first open subscription to it (subscribed first; when
        several match, which one is ambiguous: said once per connection at WARNING);
        else one just closed (a message in flight, delivered as ``auto``); else the
        only open subscription (a wildcard, or a destination the server rewrote).
        """
        destination = frame.get("destination")
        first: SubscriptionInfo | None = None
        for info in self._subscriptions.values():
            if info.destination == destination:
                if first is None:
                    first = info
                    if self._warned_ambiguous:
                        break  # said already: no need to look for a second one
                else:
                    self._warned_ambiguous = True
                    log.warning(
                        "a STOMP 1.0 MESSAGE for %s has no subscription header and "
                        "subscriptions %s and %s (at least) are to that destination: it "
                        "goes to the first made, %s (said once per connection; give each "
                        "subscription its own destination, or use STOMP 1.1 or later)",
                        shown(destination or ""),
                        shown(first.id),
                        shown(info.id),
                        shown(first.id),
                    )
                    break
        if first is not None:
            return self._message_class(frame, first.id, first.ack)
        for info in reversed(self._closed_subscriptions.values()):
            if info.destination == destination:
                return self._message_class(frame, info.id, "auto")
        if len(self._subscriptions) == 1:
            info = next(iter(self._subscriptions.values()))
            return self._message_class(frame, info.id, info.ack)
        raise RemoteProtocolError(
            f"MESSAGE for {destination!r} without a subscription header matches none of "
            f"{len(self._subscriptions)} subscriptions"
        )

    def _handle_receipt(self, frame: Frame) -> Receipt | None:
        state = self.state
        if state is not _CONNECTED and state is not _DISCONNECTING:
            raise RemoteProtocolError(f"RECEIPT frame in state {state.name}")
        receipt_id: str | None
        block = received_block(frame)
        if block:
            # Frame.get()'s search of a received block, as _handle_message's (the name
            # is escaped by no version).
            at = block.find("\nreceipt-id:")
            if at < 0:
                receipt_id = None
            else:
                at += 12
                end = block.find("\n", at)
                receipt_id = block[at:end] if end >= 0 else block[at:]
                if "\\" in receipt_id:
                    escaping = received_escaping(frame)
                    if escaping != V10:
                        receipt_id = unescape(receipt_id, escaping, strict=False)
        else:
            receipt_id = frame.get("receipt-id")
        if receipt_id is None:
            raise RemoteProtocolError("RECEIPT frame without a receipt-id header")
        if self._receipts.pop(receipt_id, None) is None:
            # A RECEIPT answers a frame that asked for it; one that answers nothing
            # harms nothing, and some servers send them (CoilMQ: a transacted SEND's
            # receipt again at COMMIT). Liberal in what is accepted: it is dropped.
            log.info(
                "ignoring a RECEIPT for %s, which no frame asked for (or which came already)",
                shown(receipt_id),
            )
            return None
        if receipt_id == self._disconnect_receipt:
            self._close()
        return Receipt(receipt_id, frame)

    # -- timers ------------------------------------------------------------------------

    def start_heartbeats(self, now: float) -> None:
        """Start the heart-beat clocks; call it when :class:`Connected` is handled.

        It is separate from the CONNECTED frame because the protocol has no clock.
        """
        if type(now) is not float:
            refuse_time("now", now)
        out_ms, in_ms = self.negotiated_heartbeats
        if out_ms or in_ms:
            self._heartbeat = Heartbeat(out_ms, in_ms, self.heartbeat_tolerance, now)

    def note_alive(self, now: float) -> None:
        """Count the peer as alive at ``now`` without handing over its bytes.

        For a transport that stopped reading on purpose (backpressure from a slow
        consumer) but can see that bytes are waiting: a paused reader must not be
        mistaken for a silent peer.
        """
        if type(now) is not float:
            refuse_time("now", now)
        if self._heartbeat is not None:
            self._heartbeat.received(now)

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called (``None``: never)."""
        if self._heartbeat is None or self.state in (_CLOSED, _IDLE):
            return None
        return self._heartbeat.deadline()

    def handle_timer(self, now: float) -> None:
        """Queue a heart-beat EOL if one is due; report a dead peer.

        A dead peer (nothing received for the incoming interval times the tolerance)
        yields a :class:`HeartbeatTimedOut` event and closes the state.
        """
        if type(now) is not float:  # once a turn of the transport's loop, not a frame
            refuse_time("now", now)
        beat = self._heartbeat
        if beat is None or self.state in (_CLOSED, _IDLE):
            return
        if beat.peer_dead(now):
            self._close()
            self._events.append(HeartbeatTimedOut(beat.silence(now)))
            self.exhausted = False
            return
        if beat.beat_due(now):
            if not self._out:
                self._out.append(b"\n")
            # Count the beat as sent now, so the deadline moves even if the transport
            # drains later; data_to_send(now) records the real time again.
            beat.sent(now)

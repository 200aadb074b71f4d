"""The broker's side of one client connection, without I/O: the STOMP protocol of
the server role (CONNECT, the frames' checks, receipts, ERROR, heart-beats), what is
per client (subscriptions by id, unacknowledged deliveries, transactions) and the
output to write. What the connections share goes through the
:class:`~stompy.testing._core.store.MessageStore`'s methods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, get_args

from stompy._checks import check_type, refuse_time
from stompy._core.encoder import encode
from stompy._core.events import AckMode
from stompy._core.frames import (
    V10,
    V11,
    V12,
    Frame,
    Headers,
    received_block,
    received_escaping,
)
from stompy._core.heartbeat import (
    Heartbeat,
    format_heartbeat,
    negotiate,
    only_heartbeats,
    parse_heartbeat,
)
from stompy._core.parser import FrameParser
from stompy._core.protocol import MAX_BODY_HEADER
from stompy.errors import FrameTooLarge, ProtocolError
from stompy.testing._core.destinations import MESSAGE_OVERHEAD, StoredMessage, Subscription
from stompy.testing._core.records import (
    AWAITING,
    CLOSED,
    CLOSING,
    CONNECTED,
    FINISHED,
    PRIVATE_PREFIXES,
    READING,
    TEMP_QUEUE_PREFIX,
    ConnectionInfo,
    Reject,
    SubscriberInfo,
    logger,
)

if TYPE_CHECKING:
    from stompy.testing._core.store import MessageStore

__all__ = ("ClientConnection",)

_ACK_MODES: Final[tuple[AckMode, ...]] = get_args(AckMode)
#: Headers of a SEND frame that the broker sets itself on the MESSAGE frame; the rest
#: are user headers and "MUST be passed through in the MESSAGE frame" (1.2, SEND):
#: what a SEND tells the broker, and what the broker adds to each delivery.
_SEND_CONTROL: Final = ("destination", "transaction", "receipt", "content-length")
_DELIVERY_HEADERS: Final = ("message-id", "subscription", "ack", "redelivered")
_BROKER_HEADERS: Final = frozenset(_SEND_CONTROL + _DELIVERY_HEADERS)
#: How a SEND's header block starts when its client writes the destination first.
_SEND_DESTINATION: Final = "SEND\ndestination:"
#: A header line that the broker reads rather than passes through.
_CONTROL_LINE: Final = re.compile(f"\n(?:{'|'.join(sorted(_BROKER_HEADERS))}):")
#: The header line the broker rewrites when it names a temporary queue.
_REPLY_TO_LINE: Final = "\nreply-to:"
_TEMP_REPLY_TO_LINE: Final = _REPLY_TO_LINE + TEMP_QUEUE_PREFIX


def _too_many_subscriptions(limit: int, what: str) -> str:
    return (
        f"too many subscriptions for {what}: this connection has {limit}, the broker's "
        f"max_subscriptions limit (raise it with serve(max_subscriptions=...) or stompy "
        "broker --max-subscriptions)"
    )


#: What an ACK or NACK held in an open transaction counts against ``max_stored_bytes``
#: (more than its objects take, as a message's overhead is).
_SETTLE_SIZE: Final = MESSAGE_OVERHEAD
#: A MESSAGE whose body is at least this long is queued as its head, its body and its
#: NUL, the body the stored message's own: each subscriber's unsent output shares the
#: one body rather than holding a copy (ten subscribers that never read, four 30 MB
#: topic messages: 941 MB when copied). Shorter bodies are joined, one write a frame.
SHARED_BODY: Final = 16384


@dataclass(frozen=True, slots=True)
class _TxSettle:
    command: str  # "ACK" or "NACK"
    subscription: Subscription
    ack_id: str


def _sends(ops: list[StoredMessage | _TxSettle]) -> list[StoredMessage]:
    """The SENDs among a transaction's frames."""
    return [op for op in ops if isinstance(op, StoredMessage)]


def _held(ops: list[StoredMessage | _TxSettle]) -> int:
    """What a transaction's frames count against ``max_stored_bytes``."""
    return sum(op.size if isinstance(op, StoredMessage) else _SETTLE_SIZE for op in ops)


class ClientConnection:
    """The broker's side of one client connection, without I/O; made by
    :meth:`MessageStore.open_connection`. See the package's docstring."""

    def __init__(self, store: MessageStore, connection_id: str, now: float, peer: str) -> None:
        self.store = store
        self._config = store.config
        #: The CONNECTED frame's ``session`` header.
        self.id = connection_id
        self.peer = peer
        self.state = AWAITING
        #: The negotiated version (1.0 until CONNECTED).
        self.version: str = V10
        self.login: str | None = None
        self.host: str | None = None
        #: Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms.
        self.heartbeats: tuple[int, int] = (0, 0)
        #: While paused the connection takes no deliveries and keeps no heart-beat time;
        #: the transport stops reading and writing.
        self.paused = False
        #: Why the connection is closing or closed.
        self.close_reason: str | None = None
        self._parser = FrameParser(V10, store.config.limits)
        self._out: list[bytes] = []
        #: Indexes in ``_out`` of the pieces that continue the frame of the piece
        #: before them (a shared body and its NUL; see :data:`SHARED_BODY`).
        self._continued: list[int] = []
        #: Bytes queued for the client and not yet taken by :meth:`data_to_send` (read
        #: by the transport a few times a frame: an attribute, not a property).
        self.buffered = 0
        self._opened = now
        self._heartbeat: Heartbeat | None = None
        self._subscriptions: dict[str, Subscription] = {}
        self._ack_index: dict[str, tuple[Subscription, StoredMessage]] = {}
        self._transactions: dict[str, list[StoredMessage | _TxSettle]] = {}
        #: The temporary queues named in its SENDs' reply-to: their implicit
        #: subscriptions, by id (the ``/temp-queue/NAME`` itself).
        self._temp_queues: dict[str, Subscription] = {}
        self._released = False
        #: Bytes of an unfinished frame the parser holds, counted in the store.
        self._partial = 0
        #: When the first byte of the unfinished frame arrived (None: no such frame).
        self._frame_started: float | None = None

    # -- views -------------------------------------------------------------------------

    @property
    def wants_data(self) -> bool:
        """Whether the transport should read more from the client now.

        False while paused, and while the output is over ``write_buffer`` in an open
        state: a client that sends without reading its receipts gets backpressure.
        After CLOSING the transport reads on (and the connection discards) until EOF.
        """
        if self.paused or self.state is CLOSED:
            return False
        return self.state is CLOSING or self.buffered < self._config.write_buffer

    @property
    def finished(self) -> bool:
        """The connection should close once :meth:`data_to_send` returned everything."""
        return self.state in FINISHED

    def info(self) -> ConnectionInfo:
        subs = tuple(
            SubscriberInfo(
                sub.id,
                sub.destination.name,
                sub.ack,
                sub.prefetch,
                len(sub.by_message_id),
                len(sub.backlog),
            )
            for sub in self._subscriptions.values()
        )
        return ConnectionInfo(
            session=self.id,
            peer=self.peer,
            state=self.state.value,
            version=self.version,
            login=self.login,
            host=self.host,
            heartbeats=self.heartbeats,
            paused=self.paused,
            buffered=self.buffered,
            subscriptions=subs,
            transactions=tuple(self._transactions),
        )

    # -- output ------------------------------------------------------------------------

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self.buffered += len(data)
        self.store.ready[self.id] = self  # output_queued(), without its call (a frame each)

    def _queue_shared(self, head: bytes, body: bytes) -> None:
        """Queue a frame as ``head``, ``body`` (not copied) and its NUL."""
        out = self._out
        start = len(out) + 1
        out.append(head)
        out.append(body)
        out.append(b"\x00")
        self._continued.append(start)
        self._continued.append(start + 1)
        self.buffered += len(head) + len(body) + 1
        self.store.output_queued(self)

    def _encode(self, frame: Frame) -> bytes:
        try:
            return encode(frame, self.version)
        except ValueError:
            # STOMP 1.0 has no escaping: a header from a 1.1+ sender holding a line
            # break cannot be written as is. Flatten it rather than inject a header.
            cleaned = tuple(
                (
                    key.replace(":", "_").replace("\n", "_").replace("\r", "_"),
                    value.replace("\n", " ").replace("\r", " "),
                )
                for key, value in frame.headers
            )
            return encode(Frame(frame.command, cleaned, frame.body), self.version)

    def _send_frame(self, command: str, headers: Headers, body: bytes = b"") -> None:
        self._queue(self._encode(Frame(command, headers, body)))

    def _send_receipt(self, receipt: str) -> None:
        """Queue the RECEIPT for a frame's ``receipt`` header."""
        if "\\" in receipt or ":" in receipt or "\n" in receipt or "\r" in receipt:
            self._send_frame("RECEIPT", (("receipt-id", receipt),))
        else:
            # What encode() writes for it in every version, without building a Frame:
            # an id with nothing to escape, as ids are (a client may send one each SEND).
            self._queue(b"RECEIPT\nreceipt-id:%b\n\n\x00" % receipt.encode())

    def data_to_send(self, now: float | None = None) -> bytes:
        """Return (and forget) the bytes to write; ``now`` is when they are written.

        Taking the output makes room, so waiting messages are delivered right after:
        the next call may return more.
        """
        pieces = self.buffers_to_send(now)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def frames_to_send(self, now: float | None = None) -> list[bytes]:
        """:meth:`data_to_send`, one item per frame (or heart-beat EOL, or
        :meth:`send_raw` chunk) as queued: over WebSocket each is a message."""
        continued = self._continued
        pieces = self.buffers_to_send(now)
        if not continued:
            return pieces
        frames: list[bytes] = []
        parts: list[bytes] = []
        following = set(continued)
        for index, piece in enumerate(pieces):
            if index not in following and parts:
                frames.append(b"".join(parts))
                parts = []
            parts.append(piece)
        frames.append(b"".join(parts))
        return frames

    def buffers_to_send(self, now: float | None = None) -> list[bytes]:
        """:meth:`data_to_send` as the buffers queued, to write in order (with
        ``writelines``, or a slice at a time): the body of a long MESSAGE is a buffer
        of its own, shared with the stored message and the other subscribers'
        output (see :data:`SHARED_BODY`)."""
        if now is not None and type(now) is not float:  # once a write, not a frame
            refuse_time("now", now)
        self.store.ready.pop(self.id, None)  # taken: nothing to wake the transport for
        if not self._out:
            return []
        pieces = self._out
        # Deliveries wait for this connection only while its output is over
        # write_buffer (see takes_deliveries): taking it makes room for them then.
        was_full = self.buffered >= self._config.write_buffer
        self._out = []
        if self._continued:
            self._continued = []
        self.buffered = 0
        if now is not None and self._heartbeat is not None:
            self._heartbeat.sent(now)
        if was_full and self.state is CONNECTED:
            for sub in list(self._subscriptions.values()):
                self.store.deliver_waiting(sub.destination)
        return pieces

    def send_raw(self, data: bytes) -> None:
        """Queue bytes exactly as given, to test how clients take broken input."""
        # bytes() would take a count, and a str with an encoding: not what is meant.
        check_type("data", data, (bytes, bytearray, memoryview), "bytes")
        if self.state is not CLOSED:
            self._queue(bytes(data))

    def takes_deliveries(self) -> bool:
        """Whether a message can be delivered now: connected, not paused, and the
        output under ``write_buffer`` (each subscription adds its own prefetch)."""
        return (
            self.state is CONNECTED
            and not self.paused
            and self.buffered < self._config.write_buffer
        )

    def deliver(self, sub: Subscription, message: StoredMessage) -> None:
        """Queue ``message`` as a MESSAGE frame of ``sub`` (the store chose it)."""
        ack = ""  # the MESSAGE's ack header, if it has one
        if sub.ack != "auto":
            ack_id = self.store.next_ack_id()
            sub.by_message_id[message.message_id] = ack_id
            self._ack_index[ack_id] = (sub, message)
            # "If the message is received from a subscription that requires explicit
            # acknowledgment ... the MESSAGE frame MUST also contain an ack header" (1.2)
            if self.version == V12:
                ack = ack_id
        lines = message.lines
        splice = sub.splice
        if (
            lines is not None
            and splice is not None
            and (message.escaping == self.version or "\\" not in lines)
            and message.destination == sub.destination.name
        ):
            # The bytes encode() writes for these headers, spliced: the user header
            # lines as received need no escaping again in the connection's version (the
            # escaping they arrived in, or none at all); ack ids are digits.
            text = f"{splice[0]}{message.message_id}{splice[1]}"
            if ack:
                text += "\nack:" + ack
            if message.redeliveries:
                text += "\nredelivered:true"
            body = message.body
            if body:
                head = f"{text}{lines}\ncontent-length:{len(body)}\n\n"
                if len(body) >= SHARED_BODY:
                    self._queue_shared(head.encode(), body)
                else:
                    self._queue(b"".join((head.encode(), body, b"\x00")))
            else:
                self._queue(f"{text}{lines}\n\n\x00".encode())
            return
        headers = [
            ("destination", message.destination),
            ("message-id", message.message_id),
            ("subscription", sub.id),
        ]
        if ack:
            headers.append(("ack", ack))
        if message.redeliveries:
            headers.append(("redelivered", "true"))
        headers.extend(message.headers)
        self._send_frame("MESSAGE", tuple(headers), message.body)

    def _error(self, reject: Reject, frame: Frame | None) -> None:
        """Queue an ERROR for ``reject`` and start closing, as the spec requires."""
        message = " ".join(reject.message.split())
        headers: list[tuple[str, str]] = [("message", message), *reject.headers]
        receipt = frame.get("receipt") if frame is not None else None
        if receipt is not None:
            # "if the frame included a receipt header, the ERROR frame SHOULD set the
            # receipt-id header to match the value of the receipt header" (1.2, ERROR)
            headers.append(("receipt-id", receipt))
        headers.append(("content-type", "text/plain"))
        body = reject.body or message
        if frame is not None and not reject.body:
            shown = "\n".join(
                f"{k}:{'********' if k == 'passcode' else v}" for k, v in frame.headers
            )
            body += (
                f"\n\nThe frame:\n-----\n{frame.command}\n{shown}\n"
                f"({len(frame.body)} body bytes)\n-----\n"
            )
        self._send_frame("ERROR", tuple(headers), body.encode("utf-8"))
        self.store.count_error_sent()
        self._closing(message)

    def _closing(self, reason: str) -> None:
        self.state = CLOSING
        if self.close_reason is None:
            self.close_reason = reason
        self._release()

    # -- input -------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Parse and act on bytes from the client; ``now`` is when they arrived.

        Never raises for bad input: it queues an ERROR and moves to CLOSING.
        """
        if type(now) is not float:  # once a read, not a frame
            refuse_time("now", now)
        if not data:
            check_type("data", data, (bytes, bytearray, memoryview), "bytes")
            return
        if self.state not in READING:
            return  # after ERROR or DISCONNECT, what follows is discarded
        if self._heartbeat is not None:
            self._heartbeat.received(now, only_heartbeats(data))
        parser = self._parser
        parser.feed(data)
        while self.state in READING:
            try:
                frame = parser.next_frame()
            except FrameTooLarge as exc:
                self._error(Reject("frame too large", body=str(exc)), None)
                return
            except ProtocolError as exc:
                self._error(Reject("malformed frame received", body=str(exc)), None)
                return
            if frame is None:
                break
            self._frame_started = None
            try:
                if frame.command == "SEND" and self.state is CONNECTED:
                    self._on_send(frame)  # by far the most frequent: without _handle's call
                else:
                    self._handle(frame, now)
            except Reject as reject:
                self._error(reject, frame)
        if self.state in READING and (parser.buffered or self._partial):
            self._hold_partial(now)  # (neither: nothing to count, no frame started)

    def _hold_partial(self, now: float) -> None:
        """Count what the parser holds of an unfinished frame in the store, and since
        when; ERROR when all connections together hold more than ``max_partial_bytes``."""
        held = self._parser.buffered
        if not held:
            self._frame_started = None
        elif self._frame_started is None:
            self._frame_started = now
        if held == self._partial:
            return
        total = self.store.hold_partial(held - self._partial)
        self._partial = held
        limit = self._config.max_partial_bytes
        if held and total > limit:
            logger.warning(
                "%s: unfinished frames hold %d bytes, over max_partial_bytes (%d): "
                "this connection, which holds %d of them, is closed",
                self.id,
                total,
                limit,
                held,
            )
            self._error(
                Reject(
                    f"unfinished frames of all connections hold {total} bytes, the broker's "
                    f"max_partial_bytes limit is {limit} (this connection holds {held} of "
                    "them; raise it with serve(max_partial_bytes=...) or stompy broker "
                    "--max-partial-bytes)"
                ),
                None,
            )

    def receive_eof(self) -> None:
        """The client closed the connection."""
        self.close("connection closed by the client")

    def close(self, reason: str = "closed") -> None:
        """The transport is gone: release everything and leave the store.

        Unacknowledged queue messages go back to their queues (``redelivered:true``),
        open transactions are aborted. Output not yet taken can still be drained.
        """
        check_type("reason", reason, str, "a str")
        if self.state is CLOSED:
            return
        if self.close_reason is None:
            self.close_reason = reason
        self.state = CLOSED
        self._release()
        self.store.forget(self)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._heartbeat = None
        # What follows is discarded: the parser's buffer goes now.
        self.store.hold_partial(-self._partial)
        self._partial = 0
        self._frame_started = None
        self._parser = FrameParser(self.version, self._config.limits)
        # "Any started transactions which have not been committed will be implicitly
        # aborted if the client sends a DISCONNECT frame or if the TCP connection
        # fails for any reason." (1.2, BEGIN)
        for ops in self._transactions.values():
            self.store.unhold(_held(ops))
        self._transactions.clear()
        for sub in list(self._subscriptions.values()):
            self._remove_subscription(sub)

    # -- frames ------------------------------------------------------------------------

    def _handle(self, frame: Frame, now: float) -> None:
        """Act on a frame other than a SEND while connected (receive_data's own)."""
        command = frame.command
        if command in ("CONNECT", "STOMP"):
            self._on_connect(frame, now)
            return
        if self.state is AWAITING:
            raise Reject(f"expected a CONNECT or STOMP frame, got {command}")
        if command == "SUBSCRIBE":
            self._on_subscribe(frame)
        elif command == "UNSUBSCRIBE":
            self._on_unsubscribe(frame)
        elif command in ("ACK", "NACK"):
            self._on_settle(frame)
        elif command == "BEGIN":
            self._on_begin(frame)
        elif command in ("COMMIT", "ABORT"):
            self._on_finish(frame)
        elif command == "DISCONNECT":
            self._receipt(frame)
            self._closing("DISCONNECT")
        else:
            raise Reject(f"{command} is a server frame; a client must not send it")

    def _required(self, frame: Frame, name: str) -> str:
        value = frame.get(name)
        if not value:
            what = "an empty" if value == "" else "no"
            raise Reject(
                f"{frame.command} frame with {what} {name} header, which is required "
                f"(STOMP {self.version})"
            )
        return value

    def _receipt(self, frame: Frame) -> None:
        # "A RECEIPT frame is sent from the server to the client once a server has
        # successfully processed a client frame that requests a receipt." (1.2)
        receipt = frame.get("receipt")
        if receipt is not None:
            self._send_receipt(receipt)

    def _on_connect(self, frame: Frame, now: float) -> None:
        if self.state is not AWAITING:
            raise Reject(f"{frame.command} frame on a connection that is already connected")
        config = self._config
        accept = frame.get("accept-version")
        # "If the accept-version header is missing, it means that the client only
        # supports version 1.0 of the protocol." (1.2, Protocol Negotiation)
        offered = {V10} if accept is None else {v.strip() for v in accept.split(",")}
        common = [v for v in config.versions if v in offered]
        if not common:
            supported = " ".join(config.versions)
            # "the server MUST respond with an ERROR frame similar to the following
            # and then close the connection: version:1.2,2.1 ..."
            raise Reject(
                f"no common STOMP version: the client accepts {accept or '1.0'}, "
                f"this server speaks {supported}",
                body=f"Supported protocol versions are {supported}",
                headers=(("version", ",".join(config.versions)),),
            )
        version = common[-1]
        host = frame.get("host")
        if config.virtual_hosts is not None and host not in config.virtual_hosts:
            # STOMP 1.1 and 1.2 make host REQUIRED, yet common clients (stomp.py in
            # 1.1 mode) leave it out; like RabbitMQ and ActiveMQ the broker lets that
            # pass unless it checks virtual hosts.
            what = "no host header" if host is None else f"unknown virtual host {host!r}"
            raise Reject(f"{frame.command} frame with {what}")
        try:
            theirs = parse_heartbeat(frame.get("heart-beat"))
        except ProtocolError as exc:
            raise Reject(str(exc)) from None
        login = frame.get("login")
        if config.users is not None and (
            login is None
            or login not in config.users
            or config.users[login] != frame.get("passcode")
        ):
            raise Reject("authentication failed: unknown login or wrong passcode")
        self.version = version
        self._parser.version = version
        self.login = login
        self.host = host
        self.state = CONNECTED
        headers = [("version", version), ("session", self.id), ("server", config.server_name)]
        # Not in any STOMP version: a client that knows it refuses a larger SEND itself,
        # rather than lose the connection to the ERROR (stompy's clients do).
        headers.append((MAX_BODY_HEADER, str(config.limits.max_body)))
        if version != V10:  # STOMP 1.0 has no heart-beating
            headers.append(("heart-beat", format_heartbeat(config.heartbeats)))
            out_ms, in_ms = negotiate(config.heartbeats, theirs)
            self.heartbeats = (out_ms, in_ms)
            if out_ms or in_ms:
                self._heartbeat = Heartbeat(out_ms, in_ms, config.heartbeat_tolerance, now)
        self._send_frame("CONNECTED", tuple(headers))

    def _transaction(self, frame: Frame) -> list[StoredMessage | _TxSettle] | None:
        return self._open_transaction(frame.command, frame.get("transaction"))

    def _open_transaction(
        self, command: str, name: str | None
    ) -> list[StoredMessage | _TxSettle] | None:
        """The frames so far of transaction ``name`` (``None``: outside any)."""
        if name is None:
            return None
        ops = self._transactions.get(name)
        if ops is None:
            raise Reject(f"{command} in transaction {name!r}, which is not open")
        if len(ops) >= self._config.max_transaction_frames:
            raise Reject(
                f"transaction {name!r} holds {len(ops)} frames, the broker's "
                f"max_transaction_frames limit is {self._config.max_transaction_frames} "
                "(raise it with serve(max_transaction_frames=...))"
            )
        return ops

    def _on_send(self, frame: Frame) -> None:
        # The busiest path of a broker. A SEND as clients mostly write one (destination
        # first, then no header the broker reads but content-length and receipt) is
        # taken from its header block as it arrived, without making the pairs: the
        # block was checked by the parser (one colon a line, LF only, defined escapes),
        # and its lines but those three are its user headers, kept as they are.
        block = received_block(frame)
        if block.startswith(_SEND_DESTINATION):
            end = block.find("\n", 17)
            if end > 17:
                target = block[17:end]
                lines = block[end:]
                at = lines.find("\ncontent-length:")
                if at >= 0:
                    after = lines.find("\n", at + 16)
                    lines = lines[:at] if after < 0 else lines[:at] + lines[after:]
                receipt = None
                at = lines.find("\nreceipt:")
                if at >= 0:
                    after = lines.find("\n", at + 9)
                    if after < 0:
                        receipt, lines = lines[at + 9 :], lines[:at]
                    else:
                        receipt, lines = lines[at + 9 : after], lines[:at] + lines[after:]
                if (
                    "\\" not in target
                    and (receipt is None or "\\" not in receipt)
                    and _CONTROL_LINE.search(lines) is None  # a second receipt too
                ):
                    kept: str | None = lines
                    if _TEMP_REPLY_TO_LINE in lines:
                        kept = self._reply_to_line(lines)  # None: the general path's
                    if kept is not None:
                        escaping = received_escaping(frame)
                        self.store.accept(StoredMessage(target, None, frame.body, kept, escaping))
                        if receipt is not None:
                            self._send_receipt(receipt)
                        return
        # Any other SEND: the header entries are read in one pass.
        destination = transaction = receipt = reply_to = None
        user: list[tuple[str, str]] = []
        for entry in frame.headers:
            name = entry[0]
            if name not in _BROKER_HEADERS:
                user.append(entry)
                if name == "reply-to" and reply_to is None:
                    reply_to = entry[1]
            elif name == "destination":
                destination = entry[1] if destination is None else destination
            elif name == "transaction":
                transaction = entry[1] if transaction is None else transaction
            elif name == "receipt":
                receipt = entry[1] if receipt is None else receipt
        if not destination:
            what = "an empty" if destination == "" else "no"
            raise Reject(
                f"SEND frame with {what} destination header, which is required "
                f"(STOMP {self.version})"
            )
        ops = None if transaction is None else self._open_transaction("SEND", transaction)
        headers = tuple(user)
        if reply_to is not None and reply_to.startswith(TEMP_QUEUE_PREFIX):
            headers = tuple((k, self._temp_queue(v) if k == "reply-to" else v) for k, v in headers)
        message = StoredMessage(destination, headers, frame.body)
        if ops is not None:
            self.store.hold(message.size)  # counted while the transaction holds it
            ops.append(message)
        else:
            self.store.accept(message)
        if receipt is not None:
            self._send_receipt(receipt)

    def _reply_to_line(self, lines: str) -> str | None:
        """The user header ``lines`` of a SEND, its first ``reply-to`` line naming the
        private queue of the temporary queue it names, as the general path rewrites
        the pair (:meth:`_temp_queue`); ``None`` where that path must judge: a name
        holding an escape, or a second ``reply-to`` line after one that names a
        temporary queue."""
        at = lines.find(_REPLY_TO_LINE) + len(_REPLY_TO_LINE)
        if not lines.startswith(TEMP_QUEUE_PREFIX, at):
            return lines  # the first names none: the general path rewrites none either
        end = lines.find("\n", at)
        if end < 0:
            name, rest = lines[at:], ""
        else:
            name, rest = lines[at:end], lines[end:]
        if "\\" in name or _REPLY_TO_LINE in rest:
            return None
        # The private queue's name needs no escape in any version.
        return lines[:at] + self._temp_queue(name) + rest

    def _temp_queue(self, name: str) -> str:
        """The private queue that stands for the temporary queue ``name`` (made at its
        first use on this connection, with its implicit subscription); its name."""
        if not name.startswith(TEMP_QUEUE_PREFIX):
            return name  # a reply-to entry that names no temporary queue stays as it is
        sub = self._temp_queues.get(name)
        if sub is None:
            limit = self._config.max_subscriptions
            if len(self._subscriptions) >= limit:
                raise Reject(_too_many_subscriptions(limit, f"reply-to {name!r}"))
            if name in self._subscriptions:
                raise Reject(f"reply-to {name!r}: a subscription of this connection has that id")
            sub = self.store.open_temp_queue(self, name)
            self._subscriptions[name] = sub
            self._temp_queues[name] = sub
        return sub.destination.name

    def _on_subscribe(self, frame: Frame) -> None:
        config = self._config
        destination = self._required(frame, "destination")
        if destination.startswith(PRIVATE_PREFIXES):
            # As RabbitMQ: a temporary queue is named in a SEND's reply-to, and its
            # replies arrive on the subscription the broker makes then.
            raise Reject(
                f"SUBSCRIBE to {destination!r}: a temporary queue cannot be subscribed to; "
                "name /temp-queue/NAME in a SEND's reply-to header and its replies arrive "
                "on subscription /temp-queue/NAME"
            )
        if self.version == V10 and frame.get("id") is None:
            # STOMP 1.0 makes the id optional; the destination then names it.
            sub_id = destination
        else:
            sub_id = self._required(frame, "id")
        if sub_id in self._subscriptions:
            # "Within the same connection, different subscriptions MUST use different
            # subscription identifiers." (1.2, SUBSCRIBE id Header)
            raise Reject(f"subscription id {sub_id!r} is already in use on this connection")
        ack = frame.get("ack", "auto")
        if ack not in _ACK_MODES:
            raise Reject(f"invalid ack mode {ack!r}: want auto, client or client-individual")
        if len(self._subscriptions) >= config.max_subscriptions:
            raise Reject(_too_many_subscriptions(config.max_subscriptions, repr(sub_id)))
        prefetch = config.prefetch
        requested = frame.get("prefetch-count")
        if requested is not None:
            if not requested.isdigit() or int(requested) < 1:
                raise Reject(f"invalid prefetch-count {requested!r}: want a positive integer")
            prefetch = int(requested)
        mode = _ACK_MODES[_ACK_MODES.index(ack)]
        sub = self.store.subscribe(self, sub_id, destination, mode, prefetch)
        self._subscriptions[sub_id] = sub
        self._receipt(frame)
        self.store.deliver_waiting(sub.destination)

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.get("id")
        if sub_id is None and self.version == V10:
            # 1.0: "It requires either a destination header or an id header"
            destination = self._required(frame, "destination")
            matches = [s for s in self._subscriptions.values() if s.destination.name == destination]
            if not matches:
                raise Reject(f"no subscription to {destination!r} on this connection")
            sub = matches[0]
        else:
            sub_id = self._required(frame, "id")
            found = self._subscriptions.get(sub_id)
            if found is None:
                raise Reject(
                    f"UNSUBSCRIBE of {sub_id!r}, which is no subscription of this connection"
                )
            sub = found
        self._remove_subscription(sub)
        self._receipt(frame)

    def _remove_subscription(self, sub: Subscription) -> None:
        self._subscriptions.pop(sub.id, None)
        if self._temp_queues.get(sub.id) is sub:
            del self._temp_queues[sub.id]
        unacked = [self._ack_index.pop(ack_id)[1] for ack_id in sub.by_message_id.values()]
        sub.by_message_id.clear()
        self.store.unsubscribe(sub, unacked)

    def _find_delivery(self, frame: Frame) -> tuple[Subscription, str]:
        """The subscription and ack id an ACK or NACK frame refers to, per version."""
        command = frame.command
        if self.version == V12:
            # "The ACK frame MUST include an id header matching the ack header of the
            # MESSAGE being acknowledged." (1.2, ACK)
            ack_id = self._required(frame, "id")
            entry = self._ack_index.get(ack_id)
            if entry is None:
                raise Reject(f"{command} of {ack_id!r}, which is no unacknowledged message")
            return entry[0], ack_id
        message_id = self._required(frame, "message-id")
        if self.version == V11:
            sub_id = self._required(frame, "subscription")
            sub = self._subscriptions.get(sub_id)
            if sub is None:
                raise Reject(
                    f"{command} for {sub_id!r}, which is no subscription of this connection"
                )
            candidates = [sub]
        else:
            candidates = list(self._subscriptions.values())
        for sub in candidates:
            found = sub.by_message_id.get(message_id)
            if found is not None:
                return sub, found
        raise Reject(f"{command} of message {message_id!r}, which is not awaiting acknowledgement")

    def _on_settle(self, frame: Frame) -> None:
        if frame.command == "NACK" and self.version == V10:
            raise Reject("NACK does not exist in STOMP 1.0")
        sub, ack_id = self._find_delivery(frame)
        ops = self._transaction(frame)
        if ops is not None:
            # Counted: a client may ACK one message ten thousand times in each of its
            # transactions, and keep them open.
            self.store.hold(_SETTLE_SIZE)
            ops.append(_TxSettle(frame.command, sub, ack_id))
        else:
            self._settle(frame.command, sub, ack_id)
        self._receipt(frame)

    def _settle(self, command: str, sub: Subscription, ack_id: str) -> None:
        """Apply an ACK or NACK (cumulative in ``client`` mode)."""
        entry = self._ack_index.get(ack_id)
        if entry is None or entry[0] is not sub:
            return  # settled meanwhile (e.g. acked outside the transaction)
        if sub.ack == "client":
            # "The ACK frames sent by the client will be treated as a cumulative
            # acknowledgment ... and all messages sent to the subscription before."
            # NACK alike: "to all messages sent before and not yet ACK'ed or NACK'ed".
            ack_ids: list[str] = []
            for pending in sub.by_message_id.values():
                ack_ids.append(pending)
                if pending == ack_id:
                    break
        else:
            ack_ids = [ack_id]
        messages = []
        for pending in ack_ids:
            message = self._ack_index.pop(pending)[1]
            del sub.by_message_id[message.message_id]
            messages.append(message)
        if command == "ACK":
            self.store.acknowledged(sub, messages)
        else:
            self.store.given_back(sub, messages)

    def _on_begin(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        if name in self._transactions:
            # "Within the same connection, different transactions MUST use different
            # transaction identifiers." (1.2, BEGIN)
            raise Reject(f"transaction {name!r} is already open")
        if len(self._transactions) >= self._config.max_transactions:
            raise Reject(
                f"too many open transactions (the limit is {self._config.max_transactions})"
            )
        self._transactions[name] = []
        self._receipt(frame)

    def _on_finish(self, frame: Frame) -> None:
        name = self._required(frame, "transaction")
        ops = self._transactions.pop(name, None)
        if ops is None:
            raise Reject(f"{frame.command} of transaction {name!r}, which is not open")
        self.store.unhold(_held(ops))
        if frame.command == "COMMIT":
            # All or nothing: check room for every SEND before applying any.
            self.store.check_capacity(_sends(ops))
            for op in ops:
                if isinstance(op, StoredMessage):
                    self.store.publish(op)
                else:
                    self._settle(op.command, op.subscription, op.ack_id)
        self._receipt(frame)

    # -- timers and test hooks ---------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called (``None``: never)."""
        if self.state is AWAITING:
            return self._opened + self._config.connect_timeout
        if self.state is not CONNECTED or self.paused:
            return None
        deadline = None if self._heartbeat is None else self._heartbeat.deadline()
        started = self._frame_started
        if started is not None:
            frame_deadline = started + self._config.frame_timeout
            if deadline is None or frame_deadline < deadline:
                deadline = frame_deadline
        return deadline

    def handle_timer(self, now: float) -> None:
        """Queue a heart-beat EOL when one is due; drop a silent or late client, and
        one that started a frame and did not finish it within ``frame_timeout``."""
        if self.state is AWAITING:
            if now >= self._opened + self._config.connect_timeout:
                self._error(
                    Reject(f"no CONNECT frame within {self._config.connect_timeout:g} s"),
                    None,
                )
            return
        if self.state is not CONNECTED or self.paused:
            return
        started = self._frame_started
        if started is not None and now >= started + self._config.frame_timeout:
            timeout = self._config.frame_timeout
            logger.warning(
                "%s: a frame started %.3f s ago is not finished (%d bytes of it arrived), "
                "over frame_timeout (%g s): the connection is closed",
                self.id,
                now - started,
                self._partial,
                timeout,
            )
            self._error(
                Reject(
                    f"frame not finished within {timeout:g} s ({self._partial} bytes of it "
                    f"arrived): the broker's frame_timeout limit (raise it with "
                    "serve(frame_timeout=...) or stompy broker --frame-timeout)"
                ),
                None,
            )
            return
        beat = self._heartbeat
        if beat is None:
            return
        if beat.peer_dead(now):
            self.store.count_heartbeat_timeout()
            self._error(
                Reject(
                    f"heart-beat timeout: nothing received for {beat.silence(now):.3f} s "
                    f"(heart-beats every {self.heartbeats[1]} ms were agreed)"
                ),
                None,
            )
            return
        if beat.beat_due(now):
            # "if the sender has no real STOMP frame to send, it MUST send an EOL"
            if not self._out:
                self._queue(b"\n")
            beat.sent(now)

    def pause(self) -> None:
        """Stop deliveries and heart-beat bookkeeping (the transport stops its I/O)."""
        self.paused = True

    def resume(self, now: float) -> None:
        """Undo :meth:`pause`; the heart-beat clocks restart at ``now``."""
        refuse_time("now", now)
        if not self.paused:
            return
        self.paused = False
        if self._heartbeat is not None:
            self._heartbeat.sent(now)
            self._heartbeat.received(now)
        if self._frame_started is not None:
            self._frame_started = now  # the broker did not read meanwhile
        if self.state is CONNECTED:
            for sub in list(self._subscriptions.values()):
                self.store.deliver_waiting(sub.destination)
        self.store.output_queued(self)

"""Client flavours for the conformance suite, behind one small synchronous interface.

A :class:`Driver` is one connected client. The tests only talk to this interface,
so a new flavour (``stompy.Connection``, ``stompy.AsyncConnection`` on asyncio or
trio) joins the suite by subclassing :class:`Driver` and adding itself to
``FLAVOURS``. The rules every driver follows:

* every call is bounded in time; waiting too long raises :class:`StompTimeout`;
* once the server sent ERROR, the waiting call (or the next call) raises
  :class:`ServerError`; a connection lost otherwise raises :class:`ConnectionLost`
  (:class:`HeartbeatTimeout` when heart-beats stopped), bad bytes from the server
  :class:`ProtocolError`;
* ``receipt=True`` (the default for calls that change broker state) waits for the
  RECEIPT, so a test may rely on the frame having been processed;
* messages are returned as :class:`Received`; ``native`` is whatever the flavour
  needs to ACK or NACK it.
"""

from __future__ import annotations

import abc
import collections
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from stompy import ClientProtocol, Outgoing
from stompy._core.frames import VERSIONS
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    HeartbeatTimeout,
    ServerError,
    StompError,
    StompTimeout,
)
from stompy.events import (
    Connected,
    ConnectionClosed,
    Error,
    HeartbeatTimedOut,
    MessageReceived,
    Receipt,
)

AckMode = Literal["auto", "client", "client-individual"]
DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Target:
    """Where the suite's broker is and how to log in."""

    host: str
    port: int
    login: str | None = None
    passcode: str | None = None
    #: The CONNECT ``host`` header; the network host when not set.
    vhost: str | None = None
    #: True for a real broker named by STOMPY_BROKER_URL (broker-specific tests skip).
    external: bool = False
    #: The same broker's STOMP-over-WebSocket URL, if it has one (``ws://...``).
    ws_url: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        login: str | None = None,
        passcode: str | None = None,
        vhost: str | None = None,
        external: bool = False,
        ws_url: str | None = None,
    ) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("stomp", "tcp") or not parts.hostname:
            raise ValueError(
                f"want a stomp://host:port URL, got {url!r} "
                "(a ws:// URL goes in STOMPY_BROKER_WS_URL, beside the STOMP one)"
            )
        if ws_url is not None and urlsplit(ws_url).scheme not in ("ws", "wss"):
            raise ValueError(f"want a ws:// or wss:// URL, got {ws_url!r}")
        return cls(
            parts.hostname,
            parts.port or 61613,
            login if login is not None else parts.username,
            passcode if passcode is not None else parts.password,
            vhost,
            external,
            ws_url,
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"stomp://{host}:{self.port}"

    @property
    def connect_host(self) -> str:
        return self.vhost if self.vhost is not None else self.host


@dataclass(frozen=True)
class Received:
    """A MESSAGE as every flavour reports it."""

    destination: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    subscription: str
    message_id: str
    #: The ``ack`` header (STOMP 1.2 client-ack subscriptions), else None.
    ack_id: str | None
    #: The flavour's own message object, for ACK and NACK.
    native: object

    def header(self, name: str) -> str | None:
        """The first entry of header ``name``."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


class Driver(abc.ABC):
    """One connected client of some flavour, driven synchronously by the tests."""

    #: The flavour's name, as it appears in test ids.
    flavour: ClassVar[str]
    #: Negotiated version, and the CONNECTED frame's ``session`` / ``server`` headers.
    version: str
    session: str | None
    server: str | None
    #: Negotiated ``(outgoing, incoming)`` heart-beat intervals in ms.
    heartbeats: tuple[int, int]

    @classmethod
    @abc.abstractmethod
    def open(
        cls,
        target: Target,
        *,
        versions: tuple[str, ...] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        login: str | None = None,
        passcode: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Driver:
        """Connect and wait for CONNECTED.

        ``login`` / ``passcode`` default to the target's. Raises :class:`ServerError`
        when the server refuses (ERROR), :class:`ConnectFailed` when it cannot be
        reached.
        """

    @abc.abstractmethod
    def send(
        self,
        destination: str,
        body: bytes | str,
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> None:
        """SEND; a ``str`` body goes as UTF-8 ``text/plain``."""

    def send_many(
        self,
        messages: Sequence[Outgoing],
        *,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> int:
        """SEND each message in order (the clients' ``send_many``); how many were sent.

        With ``receipt`` only the last asks for a RECEIPT: it confirms them all. The
        core has no such call: it sends one by one.
        """
        for index, m in enumerate(messages):
            self.send(
                m.destination,
                m.body,
                headers=m.headers,
                content_type=m.content_type,
                transaction=transaction,
                receipt=receipt and index == len(messages) - 1,
            )
        return len(messages)

    @abc.abstractmethod
    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        receipt: bool = True,
    ) -> str:
        """Subscribe and return the subscription id."""

    @abc.abstractmethod
    def unsubscribe(self, id: str, *, receipt: bool = True) -> None: ...

    @abc.abstractmethod
    def poll(self, timeout: float) -> Received | None:
        """The next message of any subscription, or None when none came in ``timeout``."""

    def receive(self, timeout: float = DEFAULT_TIMEOUT) -> Received:
        """The next message; raises :class:`StompTimeout` when none came in time."""
        message = self.poll(timeout)
        if message is None:
            raise StompTimeout(f"no message within {timeout} s")
        return message

    def receive_many(self, count: int, timeout: float = DEFAULT_TIMEOUT) -> list[Received]:
        """The next ``count`` messages, all within ``timeout``."""
        deadline = time.monotonic() + timeout
        return [self.receive(max(0.0, deadline - time.monotonic())) for _ in range(count)]

    @abc.abstractmethod
    def ack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        """ACK ``message`` with the headers the negotiated version needs."""

    @abc.abstractmethod
    def nack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None: ...

    @abc.abstractmethod
    def begin(self, transaction: str | None = None, *, receipt: bool = True) -> str:
        """Begin a transaction and return its id."""

    @abc.abstractmethod
    def commit(self, transaction: str, *, receipt: bool = True) -> None: ...

    @abc.abstractmethod
    def abort(self, transaction: str, *, receipt: bool = True) -> None: ...

    @abc.abstractmethod
    def idle(self, seconds: float) -> None:
        """Keep the connection serviced (heart-beats) for ``seconds`` without traffic.

        Raises as described in the module docstring if it dies meanwhile.
        """

    @abc.abstractmethod
    def disconnect(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """DISCONNECT with a receipt, wait for it, close the transport."""

    @abc.abstractmethod
    def close(self) -> None:
        """Drop the transport without DISCONNECT. Idempotent; never raises."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """Whether the connection is over (closed here, by DISCONNECT, ERROR or loss)."""


class CoreDriver(Driver):
    """The sans-IO :class:`stompy.ClientProtocol` over a plain blocking socket."""

    flavour = "core"

    def __init__(self, sock: socket.socket, protocol: ClientProtocol) -> None:
        self._sock = sock
        self._protocol = protocol
        self._messages: collections.deque[Received] = collections.deque()
        self._receipts: set[str] = set()
        self._failure: StompError | None = None
        self._connected: Connected | None = None
        self._closed = False
        self._next_receipt = 0
        self.version = protocol.version
        self.session = None
        self.server = None
        self.heartbeats = (0, 0)

    @classmethod
    def open(
        cls,
        target: Target,
        *,
        versions: tuple[str, ...] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        login: str | None = None,
        passcode: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> CoreDriver:
        try:
            sock = socket.create_connection((target.host, target.port), timeout=timeout)
        except OSError as exc:
            raise ConnectFailed(f"cannot reach {target.url}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        protocol = ClientProtocol(versions=versions, heartbeats=heartbeats)
        driver = cls(sock, protocol)
        try:
            protocol.connect(
                target.connect_host,
                login=login if login is not None else target.login,
                passcode=passcode if passcode is not None else target.passcode,
            )
            driver._flush()
            driver._wait(lambda: driver._connected is not None, timeout, "CONNECTED")
        except BaseException:
            driver.close()
            raise
        connected = driver._connected
        assert connected is not None
        driver.version = connected.version
        driver.session = connected.session
        driver.server = connected.server
        driver.heartbeats = connected.heartbeats
        protocol.start_heartbeats(time.monotonic())
        return driver

    @property
    def heartbeats_received(self) -> int:
        """Heart-beat EOLs received (an extra of this flavour, for closer checks)."""
        return self._protocol._parser.heartbeats

    # -- the pump ----------------------------------------------------------------------

    def _flush(self) -> None:
        data = self._protocol.data_to_send(time.monotonic())
        if data:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                self._fail(ConnectionLost(f"send failed: {exc}"))

    def _fail(self, error: StompError) -> None:
        if self._failure is None:
            self._failure = error
        self.close()

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _pump(self, until: float) -> None:
        """Wait for bytes until ``until`` (or the next heart-beat deadline); handle them."""
        now = time.monotonic()
        wake = until
        deadline = self._protocol.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
        self._sock.settimeout(max(0.001, wake - now))
        data: bytes | None
        try:
            data = self._sock.recv(65536)
        except TimeoutError:
            data = None
        except OSError as exc:
            self._fail(ConnectionLost(f"receive failed: {exc}"))
            return
        now = time.monotonic()
        if data:
            self._protocol.receive_data(data, now)
        elif data is not None:
            self._protocol.receive_eof()
        self._protocol.handle_timer(now)
        self._drain_events()
        if not self._closed:
            self._flush()

    def _drain_events(self) -> None:
        while True:
            try:
                event = self._protocol.next_event()
            except StompError as exc:  # the server broke the protocol
                self._fail(exc)
                return
            if event is None:
                return
            if isinstance(event, MessageReceived):
                self._messages.append(
                    Received(
                        event.destination,
                        event.body,
                        event.frame.headers,
                        event.subscription,
                        event.message_id,
                        event.ack_id,
                        event,
                    )
                )
            elif isinstance(event, Receipt):
                self._receipts.add(event.receipt_id)
            elif isinstance(event, Connected):
                self._connected = event
            elif isinstance(event, Error):
                self._fail(ServerError(event.message, event.frame))
            elif isinstance(event, HeartbeatTimedOut):
                self._fail(HeartbeatTimeout(f"no heart-beat for {event.silence:.3f} s"))
            elif isinstance(event, ConnectionClosed):
                if not event.expected:
                    self._fail(ConnectionLost("the server closed the connection"))
                self.close()

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self._check()
            if self._closed:
                raise ConnectionLost(f"connection closed while waiting for {what}")
            if time.monotonic() >= deadline:
                raise StompTimeout(f"no {what} within {timeout} s")
            self._pump(deadline)

    def _finish(self, receipt_id: str | None) -> None:
        self._flush()
        self._check()
        if receipt_id is not None:
            self._wait(lambda: receipt_id in self._receipts, DEFAULT_TIMEOUT, "RECEIPT")
            self._receipts.discard(receipt_id)

    def _receipt_id(self, what: str) -> str:
        self._next_receipt += 1
        return f"{what}-{self._next_receipt}"

    def _intent(self) -> ClientProtocol:
        self._check()
        if self._closed:
            raise ConnectionLost("the connection is closed")
        return self._protocol

    # -- the interface -----------------------------------------------------------------

    def send(
        self,
        destination: str,
        body: bytes | str,
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> None:
        rid = self._intent().send(
            destination,
            body,
            headers=headers,
            content_type=content_type,
            transaction=transaction,
            receipt=receipt,
        )
        self._finish(rid)

    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        receipt: bool = True,
    ) -> str:
        rid = self._receipt_id("subscribe") if receipt else None
        sub_id = self._intent().subscribe(
            destination, ack=ack, id=id, headers=headers, receipt=rid or False
        )
        self._finish(rid)
        return sub_id

    def unsubscribe(self, id: str, *, receipt: bool = True) -> None:
        self._finish(self._intent().unsubscribe(id, receipt=receipt))

    def poll(self, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        while not self._messages:
            self._check()
            if self._closed or time.monotonic() >= deadline:
                return None
            self._pump(deadline)
        return self._messages.popleft()

    @staticmethod
    def _native(message: Received) -> MessageReceived:
        native = message.native
        assert isinstance(native, MessageReceived)
        return native

    def ack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        rid = self._intent().ack(self._native(message), transaction=transaction, receipt=receipt)
        self._finish(rid)

    def nack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        rid = self._intent().nack(self._native(message), transaction=transaction, receipt=receipt)
        self._finish(rid)

    def begin(self, transaction: str | None = None, *, receipt: bool = True) -> str:
        rid = self._receipt_id("begin") if receipt else None
        tx = self._intent().begin(transaction, receipt=rid or False)
        self._finish(rid)
        return tx

    def commit(self, transaction: str, *, receipt: bool = True) -> None:
        self._finish(self._intent().commit(transaction, receipt=receipt))

    def abort(self, transaction: str, *, receipt: bool = True) -> None:
        self._finish(self._intent().abort(transaction, receipt=receipt))

    def idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check()
            if self._closed:
                raise ConnectionLost("the connection closed while idle")
            self._pump(deadline)
        self._check()

    def disconnect(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        rid = self._intent().disconnect(receipt=True)
        self._flush()
        try:
            self._wait(lambda: rid in self._receipts, timeout, "the DISCONNECT receipt")
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._protocol.close()
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed


#: Every client flavour the suite runs, by name. Add the real clients here.
FLAVOURS: dict[str, type[Driver]] = {"core": CoreDriver}

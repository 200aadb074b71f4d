"""Helpers for the interop tests: which brokers to talk to, and two small drivers.

* :class:`RawConn` speaks bytes, for pinning down exactly what a broker puts on the
  wire (the findings in docs/brokers.md);
* :class:`ProtocolSession` runs stompy's sans-IO :class:`ClientProtocol` over a
  blocking socket, which is what a transport does, with every wait bounded;
* :class:`CuttableProxy` relays TCP to a broker and cuts its connections on demand,
  which is how a network failure looks to a client;
* :func:`restart_broker` stops and starts a broker of ``ci/brokers`` with its state
  kept, for the reliability tests.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, unquote, urlsplit

from stompy import VERSIONS, ClientProtocol, Frame, FrameParser
from stompy.events import Event

#: Seconds any single wait may take; brokers on loopback answer in milliseconds.
TIMEOUT = 5.0
#: Where ci/brokers lives (restart.sh, for the reliability tests).
BROKERS_DIR = Path(__file__).resolve().parents[2] / "ci" / "brokers"
#: One line per reliability run, printed in pytest's terminal summary.
RESULTS: list[str] = []

E = TypeVar("E")


@dataclass(frozen=True)
class BrokerTarget:
    """A broker to test against, as the interop session describes it."""

    #: "rabbitmq", "activemq", "coilmq" or another name (from STOMPY_BROKER_NAME).
    name: str
    host: str
    port: int
    login: str
    passcode: str
    #: What to send in the CONNECT ``host`` header.
    vhost: str
    #: The CONNECTED ``server`` header, filled in once the broker answered.
    server: str = field(default="", compare=False)

    @property
    def kind(self) -> str:
        """Which broker this is, by its ``server`` header (the name as fallback)."""
        server = self.server.lower()
        for kind in ("rabbitmq", "activemq", "coilmq"):
            if server.startswith(kind):
                return kind
        return self.name

    def __str__(self) -> str:
        return f"{self.name} at {self.host}:{self.port} (host header {self.vhost!r})"

    @property
    def url(self) -> str:
        """A ``stomp://`` URL for stompy's clients; the path is the vhost, percent-encoded."""
        login = f"{quote(self.login, safe='')}:{quote(self.passcode, safe='')}@"
        return f"stomp://{login}{self.host}:{self.port}/{quote(self.vhost, safe='')}"


def targets_from_env() -> list[BrokerTarget]:
    """The brokers to test: STOMPY_BROKER_URL if set, else the two of ci/brokers."""
    url = os.environ.get("STOMPY_BROKER_URL")
    if url:
        parts = urlsplit(url)
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
        return [
            BrokerTarget(
                name=os.environ.get("STOMPY_BROKER_NAME", "env"),
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 61613,
                login=os.environ.get("STOMPY_BROKER_LOGIN", unquote(parts.username or "guest")),
                passcode=os.environ.get(
                    "STOMPY_BROKER_PASSCODE", unquote(parts.password or "guest")
                ),
                vhost=os.environ.get("STOMPY_BROKER_VHOST", path or "/"),
            )
        ]
    return [
        BrokerTarget(
            "rabbitmq",
            "127.0.0.1",
            int(os.environ.get("STOMPY_RABBITMQ_PORT", "61613")),
            "guest",
            "guest",
            "/",
        ),
        BrokerTarget(
            "activemq",
            "127.0.0.1",
            int(os.environ.get("STOMPY_ACTIVEMQ_PORT", "61614")),
            "guest",
            "guest",
            "/",
        ),
    ]


def probe(target: BrokerTarget) -> tuple[str | None, str]:
    """Send one CONNECT; return (the ``server`` header, "") or (None, why not)."""
    try:
        conn = RawConn(target.host, target.port, timeout=2.0)
    except OSError as exc:
        return None, f"cannot connect: {exc}"
    with conn:
        conn.frame(
            "CONNECT",
            [
                ("accept-version", "1.2"),
                ("host", target.vhost),
                ("login", target.login),
                ("passcode", target.passcode),
            ],
        )
        answer = conn.read_frame(2.0)
        if answer is None:
            return None, "no answer to CONNECT"
        if answer.command != "CONNECTED":
            return None, f"CONNECT answered with {answer.command}: {answer.get('message')}"
        return answer.get("server") or "unknown", ""


class RawConn:
    """A socket that sends hand-written frames and returns what comes back.

    Frames are decoded with stompy's STOMP 1.0 parser, so header values are returned
    exactly as they were on the wire (escapes not decoded); ``raw`` keeps the bytes.
    """

    def __init__(self, host: str, port: int, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.parser = FrameParser("1.0", strict=False)
        self.closed = False

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, command: str, headers: Iterable[tuple[str, str]], body: bytes = b"") -> None:
        """Send a frame with headers written verbatim (no escaping)."""
        head = "".join(f"{name}:{value}\n" for name, value in headers)
        self.send(f"{command}\n{head}\n".encode() + body + b"\0")

    def read_frame(self, timeout: float = TIMEOUT) -> Frame | None:
        """The next frame, or None when none came within ``timeout`` or the peer closed."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.parser.next_frame()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                return None
            self.parser.feed(data)

    def wait_closed(self, timeout: float) -> bool:
        """True when the peer closes within ``timeout`` (frames on the way are dropped)."""
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.read_frame(deadline - time.monotonic())
        return self.closed

    def connect(
        self, host: str | None, login: str, passcode: str, *extra: tuple[str, str]
    ) -> Frame | None:
        headers = [("accept-version", "1.2")]
        if host is not None:
            headers.append(("host", host))
        headers += [("login", login), ("passcode", passcode), *extra]
        self.frame("CONNECT", headers)
        return self.read_frame()


def need(frame: Frame | None, command: str) -> Frame:
    """``frame``, which must have arrived and be a ``command`` frame."""
    assert frame is not None, f"expected {command}, got nothing"
    assert frame.command == command, f"expected {command}, got {frame!r}"
    return frame


def raw_connect(target: BrokerTarget, *extra: tuple[str, str]) -> RawConn:
    """A RawConn on which CONNECT (STOMP 1.2) has been answered with CONNECTED."""
    conn = RawConn(target.host, target.port)
    need(conn.connect(target.vhost, target.login, target.passcode, *extra), "CONNECTED")
    return conn


class ProtocolSession:
    """stompy's ClientProtocol over a blocking socket: what a transport would do."""

    def __init__(
        self,
        target: BrokerTarget,
        *,
        versions: Iterable[str] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        heartbeat_tolerance: float = 2.0,
    ) -> None:
        self.target = target
        self.proto = ClientProtocol(
            versions=versions, heartbeats=heartbeats, heartbeat_tolerance=heartbeat_tolerance
        )
        self.sock = socket.create_connection((target.host, target.port), timeout=TIMEOUT)
        self.eof = False

    def __enter__(self) -> ProtocolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def flush(self) -> None:
        data = self.proto.data_to_send(time.monotonic())
        if data:
            self.sock.sendall(data)

    def next_event(self, timeout: float = TIMEOUT) -> Event:
        """The next event; raise TimeoutError if none comes in time."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.proto.next_event()
            if event is not None:
                return event
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"no event from {self.target} within {timeout} s")
            if self.eof:
                raise ConnectionError(f"{self.target} closed and no event is left")
            timer = self.proto.next_deadline()
            wait = deadline - now if timer is None else min(deadline, timer) - now
            self.sock.settimeout(max(wait, 0.001))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                self.proto.handle_timer(time.monotonic())
                self.flush()
                continue
            except ConnectionResetError:
                data = b""
            if data:
                self.proto.receive_data(data, time.monotonic())
            else:
                self.eof = True
                self.proto.receive_eof()

    def expect(self, kind: type[E], timeout: float = TIMEOUT) -> E:
        event = self.next_event(timeout)
        assert isinstance(event, kind), f"expected {kind.__name__}, got {event!r}"
        return event

    def events(self, count: int, timeout: float = TIMEOUT) -> list[Event]:
        """``count`` events in arrival order (brokers differ in how they interleave)."""
        return [self.next_event(timeout) for _ in range(count)]

    def connect(self, host: str | None = None) -> Event:
        """Send CONNECT (the target's vhost unless ``host`` is given); return the answer."""
        self.proto.connect(
            self.target.vhost if host is None else host,
            login=self.target.login,
            passcode=self.target.passcode,
        )
        self.flush()
        event = self.next_event()
        self.proto.start_heartbeats(time.monotonic())
        return event


class CuttableProxy:
    """A TCP relay on 127.0.0.1 to ``host:port`` whose connections can be cut.

    :meth:`cut` closes every relayed connection at once, on both sides: the client
    sees the connection end, the broker sees its client go, as in a network failure.
    The relay keeps listening, so a client that reconnects goes through it again.
    Every thread polls a flag once a second, and :meth:`close` joins them (bounded).
    """

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []  # live ones
        self._sockets: list[socket.socket] = []  # all, closed by close()
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        #: How many client connections it accepted, and how many it cut.
        self.accepted = 0
        self.cut_count = 0
        self._start(self._accept)

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=TIMEOUT)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.accepted += 1
                self._pairs.append((client, upstream))
                self._sockets += (client, upstream)
            self._start(self._relay, client, upstream)
            self._start(self._relay, upstream, client)

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(1.0)
        dst.settimeout(TIMEOUT)
        try:
            while not self._closed.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Cut every connection relayed so far; return how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.cut_count += len(pairs)
        for client, upstream in pairs:
            self._shut(client, upstream)
        return len(pairs)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.cut()
        for thread in self._threads:
            thread.join(timeout=2 * TIMEOUT)
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


def restart_broker(
    kind: str, timeout: float = 180.0, *, kill: bool = False
) -> subprocess.CompletedProcess[str]:
    """Stop the broker of ``kind`` and start it again, its queues and messages kept.

    Runs ``ci/brokers/restart.sh`` (SIGTERM, wait, start, wait for CONNECTED); with
    ``kill``, the broker is killed with SIGKILL instead of stopped (RabbitMQ only).
    """
    return subprocess.run(
        ["bash", str(BROKERS_DIR / "restart.sh"), kind],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "STOMPY_BROKER_KILL": "1" if kill else "0"},
    )

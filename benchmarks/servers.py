"""Bare STOMP servers that cost the client under test as little as possible.

* :class:`BlastServer` answers CONNECT with CONNECTED and every SUBSCRIBE with ``count``
  pre-encoded MESSAGE frames (ten headers, 100-byte body, carrying the subscription's
  id), written as fast as the socket takes them; then it goes quiet. A SUBSCRIBE
  with an ``x-count`` header gets that many instead (at most ``count``).
* :class:`SinkServer` answers CONNECT and swallows whatever follows, counting NUL
  octets (one per frame: the benchmark bodies hold none) and answering each
  ``receipt`` header with a RECEIPT that also reports the count in ``x-frames``, so a
  publisher can wait for the end and check nothing was lost.

Neither parses frames beyond what that needs; they are not brokers. Both run on
127.0.0.1, port 0, in threads (:meth:`start` / :meth:`stop` or ``with``) or, so that
they do not compete with the client for the GIL, in a child process
(:class:`ServerProcess`, which runs ``python -m benchmarks.servers KIND``).
Every wait is bounded: sockets have timeouts, threads are joined with a timeout, and a
server lives at most ``max_seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Final

from benchmarks import workload

_NUL: Final = b"\x00"
_RECEIPT_RE: Final = re.compile(rb"\nreceipt:([^\r\n]*)")
# A DISCONNECT at the start of the data or right after a frame's NUL (EOLs allowed).
_DISCONNECT_RE: Final = re.compile(rb"(?:\A|\x00)[\r\n]*DISCONNECT\r?\n")
_MAX_CONTROL_FRAME: Final = 1024 * 1024
_SEND_SLICE: Final = 1024 * 1024


def _frame(command: str, headers: dict[str, str]) -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in headers.items())]
    return ("\n".join(lines) + "\n\n").encode() + _NUL


def _headers(raw: bytes) -> tuple[str, dict[str, str]]:
    """Command and headers (first entry wins) of a body-less control frame."""
    text = raw.decode("utf-8", "replace").lstrip("\r\n")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            break
        name, _, value = line.partition(":")
        headers.setdefault(name, value)
    return lines[0], headers


def _connected(headers: dict[str, str], server: str) -> bytes:
    offered = headers.get("accept-version", "1.0").split(",")
    version = max((v for v in offered if v in ("1.0", "1.1", "1.2")), default="1.0")
    # The server never sends heart-beats, and asks for them only every minute: a
    # spec-following client then sends none during a run. Not "0,0": stompman sends a
    # heart-beat every "want to receive" interval regardless, and would spin on 0.
    return _frame("CONNECTED", {"version": version, "heart-beat": "0,60000", "server": server})


class _Connection:
    """Reads the body-less frames (CONNECT, SUBSCRIBE, DISCONNECT...) a client sends."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next_frame(self) -> tuple[str, dict[str, str]] | None:
        """The next frame, or ``None`` at EOF. Raises ``TimeoutError`` when idle too long."""
        while True:
            nul = self.buffer.find(_NUL)
            if nul >= 0:
                raw, self.buffer = self.buffer[:nul], self.buffer[nul + 1 :]
                if raw.strip(b"\r\n"):
                    return _headers(raw)
                continue  # heart-beats
            if len(self.buffer) > _MAX_CONTROL_FRAME:
                raise ConnectionError("control frame too large")
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data


class _Server:
    """A listening socket with an accept thread and one thread per connection."""

    name = "bare"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        io_timeout: float = 120.0,
        max_connections: int = 256,
        max_seconds: float = 3600.0,
    ) -> None:
        self._listener = socket.create_server((host, port))
        self._listener.settimeout(0.2)
        self.io_timeout = io_timeout
        self.max_connections = max_connections
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"{self.name}-accept", daemon=True
        )
        #: Connections handled so far, and failures (handler exceptions) seen.
        self.connections = 0
        self.errors: list[str] = []

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> _Server:
        self._accept_thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._accept_thread.join(timeout)
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._listener.close()

    def __enter__(self) -> _Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            if self.connections >= self.max_connections:
                break
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            sock.settimeout(self.io_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._run, args=(sock,), daemon=True)
            with self._lock:
                self.connections += 1
                self._sockets.append(sock)
                self._threads.append(thread)
            thread.start()

    def _run(self, sock: socket.socket) -> None:
        try:
            with sock:
                self.handle(sock)
        except (OSError, ConnectionError) as exc:
            if not self._stop.is_set():
                self.errors.append(repr(exc))
        finally:
            with self._lock:
                if sock in self._sockets:
                    self._sockets.remove(sock)

    def handle(self, sock: socket.socket) -> None:
        raise NotImplementedError


class BlastServer(_Server):
    """On SUBSCRIBE, write ``count`` MESSAGE frames for that subscription, then idle."""

    name = "blast"

    def __init__(
        self, count: int, *, port: int = 0, io_timeout: float = 120.0, max_seconds: float = 3600.0
    ) -> None:
        super().__init__(port=port, io_timeout=io_timeout, max_seconds=max_seconds)
        self.count = count
        # The cut-up stream is built once; each SUBSCRIBE only joins it with its id.
        self._pieces = workload.message_pieces(count)
        self._default = workload.SUBSCRIPTION.encode().join(self._pieces)
        self._cache: dict[int, list[bytes]] = {}
        self._cache_lock = threading.Lock()
        #: Frames written so far over all connections.
        self.sent = 0

    def stream(self, subscription: str, count: int | None = None) -> bytes:
        """The MESSAGE frames for one SUBSCRIBE: ``count`` of them (default: all)."""
        pieces = self._pieces
        if count is not None and count != self.count:
            with self._cache_lock:
                pieces = self._cache.get(count) or workload.message_pieces(count)
                self._cache[count] = pieces
        elif subscription == workload.SUBSCRIPTION:
            return self._default
        escaped = subscription.replace("\\", "\\\\").replace(":", "\\c").replace("\n", "\\n")
        return escaped.encode().join(pieces)

    def handle(self, sock: socket.socket) -> None:
        conn = _Connection(sock)
        first = conn.next_frame()
        if first is None or first[0] not in ("CONNECT", "STOMP"):
            return
        sock.sendall(_connected(first[1], "stompy-bench-blast"))
        while not self._stop.is_set():
            frame = conn.next_frame()
            if frame is None:
                return
            command, headers = frame
            receipt = headers.get("receipt")
            if receipt is not None:
                sock.sendall(_frame("RECEIPT", {"receipt-id": receipt}))
            if command == "DISCONNECT":
                return
            if command == "SUBSCRIBE":
                wanted = headers.get("x-count", "")
                count = min(int(wanted), self.count) if wanted.isdigit() else self.count
                data = memoryview(self.stream(headers.get("id", ""), count))
                for start in range(0, len(data), _SEND_SLICE):
                    if self._stop.is_set():
                        return
                    sock.sendall(data[start : start + _SEND_SLICE])
                self.sent += count


class SinkServer(_Server):
    """Swallow frames, count NULs, answer receipts; answer CONNECT with CONNECTED."""

    name = "sink"

    #: Largest partial frame kept between reads; beyond it the connection is dropped.
    max_pending = 16 * 1024 * 1024

    def __init__(
        self, *, port: int = 0, io_timeout: float = 120.0, max_seconds: float = 3600.0
    ) -> None:
        super().__init__(port=port, io_timeout=io_timeout, max_seconds=max_seconds)
        #: NUL octets (frames) seen over all connections, CONNECT and DISCONNECT included.
        self.frames = 0

    def handle(self, sock: socket.socket) -> None:
        conn = _Connection(sock)
        first = conn.next_frame()
        if first is None or first[0] not in ("CONNECT", "STOMP"):
            return
        sock.sendall(_connected(first[1], "stompy-bench-sink"))
        frames = 1  # the CONNECT
        pending = conn.buffer  # whatever followed the CONNECT in the same read
        chunk = b""
        while not self._stop.is_set():
            data = pending + chunk if pending else chunk
            frames += chunk.count(_NUL)
            last = data.rfind(_NUL)
            if last >= 0:
                done, pending = data[: last + 1], data[last + 1 :]
                if done.find(b"\nreceipt:") >= 0:
                    for match in _RECEIPT_RE.finditer(done):
                        receipt = match.group(1).decode("utf-8", "replace")
                        reply = {"receipt-id": receipt, "x-frames": str(frames)}
                        sock.sendall(_frame("RECEIPT", reply))
                if b"DISCONNECT" in done and _DISCONNECT_RE.search(done):
                    break
            else:
                pending = data
            if len(pending) > self.max_pending:
                raise ConnectionError("frame larger than the sink accepts")
            chunk = sock.recv(256 * 1024)
            if not chunk:
                break
        self.frames += frames


# -- running in a child process ---------------------------------------------------------

_ROOT: Final = Path(__file__).resolve().parent.parent


class ServerProcess:
    """A blast or sink server in a child process, so it does not share our GIL.

    ``with ServerProcess("blast", count=n) as server: server.address``. Leaving the
    block closes the child's stdin, which makes it exit; if it has not within
    ``timeout`` seconds it is killed.
    """

    def __init__(
        self, kind: str, *, count: int = 0, timeout: float = 30.0, max_seconds: float = 3600.0
    ) -> None:
        if kind not in ("blast", "sink"):
            raise ValueError(f"unknown server kind {kind!r}")
        self.kind = kind
        self.count = count
        self.timeout = timeout
        self.max_seconds = max_seconds
        self.address = ("127.0.0.1", 0)
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServerProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "benchmarks.servers", self.kind]
        command += ["--count", str(self.count), "--max-seconds", str(self.max_seconds)]
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_ROOT, env=env
        )
        self._proc = proc
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        line = proc.stdout.readline().decode() if ready else ""
        if not line.startswith("LISTENING "):
            self._close()
            raise RuntimeError(f"{self.kind} server did not start: {line!r}")
        host, port = line.split()[1:3]
        self.address = (host, int(port))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()

    def _close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(self.timeout)
        if proc.stdout is not None:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    """Run one server until stdin closes (or ``--max-seconds``); print its address."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.servers")
    parser.add_argument("kind", choices=("blast", "sink"))
    parser.add_argument("--count", type=int, default=100_000, help="MESSAGEs per SUBSCRIBE")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args(argv)
    server: _Server
    if args.kind == "blast":
        server = BlastServer(args.count, port=args.port, max_seconds=args.max_seconds)
    else:
        server = SinkServer(port=args.port, max_seconds=args.max_seconds)
    with server:
        host, port = server.address
        print(f"LISTENING {host} {port}", flush=True)
        # Wait for the parent to close our stdin (or die), bounded by max_seconds.
        ready, _, _ = select.select([sys.stdin], [], [], args.max_seconds)
        if ready:
            sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())

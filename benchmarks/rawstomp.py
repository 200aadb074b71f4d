"""STOMP over a bare socket: ceilings, filling and draining queues, a request responder.

None of this is a client: it writes pre-encoded frames and counts NUL octets (the
benchmark bodies hold none), which is as little work as STOMP allows. That makes it

* the **ceiling** a client is measured against: :func:`raw_publish` writes ``count``
  pre-encoded SEND frames and waits for the receipt of the last; :func:`raw_consume`
  subscribes and counts MESSAGE frames (acking each with ``client-individual``);
* the **fixture** of the broker benchmarks: it fills a queue before a consumer is timed
  and drains it after a publisher was, checking that every message arrived;
* the **responder** of the request/reply benchmark (``python -m benchmarks.rawstomp
  respond ...``, in a child process): it answers each request at once, so that the
  latency measured is the requester's library plus the broker, not a second client.

Every wait is bounded by a :class:`Deadline`. :class:`Child` runs a helper process
(this responder, ``stompy broker``) and always reaps it.
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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from benchmarks import workload

_NUL: Final = b"\x00"
_ACK_RE: Final = re.compile(rb"\nack:([^\n]*)")
_ROOT: Final = Path(__file__).resolve().parent.parent
#: The receipt id the last SEND of a raw publish asks for.
END_RECEIPT: Final = "bench-end"


class Deadline:
    """A point in time that every blocking call of one run must finish by."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("benchmark run exceeded its time limit")
        return left


@dataclass(frozen=True)
class Server:
    """A STOMP server to connect to, and how to introduce oneself to it."""

    name: str
    host: str
    port: int
    login: str | None = "guest"
    passcode: str | None = "guest"
    #: The CONNECT ``host`` header (RabbitMQ's virtual host); ``None``: the address.
    vhost: str | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def url(self) -> str:
        return f"stomp://{self.host}:{self.port}"


def escape(text: str) -> bytes:
    """A STOMP 1.2 header value."""
    return (
        text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")
    ).encode()


def _unescape(raw: bytes) -> str:
    text = raw.decode()
    if "\\" not in text:
        return text
    return re.sub(r"\\(.)", lambda m: {"c": ":", "n": "\n", "r": "\r"}.get(m[1], m[1]), text)


def frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [command.encode(), *(escape(k) + b":" + escape(v) for k, v in headers.items())]
    return b"\n".join(lines) + b"\n\n" + body + _NUL


def parse(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """Command, headers (first entry wins) and body of one frame without its NUL."""
    head, _, body = raw.lstrip(b"\r\n").partition(b"\n\n")
    lines = head.split(b"\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.rstrip(b"\r").partition(b":")
        headers.setdefault(_unescape(name), _unescape(value))
    return lines[0].rstrip(b"\r").decode(), headers, body


class RawConnection:
    """A connected, logged-in STOMP 1.2 socket without heart-beats."""

    def __init__(self, server: Server, deadline: Deadline) -> None:
        self.deadline = deadline
        self.sock = socket.create_connection(server.address, timeout=deadline.left())
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: Bytes received and not yet consumed by the caller.
        self.buffer = b""
        headers = {"accept-version": "1.2", "host": server.vhost or server.host}
        if server.login is not None:
            headers["login"] = server.login
        if server.passcode is not None:
            headers["passcode"] = server.passcode
        headers["heart-beat"] = "0,0"
        try:
            self.sendall(frame("CONNECT", headers))
            command, reply, body = parse(self.next_frame())
            if command != "CONNECTED":
                raise ConnectionError(f"{server.name}: {command} {reply} {body[:200]!r}")
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(self.deadline.left())
        self.sock.sendall(data)

    def recv(self) -> bytes:
        """The next bytes received; raises ``ConnectionError`` at end of stream."""
        self.sock.settimeout(self.deadline.left())
        data = self.sock.recv(256 * 1024)
        if not data:
            raise ConnectionError(
                f"server closed the connection; last bytes {self.buffer[-200:]!r}"
            )
        return data

    def next_frame(self) -> bytes:
        """The next whole frame (without its NUL), skipping EOLs between frames (RabbitMQ
        writes one after each frame's NUL: it leads the bytes up to the next NUL)."""
        while True:
            nul = self.buffer.find(_NUL)
            if nul >= 0:
                raw, self.buffer = self.buffer[:nul].lstrip(b"\r\n"), self.buffer[nul + 1 :]
                if raw:
                    return raw
                continue
            self.buffer += self.recv()

    def wait_receipt(self, receipt: str) -> dict[str, str]:
        """Read frames until the RECEIPT for ``receipt``; an ERROR raises."""
        while True:
            command, headers, body = parse(self.next_frame())
            if command == "RECEIPT" and headers.get("receipt-id") == receipt:
                return headers
            if command == "ERROR":
                raise ConnectionError(f"ERROR {headers} {body[:200]!r}")


def raw_publish(
    server: Server, destination: str, count: int, deadline: Deadline, *, persistent: bool = False
) -> tuple[float, dict[str, str]]:
    """Write ``count`` pre-encoded SENDs, the last asking for a receipt; time until it.

    Returns the seconds and the RECEIPT's headers.

    Encoding happens before the clock starts: what is timed is the socket and the
    broker, the ceiling for any client.
    """
    stream = workload.send_stream(
        count, receipt=END_RECEIPT, destination=destination, persistent=persistent
    )
    with RawConnection(server, deadline) as conn:
        start = time.perf_counter()
        conn.sendall(stream)
        receipt = conn.wait_receipt(END_RECEIPT)
        return time.perf_counter() - start, receipt


def raw_consume(
    server: Server, destination: str, count: int, deadline: Deadline, *, ack: str = "auto"
) -> tuple[float, dict[str, str]]:
    """Subscribe and take ``count`` MESSAGEs; return the seconds and the last's headers.

    With ``ack="client-individual"`` every MESSAGE's ``ack`` header is echoed in an
    ACK frame, written in one go per read; with ``ack="client"`` nothing is
    acknowledged until the last MESSAGE, whose ACK (cumulative) covers them all: what
    holding every message until the end costs the broker.
    """
    with RawConnection(server, deadline) as conn:
        start = time.perf_counter()
        subscribe = {"id": "raw-0", "destination": destination, "ack": ack}
        if ack == "client":  # the broker must let one subscription hold them all
            subscribe["prefetch-count"] = subscribe["activemq.prefetchSize"] = str(count)
        conn.sendall(frame("SUBSCRIBE", subscribe))
        individual = ack == "client-individual"
        seen = 0
        pending = conn.buffer
        last = b""
        while True:
            done_at = pending.rfind(_NUL)
            if done_at >= 0:
                done, pending = pending[: done_at + 1], pending[done_at + 1 :]
                frames = done.count(_NUL)
                if individual:
                    ids = _ACK_RE.findall(done)
                    if len(ids) != frames:
                        raise AssertionError(f"{frames} frames but {len(ids)} ack headers")
                    conn.sendall(b"".join(b"ACK\nid:" + i + b"\n\n\x00" for i in ids))
                seen += frames
                if seen >= count:
                    last = done[:done_at].rpartition(_NUL)[2]
                    break
            pending += conn.recv()
        elapsed = time.perf_counter() - start
        if seen != count:
            raise AssertionError(f"received {seen} frames, expected {count}")
        command, headers, _ = parse(last)
        if command != "MESSAGE":
            raise AssertionError(f"last frame is {command} {headers}")
        if ack == "client":
            conn.sendall(frame("ACK", {"id": headers.get("ack", "")}))
            elapsed = time.perf_counter() - start
        conn.sendall(frame("DISCONNECT", {"receipt": "bye"}))
        conn.wait_receipt("bye")  # the broker has every ACK
        return elapsed, headers


def check_sent_last(headers: dict[str, str], count: int, who: str) -> None:
    """The last message consumed must be the last one published (queues are FIFO)."""
    want = f"order-{count - 1}"
    if headers.get("correlation-id") != want:
        raise AssertionError(
            f"{who}: last message has correlation-id "
            f"{headers.get('correlation-id')!r}, not {want!r}"
        )


# -- the request/reply responder ---------------------------------------------------------


def respond(server: Server, queue: str, max_seconds: float, ready: str = "READY") -> int:
    """Answer every request on ``queue`` to its ``reply-to``, echoing ``correlation-id``.

    Prints ``ready`` once subscribed; returns (the number of requests answered) when
    stdin closes or after ``max_seconds``.
    """
    deadline = Deadline(max_seconds)
    answered = 0
    with RawConnection(server, deadline) as conn:
        conn.sendall(
            frame("SUBSCRIBE", {"id": "req", "destination": queue, "ack": "auto", "receipt": "s"})
        )
        conn.wait_receipt("s")
        print(ready, flush=True)
        pending = conn.buffer
        while True:
            replies: list[bytes] = []
            while (nul := pending.find(_NUL)) >= 0:
                raw, pending = pending[:nul], pending[nul + 1 :]
                if not raw.strip(b"\r\n"):
                    continue
                command, headers, body = parse(raw)
                if command != "MESSAGE":
                    raise ConnectionError(f"responder got {command} {headers} {body[:200]!r}")
                reply = {
                    "destination": headers["reply-to"],
                    "correlation-id": headers.get("correlation-id", ""),
                    "content-length": str(len(body)),
                }
                replies.append(frame("SEND", reply, body))
            if replies:
                conn.sendall(b"".join(replies))
                answered += len(replies)
            readable, _, _ = select.select([conn.sock, sys.stdin], [], [], deadline.left())
            if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
                break
            if conn.sock in readable:
                pending += conn.recv()
    return answered


# -- child processes -----------------------------------------------------------------------


class Child:
    """A helper process whose first stdout line says it is ready; always reaped.

    ``with Child([...], ready="READY") as child: child.line``. Leaving the block closes
    its stdin (the responder exits on that) or, with ``terminate=True``, sends it
    SIGTERM (``stompy broker`` stops on that); then it is killed if it has not exited
    within ``timeout`` seconds.
    """

    def __init__(
        self, command: Sequence[str], ready: str, *, timeout: float = 30.0, terminate: bool = False
    ) -> None:
        self.command = list(command)
        self.ready = ready
        self.timeout = timeout
        self.terminate = terminate
        #: The ready line, as printed.
        self.line = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Child:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_ROOT, env=env
        )
        self._proc = proc
        assert proc.stdout is not None
        end = time.monotonic() + self.timeout
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
            line = proc.stdout.readline().decode() if ready else ""
            if line.startswith(self.ready):
                self.line = line.strip()
                return self
            if not line or time.monotonic() >= end:
                self.close()
                raise RuntimeError(f"{self.command[:4]} did not start: {line!r}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if self.terminate:
            proc.terminate()
        try:
            proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(self.timeout)
        if proc.stdout is not None:
            proc.stdout.close()


def responder_command(server: Server, queue: str, max_seconds: float) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.rawstomp", "respond", server.host]
    command += [str(server.port), queue, "--max-seconds", str(max_seconds)]
    if server.login is not None:
        command += ["--login", server.login]
    if server.passcode is not None:
        command += ["--passcode", server.passcode]
    if server.vhost is not None:
        command += ["--vhost", server.vhost]
    return command


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.rawstomp respond HOST PORT QUEUE``: run the responder."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rawstomp")
    commands = parser.add_subparsers(dest="command", required=True)
    responder = commands.add_parser("respond", help="answer requests until stdin closes")
    responder.add_argument("host")
    responder.add_argument("port", type=int)
    responder.add_argument("queue")
    responder.add_argument("--login")
    responder.add_argument("--passcode")
    responder.add_argument("--vhost")
    responder.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    server = Server("responder", args.host, args.port, args.login, args.passcode, args.vhost)
    try:
        respond(server, args.queue, args.max_seconds)
    except (OSError, TimeoutError) as exc:
        print(f"responder: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Wait until a broker answers a STOMP CONNECT with CONNECTED.

An open port is not a ready broker: RabbitMQ opens its listeners before the vhost
is usable, and a JVM may accept connections while the broker still boots. So the
probe sends a real CONNECT and waits for the answer, again and again until the
deadline.

Usage::

    wait_stomp.py HOST PORT LOGIN PASSCODE VHOST TIMEOUT [--pid-file F] [--ws PATH]

Exit status: 0 CONNECTED; 1 timed out (or the broker's process died); 3 the
broker answered with an ERROR frame (it is up, but refuses these credentials or
this vhost: waiting longer would not help).
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import NamedTuple

ATTEMPT_TIMEOUT = 3.0
MAX_FRAME = 1 << 20


class Frame(NamedTuple):
    command: str
    headers: dict[str, str]
    body: bytes

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


class FrameReader:
    """Just enough of a STOMP decoder for one CONNECTED or ERROR frame.

    Raw bytes on purpose: the probe must work even while stompy itself is broken.
    """

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_FRAME:
            raise ConnectionError("answer too large for a CONNECTED frame")

    def next_frame(self) -> Frame | None:
        buf = self.buf.lstrip(b"\r\n")  # heart-beats
        end = buf.find(b"\n\n")
        crlf = buf.find(b"\r\n\r\n")
        if crlf != -1 and (end == -1 or crlf < end):
            head, rest = buf[:crlf], buf[crlf + 4 :]
        elif end != -1:
            head, rest = buf[:end], buf[end + 2 :]
        else:
            return None
        lines = head.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(name, value)
        length = headers.get("content-length", "")
        if length.isdigit():
            if len(rest) < int(length) + 1:
                return None
            body = rest[: int(length)]
        else:
            nul = rest.find(b"\0")
            if nul == -1:
                return None
            body = rest[:nul]
        return Frame(lines[0], headers, body)


def encode_frame(command: str, headers: list[tuple[str, str]]) -> bytes:
    head = "".join(f"{name}:{value}\n" for name, value in headers)
    return f"{command}\n{head}\n".encode() + b"\0"


class Refused(Exception):
    """The broker answered ERROR: it is up and said no."""


def connect_frame(host: str, login: str, passcode: str) -> bytes:
    headers = [
        ("accept-version", "1.0,1.1,1.2"),
        ("host", host),
        ("login", login),
        ("passcode", passcode),
        ("heart-beat", "0,0"),
    ]
    return encode_frame("CONNECT", headers)


def read_answer(recv: socket.socket, parser: FrameReader, deadline: float) -> Frame:
    """Read until the first frame; raise OSError on EOF or timeout."""
    while True:
        frame = parser.next_frame()
        if frame is not None:
            return frame
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no answer to CONNECT")
        recv.settimeout(remaining)
        data = recv.recv(65536)
        if not data:
            raise ConnectionError("closed without an answer to CONNECT")
        parser.feed(data)


def handshake_tcp(host: str, port: int, login: str, passcode: str, vhost: str) -> Frame:
    deadline = time.monotonic() + ATTEMPT_TIMEOUT
    with socket.create_connection((host, port), timeout=ATTEMPT_TIMEOUT) as sock:
        sock.sendall(connect_frame(vhost, login, passcode))
        return read_answer(sock, FrameReader(), deadline)


def _ws_send(sock: socket.socket, payload: bytes) -> None:
    """One masked text frame, as RFC 6455 requires of a client."""
    head = bytearray([0x81])
    if len(payload) < 126:
        head.append(0x80 | len(payload))
    else:
        head.append(0x80 | 126)
        head += struct.pack("!H", len(payload))
    mask = os.urandom(4)
    head += mask
    sock.sendall(bytes(head) + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("WebSocket closed")
        data += chunk
    return data


def handshake_ws(host: str, port: int, path: str, login: str, passcode: str, vhost: str) -> Frame:
    """The same CONNECT over a WebSocket (Web-STOMP), with a hand-made RFC 6455 client."""
    deadline = time.monotonic() + ATTEMPT_TIMEOUT
    with socket.create_connection((host, port), timeout=ATTEMPT_TIMEOUT) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n"
        )
        sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += _recv_exact(sock, 1, deadline)
            if len(response) > 16384:
                raise ConnectionError("endless HTTP response")
        status = response.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise ConnectionError(f"no WebSocket upgrade: {status.decode(errors='replace')}")
        _ws_send(sock, connect_frame(vhost, login, passcode))
        parser = FrameReader()
        while True:
            b0, b1 = _recv_exact(sock, 2, deadline)
            length = b1 & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", _recv_exact(sock, 2, deadline))
            elif length == 127:
                (length,) = struct.unpack("!Q", _recv_exact(sock, 8, deadline))
            payload = _recv_exact(sock, length, deadline) if length else b""
            if b0 & 0x0F == 0x8:
                raise ConnectionError("WebSocket closed by the broker")
            if b0 & 0x0F in (0x1, 0x2, 0x0):
                parser.feed(payload)
                frame = parser.next_frame()
                if frame is not None:
                    return frame


def process_gone(pid_file: str | None) -> str | None:
    """Why the broker cannot come up any more (its process exited), or None."""
    if not pid_file or not os.path.exists(pid_file):
        return None
    try:
        pid = int(Path(pid_file).read_text().split()[0])
    except (ValueError, IndexError, OSError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"the broker's process {pid} (from {pid_file}) has exited"
    except PermissionError:
        pass
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("login")
    parser.add_argument("passcode")
    parser.add_argument("vhost", help="the CONNECT host header")
    parser.add_argument("timeout", type=float, help="seconds; 0 means a single attempt")
    parser.add_argument("--pid-file", help="give up early when this process has exited")
    parser.add_argument("--ws", metavar="PATH", help="probe Web-STOMP at this path instead")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    what = f"{args.host}:{args.port}{args.ws or ''}"
    deadline = time.monotonic() + args.timeout
    last = "no attempt"
    while True:
        try:
            if args.ws:
                frame = handshake_ws(
                    args.host, args.port, args.ws, args.login, args.passcode, args.vhost
                )
            else:
                frame = handshake_tcp(args.host, args.port, args.login, args.passcode, args.vhost)
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if frame.command == "CONNECTED":
                if not args.quiet:
                    print(
                        f"wait_stomp: {what} CONNECTED version={frame.get('version', '1.0')} "
                        f"server={frame.get('server')}"
                    )
                return 0
            message = frame.get("message") or frame.body.decode("utf-8", "replace").strip()
            print(f"wait_stomp: {what} answered {frame.command}: {message}", file=sys.stderr)
            return 3
        gone = process_gone(args.pid_file)
        if gone or time.monotonic() >= deadline:
            if not args.quiet:
                reason = gone or f"no CONNECTED within {args.timeout:g} s"
                print(f"wait_stomp: {what}: {reason} (last: {last})", file=sys.stderr)
            return 1
        time.sleep(min(0.25, max(deadline - time.monotonic(), 0)))


if __name__ == "__main__":
    sys.exit(main())

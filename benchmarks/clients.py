"""Client throughput against bare servers: messages per second through a real socket.

``consume``: the client subscribes (auto ack) to :class:`~benchmarks.servers.BlastServer`,
which writes ``count`` MESSAGE frames as fast as the socket takes them; timed from the
subscribe call to the ``count``-th message handed to the application.

``publish``: the client sends ``count`` SEND frames to
:class:`~benchmarks.servers.SinkServer`, the last asking for a receipt; timed from the
first send to that receipt.

Connecting and disconnecting are outside the window. The servers run in a child
process so they do not take the GIL from the client. The ``bare socket`` rows are the
ceiling: a socket that counts NULs (consume) or writes pre-encoded frames (publish).

stompy's clients plug in at :func:`stompy_contenders`: they are detected with
``hasattr(stompy, "Connection")`` / ``"AsyncConnection"``, never imported blindly, and a
run that raises is reported as failed instead of stopping the suite.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import stompy
from benchmarks import workload
from benchmarks._core import (
    Row,
    Settings,
    alternate_timed,
    log,
    register,
    rows_from_rates,
)
from benchmarks.servers import ServerProcess

GROUP: Final = "clients"
CEILING: Final = "bare socket (ceiling)"

Address = tuple[str, int]
#: A client benchmark: (server address, message count, time limit) -> seconds measured.
Bench = Callable[[Address, int, float], float]


def _count(settings: Settings) -> int:
    return settings.pick_count(100_000, 10_000)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(3, 1)


def _limit(count: int) -> float:
    """Seconds one run may take before it is abandoned (generous: ~1k msg/s)."""
    return 30.0 + count / 1000


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("benchmark run exceeded its time limit")
        return left


# -- the ceiling: a bare socket ---------------------------------------------------------


def _bare_connect(address: Address, deadline: _Deadline) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(address, timeout=deadline.left())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n\n\x00")
    data = b""
    while b"\x00" not in data:
        sock.settimeout(deadline.left())
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed before CONNECTED")
        data += chunk
    head, _, rest = data.partition(b"\x00")
    if not head.lstrip(b"\r\n").startswith(b"CONNECTED\n"):
        raise ConnectionError(f"expected CONNECTED, got {head[:40]!r}")
    return sock, rest


def bare_consume(address: Address, count: int, limit: float) -> float:
    deadline = _Deadline(limit)
    sock, rest = _bare_connect(address, deadline)
    with sock:
        start = time.perf_counter()
        sock.sendall(f"SUBSCRIBE\nid:{workload.SUBSCRIPTION}\n".encode() + b"ack:auto\n\n\x00")
        seen = rest.count(b"\x00")
        while seen < count:
            sock.settimeout(deadline.left())
            chunk = sock.recv(256 * 1024)
            if not chunk:
                raise ConnectionError(f"server closed after {seen} of {count} frames")
            seen += chunk.count(b"\x00")
        elapsed = time.perf_counter() - start
        if seen != count:
            raise AssertionError(f"received {seen} frames, expected {count}")
    return elapsed


def bare_publish_factory(count: int) -> Bench:
    stream = workload.send_stream(count, receipt="bench-end")

    def bare_publish(address: Address, count_: int, limit: float) -> float:
        deadline = _Deadline(limit)
        sock, rest = _bare_connect(address, deadline)
        with sock:
            start = time.perf_counter()
            sock.settimeout(deadline.left())
            sock.sendall(stream)
            reply = rest
            while b"\x00" not in reply:
                sock.settimeout(deadline.left())
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("server closed before the RECEIPT")
                reply += chunk
            elapsed = time.perf_counter() - start
        _check_receipt(reply.partition(b"\x00")[0].decode(), count_)
        return elapsed

    return bare_publish


def _check_receipt(text: str, count: int) -> None:
    """The sink reports the frames it saw in ``x-frames``: CONNECT + ``count`` SENDs."""
    for line in text.split("\n"):
        if line.startswith("x-frames:"):
            seen = int(line.partition(":")[2])
            if seen < count + 1:
                raise AssertionError(f"sink saw {seen} frames, expected at least {count + 1}")
            return
    raise AssertionError(f"no x-frames in the receipt {text!r}")


# -- stomp.py (threaded, blocking) ------------------------------------------------------


def _stomppy_connection(address: Address, deadline: _Deadline) -> tuple[Any, Any]:
    import stomp

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.connected = threading.Event()
            self.disconnected = threading.Event()
            self.done = threading.Event()
            self.count = 0
            self.target = 0
            self.last: Any = None
            self.receipts: list[Any] = []

        def on_connected(self, frame: Any) -> None:
            self.connected.set()

        def on_disconnected(self) -> None:
            self.disconnected.set()

        def on_message(self, frame: Any) -> None:
            self.count += 1
            if self.count == self.target:
                self.last = frame
                self.done.set()

        def on_receipt(self, frame: Any) -> None:
            self.receipts.append(frame)
            if frame.headers.get("receipt-id") == "bench-end":
                self.done.set()

    conn = stomp.Connection12([address], heartbeats=(0, 0), reconnect_attempts_max=1)
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect("guest", "guest", wait=False)
    if not listener.connected.wait(deadline.left()):
        raise TimeoutError("stomp.py did not connect")
    return conn, listener


def _stomppy_close(conn: Any, listener: Any) -> None:
    conn.disconnect()
    listener.disconnected.wait(10.0)


def stomppy_consume(address: Address, count: int, limit: float) -> float:
    deadline = _Deadline(limit)
    conn, listener = _stomppy_connection(address, deadline)
    try:
        listener.target = count
        start = time.perf_counter()
        conn.subscribe(workload.DESTINATION, id=workload.SUBSCRIPTION, ack="auto")
        if not listener.done.wait(deadline.left()):
            raise TimeoutError(f"stomp.py received {listener.count} of {count} messages")
        elapsed = time.perf_counter() - start
    finally:
        _stomppy_close(conn, listener)
    last = listener.last
    want = dict(workload.message_headers(count - 1))
    if last.headers.get("message-id") != want["message-id"]:
        raise AssertionError(f"stomp.py: last message is {last.headers!r}")
    # stomp.py's default auto_decode hands the body over as str.
    if last.body != workload.body(count - 1).decode():
        raise AssertionError(f"stomp.py: last body is {last.body!r}")
    return elapsed


def stomppy_publish(address: Address, count: int, limit: float) -> float:
    deadline = _Deadline(limit)
    conn, listener = _stomppy_connection(address, deadline)
    bodies = [workload.body(i) for i in range(count)]
    headers = [workload.send_headers(i) for i in range(count)]
    headers[-1]["receipt"] = "bench-end"
    try:
        start = time.perf_counter()
        for i in range(count):
            conn.send(
                workload.DESTINATION,
                bodies[i],
                content_type=workload.CONTENT_TYPE,
                headers=headers[i],
            )
        if not listener.done.wait(deadline.left()):
            raise TimeoutError("stomp.py: no receipt for the last SEND")
        elapsed = time.perf_counter() - start
    finally:
        _stomppy_close(conn, listener)
    end = [f for f in listener.receipts if f.headers.get("receipt-id") == "bench-end"]
    _check_receipt(f"x-frames:{end[0].headers.get('x-frames', '0')}", count)
    return elapsed


# -- stompman (asyncio) -----------------------------------------------------------------


def _stompman_client(address: Address) -> Any:
    import stompman

    return stompman.Client(
        [stompman.ConnectionParameters(address[0], address[1], "guest", "guest")],
        heartbeat=stompman.Heartbeat(0, 0),
        connect_retry_attempts=1,
    )


def stompman_consume(address: Address, count: int, limit: float) -> float:
    async def main() -> tuple[float, Any]:
        done = asyncio.Event()
        state: dict[str, Any] = {"count": 0, "last": None}

        async def handler(frame: Any) -> None:
            state["count"] += 1
            if state["count"] == count:
                state["last"] = frame
                done.set()

        def on_error(exc: Exception, frame: Any) -> None:
            state["error"] = exc

        async with _stompman_client(address) as client:
            start = time.perf_counter()
            subscription = await client.subscribe(
                workload.DESTINATION, handler, ack="auto", on_suppressed_exception=on_error
            )
            await done.wait()
            elapsed = time.perf_counter() - start
            await subscription.unsubscribe()
        if "error" in state:
            raise state["error"]
        return elapsed, state["last"]

    elapsed, last = asyncio.run(asyncio.wait_for(main(), limit))
    if last.headers.get("message-id") != dict(workload.message_headers(count - 1))["message-id"]:
        raise AssertionError(f"stompman: last message is {last.headers!r}")
    if last.body != workload.body(count - 1):
        raise AssertionError(f"stompman: last body is {last.body!r}")
    return elapsed


def stompman_publish(address: Address, count: int, limit: float) -> float:
    bodies = [workload.body(i) for i in range(count)]
    headers = [workload.send_headers(i) for i in range(count)]

    async def main() -> float:
        async with _stompman_client(address) as client:
            start = time.perf_counter()
            for i in range(count - 1):
                await client.send(
                    bodies[i],
                    workload.DESTINATION,
                    content_type=workload.CONTENT_TYPE,
                    headers=headers[i],
                )
            # The last one waits for its receipt: the sink has then read everything.
            await client.send(
                bodies[-1],
                workload.DESTINATION,
                content_type=workload.CONTENT_TYPE,
                headers=headers[-1],
                receipt_timeout=limit,
            )
            return time.perf_counter() - start

    return asyncio.run(asyncio.wait_for(main(), limit))


# -- stompy: the hook for issue 7 -------------------------------------------------------
# Each function is one run of one benchmark; stompy_contenders() below decides which
# run. A function may raise benchmarks._core.NotWired to be listed as "not wired".


def _url(address: Address) -> str:
    return f"stomp://{address[0]}:{address[1]}"


def _stompy_check_last(message: Any, count: int) -> None:
    want = dict(workload.message_headers(count - 1))
    if message.headers.get("message-id") != want["message-id"]:
        raise AssertionError(f"stompy: last message is {dict(message.headers)!r}")
    if message.body != workload.body(count - 1):
        raise AssertionError(f"stompy: last body is {message.body!r}")


def stompy_sync_consume(address: Address, count: int, limit: float) -> float:
    """``stompy.Connection``: subscribe (auto ack), pull ``count`` messages with ``get``."""
    deadline = _Deadline(limit)
    with stompy.Connection(
        _url(address), login="guest", passcode="guest", connect_timeout=10.0
    ) as conn:
        start = time.perf_counter()
        sub = conn.subscribe(workload.DESTINATION, id=workload.SUBSCRIPTION, ack="auto")
        message = None
        for received in range(count):
            message = sub.get(timeout=deadline.left())
            if message is None:
                raise TimeoutError(f"stompy received {received} of {count} messages")
        elapsed = time.perf_counter() - start
    _stompy_check_last(message, count)
    return elapsed


def stompy_sync_publish(address: Address, count: int, limit: float) -> float:
    """``stompy.Connection``: ``count`` sends, the last one waits for its receipt."""
    bodies = [workload.body(i) for i in range(count)]
    headers = [workload.send_headers(i) for i in range(count)]
    with stompy.Connection(
        _url(address), login="guest", passcode="guest", connect_timeout=10.0, receipt_timeout=limit
    ) as conn:
        start = time.perf_counter()
        for i in range(count):
            conn.send(
                workload.DESTINATION,
                bodies[i],
                headers=headers[i],
                content_type=workload.CONTENT_TYPE,
                receipt=i == count - 1,
            )
        return time.perf_counter() - start


def stompy_async_consume(address: Address, count: int, limit: float) -> float:
    """``stompy.AsyncConnection`` on asyncio: as :func:`stompy_sync_consume`."""
    import anyio

    async def main() -> tuple[float, Any]:
        with anyio.fail_after(limit):
            async with stompy.AsyncConnection(
                _url(address), login="guest", passcode="guest", connect_timeout=10.0
            ) as conn:
                start = time.perf_counter()
                sub = await conn.subscribe(
                    workload.DESTINATION, id=workload.SUBSCRIPTION, ack="auto"
                )
                message = None
                for received in range(count):
                    message = await sub.get()
                    if message is None:
                        raise ConnectionError(f"subscription ended after {received} messages")
                elapsed = time.perf_counter() - start
                await sub.unsubscribe()
        return elapsed, message

    elapsed, message = anyio.run(main)
    _stompy_check_last(message, count)
    return elapsed


def stompy_async_publish(address: Address, count: int, limit: float) -> float:
    """``stompy.AsyncConnection`` on asyncio: as :func:`stompy_sync_publish`."""
    import anyio

    bodies = [workload.body(i) for i in range(count)]
    headers = [workload.send_headers(i) for i in range(count)]

    async def main() -> float:
        with anyio.fail_after(limit):
            async with stompy.AsyncConnection(
                _url(address),
                login="guest",
                passcode="guest",
                connect_timeout=10.0,
                receipt_timeout=limit,
            ) as conn:
                start = time.perf_counter()
                for i in range(count):
                    await conn.send(
                        workload.DESTINATION,
                        bodies[i],
                        headers=headers[i],
                        content_type=workload.CONTENT_TYPE,
                        receipt=i == count - 1,
                    )
                return time.perf_counter() - start

    return anyio.run(main)


def stompy_contenders() -> dict[str, list[tuple[str, Bench]]]:
    """stompy's clients, by benchmark, when the installed stompy has them.

    Detected, not imported: the clients are being written while this suite is.
    Contender ``stompy`` is the one every ratio is taken against.
    """
    found: dict[str, list[tuple[str, Bench]]] = {"consume": [], "publish": []}
    if hasattr(stompy, "Connection"):
        found["consume"].append(("stompy", stompy_sync_consume))
        found["publish"].append(("stompy", stompy_sync_publish))
    if hasattr(stompy, "AsyncConnection"):
        found["consume"].append(("stompy (async)", stompy_async_consume))
        found["publish"].append(("stompy (async)", stompy_async_publish))
    return found


# -- the group --------------------------------------------------------------------------


def _peers(count: int) -> dict[str, list[tuple[str, Bench]]]:
    peers: dict[str, list[tuple[str, Bench]]] = {"consume": [], "publish": []}
    try:
        import stomp  # noqa: F401
    except ImportError:
        pass
    else:
        peers["consume"].append(("stomp.py", stomppy_consume))
        peers["publish"].append(("stomp.py", stomppy_publish))
    try:
        import stompman  # noqa: F401
    except ImportError:
        pass
    else:
        peers["consume"].append(("stompman", stompman_consume))
        peers["publish"].append(("stompman", stompman_publish))
    peers["consume"].append((CEILING, bare_consume))
    peers["publish"].append((CEILING, bare_publish_factory(count)))
    return peers


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    return {
        "messages": count,
        "rounds": _rounds(settings),
        "time_limit_s": _limit(count),
        "headers_per_frame": 10,
        "body_bytes": workload.BODY_SIZE,
        "servers": "benchmarks.servers blast / sink in a child process on 127.0.0.1",
    }


@register(GROUP, "client throughput against bare blast/sink servers (msg/s)", describe=describe)
def run(settings: Settings) -> list[Row]:
    count = _count(settings)
    rounds = _rounds(settings)
    limit = _limit(count)
    ours = stompy_contenders()
    peers = _peers(count)
    rows: list[Row] = []
    for name, kind in (("consume", "blast"), ("publish", "sink")):
        contenders = [*ours[name], *peers[name]]
        log(settings, f"clients {name}: {count:,} messages, {rounds} rounds, {kind} server")
        with ServerProcess(kind, count=count, max_seconds=limit * rounds * 10) as server:
            runs = [
                (who, functools.partial(bench, server.address, count, limit))
                for who, bench in contenders
            ]
            rates, failed = alternate_timed(runs, rounds, count, settings, name)
        rows += rows_from_rates(GROUP, name, rates, "msg/s")
        rows += [
            Row(GROUP, name, who, float("nan"), "msg/s", note=why) for who, why in failed.items()
        ]
    return rows

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

Every contender here is one function ``bench(job) -> seconds`` over a :class:`Job`
(where to connect, how many messages, which ack mode...), so that the broker group
(:mod:`benchmarks.brokers`) runs the very same code against RabbitMQ and ActiveMQ.
stompy runs as its blocking client (``stompy``) and as its anyio client on asyncio and
on trio; a run that raises is reported as failed instead of stopping the suite.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import stompy
from benchmarks import workload
from benchmarks._core import (
    CEILING_MARK,
    STOMPY,
    STOMPY_ASYNCIO,
    STOMPY_TRIO,
    Row,
    Settings,
    Target,
    alternate_timed,
    failure_rows,
    log,
    register,
    rows_from_rates,
)
from benchmarks.rawstomp import Deadline, Server, raw_consume, raw_publish
from benchmarks.servers import ServerProcess
from stompy import AckMode

GROUP: Final = "clients"
CEILING: Final = f"bare socket {CEILING_MARK}"
STOMPPY: Final = "stomp.py"
STOMPMAN: Final = "stompman"


@dataclass(frozen=True)
class Job:
    """One run's orders: where to connect, what to send or take, and how long it may take."""

    server: Server
    count: int
    #: Seconds the whole run (connect included) may take before it is abandoned.
    limit: float
    destination: str = workload.DESTINATION
    ack: AckMode = "auto"
    #: Whether SENDs carry ``persistent:true`` (the bare servers do not care).
    persistent: bool = True
    #: The header that identifies the last message: the blast server numbers its
    #: ``message-id``; through a broker, the publisher's ``correlation-id`` survives.
    identity: str = "message-id"
    subscription: str = workload.SUBSCRIPTION
    #: stompy's ``tracing`` option (OpenTelemetry; :mod:`benchmarks.tracing` turns it off).
    tracing: bool = True

    def deadline(self) -> Deadline:
        return Deadline(self.limit)

    def want_last(self) -> tuple[str, str]:
        """(header, value) the ``count``-th message must carry."""
        if self.identity == "message-id":
            return "message-id", dict(workload.message_headers(self.count - 1))["message-id"]
        return "correlation-id", f"order-{self.count - 1}"

    def send_headers(self) -> list[dict[str, str]]:
        """Each SEND's headers, built outside the timer."""
        return [workload.send_headers(i, persistent=self.persistent) for i in range(self.count)]


#: A client benchmark: one run, returning the seconds of its measured window.
Bench = Callable[[Job], float]


def _count(settings: Settings) -> int:
    return settings.pick_count(50_000, 10_000)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(3, 1)


def limit_for(count: int) -> float:
    """Seconds one run may take before it is abandoned (generous: ~1k msg/s)."""
    return 30.0 + count / 1000


def check_last(job: Job, headers: Any, body: bytes | str, who: str) -> None:
    """The last message taken must be the last one sent, with its body intact."""
    name, value = job.want_last()
    if headers.get(name) != value:
        raise AssertionError(f"{who}: last message has {name}={headers.get(name)!r}, not {value}")
    want = workload.body(job.count - 1)
    got = body.encode() if isinstance(body, str) else body
    if got != want:
        raise AssertionError(f"{who}: last body is {got!r}")


# -- the ceiling: a bare socket ---------------------------------------------------------


def bare_consume(job: Job) -> float:
    elapsed, headers = raw_consume(
        job.server, job.destination, job.count, job.deadline(), ack=job.ack
    )
    name, value = job.want_last()
    if headers.get(name) != value:
        raise AssertionError(f"bare socket: last message has {name}={headers.get(name)!r}")
    return elapsed


def bare_publish(job: Job) -> float:
    elapsed, receipt = raw_publish(
        job.server, job.destination, job.count, job.deadline(), persistent=job.persistent
    )
    if "x-frames" in receipt:
        check_sink_count(receipt["x-frames"], job.count)
    return elapsed


def check_sink_count(x_frames: str, count: int) -> None:
    """The sink reports the frames it saw in ``x-frames``: CONNECT + ``count`` SENDs."""
    if int(x_frames) < count + 1:
        raise AssertionError(f"sink saw {x_frames} frames, expected at least {count + 1}")


# -- stomp.py (threaded, blocking) ------------------------------------------------------


def _stomppy_connection(job: Job, deadline: Deadline) -> tuple[Any, Any]:
    import stomp

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.connected = threading.Event()
            self.disconnected = threading.Event()
            self.done = threading.Event()
            self.count = 0
            self.target = 0
            self.individual = False
            self.conn: Any = None
            self.last: Any = None
            self.error: Any = None
            self.receipts: list[Any] = []

        def on_connected(self, frame: Any) -> None:
            self.connected.set()

        def on_disconnected(self) -> None:
            self.disconnected.set()

        def on_error(self, frame: Any) -> None:
            self.error = frame
            self.done.set()

        def on_message(self, frame: Any) -> None:
            # stomp.py calls listeners in its receiver thread: acking here is the
            # library's own idiom.
            if self.individual:
                self.conn.ack(frame.headers["ack"])
            self.count += 1
            if self.count == self.target:
                self.last = frame
                self.done.set()

        def on_receipt(self, frame: Any) -> None:
            self.receipts.append(frame)
            if frame.headers.get("receipt-id") == "bench-end":
                self.done.set()

    conn = stomp.Connection12(
        [job.server.address], heartbeats=(0, 0), reconnect_attempts_max=1, vhost=job.server.vhost
    )
    listener = Listener()
    listener.conn = conn
    conn.set_listener("bench", listener)
    conn.connect(job.server.login, job.server.passcode, wait=False)
    if not listener.connected.wait(deadline.left()):
        raise TimeoutError(f"stomp.py did not connect (error: {listener.error})")
    return conn, listener


def _stomppy_close(conn: Any, listener: Any) -> None:
    conn.disconnect()
    listener.disconnected.wait(10.0)


def stomppy_consume(job: Job) -> float:
    deadline = job.deadline()
    conn, listener = _stomppy_connection(job, deadline)
    try:
        listener.target = job.count
        listener.individual = job.ack != "auto"
        start = time.perf_counter()
        conn.subscribe(job.destination, id=job.subscription, ack=job.ack)
        if not listener.done.wait(deadline.left()):
            raise TimeoutError(f"stomp.py received {listener.count} of {job.count} messages")
        elapsed = time.perf_counter() - start
    finally:
        _stomppy_close(conn, listener)
    if listener.error is not None:
        raise ConnectionError(f"stomp.py: ERROR {listener.error.headers}")
    # stomp.py's default auto_decode hands the body over as str.
    check_last(job, listener.last.headers, listener.last.body, STOMPPY)
    return elapsed


def stomppy_publish(job: Job) -> float:
    deadline = job.deadline()
    conn, listener = _stomppy_connection(job, deadline)
    bodies = [workload.body(i) for i in range(job.count)]
    headers = job.send_headers()
    headers[-1]["receipt"] = "bench-end"
    try:
        start = time.perf_counter()
        for i in range(job.count):
            conn.send(
                job.destination,
                bodies[i],
                content_type=workload.CONTENT_TYPE,
                headers=headers[i],
            )
        if not listener.done.wait(deadline.left()):
            raise TimeoutError("stomp.py: no receipt for the last SEND")
        elapsed = time.perf_counter() - start
    finally:
        _stomppy_close(conn, listener)
    if listener.error is not None:
        raise ConnectionError(f"stomp.py: ERROR {listener.error.headers}")
    end = [f for f in listener.receipts if f.headers.get("receipt-id") == "bench-end"]
    if "x-frames" in end[0].headers:
        check_sink_count(end[0].headers["x-frames"], job.count)
    return elapsed


# -- stompman (asyncio) -----------------------------------------------------------------


def _stompman_client(job: Job) -> Any:
    import stompman
    from stompman.connection import Connection

    real_host = job.server.host

    class VhostConnection(Connection):
        """stompman sends its address as the ``host`` header; RabbitMQ reads that
        header as the virtual host. This connects to the real address instead, so
        the address given to stompman can be the virtual host."""

        @classmethod
        async def connect(cls, **kwargs: Any) -> Any:
            kwargs["host"] = real_host
            return await super().connect(**kwargs)

    host = job.server.vhost or real_host
    return stompman.Client(
        [
            stompman.ConnectionParameters(
                host, job.server.port, job.server.login or "", job.server.passcode or ""
            )
        ],
        heartbeat=stompman.Heartbeat(0, 0),
        connect_retry_attempts=1,
        connection_class=VhostConnection,
    )


def stompman_consume(job: Job) -> float:
    async def main() -> tuple[float, Any]:
        done = asyncio.Event()
        state: dict[str, Any] = {"count": 0, "last": None}

        async def handler(frame: Any) -> None:
            state["count"] += 1
            if state["count"] == job.count:
                state["last"] = frame
                done.set()

        def on_error(exc: Exception, frame: Any) -> None:
            state["error"] = exc

        async with _stompman_client(job) as client:
            start = time.perf_counter()
            # stompman acks client-individual messages itself once the handler returns.
            subscription = await client.subscribe(
                job.destination, handler, ack=job.ack, on_suppressed_exception=on_error
            )
            await done.wait()
            elapsed = time.perf_counter() - start
            await subscription.unsubscribe()
        if "error" in state:
            raise state["error"]
        return elapsed, state["last"]

    elapsed, last = asyncio.run(asyncio.wait_for(main(), job.limit))
    check_last(job, last.headers, last.body, STOMPMAN)
    return elapsed


def stompman_publish(job: Job) -> float:
    bodies = [workload.body(i) for i in range(job.count)]
    headers = job.send_headers()

    async def main() -> float:
        async with _stompman_client(job) as client:
            start = time.perf_counter()
            for i in range(job.count - 1):
                await client.send(
                    bodies[i],
                    job.destination,
                    content_type=workload.CONTENT_TYPE,
                    headers=headers[i],
                )
            # The last one waits for its receipt: the server has then read everything.
            await client.send(
                bodies[-1],
                job.destination,
                content_type=workload.CONTENT_TYPE,
                headers=headers[-1],
                receipt_timeout=job.limit,
            )
            return time.perf_counter() - start

    return asyncio.run(asyncio.wait_for(main(), job.limit))


# -- stompy -----------------------------------------------------------------------------


def _stompy_connection(job: Job, receipt_timeout: float = 10.0) -> stompy.Connection:
    return stompy.Connection(
        job.server.url,
        login=job.server.login,
        passcode=job.server.passcode,
        host=job.server.vhost,
        connect_timeout=10.0,
        receipt_timeout=receipt_timeout,
        tracing=job.tracing,
    )


def stompy_sync_consume(job: Job) -> float:
    """``stompy.Connection``: subscribe, pull ``count`` messages with ``get``, ack each
    with ``client-individual``."""
    deadline = job.deadline()
    individual = job.ack != "auto"
    with _stompy_connection(job) as conn:
        start = time.perf_counter()
        sub = conn.subscribe(job.destination, id=job.subscription, ack=job.ack)
        message = None
        for received in range(job.count):
            message = sub.get(timeout=deadline.left())
            if message is None:
                raise TimeoutError(f"stompy received {received} of {job.count} messages")
            if individual:
                message.ack()
        elapsed = time.perf_counter() - start
    assert message is not None
    check_last(job, message.headers, message.body, STOMPY)
    return elapsed


def stompy_sync_publish(job: Job) -> float:
    """``stompy.Connection``: ``count`` sends, the last one waits for its receipt."""
    bodies = [workload.body(i) for i in range(job.count)]
    headers = job.send_headers()
    last = job.count - 1
    with _stompy_connection(job, receipt_timeout=job.limit) as conn:
        start = time.perf_counter()
        for i in range(job.count):
            conn.send(
                job.destination,
                bodies[i],
                headers=headers[i],
                content_type=workload.CONTENT_TYPE,
                receipt=i == last,
            )
        return time.perf_counter() - start


def _stompy_async_connection(job: Job, receipt_timeout: float = 10.0) -> stompy.AsyncConnection:
    return stompy.AsyncConnection(
        job.server.url,
        login=job.server.login,
        passcode=job.server.passcode,
        host=job.server.vhost,
        connect_timeout=10.0,
        receipt_timeout=receipt_timeout,
        tracing=job.tracing,
    )


def stompy_async_consume(job: Job, backend: str = "asyncio") -> float:
    """``stompy.AsyncConnection`` on ``backend``: as :func:`stompy_sync_consume`."""
    import anyio

    individual = job.ack != "auto"

    async def main() -> tuple[float, Any]:
        with anyio.fail_after(job.limit):
            async with _stompy_async_connection(job) as conn:
                start = time.perf_counter()
                sub = await conn.subscribe(job.destination, id=job.subscription, ack=job.ack)
                message = None
                for received in range(job.count):
                    message = await sub.get()
                    if message is None:
                        raise ConnectionError(f"subscription ended after {received} messages")
                    if individual:
                        await message.ack()
                elapsed = time.perf_counter() - start
                await sub.unsubscribe()
        return elapsed, message

    elapsed, message = anyio.run(main, backend=backend)
    check_last(job, message.headers, message.body, f"stompy ({backend})")
    return elapsed


def stompy_async_publish(job: Job, backend: str = "asyncio") -> float:
    """``stompy.AsyncConnection`` on ``backend``: as :func:`stompy_sync_publish`."""
    import anyio

    bodies = [workload.body(i) for i in range(job.count)]
    headers = job.send_headers()
    last = job.count - 1

    async def main() -> float:
        with anyio.fail_after(job.limit):
            async with _stompy_async_connection(job, receipt_timeout=job.limit) as conn:
                start = time.perf_counter()
                for i in range(job.count):
                    await conn.send(
                        job.destination,
                        bodies[i],
                        headers=headers[i],
                        content_type=workload.CONTENT_TYPE,
                        receipt=i == last,
                    )
                return time.perf_counter() - start

    return anyio.run(main, backend=backend)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def contenders(kind: str, settings: Settings, *, trio: bool = True) -> list[tuple[str, Bench]]:
    """Every client for ``kind`` (``"consume"`` or ``"publish"``) that is installed and
    chosen, stompy's first, the bare-socket ceiling last."""
    consume = kind == "consume"
    found: list[tuple[str, Bench]] = [
        (STOMPY, stompy_sync_consume if consume else stompy_sync_publish),
        (STOMPY_ASYNCIO, stompy_async_consume if consume else stompy_async_publish),
    ]
    if trio and _has("trio"):
        bench = stompy_async_consume if consume else stompy_async_publish
        found.append((STOMPY_TRIO, functools.partial(bench, backend="trio")))
    if _has("stomp"):
        found.append((STOMPPY, stomppy_consume if consume else stomppy_publish))
    if _has("stompman"):
        found.append((STOMPMAN, stompman_consume if consume else stompman_publish))
    found.append((CEILING, bare_consume if consume else bare_publish))
    return [(who, bench) for who, bench in found if settings.wants(who)]


# -- the group --------------------------------------------------------------------------


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    return {
        "messages": count,
        "rounds": _rounds(settings),
        "time_limit_s": limit_for(count),
        "headers_per_frame": 10,
        "body_bytes": workload.BODY_SIZE,
        "servers": "benchmarks.servers blast / sink in a child process on 127.0.0.1",
    }


def _targets() -> tuple[Target, ...]:
    """The floors for the stompy this process imports (issue 18).

    What ``pip install`` builds (the mypyc core and the parser's accelerator): 8x
    stomp.py consuming and 6x publishing; asyncio and trio 20x stompman and 6x
    stomp.py consuming. The pure-Python fallback: 5x and 4x stomp.py, and the async
    clients' earlier floors.
    """
    import stompy
    import stompy._compiled

    if stompy.COMPILED and stompy._compiled.ACCELERATED:
        consume, publish, async_stompman, async_stomppy = 8.0, 6.0, 20.0, 6.0
    else:
        consume, publish, async_stompman, async_stomppy = 5.0, 4.0, 3.0, 1.5
    return (
        Target("consume", STOMPPY, consume),
        Target("publish", STOMPPY, publish),
        Target("consume", STOMPMAN, async_stompman, ours=STOMPY_ASYNCIO),
        Target("consume", STOMPPY, async_stomppy, ours=STOMPY_ASYNCIO),
        Target("consume", STOMPMAN, async_stompman, ours=STOMPY_TRIO),
        Target("consume", STOMPPY, async_stomppy, ours=STOMPY_TRIO),
    )


TARGETS: Final = _targets()


@register(
    GROUP,
    "client throughput against bare blast/sink servers (msg/s)",
    targets=TARGETS,
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    count = _count(settings)
    rounds = _rounds(settings)
    limit = limit_for(count)
    rows: list[Row] = []
    for name, kind in (("consume", "blast"), ("publish", "sink")):
        log(settings, f"clients {name}: {count:,} messages, {rounds} rounds, {kind} server")
        with ServerProcess(kind, count=count, max_seconds=limit * rounds * 10) as server:
            job = Job(Server(kind, *server.address), count, limit)
            runs = [
                (who, functools.partial(bench, job)) for who, bench in contenders(name, settings)
            ]
            rates, failed = alternate_timed(runs, rounds, count, settings, name)
        rows += rows_from_rates(GROUP, name, rates, "msg/s")
        rows += failure_rows(GROUP, name, failed, "msg/s")
    return rows

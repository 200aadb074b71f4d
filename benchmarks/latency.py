"""Request / reply latency through a broker: p50 and p99 of one round trip, in ms.

The requester (the contender) subscribes to its own reply queue, then, one request
at a time, sends a request (``reply-to`` and ``correlation-id`` headers, a 100-byte
body) and waits for the answer, checking its ``correlation-id``. A bare-socket
responder in a child process (:func:`benchmarks.rawstomp.respond`) answers each
request at once, so the figure is the requester's library twice (send, receive)
plus the broker twice; the first ``warmup`` round trips are not counted. The
``request()`` contenders use stompy's request/reply API instead: a temporary reply
queue of the connection and stompy's correlation ids, as an application would.

``receipt``: one ``send(receipt=True)`` at a time to a topic nobody subscribes to
(stomp.py: a ``receipt`` header and a listener's event), timed until the RECEIPT is in
the caller's hands: the library once each way plus the broker once.

The ``bare socket (ceiling)`` rows are the floor of both: a socket that writes a
pre-encoded frame and reads until the answer's NUL, which no client can beat. The
``bare asyncio (ceiling)`` and ``bare trio (ceiling)`` rows are the same exchange in one
task of that event loop (``loop.sock_sendall()`` / ``loop.sock_recv()``, ``trio.socket``):
the floor of an async client, what the event loop itself costs.

Brokers: stompy's own test broker (:mod:`stompy.testing`, run as ``python -m stompy
broker`` in a child process so that it does not share the client's GIL), and
RabbitMQ when it answers. Lower is better.
"""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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
    alternate_calls,
    failure_rows,
    log,
    register,
)
from benchmarks.brokers import RABBITMQ, unique_queue, unreachable
from benchmarks.clients import CEILING, STOMPMAN, STOMPPY, Job, _has, _stompman_client
from benchmarks.rawstomp import Child, RawConnection, Server, frame, responder_command

GROUP: Final = "latency"
#: One requester run: (job whose destination is the request queue, reply queue,
#: round trips, warm-up round trips) -> the counted round trips' seconds. A receipt
#: sender is one too: its destination is the topic, and it has no reply queue.
Requester = Callable[[Job, str, int, int], list[float]]
#: What the receipt senders send to: a topic, so that nothing piles up in the broker.
RECEIPT_TOPIC: Final = "/topic/stompy-bench-receipts"
#: stompy's own request/reply API (issue 19) beside the same exchange done by hand.
STOMPY_REQUEST: Final = "stompy request()"
STOMPY_ASYNC_REQUEST: Final = "stompy (asyncio) request()"
#: The floor of an async client: the bare socket's exchange in one task of the event
#: loop, read and written with the runtime's own socket calls.
CEILING_ASYNCIO: Final = f"bare asyncio {CEILING_MARK}"
CEILING_TRIO: Final = f"bare trio {CEILING_MARK}"


def _count(settings: Settings) -> int:
    return settings.pick_count(2_000, 500)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(3, 1)


def _warmup(count: int) -> int:
    return max(1, min(100, count // 10))


def _request_headers(reply_to: str, i: int) -> dict[str, str]:
    return {"reply-to": reply_to, "correlation-id": str(i)}


def _options(job: Job) -> stompy.ConnectionOptions:
    server = job.server
    return {
        "login": server.login,
        "passcode": server.passcode,
        "host": server.vhost,
        "receipt_timeout": 10.0,
    }


def _check_reply(headers: Any, i: int, who: str) -> None:
    if headers.get("correlation-id") != str(i):
        raise AssertionError(f"{who}: reply {headers.get('correlation-id')!r} to request {i}")


def stompy_sync_requests(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    deadline = job.deadline()
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        sub = conn.subscribe(reply_to, ack="auto", receipt=True)
        for i in range(warmup + count):
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers=_request_headers(reply_to, i))
            reply = sub.get(timeout=deadline.left())
            elapsed = time.perf_counter() - start
            if reply is None:
                raise TimeoutError(f"no reply to request {i}")
            _check_reply(reply.headers, i, STOMPY)
            if i >= warmup:
                times.append(elapsed)
    return times


def stompy_async_requests(
    job: Job, reply_to: str, count: int, warmup: int, backend: str = "asyncio"
) -> list[float]:
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                sub = await conn.subscribe(reply_to, ack="auto", receipt=True)
                for i in range(warmup + count):
                    start = time.perf_counter()
                    await conn.send(
                        job.destination, workload.body(i), headers=_request_headers(reply_to, i)
                    )
                    reply = await sub.get()
                    elapsed = time.perf_counter() - start
                    if reply is None:
                        raise ConnectionError(f"reply subscription ended at request {i}")
                    _check_reply(reply.headers, i, f"stompy ({backend})")
                    if i >= warmup:
                        times.append(elapsed)
                await sub.unsubscribe()
        return times

    return anyio.run(main, backend=backend)


def stompy_request_api(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    """``Connection.request()``: the reply queue is the connection's own temporary
    queue (``reply_to`` is not used), the correlation id stompy's."""
    deadline = job.deadline()
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        for i in range(warmup + count):
            start = time.perf_counter()
            reply = conn.request(job.destination, workload.body(i), timeout=deadline.left())
            elapsed = time.perf_counter() - start
            if reply.body != workload.body(i):
                raise AssertionError(f"{STOMPY_REQUEST}: a reply to another request at {i}")
            if i >= warmup:
                times.append(elapsed)
    return times


def stompy_async_request_api(
    job: Job, reply_to: str, count: int, warmup: int, backend: str = "asyncio"
) -> list[float]:
    """``await AsyncConnection.request()``, as :func:`stompy_request_api`."""
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                for i in range(warmup + count):
                    start = time.perf_counter()
                    reply = await conn.request(job.destination, workload.body(i), timeout=10.0)
                    elapsed = time.perf_counter() - start
                    if reply.body != workload.body(i):
                        raise AssertionError(f"request(): a reply to another request at {i}")
                    if i >= warmup:
                        times.append(elapsed)
        return times

    return anyio.run(main, backend=backend)


def stomppy_requests(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    import stomp

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.connected = threading.Event()
            self.subscribed = threading.Event()
            self.replied = threading.Event()
            self.reply: Any = None

        def on_connected(self, frame: Any) -> None:
            self.connected.set()

        def on_receipt(self, frame: Any) -> None:
            self.subscribed.set()

        def on_message(self, frame: Any) -> None:
            self.reply = frame
            self.replied.set()

    deadline = job.deadline()
    conn = stomp.Connection12(
        [job.server.address], heartbeats=(0, 0), reconnect_attempts_max=1, vhost=job.server.vhost
    )
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect(job.server.login, job.server.passcode, wait=False)
    times: list[float] = []
    try:
        if not listener.connected.wait(deadline.left()):
            raise TimeoutError("stomp.py did not connect")
        conn.subscribe(reply_to, id="replies", ack="auto", headers={"receipt": "subscribed"})
        if not listener.subscribed.wait(deadline.left()):
            raise TimeoutError("stomp.py: no receipt for SUBSCRIBE")
        for i in range(warmup + count):
            listener.replied.clear()
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers=_request_headers(reply_to, i))
            if not listener.replied.wait(deadline.left()):
                raise TimeoutError(f"stomp.py: no reply to request {i}")
            elapsed = time.perf_counter() - start
            _check_reply(listener.reply.headers, i, STOMPPY)
            if i >= warmup:
                times.append(elapsed)
    finally:
        conn.disconnect()
    return times


def stompman_requests(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[Any]] = []
        times: list[float] = []

        async def handler(frame: Any) -> None:
            if waiting and not waiting[-1].done():
                waiting[-1].set_result(frame)

        async with _stompman_client(job) as client:
            subscription = await client.subscribe(
                reply_to,
                handler,
                ack="auto",
                on_suppressed_exception=lambda exc, frame: None,
                receipt_timeout=10.0,
            )
            for i in range(warmup + count):
                future: asyncio.Future[Any] = loop.create_future()
                waiting.append(future)
                start = time.perf_counter()
                await client.send(
                    workload.body(i), job.destination, headers=_request_headers(reply_to, i)
                )
                reply = await future
                elapsed = time.perf_counter() - start
                waiting.pop()
                _check_reply(reply.headers, i, STOMPMAN)
                if i >= warmup:
                    times.append(elapsed)
            await subscription.unsubscribe()
        return times

    return asyncio.run(asyncio.wait_for(main(), job.limit))


# -- the floor: a bare socket --------------------------------------------------------------


def _request_frames(job: Job, reply_to: str, total: int) -> list[bytes]:
    return [
        frame(
            "SEND",
            {
                "destination": job.destination,
                **_request_headers(reply_to, i),
                "content-length": str(len(workload.body(i))),
            },
            workload.body(i),
        )
        for i in range(total)
    ]


def _check_bare_reply(reply: bytes, i: int, who: str) -> None:
    if b"\ncorrelation-id:%d\n" % i not in reply or not reply.startswith(b"MESSAGE"):
        raise AssertionError(f"{who}: {reply[:200]!r} is no reply to request {i}")


def _subscribed(conn: RawConnection, reply_to: str) -> None:
    subscribe = {"id": "replies", "destination": reply_to, "ack": "auto", "receipt": "s"}
    conn.sendall(frame("SUBSCRIBE", subscribe))
    conn.wait_receipt("s")


def bare_requests(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    """The floor of a round trip: pre-encoded SENDs written to a socket, each answer
    read up to its NUL and its ``correlation-id`` found in its bytes."""
    deadline = job.deadline()
    frames = _request_frames(job, reply_to, warmup + count)
    times: list[float] = []
    with RawConnection(job.server, deadline) as conn:
        _subscribed(conn, reply_to)
        sock = conn.sock
        sock.settimeout(deadline.left())
        for i, request in enumerate(frames):
            start = time.perf_counter()
            sock.sendall(request)
            reply = conn.next_frame()
            elapsed = time.perf_counter() - start
            _check_bare_reply(reply, i, "bare socket")
            if i >= warmup:
                times.append(elapsed)
    return times


# -- the floor of an event loop: the same bare socket, read and written by the runtime ----

#: Reads the next bytes of a non-blocking socket with a runtime's own call.
Receive = Callable[[], Awaitable[bytes]]


async def _bare_exchange(
    frames: list[bytes],
    send: Callable[[bytes], Awaitable[object]],
    receive: Receive,
    check: Callable[[bytes, int], None],
    warmup: int,
) -> list[float]:
    """Each frame written and its answer read up to its NUL, in one task."""
    times: list[float] = []
    buffer = b""
    for i, request in enumerate(frames):
        start = time.perf_counter()
        await send(request)
        while True:
            nul = buffer.find(b"\0")
            if nul >= 0:
                answer, buffer = buffer[:nul].lstrip(b"\r\n"), buffer[nul + 1 :]
                if answer:
                    break
                continue
            data = await receive()
            if not data:
                raise ConnectionError("the broker closed the connection")
            buffer += data
        elapsed = time.perf_counter() - start
        check(answer, i)
        if i >= warmup:
            times.append(elapsed)
    return times


def _bare_async(
    job: Job,
    reply_to: str | None,
    frames: list[bytes],
    check: Callable[[bytes, int], None],
    warmup: int,
    backend: str,
) -> list[float]:
    """:func:`_bare_exchange` on a connection made (and subscribed) by
    :class:`RawConnection`, its socket then read and written by the event loop:
    ``loop.sock_sendall()`` / ``loop.sock_recv()`` on asyncio, ``trio.socket`` on trio
    (subscribed to ``reply_to`` first, unless it is ``None``)."""
    deadline = job.deadline()
    with RawConnection(job.server, deadline) as conn:
        if conn.buffer:
            raise AssertionError(f"bare {backend}: bytes before the first request")
        if reply_to is not None:
            _subscribed(conn, reply_to)
        sock = conn.sock
        sock.setblocking(False)
        if backend == "trio":
            import trio

            async def trio_main() -> list[float]:
                tsock = trio.socket.from_stdlib_socket(sock)

                async def send(data: bytes) -> None:
                    view = memoryview(data)
                    while view:
                        view = view[await tsock.send(view) :]

                with trio.fail_after(deadline.left()):
                    try:
                        return await _bare_exchange(
                            frames, send, lambda: tsock.recv(256 * 1024), check, warmup
                        )
                    finally:
                        tsock.detach()  # the RawConnection closes it

            return trio.run(trio_main)

        async def asyncio_main() -> list[float]:
            loop = asyncio.get_running_loop()
            return await _bare_exchange(
                frames,
                functools.partial(loop.sock_sendall, sock),
                functools.partial(loop.sock_recv, sock, 256 * 1024),
                check,
                warmup,
            )

        return asyncio.run(asyncio.wait_for(asyncio_main(), deadline.left()))


def bare_async_requests(
    job: Job, reply_to: str, count: int, warmup: int, backend: str = "asyncio"
) -> list[float]:
    """The floor of an event loop's round trip: :func:`bare_requests` in one task."""
    frames = _request_frames(job, reply_to, warmup + count)
    check = functools.partial(_check_bare_reply, who=f"bare {backend}")
    return _bare_async(job, reply_to, frames, check, warmup, backend)


# -- send(receipt=True) ----------------------------------------------------------------------


def stompy_sync_receipts(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        for i in range(warmup + count):
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), receipt=True)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times.append(elapsed)
    return times


def stompy_async_receipts(
    job: Job, reply_to: str, count: int, warmup: int, backend: str = "asyncio"
) -> list[float]:
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                for i in range(warmup + count):
                    start = time.perf_counter()
                    await conn.send(job.destination, workload.body(i), receipt=True)
                    elapsed = time.perf_counter() - start
                    if i >= warmup:
                        times.append(elapsed)
        return times

    return anyio.run(main, backend=backend)


def stomppy_receipts(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    """stomp.py has no wait for a receipt: a ``receipt`` header, and a listener's event
    set by ``on_receipt``, as its documentation shows."""
    import stomp

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.connected = threading.Event()
            self.received = threading.Event()
            self.receipt: str | None = None

        def on_connected(self, frame: Any) -> None:
            self.connected.set()

        def on_receipt(self, frame: Any) -> None:
            self.receipt = frame.headers.get("receipt-id")
            self.received.set()

    deadline = job.deadline()
    conn = stomp.Connection12(
        [job.server.address], heartbeats=(0, 0), reconnect_attempts_max=1, vhost=job.server.vhost
    )
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect(job.server.login, job.server.passcode, wait=False)
    times: list[float] = []
    try:
        if not listener.connected.wait(deadline.left()):
            raise TimeoutError("stomp.py did not connect")
        for i in range(warmup + count):
            listener.received.clear()
            rid = f"r-{i}"
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers={"receipt": rid})
            if not listener.received.wait(deadline.left()):
                raise TimeoutError(f"stomp.py: no receipt for send {i}")
            elapsed = time.perf_counter() - start
            if listener.receipt != rid:
                raise AssertionError(f"stomp.py: receipt {listener.receipt!r} for {rid!r}")
            if i >= warmup:
                times.append(elapsed)
    finally:
        conn.disconnect()
    return times


def _receipt_frames(job: Job, total: int) -> list[bytes]:
    return [
        frame(
            "SEND",
            {
                "destination": job.destination,
                "receipt": f"r-{i}",
                "content-length": str(len(workload.body(i))),
            },
            workload.body(i),
        )
        for i in range(total)
    ]


def _check_bare_receipt(answer: bytes, i: int, who: str) -> None:
    if not answer.startswith(b"RECEIPT") or b"\nreceipt-id:r-%d\n" % i not in answer + b"\n":
        raise AssertionError(f"{who}: {answer[:200]!r} is no receipt for {i}")


def bare_receipts(job: Job, reply_to: str, count: int, warmup: int) -> list[float]:
    """The floor of a send with a receipt: pre-encoded SENDs, each RECEIPT read up to
    its NUL and its ``receipt-id`` found in its bytes."""
    deadline = job.deadline()
    frames = _receipt_frames(job, warmup + count)
    times: list[float] = []
    with RawConnection(job.server, deadline) as conn:
        sock = conn.sock
        sock.settimeout(deadline.left())
        for i, send in enumerate(frames):
            start = time.perf_counter()
            sock.sendall(send)
            answer = conn.next_frame()
            elapsed = time.perf_counter() - start
            _check_bare_receipt(answer, i, "bare socket")
            if i >= warmup:
                times.append(elapsed)
    return times


def bare_async_receipts(
    job: Job, reply_to: str, count: int, warmup: int, backend: str = "asyncio"
) -> list[float]:
    """The floor of an event loop's send with a receipt: :func:`bare_receipts` in one
    task."""
    frames = _receipt_frames(job, warmup + count)
    check = functools.partial(_check_bare_receipt, who=f"bare {backend}")
    return _bare_async(job, None, frames, check, warmup, backend)


def receipt_senders(settings: Settings) -> list[tuple[str, Requester]]:
    found: list[tuple[str, Requester]] = [
        (STOMPY, stompy_sync_receipts),
        (STOMPY_ASYNCIO, stompy_async_receipts),
    ]
    if _has("trio"):
        found.append((STOMPY_TRIO, functools.partial(stompy_async_receipts, backend="trio")))
    if _has("stomp"):
        found.append((STOMPPY, stomppy_receipts))
    found.append((CEILING, bare_receipts))
    found.append((CEILING_ASYNCIO, bare_async_receipts))
    if _has("trio"):
        found.append((CEILING_TRIO, functools.partial(bare_async_receipts, backend="trio")))
    return [(who, sender) for who, sender in found if settings.wants(who)]


def requesters(settings: Settings) -> list[tuple[str, Requester]]:
    found: list[tuple[str, Requester]] = [
        (STOMPY, stompy_sync_requests),
        (STOMPY_ASYNCIO, stompy_async_requests),
        (STOMPY_REQUEST, stompy_request_api),
        (STOMPY_ASYNC_REQUEST, stompy_async_request_api),
    ]
    if _has("trio"):
        found.append((STOMPY_TRIO, functools.partial(stompy_async_requests, backend="trio")))
    if _has("stomp"):
        found.append((STOMPPY, stomppy_requests))
    if _has("stompman"):
        found.append((STOMPMAN, stompman_requests))
    found.append((CEILING, bare_requests))
    found.append((CEILING_ASYNCIO, bare_async_requests))
    if _has("trio"):
        found.append((CEILING_TRIO, functools.partial(bare_async_requests, backend="trio")))
    return [(who, requester) for who, requester in found if settings.wants(who)]


@contextmanager
def stompy_broker() -> Iterator[Server]:
    """stompy's test broker in a child process (``python -m stompy broker``)."""
    command = [sys.executable, "-m", "stompy", "broker", "--port", "0", "-q"]
    command += ["--heartbeat", "0,0"]
    with Child(command, ready="listening on", terminate=True) as child:
        address = child.line.rpartition("//")[2]
        host, _, port = address.rpartition(":")
        yield Server("stompy.testing", host, int(port), "guest", "guest")


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest sample at or above ``fraction``."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _limit(count: int) -> float:
    return 30.0 + count / 50  # generous: 20 ms per round trip


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    return {
        "round_trips": count,
        "warmup": _warmup(count),
        "rounds": _rounds(settings),
        "responder": "bare socket in a child process (benchmarks.rawstomp respond)",
        "receipts": f"send(receipt=True) to {RECEIPT_TOPIC}, nobody subscribed",
        "floor": "bare socket: pre-encoded frames, read up to the answer's NUL",
        "brokers": ["stompy.testing (python -m stompy broker, child process)", "rabbitmq"],
        "figure": "median over rounds of each round's p50 / p99, milliseconds",
    }


#: The targets of issue 36: a round trip's p50 at most 0.8x stomp.py's (a ratio of
#: 1.25 as :func:`ratio` takes it), its p99 at most stomp.py's, in each client; through
#: RabbitMQ, where the broker's share is larger, a p50 no worse than stomp.py's.
TARGETS: Final = tuple(
    Target(f"stompy.testing {what}{suffix}", STOMPPY, need, ours=who)
    for who in (STOMPY, STOMPY_ASYNCIO, STOMPY_TRIO)
    for what in ("", "receipt ")
    for suffix, need in (("p50", 1.25), ("p99", 1.0))
) + tuple(
    Target(f"rabbitmq {what}p50", STOMPPY, 1.0, ours=who)
    for who in (STOMPY, STOMPY_ASYNCIO, STOMPY_TRIO)
    for what in ("", "receipt ")
)


@register(
    GROUP,
    "request/reply and send(receipt=True) round trips through a broker (ms, lower is better)",
    describe=describe,
    targets=TARGETS,
)
def run(settings: Settings) -> list[Row]:
    count = _count(settings)
    rounds = _rounds(settings)
    warmup = _warmup(count)
    limit = _limit(count + warmup)
    rows: list[Row] = []
    servers: list[tuple[str, Callable[[], Any]]] = [("stompy.testing", stompy_broker)]
    if not settings.brokers:
        why: str | None = "skipped (--no-brokers)"
    else:
        why = unreachable(RABBITMQ)
    if why is None:
        servers.append(("rabbitmq", functools.partial(_existing, RABBITMQ)))
    for name, start in servers:
        try:
            measured = _measure(settings, start, count, warmup, limit, rounds, name)
        except (OSError, RuntimeError, TimeoutError) as exc:
            # The broker went away (or its responder could not start): say so, go on.
            log(settings, f"latency {name}: FAILED: {exc!r}")
            failed = {"all": f"failed: {exc!r}"[:200]}
            measured = {"": ({}, failed), "receipt ": ({}, failed)}
        for what, (results, failed) in measured.items():
            for suffix, fraction in (("p50", 0.50), ("p99", 0.99)):
                label = f"{name} {what}{suffix}"
                for who, per_round in results.items():
                    figures = tuple(percentile(times, fraction) * 1000 for times in per_round)
                    rows.append(
                        Row(GROUP, label, who, statistics.median(figures), "ms", False, figures)
                    )
                rows += failure_rows(GROUP, label, failed, "ms")
    if why is not None:
        log(settings, f"latency rabbitmq: {why}")
        for what in ("", "receipt "):
            for suffix in ("p50", "p99"):
                rows.append(
                    Row(GROUP, f"rabbitmq {what}{suffix}", "all", float("nan"), "ms", note=why)
                )
    return rows


Measured = tuple[dict[str, list[list[float]]], dict[str, str]]


def _measure(
    settings: Settings,
    start: Callable[[], Any],
    count: int,
    warmup: int,
    limit: float,
    rounds: int,
    name: str,
) -> dict[str, Measured]:
    """Every requester's and receipt sender's rounds against one broker, with its
    responder running; by benchmark (``""``: request/reply, ``"receipt "``)."""
    with start() as server:
        queue = unique_queue("requests")
        responder = responder_command(server, queue, limit * rounds * 20)
        with Child(responder, ready="READY"):
            log(settings, f"latency {name}: {count:,} round trips (+{warmup}), {rounds} rounds")
            job = Job(server, count, limit, destination=queue)
            runs = [
                (who, functools.partial(_one_run, requester, job, count, warmup))
                for who, requester in requesters(settings)
            ]
            replies = alternate_calls(runs, rounds, settings, name, _show)
            job = Job(server, count, limit, destination=RECEIPT_TOPIC)
            runs = [
                (who, functools.partial(_one_run, sender, job, count, warmup))
                for who, sender in receipt_senders(settings)
            ]
            receipts = alternate_calls(runs, rounds, settings, f"{name} receipt", _show)
            return {"": replies, "receipt ": receipts}


@contextmanager
def _existing(server: Server) -> Iterator[Server]:
    yield server


def _one_run(requester: Requester, job: Job, count: int, warmup: int) -> list[float]:
    reply_to = unique_queue("replies")
    times = requester(job, reply_to, count, warmup)
    if len(times) != count:
        raise AssertionError(f"{len(times)} round trips timed, expected {count}")
    return times


def _show(times: list[float]) -> str:
    p50 = percentile(times, 0.5) * 1000
    p99 = percentile(times, 0.99) * 1000
    return f"p50 {p50:7.3f} ms  p99 {p99:7.3f} ms"

"""Request / reply latency through a broker: p50 and p99 of one round trip, in ms.

The requester (the contender) subscribes to its own reply queue, then, one request
at a time, sends a request (``reply-to`` and ``correlation-id`` headers, a 100-byte
body) and waits for the answer, checking its ``correlation-id``. A bare-socket
responder in a child process (:func:`benchmarks.rawstomp.respond`) answers each
request at once, so the figure is the requester's library twice (send, receive)
plus the broker twice; the first ``warmup`` round trips are not counted. The
``request()`` contenders (blocking, asyncio, trio) use stompy's request/reply API
instead: a temporary reply queue of the connection and stompy's correlation ids, as an
application would.

``receipt``: one ``send(receipt=True)`` at a time to a topic nobody subscribes to
(stomp.py: a ``receipt`` header and a listener's event), timed until the RECEIPT is in
the caller's hands: the library once each way plus the broker once.

The ``bare socket (ceiling)`` rows are the floor of both: a socket that writes a
pre-encoded frame and reads until the answer's NUL, which no client can beat. The
``bare asyncio (ceiling)`` and ``bare trio (ceiling)`` rows are the same exchange in one
task of that event loop (``loop.sock_sendall()`` / ``loop.sock_recv()``, ``trio.socket``):
the floor of an async client, what the event loop itself costs.

The contenders take turns (:func:`interleave`): this machine drifts on a scale of
seconds, so whole runs one after the other compared each contender with a different
machine. In a round, every contender runs in a thread of its own (an async one runs
its event loop there) and keeps its connection open; its first turn connects and warms
up, then the counted round trips are taken in slices (``--slice``, by default a
twentieth of the count), one contender's slice at a time, round and round, each slice
begun by :data:`REWARM` uncounted round trips. The others sleep on an event meanwhile
(no CPU, no GIL), so every contender's samples are spread over the same seconds, and
what is timed, one round trip, is what it was. Who goes first rotates from round to
round; a contender that fails (or holds its turn too long) is dropped, the others go
on. Each round's p50 / p99 is taken over all its slices; the figure is the median over
rounds, and each target's verdict shows the median of the rounds' own ratios beside it.

Brokers: stompy's own test broker (:mod:`stompy.testing`, run as ``python -m stompy
broker`` in a child process so that it does not share the client's GIL), and
RabbitMQ when it answers. Lower is better.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
    failure_rows,
    log,
    register,
)
from benchmarks.brokers import RABBITMQ, unique_queue, unreachable
from benchmarks.clients import CEILING, STOMPMAN, STOMPPY, Job, _has, _stompman_client
from benchmarks.rawstomp import Child, RawConnection, Server, frame, responder_command

GROUP: Final = "latency"
#: One requester's round: (job whose destination is the request queue, reply queue,
#: its round trips and turns) -> the counted round trips' seconds. A receipt sender is
#: one too: its destination is the topic, and it has no reply queue.
Requester = Callable[[Job, str, "Slices"], list[float]]
#: What the receipt senders send to: a topic, so that nothing piles up in the broker.
RECEIPT_TOPIC: Final = "/topic/stompy-bench-receipts"
#: stompy's own request/reply API (issue 19) beside the same exchange done by hand.
STOMPY_REQUEST: Final = "stompy request()"
STOMPY_ASYNC_REQUEST: Final = "stompy (asyncio) request()"
STOMPY_TRIO_REQUEST: Final = "stompy (trio) request()"
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


def _slice(settings: Settings, count: int) -> int:
    """Counted round trips per turn: ``--slice``, else a twentieth of the count."""
    return min(count, settings.slice or max(1, -(-count // 20)))


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


def stompy_sync_requests(job: Job, reply_to: str, slices: Slices) -> list[float]:
    deadline = job.deadline()
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        sub = conn.subscribe(reply_to, ack="auto", receipt=True)
        for i in range(slices.total):
            counted = slices.take(i)
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers=_request_headers(reply_to, i))
            reply = sub.get(timeout=deadline.left())
            elapsed = time.perf_counter() - start
            if reply is None:
                raise TimeoutError(f"no reply to request {i}")
            _check_reply(reply.headers, i, STOMPY)
            if counted:
                times.append(elapsed)
    return times


def stompy_async_requests(
    job: Job, reply_to: str, slices: Slices, backend: str = "asyncio"
) -> list[float]:
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                sub = await conn.subscribe(reply_to, ack="auto", receipt=True)
                for i in range(slices.total):
                    counted = slices.take(i)
                    start = time.perf_counter()
                    await conn.send(
                        job.destination, workload.body(i), headers=_request_headers(reply_to, i)
                    )
                    reply = await sub.get()
                    elapsed = time.perf_counter() - start
                    if reply is None:
                        raise ConnectionError(f"reply subscription ended at request {i}")
                    _check_reply(reply.headers, i, f"stompy ({backend})")
                    if counted:
                        times.append(elapsed)
                await sub.unsubscribe()
        return times

    return anyio.run(main, backend=backend)


def stompy_request_api(job: Job, reply_to: str, slices: Slices) -> list[float]:
    """``Connection.request()``: the reply queue is the connection's own temporary
    queue (``reply_to`` is not used), the correlation id stompy's."""
    deadline = job.deadline()
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        for i in range(slices.total):
            counted = slices.take(i)
            start = time.perf_counter()
            reply = conn.request(job.destination, workload.body(i), timeout=deadline.left())
            elapsed = time.perf_counter() - start
            if reply.body != workload.body(i):
                raise AssertionError(f"{STOMPY_REQUEST}: a reply to another request at {i}")
            if counted:
                times.append(elapsed)
    return times


def stompy_async_request_api(
    job: Job, reply_to: str, slices: Slices, backend: str = "asyncio"
) -> list[float]:
    """``await AsyncConnection.request()``, as :func:`stompy_request_api`."""
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                for i in range(slices.total):
                    counted = slices.take(i)
                    start = time.perf_counter()
                    reply = await conn.request(job.destination, workload.body(i), timeout=10.0)
                    elapsed = time.perf_counter() - start
                    if reply.body != workload.body(i):
                        raise AssertionError(f"request(): a reply to another request at {i}")
                    if counted:
                        times.append(elapsed)
        return times

    return anyio.run(main, backend=backend)


def stomppy_requests(job: Job, reply_to: str, slices: Slices) -> list[float]:
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
        for i in range(slices.total):
            counted = slices.take(i)
            listener.replied.clear()
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers=_request_headers(reply_to, i))
            if not listener.replied.wait(deadline.left()):
                raise TimeoutError(f"stomp.py: no reply to request {i}")
            elapsed = time.perf_counter() - start
            _check_reply(listener.reply.headers, i, STOMPPY)
            if counted:
                times.append(elapsed)
    finally:
        conn.disconnect()
    return times


def stompman_requests(job: Job, reply_to: str, slices: Slices) -> list[float]:
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
            for i in range(slices.total):
                counted = slices.take(i)
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
                if counted:
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


def bare_requests(job: Job, reply_to: str, slices: Slices) -> list[float]:
    """The floor of a round trip: pre-encoded SENDs written to a socket, each answer
    read up to its NUL and its ``correlation-id`` found in its bytes."""
    deadline = job.deadline()
    frames = _request_frames(job, reply_to, slices.total)
    times: list[float] = []
    with RawConnection(job.server, deadline) as conn:
        _subscribed(conn, reply_to)
        sock = conn.sock
        sock.settimeout(deadline.left())
        for i, request in enumerate(frames):
            counted = slices.take(i)
            start = time.perf_counter()
            sock.sendall(request)
            reply = conn.next_frame()
            elapsed = time.perf_counter() - start
            _check_bare_reply(reply, i, "bare socket")
            if counted:
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
    slices: Slices,
) -> list[float]:
    """Each frame written and its answer read up to its NUL, in one task."""
    times: list[float] = []
    buffer = b""
    for i, request in enumerate(frames):
        counted = slices.take(i)
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
        if counted:
            times.append(elapsed)
    return times


def _bare_async(
    job: Job,
    reply_to: str | None,
    frames: list[bytes],
    check: Callable[[bytes, int], None],
    slices: Slices,
    backend: str,
) -> list[float]:
    """:func:`_bare_exchange` on a connection made (and subscribed) by
    :class:`RawConnection`, its socket then read and written by the event loop:
    ``loop.sock_sendall()`` / ``loop.sock_recv()`` on asyncio, ``trio.socket`` on trio
    (subscribed to ``reply_to`` first, unless it is ``None``)."""
    deadline = job.deadline()
    with RawConnection(job.server, deadline) as conn:
        if conn.buffer.strip(b"\r\n"):  # RabbitMQ writes an EOL after each frame
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
                            frames, send, lambda: tsock.recv(256 * 1024), check, slices
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
                slices,
            )

        return asyncio.run(asyncio.wait_for(asyncio_main(), deadline.left()))


def bare_async_requests(
    job: Job, reply_to: str, slices: Slices, backend: str = "asyncio"
) -> list[float]:
    """The floor of an event loop's round trip: :func:`bare_requests` in one task."""
    frames = _request_frames(job, reply_to, slices.total)
    check = functools.partial(_check_bare_reply, who=f"bare {backend}")
    return _bare_async(job, reply_to, frames, check, slices, backend)


# -- send(receipt=True) ----------------------------------------------------------------------


def stompy_sync_receipts(job: Job, reply_to: str, slices: Slices) -> list[float]:
    times: list[float] = []
    with stompy.Connection(job.server.url, **_options(job)) as conn:
        for i in range(slices.total):
            counted = slices.take(i)
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), receipt=True)
            elapsed = time.perf_counter() - start
            if counted:
                times.append(elapsed)
    return times


def stompy_async_receipts(
    job: Job, reply_to: str, slices: Slices, backend: str = "asyncio"
) -> list[float]:
    import anyio

    async def main() -> list[float]:
        times: list[float] = []
        with anyio.fail_after(job.limit):
            async with stompy.AsyncConnection(job.server.url, **_options(job)) as conn:
                for i in range(slices.total):
                    counted = slices.take(i)
                    start = time.perf_counter()
                    await conn.send(job.destination, workload.body(i), receipt=True)
                    elapsed = time.perf_counter() - start
                    if counted:
                        times.append(elapsed)
        return times

    return anyio.run(main, backend=backend)


def stomppy_receipts(job: Job, reply_to: str, slices: Slices) -> list[float]:
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
        for i in range(slices.total):
            counted = slices.take(i)
            listener.received.clear()
            rid = f"r-{i}"
            start = time.perf_counter()
            conn.send(job.destination, workload.body(i), headers={"receipt": rid})
            if not listener.received.wait(deadline.left()):
                raise TimeoutError(f"stomp.py: no receipt for send {i}")
            elapsed = time.perf_counter() - start
            if listener.receipt != rid:
                raise AssertionError(f"stomp.py: receipt {listener.receipt!r} for {rid!r}")
            if counted:
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


def bare_receipts(job: Job, reply_to: str, slices: Slices) -> list[float]:
    """The floor of a send with a receipt: pre-encoded SENDs, each RECEIPT read up to
    its NUL and its ``receipt-id`` found in its bytes."""
    deadline = job.deadline()
    frames = _receipt_frames(job, slices.total)
    times: list[float] = []
    with RawConnection(job.server, deadline) as conn:
        sock = conn.sock
        sock.settimeout(deadline.left())
        for i, send in enumerate(frames):
            counted = slices.take(i)
            start = time.perf_counter()
            sock.sendall(send)
            answer = conn.next_frame()
            elapsed = time.perf_counter() - start
            _check_bare_receipt(answer, i, "bare socket")
            if counted:
                times.append(elapsed)
    return times


def bare_async_receipts(
    job: Job, reply_to: str, slices: Slices, backend: str = "asyncio"
) -> list[float]:
    """The floor of an event loop's send with a receipt: :func:`bare_receipts` in one
    task."""
    frames = _receipt_frames(job, slices.total)
    check = functools.partial(_check_bare_receipt, who=f"bare {backend}")
    return _bare_async(job, None, frames, check, slices, backend)


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
        trio_api = functools.partial(stompy_async_request_api, backend="trio")
        found.append((STOMPY_TRIO_REQUEST, trio_api))
    if _has("stomp"):
        found.append((STOMPPY, stomppy_requests))
    if _has("stompman"):
        found.append((STOMPMAN, stompman_requests))
    found.append((CEILING, bare_requests))
    found.append((CEILING_ASYNCIO, bare_async_requests))
    if _has("trio"):
        found.append((CEILING_TRIO, functools.partial(bare_async_requests, backend="trio")))
    return [(who, requester) for who, requester in found if settings.wants(who)]


# -- slices and turns: every contender's round trips spread over the same seconds ----------

#: Uncounted round trips at the start of every slice.
REWARM: Final = 2


def _no_hand_off() -> None:
    pass


@dataclass(frozen=True)
class Slices:
    """One contender's round trips in one round, and where it hands the turn on.

    ``warmup`` uncounted round trips first (in the turn that also connects), then the
    ``count`` counted ones in slices of ``size``, each slice a turn of its own, begun by
    ``rewarm`` uncounted round trips (the first after a sleep pays for cold caches and a
    thread's wake-up: no slice's figures carry it). A requester calls :meth:`take`
    before each round trip, outside its timer; the round trip itself is what it was.
    """

    count: int
    warmup: int
    size: int
    #: Called where a slice begins: returns once the turn has come round again.
    hand_off: Callable[[], None] = _no_hand_off
    rewarm: int = REWARM

    @property
    def slices(self) -> int:
        return -(-self.count // self.size)

    @property
    def total(self) -> int:
        """Round trips to make, counted or not."""
        return self.warmup + self.count + self.rewarm * self.slices

    def take(self, i: int) -> bool:
        """Before round trip ``i``: hands the turn on where a slice begins; whether
        ``i`` is counted."""
        k = i - self.warmup
        if k < 0:
            return False
        offset = k % (self.size + self.rewarm)
        if offset == 0:
            self.hand_off()
        return offset >= self.rewarm


# -- turns: every contender's slices spread over the same seconds ----------------------------


class TurnLost(Exception):
    """The contender held its turn longer than the round allows: it was skipped."""


class Turns:
    """Contenders of one round, one thread each, taking turns: only the holder runs.

    Every other contender's thread sleeps on its own :class:`threading.Event` (no CPU,
    no GIL), so a hand-off wakes exactly one thread. The order is the one given, round
    and round: the first turn of each is its connection's set-up and warm-up, then one
    slice of counted round trips per turn, each one's last turn ending with its
    teardown (:meth:`leave`). A contender that leaves early (it failed) is skipped from
    then on. Waits are bounded: a waiter that slept ``turn_limit`` seconds takes the
    turn from a holder that has had it that long (that contender is then dropped,
    :class:`TurnLost` on its next hand-off), and gives up (``TimeoutError``) at
    ``deadline`` (a :func:`time.monotonic` time).
    """

    def __init__(self, names: Sequence[str], turn_limit: float, deadline: float) -> None:
        self._active = list(names)
        self._wake = {name: threading.Event() for name in names}
        self._lock = threading.Lock()
        self._queue: deque[str] = deque()
        self._holder: str | None = None
        self._since = time.monotonic()
        self._turn_limit = turn_limit
        self._deadline = deadline
        #: Why a contender lost its turn, by name.
        self.lost: dict[str, str] = {}
        #: Every turn given, in order: who ran when.
        self.order: list[str] = []
        with self._lock:
            self._advance()

    def _advance(self) -> None:
        """Give the turn to the next active contender (the lock held)."""
        while self._queue and self._queue[0] not in self._active:
            self._queue.popleft()
        if not self._queue:
            self._queue.extend(self._active)
        self._holder = self._queue.popleft() if self._queue else None
        self._since = time.monotonic()
        if self._holder is not None:
            self.order.append(self._holder)
            self._wake[self._holder].set()

    def wait(self, name: str) -> None:
        """Sleep until ``name`` holds the turn."""
        wake = self._wake[name]
        while not wake.wait(max(0.0, min(self._turn_limit, self._deadline - time.monotonic()))):
            with self._lock:
                if name in self.lost:
                    raise TurnLost(self.lost[name])
                holder = self._holder
                if holder is not None and time.monotonic() - self._since >= self._turn_limit:
                    self.lost[holder] = f"held its turn over {self._turn_limit:g} s"
                    self._drop(holder)
                    continue
            if time.monotonic() >= self._deadline:
                raise TimeoutError(f"{name}: no turn before the round's time limit")
        if name in self.lost:
            raise TurnLost(self.lost[name])

    def hand_off(self, name: str) -> None:
        """``name`` is done with its turn: the next one runs; back when it comes round."""
        with self._lock:
            if name in self.lost:
                raise TurnLost(self.lost[name])
            self._wake[name].clear()
            self._advance()
        self.wait(name)

    def leave(self, name: str) -> None:
        """``name`` is done with the round (or failed): skipped from now on."""
        with self._lock:
            self._drop(name)

    def _drop(self, name: str) -> None:
        if name in self._active:
            self._active.remove(name)
        self._wake[name].clear()
        if self._holder == name:
            self._advance()


#: One contender's round: its slices in, its counted round trips' seconds out.
Run = Callable[[Slices], list[float]]


def interleave(
    contenders: Sequence[tuple[str, Run]],
    rounds: int,
    settings: Settings,
    label: str,
    shape: Slices,
    limit: float,
    turn_limit: float,
) -> tuple[dict[str, list[list[float]]], dict[str, str], list[list[str]]]:
    """Every contender's rounds, their slices taking turns (:class:`Turns`).

    Per round, each contender runs in a thread of its own (an async one runs its event
    loop there), connects and warms up in its first turn, then takes one slice of
    ``shape`` per turn; the order of the turns rotates from round to round (who goes
    first), as :func:`benchmarks._core.alternate_calls` rotates whole runs. A
    contender that raises, or loses its turn, is dropped from later rounds and its
    error returned in the second dict; the others go on. The garbage collector is
    emptied as each contender's round begins, outside the timer. A round ends by
    ``limit`` seconds. Returns each contender's rounds, the failures, and each round's
    order of turns.
    """
    results: dict[str, list[list[float]]] = {name: [] for name, _ in contenders}
    failed: dict[str, str] = {}
    orders: list[list[str]] = []
    for index in range(rounds):
        shift = index % len(contenders) if contenders else 0
        live = [
            (n, run) for n, run in (*contenders[shift:], *contenders[:shift]) if n not in failed
        ]
        if not live:
            break
        deadline = time.monotonic() + limit
        turns = Turns([name for name, _ in live], turn_limit, deadline)
        got: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        threads = [
            threading.Thread(
                target=_take_turns,
                args=(name, run, turns, shape, got, errors),
                name=f"latency {name}",
                daemon=True,  # one that never returns must not keep the process
            )
            for name, run in live
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()) + 5.0)
        orders.append(list(turns.order))
        for name, why in turns.lost.items():  # even one that then returned
            errors.setdefault(name, f"TurnLost({why!r})")
        for (name, _), thread in zip(live, threads, strict=True):
            if thread.is_alive():
                errors.setdefault(name, f"still running after the round's {limit:g} s")
            if name in errors:
                failed[name] = f"failed: {errors[name]}"[:200]
                log(settings, f"  {label} {name} FAILED: {errors[name]}")
                continue
            results[name].append(got[name])
            log(settings, f"  {label} round {index + 1}/{rounds} {name:<22} {_show(got[name])}")
    return {name: r for name, r in results.items() if name not in failed}, failed, orders


def _take_turns(
    name: str,
    run: Run,
    turns: Turns,
    shape: Slices,
    got: dict[str, list[float]],
    errors: dict[str, str],
) -> None:
    """One contender's thread: waits for its first turn, runs, leaves the round."""

    def hand_off() -> None:
        # No collection here: a full one every slice (every 25 ms or so) leaves the
        # processes of the chain idle meanwhile, and the slice after it ran 10-20% slower
        # for the fastest contenders (the bare socket's too) but not for stomp.py: it
        # measured the pause, not the client. Each contender's garbage is the automatic
        # collector's, as in real use.
        turns.hand_off(name)

    try:
        turns.wait(name)
        gc.collect()  # the round's start: what earlier rounds left is not timed
        got[name] = run(replace(shape, hand_off=hand_off))
    except BaseException as exc:  # reported by interleave(); the others go on
        errors[name] = repr(exc)
    finally:
        turns.leave(name)


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
        "slice": _slice(settings, count),
        "rewarm": REWARM,
        "rounds": _rounds(settings),
        "responder": "bare socket in a child process (benchmarks.rawstomp respond)",
        "receipts": f"send(receipt=True) to {RECEIPT_TOPIC}, nobody subscribed",
        "floor": "bare socket: pre-encoded frames, read up to the answer's NUL",
        "brokers": ["stompy.testing (python -m stompy broker, child process)", "rabbitmq"],
        "figure": "median over rounds of each round's p50 / p99, milliseconds",
        "interleaved": "per round every contender's connection stays open; the counted "
        "round trips are taken in slices, the contenders taking turns slice by slice",
    }


#: The targets of issue 36: a round trip's p50 at most 0.8x stomp.py's (a ratio of
#: 1.25 as :func:`ratio` takes it), its p99 at most stomp.py's, in each client, by
#: hand and through ``request()``; through RabbitMQ, where the broker's share is
#: larger, a p50 no worse than stomp.py's. Each verdict also shows the median of the
#: rounds' own ratios (``by_round``).
_REQUESTS: Final = (STOMPY_REQUEST, STOMPY_ASYNC_REQUEST, STOMPY_TRIO_REQUEST)
_BENCHMARKS: Final = tuple(
    (who, what)
    for who in (STOMPY, STOMPY_ASYNCIO, STOMPY_TRIO, *_REQUESTS)
    for what in (("",) if who in _REQUESTS else ("", "receipt "))
)
TARGETS: Final = tuple(
    Target(f"stompy.testing {what}{suffix}", STOMPPY, need, ours=who, by_round=True)
    for who, what in _BENCHMARKS
    for suffix, need in (("p50", 1.25), ("p99", 1.0))
) + tuple(
    Target(f"rabbitmq {what}p50", STOMPPY, 1.0, ours=who, by_round=True)
    for who, what in _BENCHMARKS
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
    shape = Slices(count, _warmup(count), _slice(settings, count))
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
            measured = _measure(settings, start, shape, rounds, name)
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
    shape: Slices,
    rounds: int,
    name: str,
) -> dict[str, Measured]:
    """Every requester's and receipt sender's rounds against one broker, with its
    responder running, interleaved by :func:`interleave`; by benchmark (``""``:
    request/reply, ``"receipt "``)."""
    # A contender's run now spans its round: every contender's round trips.
    contenders = max(len(requesters(settings)), len(receipt_senders(settings)), 1)
    limit = _limit(shape.total) * contenders
    turn = _limit(shape.warmup + shape.size + shape.rewarm)  # set-up, or one slice
    with start() as server:
        queue = unique_queue("requests")
        responder = responder_command(server, queue, limit * rounds * 2)
        with Child(responder, ready="READY"):
            log(
                settings,
                f"latency {name}: {shape.count:,} round trips (+{shape.warmup}) in slices "
                f"of {shape.size} (+{shape.rewarm}), {rounds} rounds",
            )
            measured: dict[str, Measured] = {}
            for what, destination, runners in (
                ("", queue, requesters(settings)),
                ("receipt ", RECEIPT_TOPIC, receipt_senders(settings)),
            ):
                job = Job(server, shape.count, limit, destination=destination)
                runs = [(who, functools.partial(_one_run, runner, job)) for who, runner in runners]
                label = f"{name} {what}".rstrip()
                results, failed, _ = interleave(runs, rounds, settings, label, shape, limit, turn)
                measured[what] = (results, failed)
            return measured


@contextmanager
def _existing(server: Server) -> Iterator[Server]:
    yield server


def _one_run(requester: Requester, job: Job, slices: Slices) -> list[float]:
    reply_to = unique_queue("replies")
    times = requester(job, reply_to, slices)
    if len(times) != slices.count:
        raise AssertionError(f"{len(times)} round trips timed, expected {slices.count}")
    return times


def _show(times: list[float]) -> str:
    p50 = percentile(times, 0.5) * 1000
    p99 = percentile(times, 0.99) * 1000
    return f"p50 {p50:7.3f} ms  p99 {p99:7.3f} ms"

"""What every flavour of the soak shares: settings, the tally, the faults, the resource checks.

The flavours (``_blocking``, ``_anyio``) only drive clients; what counts as lost, what a
call may take and what a leak is are decided here, once.
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Literal

import stompy
from stompy.errors import StompError
from stompy.testing import BrokerStats, FaultProxy

Flavour = Literal["blocking", "asyncio", "trio"]
FLAVOURS: Final[tuple[Flavour, ...]] = ("blocking", "asyncio", "trio")

#: The header that carries each message's soak id (``<worker>-<seq>``).
ID_HEADER: Final = "x-soak-id"
#: Both real brokers read their own prefetch header and ignore the other's.
PREFETCH: Final = {"prefetch-count": "200", "activemq.prefetchSize": "200"}
#: Messages a consumer takes per ``get_batch``.
BATCH: Final = 50
#: The header stompy puts on a send it repeats after its receipt was lost with its
#: connection (docs/reconnect.md): the first copy may have arrived.
RESENT_HEADER: Final = "stompy-resent"

#: Why a message came twice, each allowed by at-least-once delivery (docs/reconnect.md),
#: told apart by the copies' headers and the producers' retries; with what each means.
AGAIN: Final = {
    "redelivered": "the broker gave back an unacked message when its connection went",
    "resent": f"stompy repeated a send whose receipt was lost ({RESENT_HEADER})",
    "retried": "a send raised (ConnectionLost) and the producer sent the id again",
    "unexplained": "no copy says why",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """One soak run's knobs; every client timeout and every bound derives from these."""

    #: Seconds of producing under faults, per flavour x broker.
    duration: float = 10.0
    seed: int = 0
    #: Producer workers (threads or tasks) sharing one connection.
    producers: int = 2
    #: Messages per second, all producers together (0: as fast as receipts allow).
    rate: float = 200.0
    #: Seconds between faults, on average (each gap is 0.7 to 1.3 times this).
    fault_interval: float = 1.0
    receipt_timeout: float = 3.0
    connect_timeout: float = 3.0
    #: ``Reconnect.send_timeout``: how long an intent waits for a reconnect.
    send_timeout: float = 5.0
    #: ``Subscription.get_batch`` timeout.
    get_timeout: float = 0.5
    #: Heart-beats asked for both ways; the client declares the broker dead after
    #: ``heartbeat_ms * 2`` ms of silence (the default tolerance).
    heartbeat_ms: int = 1000
    #: After the faults end: how long the consumer may take to see every confirmed id.
    drain_timeout: float = 20.0
    #: Added to every bound: scheduling, a loaded CI machine.
    margin: float = 2.0
    #: How long threads and descriptors get to go away after everything was closed.
    settle_timeout: float = 10.0

    @property
    def reconnect(self) -> stompy.Reconnect:
        return stompy.Reconnect(initial_delay=0.05, max_delay=0.5, send_timeout=self.send_timeout)

    @property
    def heartbeats(self) -> tuple[int, int]:
        return (self.heartbeat_ms, self.heartbeat_ms)

    def bounds(self) -> dict[str, float]:
        """The longest each kind of call may block, in seconds.

        A send with a receipt may wait ``send_timeout`` for a reconnect and then
        ``receipt_timeout`` for its receipt (stompy repeats it on a new connection until
        ``send_timeout`` has passed); an ack waits for a reconnect like a send; ``close``
        waits for the DISCONNECT receipt, then for the I/O thread.
        """
        wait = self.send_timeout + self.receipt_timeout + self.margin
        return {
            "connect": self.connect_timeout + self.margin,
            "subscribe": wait,
            "send": wait,
            "get": self.get_timeout + self.margin,
            "ack": wait,
            "close": self.receipt_timeout + self.connect_timeout + self.margin,
        }


# -- the tally ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What producers confirmed and consumers saw; shared by the workers of one run."""

    bounds: dict[str, float]
    #: ``Reconnect.send_timeout``: a send that raised after it waited out a reconnect.
    send_timeout: float = 0.0
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    received: set[str] = field(default_factory=set)
    #: Duplicates by why they came again (:data:`AGAIN`'s keys).
    again: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Ids a producer sent again after a send of them raised.
    retried: set[str] = field(default_factory=set)
    #: The marks (``redelivered``, ``resent``) of the first copy of each id that had any.
    marked: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Ids received that no producer ever sent: a message altered on the way.
    unknown: int = 0
    send_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    ack_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    #: What makes the run fail besides loss: an exception that is no StompError, a
    #: connection that failed for good, a worker that did not end.
    problems: list[str] = field(default_factory=list)
    #: The longest call of each kind, in seconds.
    longest: dict[str, float] = field(default_factory=dict)
    #: Sends that raised once ``Reconnect.send_timeout`` had passed since they began: a
    #: reconnect that did not come in time (an outage longer than it).
    sends_timed_out: int = 0
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.calls += 1
            if seconds > self.longest.get(kind, 0.0):
                self.longest[kind] = seconds

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Measure the call inside the block (also when it raises)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.observe(kind, time.monotonic() - started)

    def attempt(self, message_id: str) -> None:
        with self.lock:
            self.attempted.add(message_id)

    def confirm(self, message_id: str) -> None:
        with self.lock:
            self.confirmed.add(message_id)

    def receive(self, headers: Mapping[str, str]) -> None:
        """Record a message by its headers: its id, and for a copy after the first, why
        it came again (:data:`AGAIN`)."""
        message_id = message_id_of(headers)
        marks = frozenset(_marks(headers))
        with self.lock:
            if message_id is None or message_id not in self.attempted:
                self.unknown += 1
            elif message_id in self.received:
                # Either copy may carry the mark: a repeat may overtake its first copy.
                marks |= self.marked.get(message_id, frozenset())
                if "redelivered" in marks:
                    self.again["redelivered"] += 1
                elif "resent" in marks:
                    self.again["resent"] += 1
                elif message_id in self.retried:
                    self.again["retried"] += 1
                else:
                    self.again["unexplained"] += 1
            else:
                self.received.add(message_id)
                if marks:
                    self.marked[message_id] = marks

    @property
    def duplicates(self) -> int:
        return sum(self.again.values())

    def retry(self, message_id: str) -> None:
        """A producer sends ``message_id`` again after a send of it raised."""
        with self.lock:
            self.retried.add(message_id)

    def send_failed(self, exc: Exception, seconds: float = 0.0) -> None:
        """A send raised after ``seconds``; at :attr:`send_timeout` or later, it waited
        that long for a reconnect and is counted in :attr:`sends_timed_out`."""
        if self.send_timeout and seconds >= self.send_timeout:
            with self.lock:
                self.sends_timed_out += 1
        self._failed(self.send_errors, "send", exc)

    def ack_failed(self, exc: Exception) -> None:
        self._failed(self.ack_errors, "ack", exc)

    def _failed(self, counter: collections.Counter[str], what: str, exc: Exception) -> None:
        with self.lock:
            counter[type(exc).__name__] += 1
            if not isinstance(exc, StompError):
                # The clients translate every I/O error at their boundary: anything
                # else reaching the user is a bug.
                self.problem(f"{what} raised {exc!r}, not a StompError")

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:  # the first ones tell the story
            self.problems.append(text)

    def all_received(self) -> bool:
        with self.lock:
            return self.confirmed <= self.received

    @property
    def lost(self) -> int:
        with self.lock:
            return len(self.confirmed - self.received)

    def over_bound(self) -> list[str]:
        """Each kind of call whose longest exceeded its bound."""
        return [
            f"{kind} blocked {seconds:.2f} s > bound {self.bounds[kind]:.1f} s"
            for kind, seconds in sorted(self.longest.items())
            if seconds > self.bounds[kind]
        ]


def message_id_of(headers: Mapping[str, str]) -> str | None:
    return headers.get(ID_HEADER)


def _marks(headers: Mapping[str, str]) -> Iterator[str]:
    if headers.get("redelivered") == "true":
        yield "redelivered"
    if RESENT_HEADER in headers:
        yield "resent"


class Pacer:
    """Spaces one producer's sends ``interval`` seconds apart (no catching up in bursts)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next = time.monotonic()

    def wait(self) -> float:
        """Seconds to sleep before the next send."""
        now = time.monotonic()
        self.next = max(self.next + self.interval, now - self.interval)
        return max(0.0, self.next - now)


# -- faults ---------------------------------------------------------------------------------

#: The faults of the soak, picked at random with equal weight.
#:
#: ``corrupt`` is left out on purpose. STOMP frames carry no checksum, so a flipped byte
#: inside a message body (in either direction) is a well-formed frame with other
#: content: a broker confirms the altered SEND, a client hands out the altered MESSAGE,
#: and no client can tell. Flipped inside the id header it would even make a confirmed
#: message arrive under another id and count as lost. That is TCP's job (and TLS's),
#: not something a STOMP client can be held to; tests/test_fault_proxy.py shows that a
#: corrupted frame *structure* is an ERROR or a ProtocolError.
FAULTS: Final = (
    "cut",  # every proxied connection, abruptly
    "cut_mid_frame",  # the next chunk one way is forwarded in part, then the connection ends
    "stall",  # both ways, shorter than the heart-beat window: only latency
    "stall_hb",  # both ways, past the heart-beat window: HeartbeatTimeout, reconnect
    "delay",  # latency on every chunk for a while
    "throttle",  # a slow link for a while
    "refuse",  # new connections turned away (closed or held) for a while, then a cut
)


class Faulter:
    """A thread that injects a random fault about every ``fault_interval`` seconds.

    ``stop()`` ends it and heals the proxy (``reset()``) from that thread, so an event
    loop never blocks on the proxy. Faults are drawn from a ``random.Random`` seeded
    with the run's seed and broker: the same sequence every time, for every flavour.
    """

    def __init__(self, proxy: FaultProxy, settings: Settings, seed: str) -> None:
        self.proxy = proxy
        self.settings = settings
        self.rng = random.Random(seed)
        self.injected: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-faulter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> bool:
        """Wait for the thread; whether it ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    def _run(self) -> None:
        interval = self.settings.fault_interval
        # Bounded: one round per interval (at least 0.7 of it) until stop().
        rounds = int(1e6)
        try:
            for _ in range(rounds):
                if self._stop.wait(interval * self.rng.uniform(0.7, 1.3)):
                    break
                kind = self.rng.choice(FAULTS)
                self.inject(kind)
                self.injected[kind] += 1
        except Exception as exc:  # a proxy bug: report it, the run fails
            self.problems.append(f"fault proxy raised {exc!r}")
        finally:
            try:
                self.proxy.reset()
            except Exception as exc:
                self.problems.append(f"fault proxy reset raised {exc!r}")

    def inject(self, kind: str) -> None:
        proxy, rng = self.proxy, self.rng
        window = self.settings.heartbeat_ms / 1000 * 2  # the client's silence limit
        if kind == "cut":
            proxy.cut()
        elif kind == "cut_mid_frame":
            direction = rng.choice(("upstream", "downstream"))
            proxy.cut_mid_frame(direction, keep=rng.randint(1, 60))  # type: ignore[arg-type]
        elif kind == "stall":
            proxy.stall(rng.uniform(0.1, 0.4) * window)
        elif kind == "stall_hb":
            proxy.stall(window + rng.uniform(0.5, 1.5))
        elif kind == "delay":
            proxy.delay(rng.uniform(0.02, 0.3))
            proxy.delay(0, after=rng.uniform(0.3, 0.9))
        elif kind == "throttle":
            proxy.throttle(rng.choice((2_000, 10_000, 50_000)))
            proxy.throttle(None, after=rng.uniform(0.3, 0.9))
        elif kind == "refuse":
            mode = rng.choice(("close", "hold"))
            proxy.refuse(rng.uniform(0.3, 2.0), mode=mode)  # type: ignore[arg-type]
            proxy.cut()
        else:  # pragma: no cover - FAULTS and this chain are kept in step
            raise ValueError(f"unknown fault {kind!r}")


def refused(before: BrokerStats, after: BrokerStats) -> str | None:
    """Why a run fails for the in-process broker's ERROR frames between two snapshots
    of its counters, or ``None``.

    No fault alters a frame (``corrupt`` is left out), so a client's frames are always
    well formed and its own: an ERROR other than a heart-beat timeout (``stall_hb``
    makes those) answered a frame a correct client does not send, such as an ACK of a
    message of an earlier connection. One such ERROR ends the connection and, with it,
    unacknowledged messages come again; a client that keeps doing it never drains.
    """
    errors = after.errors_sent - before.errors_sent
    errors -= after.heartbeat_timeouts - before.heartbeat_timeouts
    if errors <= 0:
        return None
    return (
        f"the broker answered {errors} frame(s) with an ERROR (not a heart-beat timeout): "
        "the clients' log says why (--log-level WARNING)"
    )


# -- resources ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resources:
    """What a leak would make grow. ``tasks`` is ``None`` outside an event loop."""

    threads: int
    fds: int
    rss_kb: int
    tasks: int | None = None


def resources() -> Resources:
    return Resources(threading.active_count(), _fds(), _rss_kb())


def _fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir opened
    except OSError:  # pragma: no cover - not Linux
        return -1


def _rss_kb() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        pass
    return -1  # pragma: no cover


def settled(before: Resources, timeout: float) -> Resources:
    """Resources once threads and descriptors are back to ``before`` (or ``timeout`` passed).

    Closing is asynchronous in places (the in-process broker closes its side when it
    reads the end of stream; a trio thread ends when it is told), so a leak is what is
    still there after a while, not what is there at once.
    """
    deadline = time.monotonic() + timeout
    while True:  # bounded by the deadline
        now = resources()
        if (now.threads <= before.threads and now.fds <= before.fds) or (
            time.monotonic() >= deadline
        ):
            return now
        time.sleep(0.05)


# -- results --------------------------------------------------------------------------------


@dataclass
class Result:
    """One flavour x broker run."""

    flavour: str
    broker: str
    tally: Tally
    faults: collections.Counter[str]
    before: Resources
    after: Resources
    seconds: float
    proxy_cuts: int = 0
    proxy_connections: int = 0
    skipped: str | None = None

    @property
    def leaks(self) -> list[str]:
        found = []
        if self.after.threads > self.before.threads:
            found.append(f"threads {self.before.threads} -> {self.after.threads}")
        if self.after.fds > self.before.fds:
            found.append(f"file descriptors {self.before.fds} -> {self.after.fds}")
        if (
            self.before.tasks is not None
            and self.after.tasks is not None
            and self.after.tasks > self.before.tasks
        ):
            found.append(f"tasks {self.before.tasks} -> {self.after.tasks}")
        return found

    @property
    def failures(self) -> list[str]:
        if self.skipped is not None:
            return []
        tally = self.tally
        found = []
        if tally.lost:
            found.append(f"{tally.lost} confirmed message(s) lost")
        if tally.unknown:
            found.append(f"{tally.unknown} message(s) with an id never sent")
        if not tally.confirmed:
            found.append("nothing was confirmed: the soak tested nothing")
        found += tally.over_bound()
        found += self.leaks
        found += tally.problems
        return found

    @property
    def ok(self) -> bool:
        return not self.failures

    def longest(self) -> tuple[str, float]:
        """The kind of call that came closest to its bound, and its longest time."""
        longest = self.tally.longest
        if not longest:
            return ("-", 0.0)
        bounds = self.tally.bounds
        kind = max(longest, key=lambda k: longest[k] / bounds[k])
        return kind, longest[kind]


def skipped(flavour: str, broker: str, reason: str) -> Result:
    empty = Resources(0, 0, 0)
    return Result(
        flavour, broker, Tally({}), collections.Counter(), empty, empty, 0.0, skipped=reason
    )


COLUMNS: Final = (
    "flavour",
    "broker",
    "confirmed",
    "received",
    "lost",
    "dups",
    "faults",
    "send errs",
    "longest call / bound",
    "threads",
    "fds",
    "tasks",
    "RSS MB",
    "verdict",
)


def _arrow(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return "-"
    return f"{before}->{after}"


def row(result: Result) -> list[str]:
    if result.skipped is not None:
        return [result.flavour, result.broker, *["-"] * (len(COLUMNS) - 3), "SKIP"]
    tally = result.tally
    kind, seconds = result.longest()
    bound = tally.bounds.get(kind, 0.0)
    return [
        result.flavour,
        result.broker,
        str(len(tally.confirmed)),
        str(len(tally.received)),
        str(tally.lost),
        str(tally.duplicates),
        str(sum(result.faults.values())),
        str(sum(tally.send_errors.values())),
        f"{seconds:.2f} s {kind} / {bound:.1f} s",
        _arrow(result.before.threads, result.after.threads),
        _arrow(result.before.fds, result.after.fds),
        _arrow(result.before.tasks, result.after.tasks),
        f"{result.before.rss_kb / 1024:.0f}->{result.after.rss_kb / 1024:.0f}",
        "ok" if result.ok else "FAIL",
    ]


def table(results: list[Result]) -> str:
    """A Markdown table, one row per flavour x broker (so it pastes into the docs)."""
    rows = [list(COLUMNS), *(row(r) for r in results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def details(result: Result) -> str:
    """The lines under the table: fault mix, errors, and why a row failed or was skipped."""
    head = f"{result.flavour} x {result.broker}:"
    if result.skipped is not None:
        return f"{head} skipped: {result.skipped}"
    tally = result.tally
    faults = ", ".join(f"{k} {n}" for k, n in sorted(result.faults.items())) or "none"
    sends = ", ".join(f"{k} {n}" for k, n in sorted(tally.send_errors.items())) or "none"
    acks = ", ".join(f"{k} {n}" for k, n in sorted(tally.ack_errors.items())) or "none"
    longest = ", ".join(f"{k} {v:.2f}" for k, v in sorted(tally.longest.items()))
    lines = [
        f"{head} {result.seconds:.1f} s, {len(tally.attempted)} ids sent, {tally.calls} calls,"
        f" {result.proxy_connections} proxied connections ({result.proxy_cuts} cut)",
        f"  faults: {faults}",
        f"  send errors: {sends}; ack errors: {acks}",
        f"  longest (s): {longest}",
    ]
    if tally.sends_timed_out:
        lines.append(
            f"  {tally.sends_timed_out} send(s) raised after Reconnect.send_timeout"
            f" ({tally.send_timeout:g} s since the call began) without a reconnect: an outage"
            " outlasted it, as docs/reconnect.md says; the producer sent the id again"
        )
    if tally.duplicates:
        why = "; ".join(f"{kind} {n} ({AGAIN[kind]})" for kind, n in sorted(tally.again.items()))
        lines.append(f"  duplicates (at least once): {why}")
    lines += [f"  FAIL: {text}" for text in result.failures]
    return "\n".join(lines)

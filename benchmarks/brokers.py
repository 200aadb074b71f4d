"""End to end through real brokers: RabbitMQ and ActiveMQ, when they answer.

The same client code as :mod:`benchmarks.clients`, pointed at a broker (RabbitMQ on
127.0.0.1:61613, virtual host ``/``; ActiveMQ on 127.0.0.1:61614; guest/guest; both
started by ``bash ci/brokers/start.sh all``). A broker that does not answer a STOMP
CONNECT within a few seconds is skipped, and said so in the table.

* ``publish``: ``count`` SENDs to a fresh queue, the last with a receipt; timed from
  the first send to that receipt. Afterwards (untimed) a bare socket drains the queue
  and checks that every message arrived, the last one last.
* ``consume (auto)`` / ``consume (client-individual)``: a bare socket fills a fresh
  queue with ``count`` messages (untimed), then the client subscribes and takes them
  all, acking each one in ``client-individual``; timed from the subscribe call to the
  last message in hand (and acked).
* The ``bare socket (ceiling)`` row is what the broker itself does for a client that
  costs nothing: pre-encoded SEND frames written in one go, or MESSAGE frames counted
  (and acked by echoing their ``ack`` header). A client's share of it is printed.

Messages are not persistent (no disk in the loop); each run uses its own queue,
named ``/queue/stompy-bench-<pid>-<random>-<n>``, so that runs (and other users of
the brokers, such as the interop tests) never see each other's messages.
"""

from __future__ import annotations

import functools
import itertools
import os
import uuid
from dataclasses import replace
from typing import Any, Final

from benchmarks._core import (
    STOMPY,
    Row,
    Settings,
    Target,
    alternate_timed,
    failure_rows,
    log,
    register,
    rows_from_rates,
)
from benchmarks.clients import CEILING, Bench, Job, contenders, limit_for
from benchmarks.rawstomp import (
    Deadline,
    RawConnection,
    Server,
    check_sent_last,
    raw_consume,
    raw_publish,
)
from stompy import AckMode

GROUP: Final = "brokers"
RABBITMQ: Final = Server("rabbitmq", "127.0.0.1", 61613, "guest", "guest", vhost="/")
ACTIVEMQ: Final = Server("activemq", "127.0.0.1", 61614, "guest", "guest")
BROKERS: Final = (RABBITMQ, ACTIVEMQ)
#: The benchmarks run against each broker: (name suffix, kind, ack mode).
BENCHMARKS: Final[tuple[tuple[str, str, AckMode], ...]] = (
    ("publish", "publish", "auto"),
    ("consume (auto)", "consume", "auto"),
    ("consume (client-individual)", "consume", "client-individual"),
)

_serial = itertools.count()
_run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def unique_queue(tag: str) -> str:
    """A queue name no other run (or user of the broker) has used."""
    return f"/queue/stompy-bench-{_run_id}-{next(_serial)}-{tag}"


def _count(settings: Settings) -> int:
    return settings.pick_count(10_000, 2_000)


def _rounds(settings: Settings) -> int:
    return settings.pick_rounds(3, 1)


def unreachable(server: Server, timeout: float = 5.0) -> str | None:
    """Why ``server`` cannot be used (``None`` when it answered CONNECT)."""
    try:
        with RawConnection(server, Deadline(timeout)):
            return None
    except (OSError, TimeoutError, ConnectionError) as exc:
        return f"not reachable at {server.host}:{server.port} ({type(exc).__name__})"


def publish_run(bench: Bench, job: Job) -> float:
    """Time ``bench`` publishing to a fresh queue, then drain it and check every message."""
    job = replace(job, destination=unique_queue("pub"))
    elapsed = bench(job)
    _, last = raw_consume(job.server, job.destination, job.count, job.deadline())
    check_sent_last(last, job.count, "drain after publish")
    return elapsed


def consume_run(bench: Bench, job: Job) -> float:
    """Fill a fresh queue with a bare socket, then time ``bench`` taking everything."""
    job = replace(job, destination=unique_queue("con"))
    raw_publish(job.server, job.destination, job.count, job.deadline(), persistent=False)
    return bench(job)


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    return {
        "messages": count,
        "rounds": _rounds(settings),
        "time_limit_s": limit_for(count),
        "brokers": {s.name: f"{s.host}:{s.port} host={s.vhost or s.host}" for s in BROKERS},
        "persistent": False,
        "queues": "a fresh /queue/stompy-bench-... per run",
    }


@register(
    GROUP,
    "end to end through RabbitMQ / ActiveMQ, when reachable (msg/s)",
    targets=(Target("rabbitmq publish", CEILING, 0.8, ours=STOMPY),),
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    count = _count(settings)
    rounds = _rounds(settings)
    limit = limit_for(count)
    rows: list[Row] = []
    for server in BROKERS:
        for suffix, kind, ack in BENCHMARKS:
            name = f"{server.name} {suffix}"
            # Checked before each benchmark: a broker shared with other users (the
            # interop tests start and stop them) may come and go during the suite.
            why = "skipped (--no-brokers)" if not settings.brokers else unreachable(server)
            if why is not None:
                log(settings, f"brokers {name}: {why}")
                rows.append(Row(GROUP, name, "all", float("nan"), "msg/s", note=why))
                continue
            log(settings, f"brokers {name}: {count:,} messages, {rounds} rounds")
            job = Job(server, count, limit, ack=ack, persistent=False, identity="correlation-id")
            wrap = publish_run if kind == "publish" else consume_run
            runs = [
                (who, functools.partial(wrap, bench, job))
                for who, bench in contenders(kind, settings, trio=False)
            ]
            rates, failed = alternate_timed(runs, rounds, count, settings, name)
            rows += rows_from_rates(GROUP, name, rates, "msg/s")
            rows += failure_rows(GROUP, name, failed, "msg/s")
    return rows

"""No message lost: 10,000 messages through a broker restart and through a cut connection.

Both tests stream messages sent with receipts from producers on one
``stompy.Connection`` to a consumer on another, ``ack="client-individual"``, both
with ``reconnect`` on. Mid-stream the broker is restarted (its state kept), or the
consumer's connection is cut by a relay. The consumer must end up with every
message: duplicates are allowed (a message whose receipt or ACK was lost comes
again) and counted, none may be missing.

They take a while and the restart needs brokers started by ``ci/brokers``, so they
run only when ``STOMPY_INTEROP_RELIABILITY=1`` (``nox -s interop`` sets it).
Figures go to the terminal summary.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

import stompy
from stompy.errors import StompError
from tests.interop._support import RESULTS, BrokerTarget, CuttableProxy, restart_broker

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(
        os.environ.get("STOMPY_INTEROP_RELIABILITY") != "1",
        reason="long: set STOMPY_INTEROP_RELIABILITY=1 (nox -s interop does)",
    ),
]

COUNT = 10_000
PRODUCERS = 8  # threads sharing one connection: receipts pipeline, ~1,000 msg/s
#: Bounds for the whole stream; a loaded machine needs far less.
DEADLINE = 240.0
POLICY = stompy.Reconnect(initial_delay=0.2, max_delay=1.0, send_timeout=120.0)
#: Both brokers read their own prefetch header and ignore the other's.
PREFETCH = {"prefetch-count": "500", "activemq.prefetchSize": "500"}


@dataclass
class Tally:
    """What the consumer saw, by sequence number."""

    counts: collections.Counter[int] = field(default_factory=collections.Counter)
    redelivered: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def received(self) -> int:
        return sum(self.counts.values())

    @property
    def duplicates(self) -> int:
        return self.received - len(self.counts)


def produce(conn: stompy.Connection, destination: str, deadline: float) -> int:
    """Send 0..COUNT-1, each with a receipt, from PRODUCERS threads; return the retries.

    A send that raises (the connection went while it waited for its receipt) is sent
    again: the broker may have it already, so the retry may be a duplicate.
    """
    retries = [0] * PRODUCERS
    failures: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            for seq in range(worker, COUNT, PRODUCERS):
                for _attempt in range(100):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"producer {worker} stuck at message {seq}")
                    try:
                        conn.send(
                            destination,
                            str(seq),
                            headers={"persistent": "true", "x-seq": str(seq)},
                            receipt=True,
                        )
                        break
                    except StompError:
                        retries[worker] += 1
                else:
                    raise AssertionError(f"message {seq}: 100 attempts failed")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 5.0)
    assert not any(t.is_alive() for t in threads), "a producer did not finish"
    if failures:
        raise failures[0]
    return sum(retries)


def consume(
    conn: stompy.Connection,
    destination: str,
    tally: Tally,
    deadline: float,
    on_message: Callable[[stompy.Message, int], bool] | None = None,
) -> None:
    """Take messages until every sequence number was seen (or the deadline).

    ``on_message(message, received_so_far)`` may return False to leave the message
    unacknowledged.
    """
    sub = conn.subscribe(destination, ack="client-individual", headers=PREFETCH, receipt=True)
    try:
        while len(tally.counts) < COUNT and time.monotonic() < deadline:
            try:
                message = sub.get(timeout=0.5)
            except StompError as exc:  # the connection is gone for good
                tally.errors.append(f"consumer: {exc!r}")
                return
            if message is None:
                continue
            with tally.lock:
                tally.counts[int(message.text)] += 1
                tally.redelivered += message.redelivered
                received = tally.received
            if on_message is not None and not on_message(message, received):
                continue
            try:
                message.ack()  # a message of an earlier connection: ignored, redelivered
            except StompError as exc:
                tally.errors.append(f"ack: {exc!r}")
    finally:
        tally.done.set()


def report(kind: str, what: str, tally: Tally, retries: int, seconds: float) -> str:
    line = (
        f"{kind} {what}: {COUNT} messages sent, {len(tally.counts)} distinct received, "
        f"{tally.duplicates} duplicates ({tally.redelivered} marked redelivered), "
        f"{retries} sends retried, {seconds:.1f} s"
    )
    RESULTS.append(line)
    return line


def check(tally: Tally) -> None:
    missing = sorted(set(range(COUNT)) - set(tally.counts))
    assert not missing, f"{len(missing)} messages lost, first {missing[:10]}; {tally.errors}"
    assert set(tally.counts) == set(range(COUNT))


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_broker_restart_mid_stream(broker: BrokerTarget, unique: str, how: str) -> None:
    """Stop (or kill with SIGKILL) and restart the broker while 10,000 persistent
    messages stream through it: a message whose receipt came is never lost."""
    if os.environ.get("STOMPY_BROKER_RESTART") != "1" or broker.kind not in (
        "rabbitmq",
        "activemq",
    ):
        pytest.skip("restarts only brokers started by ci/brokers (STOMPY_BROKER_RESTART=1)")
    if how == "kill" and broker.kind != "rabbitmq":
        pytest.skip("SIGKILL mid-stream: RabbitMQ (its receipts confirm a persisted message)")
    destination = f"/queue/stompy-restart-{unique}"
    tally = Tally()
    restart: list[str] = []
    start = time.monotonic()
    deadline = start + DEADLINE
    with (
        stompy.Connection(broker.url, reconnect=POLICY, receipt_timeout=10.0) as producer,
        stompy.Connection(broker.url, reconnect=POLICY, receipt_timeout=10.0) as consumer,
    ):
        consumer_thread = threading.Thread(
            target=consume, args=(consumer, destination, tally, deadline), daemon=True
        )
        consumer_thread.start()

        def restart_when_a_third_arrived() -> None:
            while len(tally.counts) < COUNT // 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            done = restart_broker(broker.kind, kill=how == "kill")
            restart.append(f"exit {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")

        restarter = threading.Thread(target=restart_when_a_third_arrived, daemon=True)
        restarter.start()
        retries = produce(producer, destination, deadline)
        restarter.join(timeout=max(0.0, deadline - time.monotonic()))
        assert tally.done.wait(timeout=max(0.0, deadline - time.monotonic()) + 5.0)
        consumer_thread.join(timeout=5.0)
    seconds = time.monotonic() - start
    print(report(broker.kind, how, tally, retries, seconds))
    assert restart, "the broker was not restarted"
    assert restart[0].startswith("exit 0"), restart[0]
    check(tally)


def test_consumer_connection_cut_mid_stream(broker: BrokerTarget, unique: str) -> None:
    """Cut the consumer's connection with a message unacked: it comes back, nothing is lost."""
    destination = f"/queue/stompy-cut-{unique}"
    tally = Tally()
    held: list[stompy.Message] = []
    start = time.monotonic()
    deadline = start + DEADLINE

    with CuttableProxy(broker.host, broker.port) as proxy:
        relayed = BrokerTarget(
            broker.name, "127.0.0.1", proxy.port, broker.login, broker.passcode, broker.vhost
        )

        def cut_with_one_unacked(message: stompy.Message, received: int) -> bool:
            if held or received < COUNT // 3:
                return True
            held.append(message)  # not acked: the broker must give it back
            proxy.cut()
            return False

        with (
            stompy.Connection(broker.url, reconnect=POLICY, receipt_timeout=10.0) as producer,
            stompy.Connection(relayed.url, reconnect=POLICY, receipt_timeout=10.0) as consumer,
        ):
            consumer_thread = threading.Thread(
                target=consume,
                args=(consumer, destination, tally, deadline, cut_with_one_unacked),
                daemon=True,
            )
            consumer_thread.start()
            retries = produce(producer, destination, deadline)
            assert tally.done.wait(timeout=max(0.0, deadline - time.monotonic()) + 5.0)
            consumer_thread.join(timeout=5.0)
        accepted = proxy.accepted
    seconds = time.monotonic() - start
    print(report(broker.kind, "cut consumer", tally, retries, seconds))
    check(tally)
    assert held, "the consumer never got a third of the messages"
    assert tally.counts[int(held[0].text)] >= 2, "the unacked message did not come back"
    assert tally.redelivered >= 1
    assert accepted >= 2, "the consumer did not reconnect through the relay"

"""The blocking flavour: ``stompy.Connection``, producer and consumer threads."""

from __future__ import annotations

import threading
import time

import stompy

from ._core import BATCH, ID_HEADER, PREFETCH, Faulter, Pacer, Settings, Tally

#: Seconds a producer waits before sending an unconfirmed message again.
RETRY_PAUSE = 0.05


def connect(url: str, settings: Settings, tally: Tally) -> stompy.Connection:
    conn = stompy.Connection(
        url,
        heartbeats=settings.heartbeats,
        connect_timeout=settings.connect_timeout,
        receipt_timeout=settings.receipt_timeout,
        reconnect=settings.reconnect,
    )
    with tally.timed("connect"):
        conn.connect()
    return conn


def close(conn: stompy.Connection, tally: Tally) -> None:
    try:
        with tally.timed("close"):
            conn.close()
    except Exception as exc:
        tally.problem(f"close raised {exc!r}")


def produce(
    conn: stompy.Connection,
    destination: str,
    worker: int,
    settings: Settings,
    tally: Tally,
    stop: threading.Event,
    headers: dict[str, str],
) -> None:
    """Send ``<worker>-<seq>`` ids one after another until ``stop``, each until confirmed.

    A send that raises may or may not have reached the broker: the same id is sent
    again (at least once), so it may arrive twice.
    """
    pacer = Pacer(settings.producers / settings.rate if settings.rate else 0.0)
    seq = 0
    while not stop.is_set():  # bounded by the run's duration: stop is set at its end
        message_id = f"{worker}-{seq}"
        tally.attempt(message_id)
        while not stop.is_set():  # the same id until confirmed, or the run ends
            started = time.monotonic()
            try:
                with tally.timed("send"):
                    conn.send(
                        destination,
                        message_id,
                        headers={**headers, ID_HEADER: message_id},
                        receipt=True,
                    )
            except Exception as exc:
                tally.send_failed(exc, time.monotonic() - started)
                if conn.failure is not None:
                    tally.problem(f"producer {worker}: the connection failed for good: {exc!r}")
                    return
                tally.retry(message_id)
                stop.wait(RETRY_PAUSE)
                continue
            tally.confirm(message_id)
            break
        seq += 1
        stop.wait(pacer.wait())


def consume(
    sub: stompy.Subscription,
    conn: stompy.Connection,
    tally: Tally,
    stop: threading.Event,
    get_timeout: float,
) -> None:
    """Take messages, record each, then ack it, until ``stop``."""
    while not stop.is_set():  # bounded: stop is set once the drain ends
        try:
            with tally.timed("get"):
                batch = sub.get_batch(BATCH, timeout=get_timeout)
        except Exception as exc:
            tally.problem(f"consumer: get raised {exc!r} (connection failure: {conn.failure!r})")
            return
        for message in batch:
            tally.receive(message.headers)
            try:
                with tally.timed("ack"):
                    message.ack()
            except Exception as exc:
                tally.ack_failed(exc)


def run(
    url: str,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> None:
    """One run: connect, produce and consume under faults for ``settings.duration``,
    heal, drain, close. Every wait is bounded; a worker that outlives its bound is
    reported (as a hang) and left behind as a daemon thread."""
    consumer = connect(url, settings, tally)
    try:
        with tally.timed("subscribe"):
            sub = consumer.subscribe(
                destination, ack="client-individual", headers=PREFETCH, receipt=True
            )
        producer = connect(url, settings, tally)
        try:
            _work(consumer, producer, sub, destination, headers, settings, tally, faulter)
        finally:
            close(producer, tally)
    finally:
        close(consumer, tally)


def _work(
    consumer: stompy.Connection,
    producer: stompy.Connection,
    sub: stompy.Subscription,
    destination: str,
    headers: dict[str, str],
    settings: Settings,
    tally: Tally,
    faulter: Faulter,
) -> None:
    stop_producing = threading.Event()
    stop_consuming = threading.Event()
    producers = [
        threading.Thread(
            target=produce,
            args=(producer, destination, n, settings, tally, stop_producing, headers),
            name=f"soak-producer-{n}",
            daemon=True,
        )
        for n in range(settings.producers)
    ]
    reader = threading.Thread(
        target=consume,
        args=(sub, consumer, tally, stop_consuming, settings.get_timeout),
        name="soak-consumer",
        daemon=True,
    )
    reader.start()
    for thread in producers:
        thread.start()
    faulter.start()
    try:
        stop_producing.wait(settings.duration)
    finally:
        stop_producing.set()
        faulter.stop()
        # A producer ends once its current send returns: within the send bound.
        deadline = time.monotonic() + tally.bounds["send"] + settings.margin
        for thread in producers:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                tally.problem(
                    f"{thread.name} still blocked {tally.bounds['send']:.1f} s after stop"
                )
        if not faulter.join(10.0):  # a cut waits at most LINGER (5 s) for its connections
            tally.problem("the fault thread did not end")
        # Healed: every confirmed id must now reach the consumer.
        deadline = time.monotonic() + settings.drain_timeout
        while not tally.all_received() and time.monotonic() < deadline and reader.is_alive():
            time.sleep(0.05)
        stop_consuming.set()
        reader.join(tally.bounds["get"] + tally.bounds["ack"] + settings.margin)
        if reader.is_alive():
            tally.problem("the consumer thread did not end")

"""The streaming read's intake alone: CPU per message of the source's process, no Spark.

``python benchmarks/spark_intake.py [--count N] [--rounds N] [--url URL] [--who NAMES]``

A queue holds ``count`` messages of 100 bytes (200,000 by default) before each run;
each contender drains it in a fresh interpreter, and what is measured is that
process's CPU time (user and system, every thread) from subscribing until the last
message is in hand, per message, and the wall time of the same span:

* ``stompy``: :class:`~stompy.spark._stream_read.StreamConsumer` with the source's
  defaults, driven as Spark drives it (``latest``, then ``plan`` of that batch, which
  writes the partitions' Arrow IPC bytes; then a sleep of ``--spark-ms`` while Spark
  would run the batch; the next ``latest`` acknowledges it), with
  the CPU of each of its threads: the caller (Spark's calls), the intake, and the
  connection's I/O thread.
* ``stomppy-client``: one stomp.py consumer in ``client`` mode, a cumulative
  ACK per 1,000 messages (the same guarantee, as ``benchmarks spark-pace`` has it).
* ``stomppy-auto``: the same with ``auto`` acks (no guarantee).

Run it as a script, from outside a checkout for an installed wheel (it imports
nothing of ``benchmarks``), or with ``PYTHONPATH`` at a checkout for its code.
Contenders run in turns, round after round; the medians are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

URL = "stomp://guest:guest@127.0.0.1:61613/%2F"
BODY = 100
ACK_EVERY = 1_000
CONTENDERS = ("stompy", "stomppy-client", "stomppy-auto")


def _fill(url: str, destination: str, count: int) -> None:
    import stompy

    body = b"x" * BODY
    with stompy.Connection(url, receipt_timeout=120) as conn:
        conn.send_many((stompy.Outgoing(destination, body) for _ in range(count)), receipt=True)


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    result = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        result[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return result


def _thread_switches() -> dict[int, int]:
    """Voluntary context switches (each a wait that slept) of each thread, by native id."""
    result = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        result[int(tid)] = int(line.split()[1])
        except OSError:
            continue
    return result


def drain_stompy(url: str, destination: str, count: int, spark_s: float) -> dict[str, Any]:
    from stompy.spark._options import parse_read_options
    from stompy.spark._stream_read import StreamConsumer

    settings = parse_read_options({"url": url, "destination": destination}, streaming=True)
    consumer = StreamConsumer(settings)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    threads0, switches0 = _thread_cpu(), _thread_switches()
    start = consumer.initial()
    got, batches, parts = 0, 0, 0
    while got < count:
        end = consumer.latest(start, None)
        if end == start:
            continue
        parts += len(consumer.plan(start, end))
        time.sleep(spark_s)  # Spark runs the batch: the intake takes in the next
        got += end - start
        batches += 1
        start = end
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    threads, switches = _thread_cpu(), _thread_switches()
    names = {t.native_id: t.name for t in threading.enumerate()}
    by_thread: dict[str, float] = {}
    wakes: dict[str, int] = {}
    for tid, seconds in threads.items():
        name = names.get(tid, "")
        name = {"MainThread": "caller", "stompy-spark-intake": "intake"}.get(name, "other")
        if name == "other" and tid in names:
            name = "io"  # the connection's thread
        by_thread[name] = by_thread.get(name, 0.0) + seconds - threads0.get(tid, 0.0)
        wakes[name] = wakes.get(name, 0) + switches.get(tid, 0) - switches0.get(tid, 0)
    consumer.commit(start)
    consumer.close()
    return {
        "cpu": cpu,
        "wall": wall,
        "got": got,
        "batches": batches,
        "threads": by_thread,
        "wakes": wakes,
    }


def drain_stomppy(url: str, destination: str, count: int, ack: str) -> dict[str, Any]:
    from urllib.parse import unquote, urlsplit

    import stomp

    parts = urlsplit(url)
    conn = stomp.Connection([(parts.hostname, parts.port)], heartbeats=(0, 0))
    vhost = unquote(parts.path[1:]) if parts.path[1:] else "/"
    conn.connect(parts.username, parts.password, wait=True, headers={"host": vhost})
    got = 0
    done = threading.Event()

    class Consumer(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            nonlocal got
            got += 1
            if ack == "client" and (got % ACK_EVERY == 0 or got == count):
                conn.ack(frame.headers["message-id"], "1")
            if got >= count:
                done.set()

    conn.set_listener("drain", Consumer())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    conn.subscribe(destination, id="1", ack=ack, headers={"prefetch-count": "65535"})
    if not done.wait(600):
        raise TimeoutError(f"stomp.py ({ack}) took {got} of {count} messages")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    conn.disconnect()
    return {"cpu": cpu, "wall": wall, "got": got}


def one(who: str, url: str, count: int, spark_s: float) -> dict[str, Any]:
    destination = f"/queue/stompy-intake-bench-{uuid.uuid4().hex[:10]}"
    _fill(url, destination, count)
    if who == "stompy":
        return drain_stompy(url, destination, count, spark_s)
    return drain_stomppy(url, destination, count, who.removeprefix("stomppy-"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=URL)
    parser.add_argument("--who", default=",".join(CONTENDERS), help="contenders, comma-separated")
    parser.add_argument(
        "--spark-ms",
        type=float,
        default=500.0,
        help="milliseconds Spark takes per micro-batch (a sleep of the caller; default 500)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.url, args.count, args.spark_ms / 1000)))
        return
    import stompy

    print(f"stompy from {os.path.dirname(stompy.__file__)}", flush=True)
    chosen = [w.strip() for w in args.who.split(",") if w.strip()]
    results: dict[str, list[dict[str, Any]]] = {who: [] for who in chosen}
    for round_ in range(args.rounds):
        for who in chosen:
            command = [sys.executable, __file__, "--one", who, "--count", str(args.count)]
            command += ["--spark-ms", str(args.spark_ms)]
            out = subprocess.run(
                [*command, "--url", args.url], capture_output=True, text=True, check=False
            )
            if out.returncode:
                print(f"{who}: failed\n{out.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[who].append(r)
            extra = ""
            if "threads" in r:
                shares = ", ".join(
                    f"{name} {seconds / args.count * 1e6:.1f}"
                    for name, seconds in sorted(r["threads"].items())
                )
                wakes = ", ".join(
                    f"{name} {count / args.count * 1000:.0f}"
                    for name, count in sorted(r["wakes"].items())
                )
                extra = (
                    f"; µs/msg by thread: {shares}; sleeps per 1,000 msgs: {wakes}; "
                    f"{r['batches']} batches"
                )
            print(
                f"round {round_ + 1} {who}: {r['cpu'] / args.count * 1e6:.2f} µs CPU/msg, "
                f"{args.count / r['wall']:,.0f} msg/s{extra}",
                flush=True,
            )
    print("medians:")
    for who, rs in results.items():
        if not rs:
            continue
        cpu = sorted(r["cpu"] for r in rs)[len(rs) // 2]
        wall = sorted(r["wall"] for r in rs)[len(rs) // 2]
        print(f"  {who}: {cpu / args.count * 1e6:.2f} µs CPU/msg, {args.count / wall:,.0f} msg/s")


if __name__ == "__main__":
    main()

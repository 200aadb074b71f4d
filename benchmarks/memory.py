"""Peak memory of a slow consumer and of many subscriptions, in a child process each.

* ``slow consumer``: the client subscribes (auto ack) to a blast server that writes
  ``count`` MESSAGEs as fast as the socket takes them, and takes them one by one,
  sleeping 1 ms every 100 messages, so the broker side is always far ahead. Run with
  ``count / 10`` and with ``count`` messages (10,000 and 100,000 by default): a client
  that pushes back on the broker instead of buffering has the same peak for both, and
  the ``growth`` row (peak at ``count`` minus peak at ``count / 10``) is the figure to
  read. Target: at most 20 MB.
* ``subscriptions``: the client subscribes 1,000 times (1,000 queues) and takes the
  10 messages the blast server writes for each subscription.

Each measurement runs in a fresh child process (``python -m benchmarks.memory child
...``) that imports only what its client needs, so nothing else is in its memory.
Two figures per measurement, each from its own child:

* **peak RSS** (Linux ``VmHWM``; ``ru_maxrss`` elsewhere): what the operating system
  had to give the process, interpreter included; and the peak **above** the RSS
  measured once connected, which is the part the workload added;
* **traced peak** (``tracemalloc``, started once connected): the Python allocations
  alone. tracemalloc slows the client about tenfold, hence a separate child, and the
  slow consumer is traced at the small count only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks import workload
from benchmarks._core import (
    STOMPY,
    STOMPY_ASYNCIO,
    STOMPY_TRIO,
    Limit,
    Row,
    Settings,
    log,
    register,
)
from benchmarks.servers import ServerProcess

GROUP: Final = "memory"
MB: Final = 1024 * 1024
#: Contender name -> the child's ``--flavour``.
FLAVOURS: Final = {STOMPY: "blocking", STOMPY_ASYNCIO: "asyncio", STOMPY_TRIO: "trio"}
#: Messages the blast server writes per subscription in the subscriptions scenario.
PER_SUBSCRIPTION: Final = 10
GROWTH: Final = "slow consumer: RSS growth"
_ROOT: Final = Path(__file__).resolve().parent.parent


def _count(settings: Settings) -> int:
    return settings.pick_count(100_000, 10_000)


def _subscriptions(settings: Settings) -> int:
    return 20 if settings.quick else 1_000


def _limit(count: int) -> float:
    return 60.0 + count / 500


# -- the child --------------------------------------------------------------------------


def _rss_now() -> int:
    """Resident set size now, in bytes (Linux ``/proc``; else the peak so far)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _rss_peak()


def _rss_peak() -> int:
    """Peak resident set size of this process image, in bytes.

    Linux's ``VmHWM`` first: ``ru_maxrss`` survives ``exec``, so a child started
    with ``vfork`` (as ``subprocess`` does) reports at least its parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, else KiB


@dataclass
class _Probe:
    """Measures one child's run: RSS once connected, then the peaks."""

    trace: bool
    connected_rss: int = 0

    def connected(self) -> None:
        self.connected_rss = _rss_now()
        if self.trace:
            tracemalloc.start()

    def result(self, received: int, elapsed: float) -> dict[str, Any]:
        traced = tracemalloc.get_traced_memory()[1] if self.trace else 0
        return {
            "received": received,
            "elapsed": elapsed,
            "connected_rss": self.connected_rss,
            "peak_rss": _rss_peak(),
            "traced_peak": traced,
        }


def _pause(taken: int) -> None:
    if taken % 100 == 0:
        time.sleep(0.001)


def _child_blocking(args: argparse.Namespace, probe: _Probe) -> dict[str, Any]:
    import stompy

    deadline = time.monotonic() + args.limit
    url = f"stomp://{args.host}:{args.port}"
    with stompy.Connection(url, login="guest", passcode="guest") as conn:
        probe.connected()
        start = time.perf_counter()
        received = 0
        message: Any = None
        if args.scenario == "slow":
            sub = conn.subscribe(
                workload.DESTINATION, id=workload.SUBSCRIPTION, ack="auto", headers=_want(args)
            )
            for received in range(1, args.count + 1):
                message = sub.get(timeout=max(0.001, deadline - time.monotonic()))
                if message is None:
                    raise TimeoutError(f"got {received - 1} of {args.count} messages")
                _pause(received)
            _check_last(message.body, args.count)
        else:
            subs = [
                conn.subscribe(f"/queue/bench.{i}", id=f"sub-{i}", ack="auto", headers=_want(args))
                for i in range(args.count)
            ]
            for sub in subs:
                for _ in range(PER_SUBSCRIPTION):
                    if sub.get(timeout=max(0.001, deadline - time.monotonic())) is None:
                        raise TimeoutError(f"{sub.id}: a message is missing")
                    received += 1
        elapsed = time.perf_counter() - start
        return probe.result(received, elapsed)


def _child_async(args: argparse.Namespace, probe: _Probe) -> dict[str, Any]:
    import anyio

    import stompy

    async def main() -> dict[str, Any]:
        url = f"stomp://{args.host}:{args.port}"
        with anyio.fail_after(args.limit):
            async with stompy.AsyncConnection(url, login="guest", passcode="guest") as conn:
                probe.connected()
                start = time.perf_counter()
                received = 0
                message: Any = None
                if args.scenario == "slow":
                    sub = await conn.subscribe(
                        workload.DESTINATION,
                        id=workload.SUBSCRIPTION,
                        ack="auto",
                        headers=_want(args),
                    )
                    for received in range(1, args.count + 1):
                        message = await sub.get()
                        if message is None:
                            raise ConnectionError(f"got {received - 1} of {args.count} messages")
                        if received % 100 == 0:
                            await anyio.sleep(0.001)
                    _check_last(message.body, args.count)
                else:
                    subs = [
                        await conn.subscribe(
                            f"/queue/bench.{i}", id=f"sub-{i}", ack="auto", headers=_want(args)
                        )
                        for i in range(args.count)
                    ]
                    for sub in subs:
                        for _ in range(PER_SUBSCRIPTION):
                            if await sub.get() is None:
                                raise ConnectionError(f"{sub.id}: a message is missing")
                            received += 1
                elapsed = time.perf_counter() - start
                return probe.result(received, elapsed)

    result: dict[str, Any] = anyio.run(main, backend=args.flavour)
    return result


def _want(args: argparse.Namespace) -> dict[str, str]:
    """The blast server's ``x-count``: how many MESSAGEs this SUBSCRIBE is to get."""
    return {"x-count": str(args.count if args.scenario == "slow" else PER_SUBSCRIPTION)}


def _check_last(body: bytes, count: int) -> None:
    if body != workload.body(count - 1):
        raise AssertionError(f"last body is {body!r}")


def child_main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.memory child ...``: one measurement, a JSON line out."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory child")
    parser.add_argument("--flavour", choices=("blocking", "asyncio", "trio"), required=True)
    parser.add_argument("--scenario", choices=("slow", "subscriptions"), required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--limit", type=float, default=600.0)
    args = parser.parse_args(argv)
    probe = _Probe(args.trace)
    if args.flavour == "blocking":
        result = _child_blocking(args, probe)
    else:
        result = _child_async(args, probe)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# -- the parent -------------------------------------------------------------------------


def measure(
    flavour: str, scenario: str, count: int, port: int, *, trace: bool, limit: float
) -> dict[str, Any]:
    """Run one child to completion and return its figures; raises if it failed."""
    command = [sys.executable, "-m", "benchmarks.memory", "child", "--flavour", flavour]
    command += ["--scenario", scenario, "--count", str(count), "--port", str(port)]
    command += ["--limit", str(limit)]
    if trace:
        command.append("--trace")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        command,
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=limit + 30,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"child failed ({done.returncode}): {done.stderr.strip()[-300:]}")


def describe(settings: Settings) -> dict[str, Any]:
    count = _count(settings)
    return {
        "slow_consumer_messages": [count // 10, count],
        "slow_consumer_pause": "1 ms every 100 messages",
        "subscriptions": _subscriptions(settings),
        "messages_per_subscription": PER_SUBSCRIPTION,
        "max_pending": "stompy's default (1000 messages per subscription)",
        "rss": "peak RSS (VmHWM) of a fresh child process per figure",
        "traced": "tracemalloc peak, started once connected, in a separate child",
    }


@register(
    GROUP,
    "peak memory: slow consumer, many subscriptions (MB, lower is better)",
    targets=tuple(Limit(GROWTH, who, 20.0) for who in FLAVOURS),
    describe=describe,
)
def run(settings: Settings) -> list[Row]:
    large = _count(settings)
    small = max(1, large // 10)
    subscriptions = _subscriptions(settings)
    flavours = {
        who: f
        for who, f in FLAVOURS.items()
        if (f != "trio" or _has_trio()) and settings.wants(who)
    }
    figures: dict[tuple[str, str, int, bool], dict[str, Any]] = {}
    failed: dict[str, str] = {}

    def take(scenario: str, count: int, port: int, trace: bool) -> None:
        for who, flavour in flavours.items():
            if who in failed:
                continue
            try:
                result = measure(flavour, scenario, count, port, trace=trace, limit=_limit(large))
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                failed[who] = f"failed: {exc}"[:200]
                log(settings, f"  memory {scenario} {who} FAILED: {exc}")
                continue
            figures[(who, scenario, count, trace)] = result
            shown = result["traced_peak"] if trace else result["peak_rss"]
            log(
                settings,
                f"  memory {scenario} {count:,} {who:<18} "
                f"{'traced' if trace else 'RSS'} peak {shown / MB:7.1f} MB "
                f"({result['elapsed']:.1f} s)",
            )

    # One blast server for every child: each SUBSCRIBE says how many it wants.
    blast = max(large, PER_SUBSCRIPTION)
    with ServerProcess("blast", count=blast, max_seconds=_limit(large) * 20) as server:
        port = server.address[1]
        for count in (small, large):
            log(settings, f"memory slow consumer: {count:,} messages")
            # tracemalloc slows the client about tenfold: traced at the small count only.
            for trace in (False, True) if count == small else (False,):
                take("slow", count, port, trace)
        log(settings, f"memory: {subscriptions:,} subscriptions x {PER_SUBSCRIPTION} messages")
        for trace in (False,) if settings.quick else (False, True):
            take("subscriptions", subscriptions, port, trace)
    return _rows(figures, failed, flavours, small, large, subscriptions)


def _has_trio() -> bool:
    import importlib.util

    return importlib.util.find_spec("trio") is not None


def _rows(
    figures: dict[tuple[str, str, int, bool], dict[str, Any]],
    failed: dict[str, str],
    flavours: dict[str, str],
    small: int,
    large: int,
    subscriptions: int,
) -> list[Row]:
    rows: list[Row] = []

    def add(name: str, who: str, value: float) -> None:
        rows.append(Row(GROUP, name, who, value, "MB", False, (value,)))

    for who in flavours:
        if who in failed:
            rows.append(Row(GROUP, "memory", who, float("nan"), "MB", note=failed[who]))
            continue
        slow = {c: figures[(who, "slow", c, False)] for c in (small, large)}
        traced = figures[(who, "slow", small, True)]
        for c in (small, large):
            add(f"slow consumer {c:,}: peak RSS", who, slow[c]["peak_rss"] / MB)
        add(GROWTH, who, (slow[large]["peak_rss"] - slow[small]["peak_rss"]) / MB)
        add(f"slow consumer {small:,}: traced peak", who, traced["traced_peak"] / MB)
        subs = figures[(who, "subscriptions", subscriptions, False)]
        label = f"{subscriptions:,} subscriptions"
        add(f"{label}: peak RSS", who, subs["peak_rss"] / MB)
        add(f"{label}: RSS above connected", who, (subs["peak_rss"] - subs["connected_rss"]) / MB)
        subs_traced = figures.get((who, "subscriptions", subscriptions, True))
        if subs_traced is not None:  # not traced in --quick runs
            add(f"{label}: traced peak", who, subs_traced["traced_peak"] / MB)
    # One block per measurement, contenders side by side.
    order = list(dict.fromkeys(row.name for row in rows))
    return sorted(rows, key=lambda row: order.index(row.name))


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        sys.exit(child_main(sys.argv[2:]))
    sys.exit("usage: python -m benchmarks.memory child --flavour ... (run by the memory group)")

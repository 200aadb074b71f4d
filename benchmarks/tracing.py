"""What OpenTelemetry costs stompy: the client benchmarks (:mod:`benchmarks.clients`,
consume and publish against the bare blast / sink servers) in four set-ups, alternated
round by round (every other round in reverse order) so that the machine's load falls
on each alike:

* ``off``: ``tracing=False``;
* ``api``: ``opentelemetry-api`` importable, no SDK installed (the default of an
  application that has not set OpenTelemetry up): nothing must be recorded, and the
  figure must stay within 3% of ``off``;
* ``sdk``: the SDK's tracer provider with a ``BatchSpanProcessor`` and an exporter
  that drops every span: the cost of making the spans and propagating their context;
* ``sdk+metrics``: the same, and a meter provider whose reader is never collected.

``python -m benchmarks.tracing [--count N] [--rounds R] [--async]`` prints, for each,
the median CPU time per message of the client process (all its threads; the server
runs in another process, connecting and closing included) and its ratio to ``off``:
on a loaded machine CPU time moves far less than throughput does. Needs
``opentelemetry-sdk`` (the ``bench``
group). For a figure the load cannot move, see ``python -m benchmarks.instructions``
(it runs the ``api`` set-up).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.util._once import Once

from benchmarks import clients
from benchmarks.rawstomp import Server
from benchmarks.servers import ServerProcess

SETUPS: Final = ("off", "api", "sdk", "sdk+metrics")


class DropExporter(SpanExporter):
    """Takes every span and does nothing with it: the SDK's work without an exporter's."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _reset() -> None:
    """No SDK installed (the API sets each global provider once; forget it)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None


def _install(setup: str) -> Callable[[], None]:
    """Install ``setup``'s providers; return what uninstalls them."""
    _reset()
    shutdowns: list[Callable[[], object]] = []
    if setup.startswith("sdk"):
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(DropExporter()))
        trace.set_tracer_provider(tracer_provider)
        shutdowns.append(tracer_provider.shutdown)
    if setup == "sdk+metrics":
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        metrics.set_meter_provider(meter_provider)
        shutdowns.append(meter_provider.shutdown)

    def uninstall() -> None:
        for shutdown in shutdowns:
            shutdown()
        _reset()

    return uninstall


def measure(
    kind: str, count: int, rounds: int, bench: Callable[[clients.Job], float]
) -> dict[str, list[float]]:
    """CPU microseconds per message of ``bench`` in each set-up, ``rounds`` times,
    alternated."""
    server_kind = "blast" if kind == "consume" else "sink"
    limit = clients.limit_for(count)
    costs: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    with ServerProcess(server_kind, count=count, max_seconds=limit * rounds * 20) as server:
        job = clients.Job(Server(server_kind, *server.address), count, limit)
        for round_ in range(rounds):
            # Every other round backwards: what a set-up leaves behind (garbage, a warm
            # cache) falls on each neighbour alike.
            for setup in SETUPS if round_ % 2 == 0 else SETUPS[::-1]:
                uninstall = _install(setup)
                try:
                    started = time.process_time()
                    bench(dataclasses.replace(job, tracing=setup != "off"))
                    cpu = time.process_time() - started
                finally:
                    uninstall()
                    gc.collect()  # the spans of an SDK round must not weigh on the next
                costs[setup].append(cpu / count * 1e6)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tracing")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--async", dest="anyio", action="store_true", help="AsyncConnection on asyncio"
    )
    args = parser.parse_args(argv)
    for kind in ("consume", "publish"):
        bench: Callable[[clients.Job], float]
        if args.anyio:
            bench = (
                clients.stompy_async_consume if kind == "consume" else clients.stompy_async_publish
            )
        else:
            bench = (
                clients.stompy_sync_consume if kind == "consume" else clients.stompy_sync_publish
            )
        costs = measure(kind, args.count, args.rounds, bench)
        off = statistics.median(costs["off"])
        for setup in SETUPS:
            median = statistics.median(costs[setup])
            spread = f"{min(costs[setup]):.1f}-{max(costs[setup]):.1f}"
            print(
                f"{kind:8} {setup:12} {median:7.1f} us CPU/msg  ({spread})  "
                f"{median / off:6.1%} of off",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

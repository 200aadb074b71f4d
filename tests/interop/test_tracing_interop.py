"""OpenTelemetry trace context through real brokers, across processes and brokers.

A producer in another process (its own SDK, its own trace) sends through RabbitMQ or
ActiveMQ; the consumer here, with every client flavour, finds the ``traceparent`` on the
message and its CONSUMER span in the producer's trace. Then a relay: consumed from one
broker, forwarded inside its ``process`` span to the other, consumed there: one trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import anyio
import pytest
from opentelemetry.trace import SpanKind

import stompy
from tests.interop._support import TIMEOUT, BrokerTarget, probe, targets_from_env
from tests.test_tracing import Recorded, sdk

FLAVOURS = ("sync", "asyncio", "trio")

#: The producer: a process of its own with its own SDK; prints its span's ids.
PRODUCER = textwrap.dedent(
    """
    import json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import stompy

    url, destination = sys.argv[1:3]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with stompy.Connection(url, connect_timeout=5.0) as conn:
        conn.send(destination, "traced", receipt=True)
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    print(json.dumps({"trace": context.trace_id, "span": context.span_id}))
    """
)


def produce(url: str, destination: str) -> tuple[int, int]:
    """Send one traced message from another process; its (trace id, span id)."""
    done = subprocess.run(
        [sys.executable, "-c", PRODUCER, url, destination],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    return int(ids["trace"]), int(ids["span"])


def consume(flavour: str, url: str, destination: str) -> dict[str, str]:
    """Take one message from ``destination`` with ``flavour``; its headers."""
    if flavour == "sync":
        with stompy.Connection(url, connect_timeout=TIMEOUT) as conn:
            with conn.subscribe(destination) as sub:
                message = sub.get(timeout=TIMEOUT)
                assert message is not None
                return dict(message.headers)

    async def main() -> dict[str, str]:
        with anyio.fail_after(TIMEOUT * 3):
            async with stompy.AsyncConnection(url, connect_timeout=TIMEOUT) as conn:
                async with conn.subscribe(destination) as sub:
                    message = await sub.get(timeout=TIMEOUT)
                    assert message is not None
                    return dict(message.headers)

    return anyio.run(main, backend=flavour)


def check_joined(recorded: Recorded, trace_id: int, span_id: int) -> None:
    (consumer,) = recorded.of(SpanKind.CONSUMER)
    assert consumer.context is not None
    assert consumer.context.trace_id == trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == span_id


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_consumer_joins_the_trace_of_a_producer_in_another_process(
    broker: BrokerTarget, unique: str, flavour: str
) -> None:
    destination = f"/queue/stompy-otel-{unique}"
    trace_id, span_id = produce(broker.url, destination)
    with sdk() as recorded:
        headers = consume(flavour, broker.url, destination)
    assert headers["traceparent"].startswith(f"00-{trace_id:032x}-{span_id:016x}-")
    check_joined(recorded, trace_id, span_id)


def test_a_relay_from_one_broker_to_the_other_keeps_one_trace() -> None:
    found = {}
    for target in targets_from_env():
        server, _ = probe(target)
        if server is not None:
            found[server.split("/")[0].lower()] = target
    if not {"rabbitmq", "activemq"} <= set(found):
        pytest.skip(f"needs RabbitMQ and ActiveMQ both; reachable: {sorted(found) or 'none'}")
    rabbit, active = found["rabbitmq"], found["activemq"]
    first = f"/queue/stompy-otel-relay-{uuid.uuid4().hex[:10]}"
    second = f"{first}-onward"
    trace_id, span_id = produce(rabbit.url, first)
    with sdk() as recorded:
        with stompy.Connection(rabbit.url) as inbound, stompy.Connection(active.url) as outbound:
            forwarded: list[str] = []

            def forward(message: stompy.Message) -> None:
                outbound.send(second, message.body, receipt=True)
                forwarded.append(message.message_id)

            with inbound.subscribe(first, on_message=forward):
                headers = consume("sync", active.url, second)
            assert forwarded
    assert headers["traceparent"].startswith(f"00-{trace_id:032x}-")
    spans = recorded.spans()
    assert {s.context.trace_id for s in spans if s.context} == {trace_id}
    kinds = sorted((s.kind.name, s.name) for s in spans)
    assert kinds == sorted(
        [
            ("CONSUMER", f"process {first}"),
            ("PRODUCER", f"send {second}"),
            ("CONSUMER", f"receive {second}"),
        ]
    )
    (process,) = recorded.of(SpanKind.CONSUMER, f"process {first}")
    assert process.parent is not None
    assert process.parent.span_id == span_id
    addresses = {dict(s.attributes or {}).get("server.port") for s in spans}
    assert addresses == {rabbit.port, active.port}

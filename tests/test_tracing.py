"""OpenTelemetry: spans, trace context in STOMP headers and metrics, for the blocking,
asyncio and trio clients, recorded with the SDK's in-memory exporter and reader.

The SDK is installed as the global provider for each test only (see ``otel``), so the
rest of the suite runs as an application without an SDK does: with nothing recorded.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

import stompy
from stompy import Outgoing
from stompy._engine.tracing import MAX_TALLIES, Tally, trace_headers
from stompy.testing import Broker, run_broker, run_fault_proxy

#: Every wait of these tests is bounded by this many seconds.
LIMIT = 10.0


def queue() -> str:
    return f"/queue/otel-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def _reset_globals() -> None:
    """Forget the global providers: OpenTelemetry sets each once per process, and the
    rest of the suite must run without them."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None


@dataclass
class Recorded:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def of(self, kind: SpanKind, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.kind is kind and (name is None or s.name == name)]

    def points(self, name: str) -> list[Any]:
        """The data points of the metric ``name`` (empty if it was never recorded)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def total(self, name: str, **attributes: object) -> float:
        """The sum of the counter ``name`` over the points carrying ``attributes``."""
        return sum(
            float(point.value)
            for point in self.points(name)
            if all(point.attributes.get(key) == value for key, value in attributes.items())
        )


@contextlib.contextmanager
def sdk() -> Iterator[Recorded]:
    """The SDK installed as the application would (a tracer and a meter provider, with
    in-memory exporter and reader), then uninstalled."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    _reset_globals()
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield Recorded(exporter, reader)
    finally:
        _reset_globals()
        tracer_provider.shutdown()
        meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with sdk() as recorded:
        yield recorded


def traceparent(span: ReadableSpan) -> str:
    """The start of the W3C ``traceparent`` header that carries ``span``'s context."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-"


def check_send_and_receive(
    otel: Recorded, destination: str, headers: dict[str, str], port: int, *, ack: str = "auto"
) -> tuple[ReadableSpan, ReadableSpan]:
    """One PRODUCER and one CONSUMER span in one trace, the consumer's parent (and
    link) the producer; the received ``headers`` carry the producer's context."""
    (producer,) = otel.of(SpanKind.PRODUCER)
    (consumer,) = otel.of(SpanKind.CONSUMER)
    assert producer.name == f"send {destination}"
    assert consumer.name == f"receive {destination}"
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
    assert headers["traceparent"].startswith(traceparent(producer))

    sent = dict(producer.attributes or {})
    assert sent["messaging.system"] == "stomp"
    assert sent["messaging.operation.type"] == "send"
    assert sent["messaging.destination.name"] == destination
    assert sent["server.address"] == "127.0.0.1"
    assert sent["server.port"] == port
    received = dict(consumer.attributes or {})
    assert received["messaging.system"] == "stomp"
    assert received["messaging.operation.type"] == "receive"
    assert received["messaging.destination.name"] == destination
    assert received["messaging.message.id"] == headers["message-id"]
    assert received["messaging.destination.subscription.name"] == headers["subscription"]
    assert received["messaging.stomp.ack_mode"] == ack
    assert received["server.address"] == "127.0.0.1"
    assert received["server.port"] == port
    assert sent["messaging.message.body.size"] == received["messaging.message.body.size"]
    return producer, consumer


# -- the blocking client ----------------------------------------------------------------


def test_blocking_send_and_get_are_one_trace(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination, ack="client-individual") as sub:
            conn.send(destination, "héllo", receipt=True)
            message = sub.get(timeout=LIMIT)
            assert message is not None
            message.ack()
    check_send_and_receive(
        otel, destination, dict(message.headers), broker.port, ack="client-individual"
    )
    (producer,) = otel.of(SpanKind.PRODUCER)
    assert dict(producer.attributes or {})["messaging.message.body.size"] == len("héllo".encode())
    assert (
        otel.total("messaging.client.sent.messages", **{"messaging.destination.name": destination})
        == 1
    )
    assert otel.total("stompy.client.sent.bytes") == 6
    assert otel.total("messaging.client.consumed.messages") == 1
    assert otel.total("stompy.client.consumed.bytes") == 6
    (latency,) = otel.points("stompy.client.receipt.duration")
    assert latency.count == 1


def test_blocking_fast_path_send_and_iteration(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination) as sub:
            conn.send(destination, b"\x00\x01")  # no receipt: the short path when untraced
            message = next(iter(sub))
    check_send_and_receive(otel, destination, dict(message.headers), broker.port)


def test_blocking_tracing_off_records_and_sends_nothing(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with stompy.Connection(broker.url, tracing=False) as conn:
        with conn.subscribe(destination) as sub:
            conn.send(destination, "x", receipt=True)
            conn.send_many([Outgoing(destination, "y")], receipt=True)
            batch = sub.get_batch(2, timeout=LIMIT)
            while len(batch) < 2:  # bounded: each get waits LIMIT at most
                more = sub.get(timeout=LIMIT)
                assert more is not None
                batch.append(more)
    assert otel.spans() == []
    assert all("traceparent" not in m.headers for m in batch)
    assert otel.points("messaging.client.sent.messages") == []
    assert otel.points("messaging.client.consumed.messages") == []


def test_no_sdk_means_no_telemetry(broker: Broker) -> None:
    """The API installed, no SDK: the connection keeps its untraced paths."""
    _reset_globals()
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        assert conn._link.telemetry is None
        with conn.subscribe(destination) as sub:
            assert sub._telemetry is None
            conn.send(destination, "x", receipt=True)
            message = sub.get(timeout=LIMIT)
    assert message is not None
    assert "traceparent" not in message.headers


def test_a_users_trace_context_is_kept_and_linked(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    theirs = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination) as sub:
            conn.send(destination, "x", headers={"traceparent": theirs}, receipt=True)
            message = sub.get(timeout=LIMIT)
    assert message is not None
    assert message.headers["traceparent"] == theirs
    (producer,) = otel.of(SpanKind.PRODUCER)
    assert [f"{link.context.span_id:016x}" for link in producer.links] == ["0123456789abcdef"]
    (consumer,) = otel.of(SpanKind.CONSUMER)
    assert consumer.context is not None
    assert f"{consumer.context.trace_id:032x}" == "0123456789abcdef0123456789abcdef"


def test_blocking_send_joins_the_current_trace(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    tracer = trace.get_tracer("test")
    with stompy.Connection(broker.url) as conn:
        with tracer.start_as_current_span("checkout") as outer:
            conn.send(destination, "x", receipt=True)
    (producer,) = otel.of(SpanKind.PRODUCER)
    assert producer.parent is not None
    assert producer.parent.span_id == outer.get_span_context().span_id


def test_blocking_transaction_and_send_many(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination) as sub:
            with conn.transaction() as tx:
                tx.send(destination, "in a transaction")
            sent = conn.send_many([Outgoing(destination, str(i)) for i in range(3)], receipt=True)
            assert sent == 3
            received = [sub.get(timeout=LIMIT) for _ in range(4)]
    producers = otel.of(SpanKind.PRODUCER, f"send {destination}")
    assert len(producers) == 4
    assert dict(producers[0].attributes or {})["messaging.stomp.transaction"] == tx.id
    by_context = {traceparent(span) for span in producers}
    assert len(by_context) == 4  # each message its own creation context
    for message in received:
        assert message is not None
        assert message.headers["traceparent"][:-2] in by_context
    assert otel.total("messaging.client.sent.messages") == 4


def test_blocking_get_batch_is_one_span_linking_each(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination) as sub:
            conn.send_many([Outgoing(destination, str(i)) for i in range(3)], receipt=True)
            batch: list[stompy.Message] = []
            for _ in range(3):  # bounded: get_batch waits LIMIT at most
                batch += sub.get_batch(3 - len(batch), timeout=LIMIT)
                if len(batch) == 3:
                    break
    assert len(batch) == 3
    consumers = otel.of(SpanKind.CONSUMER)
    linked = {link.context.span_id for span in consumers for link in span.links}
    producers = {s.context.span_id for s in otel.of(SpanKind.PRODUCER) if s.context}
    assert linked == producers
    assert otel.total("messaging.client.consumed.messages") == 3


def test_blocking_callback_runs_in_a_process_span(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    done = threading.Event()
    inner: list[trace.Span] = []
    tracer = trace.get_tracer("test")

    def handle(message: stompy.Message) -> None:
        with tracer.start_as_current_span("handle") as span:
            inner.append(span)
        done.set()

    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination, on_message=handle):
            conn.send(destination, "x", receipt=True)
            assert done.wait(LIMIT)
    (producer,) = otel.of(SpanKind.PRODUCER)
    (process,) = otel.of(SpanKind.CONSUMER)
    assert process.name == f"process {destination}"
    assert dict(process.attributes or {})["messaging.operation.type"] == "process"
    assert process.parent is not None
    assert producer.context is not None
    assert process.parent.span_id == producer.context.span_id
    (handled,) = otel.of(SpanKind.INTERNAL, "handle")
    assert handled.parent is not None
    assert process.context is not None
    assert handled.parent.span_id == process.context.span_id


def test_blocking_request_and_reply_are_one_trace(otel: Recorded, broker: Broker) -> None:
    service = queue()
    with stompy.Connection(broker.url) as responder, stompy.Connection(broker.url) as requester:
        responder.subscribe(service, on_message=lambda m: m.reply(m.text.upper()))
        reply = requester.request(service, "ping", timeout=LIMIT)
    assert reply.text == "PING"
    spans = otel.spans()
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    request = next(s for s in otel.of(SpanKind.PRODUCER) if s.name == f"send {service}")
    attributes = dict(request.attributes or {})
    assert attributes["messaging.message.conversation_id"] == reply.headers["correlation-id"]
    names = sorted(s.name for s in spans)
    assert names == sorted(
        [f"send {service}", f"process {service}", "send", "receive"]
    )  # the reply's temporary queue stays out of the names
    (reply_send,) = [s for s in otel.of(SpanKind.PRODUCER) if s.name == "send"]
    assert dict(reply_send.attributes or {})["messaging.destination.temporary"] is True


def test_a_reply_from_get_joins_the_requests_trace(otel: Recorded, broker: Broker) -> None:
    """A responder that took the request with get() has no current span: its reply's
    parent is the request's creation context."""
    service = queue()
    with stompy.Connection(broker.url) as responder, stompy.Connection(broker.url) as requester:
        sub = responder.subscribe(service)
        results: list[stompy.Message] = []
        thread = threading.Thread(
            target=lambda: results.append(requester.request(service, "ping", timeout=LIMIT))
        )
        thread.start()
        try:
            request = sub.get(timeout=LIMIT)
            assert request is not None
            request.reply("pong")
        finally:
            thread.join(LIMIT)
    assert [m.text for m in results] == ["pong"]
    assert len({s.context.trace_id for s in otel.spans() if s.context}) == 1


def test_reconnects_and_heartbeat_timeouts_are_counted(otel: Recorded) -> None:
    policy = stompy.Reconnect(initial_delay=0.01, max_delay=0.1)
    with run_broker(heartbeats=(100, 100)) as broker, run_fault_proxy(broker.url) as proxy:
        with stompy.Connection(proxy.url, heartbeats=(100, 100), reconnect=policy) as conn:
            conn.send(queue(), "x", receipt=True)
            proxy.stall(direction="downstream")  # the socket stays open, silent
            for _ in range(200):  # bounded: 10 s
                if otel.total("stompy.client.heartbeat.timeouts"):
                    break
                time.sleep(0.05)
            proxy.resume()
            conn.send(queue(), "after", receipt=True)  # once reconnected
            for _ in range(200):  # bounded: 10 s
                if otel.total("stompy.client.reconnects"):
                    break
                time.sleep(0.05)
    assert otel.total("stompy.client.heartbeat.timeouts") == 1
    assert otel.total("stompy.client.reconnects") == 1


def test_trace_headers_for_a_message_sent_elsewhere(otel: Recorded) -> None:
    assert trace_headers() == {}  # no span current
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("task") as span:
        headers = trace_headers()
        assert headers["traceparent"].startswith(f"00-{span.get_span_context().trace_id:032x}")
        assert trace_headers({"traceparent": "mine"}) == {}


# -- the async client, on asyncio and trio ---------------------------------------------


@pytest.mark.anyio
async def test_async_send_and_get_are_one_trace(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with anyio.fail_after(LIMIT):
        async with stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(destination, ack="client") as sub:
                await conn.send(destination, "hello", receipt=True)
                message = await sub.get(timeout=LIMIT)
                assert message is not None
                await message.ack()
    check_send_and_receive(otel, destination, dict(message.headers), broker.port, ack="client")
    assert otel.total("messaging.client.sent.messages") == 1
    assert otel.total("messaging.client.consumed.messages") == 1


@pytest.mark.anyio
async def test_async_fast_path_send_and_iteration(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with anyio.fail_after(LIMIT):
        async with stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(destination) as sub:
                await conn.send(destination, "x")
                message = await sub.__anext__()
    check_send_and_receive(otel, destination, dict(message.headers), broker.port)


@pytest.mark.anyio
async def test_async_tracing_off_records_and_sends_nothing(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    with anyio.fail_after(LIMIT):
        async with stompy.AsyncConnection(broker.url, tracing=False) as conn:
            async with conn.subscribe(destination) as sub:
                await conn.send(destination, "x", receipt=True)
                await conn.send_many([Outgoing(destination, "y")], receipt=True)
                received = [await sub.get(timeout=LIMIT) for _ in range(2)]
    assert otel.spans() == []
    assert all(m is not None and "traceparent" not in m.headers for m in received)
    assert otel.points("messaging.client.sent.messages") == []


@pytest.mark.anyio
async def test_async_batch_transaction_and_callback(otel: Recorded, broker: Broker) -> None:
    destination = queue()
    called = anyio.Event()
    tracer = trace.get_tracer("test")

    async def handle(message: stompy.AsyncMessage) -> None:
        with tracer.start_as_current_span("handle"):
            await anyio.sleep(0)
        called.set()

    with anyio.fail_after(LIMIT):
        async with stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe(destination) as sub:
                async with conn.transaction() as tx:
                    await tx.send(destination, "t")
                await conn.send_many([Outgoing(destination, "m")], receipt=True)
                batch: list[stompy.AsyncMessage] = []
                for _ in range(2):  # bounded: get_batch waits LIMIT at most
                    batch += await sub.get_batch(2 - len(batch), timeout=LIMIT)
                    if len(batch) == 2:
                        break
            other = queue()
            async with conn.subscribe(other, on_message=handle):
                await conn.send(other, "c", receipt=True)
                await called.wait()
    assert len(batch) == 2
    producers = otel.of(SpanKind.PRODUCER)
    assert len(producers) == 3
    assert dict(producers[0].attributes or {})["messaging.stomp.transaction"] == tx.id
    (process,) = otel.of(SpanKind.CONSUMER, f"process {other}")
    (handled,) = otel.of(SpanKind.INTERNAL, "handle")
    assert handled.parent is not None
    assert process.context is not None
    assert handled.parent.span_id == process.context.span_id


@pytest.mark.anyio
async def test_async_request_and_reply_are_one_trace(otel: Recorded, broker: Broker) -> None:
    service = queue()

    async def answer(message: stompy.AsyncMessage) -> None:
        await message.reply(message.text.upper())

    with anyio.fail_after(LIMIT):
        async with stompy.AsyncConnection(broker.url) as responder:
            await responder.subscribe(service, on_message=answer)
            async with stompy.AsyncConnection(broker.url) as requester:
                reply = await requester.request(service, "ping", timeout=LIMIT)
    assert reply.text == "PING"
    spans: Sequence[ReadableSpan] = otel.spans()
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    assert sorted(s.name for s in spans) == sorted(
        [f"send {service}", f"process {service}", "send", "receive"]
    )


def test_a_malformed_traceparent_is_kept_and_starts_no_trace(
    otel: Recorded, broker: Broker
) -> None:
    destination = queue()
    with stompy.Connection(broker.url) as conn:
        with conn.subscribe(destination) as sub:
            conn.send(destination, "x", headers={"traceparent": "not a trace"}, receipt=True)
            message = sub.get(timeout=LIMIT)
    assert message is not None
    assert message.headers["traceparent"] == "not a trace"  # the user's: not replaced
    (producer,) = otel.of(SpanKind.PRODUCER)
    assert producer.links == ()
    (consumer,) = otel.of(SpanKind.CONSUMER)
    assert consumer.parent is None
    assert consumer.links == ()


def test_a_tally_keeps_at_most_its_limit_of_attribute_sets() -> None:
    tally = Tally()
    for i in range(MAX_TALLIES + 10):  # bounded
        tally.add(("send", f"/queue/{i}", "", "127.0.0.1", 61613), 3)
    counted = tally.observe(0)
    assert len(counted) == MAX_TALLIES + 1
    (overflow,) = [o for o in counted if o.attributes == {"otel.metric.overflow": True}]
    assert overflow.value == 10
    assert sum(o.value for o in tally.observe(1)) == 3 * (MAX_TALLIES + 10)


def test_the_spark_connector_carries_the_trace_context(otel: Recorded, broker: Broker) -> None:
    # Writes inject the task's context into every message; reads keep it in `headers`.
    pytest.importorskip("pyarrow")
    from stompy.spark._batch_read import drain
    from stompy.spark._options import parse_read_options, parse_write_options
    from stompy.spark._write import TaskIdentity, WriteColumns, write_partition

    destination = queue()
    write = parse_write_options({"url": broker.url, "destination": destination})
    columns = WriteColumns.from_schema([("body", "string")], write.destination)
    with trace.get_tracer("a-spark-task").start_as_current_span("task") as task:
        write_partition(iter([("a",), ("b",)]), write, columns, TaskIdentity("q", "0", 0))
    read = parse_read_options(
        {"url": broker.url, "destination": destination, "idletimeout": "0.3"}, streaming=False
    )
    rows = [row for batch in drain(read) for row in batch.to_pylist()]
    assert sorted(row["body"] for row in rows) == [b"a", b"b"]
    trace_id = format(task.get_span_context().trace_id, "032x")
    for row in rows:
        assert dict(row["headers"])["traceparent"].split("-")[1] == trace_id
    producers = otel.of(SpanKind.PRODUCER)
    assert len(producers) == 2
    assert all(span.context.trace_id == task.get_span_context().trace_id for span in producers)

"""OpenTelemetry for both clients: spans, trace context in STOMP headers, metrics.

Theory of operation. A connection asks :func:`instrument` once, as it connects, what it
records: a tracer when the application installed an SDK's tracer provider, instruments
when it installed a meter provider, else nothing at all (``None``). Without an SDK the
OpenTelemetry API only hands out no-op objects, and the clients then keep their plain
paths: per message, the cost of tracing that is off is one ``is None``. This module is
imported only by a connection whose ``tracing`` option is on, and only if
``opentelemetry-api`` can be imported; the sans-IO core never imports it.

With a tracer, every call that sends runs a :class:`TracedCall` around the engine
engine's steps (:mod:`stompy._engine.calls`): a PRODUCER span starts as the call does, its
context goes into the SEND's headers with the globally configured propagator (W3C
``traceparent`` and ``tracestate`` by default; a header the user set wins, and a
``traceparent`` of the user's is the message's creation context, linked, not replaced),
and the span ends as the call does: at the RECEIPT for a send that asked for one, at the
reply for a request. Every message handed to the user gets a CONSUMER span whose parent
is the creation context extracted from its headers (and a link to it, as the messaging
conventions ask of consumers): ``receive`` for ``get()``, iteration and a request's
reply, one ``receive`` span linking each message for ``get_batch()``, and ``process``
around an ``on_message`` callback, which runs with that span current.

With instruments, messages and body bytes, sent and handed over, are counted in a
:class:`Tally` (an integer add per message) that the meter provider reads when it
collects; receipt latency is a histogram, and reconnects and heart-beat timeouts are
counted through the lifecycle hooks (:meth:`Telemetry.watch`).

Names and attributes follow OpenTelemetry's messaging semantic conventions, with
``messaging.system`` = ``stomp`` and ``messaging.stomp.*`` for what only STOMP has.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from stompy._core.frames import Frame
from stompy._engine.calls import Call, Sends, Steps
from stompy._engine.engine import Engine
from stompy._engine.keywords import RequestOptions
from stompy._engine.message import MessageBase
from stompy._engine.options import ClientOptions
from stompy._engine.outgoing import Outgoing
from stompy._engine.urls import Endpoint
from stompy._version import __version__
from stompy.errors import HeartbeatTimeout, StompError

__all__ = (
    "INSTRUMENTATION_NAME",
    "SYSTEM",
    "Instruments",
    "Tally",
    "Telemetry",
    "TracedCall",
    "instrument",
    "trace_headers",
)

#: The instrumentation scope's name (the tracer's and the meter's).
INSTRUMENTATION_NAME: Final = "stompy"
#: The semantic conventions the spans and metrics follow.
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.28.0"
#: ``messaging.system``.
SYSTEM: Final = "stomp"

# The attributes, as the messaging semantic conventions name them.
MESSAGING_SYSTEM: Final = "messaging.system"
OPERATION_NAME: Final = "messaging.operation.name"
OPERATION_TYPE: Final = "messaging.operation.type"
DESTINATION: Final = "messaging.destination.name"
TEMPORARY: Final = "messaging.destination.temporary"
SUBSCRIPTION: Final = "messaging.destination.subscription.name"
MESSAGE_ID: Final = "messaging.message.id"
BODY_SIZE: Final = "messaging.message.body.size"
CONVERSATION_ID: Final = "messaging.message.conversation_id"
BATCH_COUNT: Final = "messaging.batch.message_count"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
PROTOCOL_NAME: Final = "network.protocol.name"
PROTOCOL_VERSION: Final = "network.protocol.version"
ERROR_TYPE: Final = "error.type"
#: STOMP's own: the subscription's ack mode, the transaction a SEND belongs to.
ACK_MODE: Final = "messaging.stomp.ack_mode"
TRANSACTION: Final = "messaging.stomp.transaction"

#: Destination prefixes of temporary queues and topics (RabbitMQ, ActiveMQ, the
#: in-process broker): their names stay out of span names.
TEMPORARY_PREFIXES: Final = (
    "/temp-queue/",
    "/temp-topic/",
    "/reply-queue/",
    "/remote-temp-queue/",
    "/remote-temp-topic/",
)
#: Buckets for the receipt latency (seconds): a broker on the same host answers in
#: well under a millisecond, one far away or loaded in seconds.
RECEIPT_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

M = TypeVar("M", bound=MessageBase)
T = TypeVar("T")
Attributes = dict[str, str | bool | int | float]

# The providers the API hands out while no SDK is installed: tracing them costs time
# and records nothing.
_NO_SDK_TRACERS: Final = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_NO_SDK_METERS: Final = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider"})


class _FrameGetter(Getter[Frame]):
    """Reads propagation headers from a received frame (the first entry of a name)."""

    def get(self, carrier: Frame, key: str) -> list[str] | None:
        value = carrier.get(key)
        return None if value is None else [value]

    def keys(self, carrier: Frame) -> list[str]:
        return [name for name, _ in carrier.headers]


_FRAME_GETTER: Final = _FrameGetter()


def _body_size(body: bytes | str) -> int:
    if isinstance(body, bytes) or body.isascii():
        return len(body)
    return len(body.encode("utf-8"))


def _temporary(destination: str) -> bool:
    return destination.startswith(TEMPORARY_PREFIXES)


def _span_name(operation: str, destination: str) -> str:
    """``{operation} {destination}``, the destination left out when it is temporary."""
    if not destination or _temporary(destination):
        return operation
    return f"{operation} {destination}"


def _fail(span: Span, exc: BaseException) -> None:
    """Mark ``span`` as ended by ``exc`` (a cancelled wait is ``GeneratorExit``)."""
    cancelled = isinstance(exc, GeneratorExit)
    kind = "cancelled" if cancelled else type(exc).__qualname__
    span.set_attribute(ERROR_TYPE, kind)
    if not cancelled:
        span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc) or kind))


def trace_headers(headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """The trace context headers (``traceparent``, ``tracestate``...) to add to a
    message sent outside a connection (the Spark connector's writer): those of the
    current span, as the global propagator writes them, less any name in ``headers``.

    Empty when no span is current (no SDK, or no trace in progress).
    """
    span = trace.get_current_span()
    if not span.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if headers:
        for name in headers:
            carrier.pop(name, None)
    return carrier


#: Attribute sets a :class:`Tally` keeps at most; the measurements of any further one
#: are counted under ``otel.metric.overflow`` (as the SDK does past its own limit).
MAX_TALLIES: Final = 2000
_OVERFLOW: Final[Attributes] = {"otel.metric.overflow": True}

#: What a tally is kept by: operation, destination, subscription, broker host and port.
TallyKey = tuple[str, str, str, str, int]


class Tally:
    """Messages and their body bytes per attribute set, counted as they go (an integer
    add under a lock) and reported when a metric reader collects: the SDK's
    per-measurement work (cleaning and hashing attributes) would cost more than the
    message itself."""

    __slots__ = ("_attributes", "_counts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[TallyKey | None, list[int]] = {}
        self._attributes: dict[TallyKey | None, Attributes] = {None: _OVERFLOW}

    def add(self, key: TallyKey, size: int) -> None:
        with self._lock:
            counts = self._counts.get(key)
            if counts is None:
                if len(self._attributes) > MAX_TALLIES:
                    counts = self._counts.setdefault(None, [0, 0])
                else:
                    counts = self._counts[key] = [0, 0]
                    self._attributes[key] = _tally_attributes(key)
            counts[0] += 1
            counts[1] += size

    def observe(self, which: int) -> list[Observation]:
        """The running totals: of messages (``which`` 0) or of bytes (1)."""
        with self._lock:
            return [
                Observation(counts[which], self._attributes[key])
                for key, counts in self._counts.items()
            ]


def _tally_attributes(key: TallyKey) -> Attributes:
    operation, destination, subscription, host, port = key
    attributes: Attributes = {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: operation}
    if destination:
        if _temporary(destination):  # a name per connection: kept out of metrics
            attributes[TEMPORARY] = True
        else:
            attributes[DESTINATION] = destination
    if subscription:
        attributes[SUBSCRIPTION] = subscription
    if host:
        attributes[SERVER_ADDRESS] = host
        attributes[SERVER_PORT] = port
    return attributes


class Instruments:
    """The metrics of every connection that records them, made once per meter provider."""

    __slots__ = ("consumed", "heartbeat_timeouts", "receipt_duration", "reconnects", "sent")

    def __init__(self, meter: metrics.Meter) -> None:
        self.sent = Tally()
        self.consumed = Tally()
        for tally, name, what in (
            (self.sent, "sent", "sent (SEND frames queued for the broker)"),
            (self.consumed, "consumed", "handed to the application"),
        ):
            meter.create_observable_counter(
                f"messaging.client.{name}.messages",
                [_callback(tally, 0)],
                unit="{message}",
                description=f"Messages {what}.",
            )
            meter.create_observable_counter(
                f"stompy.client.{name}.bytes",
                [_callback(tally, 1)],
                unit="By",
                description=f"Body bytes of the messages {what}.",
            )
        self.receipt_duration = meter.create_histogram(
            "stompy.client.receipt.duration",
            unit="s",
            description="From a send that asks for a receipt to its RECEIPT.",
            explicit_bucket_boundaries_advisory=RECEIPT_BUCKETS,
        )
        self.reconnects = meter.create_counter(
            "stompy.client.reconnects",
            unit="{connection}",
            description="Connections established again after one was lost.",
        )
        self.heartbeat_timeouts = meter.create_counter(
            "stompy.client.heartbeat.timeouts",
            unit="{timeout}",
            description="Connections found dead: the broker sent nothing for too long.",
        )


def _callback(tally: Tally, which: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return tally.observe(which)

    return observe


# What instrument() found last: the provider it asked, and what it made of it.
_tracers: tuple[object, Tracer] | None = None
_meters: tuple[object, Instruments] | None = None


def _tracer() -> Tracer | None:
    global _tracers
    provider = trace.get_tracer_provider()
    if isinstance(provider, _NO_SDK_TRACERS):
        return None
    if _tracers is None or _tracers[0] is not provider:
        tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__, schema_url=SCHEMA_URL)
        _tracers = (provider, tracer)
    return _tracers[1]


def _instruments() -> Instruments | None:
    global _meters
    provider = metrics.get_meter_provider()
    if type(provider).__name__ in _NO_SDK_METERS:
        return None
    if _meters is None or _meters[0] is not provider:
        meter = provider.get_meter(INSTRUMENTATION_NAME, __version__, schema_url=SCHEMA_URL)
        _meters = (provider, Instruments(meter))
    return _meters[1]


def instrument(engine: Engine[Any]) -> Telemetry | None:
    """What ``engine``'s connection records, decided now (as it connects): ``None``
    when no SDK is installed, for traces or for metrics."""
    tracer = _tracer()
    instruments = _instruments()
    if tracer is None and instruments is None:
        return None
    telemetry = Telemetry(engine, tracer, instruments)
    if instruments is not None:
        telemetry.watch(engine.options)
    return telemetry


class Telemetry:
    """One connection's instrumentation: spans (with a ``tracer``) and metrics (with
    ``instruments``) for its calls, around the engine's steps."""

    __slots__ = ("_engine", "_instruments", "_tracer")

    def __init__(
        self, engine: Engine[Any], tracer: Tracer | None, instruments: Instruments | None
    ) -> None:
        self._engine = engine
        self._tracer = tracer
        self._instruments = instruments

    def _attributes(self, operation: str, kind: str, destination: str) -> Attributes:
        """What every span and measurement of ``operation`` says."""
        attributes: Attributes = {
            MESSAGING_SYSTEM: SYSTEM,
            OPERATION_NAME: operation,
            OPERATION_TYPE: kind,
        }
        if destination:
            attributes[DESTINATION] = destination
            if _temporary(destination):
                attributes[TEMPORARY] = True
        engine = self._engine
        endpoint = engine.endpoint
        if endpoint is not None:
            attributes[SERVER_ADDRESS] = endpoint.host
            attributes[SERVER_PORT] = endpoint.port
        connected = engine.connected
        if connected is not None:
            attributes[PROTOCOL_NAME] = SYSTEM
            attributes[PROTOCOL_VERSION] = connected.version
        return attributes

    # -- sending -------------------------------------------------------------------------

    def producer(
        self, message: Outgoing, transaction: str | None, parent: Frame | None = None
    ) -> tuple[Span | None, Outgoing]:
        """Start the PRODUCER span of one message; the message to send instead.

        Its context is injected in the headers unless they carry a ``traceparent``
        already (the user's creation context: kept, and linked). ``parent``: the
        received message this one answers, whose creation context is the parent when
        no span is current.
        """
        tracer = self._tracer
        if tracer is None:
            return None, message
        destination, headers = message.destination, message.headers
        attributes = self._attributes("send", "send", destination)
        attributes[BODY_SIZE] = _body_size(message.body)
        if transaction is not None:
            attributes[TRANSACTION] = transaction
        links: list[Link] | None = None
        own = headers is not None and "traceparent" in headers
        if own:
            assert headers is not None
            linked = trace.get_current_span(propagate.extract(headers)).get_span_context()
            links = [Link(linked)] if linked.is_valid else None
        if headers is not None and "correlation-id" in headers:
            attributes[CONVERSATION_ID] = headers["correlation-id"]
        context = None
        if parent is not None and not trace.get_current_span().get_span_context().is_valid:
            context = propagate.extract(parent, getter=_FRAME_GETTER)
        span = tracer.start_span(
            _span_name("send", destination),
            context,
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=links,
        )
        if own:
            return span, message
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        traced = {**carrier, **headers} if headers else carrier
        return span, Outgoing(destination, message.body, traced, message.content_type)

    def sent(self, destination: str, body: bytes | str, receipt_wait: float | None) -> None:
        """Count a message sent; ``receipt_wait``: the seconds its RECEIPT took, if it
        asked for one."""
        instruments = self._instruments
        if instruments is None:
            return
        key = self._key("send", destination, "")
        instruments.sent.add(key, _body_size(body))
        if receipt_wait is not None:
            instruments.receipt_duration.record(receipt_wait, _tally_attributes(key))

    def _key(self, operation: str, destination: str, subscription: str) -> TallyKey:
        endpoint = self._engine.endpoint
        if endpoint is None:
            return (operation, destination, subscription, "", 0)
        return (operation, destination, subscription, endpoint.host, endpoint.port)

    def traced(self, call: Call[M]) -> TracedCall[M]:
        """``call``'s sends, each message in a PRODUCER span."""
        return TracedCall(self, call)

    # -- receiving -----------------------------------------------------------------------

    def _consumer_attributes(self, operation: str, message: MessageBase) -> Attributes:
        event = message.event
        attributes = self._attributes(operation, operation, event.destination)
        attributes[SUBSCRIPTION] = event.subscription
        attributes[ACK_MODE] = event.ack_mode
        attributes[MESSAGE_ID] = event.message_id
        attributes[BODY_SIZE] = len(event.frame.body)
        conversation = event.frame.get("correlation-id")
        if conversation is not None:
            attributes[CONVERSATION_ID] = conversation
        return attributes

    def _consumed(self, operation: str, messages: Sequence[MessageBase]) -> None:
        instruments = self._instruments
        if instruments is None:
            return
        add, key = instruments.consumed.add, self._key
        for message in messages:
            event = message.event
            add(key(operation, event.destination, event.subscription), len(event.frame.body))

    @staticmethod
    def _creation(frame: Frame) -> tuple[Context | None, Link | None]:
        """The creation context in ``frame``'s headers (``None`` if it has none) and
        a link to it."""
        context = propagate.extract(frame, getter=_FRAME_GETTER)
        linked = trace.get_current_span(context).get_span_context()
        if not linked.is_valid:
            return None, None
        return context, Link(linked)

    def _consumer(self, operation: str, message: MessageBase, start_time: int | None) -> Span:
        assert self._tracer is not None
        context, link = self._creation(message.event.frame)
        return self._tracer.start_span(
            _span_name(operation, message.event.destination),
            context,
            kind=SpanKind.CONSUMER,
            attributes=self._consumer_attributes(operation, message),
            links=None if link is None else [link],
            start_time=start_time,
        )

    def received(self, message: MessageBase, started: int) -> None:
        """``message`` was handed to the user by a ``get()`` that began at ``started``
        (``time.time_ns()``): its ``receive`` span."""
        if self._tracer is not None:
            self._consumer("receive", message, started).end()
        self._consumed("receive", (message,))

    def received_batch(self, messages: Sequence[MessageBase], started: int) -> None:
        """``get_batch()`` handed ``messages`` over: one ``receive`` span linking each
        message's creation context (a batch has no single parent)."""
        tracer = self._tracer
        if tracer is not None and messages:
            if len(messages) == 1:
                self._consumer("receive", messages[0], started).end()
            else:
                first = messages[0].event
                destinations = {m.event.destination for m in messages}
                destination = first.destination if len(destinations) == 1 else ""
                attributes = self._attributes("receive", "receive", destination)
                attributes[SUBSCRIPTION] = first.subscription
                attributes[ACK_MODE] = first.ack_mode
                attributes[BATCH_COUNT] = len(messages)
                links = []
                for message in messages:
                    _, link = self._creation(message.event.frame)
                    if link is not None:
                        links.append(link)
                tracer.start_span(
                    _span_name("receive", destination),
                    kind=SpanKind.CONSUMER,
                    attributes=attributes,
                    links=links,
                    start_time=started,
                ).end()
        self._consumed("receive", messages)

    @contextlib.contextmanager
    def processing(self, message: MessageBase) -> Iterator[None]:
        """Around an ``on_message`` callback: its ``process`` span, current while it
        runs (what the callback sends is its child), marked with what it raises."""
        self._consumed("process", (message,))
        if self._tracer is None:
            yield
            return
        span = self._consumer("process", message, None)
        with trace.use_span(span, end_on_exit=True):
            yield

    # -- the connection's life -----------------------------------------------------------

    def watch(self, options: ClientOptions) -> None:
        """Count reconnects and heart-beat timeouts through the lifecycle hooks; each
        still calls the user's own and returns its result (to be awaited)."""
        instruments = self._instruments
        assert instruments is not None
        reconnected = options.on_reconnected
        disconnected = options.on_disconnected

        def on_reconnected(endpoint: Endpoint) -> object:
            instruments.reconnects.add(1, self._connection_attributes())
            return reconnected(endpoint) if reconnected is not None else None

        def on_disconnected(error: StompError | None) -> object:
            if isinstance(error, HeartbeatTimeout):
                instruments.heartbeat_timeouts.add(1, self._connection_attributes())
            return disconnected(error) if disconnected is not None else None

        options.on_reconnected = on_reconnected
        options.on_disconnected = on_disconnected

    def _connection_attributes(self) -> Attributes:
        attributes = _tally_attributes(self._key("", "", ""))
        del attributes[OPERATION_NAME]
        return attributes


def _in_spans(spans: Sequence[Span | None], steps: Steps[T]) -> Steps[T]:
    """``steps``, the ``spans`` ended with them (marked with what they raised)."""
    try:
        return (yield from steps)
    except BaseException as exc:
        for span in spans:
            if span is not None:
                _fail(span, exc)
        raise
    finally:
        for span in spans:
            if span is not None:
                span.end()


class TracedCall(Sends[M]):
    """A :class:`Call`'s sends (``send``, ``send_many``'s pieces, ``request``, ``reply``),
    each message in a PRODUCER span: what a connection that records telemetry runs
    instead of the call's own (:func:`stompy._client.base.traced`)."""

    __slots__ = ("call", "telemetry")

    def __init__(self, telemetry: Telemetry, call: Call[M]) -> None:
        self.telemetry = telemetry
        self.call = call

    def send_one(
        self, message: Outgoing, transaction: str | None, receipt: bool, parent: Frame | None = None
    ) -> Steps[None]:
        """:meth:`Call.send_one` in a PRODUCER span that ends with it (at the RECEIPT);
        a reply's span has the request's creation context for parent when no span is
        current, so that the reply joins the request's trace."""
        span, traced = self.telemetry.producer(message, transaction, parent)
        started = time.perf_counter()
        yield from _in_spans((span,), self.call.send_one(traced, transaction, receipt))
        waited = time.perf_counter() - started if receipt else None
        self.telemetry.sent(message.destination, message.body, waited)

    def send_some(
        self, work: list[Outgoing] | Outgoing, receipt: bool, transaction: str | None, before: int
    ) -> Steps[int]:
        """:meth:`Call.send_some` with a PRODUCER span per message (the last message
        alone, which carries the receipt, as :meth:`send_one`)."""
        if isinstance(work, Outgoing):
            yield from self.send_one(work, transaction, receipt)
            return 1
        spans: list[Span | None] = []
        traced: list[Outgoing] = []
        telemetry = self.telemetry
        for message in work:
            span, sent = telemetry.producer(message, transaction)
            spans.append(span)
            traced.append(sent)
        count = yield from _in_spans(
            spans, self.call.send_some(traced, receipt, transaction, before)
        )
        for message in work:
            telemetry.sent(message.destination, message.body, None)
        return count

    def request(self, destination: str, body: bytes | str, options: RequestOptions) -> Steps[M]:
        """:meth:`Call.request` in a PRODUCER span that ends at the reply, which is
        handed over with a ``receive`` span."""
        telemetry = self.telemetry
        span, sent = telemetry.producer(Outgoing(destination, body, options.get("headers")), None)
        traced: RequestOptions = {**options, "headers": sent.headers}
        try:
            reply = yield from self.call.request(destination, body, traced)
        except BaseException as exc:
            if span is not None:
                _fail(span, exc)
                span.end()
            raise
        telemetry.sent(destination, body, None)
        if isinstance(reply, MessageBase):
            if span is not None:
                conversation = reply.event.frame.get("correlation-id")
                if conversation is not None:
                    span.set_attribute(CONVERSATION_ID, conversation)
            telemetry.received(reply, time.time_ns())  # its wait is the request span's
        if span is not None:
            span.end()
        return reply

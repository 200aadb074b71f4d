"""The options of the ``stomp`` data source, parsed once and checked on the driver.

Spark hands a data source its options as a case-insensitive mapping whose keys are
lower-cased, so every lookup here uses the lower-cased name; the documentation uses
the camel-case spelling. Values stay as written (header names in JSON values keep
their case). Parsing is plain Python without PySpark, so it is tested directly.

The settings objects are pickled to Spark's Python workers. They hold no socket, no
lock and no TLS context: :meth:`ConnectionSettings.connection` makes those inside the
worker. The passcode is kept out of every ``repr`` and every error message.

Every problem is a :class:`~stompy.errors.ConfigurationError` (a ``ValueError``) that
names the option, raised on the driver before a task starts: options that apply to
no read at all when the source is loaded, options that apply to the other kind of
read (batch or streaming) when the reader is made.
"""

from __future__ import annotations

import json
import os
import ssl as _ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

from stompy._checks import MAX_SECONDS
from stompy._client.blocking import Connection
from stompy._core.frames import VERSIONS
from stompy._core.heartbeat import parse_heartbeat
from stompy._engine.keywords import ConnectionOptions
from stompy._engine.options import ClientOptions, Reconnect
from stompy._engine.urls import parse_urls
from stompy.errors import ConfigurationError, ProtocolError, StompError

__all__ = (
    "ConnectionSettings",
    "ReadSettings",
    "WriteSettings",
    "parse_read_options",
    "parse_write_options",
)

ReadMode = Literal["consume", "browse"]

T = TypeVar("T")

#: Options Spark itself may put in the mapping; they are not ours and are ignored.
_SPARK_KEYS: Final = frozenset({"path", "paths", "checkpointlocation"})

_CONNECTION_KEYS: Final = (
    "url",
    "login",
    "passcode",
    "host",
    "heartbeats",
    "versions",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "tlsVerify",
    "connectTimeout",
    "receiptTimeout",
    "clientId",
)
_READ_KEYS: Final = (
    "destination",
    "prefetch",
    "prefetchHeaders",
    "subscribeHeaders",
    "durableName",
    "idleTimeout",
    "numPartitions",
)
#: Options of one kind of read only; given to the other, they are an error.
_BATCH_ONLY_KEYS: Final = ("maxMessagesPerPartition", "mode")
_STREAM_ONLY_KEYS: Final = (
    "maxMessagesPerBatch",
    "maxTriggerDelay",
    "reconnectAttempts",
    "reconnectDelay",
    "reconnectMaxDelay",
)
_WRITE_KEYS: Final = ("destination", "transactional", "dedupHeader", "sendHeaders")

#: Brokers name the SUBSCRIBE header that bounds unacknowledged deliveries
#: differently: RabbitMQ (and stompy's broker) ``prefetch-count``, ActiveMQ
#: ``activemq.prefetchSize``. Both are sent; a broker ignores the one it does not know.
DEFAULT_PREFETCH_HEADERS: Final = ("prefetch-count", "activemq.prefetchSize")
DEFAULT_DEDUP_HEADER: Final = "stompy-dedup-id"
DEFAULT_HEARTBEATS: Final = (10_000, 10_000)
#: Rows per micro-batch. Spark's cost per batch barely grows with its rows up to
#: about this size (the checkpoint, planning, the tasks, the sink's files: a parquet
#: sink's CPU per row fell by two thirds from 32,000-row batches to 128,000-row ones,
#: measured), so small batches cap a stream's rate; the prefetch is twice this.
DEFAULT_BATCH_ROWS: Final = 100_000
#: The default batch on a broker whose prefetch is a 16-bit number (RabbitMQ: its
#: ``prefetch-count`` is AMQP's ``basic.qos`` field): the largest whose prefetch
#: (twice it: one batch in Spark's hands, the next arriving) fits in :data:`MAX_PREFETCH`.
SIXTEEN_BIT_BATCH_ROWS: Final = 32_000
#: Seconds a streaming micro-batch waits at most for its full rows while a backlog
#: arrives (see ``StreamConsumer._fill``): Spark's cost per batch hardly grows with
#: its rows, so under a backlog fuller batches move more messages a second.
DEFAULT_MAX_TRIGGER_DELAY: Final = 2.0
#: How a streaming source rides out a broker restart: attempts from 0.5 s apart,
#: doubling up to 10 s between them, about five minutes in all.
DEFAULT_RECONNECT_ATTEMPTS: Final = 34
DEFAULT_RECONNECT_DELAY: Final = 0.5
DEFAULT_RECONNECT_MAX_DELAY: Final = 10.0
#: How Spark's Python processes that plan a read learn what the session can run at
#: once: the driver sets it in the SparkContext's environment when the source is
#: registered (``StompDataSource.name``), and Spark hands that environment on.
PARALLELISM_VARIABLE: Final = "STOMPY_SPARK_PARALLELISM"
#: ``numPartitions`` when the session's parallelism is not known.
DEFAULT_PARTITIONS: Final = 2
#: The most unacknowledged messages one subscription asks for from RabbitMQ (and
#: what the ``prefetch`` option may be): its ``prefetch-count`` is AMQP's 16-bit
#: ``basic.qos`` field.
MAX_PREFETCH: Final = 65_535


def sixteen_bit_prefetch(server: str | None) -> bool:
    """Whether the broker that sent this CONNECTED ``server`` header takes a prefetch
    of at most :data:`MAX_PREFETCH` (RabbitMQ)."""
    return (server or "").lower().startswith("rabbitmq")


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect; :meth:`connection` opens it (inside a Spark task)."""

    #: The ``url`` option as given (one URL or a comma-separated failover list).
    url: str = field(repr=False)
    login: str | None = None
    passcode: str | None = field(default=None, repr=False)
    host: str | None = None
    heartbeats: tuple[int, int] = DEFAULT_HEARTBEATS
    versions: tuple[str, ...] = VERSIONS
    #: ``None``: TLS when the URL scheme says so (``stomp+ssl://``).
    tls: bool | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify: bool = True
    connect_timeout: float = 10.0
    receipt_timeout: float = 30.0
    client_id: str | None = None

    @property
    def where(self) -> str:
        """The broker addresses without credentials (safe to log)."""
        return ", ".join(str(e) for e in parse_urls(self.url))

    def ssl_context(self) -> bool | _ssl.SSLContext | None:
        """The ``ssl`` argument of :class:`~stompy.Connection` (made in the worker)."""
        custom = self.tls_ca_file or self.tls_cert_file or not self.tls_verify
        if not custom:
            return self.tls
        if self.tls is False:
            return False
        context = _ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = _ssl.CERT_NONE
        return context

    def options(
        self, *, max_pending: int = 1000, reconnect: Reconnect | None = None
    ) -> ConnectionOptions:
        """The keywords of the :class:`~stompy.Connection` but ``ssl`` (its context is
        made in the worker, where the files it reads are)."""
        return {
            "login": self.login,
            "passcode": self.passcode,
            "host": self.host,
            "versions": self.versions,
            "heartbeats": self.heartbeats,
            "connect_timeout": self.connect_timeout,
            "receipt_timeout": self.receipt_timeout,
            "reconnect": reconnect,
            "headers": {"client-id": self.client_id} if self.client_id else None,
            "max_pending": max_pending,
        }

    def connection(
        self, *, max_pending: int = 1000, reconnect: Reconnect | None = None
    ) -> Connection:
        """A new, not yet connected :class:`~stompy.Connection` with these settings."""
        options = self.options(max_pending=max_pending, reconnect=reconnect)
        options["ssl"] = self.ssl_context()
        return Connection(self.url, **options)


@dataclass(frozen=True)
class ReadSettings:
    """The options of ``spark.read`` / ``spark.readStream``."""

    connection: ConnectionSettings
    #: One subscription each; the ``destination`` option lists them, comma-separated.
    destinations: tuple[str, ...]
    #: ``None``: the default, which depends on the broker (:meth:`stream_limits`).
    max_messages_per_batch: int | None = None
    #: Seconds a micro-batch may wait for its full rows under a backlog (0: never).
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    #: Unacknowledged messages the broker may hand a subscription (``None``: per path).
    prefetch: int | None = None
    prefetch_headers: tuple[str, ...] = DEFAULT_PREFETCH_HEADERS
    subscribe_headers: tuple[tuple[str, str], ...] = ()
    durable_name: str | None = None
    idle_timeout: float = 1.0
    #: Batch read: competing consumers. Streaming read: the partitions a batch is split into.
    num_partitions: int = DEFAULT_PARTITIONS
    #: Rows one batch-read task takes at most (``None``: until the destination is idle).
    max_messages_per_partition: int | None = None
    mode: ReadMode = "consume"
    #: The streaming source's reconnect policy (``None``: fail at the first outage).
    reconnect: Reconnect | None = None

    @property
    def batch_rows(self) -> int:
        """The most rows of a micro-batch before the broker is known."""
        return self.max_messages_per_batch or DEFAULT_BATCH_ROWS

    def stream_limits(self, server: str | None = None) -> tuple[int, int]:
        """The most rows of a micro-batch and the prefetch of each streaming
        subscription, on the broker whose CONNECTED ``server`` header this is: one
        batch in Spark's hands and the next arriving, within RabbitMQ's limit there."""
        bounded = sixteen_bit_prefetch(server)
        rows = self.max_messages_per_batch or (
            SIXTEEN_BIT_BATCH_ROWS if bounded else DEFAULT_BATCH_ROWS
        )
        if self.prefetch is not None:
            return rows, self.prefetch
        return rows, min(MAX_PREFETCH, 2 * rows) if bounded else 2 * rows

    @property
    def batch_window(self) -> int:
        """Prefetch of each subscription of a batch-read task.

        A task acknowledges only at its end, so a subscription stops receiving once
        it holds this many: the task then subscribes again for the next window. Small
        first windows let the tasks of a read share the destination.
        """
        if self.prefetch is not None:
            return self.prefetch
        return 1000

    def subscribe_args(
        self, prefetch: int, destination: str, index: int = 0
    ) -> tuple[str | None, dict[str, str]]:
        """The subscription id (``None``: generated) and the SUBSCRIBE headers."""
        headers = {name: str(prefetch) for name in self.prefetch_headers}
        sub_id: str | None = None
        if self.durable_name:
            # The broker-specific spellings of "keep this subscription while I am away":
            # RabbitMQ (durable, auto-delete, and the id names the queue), ActiveMQ
            # (activemq.subscriptionName, with the client-id CONNECT header) and
            # Apollo (persistent, with the id).
            name = self.durable_name if index == 0 else f"{self.durable_name}-{index}"
            sub_id = name
            headers.update(
                {
                    "durable": "true",
                    "auto-delete": "false",
                    "persistent": "true",
                    "activemq.subscriptionName": name,
                }
            )
        headers.update(self.subscribe_headers)
        return sub_id, headers


@dataclass(frozen=True)
class WriteSettings:
    """The options of ``DataFrame.write`` / ``writeStream``."""

    connection: ConnectionSettings
    #: The default destination; a ``destination`` column overrides it per row.
    destination: str | None = None
    transactional: bool = False
    #: The header that carries the de-duplication id (``""``: none).
    dedup_header: str = DEFAULT_DEDUP_HEADER
    send_headers: tuple[tuple[str, str], ...] = ()


# -- parsing -------------------------------------------------------------------------------


def _truth(text: str) -> bool:
    """A yes or a no, as Spark options spell them; ``ValueError`` for anything else."""
    value = text.lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


class _Options:
    """Typed lookups in Spark's options, with errors that name the option."""

    def __init__(
        self,
        options: Mapping[str, str],
        known: Iterable[str],
        what: str,
        elsewhere: Mapping[str, str] | None = None,
    ) -> None:
        self._values = {str(k).lower(): v for k, v in options.items()}
        allowed = {k.lower(): k for k in known}
        for key, where in (elsewhere or {}).items():
            if key.lower() in self._values:
                raise ConfigurationError(f"option {key!r} applies to {where}, not to a {what}")
        unknown = sorted(k for k in self._values if k not in allowed and k not in _SPARK_KEYS)
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) for a STOMP {what}: {', '.join(unknown)}; "
                f"known options are {', '.join(sorted(allowed.values()))}"
            )

    def text(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return None if value is None else str(value)

    def required(self, name: str, why: str = "") -> str:
        value = self.text(name)
        if value is None or not value.strip():
            raise ConfigurationError(f"the STOMP data source needs the option {name!r}{why}")
        return value.strip()

    def _parsed(self, name: str, parse: Callable[[str], T], what: str) -> T | None:
        """The option as ``parse`` reads it (``None`` when not given); a value it refuses
        (``ValueError``) is an error saying the option must be ``what``."""
        raw = self.text(name)
        if raw is None:
            return None
        try:
            return parse(raw.strip())
        except ValueError:
            raise ConfigurationError(f"option {name!r} must be {what}, got {raw!r}") from None

    def integer(self, name: str, default: int, *, minimum: int = 1) -> int:
        value = self._parsed(name, int, "an integer")
        if value is None:
            return default
        if value < minimum:
            raise ConfigurationError(f"option {name!r} must be at least {minimum}, got {value}")
        return value

    def number(self, name: str, default: float, *, zero: bool = False) -> float:
        """Seconds, more than 0 (``zero``: or 0) and at most :data:`MAX_SECONDS`."""
        value = self._parsed(name, float, "a number of seconds")
        if value is None:
            return default
        if not (value >= 0 if zero else value > 0) or not value <= MAX_SECONDS:
            kind = "0 or a positive number" if zero else "a positive number"
            raise ConfigurationError(
                f"option {name!r} must be {kind} of seconds "
                f"(at most {MAX_SECONDS:.0f}), got {value}"
            )
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self._parsed(name, _truth, "true or false")
        return default if value is None else value

    def headers(self, name: str) -> tuple[tuple[str, str], ...]:
        raw = self.text(name)
        if raw is None or not raw.strip():
            return ()
        try:
            value = json.loads(raw)
        except ValueError:
            raise ConfigurationError(
                f"option {name!r} must be a JSON object of header names to strings, "
                'like {"a": "b"}'
            ) from None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigurationError(
                f"option {name!r} must map non-empty header names to string values"
            )
        return tuple(value.items())

    def names(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        raw = self.text(name)
        if raw is None:
            return default
        return tuple(part.strip() for part in raw.split(",") if part.strip())


def _connection(opts: _Options) -> ConnectionSettings:
    url = opts.required("url")
    try:
        parse_urls(url)
    except ValueError as exc:  # its message never shows the passcode
        raise ConfigurationError(f"option 'url': {exc}") from None
    raw_beats = opts.text("heartbeats")
    heartbeats = DEFAULT_HEARTBEATS
    if raw_beats is not None:
        try:
            heartbeats = parse_heartbeat(raw_beats.strip())
        except ProtocolError:
            raise ConfigurationError(
                f"option 'heartbeats' must be two milliseconds counts like '10000,10000', "
                f"got {raw_beats!r}"
            ) from None
    versions = opts.names("versions", VERSIONS)
    if not versions or any(v not in VERSIONS for v in versions):
        raise ConfigurationError(
            f"option 'versions' must list STOMP versions among {', '.join(VERSIONS)}, "
            f"got {opts.text('versions')!r}"
        )
    tls_raw = opts.text("tls")
    settings = ConnectionSettings(
        url=url,
        login=opts.text("login"),
        passcode=opts.text("passcode"),
        host=opts.text("host"),
        heartbeats=heartbeats,
        versions=versions,
        tls=None if tls_raw is None else opts.boolean("tls", False),
        tls_ca_file=opts.text("tlsCaFile"),
        tls_cert_file=opts.text("tlsCertFile"),
        tls_key_file=opts.text("tlsKeyFile"),
        tls_verify=opts.boolean("tlsVerify", True),
        connect_timeout=opts.number("connectTimeout", 10.0),
        receipt_timeout=opts.number("receiptTimeout", 30.0),
        client_id=opts.text("clientId"),
    )
    if settings.tls is False and any(e.tls for e in parse_urls(url)):
        raise ConfigurationError("option 'tls' is false but the URL's scheme needs TLS")
    if settings.tls_key_file and not settings.tls_cert_file:
        raise ConfigurationError("option 'tlsKeyFile' needs 'tlsCertFile' (the certificate)")
    try:
        # What the worker's Connection would refuse (a line break in the login, the
        # host or the client id), refused here, on the driver, before a task starts.
        ClientOptions(url, **settings.options())
    except (StompError, ValueError, TypeError) as exc:  # never shows the passcode
        raise ConfigurationError(f"the connection options cannot be used: {exc}") from None
    return settings


def _reconnect(opts: _Options) -> Reconnect | None:
    attempts = opts.integer("reconnectAttempts", DEFAULT_RECONNECT_ATTEMPTS, minimum=0)
    if not attempts:
        return None
    first = opts.number("reconnectDelay", DEFAULT_RECONNECT_DELAY)
    most = opts.number("reconnectMaxDelay", DEFAULT_RECONNECT_MAX_DELAY)
    if most < first:
        raise ConfigurationError(
            f"option 'reconnectMaxDelay' ({most} s) is below 'reconnectDelay' ({first} s)"
        )
    # An acknowledgement made during an outage waits for the connection to come back
    # as long as the attempts may take (and a minute more for connecting).
    delays = [min(most, first * 2**k) for k in range(min(attempts, 64))]
    return Reconnect(
        max_attempts=attempts,
        initial_delay=first,
        max_delay=most,
        send_timeout=sum(delays) + 60.0,
    )


def _destinations(opts: _Options) -> tuple[str, ...]:
    raw = opts.required("destination", " (the queue or topic to read)")
    names = tuple(part.strip() for part in raw.split(","))
    if not all(names):
        raise ConfigurationError(
            f"option 'destination' lists an empty name in {raw!r}: give one destination "
            "or several separated by commas, like '/queue/a,/queue/b'"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"option 'destination' names a destination twice: {raw!r}")
    return names


def default_partitions() -> int:
    """``numPartitions`` unless given: what the session can run at once (its default
    parallelism, :data:`PARALLELISM_VARIABLE`), :data:`DEFAULT_PARTITIONS` when unknown."""
    value = os.environ.get(PARALLELISM_VARIABLE, "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_PARTITIONS


def parse_read_options(
    options: Mapping[str, str], *, streaming: bool | None = None
) -> ReadSettings:
    """Check and convert the options of a read.

    ``streaming`` says which read (``None``: not known yet, when the source is
    loaded: then only what is wrong for both is refused). Raises
    :class:`~stompy.errors.ConfigurationError` naming the option.
    """
    if streaming is None:
        keys = _CONNECTION_KEYS + _READ_KEYS + _BATCH_ONLY_KEYS + _STREAM_ONLY_KEYS
        opts = _Options(options, keys, "read")
    elif streaming:
        elsewhere = dict.fromkeys(_BATCH_ONLY_KEYS, "batch reads (spark.read)")
        opts = _Options(
            options, _CONNECTION_KEYS + _READ_KEYS + _STREAM_ONLY_KEYS, "streaming read", elsewhere
        )
    else:
        elsewhere = dict.fromkeys(_STREAM_ONLY_KEYS, "streaming reads (spark.readStream)")
        opts = _Options(
            options, _CONNECTION_KEYS + _READ_KEYS + _BATCH_ONLY_KEYS, "batch read", elsewhere
        )
    connection = _connection(opts)
    mode = (opts.text("mode") or "consume").strip().lower()
    if mode not in ("consume", "browse"):
        raise ConfigurationError(f"option 'mode' must be 'consume' or 'browse', got {mode!r}")
    prefetch_raw = opts.text("prefetch")
    prefetch = None if prefetch_raw is None else opts.integer("prefetch", 1)
    if prefetch is not None and prefetch > MAX_PREFETCH:
        raise ConfigurationError(
            f"option 'prefetch' must be at most {MAX_PREFETCH} (RabbitMQ's limit), got {prefetch}"
        )
    per_partition_raw = opts.text("maxMessagesPerPartition")
    reconnect = _reconnect(opts) if streaming is not False else None
    partitions = opts.integer("numPartitions", default_partitions())
    if mode == "browse" and opts.text("numPartitions") is not None and partitions != 1:
        raise ConfigurationError(
            "option 'numPartitions' must be 1 with mode=browse (a browse reads in one task)"
        )
    return ReadSettings(
        connection=connection,
        destinations=_destinations(opts),
        max_messages_per_batch=(
            None
            if opts.text("maxMessagesPerBatch") is None
            else opts.integer("maxMessagesPerBatch", DEFAULT_BATCH_ROWS)
        ),
        max_trigger_delay=opts.number("maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY, zero=True),
        prefetch=prefetch,
        prefetch_headers=opts.names("prefetchHeaders", DEFAULT_PREFETCH_HEADERS),
        subscribe_headers=opts.headers("subscribeHeaders"),
        durable_name=opts.text("durableName") or None,
        idle_timeout=opts.number("idleTimeout", 1.0),
        num_partitions=1 if mode == "browse" else partitions,
        max_messages_per_partition=(
            None if per_partition_raw is None else opts.integer("maxMessagesPerPartition", 1)
        ),
        mode="browse" if mode == "browse" else "consume",
        reconnect=reconnect,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteSettings:
    """Check and convert the options of a write.

    Raises :class:`~stompy.errors.ConfigurationError` naming the option.
    """
    opts = _Options(options, _CONNECTION_KEYS + _WRITE_KEYS, "write")
    connection = _connection(opts)
    destination = opts.text("destination")
    dedup = opts.text("dedupHeader")
    return WriteSettings(
        connection=connection,
        destination=destination.strip() if destination and destination.strip() else None,
        transactional=opts.boolean("transactional", False),
        dedup_header=DEFAULT_DEDUP_HEADER if dedup is None else dedup.strip(),
        send_headers=opts.headers("sendHeaders"),
    )

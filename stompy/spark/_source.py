"""The PySpark side of the ``stomp`` data source: thin adapters over the plain-Python
modules (:mod:`._batch_read`, :mod:`._stream_read`, :mod:`._write`).

Which process runs what (this decides what may hold a socket):

* ``StompDataSource`` and its options are pickled everywhere;
* ``writer()`` / ``streamWriter()`` run in a planning worker; the writer is pickled
  to every task (``write``) and to the worker that calls ``commit`` / ``abort``;
* the stream reader's offset methods run in one long-lived worker per query, next
  to the driver: the subscription lives there; its ``read`` runs in the tasks, on
  a reader made afresh there, and only returns the rows its partition carries;
* the batch reader's ``read`` runs in the tasks: one connection each.

Rows go both ways as Arrow record batches; where the installed PySpark has no Arrow
writer class (4.0 has none for streams), the writers take rows instead.
"""

# Without PySpark installed (the typecheck session), its classes are Any to mypy.
# mypy: disallow-subclassing-any=False

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from stompy.errors import ConfigurationError
from stompy.spark._offsets import offset_dict, offset_value
from stompy.spark._options import (
    PARALLELISM_VARIABLE,
    ReadSettings,
    WriteSettings,
    parse_read_options,
    parse_write_options,
)
from stompy.spark._schema import READ_COLUMNS, READ_SCHEMA
from stompy.spark._write import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    TaskIdentity,
    WriteColumns,
    write_partition,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriterBase
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.streaming.datasource import (
        SupportsTriggerAvailableNow as _AvailableNowBase,
    )
else:
    try:
        from pyspark.sql.streaming.datasource import (
            SupportsTriggerAvailableNow as _AvailableNowBase,
        )
    except ImportError:  # PySpark 4.0 and 4.1 have no such mixin
        _AvailableNowBase = object
    # Arrow record batches in when PySpark offers them; rows otherwise.
    try:
        from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriterBase
    except ImportError:
        from pyspark.sql.datasource import DataSourceWriter as _BatchWriterBase
    try:  # PySpark 4.1 and later
        from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
    except ImportError:
        from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

__all__ = (
    "StompBatch",
    "StompCommitMessage",
    "StompDataSource",
    "StompPartition",
    "StompReader",
    "StompStreamReader",
    "StompStreamWriter",
    "StompWriter",
)

log: Final = logging.getLogger("stompy.spark")


def _check_read_schema(schema: StructType) -> None:
    names = tuple(schema.fieldNames())
    if names != READ_COLUMNS:
        raise ConfigurationError(
            f"the STOMP source produces the columns {', '.join(READ_COLUMNS)}; "
            "leave out .schema() or give exactly this schema"
        )


def _remember_parallelism() -> None:
    """On the driver, put what the session can run at once where the processes that
    plan a read find it (:data:`~._options.PARALLELISM_VARIABLE`).

    A read is planned in a Python process of its own, which has no SparkContext to
    ask; Spark gives it the context's environment as it was when the source was
    registered. ``spark.dataSource.register`` calls :meth:`StompDataSource.name` on
    the driver just before it takes that environment, so this is where it is said.
    Elsewhere (Spark's workers, Spark Connect clients) there is no context: nothing.
    """
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    with contextlib.suppress(Exception):  # a context being stopped: the default holds
        context.environment[PARALLELISM_VARIABLE] = str(context.defaultParallelism)


class StompDataSource(DataSource):
    """``format("stomp")``: read a queue or topic (batch or stream), write any DataFrame.

    Register it once per session with ``spark.dataSource.register(StompDataSource)``.
    See ``docs/spark.md`` for the options and the delivery guarantees.
    """

    @classmethod
    def name(cls) -> str:
        _remember_parallelism()
        return "stomp"

    def schema(self) -> str:
        # Spark asks for the schema when a read is loaded (load()): the first moment
        # to refuse bad options, before any query or job starts.
        parse_read_options(self.options)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> StompReader:
        _check_read_schema(schema)
        return StompReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> StompStreamReader:
        _check_read_schema(schema)
        return StompStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> StompWriter:
        settings, columns = _write_setup(self.options, schema, overwrite)
        return StompWriter(settings, columns, uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StompStreamWriter:
        settings, columns = _write_setup(self.options, schema, overwrite)
        return StompStreamWriter(settings, columns, uuid.uuid4().hex)


# -- reading ------------------------------------------------------------------------------


@dataclass
class StompPartition(InputPartition):
    """One competing consumer of a batch read."""

    index: int
    #: When the read was planned (seconds since the epoch, the driver's clock).
    planned_at: float | None = None


@dataclass
class StompBatch(InputPartition):
    """Part of a micro-batch's rows, carried from the driver-side subscription as Arrow
    IPC bytes (cheaper to pickle and to hand to Spark than rows)."""

    data: bytes


class StompReader(DataSourceReader):
    """Batch read: ``numPartitions`` tasks drain the destination until it is idle."""

    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        now = time.time()
        return [StompPartition(i, now) for i in range(self.settings.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from stompy.spark._batch_read import drain  # the tasks only

        assert isinstance(partition, StompPartition)
        return drain(self.settings, partition.index, planned_at=partition.planned_at)


def _limit(limit: object, default: int) -> tuple[int | None, bool]:
    """Rows a batch may have under Spark's read ``limit`` (PySpark 4.2 and later), and
    whether Spark asked for all there is."""
    if limit is None:  # PySpark 4.0 and 4.1 pass none
        return default, False
    kind = type(limit).__name__
    if kind == "ReadAllAvailable":
        return None, True
    if kind == "ReadMaxRows":
        rows = getattr(limit, "max_rows", default)
        return (rows if isinstance(rows, int) and rows > 0 else default), False
    return default, False


class StompStreamReader(DataSourceStreamReader, _AvailableNowBase):
    """Streaming read from subscriptions held next to the driver (see :mod:`._stream_read`)."""

    def __init__(self, settings: ReadSettings) -> None:
        from stompy.spark._stream_read import StreamConsumer  # not where Spark only plans

        self.settings = settings
        self._consumer = StreamConsumer(settings)
        if _AvailableNowBase is object:
            log.warning(
                "PySpark before 4.2 does not tell a Python source which trigger runs: "
                "under trigger(once=True) or trigger(availableNow=True) the STOMP source "
                "cannot acknowledge what it read, and every run reads it again; use "
                "processingTime triggers, or PySpark 4.2 or later"
            )

    def initialOffset(self) -> dict[str, int]:
        return offset_dict(self._consumer.initial())

    # PySpark 4.0 and 4.1 call latestOffset(); 4.2 added (start, limit) and passes them
    # when the method accepts them.
    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        begin = None if start is None else offset_value(start)
        max_rows, everything = _limit(limit, self.settings.batch_rows)
        return offset_dict(self._consumer.latest(begin, max_rows, all_available=everything))

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadMaxRows  # PySpark 4.2+

        return ReadMaxRows(self.settings.batch_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._consumer.available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        parts = self._consumer.plan(offset_value(start), offset_value(end))
        return [StompBatch(data) for data in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from stompy.spark._arrow import from_ipc

        assert isinstance(partition, StompBatch)
        return from_ipc(partition.data)

    def commit(self, end: dict[str, Any]) -> None:
        self._consumer.commit(offset_value(end))

    def stop(self) -> None:
        self._consumer.close()


# -- writing ------------------------------------------------------------------------------


@dataclass
class StompCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver once the broker confirmed its messages."""

    partition: int
    attempt: int
    messages: int
    batch: str = "0"


def _write_setup(
    options: Any, schema: StructType, overwrite: bool
) -> tuple[WriteSettings, WriteColumns]:
    if overwrite:
        raise ConfigurationError("a STOMP destination can only be appended to, not overwritten")
    settings = parse_write_options(options)
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return settings, WriteColumns.from_schema(fields, settings.destination)


def _task_identity(job: str) -> TaskIdentity:
    context = TaskContext.get()
    if context is None:  # called outside a Spark task (tests)
        return TaskIdentity(job, "0", 0)
    return TaskIdentity(
        context.getLocalProperty(QUERY_ID_PROPERTY) or job,
        context.getLocalProperty(BATCH_ID_PROPERTY) or "0",
        context.partitionId(),
        context.attemptNumber(),
    )


def report(messages: Sequence[WriterCommitMessage | None], where: str, what: str) -> int:
    """Log and return how many messages the successful tasks delivered."""
    done = [m for m in messages if isinstance(m, StompCommitMessage)]
    total = sum(m.messages for m in done)
    log.info(
        "%s: %d messages confirmed by %s from %d of %d tasks",
        what,
        total,
        where,
        len(done),
        len(messages),
    )
    return total


class _Writing:
    def __init__(self, settings: WriteSettings, columns: WriteColumns, job: str) -> None:
        self.settings = settings
        self.columns = columns
        #: Stands for the query id outside streaming: made on the driver, so every task
        #: (and every attempt of one) builds the same de-duplication ids.
        self.job = job

    def _write(self, rows: Iterator[Any]) -> StompCommitMessage:
        task = _task_identity(self.job)
        count = write_partition(rows, self.settings, self.columns, task)
        return StompCommitMessage(task.partition, task.attempt, count, task.batch)

    def _abort(self, messages: Sequence[WriterCommitMessage | None], what: str) -> None:
        done = [m for m in messages if isinstance(m, StompCommitMessage)]
        log.warning(
            "%s failed; the %d messages of the %d tasks that succeeded stay at the broker "
            "(at-least-once: nothing sent is taken back)",
            what,
            sum(m.messages for m in done),
            len(done),
        )


class StompWriter(_Writing, _BatchWriterBase):
    """Batch write: each task sends its rows over its own connection."""

    def write(self, iterator: Iterator[Any]) -> StompCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        report(messages, self.settings.connection.where, f"write {self.job}")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages, f"write {self.job}")


class StompStreamWriter(_Writing, _StreamWriterBase):
    """Streaming write: like the batch write, once per micro-batch."""

    def write(self, iterator: Iterator[Any]) -> StompCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        report(messages, self.settings.connection.where, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages, f"write of batch {batchId}")

"""The write's tasks: columns, de-duplication ids, sending and confirming."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa
import pytest

import stompy
from stompy.errors import ConfigurationError, LocalProtocolError
from stompy.spark._options import parse_write_options
from stompy.spark._write import TaskIdentity, WriteColumns, dedup_id, write_partition
from stompy.testing import Broker, run_broker
from tests.spark._reading import closed_port, take_all


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker(max_queue=100_000) as running:
        yield running


def test_write_columns_from_the_schema() -> None:
    columns = WriteColumns.from_schema(
        [("Headers", "map<string,string>"), ("body", "binary"), ("DESTINATION", "varchar(20)")],
        None,
    )
    assert columns == WriteColumns(body=1, destination=2, headers=0)
    assert WriteColumns.from_schema([("body", "string")], "/queue/x").body == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("body", "string"), ("value", "int")], "column 'value' cannot be written"),
        ([("destination", "string")], "needs a 'body' column"),
        ([("body", "int")], "'body' must be binary or string, not int"),
        ([("body", "string"), ("headers", "map<string,int>")], "'headers' must be map"),
        ([("body", "string"), ("BODY", "string")], "appears twice"),
    ],
)
def test_bad_write_schemas_are_named(fields: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WriteColumns.from_schema(fields, "/queue/x")


def test_a_destination_is_needed() -> None:
    with pytest.raises(ValueError, match="'destination' option or a 'destination' column"):
        WriteColumns.from_schema([("body", "string")], None)


def test_dedup_ids_are_deterministic() -> None:
    task = TaskIdentity("q", "7", 3, attempt=2)
    assert dedup_id(task, 11) == "q.7.3.11"
    assert dedup_id(TaskIdentity("q", "7", 3, attempt=0), 11) == dedup_id(task, 11)


def test_write_partition_sends_and_confirms(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "sendheaders": '{"kind": "test"}'}
    )
    columns = WriteColumns.from_schema(
        [
            ("body", "binary"),
            ("destination", "string"),
            ("headers", "map<string,string>"),
            ("content_type", "string"),
        ],
        settings.destination,
    )
    rows = [
        (bytearray(b"one"), None, {"n": "1", "skip": None}, "application/json"),
        (b"two", "/queue/other", None, None),
        (memoryview(b"three"), None, {"kind": "override"}, None),
    ]
    task = TaskIdentity("query", "5", 2)
    assert write_partition(iter(rows), settings, columns, task) == 3
    out = take_all(broker.url, "/queue/out")
    assert [m.body for m in out] == [b"one", b"three"]
    assert out[0].headers["n"] == "1"
    assert "skip" not in out[0].headers
    assert out[0].content_type == "application/json"
    assert out[0].headers["kind"] == "test"
    assert out[1].headers["kind"] == "override"
    assert [m.headers["stompy-dedup-id"] for m in out] == ["query.5.2.0", "query.5.2.2"]
    other = take_all(broker.url, "/queue/other")
    assert [m.body for m in other] == [b"two"]


def test_write_partition_takes_arrow_batches(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    fields = [
        ("body", "binary"),
        ("destination", "string"),
        ("headers", "map<string,string>"),
        ("content_type", "string"),
    ]
    columns = WriteColumns.from_schema(fields, settings.destination)
    schema = pa.schema(
        [
            ("body", pa.binary()),
            ("destination", pa.string()),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("content_type", pa.string()),
        ]
    )
    first = pa.RecordBatch.from_pylist(
        [
            {"body": b"a", "destination": None, "headers": [("n", "1")], "content_type": None},
            {"body": b"b", "destination": "/queue/x", "headers": None, "content_type": "t/x"},
        ],
        schema=schema,
    )
    second = pa.RecordBatch.from_pylist(
        [{"body": b"c", "destination": None, "headers": [("n", None)], "content_type": None}],
        schema=schema,
    )
    task = TaskIdentity("q", "3", 1)
    assert write_partition(iter([first, second]), settings, columns, task) == 3
    out = take_all(broker.url, "/queue/out")
    assert [m.body for m in out] == [b"a", b"c"]
    assert out[0].headers["n"] == "1"
    assert "n" not in out[1].headers  # a null header value is left out
    assert [m.headers["stompy-dedup-id"] for m in out] == ["q.3.1.0", "q.3.1.2"]
    (other,) = take_all(broker.url, "/queue/x")
    assert other.content_type == "t/x"


def test_a_large_partition_is_confirmed_by_one_receipt(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/big"})
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    batches = [
        pa.RecordBatch.from_pydict({"body": [str(i) for i in range(k, k + 1000)]})
        for k in range(0, 5000, 1000)
    ]
    assert write_partition(iter(batches), settings, columns, TaskIdentity("q", "0", 0)) == 5000
    # The task returned after the broker confirmed: everything is there, in order.
    assert broker.queue_depth("/queue/big") == 5000
    assert [m.text for m in take_all(broker.url, "/queue/big")] == [str(i) for i in range(5000)]


def test_string_bodies_and_no_dedup_header(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "dedupheader": ""}
    )
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    assert write_partition(iter([("héllo",)]), settings, columns, TaskIdentity("q", "0", 0)) == 1
    (message,) = take_all(broker.url, "/queue/out")
    assert message.text == "héllo"
    assert "stompy-dedup-id" not in message.headers


def test_an_empty_partition_opens_no_connection(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    before = broker.stats.connections_opened
    assert write_partition(iter([]), settings, columns, TaskIdentity("q", "0", 0)) == 0
    assert broker.stats.connections_opened == before


def test_a_transactional_task_sends_all_or_nothing(broker: Broker) -> None:
    settings = parse_write_options(
        {"url": broker.url, "destination": "/queue/out", "transactional": "true"}
    )
    columns = WriteColumns.from_schema([("body", "string")], settings.destination)
    task = TaskIdentity("q", "0", 0)
    assert write_partition(iter([("a",), ("b",)]), settings, columns, task) == 2
    assert broker.queue_depth("/queue/out") == 2
    with pytest.raises(ConfigurationError, match="row 2 of partition 0 has no body"):
        write_partition(iter([("c",), ("d",), (None,)]), settings, columns, task)
    assert broker.queue_depth("/queue/out") == 2  # aborted: c and d never arrived


def test_a_row_without_destination_fails_the_task(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url})
    columns = WriteColumns.from_schema([("body", "string"), ("destination", "string")], None)
    with pytest.raises(ConfigurationError, match="no destination"):
        write_partition(iter([("x", None)]), settings, columns, TaskIdentity("q", "0", 0))


def test_reserved_headers_are_refused(broker: Broker) -> None:
    settings = parse_write_options({"url": broker.url, "destination": "/queue/out"})
    columns = WriteColumns.from_schema(
        [("body", "string"), ("headers", "map<string,string>")], settings.destination
    )
    with pytest.raises(LocalProtocolError):
        write_partition(
            iter([("x", {"receipt": "mine"})]), settings, columns, TaskIdentity("q", "0", 0)
        )


def test_an_unreachable_broker_is_named_by_the_write() -> None:
    url = f"stomp://127.0.0.1:{closed_port()}"
    write = parse_write_options({"url": url, "destination": "/queue/x", "connecttimeout": "2"})
    columns = WriteColumns.from_schema([("body", "string")], write.destination)
    with pytest.raises(stompy.ConnectFailed, match=r"127\.0\.0\.1"):
        write_partition(iter([("x",)]), write, columns, TaskIdentity("q", "0", 0))


_COLD_TASK = """
import sys
import pyarrow as pa
from stompy.spark._options import parse_write_options
from stompy.spark._write import TaskIdentity, WriteColumns, write_partition
settings = parse_write_options({"url": sys.argv[1], "destination": "/queue/cold"})
columns = WriteColumns.from_schema([("body", "string")], settings.destination)
rows = pa.RecordBatch.from_pydict({"body": ["a", "b"]})
if sys.argv[2] == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
count = write_partition(iter([rows]), settings, columns, TaskIdentity("cold", "0", 0))
print(count, "opentelemetry" in sys.modules, "stompy._engine.tracing" in sys.modules)
"""


@pytest.mark.parametrize(("sdk", "traced"), [(False, "False False"), (True, "True True")])
def test_a_write_task_loads_opentelemetry_only_where_an_sdk_can_be(
    broker: Broker, sdk: bool, traced: str
) -> None:
    # A fresh Spark Python worker that installed no OpenTelemetry SDK: its first
    # connection would import the API only to find none (0.04-0.15 s of a cold write
    # task). One that did install an SDK still traces.
    pytest.importorskip("opentelemetry.sdk")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PYTHON_")}
    environ["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", _COLD_TASK, broker.url, "sdk" if sdk else "none"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        check=True,
    )
    assert done.stdout.split() == ["2", *traced.split()]
    assert len(take_all(broker.url, "/queue/cold")) == 2

"""One rule for when a connection records OpenTelemetry: ``telemetry_possible()`` of
``stompy._client.base``, asked as each connection connects. The Spark connector kept a
copy of it, asked when its options were made, which turned tracing off for good."""

from __future__ import annotations

import sys

import pytest

from stompy._client.base import telemetry_possible
from stompy.spark._options import ConnectionSettings

OTEL_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def test_the_spark_connector_leaves_tracing_to_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "opentelemetry", raising=False)
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    settings = ConnectionSettings(url="stomp://127.0.0.1:61613")
    assert not telemetry_possible()
    assert "tracing" not in settings.options()  # the connection's default: it decides
    monkeypatch.setenv(OTEL_VARIABLES[0], "sdk")
    assert telemetry_possible()
    conn = settings.connection()
    assert conn._options.tracing is True

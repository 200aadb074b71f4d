"""OpenTelemetry as a newcomer's process meets it: a connection imports the API only
where an SDK can be installed (the application imported the API, or names a provider
in the environment), blocking, asyncio and trio alike; where one is, it traces.

Each case runs in a fresh interpreter: whether a module was imported is a fact of the
whole process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Final

import pytest

#: Every child process is bounded by this many seconds.
LIMIT: Final = 60.0

#: One send with a receipt and its message received, on the client given as argv[1];
#: prints whether the API was imported and how many spans the SDK (if set up) recorded.
_SCRIPT: Final = textwrap.dedent(
    """
    import sys

    import anyio

    import stompy
    from stompy.testing import run_broker

    exporter = None
    if sys.argv[2] == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)


    async def run_async(url):
        async with stompy.AsyncConnection(url) as conn:
            async with conn.subscribe("/queue/otel") as sub:
                await conn.send("/queue/otel", "x", receipt=True)
                assert (await sub.get(timeout=10)) is not None


    with run_broker() as broker:
        imported_before = "opentelemetry" in sys.modules
        if sys.argv[1] == "blocking":
            with stompy.Connection(broker.url) as conn:
                with conn.subscribe("/queue/otel") as sub:
                    conn.send("/queue/otel", "x", receipt=True)
                    assert sub.get(timeout=10) is not None
        else:
            anyio.run(run_async, broker.url, backend=sys.argv[1])
    spans = -1 if exporter is None else len(exporter.get_finished_spans())
    print(imported_before, "opentelemetry" in sys.modules, spans)
    """
)

CLIENTS: Final = ["blocking", "asyncio", "trio"]


def _run(client: str, setup: str, env: dict[str, str] | None = None) -> str:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STOMPY_OTEL"))
    }
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, client, setup],
        capture_output=True,
        timeout=LIMIT,
        env={**environment, **(env or {})},
        check=False,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_process_without_an_sdk_never_imports_the_api(client: str) -> None:
    """Nothing imported the API and no provider is named: the connection does not
    import it either (it did on the first connect, 0.05-0.15 s, only to find no SDK)."""
    assert _run(client, "none") == "False False -1"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_process_with_an_sdk_is_traced(client: str) -> None:
    """The application set up the SDK before connecting: the send and the receive are
    spans, as before."""
    imported_before, imported_after, spans = _run(client, "sdk").split()
    assert (imported_before, imported_after) == ("True", "True")
    assert int(spans) >= 2


def test_a_provider_named_in_the_environment_imports_the_api() -> None:
    """``OTEL_PYTHON_TRACER_PROVIDER`` names a provider for the API to load: the
    connection asks the API (which finds that provider), though nothing imported it."""
    env = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}
    assert _run("blocking", "none", env) == "False True -1"

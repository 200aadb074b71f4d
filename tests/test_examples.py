"""Every example in examples/ runs as it is, against the broker it starts itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: What each example must print: proof that it did its job, not just that it exited 0.
EXPECTED = {
    "quickstart.py": ["received 'sent inside a transaction'", "disconnected cleanly"],
    "transactions.py": [
        "aborted: order-3: the stock service timed out; retrying",
        "committed order-3 (attempt 2)",
        "results: order-1: shipped, order-2: shipped, order-3: shipped",
    ],
    "asyncio_service.py": ["10 squared is 100", "service stopped cleanly"],
    "trio_service.py": ["BROWN DOG FOX JUMPS LAZY OVER QUICK THE THE", "service stopped cleanly"],
    "request_reply.py": ["'stressed' -> 'desserts'", "'stompy' -> 'ypmots'"],
    "durable_consumer.py": [
        "-- the broker drops every connection --",
        "redelivered=True",
        "all 10 events handled, each exactly once",
    ],
}


#: Examples run by tests of their own elsewhere (Spark needs a session: tests/spark).
ELSEWHERE = {"spark_pipeline.py"}


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted([*EXPECTED, *ELSEWHERE])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, result.stdout

"""The latency group's charts draw from its JSON results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import latency_chart


def results(path: Path, scale: float) -> Path:
    rows = [
        {"name": f"{broker} {what}{p}", "contender": who, "value": scale * v, "note": ""}
        for broker in ("stompy.testing", "rabbitmq")
        for what in ("", "receipt ")
        for p, v in (("p50", 0.3), ("p99", 0.9))
        for who in ("stompy", "stompy (trio)", "stomp.py", "bare socket (ceiling)")
    ]
    rows.append(
        {"name": "rabbitmq p50", "contender": "stompy (asyncio)", "value": 0.0, "note": "failed"}
    )
    path.write_text(json.dumps({"groups": {"latency": {"rows": rows}}}))
    return path


def test_a_failed_row_is_left_out_of_the_medians(tmp_path: Path) -> None:
    figures = latency_chart.medians(
        [results(tmp_path / "a.json", 1), results(tmp_path / "b.json", 3)]
    )
    assert figures[("rabbitmq receipt p99", "stomp.py")] == pytest.approx(1.8)
    assert ("rabbitmq p50", "stompy (asyncio)") not in figures


def test_both_charts_are_drawn(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = [results(tmp_path / "a.json", 1), results(tmp_path / "b.json", 2)]
    latency_chart.by_broker(tmp_path / "brokers.png", runs)
    latency_chart.main(tmp_path / "change.png", runs[:1], runs[1:])
    for name in ("brokers.png", "change.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""benchmarks.compare still runs: two trees (a revision and the checkout), one timed
round of tiny runs; nothing here looks at speed, nor runs valgrind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_compare_prints_both_trees_and_their_ratio() -> None:
    command = [sys.executable, "-m", "benchmarks.compare", "HEAD", "--no-instructions"]
    command += ["--rounds", "1", "--wall-count", "200", "--flavours", "blocking,asyncio"]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {" ".join(line.split()[:2]): line.split()[2:] for line in done.stdout.splitlines()}
    for name in ("blocking consume", "blocking publish", "asyncio consume", "asyncio publish"):
        # wall before, after, ratio; cpu before, after, ratio (a ratio may be marked)
        figures = [float(cell) for cell in rows[name] if cell != "SLOWER"]
        assert len(figures) == 6, rows[name]
        assert all(figure > 0 for figure in figures)


def test_compare_refuses_an_unknown_flavour() -> None:
    command = [sys.executable, "-m", "benchmarks.compare", "HEAD", "--flavours", "gevent"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "unknown flavour 'gevent'" in done.stderr

"""``python -m benchmarks [GROUP ...] [--quick] [--rounds N] [--count N] [--json PATH]``.

Runs the chosen groups (all by default), prints one table per group with each
contender's median and stompy's ratio to it, then every target with PASS or MISS;
writes every figure, every round's sample, the verdicts and the environment to
``benchmarks/results/<time>-<groups>.json`` and draws the chart beside it (a PNG, when
matplotlib is installed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks._core import GROUP_MODULES, REGISTRY, Row, Settings, Verdict
from benchmarks.report import chart, format_table, format_verdicts

RESULTS = Path(__file__).resolve().parent / "results"


def _load_groups() -> None:
    for module in GROUP_MODULES:
        importlib.import_module(module)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="stompy benchmarks against stomp.py and stompman.",
        epilog="groups: " + "; ".join(f"{g.name}: {g.help}" for g in REGISTRY.values()),
    )
    parser.add_argument("groups", nargs="*", metavar="GROUP", help="groups to run (default: all)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small counts, one or two rounds"
    )
    parser.add_argument("--rounds", type=int, help="rounds per contender (group default)")
    parser.add_argument("--count", type=int, help="frames/messages per run (group default)")
    parser.add_argument(
        "--slice",
        type=int,
        help="latency: counted round trips per turn, contenders taking turns (count/20)",
    )
    parser.add_argument("--json", type=Path, help="where to write the JSON results")
    parser.add_argument("--no-json", action="store_true", help="do not write JSON")
    parser.add_argument("--chart", type=Path, help="where to draw the chart (PNG)")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the chart")
    parser.add_argument(
        "--contenders",
        metavar="NAMES",
        help='comma-separated contenders to run, e.g. "stompy,stomp.py" (default: all)',
    )
    parser.add_argument(
        "--no-brokers",
        action="store_true",
        help="do not use RabbitMQ / ActiveMQ even when they answer",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    unknown = [g for g in args.groups if g not in REGISTRY]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    if args.slice is not None and args.slice < 1:
        parser.error("--slice must be at least 1")
    return args


def _git(*args: str) -> str:
    """Read-only git facts about the tree the benchmark ran on ("" outside a checkout)."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def _environment() -> dict[str, Any]:
    import stompy
    import stompy._compiled

    return {
        "commit": _git("rev-parse", "HEAD"),
        # Uncommitted changes to stompy/ make the commit alone not reproduce the run.
        "stompy_modified": bool(_git("status", "--porcelain", "--", "stompy")),
        "cpu": _cpu_model(),
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "stompy": getattr(stompy, "__version__", "?"),
        "stompy_compiled": not str(getattr(stompy._core.parser, "__file__", "")).endswith(".py"),
        "stompy_accelerated": stompy._compiled.ACCELERATED,
    }


def main(argv: Sequence[str] | None = None) -> int:
    _load_groups()
    args = _parse_args(argv)
    settings = Settings(
        quick=args.quick,
        rounds=args.rounds,
        count=args.count,
        slice=args.slice,
        verbose=not args.quiet,
        brokers=not args.no_brokers,
        contenders=tuple(n.strip() for n in (args.contenders or "").split(",") if n.strip()),
    )
    chosen = [REGISTRY[name] for name in (args.groups or list(REGISTRY))]
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    report: dict[str, Any] = {
        "started": started,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "settings": asdict(settings),
        "environment": _environment(),
        "groups": {},
    }
    verdicts: list[Verdict] = []
    all_rows: dict[str, list[Row]] = {}
    for group in chosen:
        try:
            rows = group.run(settings)
        except Exception as exc:  # one broken group must not lose the others' figures
            print(f"benchmark group {group.name} failed: {exc!r}", file=sys.stderr, flush=True)
            rows = [Row(group.name, group.name, "all", float("nan"), "", note=f"failed: {exc!r}")]
        found = [
            replace(v, target=f"{group.name} {v.target}")
            for v in (t.check(rows) for t in group.targets)
            if v is not None
        ]
        verdicts += found
        all_rows[group.name] = rows
        print(format_table(group, rows, found), flush=True)
        print(flush=True)
        report["groups"][group.name] = {
            "workload": group.describe(settings),
            "rows": [asdict(row) for row in rows],
        }
    report["targets"] = [asdict(v) for v in verdicts]
    print(format_verdicts(verdicts), flush=True)
    print(flush=True)
    stem = f"{started}-{'-'.join(g.name for g in chosen)}"
    if not args.no_json:
        path = args.json or RESULTS / f"{stem}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # NaN (a contender that did not run) is written as null to stay valid JSON.
        text = json.dumps(_nan_to_none(report), indent=2, sort_keys=False)
        path.write_text(text + "\n", encoding="utf-8")
        print(f"results written to {path}")
    if not args.no_chart:
        picture = args.chart or RESULTS / f"{stem}.png"
        try:
            chart(report, all_rows, verdicts, picture)
        except ImportError:
            print("no chart: matplotlib is not installed (it is in the bench group)")
        else:
            print(f"chart written to {picture}")
    return 0


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_to_none(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())

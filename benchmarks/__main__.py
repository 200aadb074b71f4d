"""``python -m benchmarks [GROUP ...] [--quick] [--rounds N] [--count N] [--json PATH]``.

Runs the chosen groups (all by default), prints one table per group with each
contender's median and stompy's ratio to it, and writes every figure, every round's
sample and the environment to ``benchmarks/results/<time>-<groups>.json``.
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks._core import GROUP_MODULES, REGISTRY, STOMPY, Group, Row, Settings, ratio

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
    parser.add_argument("--quick", action="store_true", help="smoke run: small counts, 2 rounds")
    parser.add_argument("--rounds", type=int, help="rounds per contender (group default)")
    parser.add_argument("--count", type=int, help="frames/messages per run (group default)")
    parser.add_argument("--json", type=Path, help="where to write the JSON results")
    parser.add_argument("--no-json", action="store_true", help="do not write JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    unknown = [g for g in args.groups if g not in REGISTRY]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    return args


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(group: Group, rows: Sequence[Row]) -> str:
    """The group's rows as text: one block per benchmark, stompy's ratio per peer."""
    header = ("benchmark", "contender", "median", "unit", "min", "max", "stompy is")
    table: list[tuple[str, ...]] = [header]
    names = list(dict.fromkeys(row.name for row in rows))
    for name in names:
        block = [row for row in rows if row.name == name]
        ours = next((r for r in block if r.contender == STOMPY and not r.note), None)
        for row in block:
            if row.note:
                shown = ("-", "-", "-", row.note)
            else:
                low, high = (min(row.samples), max(row.samples)) if row.samples else (0.0, 0.0)
                versus = ""
                if ours is not None and row is not ours and "(ceiling)" not in row.contender:
                    versus = f"{ratio(ours, row):.2f}x"
                shown = (_fmt(row.value), _fmt(low), _fmt(high), versus)
            table.append((name, row.contender, shown[0], row.unit, shown[1], shown[2], shown[3]))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [f"== {group.name}: {group.help}"]
    for k, line in enumerate(table):
        cells = [
            cell.ljust(w) if i < 2 or i == 3 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for target in group.targets:
        ours = _find(rows, target.name, STOMPY)
        peer = _find(rows, target.name, target.peer)
        if ours is None or peer is None:
            continue
        got = ratio(ours, peer)
        verdict = "met" if got >= target.ratio else "NOT met"
        lines.append(
            f"target {target.name}: stompy >= {target.ratio:g}x {target.peer}: "
            f"{got:.2f}x, {verdict}"
        )
    return "\n".join(lines)


def _find(rows: Sequence[Row], name: str, contender: str) -> Row | None:
    for row in rows:
        if row.name == name and row.contender == contender and not row.note:
            return row
    return None


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
        "stompy_compiled": not str(getattr(stompy._codec, "__file__", "")).endswith(".py"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    _load_groups()
    args = _parse_args(argv)
    settings = Settings(
        quick=args.quick, rounds=args.rounds, count=args.count, verbose=not args.quiet
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
    for group in chosen:
        rows = group.run(settings)
        print(format_table(group, rows), flush=True)
        print(flush=True)
        report["groups"][group.name] = {
            "workload": group.describe(settings),
            "rows": [asdict(row) for row in rows],
        }
    if not args.no_json:
        path = args.json or RESULTS / f"{started}-{'-'.join(g.name for g in chosen)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # NaN (a contender that did not run) is written as null to stay valid JSON.
        text = json.dumps(_nan_to_none(report), indent=2, sort_keys=False)
        path.write_text(text + "\n", encoding="utf-8")
        print(f"results written to {path}")
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

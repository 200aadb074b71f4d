"""Turning rows into what people read: text tables, Markdown tables, the chart.

``python -m benchmarks`` uses it to print each group and to draw the chart next to the
JSON results; ``python -m benchmarks.report RESULTS.json [--chart PNG] [--markdown]``
redraws the chart and prints Markdown tables from a saved run (that is how
``docs/performance.md`` and ``docs/performance.png`` are made).

Columns: each contender's median, fastest and slowest round, **stompy is** (how many
times better stompy's blocking client, or codec, is than a peer: above 1 stompy wins;
only against the other libraries) and **of ceiling** (a client's share of the bare
socket, where the benchmark has one).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._core import CEILING_MARK, STOMPY, Group, Row, Verdict, find_row, ratio

HEADER = (
    "benchmark",
    "contender",
    "median",
    "unit",
    "min",
    "max",
    "stompy is",
    "of ceiling",
    "note",
)
#: Longest note shown in a table (the JSON keeps it whole).
NOTE_WIDTH = 72


def fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def is_stompy(contender: str) -> bool:
    return contender == STOMPY or contender.startswith(STOMPY + " ")


def table_cells(rows: Sequence[Row]) -> list[tuple[str, ...]]:
    """One line of cells per row, in :data:`HEADER` order."""
    lines: list[tuple[str, ...]] = []
    for name in dict.fromkeys(row.name for row in rows):
        block = [row for row in rows if row.name == name]
        ours = find_row(block, name, STOMPY)
        ceiling = next((r for r in block if CEILING_MARK in r.contender and not r.note), None)
        for row in block:
            if row.note:
                note = (
                    row.note if len(row.note) <= NOTE_WIDTH else row.note[: NOTE_WIDTH - 3] + "..."
                )
                lines.append((name, row.contender, "-", row.unit, "-", "-", "", "", note))
                continue
            low, high = (min(row.samples), max(row.samples)) if row.samples else (row.value,) * 2
            versus = ""
            if ours is not None and not is_stompy(row.contender) and row is not ceiling:
                versus = f"{ratio(ours, row):.2f}x"
            share = ""
            if ceiling is not None and row is not ceiling:
                share = f"{row.value / ceiling.value:.0%}"
            lines.append(
                (
                    name,
                    row.contender,
                    fmt(row.value),
                    row.unit,
                    fmt(low),
                    fmt(high),
                    versus,
                    share,
                    "",
                )
            )
    return lines


def verdict_line(verdict: Verdict) -> str:
    mark = "PASS" if verdict.passed else "MISS"
    unit = "x" if verdict.unit == "x" else f" {verdict.unit}"
    line = f"{mark}  {verdict.target}: measured {verdict.measured:.2f}{unit}"
    return f"{line}; {verdict.note}" if verdict.note else line


def format_table(group: Group, rows: Sequence[Row], verdicts: Sequence[Verdict]) -> str:
    """The group's rows as aligned text, then its targets with PASS / MISS."""
    cells = [HEADER, *table_cells(rows)]
    used = [i for i in range(len(HEADER)) if any(line[i] for line in cells[1:])]
    widths = {i: max(len(line[i]) for line in cells) for i in used}
    out = [f"== {group.name}: {group.help}"]
    for k, line in enumerate(cells):
        shown = [
            line[i].ljust(widths[i]) if i in (0, 1, 3, 8) else line[i].rjust(widths[i])
            for i in used
        ]
        out.append("  ".join(shown).rstrip())
        if k == 0:
            out.append("  ".join("-" * widths[i] for i in used))
    out += [f"target {verdict_line(v)}" for v in verdicts]
    return "\n".join(out)


def format_verdicts(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return "== targets: none measured in this run"
    passed = sum(v.passed for v in verdicts)
    lines = [f"== targets: {passed} of {len(verdicts)} met"]
    lines += [verdict_line(v) for v in verdicts]
    return "\n".join(lines)


# -- Markdown ------------------------------------------------------------------------------


def markdown_table(rows: Sequence[Row]) -> str:
    cells = table_cells(rows)
    used = [i for i in range(len(HEADER)) if i != 3 and any(line[i] for line in cells)]
    unit = rows[0].unit if rows else ""
    head = [HEADER[i] if i != 2 else f"median ({unit})" for i in used]
    out = ["| " + " | ".join(head) + " |"]
    out.append("|" + "|".join("---" if i in (0, 1, 8) else "---:" for i in used) + "|")
    for line in cells:
        values = list(line)
        if values[1] == STOMPY and values[2] != "-":
            values[1], values[2] = f"**{values[1]}**", f"**{values[2]}**"
        out.append("| " + " | ".join(values[i] for i in used) + " |")
    return "\n".join(out)


def markdown_verdicts(verdicts: Sequence[Verdict]) -> str:
    out = ["| target | measured | result |", "|---|---:|---|"]
    for v in verdicts:
        unit = "x" if v.unit == "x" else f" {v.unit}"
        out.append(
            f"| {v.target} | {v.measured:.2f}{unit} | {'PASS' if v.passed else '**MISS**'} |"
        )
    return "\n".join(out)


# -- loading a saved run -------------------------------------------------------------------


def load(path: Path) -> tuple[dict[str, Any], dict[str, list[Row]], list[Verdict]]:
    """A saved run: the raw report, its rows by group, its target verdicts."""
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    rows: dict[str, list[Row]] = {}
    for name, group in report["groups"].items():
        rows[name] = [
            Row(
                **{
                    **row,
                    "value": float("nan") if row["value"] is None else row["value"],
                    "samples": tuple(row["samples"]),
                }
            )
            for row in group["rows"]
        ]
    verdicts = [Verdict(**v) for v in report.get("targets", [])]
    return report, rows, verdicts


# -- the chart -----------------------------------------------------------------------------

_COLOURS = {
    STOMPY: "#1f4e9c",
    "stompy (asyncio)": "#4f86d9",
    "stompy (trio)": "#9dbdf0",
    "stomp.py": "#e08a2c",
    "stompman": "#3c9a5f",
}
_OTHER = "#999999"


def _colour(contender: str) -> str:
    return _COLOURS.get(contender, _OTHER)


def _bars(ax: Any, groups: list[str], series: dict[str, list[float]], unit: str) -> None:
    """Grouped vertical bars: one group per benchmark, one bar per contender."""
    n = max(1, len(series))
    width = 0.8 / n
    for k, (who, values) in enumerate(series.items()):
        xs = [g + (k - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(
            xs, [0 if math.isnan(v) else v for v in values], width, label=who, color=_colour(who)
        )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g.replace(": ", "\n") for g in groups], fontsize=8)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _series(
    rows: Sequence[Row], names: list[str], skip_ceiling: bool = True
) -> dict[str, list[float]]:
    contenders = [
        r.contender
        for r in rows
        if not r.note and not (skip_ceiling and CEILING_MARK in r.contender)
    ]
    series: dict[str, list[float]] = {}
    for who in dict.fromkeys(contenders):
        series[who] = []
        for name in names:
            row = find_row(rows, name, who)
            series[who].append(row.value if row is not None else float("nan"))
    return series


def _targets_panel(ax: Any, verdicts: Sequence[Verdict]) -> None:
    labels: list[str] = []
    scores: list[float] = []
    colours: list[str] = []
    for v in verdicts:
        if v.unit == "x":
            score = v.measured / v.required
            shown = f"{v.measured:.2f}x (want {v.required:g}x)"
        else:
            score = 2.0 if v.measured <= 0 else v.required / v.measured
            shown = f"{v.measured:.1f} {v.unit} (want <= {v.required:g})"
        scores.append(min(score, 2.0))
        labels.append(f"{v.target.split(': ')[0]}: {v.target.split(': ', 1)[-1]}\n{shown}")
        colours.append("#3c9a5f" if v.passed else "#c0392b")
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, scores, color=colours)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=6.5)
    ax.set_xlim(0, 2.0)
    ax.set_xlabel("measured / target (1 = met; capped at 2)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    passed = sum(v.passed for v in verdicts)
    ax.set_title(f"Targets: {passed} of {len(verdicts)} met (green PASS, red MISS)", fontsize=10)


def chart(
    report: dict[str, Any], rows: dict[str, list[Row]], verdicts: Sequence[Verdict], path: Path
) -> None:
    """Draw the one-page chart of a run to ``path`` (PNG). Needs matplotlib."""
    # Imported by name: matplotlib is only in the bench group, and type checkers of
    # the test environment (which imports this module) need not know it.
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")

    fig, axes = plt.subplots(3, 2, figsize=(16, 15))
    env = report.get("environment", {})
    fig.suptitle(
        f"stompy benchmarks, {', '.join(r['started'] for r in report.get('runs', [report]))}: "
        "CPython "
        f"{str(env.get('python', '?')).split()[0]}, {env.get('cpus', '?')} CPUs "
        f"({env.get('cpu', '')}); medians of alternating rounds",
        fontsize=12,
    )
    _targets_panel(axes[0][0], verdicts)
    _brokers_panel(axes[0][1], rows.get("brokers", []))

    def panel(
        ax: Any, group: str, names: list[str], title: str, unit: str, floor: bool = False
    ) -> None:
        got = rows.get(group, [])
        present = [n for n in names if any(r.name == n and not r.note for r in got)]
        if not present:
            ax.set_axis_off()
            ax.set_title(f"{title.splitlines()[0]}: not run", fontsize=10)
            return
        _bars(ax, present, _series(got, present, skip_ceiling=not floor), unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)

    ceilings = [r for r in rows.get("clients", []) if CEILING_MARK in r.contender and not r.note]
    panel(
        axes[1][0],
        "clients",
        ["consume", "publish"],
        "Clients against bare servers (higher is better)\n"
        + "bare socket: "
        + ", ".join(f"{r.name} {fmt(r.value)}/s" for r in ceilings),
        "messages / s",
    )
    panel(axes[1][1], "codec", ["parse", "encode"], "Codec alone (higher is better)", "frames / s")
    latency = rows.get("latency", [])
    names = [
        n
        for n in dict.fromkeys(r.name for r in latency)
        if not all(r.note for r in latency if r.name == n)
    ]
    panel(
        axes[2][0],
        "latency",
        names,
        "Request/reply and send(receipt=True) round trips (lower is better)\n"
        "bare socket: the floor, a pre-encoded frame and a read up to the answer's NUL",
        "ms",
        floor=True,
    )
    memory = rows.get("memory", [])
    mem_names = [n for n in dict.fromkeys(r.name for r in memory) if "peak RSS" in n]
    growth = [r for r in memory if "growth" in r.name and not r.note]
    panel(
        axes[2][1],
        "memory",
        mem_names,
        "Peak RSS of a child process (lower is better)\nslow consumer, growth from the "
        "small to the large count:\n"
        + ", ".join(f"{r.contender} {r.value:+.1f} MB" for r in growth),
        "MB",
    )
    if mem_names:
        axes[2][1].legend(fontsize=7, loc="lower right")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _brokers_panel(ax: Any, rows: Sequence[Row]) -> None:
    names = [
        n
        for n in dict.fromkeys(r.name for r in rows)
        if any(r.name == n and not r.note for r in rows)
    ]
    if not names:
        ax.set_axis_off()
        ax.set_title("Through real brokers: not reachable in this run", fontsize=10)
        return
    shares: dict[str, list[float]] = {}
    for name in names:
        block = [r for r in rows if r.name == name and not r.note]
        ceiling = next((r for r in block if CEILING_MARK in r.contender), None)
        for r in block:
            if r is ceiling or ceiling is None:
                continue
            shares.setdefault(r.contender, [float("nan")] * len(names))
            shares[r.contender][names.index(name)] = 100 * r.value / ceiling.value
    _bars(
        ax,
        [n.replace(" ", "\n", 1).replace(" (", "\n(") for n in names],
        shares,
        "% of the broker's bare-socket rate",
    )
    ax.axhline(100, color="black", linewidth=1)
    ax.set_title("Through real brokers: share of the bare-socket ceiling", fontsize=10)
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelsize=7)


def merge(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs: each group (and its targets) from the last run
    that measured it. Ratios stay within one run: a group is never split."""
    merged: dict[str, Any] = {**reports[-1], "groups": {}, "targets": [], "runs": []}
    source: dict[str, dict[str, Any]] = {}
    for report in reports:
        for name in report["groups"]:
            source[name] = report
    for name, report in source.items():
        merged["groups"][name] = report["groups"][name]
        merged["targets"] += [
            v for v in report.get("targets", []) if v["target"].split(" ", 1)[0] == name
        ]
    merged["runs"] = [
        {
            "started": r["started"],
            "groups": [n for n, src in source.items() if src is r],
            "environment": r["environment"],
        }
        for r in reports
    ]
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report")
    parser.add_argument(
        "results",
        type=Path,
        nargs="+",
        help="JSON files written by python -m benchmarks (several: each group from the "
        "last file that has it)",
    )
    parser.add_argument("--chart", type=Path, help="draw the chart to this PNG")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", type=Path, help="write the (merged) results here")
    args = parser.parse_args(argv)
    if len(args.results) > 1 or args.json:
        raws = [json.loads(path.read_text(encoding="utf-8")) for path in args.results]
        combined = merge(raws)
        target = args.json or Path("merged.json")
        target.write_text(json.dumps(combined, indent=2) + "\n", encoding="utf-8")
        print(f"merged results written to {target}")
        args.results = [target]
    report, rows, verdicts = load(args.results[0])
    if args.chart:
        chart(report, rows, verdicts, args.chart)
        print(f"chart written to {args.chart}")
    if args.markdown:
        for name, group_rows in rows.items():
            print(f"### {name}\n")
            print(markdown_table(group_rows))
            print()
        print("### targets\n")
        print(markdown_verdicts(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The latency group's charts.

``python -m benchmarks.latency_chart OUT.png BEFORE.json... -- AFTER.json...``: before
and after a change. Two panels, request/reply and ``send(receipt=True)`` through
stompy's test broker: each contender's p50, the median of the runs' medians, before
(grey) and after (blue), stomp.py and the bare-socket floor beside them (from the
"after" runs), with the issue 36 target (0.8x stomp.py) drawn as a line.

``python -m benchmarks.latency_chart --brokers OUT.png RUNS.json...``: where things
stand. A column per broker (stompy's test broker, RabbitMQ when the runs reached it)
and round trip, p50 above and p99 below (the medians of the runs'), with the
bare-socket floor and 0.8x stomp.py's p50 as lines.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Final

PANELS: Final = (
    ("stompy.testing p50", "request / reply"),
    ("stompy.testing receipt p50", "send(receipt=True)"),
)
CONTENDERS: Final = (
    "stompy",
    "stompy request()",
    "stompy (asyncio)",
    "stompy (asyncio) request()",
    "stompy (trio)",
    "stompy (trio) request()",
    "stomp.py",
    "bare socket (ceiling)",
)
#: Drawn once, from the "after" runs: they did not change.
PEERS: Final = ("stomp.py", "bare socket (ceiling)")


def medians(paths: list[Path]) -> dict[tuple[str, str], float]:
    """(benchmark, contender) -> the median of the runs' figures."""
    seen: dict[tuple[str, str], list[float]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["groups"]["latency"]["rows"]:
            if not row["note"]:
                seen.setdefault((row["name"], row["contender"]), []).append(row["value"])
    return {key: statistics.median(values) for key, values in seen.items()}


def main(out: Path, before: list[Path], after: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    old, new = medians(before), medians(after)
    figure, axes = plt.subplots(1, len(PANELS), figsize=(13, 4.6))
    for ax, (name, title) in zip(axes, PANELS, strict=True):
        shown = [c for c in CONTENDERS if (name, c) in new]
        for i, who in enumerate(shown):
            label = "floor" if "ceiling" in who else who
            if who in PEERS:
                colour = "#e69f00" if who == "stomp.py" else "#555555"
                ax.bar(i, new[(name, who)], 0.6, color=colour)
            else:
                ax.bar(i - 0.15, old.get((name, who), 0.0), 0.3, color="#bbbbbb")
                ax.bar(i + 0.15, new[(name, who)], 0.3, color="#2b7bba")
            x = i if who in PEERS else i + 0.15
            ax.text(x, new[(name, who)], f"{new[(name, who)]:.2f}", ha="center", va="bottom")
            shown[i] = label
        peer = new.get((name, "stomp.py"))
        if peer is not None:
            ax.axhline(0.8 * peer, color="#c0392b", linewidth=1, linestyle="--")
        ax.set_xticks(range(len(shown)), [s.replace(" (", "\n(") for s in shown], fontsize=8)
        ax.set_ylabel("p50, ms (lower is better)")
        ax.set_title(f"{title}: before (grey), after (blue); dashed: 0.8x stomp.py")
    figure.tight_layout()
    figure.savefig(out, dpi=100)


#: The brokers of the ``--brokers`` chart: the prefix of the group's row names, a title.
BROKERS: Final = (("stompy.testing", "stompy broker"), ("rabbitmq", "RabbitMQ"))
ROUND_TRIPS: Final = (("", "request / reply"), ("receipt ", "send(receipt=True)"))
FLOOR: Final = "bare socket (ceiling)"


def by_broker(out: Path, runs: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = medians(runs)
    panels = [
        (prefix, broker, what, title)
        for prefix, broker in BROKERS
        for what, title in ROUND_TRIPS
        if any((f"{prefix} {what}p50", c) in figures for c in CONTENDERS)
    ]
    figure, axes = plt.subplots(
        2, len(panels), figsize=(4.2 * len(panels), 8), squeeze=False, sharex="col"
    )
    for column, (prefix, broker, what, title) in enumerate(panels):
        for row, percentile in enumerate(("p50", "p99")):
            ax = axes[row][column]
            name = f"{prefix} {what}{percentile}"
            shown = [c for c in CONTENDERS if c != FLOOR and (name, c) in figures]
            for i, who in enumerate(shown):
                value = figures[(name, who)]
                ax.bar(i, value, 0.6, color="#e69f00" if who == "stomp.py" else "#2b7bba")
                ax.text(i, value, f"{value:.2f}", ha="center", va="bottom", fontsize=8)
            if (name, "stomp.py") in figures and percentile == "p50":
                target = 0.8 * figures[(name, "stomp.py")]
                ax.axhline(target, color="#c0392b", linewidth=1, linestyle="--")
            if (name, FLOOR) in figures:
                floor = figures[(name, FLOOR)]
                ax.axhline(floor, color="#555555", linewidth=1, linestyle=":")
            labels = [s.replace(" (", "\n(").replace(" request()", "\nrequest()") for s in shown]
            ax.set_xticks(range(len(shown)), labels, fontsize=7)
            ax.set_ylabel(f"{percentile}, ms (lower is better)")
            ax.set_title(f"{broker}: {title}, {percentile}", fontsize=10)
    figure.suptitle(
        "Round trips, the medians of the runs' percentiles; dashed: 0.8x stomp.py's p50 "
        "(the target); dotted: the bare socket (the floor)",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(out, dpi=100)


if __name__ == "__main__":
    if sys.argv[1] == "--brokers":
        by_broker(Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]])
        sys.exit()
    split = sys.argv.index("--")
    main(
        Path(sys.argv[1]),
        [Path(p) for p in sys.argv[2:split]],
        [Path(p) for p in sys.argv[split + 1 :]],
    )

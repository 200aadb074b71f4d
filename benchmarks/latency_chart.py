"""``python -m benchmarks.latency_chart OUT.png BEFORE.json... -- AFTER.json...``: the
latency group's chart, before and after a change.

Two panels, request/reply and ``send(receipt=True)`` through stompy's test broker: each
contender's p50, the median of the runs' medians, before (grey) and after (blue),
stomp.py and the bare-socket floor beside them (from the "after" runs), with the
issue 36 target (0.8x stomp.py) drawn as a line.
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


if __name__ == "__main__":
    split = sys.argv.index("--")
    main(
        Path(sys.argv[1]),
        [Path(p) for p in sys.argv[2:split]],
        [Path(p) for p in sys.argv[split + 1 :]],
    )

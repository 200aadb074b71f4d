"""``python -m benchmarks.spark_chart RESULTS.json OUT.png``: the Spark group's chart.

One panel per broker: each workload's median for the connector, the hand-rolled
stomp.py version and the bare-socket ceiling, with the connector's figures before
this round of work (from the issue that asked for it, RabbitMQ only) for contrast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

#: The connector before the Arrow / send_many / windows work (msg/s, RabbitMQ, the
#: middle of the ranges the issue measured).
BEFORE: Final = {"batch write": 10_000, "streaming read": 6_700, "batch read": 8_400}
WORKLOADS: Final = ("batch write", "streaming write", "streaming read", "batch read")
CONTENDERS: Final = (
    ("stompy (before)", "#bbbbbb"),
    ("stompy", "#2b7bba"),
    ("stomp.py", "#e69f00"),
    ("bare socket (ceiling)", "#555555"),
)


def main(source: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data: dict[str, Any] = json.loads(source.read_text())
    values: dict[tuple[str, str], float] = {}
    for row in data["groups"]["spark"]["rows"]:
        if row["unit"] == "msg/s" and not row["note"]:
            values[(row["name"], row["contender"])] = row["value"]
    brokers = [
        b for b in ("stompy broker", "rabbitmq") if any(k[0].endswith(f"({b})") for k in values)
    ]
    figure, axes = plt.subplots(1, len(brokers), figsize=(6.5 * len(brokers), 4.2), squeeze=False)
    width = 0.2
    for ax, broker in zip(axes[0], brokers, strict=True):
        for offset, (contender, colour) in enumerate(CONTENDERS):
            heights = []
            for workload in WORKLOADS:
                if contender == "stompy (before)":
                    heights.append(BEFORE.get(workload, 0.0) if broker == "rabbitmq" else 0.0)
                else:
                    heights.append(values.get((f"{workload} ({broker})", contender), 0.0))
            positions = [i + (offset - 1.5) * width for i in range(len(WORKLOADS))]
            ax.bar(positions, [h / 1000 for h in heights], width, label=contender, color=colour)
        ax.set_xticks(range(len(WORKLOADS)), WORKLOADS)
        ax.set_ylabel("thousand messages per second")
        count = data["groups"]["spark"]["workload"]["messages"]
        ax.set_title(f"through {broker} (local[2], {count:,} messages)")
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

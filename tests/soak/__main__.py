"""``python -m tests.soak [--duration S] [--brokers ...] [--flavours ...] [--seed N]``.

Exits 1 when a confirmed message was lost, a call blocked past its bound, something
leaked, or a client raised what it must not; 0 otherwise (skipped brokers included).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Callable, Sequence

from ._core import FLAVOURS, Settings, details, table
from ._run import BROKERS, DEFAULT_URLS, soak


def _names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        wrong = [n for n in names if n not in allowed]
        if wrong or not names:
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(allowed)} (comma-separated), not {text!r}"
            )
        return names

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak",
        description="Producers with receipts and client-individual consumers through a "
        "fault proxy; reports losses, duplicates, the longest call and leaks.",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=defaults.duration,
        help="seconds of faults per flavour x broker (default %(default)s)",
    )
    parser.add_argument(
        "--brokers", type=_names(BROKERS), default=list(BROKERS), help="default: all"
    )
    parser.add_argument(
        "--flavours", type=_names(FLAVOURS), default=list(FLAVOURS), help="default: all"
    )
    parser.add_argument("--seed", type=int, help="the faults' random seed (default: random)")
    parser.add_argument(
        "--rate",
        type=float,
        default=defaults.rate,
        help="messages per second per run, 0: unpaced (default %(default)s)",
    )
    parser.add_argument(
        "--fault-interval",
        type=float,
        default=defaults.fault_interval,
        help="mean seconds between faults (default %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="ERROR",
        help="the clients' log level (default %(default)s: reconnects are expected)",
    )
    for name in ("rabbitmq", "activemq"):
        parser.add_argument(
            f"--{name}-url", default=DEFAULT_URLS[name], help="default: %(default)s"
        )
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.rate < 0 or args.fault_interval <= 0:
        parser.error("--duration and --fault-interval must be > 0, --rate >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    settings = Settings(
        duration=args.duration, seed=seed, rate=args.rate, fault_interval=args.fault_interval
    )
    print(f"soak: seed {seed} (repeat the faults with --seed {seed})")
    bounds = ", ".join(f"{k} {v:g} s" for k, v in settings.bounds().items())
    print(f"soak: bounds per call: {bounds}")
    print(
        f"soak: a send waits at most Reconnect.send_timeout ({settings.send_timeout:g} s from"
        " its start) for a reconnect, then receipt_timeout"
        f" ({settings.receipt_timeout:g} s) for its receipt: a send of"
        f" {settings.send_timeout:g} s is an outage longer than send_timeout (ConnectionLost)"
    )
    urls = {"rabbitmq": args.rabbitmq_url, "activemq": args.activemq_url}
    results = soak(settings, args.flavours, args.brokers, urls)
    print()
    print(table(results))
    print()
    for result in results:
        print(details(result))
    failed = [r for r in results if not r.ok]
    ran = [r for r in results if r.skipped is None]
    print()
    if failed:
        print(f"soak: FAIL ({len(failed)} of {len(ran)} runs), seed {seed}")
        return 1
    print(f"soak: ok ({len(ran)} runs, {len(results) - len(ran)} skipped), seed {seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What every benchmark group shares: settings, rows, the registry and the timing loop.

A group is a function ``run(settings) -> list[Row]`` registered under a name. The
timing loop :func:`alternate` runs every contender once per round, rotating the order
each round, so that drift (thermal, other load, allocator state) hits all contenders
alike; the figure reported is the median over rounds.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: The contender every ratio is taken against (stompy's blocking client, or its codec).
STOMPY = "stompy"
#: stompy's anyio client on each backend.
STOMPY_ASYNCIO = "stompy (asyncio)"
STOMPY_TRIO = "stompy (trio)"
#: Rows named so are ceilings (a bare socket): no ratio is taken against them.
CEILING_MARK = "(ceiling)"

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Command-line choices handed to every group."""

    #: Fast smoke run: few messages, few rounds; figures are not meaningful.
    quick: bool = False
    #: Rounds per contender; ``None`` lets each group pick its default.
    rounds: int | None = None
    #: Frames / messages per run; ``None`` lets each group pick its default.
    count: int | None = None
    #: Print progress lines on stderr.
    verbose: bool = True
    #: Use the real brokers (RabbitMQ, ActiveMQ) when they answer.
    brokers: bool = True
    #: Run only these contenders (exact names; empty: all). Ceilings always run.
    contenders: tuple[str, ...] = ()
    #: Round trips per turn where contenders take turns (latency); ``None``: the group's.
    slice: int | None = None

    def wants(self, contender: str) -> bool:
        """Whether ``contender`` is to run (``--contenders``)."""
        return not self.contenders or contender in self.contenders or CEILING_MARK in contender

    def pick_rounds(self, default: int, quick: int) -> int:
        if self.rounds is not None:
            return self.rounds
        return quick if self.quick else default

    def pick_count(self, default: int, quick: int) -> int:
        if self.count is not None:
            return self.count
        return quick if self.quick else default


@dataclass(frozen=True)
class Row:
    """One measured figure: the median of ``samples`` for one contender."""

    group: str
    #: The benchmark inside the group, e.g. ``parse`` or ``consume``.
    name: str
    contender: str
    value: float
    unit: str
    #: Throughputs are; latencies and memory are not. Decides how ratios are taken.
    higher_is_better: bool = True
    #: Every round's figure, in the order measured.
    samples: tuple[float, ...] = ()
    #: Set when the contender could not run; ``value`` is then NaN.
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """How one target fared in a run."""

    target: str
    measured: float
    required: float
    #: ``"x"`` for a ratio, else the unit of an absolute limit.
    unit: str
    passed: bool
    #: A second reading beside the verdict (e.g. the median of the rounds' own ratios).
    note: str = ""


@dataclass(frozen=True)
class Target:
    """A goal: ``ours`` must beat ``peer`` on ``name`` by at least ``ratio``.

    ``ratio`` is taken as :func:`ratio` does (above 1: ``ours`` is better), so a
    ceiling share such as "80% of the bare socket" is ``Target(name, ceiling, 0.8)``.
    """

    name: str
    peer: str
    ratio: float
    ours: str = STOMPY
    #: Also note the median of the rounds' own ratios (round k of ``ours`` against
    #: round k of ``peer``, measured in the same seconds) beside the verdict, which
    #: stays the ratio of the medians.
    by_round: bool = False

    def check(self, rows: Sequence[Row]) -> Verdict | None:
        mine = find_row(rows, self.name, self.ours)
        theirs = find_row(rows, self.name, self.peer)
        if mine is None or theirs is None:
            return None
        got = ratio(mine, theirs)
        label = f"{self.name}: {self.ours} >= {self.ratio:g}x {self.peer}"
        note = ""
        if self.by_round and mine.samples and len(mine.samples) == len(theirs.samples):
            # The figures' own quotient, as issue 36 states its targets (ours / theirs:
            # for a latency, below 1 is better), not :func:`ratio`'s way round.
            pairs = zip(mine.samples, theirs.samples, strict=True)
            own = statistics.median(a / b for a, b in pairs)
            note = f"rounds' own ratios: median {own:.2f} (ours / theirs)"
        return Verdict(label, got, self.ratio, "x", got >= self.ratio, note)


@dataclass(frozen=True)
class Limit:
    """A goal: the figure of ``contender`` on ``name`` stays at or under ``at_most``."""

    name: str
    contender: str
    at_most: float

    def check(self, rows: Sequence[Row]) -> Verdict | None:
        row = find_row(rows, self.name, self.contender)
        if row is None:
            return None
        label = f"{self.name}: {self.contender} <= {self.at_most:g} {row.unit}"
        return Verdict(label, row.value, self.at_most, row.unit, row.value <= self.at_most)


def find_row(rows: Sequence[Row], name: str, contender: str) -> Row | None:
    """The measured row (not a failure note) of ``contender`` on ``name``."""
    for row in rows:
        if row.name == name and row.contender == contender and not row.note:
            return row
    return None


@dataclass(frozen=True)
class Group:
    name: str
    help: str
    run: Callable[[Settings], list[Row]]
    targets: tuple[Target | Limit, ...] = ()
    #: Free-form facts about the workload, copied into the JSON file.
    describe: Callable[[Settings], dict[str, Any]] = field(default=lambda settings: {})


REGISTRY: dict[str, Group] = {}

#: Modules that register groups; a new group is a new module added here.
GROUP_MODULES: tuple[str, ...] = (
    "benchmarks.codec",
    "benchmarks.clients",
    "benchmarks.brokers",
    "benchmarks.latency",
    "benchmarks.memory",
    "benchmarks.spark",
    "benchmarks.spark_cold",
    "benchmarks.spark_pace",
)


def register(
    name: str,
    help: str,
    *,
    targets: Sequence[Target | Limit] = (),
    describe: Callable[[Settings], dict[str, Any]] | None = None,
) -> Callable[[Callable[[Settings], list[Row]]], Callable[[Settings], list[Row]]]:
    """Decorator: make ``run`` selectable as ``python -m benchmarks NAME``."""

    def decorate(run: Callable[[Settings], list[Row]]) -> Callable[[Settings], list[Row]]:
        if name in REGISTRY:
            raise ValueError(f"benchmark group {name!r} registered twice")
        REGISTRY[name] = Group(name, help, run, tuple(targets), describe or (lambda settings: {}))
        return run

    return decorate


def log(settings: Settings, message: str) -> None:
    if settings.verbose:
        print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Contender:
    """One way of doing the benchmark's work.

    ``prepare()`` builds fresh input outside the timer (for codecs that mutate what
    they are given); ``run(prepared)`` is timed and returns its output, which
    ``verify(output)`` checks outside the timer and rejects by raising.
    ``units(output)`` says how many units of work the run did (frames, messages).
    """

    name: str
    run: Callable[[Any], Any]
    verify: Callable[[Any], None]
    units: Callable[[Any], int]
    prepare: Callable[[], Any] = field(default=lambda: None)


def alternate(
    contenders: Sequence[Contender], rounds: int, settings: Settings, label: str
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Run each contender ``rounds`` times, rotating the order; return units/second.

    The garbage collector stays on (it is part of the real cost of making objects) but
    is emptied before each run so no run pays for its predecessor's garbage. A
    contender that raises, or whose output fails ``verify``, is dropped and its error
    returned in the second dict: it is reported, never ranked.
    """
    rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    failed: dict[str, str] = {}
    for index in range(rounds):
        shift = index % len(contenders)
        for contender in (*contenders[shift:], *contenders[:shift]):
            if contender.name in failed:
                continue
            try:
                prepared = contender.prepare()
                gc.collect()
                start = time.perf_counter()
                output = contender.run(prepared)
                elapsed = time.perf_counter() - start
                contender.verify(output)
                units = contender.units(output)
            except Exception as exc:
                failed[contender.name] = f"failed: {exc!r}"[:200]
                log(settings, f"  {label} {contender.name} FAILED: {exc!r}")
                continue
            del output, prepared
            rate = units / elapsed
            rates[contender.name].append(rate)
            log(
                settings,
                f"  {label} round {index + 1}/{rounds} {contender.name:<10} "
                f"{rate:>12,.0f}/s ({elapsed:.3f} s)",
            )
    return {name: r for name, r in rates.items() if name not in failed}, failed


def rows_from_rates(group: str, name: str, rates: dict[str, list[float]], unit: str) -> list[Row]:
    return [
        Row(group, name, contender, statistics.median(samples), unit, True, tuple(samples))
        for contender, samples in rates.items()
    ]


def ratio(stompy: Row, peer: Row) -> float:
    """How many times better stompy is than ``peer`` (>1 means stompy wins)."""
    if stompy.higher_is_better:
        return stompy.value / peer.value
    return peer.value / stompy.value


class NotWired(Exception):
    """A contender exists but its benchmark is not written yet (a hook to fill in)."""


def alternate_calls(
    contenders: Sequence[tuple[str, Callable[[], T]]],
    rounds: int,
    settings: Settings,
    label: str,
    show: Callable[[T], str] = str,
) -> tuple[dict[str, list[T]], dict[str, str]]:
    """Call each contender once per round, rotating the order; collect what they return.

    A contender that raises is dropped from later rounds and its error is returned in
    the second dict (so one broken peer does not sink the whole suite); the garbage
    collector is emptied before each call. ``show`` formats a result for the log.
    """
    results: dict[str, list[T]] = {name: [] for name, _ in contenders}
    failed: dict[str, str] = {}
    for index in range(rounds):
        shift = index % len(contenders) if contenders else 0
        for name, run in (*contenders[shift:], *contenders[:shift]):
            if name in failed:
                continue
            gc.collect()
            try:
                result = run()
            except NotWired as exc:
                failed[name] = f"not wired: {exc}"
                continue
            except Exception as exc:
                failed[name] = f"failed: {exc!r}"[:200]
                log(settings, f"  {label} {name} FAILED: {exc!r}")
                continue
            results[name].append(result)
            log(settings, f"  {label} round {index + 1}/{rounds} {name:<22} {show(result)}")
    return {name: r for name, r in results.items() if name not in failed}, failed


def alternate_timed(
    contenders: Sequence[tuple[str, Callable[[], float]]],
    rounds: int,
    units: int,
    settings: Settings,
    label: str,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """:func:`alternate_calls` for contenders that time themselves; returns units/second.

    Each callable does one full run and returns the seconds its measured window took
    (for clients: from subscribing or the first send to the last message or receipt,
    connection set-up excluded).
    """
    seconds, failed = alternate_calls(
        contenders,
        rounds,
        settings,
        label,
        lambda elapsed: f"{units / elapsed:>12,.0f}/s ({elapsed:.3f} s)",
    )
    return {name: [units / s for s in runs] for name, runs in seconds.items()}, failed


def failure_rows(group: str, name: str, failed: dict[str, str], unit: str) -> list[Row]:
    """Rows that report contenders which could not run (value NaN, never ranked)."""
    return [Row(group, name, who, float("nan"), unit, note=why) for who, why in failed.items()]

"""The latency group takes its contenders' round trips in turns, slice by slice.

Issue 36: whole runs one after the other compared contenders measured seconds apart on
a machine that drifts on that scale. Now every contender keeps its connection and its
thread through a round, and the counted round trips are taken in slices, one
contender's slice at a time, so that all of them are measured over the same seconds.
These tests run the group small through stompy's own broker (figures mean nothing
here) and check the order of the turns, that a contender which raises or hangs
mid-round is dropped while the others finish, and the verdicts' second reading.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from benchmarks import latency
from benchmarks._core import STOMPY, Row, Settings, Target
from benchmarks.brokers import unique_queue
from benchmarks.clients import STOMPPY, Job
from benchmarks.rawstomp import Child, Server, responder_command

QUIET = Settings(verbose=False, brokers=False)
#: 30 counted round trips in slices of 10 after 3 warm-up ones.
SHAPE = latency.Slices(count=30, warmup=3, size=10)


@pytest.fixture(scope="module")
def requests() -> Iterator[tuple[Server, str]]:
    """``python -m stompy broker`` with a bare-socket responder on a request queue."""
    with latency.stompy_broker() as server:
        queue = unique_queue("requests")
        with Child(responder_command(server, queue, 120), ready="READY"):
            yield server, queue


def _runs(
    server: Server, queue: str, requesters: dict[str, latency.Requester]
) -> list[tuple[str, latency.Run]]:
    job = Job(server, SHAPE.count, 60.0, destination=queue)
    return [
        (name, functools.partial(latency._one_run, requester, job))
        for name, requester in requesters.items()
    ]


def test_slices_hand_the_turn_on_outside_the_counted_round_trips() -> None:
    handed: list[int] = []
    slices = latency.Slices(count=25, warmup=3, size=10, rewarm=2)
    slices = replace(slices, hand_off=lambda: handed.append(len(handed)))
    counted = []
    for i in range(slices.total):
        before = len(handed)
        if slices.take(i):
            counted.append(i)
        elif len(handed) > before:
            counted.append(-i)  # a slice begins with an uncounted round trip
    assert slices.total == 3 + 25 + 3 * 2
    assert len([i for i in counted if i > 0]) == 25
    assert len(handed) == 3  # one hand-off per slice, the last slice 5 long
    assert [-i for i in counted if i < 0] == [3, 15, 27]


def test_contenders_take_turns_slice_by_slice(requests: tuple[Server, str]) -> None:
    """Each round: every contender's set-up turn, then one slice each, round and
    round, the same order every cycle; the next round starts with the next one."""
    server, queue = requests
    requesters: dict[str, latency.Requester] = {
        STOMPY: latency.stompy_sync_requests,
        "stompy (asyncio)": latency.stompy_async_requests,
        STOMPPY: latency.stomppy_requests,
        "bare socket": latency.bare_requests,
    }
    results, failed, orders = latency.interleave(
        _runs(server, queue, requesters), 2, QUIET, "test", SHAPE, 60.0, 30.0
    )
    assert failed == {}
    names = list(requesters)
    # One turn to connect and warm up, then one per slice of 10.
    assert orders[0] == names * 4
    assert orders[1] == (names[1:] + names[:1]) * 4
    for name in names:
        assert [len(times) for times in results[name]] == [30, 30]
        assert all(0 < t < 5 for times in results[name] for t in times)


def test_a_contender_that_raises_mid_round_is_dropped_the_others_go_on(
    requests: tuple[Server, str],
) -> None:
    server, queue = requests

    def breaks(job: Job, reply_to: str, slices: latency.Slices) -> list[float]:
        """stompy's requester, raising where its second slice would begin."""
        handed = 0

        def hand_off() -> None:
            nonlocal handed
            handed += 1
            if handed == 2:
                raise RuntimeError("broken mid-round")
            slices.hand_off()

        return latency.stompy_sync_requests(job, reply_to, replace(slices, hand_off=hand_off))

    requesters: dict[str, latency.Requester] = {
        STOMPY: latency.stompy_sync_requests,
        "broken": breaks,
    }
    requesters["bare socket"] = latency.bare_requests
    started = time.monotonic()
    results, failed, orders = latency.interleave(
        _runs(server, queue, requesters), 2, QUIET, "test", SHAPE, 60.0, 30.0
    )
    assert time.monotonic() - started < 30
    assert set(failed) == {"broken"}
    assert "broken mid-round" in failed["broken"]
    assert [len(times) for times in results[STOMPY]] == [30, 30]
    assert [len(times) for times in results["bare socket"]] == [30, 30]
    # Its set-up turn and its first slice; then the others alone, and in round 2.
    assert orders[0].count("broken") == 2
    assert orders[0][:6] == [STOMPY, "broken", "bare socket"] * 2
    assert orders[0][6:] == [STOMPY, "bare socket"] * 2
    assert orders[1] == ["bare socket", STOMPY] * 4


def test_a_contender_that_holds_its_turn_too_long_loses_it(
    requests: tuple[Server, str],
) -> None:
    """A hang does not hang the round: past ``turn_limit`` the next waiter takes the
    turn, and the one that held it is dropped when it comes back."""
    server, queue = requests

    def hangs(slices: latency.Slices) -> list[float]:
        for i in range(slices.total):
            if slices.take(i) and i == slices.warmup + slices.rewarm:
                time.sleep(2.0)  # in its first slice
        return [0.001] * slices.count

    runs = _runs(server, queue, {STOMPY: latency.stompy_sync_requests})
    runs.insert(0, ("hangs", hangs))
    started = time.monotonic()
    results, failed, orders = latency.interleave(runs, 1, QUIET, "test", SHAPE, 60.0, 0.5)
    assert time.monotonic() - started < 30
    assert set(failed) == {"hangs"}
    assert "held its turn over 0.5 s" in failed["hangs"]
    assert [len(times) for times in results[STOMPY]] == [30]
    assert orders[0] == ["hangs", STOMPY, "hangs", STOMPY, STOMPY, STOMPY]


def test_the_group_runs_interleaved_with_the_trio_request_contender() -> None:
    """The whole group, small: a row per contender with a figure per round, and the
    request() contenders among the targets, each verdict with the rounds' own
    ratios beside it."""
    settings = Settings(
        quick=True,
        count=40,
        rounds=2,
        slice=10,
        verbose=False,
        brokers=False,
        contenders=(STOMPY, latency.STOMPY_TRIO_REQUEST, STOMPPY),
    )
    rows = latency.run(settings)
    measured = {(r.name, r.contender): r for r in rows if not r.note}
    assert not [r for r in rows if r.note and not r.name.startswith("rabbitmq")]
    for who in (STOMPY, latency.STOMPY_TRIO_REQUEST, STOMPPY, "bare socket (ceiling)"):
        assert len(measured["stompy.testing p50", who].samples) == 2
    assert len(measured["stompy.testing receipt p99", STOMPY].samples) == 2
    ours = {(t.name, t.ours) for t in latency.TARGETS}
    for who in (latency.STOMPY_REQUEST, latency.STOMPY_ASYNC_REQUEST):
        assert ("stompy.testing p50", who) in ours
    target = next(
        t
        for t in latency.TARGETS
        if t.ours == latency.STOMPY_TRIO_REQUEST and t.name == "stompy.testing p50"
    )
    verdict = target.check(rows)
    assert verdict is not None
    assert verdict.note.startswith("rounds' own ratios: median ")


def test_the_rounds_own_ratios_beside_the_ratio_of_the_medians() -> None:
    def row(who: str, samples: tuple[float, ...]) -> Row:
        return Row("latency", "p50", who, sorted(samples)[1], "ms", False, samples)

    # Round by round ours is 0.5, 1.2 and 0.9 of theirs: 0.9; the medians 0.27 / 0.25.
    rows = [row(STOMPY, (0.1, 0.3, 0.27)), row(STOMPPY, (0.2, 0.25, 0.3))]
    verdict = Target("p50", STOMPPY, 1.25, by_round=True).check(rows)
    assert verdict is not None
    assert verdict.measured == pytest.approx(0.25 / 0.27)
    assert verdict.note == "rounds' own ratios: median 0.90 (ours / theirs)"
    plain = Target("p50", STOMPPY, 1.25).check(rows)
    assert plain is not None
    assert plain.note == ""

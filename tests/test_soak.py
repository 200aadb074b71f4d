"""The soak machinery (tests/soak, ``nox -s soak``), briefly, so that it cannot rot.

A two-second blocking run against the in-process broker, and the verdicts on made-up
tallies: a soak that could not fail would prove nothing.
"""

from __future__ import annotations

import collections
import time

from stompy.testing import BrokerStats, run_broker
from tests.soak import FAULTS, Result, Settings, Tally, details, soak_one, table
from tests.soak._core import ID_HEADER, RESENT_HEADER, Resources, refused

#: Short: faults every 0.3 s, a drain of at most 5 s.
QUICK = Settings(duration=2.0, seed=21, fault_interval=0.3, drain_timeout=5.0)


def test_a_short_blocking_soak_loses_nothing() -> None:
    started = time.monotonic()
    with run_broker(heartbeats=QUICK.heartbeats) as broker:
        result = soak_one("blocking", "stompy", broker.url, QUICK, broker)
    assert result.failures == []
    assert result.ok
    assert result.tally.confirmed
    assert result.tally.lost == 0
    assert sum(result.faults.values()) >= 3
    assert set(result.faults) <= set(FAULTS)
    assert result.after.threads <= result.before.threads
    assert result.after.fds <= result.before.fds
    assert "| blocking | stompy |" in table([result])
    assert "faults:" in details(result)
    assert time.monotonic() - started < 10


def made_up(tally: Tally, after: Resources | None = None) -> Result:
    before = Resources(threads=2, fds=10, rss_kb=1000, tasks=3)
    return Result(
        "asyncio", "stompy", tally, collections.Counter(cut=1), before, after or before, 1.0
    )


def test_a_lost_message_fails_the_run() -> None:
    tally = Tally(QUICK.bounds())
    for message_id in ("0-0", "0-1"):
        tally.attempt(message_id)
        tally.confirm(message_id)
    tally.receive({ID_HEADER: "0-0"})
    tally.receive({ID_HEADER: "0-0"})
    tally.receive({ID_HEADER: "9-9"})  # never sent
    result = made_up(tally)
    assert (tally.lost, tally.duplicates, tally.unknown) == (1, 1, 1)
    assert result.failures == [
        "1 confirmed message(s) lost",
        "1 message(s) with an id never sent",
    ]
    assert "FAIL" in table([result])


def test_a_call_over_its_bound_and_a_leak_fail_the_run() -> None:
    tally = Tally(QUICK.bounds())
    tally.attempt("0-0")
    tally.confirm("0-0")
    tally.receive({ID_HEADER: "0-0"})
    tally.observe("send", QUICK.bounds()["send"] + 0.1)
    tally.send_failed(OSError("raw"))
    leaked = Resources(threads=3, fds=11, rss_kb=1000, tasks=4)
    failures = made_up(tally, leaked).failures
    assert failures[0].startswith("send blocked")
    assert failures[1:4] == ["threads 2 -> 3", "file descriptors 10 -> 11", "tasks 3 -> 4"]
    assert "not a StompError" in failures[4]
    assert made_up(tally).longest()[0] == "send"


def test_an_error_from_the_in_process_broker_fails_the_run_unless_a_heartbeat_timeout() -> None:
    before = BrokerStats(errors_sent=2, heartbeat_timeouts=1)
    assert refused(before, BrokerStats(errors_sent=4, heartbeat_timeouts=3)) is None
    wrong = refused(before, BrokerStats(errors_sent=5, heartbeat_timeouts=2))
    assert wrong is not None
    assert wrong.startswith("the broker answered 2 frame(s) with an ERROR")


def test_the_printout_says_why_a_message_came_twice_and_why_a_send_took_send_timeout() -> None:
    tally = Tally(QUICK.bounds(), send_timeout=QUICK.send_timeout)
    for message_id in ("0-0", "0-1", "0-2", "0-3"):
        tally.attempt(message_id)
        tally.confirm(message_id)
        tally.receive({ID_HEADER: message_id})
    tally.receive({ID_HEADER: "0-0", "redelivered": "true"})  # its ack went with a connection
    tally.receive({ID_HEADER: "0-1", RESENT_HEADER: "1"})  # its receipt went with one
    tally.retry("0-2")  # a send of it raised: the producer sent it again
    tally.send_failed(ConnectionError("not reconnected"), QUICK.send_timeout)
    tally.send_failed(ConnectionError("lost"), 0.1)  # not a wait for a reconnect
    tally.receive({ID_HEADER: "0-2"})
    tally.receive({ID_HEADER: "0-3"})
    assert tally.duplicates == 4
    assert tally.again == {"redelivered": 1, "resent": 1, "retried": 1, "unexplained": 1}
    assert tally.sends_timed_out == 1
    text = details(made_up(tally))
    assert "1 send(s) raised after Reconnect.send_timeout (5 s since the call began)" in text
    assert "duplicates (at least once): redelivered 1 (the broker gave back" in text
    assert "unexplained 1 (no copy says why)" in text

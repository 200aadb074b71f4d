"""The ``stompy`` command against real brokers: what it did not print stays queued.

The README's own example (``seq 1 1000 | stompy send ... --lines``, then ``stompy
subscribe ... --json --count 10``) takes exactly ten from RabbitMQ and ActiveMQ and
leaves the other 990; a reader that leaves (``| head -n 3``) consumes only what it
printed, and so does a subscriber stopped by SIGINT or SIGTERM. The same checks
against the in-process broker are in tests/test_cli_matrix.py.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time

import pytest

import stompy
from tests.interop._support import TIMEOUT, BrokerTarget
from tests.quirks import COILMQ, INDIVIDUAL_IS_AUTO

TOTAL = 1000


def stompy_argv(*argv: str) -> list[str]:
    return [sys.executable, "-m", "stompy", *argv]


def fill(target: BrokerTarget, queue: str) -> None:
    """The README's first command: 1..TOTAL, one message per line."""
    numbers = b"".join(b"%d\n" % n for n in range(1, TOTAL + 1))
    sent = subprocess.run(
        stompy_argv("send", target.url, queue, "--lines"),
        input=numbers,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr


def drain(target: BrokerTarget, queue: str) -> list[int]:
    """Every number left on ``queue`` (taken), in the order they came."""
    left = []
    with (
        stompy.Connection(target.url, connect_timeout=TIMEOUT) as conn,
        conn.subscribe(queue) as sub,
    ):
        while (message := sub.get(timeout=2.0)) is not None:  # bounded: TOTAL messages
            left.append(int(message.text))
            assert len(left) <= TOTAL
    return left


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO)
def test_count_takes_exactly_that_many(broker: BrokerTarget, unique: str) -> None:
    queue = f"/queue/stompy-cli-count-{unique}"
    fill(broker, queue)
    got = subprocess.run(
        stompy_argv("subscribe", broker.url, queue, "--json", "--count", "10"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (got.returncode, got.stderr) == (0, b""), got.stderr
    printed = [int(json.loads(line)["body"]) for line in got.stdout.splitlines()]
    assert printed == list(range(1, 11))
    assert sorted(drain(broker, queue)) == list(range(11, TOTAL + 1))


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO)
def test_a_reader_gone_consumes_only_what_it_printed(broker: BrokerTarget, unique: str) -> None:
    queue = f"/queue/stompy-cli-head-{unique}"
    fill(broker, queue)
    argv = shlex.join(stompy_argv("subscribe", broker.url, queue, "--timeout", "10"))
    got = subprocess.run(
        ["sh", "-c", f"{argv} | head -n 3"], capture_output=True, timeout=60, check=False
    )
    assert (got.returncode, got.stderr) == (0, b"")
    assert got.stdout == b"1\n2\n3\n"
    assert sorted(drain(broker, queue)) == list(range(4, TOTAL + 1))


@pytest.mark.quirk(COILMQ, INDIVIDUAL_IS_AUTO)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_leaves_what_was_not_read(
    broker: BrokerTarget, unique: str, signum: signal.Signals
) -> None:
    queue = f"/queue/stompy-cli-{signum.name}-{unique}"
    fill(broker, queue)
    proc = subprocess.Popen(
        stompy_argv("subscribe", broker.url, queue), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        taken = [proc.stdout.readline() for _ in range(3)]  # each read takes one line
        time.sleep(0.5)  # the command sees the third read and acknowledges it
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, b"")
    assert taken == [b"1\n", b"2\n", b"3\n"]
    assert sorted(drain(broker, queue)) == list(range(4, TOTAL + 1))

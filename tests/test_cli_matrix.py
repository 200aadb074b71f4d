"""The CLI matrix: every command that consumes, stopped every way it can be, leaves
on the destination what it did not print.

A consuming command run as a user runs it (``python -m stompy`` in a subprocess,
against the in-process broker) takes ten queued messages and is stopped after three:
by ``--count``, by SIGINT (Ctrl-C), by SIGTERM, by its reader going away (``| head
-3``); and by ``--timeout`` after all of them. Then the broker holds exactly the ones
not printed, none of them left unacknowledged with a gone consumer, and they read back
in order. ``--ack client`` and ``client-individual`` must keep this as the default
does, and so must the default and ``client`` on STOMP 1.0 (``--stomp-version 1.0``,
which has no client-individual acks); ``--ack auto`` cannot, and says so.

Every subcommand of the parser is either in :data:`CONSUMERS` or in
:data:`NOT_CONSUMING`, so a new command cannot join the CLI without a decision here.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

import stompy
from stompy import cli
from stompy.testing import Broker, run_broker

TIMEOUT = 30.0
TOTAL = 10
BODIES = [f"m{n}" for n in range(TOTAL)]

#: The commands that take messages from a destination, with the arguments that make
#: them print one message per line (the destination is appended).
CONSUMERS: dict[str, list[str]] = {"subscribe": []}
#: The others, and why none of them takes a message from a destination.
NOT_CONSUMING: dict[str, str] = {
    "send": "only sends",
    "broker": "is the destination",
    "proxy": "forwards bytes; the client behind it consumes",
}
#: ``subscribe``'s ack modes: the default, and the two it may be given; on STOMP 1.0,
#: the default and ``client``.
ACKS: list[list[str]] = [
    [],
    ["--ack", "client"],
    ["--ack", "client-individual"],
    ["--stomp-version", "1.0"],
    ["--stomp-version", "1.0", "--ack", "client"],
]
ACK_IDS = ["default", "client", "client-individual", "1.0-default", "1.0-client"]


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


@pytest.fixture
def queue(broker: Broker) -> str:
    """A queue holding :data:`BODIES`, in order."""
    name = f"/queue/matrix-{uuid.uuid4().hex[:8]}"
    with stompy.Connection(broker.url) as conn:
        conn.send_many((stompy.Outgoing(name, body) for body in BODIES), receipt=True)
    assert broker.queue_depth(name) == TOTAL
    return name


def test_every_command_is_in_the_matrix() -> None:
    parser = cli.build_parser()
    commands = next(
        action for action in parser._actions if isinstance(action.choices, dict)
    ).choices
    assert isinstance(commands, dict)
    assert set(commands) == set(CONSUMERS) | set(NOT_CONSUMING)


def stompy_argv(command: str, url: str, queue: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "stompy", command, url, queue, *CONSUMERS[command], *argv]


def acked(broker: Broker, queue: str) -> int:
    """How many messages of the queue were consumed (acknowledged)."""
    return TOTAL - broker.queue_depth(queue) - broker.unacked_count(queue)


def left_behind(broker: Broker, queue: str) -> list[str]:
    """Once the consumer is gone: the bodies still on ``queue``, in order (taken)."""
    broker.wait_until(lambda: not broker.connections, timeout=TIMEOUT)
    assert broker.unacked_count(queue) == 0
    depth = broker.queue_depth(queue)
    bodies = []
    with stompy.Connection(broker.url) as conn, conn.subscribe(queue) as sub:
        for _ in range(depth):
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            bodies.append(message.text)
    return bodies


def run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=False)


@pytest.mark.parametrize("command", sorted(CONSUMERS))
@pytest.mark.parametrize("ack", ACKS, ids=ACK_IDS)
def test_count_takes_exactly_that_many(
    broker: Broker, queue: str, command: str, ack: list[str]
) -> None:
    got = run(stompy_argv(command, broker.url, queue, "--count", "3", *ack))
    assert (got.returncode, got.stderr) == (0, b""), got.stderr
    assert got.stdout.decode().splitlines() == BODIES[:3]
    assert left_behind(broker, queue) == BODIES[3:]


@pytest.mark.parametrize("shown", [["--json"], ["--headers"]], ids=["json", "headers"])
def test_count_takes_exactly_that_many_in_every_format(
    broker: Broker, queue: str, shown: list[str]
) -> None:
    got = run(stompy_argv("subscribe", broker.url, queue, "--count", "3", *shown))
    assert got.returncode == 0, got.stderr
    assert left_behind(broker, queue) == BODIES[3:]


@pytest.mark.parametrize("command", sorted(CONSUMERS))
@pytest.mark.parametrize("ack", ACKS, ids=ACK_IDS)
def test_timeout_consumes_only_what_was_printed(
    broker: Broker, queue: str, command: str, ack: list[str]
) -> None:
    # Everything arrives and is printed, then nothing for 0.5 s: an error with --count.
    got = run(stompy_argv(command, broker.url, queue, "--count", "12", "--timeout", "0.5", *ack))
    assert got.returncode == 1
    assert got.stdout.decode().splitlines() == BODIES
    assert b"received 10 of 12" in got.stderr
    assert left_behind(broker, queue) == []


def read_lines(stream: int, lines: int) -> bytes:
    """Read from pipe ``stream`` until ``lines`` lines came (bounded in time)."""
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while data.count(b"\n") < lines:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"only {data!r} in {TIMEOUT} s"
        ready, _, _ = select.select([stream], [], [], remaining)
        if ready:
            chunk = os.read(stream, 1 << 16)
            assert chunk, f"stdout ended after {data!r}"
            data += chunk
    return data


@pytest.mark.parametrize("command", sorted(CONSUMERS))
@pytest.mark.parametrize("ack", ACKS, ids=ACK_IDS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_leaves_what_was_not_read(
    broker: Broker, queue: str, command: str, ack: list[str], signum: int
) -> None:
    proc = subprocess.Popen(
        stompy_argv(command, broker.url, queue, *ack),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        taken = read_lines(proc.stdout.fileno(), 3)
        # The reader took three; the command sees that and acknowledges them (and
        # only them) before the signal lands.
        broker.wait_until(lambda: acked(broker, queue) >= 3, timeout=TIMEOUT)
        time.sleep(0.1)  # time enough to acknowledge a fourth, if it wrongly would
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert (proc.returncode, err) == (0, b"")
    assert taken.decode().splitlines() == BODIES[:3]
    assert left_behind(broker, queue) == BODIES[3:]


#: Readers that print three lines and exit: ``head``, and one that reads whatever the
#: pipe holds after a pause (as a busy reader does), prints three lines of it and exits.
SLOW_HEAD = (
    "import os, sys, time\n"
    "time.sleep(0.5)\n"
    "data = b''\n"
    "while data.count(b'\\n') < 3:\n"
    "    data += os.read(0, 1 << 16)\n"
    "sys.stdout.buffer.write(b''.join(data.splitlines(True)[:3]))\n"
)
READERS = {"head": "head -n 3", "slow-head": f"{sys.executable} -c {shlex.quote(SLOW_HEAD)}"}


@pytest.mark.parametrize("command", sorted(CONSUMERS))
@pytest.mark.parametrize("ack", ACKS, ids=ACK_IDS)
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_gone_leaves_what_it_did_not_read(
    broker: Broker, queue: str, command: str, ack: list[str], reader: str
) -> None:
    # Lines the reader read and dropped were never printed. (--timeout only bounds a
    # command that wrongly waits on after its reader left.)
    argv = shlex.join(stompy_argv(command, broker.url, queue, "--timeout", "5", *ack))
    got = subprocess.run(
        ["sh", "-c", f"{argv} | {READERS[reader]}"],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (got.returncode, got.stderr) == (0, b"")
    assert got.stdout.decode().splitlines() == BODIES[:3]
    assert left_behind(broker, queue) == BODIES[3:]


def test_ack_auto_with_count_warns(broker: Broker, queue: str) -> None:
    got = run(stompy_argv("subscribe", broker.url, queue, "--count", "1", "--ack", "auto"))
    assert got.returncode == 0
    assert got.stdout == b"m0\n"
    assert b"warning: with --ack auto" in got.stderr
    assert b"lost" in got.stderr
    help_text = run([sys.executable, "-m", "stompy", "subscribe", "--help"]).stdout
    assert b"lost" in help_text


def test_the_readme_example(broker: Broker) -> None:
    # seq 1 1000 | stompy send "$URL" /queue/numbers --lines
    # stompy subscribe "$URL" /queue/numbers --json --count 10
    queue = f"/queue/numbers-{uuid.uuid4().hex[:8]}"
    numbers = b"".join(b"%d\n" % n for n in range(1, 1001))
    sent = subprocess.run(
        [sys.executable, "-m", "stompy", "send", broker.url, queue, "--lines"],
        input=numbers,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (sent.returncode, sent.stderr) == (0, b"1,000 messages confirmed\n")
    got = run(stompy_argv("subscribe", broker.url, queue, "--json", "--count", "10"))
    assert (got.returncode, got.stderr) == (0, b"")
    assert [json.loads(line)["body"] for line in got.stdout.splitlines()] == [
        str(n) for n in range(1, 11)
    ]
    broker.wait_until(lambda: not broker.connections, timeout=TIMEOUT)
    assert (broker.queue_depth(queue), broker.unacked_count(queue)) == (990, 0)

"""``stompy send`` and ``stompy subscribe``, run as a user would: ``python -m stompy``.

Each test talks to one broker (with a login) through subprocesses, so it sees exactly
what a shell sees: stdout, stderr and the exit status.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from stompy import cli
from stompy import send as send_message
from stompy.testing import Broker, run_broker

LOGIN, PASSCODE = "app", "s3cret-Pa55"
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(users={LOGIN: PASSCODE}) as running:
        yield running


@pytest.fixture
def url(broker: Broker) -> str:
    """The broker's URL with the login in it."""
    return broker.url.replace("stomp://", f"stomp://{LOGIN}:{PASSCODE}@")


@pytest.fixture
def queue() -> str:
    return f"/queue/cli-{uuid.uuid4().hex[:8]}"


def stompy(
    *argv: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m stompy ARGV`` to completion (bounded), stdin closed unless ``input``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_")}
    return subprocess.run(
        [sys.executable, "-m", "stompy", *argv],
        input=input if input is not None else b"",
        capture_output=True,
        timeout=TIMEOUT,
        env={**environment, **(env or {})},
        start_new_session=True,  # no controlling terminal: getpass reads stdin
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[bytes], command: str) -> str:
    """The single stderr line of a failed command, checked for shape."""
    assert result.returncode != 0
    err = result.stderr.decode()
    assert err.count("\n") == 1, err
    assert err.startswith(f"stompy {command}: "), err
    assert "Traceback" not in err
    assert PASSCODE not in err
    assert PASSCODE.encode() not in result.stdout
    return err


def test_send_then_subscribe_prints_the_body(url: str, queue: str) -> None:
    sent = stompy("send", url, queue, "hello, world")
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, b"", b"")
    got = stompy("subscribe", url, queue, "--count", "1", "--timeout", "10")
    assert (got.returncode, got.stdout, got.stderr) == (0, b"hello, world\n", b"")


def test_bodies_from_stdin_and_file_are_binary_safe(url: str, queue: str, tmp_path: Path) -> None:
    from_stdin = b"\x00\xff\r\n\x00 not text \xfe"
    from_file = bytes(range(256)) * 3
    path = tmp_path / "payload.bin"
    path.write_bytes(from_file)
    assert stompy("send", url, queue, "-", input=from_stdin).returncode == 0
    assert stompy("send", url, queue, f"@{path}").returncode == 0
    assert stompy("send", url, queue, input=b"stdin is the default").returncode == 0

    got = stompy("subscribe", url, queue, "--json", "--count", "3", "--timeout", "10")
    assert got.returncode == 0, got.stderr
    first, second, third = (json.loads(line) for line in got.stdout.splitlines())
    assert first["encoding"] == second["encoding"] == "base64"
    assert base64.b64decode(first["body"]) == from_stdin
    assert base64.b64decode(second["body"]) == from_file
    assert third["encoding"] == "text"
    assert third["body"] == "stdin is the default"
    assert first["destination"] == queue
    assert first["headers"]["content-length"] == str(len(from_stdin))


def test_headers_and_content_type(url: str, queue: str) -> None:
    sent = stompy(
        "send",
        url,
        queue,
        "-H",
        "priority:9",
        "-H",
        "x-trace:a:b",
        "-H",
        "note:two\nlines",
        "--content-type",
        "application/json",
        '{"n": 1}',  # after the options: intermixed arguments work
    )
    assert sent.returncode == 0, sent.stderr
    got = stompy("subscribe", url, queue, "--headers", "--count", "1", "--timeout", "10")
    assert got.returncode == 0, got.stderr
    head, _, body = got.stdout.partition(b"\n\n")
    lines = head.decode().splitlines()
    assert f"destination:{queue}" in lines
    assert "priority:9" in lines
    assert "x-trace:a\\cb" in lines  # escaped as in a STOMP 1.2 frame
    assert "note:two\\nlines" in lines
    assert "content-type:application/json" in lines
    assert body == b'{"n": 1}\n'


@pytest.mark.parametrize("header", ["content-type:text/x", "Content-Type:text/x"])
def test_content_type_given_twice_is_a_usage_error(
    header: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --content-type won without a word, and the -H value was dropped.
    with pytest.raises(SystemExit) as info:
        cli.main(["send", "stomp://h", "/q", "x", "-H", header, "--content-type", "text/y"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "content-type" in err
    assert "--content-type" in err


@pytest.mark.parametrize("body", ["x", "-", "@/dev/null"])
def test_a_capitalised_content_type_is_a_usage_error(
    body: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was sent as written: beside the text/plain of a text argument, or as a header
    # of its own on bytes from stdin or a file, which receivers do not read.
    with pytest.raises(SystemExit) as info:
        cli.main(["send", "stomp://h", "/q", body, "-H", "Content-Type:application/json"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "'Content-Type': STOMP header names are case-sensitive" in err
    assert "use --content-type" in err


def test_the_last_header_of_a_name_wins(url: str, queue: str) -> None:
    sent = stompy("send", url, queue, "-H", "priority:1", "-H", "priority:9", "x")
    assert sent.returncode == 0, sent.stderr
    got = stompy("subscribe", url, queue, "--headers", "--count", "1", "--timeout", "10")
    lines = got.stdout.partition(b"\n\n")[0].decode().splitlines()
    assert [line for line in lines if line.startswith("priority:")] == ["priority:9"]


def test_arguments_that_are_not_utf8(url: str, queue: str) -> None:
    # A Latin-1 terminal's bytes: the body was refused ("the body is not valid text:
    # surrogates not allowed"), a header or destination failed with the codec's words
    # and a place in the frame ("can't encode character '\udcff' in position 78").
    latin1 = os.fsdecode(b"caf\xe9")  # as Python gives such an argument
    sent = stompy("send", url, queue, latin1)
    assert sent.returncode == 0, sent.stderr
    got = stompy("subscribe", url, queue, "--json", "--count", "1", "--timeout", "10")
    shown = json.loads(got.stdout)
    assert (shown["encoding"], base64.b64decode(shown["body"])) == ("base64", b"caf\xe9")
    assert "content-type" not in shown["headers"]  # bytes, as from stdin
    for argv, named in (
        (["-H", os.fsdecode(b"a:\xff")], "argument -H/--header: want NAME:VALUE in UTF-8"),
        ([os.fsdecode(b"/queue/\xff")], "argument DESTINATION: want a destination in UTF-8"),
    ):
        refused = stompy("send", url, *([queue, "x", *argv] if argv[0] == "-H" else [*argv, "x"]))
        assert refused.returncode == 2
        line = one_error_line(refused, "send")
        assert named in line
        assert "\\xff" in line  # the byte, as given


def test_json_of_text_keeps_unicode(url: str, queue: str) -> None:
    assert stompy("send", url, queue, "grüße ✓").returncode == 0
    got = stompy("subscribe", url, queue, "--json", "--count", "1", "--timeout", "10")
    record = json.loads(got.stdout)
    assert record["body"] == "grüße ✓"
    assert record["encoding"] == "text"
    assert record["headers"]["content-type"] == "text/plain;charset=utf-8"


def test_lines_from_stdin_and_from_a_file(url: str, queue: str, tmp_path: Path) -> None:
    sent = stompy("send", url, queue, "--lines", input=b"one\ntwo\r\n\nthree")
    assert sent.returncode == 0
    # stderr is not a terminal here: the count, and no progress bar.
    assert sent.stderr == b"4 messages confirmed\n"
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(200)))
    sent = stompy("send", url, queue, f"@{path}", "--lines", "--no-receipt")
    assert (sent.returncode, sent.stderr) == (0, b"200 messages sent\n")

    got = stompy("subscribe", url, queue, "--count", "204", "--timeout", "10")
    assert got.returncode == 0, got.stderr
    expected = [b"one", b"two", b"", b"three"] + [b"line %d" % i for i in range(200)]
    assert got.stdout.split(b"\n")[:-1] == expected


def test_timeout_ends_quietly_without_count(url: str, queue: str) -> None:
    got = stompy("subscribe", url, queue, "--timeout", "0.2")
    assert (got.returncode, got.stdout, got.stderr) == (0, b"", b"")


def test_timeout_before_count_is_an_error(url: str, queue: str) -> None:
    assert stompy("send", url, queue, "only one").returncode == 0
    got = stompy("subscribe", url, queue, "--count", "2", "--timeout", "0.3")
    assert got.returncode == 1
    assert got.stdout == b"only one\n"
    assert "received 1 of 2" in one_error_line(got, "subscribe")


def test_client_ack_takes_only_what_was_printed(url: str, queue: str, broker: Broker) -> None:
    for n in range(3):
        assert stompy("send", url, queue, f"m{n}").returncode == 0
    got = stompy(
        "subscribe", url, queue, "--ack", "client-individual", "--count", "1", "--timeout", "10"
    )
    assert (got.returncode, got.stdout) == (0, b"m0\n")
    # The other two went back to the queue when the subscriber left.
    broker.wait_until(lambda: broker.queue_depth(queue) == 2)
    assert broker.unacked_count(queue) == 0


def test_credentials_from_the_environment(broker: Broker, queue: str) -> None:
    env = {"STOMP_LOGIN": LOGIN, "STOMP_PASSCODE": PASSCODE}
    assert stompy("send", broker.url, queue, "via env", env=env).returncode == 0
    got = stompy(
        "subscribe", broker.url, queue, "--login", LOGIN, "--count", "1", "--timeout", "10", env=env
    )
    assert got.stdout == b"via env\n"


def test_passcode_asked_for_is_not_echoed(broker: Broker, queue: str) -> None:
    sent = stompy(
        "send",
        broker.url,
        queue,
        "asked",
        "--login",
        LOGIN,
        "--ask-passcode",
        input=PASSCODE.encode() + b"\n",
    )
    assert sent.returncode == 0, sent.stderr
    assert PASSCODE.encode() not in sent.stderr + sent.stdout


def test_wrong_passcode_is_one_line_and_never_printed(broker: Broker, queue: str) -> None:
    wrong = broker.url.replace("stomp://", f"stomp://{LOGIN}:{PASSCODE[::-1]}@")
    got = stompy("send", wrong, queue, "x")
    err = one_error_line(got, "send")
    assert got.returncode == 1
    assert "refused" in err
    assert "authentication failed" in err
    assert PASSCODE[::-1] not in err


def test_bad_urls_are_usage_errors(queue: str) -> None:
    got = stompy("send", f"http://{LOGIN}:{PASSCODE}@example.invalid/", queue, "x")
    assert got.returncode == 2
    assert "scheme" in one_error_line(got, "send")
    got = stompy("subscribe", f"stomp://{LOGIN}:{PASSCODE}@", queue)
    assert got.returncode == 2
    assert "no host" in one_error_line(got, "subscribe")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_refused_connection(queue: str) -> None:
    url = f"stomp://{LOGIN}:{PASSCODE}@127.0.0.1:{free_port()}"
    got = stompy("send", url, queue, "x")
    assert got.returncode == 1
    assert "cannot connect" in one_error_line(got, "send")
    got = stompy("subscribe", url, queue, "--debug")
    assert got.returncode == 1
    err = got.stderr.decode()
    assert "Traceback" in err
    assert "ConnectFailed" in err
    assert PASSCODE not in err


def test_missing_file_and_bad_options(url: str, queue: str, tmp_path: Path) -> None:
    got = stompy("send", url, queue, f"@{tmp_path / 'missing'}")
    assert "cannot read" in one_error_line(got, "send")
    got = stompy("send", url, queue, "-H", "no-colon", "x")
    assert got.returncode == 2
    assert b"NAME:VALUE" in got.stderr
    got = stompy("subscribe", url, queue, "--count", "0")
    assert got.returncode == 2
    got = stompy("subscribe", url, queue, "--json", "--headers")
    assert got.returncode == 2


#: Usage errors, each with the argument its one line must name.
USAGE_ERRORS = [
    (["send", "stomp://h", "", "hi"], "DESTINATION"),
    (["subscribe", "stomp://h", " "], "DESTINATION"),
    (["send", "stomp://h"], "DESTINATION"),
    (["subscribe", "stomp://h", "/q", "--count", "-1"], "--count"),
    (["subscribe", "stomp://h", "/q", "--count", "1.5"], "--count"),
    (["subscribe", "stomp://h", "/q", "--timeout", "-1"], "--timeout"),
    (["subscribe", "stomp://h", "/q", "--timeout", "inf"], "--timeout"),
    (["subscribe", "stomp://h", "/q", "--timeout", "nan"], "--timeout"),
    (["subscribe", "stomp://h", "/q", "--ack", "bogus"], "--ack"),
    (["subscribe", "stomp://h", "/q", "--heartbeat", "1000"], "--heartbeat"),
    (["send", "stomp://h", "/q", "--heartbeat", "-1,0", "x"], "--heartbeat"),
    (["send", "stomp://h", "/q", "--heartbeat", "9999999999,0", "x"], "--heartbeat"),
    (["send", "stomp://h", "/q", "--connect-timeout", "nan", "x"], "--connect-timeout"),
    (["broker", "--port", "-5"], "--port"),
    (["broker", "--port", "65536"], "--port"),
    (["broker", "--websocket", "-1"], "--websocket"),
    (["broker", "--prefetch", "0"], "--prefetch"),
    (["broker", "--max-queue", "-1"], "--max-queue"),
    (["broker", "--max-stored-bytes", "0"], "--max-stored-bytes"),
    (["broker", "--max-redeliveries", "-1"], "--max-redeliveries"),
    (["proxy", "--target", "stomp://h", "--port", "-1"], "--port"),
    (["bogus"], "COMMAND"),
    # An option the command does not take is the command's error, pointing to its own
    # --help, where the options to read are, rather than to 'stompy --help'.
    (["send", "stomp://h", "/q", "x", "--receipt-timeout", "1"], "--receipt-timeout"),
    (["subscribe", "stomp://h", "/q", "--cout", "3"], "--cout"),
]


@pytest.mark.parametrize(("argv", "named"), USAGE_ERRORS)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"stompy{' ' + argv[0] if argv[0] != 'bogus' else ''}: error: ")
    assert named in err


@pytest.mark.parametrize(
    "argv",
    [
        ["send", "stomp://h", "/q", "x", "--heartbeat", "-1,0"],
        ["send", "stomp://h", "/q", "x", "--heartbeat=-1,0"],
        ["subscribe", "stomp://h", "/q", "--heartbeat", "0,-1"],
        ["broker", "--heartbeat", "-1,-1"],
    ],
)
def test_a_negative_heartbeat_is_refused_saying_why(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # With a space, argparse took "-1,0" for an option: "expected one argument".
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --heartbeat: want two numbers of ms" in err
    assert "a heart-beat is an interval, never negative (0 for none" in err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["send", "stomp://h", "/q", "x", "--vhost", ""], "leave --vhost out for the URL's path"),
        (["subscribe", "stomp://h", "/q", "--vhost", ""], "leave --vhost out for the URL's path"),
        (["broker", "--vhost", "/", "--vhost", ""], "without --vhost, any is accepted"),
    ],
)
def test_an_empty_vhost_is_refused(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was taken: an empty host header, which names no virtual host (a broker that
    # accepted only '' refused every stompy client).
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --vhost: want a virtual host like / or staging, got ''" in err
    assert hint in err


@pytest.mark.parametrize(
    ("given", "meant"),
    [("receive", "subscribe"), ("consume", "subscribe"), ("Publish", "send"), ("brokr", "broker")],
)
def test_a_command_by_another_name_is_told_the_one_meant(
    given: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It listed the four commands without saying which one the word meant.
    with pytest.raises(SystemExit) as info:
        cli.main([given, "stomp://h", "/q"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"invalid choice: '{given}'" in err
    assert f"did you mean {meant}?" in err


def test_usage_errors_of_the_issue_exit_2() -> None:
    # Both are known wrong before anything is sent or bound: said by the parser, exit 2,
    # not found out by a round trip to the broker or by bind().
    for argv in (["send", "stomp://127.0.0.1:1", "", "hi"], ["broker", "--port", "-5"]):
        got = stompy(*argv)
        assert got.returncode == 2
        line = one_error_line(got, argv[0])
        assert "argument DESTINATION" in line or "argument --port" in line


def test_an_unknown_option_points_to_the_commands_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["send", "stomp://h", "/q", "x", "--receipt-timeout", "1"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "stompy send: error: unrecognized arguments: --receipt-timeout 1 "
        "(see 'stompy send --help')\n"
    )


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["broker", "--max-subscription", "3"], "--max-subscriptions"),
        (["subscribe", "stomp://h", "/q", "--time", "2"], "--timeout"),
        (["subscribe", "stomp://h", "/q", "--time=2"], "--timeout"),
        (["send", "stomp://h", "/q", "x", "--content", "text/x"], "--content-type"),
        (["send", "stomp://h", "/q", "x", "--rec"], "--receipt or --reconnect"),
        (["proxy", "--target", "stomp://h", "--thr", "5"], "--throttle"),
    ],
)
def test_an_abbreviated_option_is_refused_naming_the_whole_one(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix of an option is not taken for it (argparse's default): a new option that
    begins the same would silently change what an old command line means."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    given = next(arg for arg in argv if arg.startswith("--") and arg not in ("--target",))
    assert f"unrecognized arguments: {given}" in err, err
    assert f"did you mean {meant}?" in err, err


def test_a_misspelled_option_is_told_what_it_likely_meant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["subscribe", "stomp://h", "/q", "--timout", "2"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "stompy subscribe: error: unrecognized arguments: --timout 2; did you mean "
        "--timeout? (see 'stompy subscribe --help')\n"
    )


@pytest.mark.parametrize("command", [["broker"], ["proxy", "--target", "stomp://127.0.0.1:1"]])
def test_backend_trio_without_trio_is_one_line_and_exit_2(command: list[str]) -> None:
    """Without the trio extra, --backend trio is a usage error that says what to
    install, not anyio's LookupError and its traceback."""
    code = (
        "import sys; sys.modules['trio'] = None; from stompy import cli; "
        f"sys.exit(cli.main({[*command, '--port', '0', '--backend', 'trio']!r}))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=TIMEOUT, check=False
    )
    assert got.returncode == 2
    assert one_error_line(got, command[0]) == (
        f"stompy {command[0]}: --backend trio needs trio: pip install 'stompy-client[trio]'\n"
    )


def test_reconnect_shows_each_failed_attempt_to_connect() -> None:
    """--reconnect retries the first connection without end: a mistyped port waited
    without a word (the attempts were logged at INFO, shown only with -v)."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nobody listens there once it is closed
    command = [sys.executable, "-m", "stompy", "subscribe", f"stomp://127.0.0.1:{port}"]
    command += ["/queue/x", "--reconnect"]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stderr.readline()))  # type: ignore[union-attr]
    try:
        reader.start()
        reader.join(TIMEOUT)
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
        reader.join(TIMEOUT)
        proc.stderr.close()  # type: ignore[union-attr]
    assert lines, "no line on stderr"
    line = lines[0].decode()
    assert line.startswith(f"stompy subscribe: could not connect to stomp://127.0.0.1:{port}: ")
    # The address once: it said "could not connect to X: cannot connect to X: ...".
    assert line.count(f"127.0.0.1:{port}") == 1, line
    assert "Connection refused" in line


@pytest.mark.parametrize(
    ("command", "header", "hint"),
    [
        ("send", "destination:/queue/elsewhere", "give it as DESTINATION"),
        # It said "stompy send always waits for the broker's receipt", which
        # --no-receipt does not.
        ("send", "receipt:r-1", "stompy send asks for one itself (--receipt, the default; "),
        ("subscribe", "ack:auto", "use --ack"),
        ("subscribe", "id:7", "stompy names its subscription"),
    ],
)
def test_reserved_header_is_a_usage_error_that_says_what_to_use(
    url: str, queue: str, command: str, header: str, hint: str
) -> None:
    got = stompy(command, url, queue, "-H", header, *(["x"] if command == "send" else []))
    assert got.returncode == 2  # a usage error: nothing was sent or subscribed
    line = one_error_line(got, command)
    assert f"{header.split(':')[0]!r} is set by stompy: {hint}" in line


def test_ctrl_c_disconnects_gracefully(
    broker: Broker, url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stompy.testing")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "subscribe", url, queue],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        broker.wait_until(partial(subscribed, broker, queue), timeout=TIMEOUT)
        assert stompy("send", url, queue, "seen before Ctrl-C").returncode == 0
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert (proc.returncode, err) == (0, b"")
    assert out == b"seen before Ctrl-C\n"
    broker.wait_until(lambda: not broker.connections)
    assert "closed (DISCONNECT)" in caplog.text


def subscribed(broker: Broker, queue: str) -> bool:
    return any(
        sub.destination == queue for conn in broker.connections for sub in conn.subscriptions
    )


def test_subscribe_reconnects(broker: Broker, url: str, queue: str) -> None:
    argv = ["subscribe", url, queue, "--reconnect", "--count", "2", "--timeout", "20"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        broker.wait_until(partial(subscribed, broker, queue), timeout=TIMEOUT)
        assert stompy("send", url, queue, "before").returncode == 0
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"before\n"
        # Read, so acknowledged: not delivered again after the reconnect.
        broker.wait_until(partial(queue_has, broker, queue, 0), timeout=TIMEOUT)
        broker.wait_until(lambda: broker.unacked_count(queue) == 0, timeout=TIMEOUT)
        # The sender has disconnected; the broker may not have seen its socket close yet.
        broker.wait_until(lambda: len(broker.connections) == 1, timeout=TIMEOUT)
        assert broker.drop_all_connections() == 1
        broker.wait_until(partial(subscribed, broker, queue), timeout=TIMEOUT)
        assert stompy("send", url, queue, "after").returncode == 0
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert (proc.returncode, out, err) == (0, b"after\n", b"")


def queue_has(broker: Broker, queue: str, depth: int) -> bool:
    return broker.queue_depth(queue) == depth


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_interrupted_send_disconnects_gracefully(
    broker: Broker, url: str, queue: str, signum: int, status: int, said: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "send", url, queue, "--lines"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        for n in (1, 2):
            proc.stdin.write(b"line %d\n" % n)
            proc.stdin.flush()
            broker.wait_until(partial(queue_has, broker, queue, n), timeout=TIMEOUT)
        # The first receipt has arrived (the second line is sent only after it); the
        # second may or may not have when the signal lands.
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == status
    count, last = err.decode().splitlines()
    assert count in ("1 message confirmed", "2 messages confirmed")
    assert last == f"stompy send: {said}"
    broker.wait_until(lambda: not broker.connections)


def test_reader_going_away_ends_subscribe(broker: Broker, url: str, queue: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "subscribe", url, queue, "--ack", "client-individual"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert stompy("send", url, queue, "read").returncode == 0
        assert proc.stdout.readline() == b"read\n"
        proc.stdout.close()  # as `| head -1` does
        assert stompy("send", url, queue, "never read").returncode == 0
        proc.wait(timeout=TIMEOUT)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        if proc.stderr is not None:
            proc.stderr.close()
    assert (proc.returncode, err) == (141, b"")
    # The message that could not be written was not acknowledged: it is still there.
    broker.wait_until(lambda: not broker.connections)
    assert broker.queue_depth(queue) == 1


def test_tls_with_cafile(tmp_path: Path, queue: str) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    with run_broker(ssl=server_context) as tls_broker:
        assert tls_broker.url.startswith("stomp+ssl://")
        untrusted = stompy("send", tls_broker.url, queue, "x", "--connect-timeout", "5")
        assert "CERTIFICATE_VERIFY_FAILED" in one_error_line(untrusted, "send")
        sent = stompy("send", tls_broker.url, queue, "over TLS", "--cafile", str(cafile))
        assert sent.returncode == 0, sent.stderr
        assert tls_broker.queue_depth(queue) == 1
    got = stompy("send", tls_broker.url, queue, "x", "--cafile", str(tmp_path / "none.pem"))
    assert "cannot load CA certificates" in one_error_line(got, "send")


def test_asked_passcode_missing(broker: Broker, queue: str) -> None:
    got = stompy("send", broker.url, queue, "x", "--ask-passcode")
    assert got.returncode == 2
    assert got.stderr.decode().splitlines()[-1] == "stompy send: no passcode given"


def test_version_and_help() -> None:
    got = stompy("--version")
    assert got.returncode == 0
    assert got.stdout.startswith(b"stompy ")
    got = stompy("send", "--help")
    assert got.returncode == 0
    assert b"--content-type" in got.stdout


# -- in-process: the pieces -------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    screen = Terminal()
    bar = cli.Progress(screen, total=200)
    bar.update(1, 50, force=True)
    assert "[" in screen.getvalue()
    assert "25%" in screen.getvalue()
    assert "1 sent" in screen.getvalue()
    bar.update(2, 60)  # within 0.1 s of the last one: not drawn
    assert "2 sent" not in screen.getvalue()
    bar.update(4, 200, force=True)
    assert "100%" in screen.getvalue()
    bar.close()
    assert screen.getvalue().endswith("\r\x1b[K")

    counter = Terminal()
    cli.Progress(counter).update(1234, force=True)
    assert counter.getvalue().startswith("\r1,234 sent")

    pipe = io.StringIO()
    quiet = cli.Progress(pipe, total=10)
    quiet.update(1, 5, force=True)
    quiet.close()
    assert pipe.getvalue() == ""


@pytest.mark.parametrize(
    ("shown", "masked"),
    [
        # A URL's userinfo, however the passcode is spelled (its ":" and "@" raw too).
        (f"at stomp://{LOGIN}:{PASSCODE}@h:1/v", f"at stomp://{LOGIN}:********@h:1/v"),
        ("wss://a:p:a@ss@h/ws, stomp://b:%40c@h2", "wss://a:********@h/ws, stomp://b:********@h2"),
        # A CONNECT frame: its text, and a repr of its bytes (escapes and all).
        ("CONNECT\nlogin:app\npasscode:a b\n\n", "CONNECT\nlogin:app\npasscode:********\n\n"),
        (
            repr(b"CONNECT\nlogin:app\npasscode:x\\ny\nhost:/\n\n\x00"),
            repr(b"CONNECT\nlogin:app\npasscode:********\nhost:/\n\n\x00"),
        ),
        # Reprs: a keyword, a dict, a header pair.
        ("Options(passcode='it\\'s', login='a')", "Options(passcode='********', login='a')"),
        (str({"passcode": "a"}), str({"passcode": "********"})),
        (str((("login", "a"), ("passcode", "a"))), str((("login", "a"), ("passcode", "********")))),
        # The passcode's text where it is not a passcode stays as it is.
        (
            "authentication failed: unknown login or wrong passcode",
            "authentication failed: unknown login or wrong passcode",
        ),
        ("the passcode: is wrong", "the passcode: is wrong"),
    ],
)
def test_passcodes_are_masked_where_they_stand(shown: str, masked: str) -> None:
    assert cli.mask_passcodes(shown) == masked


def test_a_short_passcode_does_not_garble_the_error(broker: Broker, queue: str) -> None:
    # "a" is in "authentication" and "passcode": masking its every occurrence made the
    # line unreadable and showed where the passcode's letters are.
    got = stompy("send", broker.url.replace("stomp://", "stomp://nobody:a@"), queue, "x")
    assert got.returncode == 1
    assert got.stderr.startswith(
        b"stompy send: the broker refused: authentication failed: unknown login or wrong "
        b"passcode (the broker refused the CONNECT, which sent host:'/'"
    )
    assert got.stderr.count(b"\n") == 1
    got = stompy("send", broker.url, queue, "x", "--login", "nobody", "--passcode", "a", "--debug")
    assert got.returncode == 1
    err = got.stderr.decode()
    assert "passcode:********" in err  # the CONNECT frame, logged
    assert "authentication failed: unknown login or wrong passcode" in err
    assert "********uthentic" not in err


def test_in_process_send_and_subscribe(
    url: str, queue: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert cli.main(["send", url, queue, "in process", "-H", "k:v"]) == 0
    assert cli.main(["subscribe", url, queue, "--json", "--count", "1", "--timeout", "10"]) == 0
    record = json.loads(capsysbinary.readouterr().out)
    assert record["body"] == "in process"
    assert record["headers"]["k"] == "v"


def test_a_passcode_with_a_comma_is_one_url() -> None:
    passcode = "Hunter2,Tail"
    with run_broker(users={LOGIN: passcode}) as broker:
        target = broker.url.replace("stomp://", f"stomp://{LOGIN}:{passcode}@")
        queue = f"/queue/{uuid.uuid4().hex}"
        got = stompy("send", target, queue, "with a comma")
        assert got.returncode == 0, got.stderr
        assert broker.queue_depth(queue) == 1
        assert b"Hunter2" not in got.stderr + got.stdout


# -- stompy proxy ----------------------------------------------------------------------------


def test_proxy_forwards_until_sigterm(broker: Broker, url: str, queue: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "proxy", "--target", url, "--delay", "0.01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        assert readable, "no line within the timeout"
        first = proc.stdout.readline().decode()
        prefix = f"listening on stomp://{LOGIN}@127.0.0.1:"
        assert first.startswith(prefix), first
        assert PASSCODE not in first
        proxied = first.removeprefix("listening on ").strip()
        # The printed URL has the login and not the passcode: give it separately.
        got = stompy("send", proxied, queue, "through the proxy", "--passcode", PASSCODE)
        assert got.returncode == 0, got.stderr
        assert broker.queue_depth(queue) == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert out == b""
    assert PASSCODE.encode() not in err


def test_proxy_usage_errors() -> None:
    missing = stompy("proxy")
    assert missing.returncode == 2
    assert b"--target" in missing.stderr
    bad = stompy("proxy", "--target", f"http://{LOGIN}:{PASSCODE}@127.0.0.1:1")
    assert bad.returncode == 2
    assert one_error_line(bad, "proxy").startswith("stompy proxy: bad target URL")
    for argv in (["--delay", "-1"], ["--delay", "nan"], ["--throttle", "0"]):
        assert stompy("proxy", "--target", "stomp://127.0.0.1:1", *argv).returncode == 2


def test_proxy_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        got = stompy("proxy", "--target", "stomp://127.0.0.1:1", "--port", str(port), "-q")
        assert got.returncode == 1
        assert one_error_line(got, "proxy").startswith("stompy proxy: cannot listen on")


def test_run_proxy_command_in_another_thread(url: str, queue: str, broker: Broker) -> None:
    from anyio.from_thread import start_blocking_portal

    out = io.StringIO()
    args = cli.build_parser().parse_args(["proxy", "--target", url, "--throttle", "100000"])
    with start_blocking_portal() as portal:
        future = portal.start_task_soon(cli.run_proxy_command, args, out)
        try:
            for _ in range(100):  # up to 5 s
                if out.getvalue():
                    break
                threading.Event().wait(0.05)
            proxied = out.getvalue().removeprefix("listening on ").strip()
            assert proxied.startswith(f"stomp://{LOGIN}@127.0.0.1:"), out.getvalue()
            assert cli.main(["send", proxied, queue, "in process", "--passcode", PASSCODE]) == 0
            assert broker.queue_depth(queue) == 1
        finally:
            future.cancel()


# -- the STOMP version -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [("1.0", "1.0"), ("1.1", "1.1"), ("1.0,1.1", "1.1"), ("1.2,1.0", "1.2"), (None, "1.2")],
)
def test_stomp_version_is_what_the_connection_offers(
    broker: Broker, url: str, queue: str, offered: str | None, chosen: str
) -> None:
    """The broker speaks all three and picks the highest offered: while ``subscribe``
    waits, the broker shows the version of its connection."""
    argv = ["subscribe", url, queue, "--count", "1", "--timeout", str(TIMEOUT)]
    if offered is not None:
        argv += ["--stomp-version", offered]
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(cli.main(argv)))
    thread.start()
    try:

        def subscribed() -> list[str]:
            return [
                c.version
                for c in broker.connections
                if any(s.destination == queue for s in c.subscriptions)
            ]

        broker.wait_until(lambda: bool(subscribed()), timeout=TIMEOUT)
        assert subscribed() == [chosen]
    finally:
        send_message(url, queue, "ends it")
        thread.join(TIMEOUT)
    assert status == [0]


def test_send_offers_only_the_versions_given(queue: str) -> None:
    with run_broker(versions=("1.2",)) as broker:
        got = stompy("send", broker.url, queue, "x", "--stomp-version", "1.0,1.1")
        line = one_error_line(got, "send")
        assert got.returncode == 1
        assert "no common STOMP version: the client accepts 1.0,1.1" in line
        assert broker.queue_depth(queue) == 0
        got = stompy("send", broker.url, queue, "x", "--stomp-version", "1.2")
        assert (got.returncode, got.stderr) == (0, b"")
        assert broker.queue_depth(queue) == 1


@pytest.mark.parametrize("command", ["send", "subscribe"])
@pytest.mark.parametrize("value", ["2.0", "1.0,1.3", "", "1.0;1.1", "1"])
def test_a_bad_stomp_version_is_one_line_and_exit_2(command: str, value: str) -> None:
    argv = [command, "stomp://127.0.0.1:1", "/queue/x", "--stomp-version", value]
    got = stompy(*argv, *(["x"] if command == "send" else []))
    assert got.returncode == 2
    line = one_error_line(got, command)
    assert "argument --stomp-version: want STOMP versions among 1.0,1.1,1.2" in line
    assert repr(value) in line


def test_subscribe_on_a_stomp_10_broker(queue: str) -> None:
    """A broker that speaks STOMP 1.0 only (stompserver) has no client-individual acks,
    the default: ``subscribe`` acknowledges with ``client`` there, and still takes only
    what it printed."""
    with run_broker(versions=("1.0",)) as broker:
        for body in ("a", "b", "c"):
            send_message(broker.url, queue, body)
        got = stompy("subscribe", broker.url, queue, "--count", "2", "--timeout", "10")
        assert (got.returncode, got.stdout, got.stderr) == (0, b"a\nb\n", b"")
        broker.wait_until(lambda: not broker.connections, timeout=TIMEOUT)
        assert (broker.queue_depth(queue), broker.unacked_count(queue)) == (1, 0)


def test_individual_acks_on_stomp_10_say_what_to_use(queue: str) -> None:
    with run_broker(versions=("1.0",)) as broker:
        send_message(broker.url, queue, "stays")
        argv = ["subscribe", broker.url, queue, "--ack", "client-individual", "--count", "1"]
        # Asked for: a usage error before connecting.
        got = stompy(*argv, "--stomp-version", "1.0")
        assert got.returncode == 2
        assert "needs STOMP 1.1 or later: use --ack client" in one_error_line(got, "subscribe")
        # Chosen by the broker: it did not work with this one.
        got = stompy(*argv)
        assert got.returncode == 1
        line = one_error_line(got, "subscribe")
        assert "needs STOMP 1.1 or later and the broker chose 1.0: use --ack client" in line
        broker.wait_until(lambda: not broker.connections, timeout=TIMEOUT)
        assert broker.queue_depth(queue) == 1


def test_the_send_headers_stompy_refuses_are_the_cores() -> None:
    """``stompy send -H`` refuses, with a hint each, exactly the headers the core keeps
    to itself on a SEND (frames.SEND_RESERVED) and the content-length it writes: a
    header added there gets its hint."""
    from stompy._core.frames import SEND_RESERVED
    from stompy.cli._parser import _SET_BY_STOMPY

    assert set(_SET_BY_STOMPY["send"]) == SEND_RESERVED | {"content-length"}


@pytest.mark.parametrize(
    "header", ["content-length:3", "Content-Length:3", "Destination:/queue/x", "RECEIPT:r"]
)
def test_a_header_stompy_writes_is_a_usage_error_in_any_case(header: str) -> None:
    """``-H`` of a header stompy writes itself, in any case: a content-length was
    replaced without a word (or, spelled otherwise, sent beside the true one)."""
    got = stompy("send", "stomp://h", "/q", "-H", header, "abc")
    assert got.returncode == 2
    err = got.stderr.decode()
    assert f"argument -H/--header: {header.partition(':')[0]!r} is set by stompy" in err


def test_a_body_over_max_body_is_an_error_before_it_is_read_whole(
    broker: Broker, url: str, queue: str, tmp_path: Path
) -> None:
    """``stompy send`` reads at most ``--max-body`` bytes (and one more) of a body from
    stdin or a file, then says so naming the limit, nothing sent: an endless pipe is not
    read into memory. A file's size is known before a byte is read (64 MiB by default)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "send", url, queue, "--max-body", "256K"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    chunk, chunks, written = b"y\n" * 32_768, 1024, 0  # 64 MiB at most
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            for _ in range(chunks):
                proc.stdin.write(chunk)
                written += 1
            proc.stdin.close()
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 1
    assert err == (
        b"stompy send: the body is over --max-body (262,144 bytes); nothing of it was "
        b"sent: give a larger --max-body (the broker must take it too), or --lines for a "
        b"message per line\n"
    )
    assert written < chunks // 2  # the command stopped reading near the limit

    # The default: 64 MiB, checked against a file's size before it is read (a sparse one).
    path = tmp_path / "big.bin"
    with path.open("wb") as big:
        big.truncate(64 * 1024 * 1024 + 1)
    got = stompy("send", url, queue, f"@{path}")
    line = one_error_line(got, "send")
    assert "the file (67,108,865 bytes) is over --max-body (67,108,864 bytes)" in line
    got = stompy("send", url, queue, "--max-body", "4", "hello")
    assert "the body is over --max-body (4 bytes)" in one_error_line(got, "send")
    if Path("/dev/stdin").exists():  # a pipe's size (0) is no size: "the file (0 bytes)"
        got = stompy("send", url, queue, "--max-body", "4", "@/dev/stdin", input=b"hello")
        assert "the body is over --max-body (4 bytes)" in one_error_line(got, "send")
    assert stompy("send", url, queue, "--max-body", "5", "hello").returncode == 0
    assert broker.queue_depth(queue) == 1


def test_a_line_over_max_body_is_an_error_after_the_lines_before(
    broker: Broker, url: str, queue: str
) -> None:
    """With ``--lines`` the limit is per line: those before the long one are sent (and
    counted), the long one is an error naming its number, nothing after it is sent."""
    lines = b"ok\r\n" + b"x" * 1025 + b"\r\nafter\n"
    got = stompy("send", url, queue, "--lines", "--max-body", "1KiB", input=lines)
    assert got.returncode == 1
    count, error = got.stderr.decode().splitlines()
    assert count == "1 message confirmed"
    assert error.startswith("stompy send: line 2 is over --max-body (1,024 bytes)")
    exact = b"x" * 1024
    got = stompy("send", url, queue, "--lines", "--max-body", "1K", input=exact + b"\r\n")
    assert (got.returncode, got.stderr) == (0, b"1 message confirmed\n")
    got = stompy("subscribe", url, queue, "--count", "2", "--timeout", "10")
    assert got.stdout == b"ok\n" + exact + b"\n"


@pytest.mark.parametrize("value", ["0", "-1", "1.5M", "64X", "", "M"])
def test_a_bad_max_body_is_a_usage_error(value: str) -> None:
    got = stompy("send", "stomp://h", "/q", "--max-body", value, "x")
    assert got.returncode == 2
    assert "argument --max-body: want a number of bytes above 0" in got.stderr.decode()


def test_a_message_the_broker_refuses_without_a_receipt_fails_the_send(queue: str) -> None:
    """``--no-receipt``: a message the broker refuses (a full queue) is told by an ERROR
    after the send returned, while the connection closes; the command said "3 messages
    sent" and exited 0, the broker's words only in a WARNING it does not show."""
    with run_broker(max_queue=1) as small:
        got = stompy("send", small.url, queue, "--lines", "--no-receipt", input=b"1\n2\n3\n")
        assert got.returncode == 1
        count, error = got.stderr.decode().splitlines()
        assert count.endswith(" sent")
        assert error.startswith(f"stompy send: the broker refused: destination '{queue}' is full")
        got = stompy("send", small.url, queue, "--no-receipt", "one more")
        assert "the broker refused" in one_error_line(got, "send")
        assert small.queue_depth(queue) == 1


def test_a_header_value_starting_with_a_space_is_sent_as_written_with_a_warning(
    url: str, queue: str
) -> None:
    """``-H "tenant: acme"`` (curl's habit): STOMP keeps the space, and a receiver or a
    selector comparing ``tenant = 'acme'`` misses it. Sent as written, with a warning
    saying so and how to write it; none for a value without one."""
    sent = stompy("send", url, queue, "-H", "tenant: acme", "-H", "plain:value", "x")
    assert sent.returncode == 0
    assert sent.stderr == (
        b"stompy send: warning: -H tenant:' acme': the value starts with white space, "
        b"which STOMP keeps; write tenant:acme for 'acme'\n"
    )
    got = stompy("subscribe", url, queue, "--json", "--count", "1", "--timeout", "10")
    headers = json.loads(got.stdout)["headers"]
    assert (headers["tenant"], headers["plain"]) == (" acme", "value")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["send", "stomp://h", "/q", "x", "--timeout", "5"], "did you mean --connect-timeout?"),
        (["send", "stomp://h", "/q", "x", "--user", "bob"], "did you mean --login?"),
        (["subscribe", "stomp://h", "/q", "-n", "3"], "-n 3; did you mean --count?"),
        (["subscribe", "stomp://h", "/q", "--ack-mode", "client"], "did you mean --ack?"),
        (
            ["send", "stomp://h", "/q", "x", "--password=" + PASSCODE],
            "--password=********; did you mean --passcode?",
        ),
        (["send", "stomp://h", "/q", "x", "--pass", PASSCODE], "--pass ********; did you"),
        (["subscribe", "stomp://h", "/q", "--token", PASSCODE], "--token ******** (see"),
    ],
)
def test_another_tools_option_is_told_stompys_and_a_secret_is_not_shown(
    argv: list[str], said: str
) -> None:
    """curl's --user, other clients' --password, -n for a count: a usage error saying
    the option meant (no spelling alike found them), and the value of an unknown option
    that reads as a secret masked: 'unrecognized arguments: --password=s3cret' printed
    the passcode."""
    got = stompy(*argv)
    assert got.returncode == 2
    assert said in one_error_line(got, argv[0])


@pytest.mark.parametrize("lines", [False, True])
def test_a_body_typed_as_text_is_sent_in_the_charset_its_content_type_names(
    url: str, queue: str, lines: bool
) -> None:
    """``--content-type 'text/plain;charset=latin-1' café``: the body went as UTF-8
    under a label that says latin-1 (read back as "cafÃ©"), and the library now refuses
    that; the command writes the text in the charset named."""
    latin = "text/plain;charset=latin-1"
    extra = ["--lines"] if lines else []
    sent = stompy("send", url, queue, "--content-type", latin, *extra, "café")
    assert sent.returncode == 0, sent.stderr
    got = stompy("subscribe", url, queue, "--json", "--count", "1", "--timeout", "10")
    message = json.loads(got.stdout)
    assert message["headers"]["content-type"] == latin
    assert message["headers"]["content-length"] == "4"  # one byte for the é
    assert message["body"] == "café"


@pytest.mark.parametrize(
    ("content_type", "said"),
    [
        ("text/plain;charset=ascii", "the body cannot be written in ascii"),
        ("text/plain;charset=nope", "names the charset 'nope', which Python does not know"),
    ],
)
def test_a_body_the_named_charset_cannot_hold_is_a_usage_error(
    url: str, queue: str, content_type: str, said: str
) -> None:
    got = stompy("send", url, queue, "-H", f"content-type:{content_type}", "café")
    assert got.returncode == 2
    assert said in one_error_line(got, "send")

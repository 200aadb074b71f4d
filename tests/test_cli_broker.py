"""``stompy broker``: the standalone broker, driven as a user would."""

from __future__ import annotations

import argparse
import io
import os
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import anyio
import pytest
import stomp
import trustme
from anyio.from_thread import start_blocking_portal

from stompy import cli
from stompy.cli import _broker as cli_broker

URL = re.compile(r"listening on (stomp://\S+):(\d+)")


def read_line(stream: Any, timeout: float) -> str:
    """One line from a pipe, or fail after ``timeout`` seconds."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no line within {timeout} s")


@pytest.fixture
def broker_process() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompy", "broker", "--port", "0", "--users", "app:secret"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = read_line(proc.stdout, 20.0)
        match = URL.search(line)
        assert match is not None, line
        yield proc, int(match.group(2))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung broker
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_stomp_py_talks_to_the_standalone_broker(
    broker_process: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = broker_process
    received: queue.Queue[Any] = queue.Queue()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            received.put(frame)

    destination = f"/queue/cli-{uuid.uuid4().hex}"
    conn = stomp.Connection12([("127.0.0.1", port)], timeout=5)
    conn.set_listener("test", Listener())
    conn.connect("app", "secret", wait=True)
    try:
        conn.subscribe(destination=destination, id="1", ack="auto")
        conn.send(destination=destination, body="from stomp.py")
        assert received.get(timeout=5).body == "from stomp.py"
    finally:
        conn.disconnect(receipt="bye")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "connection from 127.0.0.1:" in log
    assert "CONNECTED with STOMP 1.2, login 'app'" in log
    assert "stopping on SIGTERM" in log


def args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["broker", *argv])


def test_parser_defaults_and_options() -> None:
    parsed = args()
    assert (parsed.host, parsed.port, parsed.heartbeat) == ("127.0.0.1", 61613, (1000, 1000))
    parsed = args(
        "--users", "a:1", "b:x:y", "--vhost", "v1", "--vhost", "v2", "--heartbeat", "0,50"
    )
    assert cli_broker.broker_options(parsed) == {
        "heartbeats": (0, 50),
        "prefetch": 100,
        "users": {"a": "1", "b": "x:y"},
        "virtual_hosts": ["v1", "v2"],
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["--users", "nocolon"],
        ["--heartbeat", "1000"],
        ["--heartbeat", "a,b"],
        ["--heartbeat=-1,0"],
    ],
)
def test_parser_rejects_bad_values(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["broker", *argv])
    assert info.value.code == 2
    assert "want" in capsys.readouterr().err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "broker" in capsys.readouterr().err


def test_invalid_broker_options(capsys: pytest.CaptureFixture[str]) -> None:
    for option in ("--prefetch", "--max-queue"):
        with pytest.raises(SystemExit) as info:
            cli.main(["broker", option, "0"])
        assert info.value.code == 2
        assert f"argument {option}: want a whole number above 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["broker", "--max-queue", "2.5"], "argument --max-queue: want a whole number, got '2.5'"),
        (["broker", "--prefetch", "1e3"], "argument --prefetch: want a whole number, got '1e3'"),
        (
            ["proxy", "--target", "stomp://h", "--throttle", "1.5"],
            "argument --throttle: want a whole number, got '1.5'",
        ),
        (["subscribe", "stomp://h", "/q", "--count", "2.0"], "--count: want a whole number"),
        (["broker", "--frame-timeout", "soon"], "argument --frame-timeout: want a number, got"),
    ],
)
def test_a_count_that_is_not_whole_is_told_so(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "want a number, got '1.5'", which is one."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--dead-letter-queue", "/queue/dead"],
            "--dead-letter-queue needs --max-redeliveries (the limit)",
        ),
        (
            ["--max-redeliveries", "3", "--dead-letter-queue", "/temp-queue/dead"],
            "--dead-letter-queue: must be a destination for it, got '/temp-queue/dead'",
        ),
    ],
)
def test_a_broker_option_is_named_as_typed(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker's own errors name its keywords (dead_letter_queue): the command's
    user typed options, and is told of those."""
    assert cli.main(["broker", *argv]) == 2
    assert capsys.readouterr().err == f"stompy broker: {said}\n"


def test_the_broker_configuration_shows_no_passcode() -> None:
    from stompy.testing import BrokerConfig

    config = BrokerConfig(**cli_broker.broker_options(args("--users", "app:Zq-secret")))
    assert config.users == {"app": "Zq-secret"}
    assert "Zq-secret" not in repr(config)


def test_queue_limits_on_the_command_line() -> None:
    parsed = args("--max-queue", "5", "--max-stored-bytes", "4096")
    options = cli_broker.broker_options(parsed)
    assert (options["max_queue"], options["max_stored_bytes"]) == (5, 4096)
    assert "max_queue" not in cli_broker.broker_options(args())


def test_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["broker", "--port", str(port), "--quiet"]) == 1
    assert f"cannot listen on 127.0.0.1:{port}: " in capsys.readouterr().err


def test_the_websocket_port_in_use_is_the_one_named(capsys: pytest.CaptureFixture[str]) -> None:
    # The line named --port's address (0 here) for --websocket's port in use.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["broker", "--port", "0", "--websocket", str(port), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"stompy broker: cannot listen on 127.0.0.1:{port}: "), err
    assert err.count("cannot listen") == 1


def test_a_host_that_does_not_resolve_is_named_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["broker", "--host", "no.such.host.invalid", "--port", "0", "-q"]) == 1
    err = capsys.readouterr().err
    said = "stompy broker: cannot listen on no.such.host.invalid:0: the host does not resolve ("
    assert err.startswith(said), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", [["broker"], ["proxy", "--target", "stomp://127.0.0.1:1"]])
def test_an_empty_host_is_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The resolver's "Name or service not known", of an empty name, and exit status 1.
    with pytest.raises(SystemExit) as info:
        cli.main([*command, "--host", ""])
    assert info.value.code == 2
    assert "argument --host: want an address to listen on" in capsys.readouterr().err


def test_console_script_is_declared() -> None:
    scripts = entry_points(group="console_scripts", name="stompy")
    if not scripts:
        pytest.skip("the package is not installed")
    assert [s.value for s in scripts] == ["stompy.cli:main"]


@pytest.mark.anyio
async def test_run_broker_command_in_the_main_thread() -> None:
    out = io.StringIO()
    async with anyio.create_task_group() as tg:
        tg.start_soon(cli.run_broker_command, args("--port", "0"), out)
        with anyio.fail_after(5):
            while URL.search(out.getvalue()) is None:
                await anyio.sleep(0.01)
        match = URL.search(out.getvalue())
        assert match is not None
        stream = await anyio.connect_tcp("127.0.0.1", int(match.group(2)))
        async with stream:
            await stream.send(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
            with anyio.fail_after(5):
                assert (await stream.receive()).startswith(b"CONNECTED\n")
        tg.cancel_scope.cancel()


def test_run_broker_command_in_another_thread() -> None:
    out = io.StringIO()
    with start_blocking_portal() as portal:
        future = portal.start_task_soon(cli.run_broker_command, args("--port", "0"), out)
        deadline = 50
        while URL.search(out.getvalue()) is None and deadline:
            threading.Event().wait(0.05)
            deadline -= 1
        assert URL.search(out.getvalue()) is not None
        future.cancel()


WS_URL = re.compile(r"listening on (ws://\S+)")


def test_websocket_listener_shares_the_queues() -> None:
    import stompy

    out = io.StringIO()
    with start_blocking_portal() as portal:
        future = portal.start_task_soon(
            cli.run_broker_command, args("--port", "0", "--websocket", "0"), out
        )
        try:
            for _ in range(100):  # up to 5 s
                if WS_URL.search(out.getvalue()) is not None:
                    break
                threading.Event().wait(0.05)
            plain, ws = URL.search(out.getvalue()), WS_URL.search(out.getvalue())
            assert plain is not None, out.getvalue()
            assert ws is not None, out.getvalue()
            # Sent over plain STOMP, taken over WebSocket: one broker, two listeners.
            stompy.send(f"{plain.group(1)}:{plain.group(2)}", "/queue/cli-ws", "over the bridge")
            with stompy.Connection(ws.group(1)) as conn:
                sub = conn.subscribe("/queue/cli-ws")
                message = sub.get(timeout=5)
                assert message is not None
                assert message.text == "over the bridge"
        finally:
            future.cancel()


def test_without_websocket_there_is_one_listener() -> None:
    assert args().websocket is None
    assert args("--websocket", "15674").websocket == 15674


def test_tls_with_a_certificate_and_a_key(tmp_path: Path) -> None:
    import stompy

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    for blob in issued.cert_chain_pems:
        blob.write_to_path(str(cert), append=True)
    issued.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    out = io.StringIO()
    argv = ("--port", "0", "--websocket", "0", "--tls-cert", str(cert), "--tls-key", str(key))
    with start_blocking_portal() as portal:
        future = portal.start_task_soon(cli.run_broker_command, args(*argv), out)
        try:
            for _ in range(100):  # up to 5 s
                if "wss://" in out.getvalue():
                    break
                threading.Event().wait(0.05)
            urls = re.findall(r"listening on (\S+)", out.getvalue())
            assert [u.split("://")[0] for u in urls] == ["stomp+ssl", "wss"], out.getvalue()
            stompy.send(urls[0], "/queue/cli-tls", "over TLS", ssl=client)
            with stompy.Connection(urls[1], ssl=client) as conn:
                message = conn.subscribe("/queue/cli-tls").get(timeout=5)
                assert message is not None
                assert message.text == "over TLS"
        finally:
            future.cancel()


def test_tls_key_in_the_certificate_file(tmp_path: Path) -> None:
    both = tmp_path / "both.pem"
    trustme.CA().issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(both))
    assert cli_broker.broker_tls(args("--tls-cert", str(both))) is not None
    assert cli_broker.broker_tls(args()) is None


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--tls-cert", "/no/such/cert.pem"], "cannot load the TLS certificate /no/such/cert.pem"),
        (["--tls-key", "key.pem"], "--tls-key needs --tls-cert"),
        (["--dead-letter-queue", "/queue/dlq"], "--dead-letter-queue needs --max-redeliveries"),
    ],
)
def test_bad_tls_and_redelivery_options(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["broker", *argv]) == 2
    assert said in capsys.readouterr().err


def test_redelivery_options_reach_the_broker() -> None:
    options = cli_broker.broker_options(
        args("--max-redeliveries", "3", "--dead-letter-queue", "/q/d")
    )
    assert (options["max_redeliveries"], options["dead_letter_queue"]) == (3, "/q/d")


@pytest.mark.parametrize(
    "argv",
    [
        ["subscribe", "stomp://h", "/q", "--timeout", "2e6"],
        ["send", "stomp://h", "/q", "x", "--connect-timeout", "2e6"],
        ["broker", "--frame-timeout", "2e6"],
    ],
)
def test_a_number_of_seconds_is_bounded_as_the_library_bounds_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The command took up to 1e9 seconds, the library up to 1,000,000: a --timeout
    between was refused only once connected, in the library's words ("timeout: must
    be ... got 2000000.0", exit status 1)."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "want a number of seconds up to 1,000,000, got '2e6'" in capsys.readouterr().err

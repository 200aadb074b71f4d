"""The ``stomp_broker`` pytest fixture, as a user's project gets it from the install."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import stompy.testing

USER_CONFTEST = """
import pytest

@pytest.fixture
def stomp_broker_options():
    return {"users": {"app": "secret"}}
"""

USER_TEST = """
import socket


def exchange(sock, data):
    sock.sendall(data)
    received = b""
    while received.count(b"\\x00") < 1:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        received += chunk
    return received


def test_round_trip(stomp_broker):
    assert stomp_broker.url == f"stomp://127.0.0.1:{stomp_broker.port}"
    with socket.create_connection((stomp_broker.host, stomp_broker.port), timeout=5) as sock:
        connect = b"CONNECT\\naccept-version:1.2\\nhost:h\\nlogin:app\\npasscode:secret\\n\\n\\x00"
        assert exchange(sock, connect).startswith(b"CONNECTED\\n")
        exchange(sock, b"SEND\\ndestination:/queue/app\\nreceipt:1\\n\\nhi\\x00")
        assert stomp_broker.queue_depth("/queue/app") == 1


def test_options_reach_the_broker(stomp_broker):
    with socket.create_connection((stomp_broker.host, stomp_broker.port), timeout=5) as sock:
        refused = exchange(sock, b"CONNECT\\naccept-version:1.2\\nhost:h\\n\\n\\x00")
        assert refused.startswith(b"ERROR\\n")
        assert b"authentication failed" in refused
"""


def run_project(
    tmp_path: Path, ini: str, conftest: str, test: str
) -> subprocess.CompletedProcess[str]:
    if not entry_points(group="pytest11", name="stompy"):
        pytest.skip("the package is not installed (pip install -e .)")
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "conftest.py").write_text(textwrap.dedent(conftest))
    (tmp_path / "test_app.py").write_text(textwrap.dedent(test))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_plugin_is_registered() -> None:
    plugins = entry_points(group="pytest11", name="stompy")
    if not plugins:
        pytest.skip("the package is not installed (pip install -e .)")
    assert [p.value for p in plugins] == ["stompy.testing.pytest_plugin"]


def test_fixture_works_in_a_throwaway_project(tmp_path: Path) -> None:
    result = run_project(tmp_path, "[pytest]\nfilterwarnings = error\n", USER_CONFTEST, USER_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


SHARED_CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def stomp_broker_options():
    return {"websocket": True, "heartbeats": (0, 0)}
"""

SHARED_TEST = """
import socket

import stompy

SEEN = {}


def frames(sock, count):
    data = b""
    while data.count(b"\\x00") < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_first_leaves_things_behind(stomp_broker):
    SEEN["port"] = stomp_broker.port
    stompy.send(stomp_broker.url, "/queue/left", "for nobody")
    stompy.send(stomp_broker.url, "/queue/held", "unacked")
    sock = socket.create_connection((stomp_broker.host, stomp_broker.port), timeout=5)
    sock.sendall(b"CONNECT\\naccept-version:1.2\\nhost:h\\n\\n\\x00")
    sock.sendall(b"SUBSCRIBE\\ndestination:/queue/held\\nid:1\\nack:client\\n\\n\\x00")
    assert b"unacked" in frames(sock, 2)
    SEEN["sock"] = sock  # still open, the message unacked, when this test ends


def test_second_starts_clean_on_the_same_broker(stomp_broker):
    assert stomp_broker.port == SEEN["port"]
    with SEEN.pop("sock") as sock:
        sock.settimeout(5)
        assert sock.recv(65536) == b""  # the reset cut it
    assert stomp_broker.connections == ()
    assert stomp_broker.destinations() == ()
    assert stomp_broker.queue_depth("/queue/held") == 0  # not requeued either
    assert stomp_broker.stats.messages_received == 0


def test_the_fixture_serves_websocket_too(stomp_broker):
    assert stomp_broker.ws_url is not None
    stompy.send(stomp_broker.ws_url, "/queue/ws", "over WebSocket")
    assert stomp_broker.queue_depth("/queue/ws") == 1
"""


def test_one_broker_for_the_session_is_reset_between_tests(tmp_path: Path) -> None:
    ini = "[pytest]\nfilterwarnings = error\nstomp_broker_scope = session\n"
    result = run_project(tmp_path, ini, SHARED_CONFTEST, SHARED_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_a_bad_scope_is_a_usage_error(tmp_path: Path) -> None:
    ini = "[pytest]\nstomp_broker_scope = forever\n"
    result = run_project(tmp_path, ini, "", "def test_x(stomp_broker):\n    pass\n")
    assert result.returncode != 0
    assert "stomp_broker_scope = 'forever' is not a fixture scope: use one of session" in (
        result.stdout + result.stderr
    )


def test_a_misspelled_scope_is_one_line_naming_option_value_and_scopes(tmp_path: Path) -> None:
    ini = "[pytest]\nstomp_broker_scope = sesion\n"
    result = run_project(tmp_path, ini, "", "def test_x(stomp_broker):\n    pass\n")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "INTERNALERROR" not in result.stdout + result.stderr
    assert result.stdout == ""
    assert [line for line in result.stderr.splitlines() if line] == [
        "ERROR: stomp_broker_scope = 'sesion' is not a fixture scope (did you mean "
        "'session'?): use one of session, package, module, class, function"
    ]


def test_plugin_import_leaves_the_broker_unloaded() -> None:
    code = (
        "import sys, stompy.testing.pytest_plugin; "
        "print(any(m.startswith('stompy.testing._') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_public_names_resolve() -> None:
    for name in stompy.testing.__all__:
        assert getattr(stompy.testing, name) is not None
    assert set(stompy.testing.__all__) <= set(dir(stompy.testing))
    with pytest.raises(AttributeError):
        stompy.testing.no_such_name  # noqa: B018
    # Imported by pytest before coverage starts: import again to measure it.
    importlib.reload(stompy.testing)
    plugin = importlib.reload(importlib.import_module("stompy.testing.pytest_plugin"))
    assert plugin.__all__ == (
        "stomp_broker",
        "stomp_broker_options",
        "stomp_fault_proxy",
        "stomp_fault_proxy_options",
    )


def test_fixture_in_this_run(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("stompy"):
        pytest.skip("the package is not installed (pip install -e .)")
    broker = request.getfixturevalue("stomp_broker")
    assert broker.url.startswith("stomp://127.0.0.1:")
    assert broker.connections == ()

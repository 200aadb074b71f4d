"""Developer tasks. ``nox`` with no argument runs everything CI runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "venv"
# interop and soak install and start RabbitMQ and ActiveMQ (root and apt needed the first
# time), and CoilMQ (pip); soak takes about 2 minutes. docs builds the site (strict: a
# broken link or reference fails it) in under a minute, so a broken page does not land.
nox.options.sessions = [
    "lint",
    "typecheck",
    "docs",
    "tests",
    "wheel",
    "spark40",
    "spark_cluster",
    "interop",
    "soak",
]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(*group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the tests."""
    session.install("-e", ".", *group("typecheck"))
    session.run("mypy", "--strict", "stompy", "tests")


#: Two pytest-xdist workers: most tests wait (on sockets, timers, Spark) rather than
#: compute, so two keep CI's two cores busy; the Spark tests stay together in one (see
#: tests/spark/conftest.py). Coverage follows the workers (``patch = subprocess``).
#: The Spark cluster's tests run in ``spark_cluster`` only.
TESTS_ARGS = (
    "--ignore=tests/interop",
    "--ignore=tests/spark_cluster",
    *("-n", "2", "--dist", "loadgroup"),
)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite with coverage; fails under 90% line coverage of stompy/.

    ``coverage run`` starts measuring before pytest loads stompy's own pytest plugin
    (which imports the package), so module-level lines count too.
    """
    session.install("-e", ".", *group("test"), *group("spark"))
    env = {"HYPOTHESIS_PROFILE": "ci"}
    session.run("coverage", "erase")
    session.run("coverage", "run", "-m", "pytest", *TESTS_ARGS, *session.posargs, env=env)
    session.run("coverage", "combine", success_codes=[0, 1])
    session.run("coverage", "report", "--fail-under=90")


#: The tests ``wheel`` runs against the installed wheel, core compiled and accelerator
#: built: the core's own, both clients', and the checks of stompy.COMPILED and of
#: the accelerator against the pure code.
WHEEL_TESTS = (
    "tests/test_codec.py",
    "tests/test_codec_accelerator.py",
    "tests/test_codec_lazy.py",
    "tests/test_codec_properties.py",
    "tests/test_frames.py",
    "tests/test_garbage.py",
    "tests/test_header_columns.py",
    "tests/test_heartbeat.py",
    "tests/test_lenient.py",
    "tests/test_protocol.py",
    "tests/test_protocol_properties.py",
    "tests/test_sync_client.py",
    "tests/test_async_client.py",
    "tests/test_compiled.py",
    # The compiled classes say they are public too; the layers read from the wheel's sources.
    "tests/test_public_names.py",
    # A frame and the core's events pickle, compiled too; a message says why it does not.
    "tests/test_pickling.py",
    "tests/test_layers.py",
    # The front door walked with the core compiled: refusals the same as in pure Python.
    "tests/test_keywords.py",
    "tests/test_front_door_api.py",
    # Wrong types and values given to the front door: refused with the argument named,
    # not by mypyc's own argument checks (a second each).
    "tests/test_front_door_types.py",
    "tests/test_front_door_values.py",
    # An error raised again after a failure, chained to it (mypyc's raise drops "from").
    "tests/test_front_door_session.py",
    "tests/test_type_checks.py",
    "tests/test_front_door_misuse.py",
    "tests/test_last_words.py",
    # The test broker's core is compiled too: its tests, the conformance suite (whose
    # reference it is), and the test that it behaves as its Python source does.
    "tests/test_broker_core.py",
    "tests/test_broker_redelivery.py",
    "tests/test_broker_temp_queues.py",
    "tests/test_broker_compiled.py",
    "tests/conformance",
    # The engine's modules on a round trip's path are compiled too: the calls that wait,
    # the engine and its requests, delivery and flow control, and the traced call (a
    # subclass that is not compiled).
    "tests/test_calls.py",
    "tests/test_session.py",
    "tests/test_request.py",
    "tests/test_request_clients.py",
    "tests/test_request_straight.py",
    "tests/test_send_fast_path.py",
    "tests/test_flow_control.py",
    "tests/test_tracing.py",
    # The blocking transport is compiled too: threads sharing a connection, the read-through.
    "tests/test_threads.py",
    "tests/test_read_through.py",
)


def fresh_dir(session: nox.Session, name: str) -> Path:
    path = Path(session.create_tmp()) / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def build_wheel(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> Path:
    """``python -m build`` with ``args`` into a fresh directory; return the one wheel.

    The build hook (hatch_build.py) compiles the core in a copy of the package: the
    source tree gets no .so file."""
    dist = fresh_dir(session, "dist")
    session.run("python", "-m", "build", "--outdir", str(dist), *args, ".", env=env)
    (wheel,) = dist.glob("*.whl")
    return wheel


def check_tag(session: nox.Session, wheel: Path, compiled: bool) -> None:
    pure = wheel.name.endswith("-py3-none-any.whl")
    if pure == compiled:
        want = "a compiled" if compiled else "a pure-Python"
        session.error(f"{wheel.name}: expected {want} wheel (the build's log says why)")
    session.log(f"{wheel.name}: {'compiled' if compiled else 'pure Python'}, as expected")


def install_wheel(session: nox.Session, wheel: Path, *copies: str) -> None:
    """Install ``wheel`` (not editable), copy ``copies`` (and pyproject.toml, for pytest's
    settings) into a fresh directory and go there: no ``./stompy`` shadows the
    installed package. Check that its core is the compiled one."""
    # A reused venv (nox -r) may hold the same version, maybe pure: pip would keep it.
    session.run("python", "-m", "pip", "uninstall", "--yes", "--quiet", "stompy-client")
    session.install(str(wheel))
    work = fresh_dir(session, "run")
    for name in copies:
        shutil.copytree(name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy("pyproject.toml", work)
    session.chdir(work)
    check = "import stompy, sys; print(stompy.__file__); sys.exit(not stompy.COMPILED)"
    session.run("python", "-c", check)


@nox.session
def wheel(session: nox.Session) -> None:
    """The wheels a user gets, built like a release: an sdist, then from it a wheel for
    this machine with the core compiled; the core's, the clients' and the test broker's
    tests against that wheel, installed. Also checks that a build without a C compiler, and one with
    STOMPY_NO_EXTENSIONS=1, give a pure-Python wheel (py3-none-any).

    Extra arguments go to pytest, e.g. ``nox -s wheel -- -x -k heartbeat``."""
    session.install("build", *group("test"))
    check_tag(session, build_wheel(session, "--wheel", env={"STOMPY_NO_EXTENSIONS": "1"}), False)
    check_tag(session, build_wheel(session, "--wheel", env={"CC": "false"}), False)
    compiled = build_wheel(session)  # sdist first, the wheel from it: the sdist is whole
    check_tag(session, compiled, True)
    install_wheel(session, compiled, "tests")
    env = {"HYPOTHESIS_PROFILE": "wheel", "STOMPY_COMPILED": "1"}
    session.run("pytest", "-q", "-n", "2", *WHEEL_TESTS, *session.posargs, env=env)


@nox.session
def bench_compiled(session: nox.Session) -> None:
    """The benchmarks (default: codec and clients) against the wheel, core compiled."""
    session.install("build", *group("bench"))
    compiled = build_wheel(session, "--wheel")
    check_tag(session, compiled, True)
    install_wheel(session, compiled, "benchmarks")
    args = session.posargs or ["codec", "clients"]
    session.run("python", "-m", "benchmarks", *args)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against stomp.py and stompman: prints the tables and PASS/MISS per target.

    Writes the JSON results and the chart to benchmarks/results/. RabbitMQ and ActiveMQ
    are used when they answer (``bash ci/brokers/start.sh all``), skipped otherwise.
    Extra arguments go to the suite, e.g. ``nox -s bench -- clients --rounds 5``.
    """
    session.install("-e", ".", *group("bench"))
    session.run("python", "-m", "benchmarks", *session.posargs)


#: The real brokers of ``interop``: name, STOMP URL, the CONNECT host header, the
#: STOMP-over-WebSocket URL ("": none; the -ws conformance flavours are skipped), and
#: whether the long runs go too (10,000 messages, a restart mid-stream), and how many
#: pytest-xdist workers share its run (RabbitMQ's is the longest, mostly waits: idle
#: heart-beats, redelivery delays; every test has destinations of its own).
#: RabbitMQ takes ``host`` as its virtual host ("/" by default); ActiveMQ ignores it;
#: CoilMQ takes only its machine's name with STOMP 1.2 ("{fqdn}", filled in), and
#: keeps its messages in memory (a restart loses them): no long runs.
INTEROP_BROKERS = (
    (
        "rabbitmq",
        "stomp://guest:guest@127.0.0.1:61613/%2F",
        "/",
        "ws://guest:guest@127.0.0.1:15674/ws",
        True,
        2,
    ),
    ("activemq", "stomp://guest:guest@127.0.0.1:61614/", "/", "", True, 1),
    ("coilmq", "stomp://guest:guest@127.0.0.1:61615/{fqdn}", "{fqdn}", "", False, 1),
)


#: The interop tests that stream 10,000 messages and restart the broker.
RELIABILITY = "tests/interop/test_reliability.py"


def side_by_side(
    session: nox.Session, runs: list[tuple[str, list[list[str]], dict[str, str]]]
) -> None:
    """Run each ``(name, commands, extra env)`` in a thread of its own, all at once: a
    run's commands one after another (each runs even if one before failed); print each
    run's output whole when it ends; fail naming every run that failed.

    For runs that share nothing and spend their time waiting on a broker: together they
    take about as long as the longest one.
    """
    import os
    import subprocess
    import tempfile
    import threading

    bin_dir = session.bin
    base = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(Path(bin_dir).parent),
    }
    codes: dict[str, int] = {}
    outputs: dict[str, str] = {}

    def run(name: str, commands: list[list[str]], env: dict[str, str]) -> None:
        code = 0
        with tempfile.TemporaryFile(mode="w+") as out:
            for argv in commands:
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                try:
                    done = subprocess.run(
                        argv,
                        env={**base, **env},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        timeout=RUN_TIMEOUT,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    out.write(f"stopped after {RUN_TIMEOUT} s\n")
                    code = code or 1
                else:
                    code = code or done.returncode
            out.seek(0)
            outputs[name] = out.read()
        codes[name] = code

    threads = []
    for name, commands, env in runs:
        session.log(f"{name}: {' && '.join(' '.join(argv) for argv in commands)}")
        thread = threading.Thread(target=run, args=(name, commands, env), daemon=True)
        thread.start()
        threads.append((name, thread))
    failed = []
    for name, thread in threads:
        thread.join()
        code = codes.get(name, 1)
        print(f"===== {name}: exit {code} =====", flush=True)
        print(outputs.get(name, ""), flush=True)
        if code != 0:
            failed.append(name)  # still report the others
    if failed:
        session.error(f"failed: {', '.join(failed)}")


#: How long one command of ``side_by_side`` may take before it is stopped (the longest,
#: interop against RabbitMQ, takes 2-3 min).
RUN_TIMEOUT = 20 * 60


@nox.session
def interop(session: nox.Session) -> None:
    """RabbitMQ and ActiveMQ from Debian's packages, CoilMQ from PyPI: install, start,
    test each (side by side, one pytest each: they share nothing, and a restart test
    restarts only its own broker), stop.

    CoilMQ's known failures are marked as its quirks (docs/brokers.md); it skips the
    long runs. Needs root (or password-less sudo) and apt the first time; see
    docs/brokers.md. Extra arguments go to pytest, e.g. ``nox -s interop -- -k nack``.
    """
    import socket

    # pyarrow: tests/interop/test_spark_core.py runs the Spark connector's reading logic.
    session.install("-e", ".", *group("test"), "pyarrow>=14")
    session.run("bash", "ci/brokers/install.sh", external=True)
    paths = [p for p in ("tests/interop", "tests/conformance") if Path(p).is_dir()]
    fqdn = socket.getfqdn()
    runs = []
    for name, url_of, vhost_of, ws_url, long_runs, workers in INTEROP_BROKERS:
        env = {
            "STOMPY_BROKER_NAME": name,
            "STOMPY_BROKER_URL": url_of.format(fqdn=fqdn),
            "STOMPY_BROKER_WS_URL": ws_url,
            "STOMPY_BROKER_LOGIN": "guest",
            "STOMPY_BROKER_PASSCODE": "guest",
            "STOMPY_BROKER_VHOST": vhost_of.format(fqdn=fqdn),
            "HYPOTHESIS_PROFILE": "ci",
            # The 10,000-message runs, with a broker restart mid-stream.
            "STOMPY_INTEROP_RELIABILITY": "1" if long_runs else "0",
            "STOMPY_BROKER_RESTART": "1" if long_runs else "0",
        }
        # Without pytest's cache the runs share no file.
        pytest = [f"{session.bin}/pytest", "-p", "no:cacheprovider"]
        spread = ["-n", str(workers)] if workers > 1 else []
        # The long runs (a broker restarted mid-stream among them) go alone, after the
        # others, and print what they measured.
        commands = [
            [*pytest, *spread, f"--ignore={RELIABILITY}", *paths, *session.posargs],
            [*pytest, RELIABILITY, *session.posargs],
        ]
        runs.append((f"interop against {name}", commands, env))
    try:
        session.run("bash", "ci/brokers/start.sh", "all", external=True)
        side_by_side(session, runs)
    finally:
        session.run("bash", "ci/brokers/stop.sh", external=True)


#: Seconds of faults per flavour x broker in ``soak``: three flavours after one another
#: against each broker, the brokers side by side.
SOAK_DURATION = "10"
SOAK_BROKERS = ("stompy", "rabbitmq", "activemq")


@nox.session
def soak(session: nox.Session) -> None:
    """The soak run (tests/soak): blocking, asyncio and trio clients through a fault proxy
    to RabbitMQ, ActiveMQ and the in-process broker; fails on a lost message, a call
    past its bound or a leak. Under its table it says why each duplicate came and how
    many sends ran out ``Reconnect.send_timeout`` (docs/reconnect.md).

    Starts the brokers like ``interop``; one soak process per broker, side by side
    (each counts its own threads, descriptors and memory). Extra arguments go to each
    soak, e.g. ``nox -s soak -- --duration 60`` or ``-- --seed 123``.
    """
    session.install("-e", ".", *group("test"))
    session.run("bash", "ci/brokers/install.sh", external=True)
    # A fixed seed by default, so that a failure in CI can be replayed; --seed in the
    # extra arguments (the last one wins) picks another.
    args = ("--duration", SOAK_DURATION, "--seed", "7", *session.posargs)
    python = f"{session.bin}/python"
    runs = [
        (f"soak against {name}", [[python, "-m", "tests.soak", "--brokers", name, *args]], {})
        for name in SOAK_BROKERS
    ]
    try:
        session.run("bash", "ci/brokers/start.sh", "all", external=True)
        side_by_side(session, runs)
    finally:
        session.run("bash", "ci/brokers/stop.sh", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ with ``mkdocs build --strict``.

    Any warning fails the build (a page missing from the navigation, a broken link or
    anchor, an API reference that does not resolve). CI runs it. The snippets in the
    pages are run by the tests (tests/test_docs.py), not here. ``nox -s docs -- serve``
    previews instead.
    """
    session.install(*group("docs"))
    env = {"NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its own future, not ours
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env=env)
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env=env)


#: The oldest PySpark the connector supports: no Arrow writer for streams, no read
#: limits, no AvailableNow mixin. The Spark tests run against it too.
OLDEST_PYSPARK = "pyspark==4.0.5"


@nox.session
def spark40(session: nox.Session) -> None:
    """The Spark connector's tests on the oldest PySpark it supports (4.0: rows, not Arrow,
    into stream writers; triggers it cannot tell apart, skipped with the reason)."""
    session.install("-e", ".", *group("test"), OLDEST_PYSPARK, "pyarrow>=14")
    env = {"HYPOTHESIS_PROFILE": "ci"}
    tests = [
        "tests/spark/test_source.py",
        "tests/spark/test_spark_batch.py",
        "tests/spark/test_spark_stream.py",
        "tests/spark/test_spark_triggers.py",
    ]
    session.run("pytest", *tests, "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session
def spark(session: nox.Session) -> None:
    """The Spark connector's tests alone (tests/spark): PySpark, pyarrow, and Java 17+.

    The ``tests`` session runs them too; their Spark parts skip, saying why, without Java.
    """
    session.install("-e", ".", *group("test"), *group("spark"))
    env = {"HYPOTHESIS_PROFILE": "ci"}
    session.run("pytest", "tests/spark", "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session
def spark_cluster(session: nox.Session) -> None:
    """The Spark connector on a standalone cluster (tests/spark_cluster): a master and two
    workers of one core each, started with the pyspark package's own ``bin/spark-class``
    and bound to 127.0.0.1; batch write and read, a stream that loses a worker
    mid-query, a driver killed and restarted from its checkpoint, against ``stompy
    broker`` in a process of its own. Every JVM it starts is killed when it ends.

    The executors run this venv's interpreter, where stompy is installed editable
    (and ``spark.executorEnv.PYTHONPATH`` puts this checkout first).
    """
    session.install("-e", ".", *group("test"), *group("spark"))
    env = {"STOMPY_SPARK_CLUSTER": "1"}
    args = ("tests/spark_cluster", "-p", "no:cacheprovider", "--durations=0")
    session.run("pytest", *args, *session.posargs, env=env)

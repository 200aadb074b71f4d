"""Instructions per message, counted by valgrind's callgrind: figures the load cannot move.

``python -m benchmarks.instructions`` runs each path twice under ``valgrind
--tool=callgrind`` in a child Python, both times building the input of ``--count``
messages, once doing the work on them and once not (for a client: only connecting and
disconnecting), and prints the difference divided by the count: the instructions one
message costs, set-up and interpreter start-up left out. Paths:

* ``parse``: ``FrameParser("1.2").parse`` on the codec benchmark's 64 KiB chunks;
* ``encode``: ``encode(frame, "1.2")`` of the codec benchmark's MESSAGE frames;
* ``consume``: the blocking client taking messages (auto ack) from the blast server;
* ``publish``: the blocking client sending to the sink server, a receipt on the last;
* ``asyncio-consume``, ``asyncio-publish``, ``trio-consume``, ``trio-publish``: the
  same with ``AsyncConnection`` on that anyio backend (run when named);

and, asked for by name, ``broker-send``: the test broker (``MessageStore``, no sockets)
taking SENDs as the Spark connector writes them (100-byte bodies, ``persistent`` and
``stompy-dedup-id`` headers), in 64 KiB chunks, one receipt at the end;

and the same for stomp.py (``stomp.py-parse`` and so on; see :mod:`benchmarks.codec`
and :mod:`benchmarks.clients`, whose code each path runs). The client paths count every
thread of the client (its I/O thread too); the server runs in a process of its own,
which callgrind does not follow. A publisher's input (the bodies and header dicts the
benchmark builds before its timer starts) is built in both runs, so it is left out too.

``--flavour`` picks the stompy measured: one, several comma-separated, or ``all``:

* ``pure``: the checkout's ``.py`` files (the default);
* ``accelerated``: the same with the Cython accelerator (``stompy._core.cscan``) beside them;
* ``compiled``: the core compiled with mypyc, the accelerator off
  (``STOMPY_NO_EXTENSIONS=1`` at run time);
* ``wheel``: what ``pip install .`` installs: the core compiled and the accelerator.

All but ``pure`` build a wheel of the checkout first as a user's ``pip install .``
would (``pip wheel --no-deps``: the build hook runs mypyc and Cython in pip's isolated
build environment) and install it into a temporary directory (``pip install --no-deps
--target``); ``accelerated`` puts that wheel's ``cscan`` beside a copy of the
checkout's ``.py`` files. ``both`` is ``pure,compiled``. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

_ROOT: Final = Path(__file__).resolve().parent.parent
PATHS: Final = ("parse", "encode", "consume", "publish")
ASYNC_PATHS: Final = tuple(f"{b}-{p}" for b in ("asyncio", "trio") for p in ("consume", "publish"))
STOMPPY_PATHS: Final = tuple(f"stomp.py-{p}" for p in PATHS)
#: Paths run only when named.
OTHER_PATHS: Final = ("broker-send",)


def _broker_send(count: int) -> Callable[[], object]:
    """The broker's SEND ingest: a connected session and the chunks to feed it."""
    from benchmarks import codec, workload
    from stompy._core.encoder import encode_frame
    from stompy.testing import BrokerConfig
    from stompy.testing._core.store import MessageStore

    body = b"x" * 100
    sends = []
    for i in range(count):
        headers = [
            ("destination", "/queue/bench"),
            ("content-type", "text/plain"),
            ("persistent", "true"),
            ("stompy-dedup-id", f"q.0.1.{i}"),  # as the connector makes it
        ]
        if i == count - 1:
            headers.append(("receipt", "done"))
        sends.append(encode_frame("SEND", headers, body, "1.2"))
    chunks = workload.chunks(b"".join(sends), codec.CHUNK) if count else []
    store = MessageStore(BrokerConfig(max_queue=count + 1))
    session = store.open_connection(0.0)
    session.receive_data(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00", 0.0)
    session.data_to_send(0.0)

    def ingest() -> bytes:
        for chunk in chunks:
            session.receive_data(chunk, 0.0)
        return session.data_to_send(0.0)

    return ingest


FLAVOURS: Final = ("pure", "accelerated", "compiled", "wheel")


def _setup(path: str, count: int) -> Callable[[], object]:
    """Build the input of ``path`` (outside what is compared) and return the work."""
    from benchmarks import codec, workload

    if path == "broker-send":
        return _broker_send(count)

    if path in ("parse", "stomp.py-parse"):
        chunks = workload.chunks(workload.message_stream(count), codec.CHUNK) if count else []
        if path == "parse":
            return lambda: codec._stompy_parse(chunks)
        parse = codec._stomppy_parser()
        return lambda: parse(chunks)
    if path in ("encode", "stomp.py-encode"):
        messages = [(workload.message_headers(i), workload.body(i)) for i in range(count)]
        if path == "encode":
            from stompy import Frame, encode

            frames = [Frame("MESSAGE", h, b) for h, b in messages]
            return lambda: [encode(f, "1.2") for f in frames]
        from stomp import protocol, utils

        maps = [dict(h) for h, _ in messages]

        def stomppy_encode() -> list[bytes]:
            out = []
            for headers, (_, body) in zip(maps, messages, strict=True):
                protocol.Protocol12._escape_headers(None, headers)
                out.append(utils.pack(utils.convert_frame(utils.Frame("MESSAGE", headers, body))))
            return out

        return stomppy_encode
    raise ValueError(f"unknown path {path!r}")


def _client(path: str, count: int, work: bool) -> None:
    """Run a client path against its bare server; without ``work``, only connect (and
    build a publisher's input, which the work builds before its timer)."""
    from benchmarks import clients, workload
    from benchmarks.rawstomp import Server
    from benchmarks.servers import ServerProcess

    consume = path.endswith("consume")
    kind = "blast" if consume else "sink"
    stomppy = path.startswith("stomp.py")
    backend = path.partition("-")[0] if path in ASYNC_PATHS else None
    with ServerProcess(kind, count=count) as server:
        job = clients.Job(Server(kind, *server.address), count, 600.0)
        if not work:
            if not consume:
                # What the publish benchmarks build outside their timer.
                inputs = ([workload.body(i) for i in range(count)], job.send_headers())
                del inputs
            if stomppy:
                conn, listener = clients._stomppy_connection(job, job.deadline())
                clients._stomppy_close(conn, listener)
            elif backend is not None:
                import anyio

                async def connect_only() -> None:
                    async with clients._stompy_async_connection(job):
                        pass

                anyio.run(connect_only, backend=backend)
            else:
                with clients._stompy_connection(job):
                    pass
            return
        bench: Callable[[clients.Job], float]
        if backend is not None:
            run = clients.stompy_async_consume if consume else clients.stompy_async_publish
            bench = functools.partial(run, backend=backend)
        elif consume:
            bench = clients.stomppy_consume if stomppy else clients.stompy_sync_consume
        else:
            bench = clients.stomppy_publish if stomppy else clients.stompy_sync_publish
        bench(job)


def _inner(path: str, count: int, work: bool) -> None:
    if path.endswith(("consume", "publish")):
        _client(path, count, work)
        return
    run = _setup(path, count)
    if work:
        run()


def _instructions(
    path: str, count: int, work: bool, tree: Path = _ROOT, env: dict[str, str] | None = None
) -> int:
    """The instructions of one child run of ``path``: the set-up for ``count``
    messages, and with ``work`` the work on them. ``tree`` holds the stompy measured;
    ``env`` is added to the child's environment."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "benchmarks.instructions",
            "--inner",
            path,
            "--count",
            str(count),
            "--work" if work else "--no-work",
        ]
        # One hash seed: with a random one, dict and set layouts (and so the counts)
        # moved by a few percent from run to run (18,200-18,875 for one broker SEND).
        child = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
        # The tree first (its stompy), then the checkout (the benchmarks).
        paths = [str(tree), str(_ROOT), child.get("PYTHONPATH")]
        child["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        subprocess.run(command, check=True, capture_output=True, cwd=tree, env=child)
        text = Path(out).read_text()
    match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no instruction total in the callgrind output of {path}")
    return int(match.group(1))


def _install_wheel(into: Path) -> Path:
    """The checkout built as ``pip install .`` builds it, installed into ``into/site``
    without dependencies; returns that directory. Refuses a pure-Python wheel."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    run = functools.partial(subprocess.run, check=True, capture_output=True)
    run([*pip, "wheel", "--no-deps", "-w", str(into / "dist"), str(_ROOT)])
    (wheel,) = (into / "dist").glob("*.whl")
    if wheel.name.endswith("-none-any.whl"):
        raise RuntimeError(f"{wheel.name} is pure Python: see the build's warnings")
    run([*pip, "install", "--no-deps", "--target", str(into / "site"), str(wheel)])
    return into / "site"


def _accelerated(site: Path, into: Path) -> Path:
    """A copy of the checkout's stompy with the installed wheel's accelerator beside it."""
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")
    shutil.copytree(_ROOT / "stompy", into / "stompy", ignore=skip)
    core = site / "stompy" / "_core"
    built = [p for p in core.glob("cscan.*") if p.suffix in (".so", ".pyd")]
    if len(built) != 1:
        raise RuntimeError(f"the wheel holds no accelerator: {built}")
    shutil.copy(built[0], into / "stompy" / "_core")
    return into


def _trees(flavours: list[str], tmp: Path) -> list[tuple[str, Path, dict[str, str]]]:
    """Each flavour's tree and what its environment adds."""
    site = _install_wheel(tmp / "wheel") if flavours != ["pure"] else None
    trees: list[tuple[str, Path, dict[str, str]]] = []
    for flavour in flavours:
        if site is None or flavour == "pure":
            trees.append((flavour, _ROOT, {"STOMPY_NO_EXTENSIONS": ""}))
        elif flavour == "accelerated":
            trees.append((flavour, _accelerated(site, tmp / "accelerated"), {}))
        else:
            off = "1" if flavour == "compiled" else ""
            trees.append((flavour, site, {"STOMPY_NO_EXTENSIONS": off}))
    return trees


def _flavours(text: str) -> list[str]:
    """``--flavour``'s value: the flavours named, in :data:`FLAVOURS`' order."""
    names = {"all": ",".join(FLAVOURS), "both": "pure,compiled"}.get(text, text).split(",")
    for name in names:
        if name not in FLAVOURS:
            raise argparse.ArgumentTypeError(f"unknown flavour {name!r}")
    return [f for f in FLAVOURS if f in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("paths", nargs="*", help=f"default: {' '.join(PATHS)}")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument(
        "--flavour",
        type=_flavours,
        default=["pure"],
        help=f"{', '.join(FLAVOURS)}, several comma-separated, or all (default: pure)",
    )
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--work", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _inner(args.inner, args.count, bool(args.work))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    for path in args.paths or PATHS:
        if path not in PATHS + ASYNC_PATHS + STOMPPY_PATHS + OTHER_PATHS:
            parser.error(f"unknown path {path!r}")
    with tempfile.TemporaryDirectory(prefix="stompy-instructions-") as tmp:
        trees = _trees(args.flavour, Path(tmp))
        for flavour, tree, env in trees:
            for path in args.paths or PATHS:
                if flavour != "pure" and path.startswith("stomp.py"):
                    continue  # stompy's build does not change stomp.py
                full = _instructions(path, args.count, True, tree, env)
                empty = _instructions(path, args.count, False, tree, env)
                name = path if len(trees) == 1 else f"{path} ({flavour})"
                print(f"{name:30} {(full - empty) / args.count:12,.0f} instructions per message")
    return 0


if __name__ == "__main__":
    sys.exit(main())

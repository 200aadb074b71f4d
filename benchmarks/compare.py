"""Two stompy source trees side by side, in the same run: the client benchmarks' figures
for each and their ratio.

``python -m benchmarks.compare BEFORE [AFTER]`` takes two git revisions (``AFTER``
defaults to the working tree of this checkout; either may also be a directory that
holds a ``stompy`` package), extracts each one's ``stompy`` package
into a temporary directory (``git archive``; nothing is checked out) and measures the
blocking, asyncio and trio clients consuming from the blast server and publishing to
the sink server (:mod:`benchmarks.clients`' very functions, the servers of
:mod:`benchmarks.servers`; only the ``stompy`` imported differs):

* instructions per message, counted by callgrind (as :mod:`benchmarks.instructions`
  counts them: a run with ``--count`` messages less a run that only connects, divided
  by the count; every thread of the client, not the server's process). The load of the
  machine cannot move these, so they are the evidence of choice;
* with ``--rounds N`` (N > 0), wall-clock seconds of the measured window and CPU seconds
  of the whole client process, ``N`` rounds, each running every (tree, flavour, path)
  once in a child process of its own, the order of the trees alternating each round;
  medians are printed. These move with the load.

A ratio is AFTER / BEFORE: above 1.0 means AFTER costs more (is slower). A ratio above
``1 + --tolerance`` is marked ``SLOWER``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

_ROOT: Final = Path(__file__).resolve().parent.parent
FLAVOURS: Final = ("blocking", "asyncio", "trio")
PATHS: Final = ("consume", "publish")


# -- the child: one run of one path with whichever stompy is on sys.path ---------------


def _bench(flavour: str, path: str) -> Callable[[Any], float]:
    from benchmarks import clients

    if flavour == "blocking":
        return clients.stompy_sync_consume if path == "consume" else clients.stompy_sync_publish
    bench = clients.stompy_async_consume if path == "consume" else clients.stompy_async_publish
    return functools.partial(bench, backend=flavour)


def _without_tracing_option() -> None:
    """Older trees have no ``tracing`` option: the benchmark's connections are made
    without it (its default, on, is what the newer tree measures too)."""
    import importlib.util

    import stompy
    from benchmarks import clients

    # The option came with stompy/_tracing.py, now stompy/_engine/tracing.py.
    if any(importlib.util.find_spec(name) for name in ("stompy._tracing", "stompy._engine")):
        return

    def drop(factory: Callable[..., Any]) -> Callable[..., Any]:
        def make(*args: Any, tracing: bool = True, **kwargs: Any) -> Any:
            return factory(*args, **kwargs)

        return make

    patched = type("stompy", (), {})()
    patched.Connection = drop(stompy.Connection)
    patched.AsyncConnection = drop(stompy.AsyncConnection)
    clients.stompy = patched  # type: ignore[attr-defined]


def _connect_only(flavour: str, job: Any) -> None:
    """What the work's run does besides the messages: import, connect, disconnect (and
    build a publisher's input)."""
    from benchmarks import clients

    if flavour == "blocking":
        with clients._stompy_connection(job):
            return

    import anyio

    async def main() -> None:
        async with clients._stompy_async_connection(job):
            pass

    anyio.run(main, backend=flavour)


def _child(flavour: str, path: str, count: int, work: bool, warm: bool) -> dict[str, float]:
    from benchmarks import clients, workload
    from benchmarks.rawstomp import Server
    from benchmarks.servers import ServerProcess

    _without_tracing_option()
    kind = "blast" if path == "consume" else "sink"
    with ServerProcess(kind, count=count) as server:
        # A generous limit: under callgrind on a busy machine a run is ~50x slower.
        job = clients.Job(Server(kind, *server.address), count, 60 * clients.limit_for(count))
        if not work:
            if path == "publish":
                inputs = ([workload.body(i) for i in range(count)], job.send_headers())
                del inputs
            _connect_only(flavour, job)
            return {}
        if warm:
            _connect_only(flavour, job)  # imports and first-use costs out of the CPU time
        cpu = time.process_time()
        elapsed = _bench(flavour, path)(job)
        return {"wall": elapsed, "cpu": time.process_time() - cpu}


# -- the parent ------------------------------------------------------------------------


@contextlib.contextmanager
def _tree(rev: str | None) -> Iterator[Path]:
    """A directory whose ``stompy`` is that of ``rev`` (None: this checkout's; a
    directory holding a ``stompy`` package: that one)."""
    if rev is None:
        yield _ROOT
        return
    if (Path(rev) / "stompy").is_dir():
        yield Path(rev)
        return
    with tempfile.TemporaryDirectory(prefix=f"stompy-{rev[:12]}-") as tmp:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", rev, "stompy"],
            cwd=_ROOT,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def _command(flavour: str, path: str, count: int, work: bool, warm: bool = False) -> list[str]:
    return [
        "-m",
        "benchmarks.compare",
        "--child",
        f"{flavour}:{path}",
        "--count",
        str(count),
        "--work" if work else "--no-work",
        *(["--warm"] if warm else []),
    ]


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The tree first (its stompy), then this checkout (the benchmarks).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), str(_ROOT)]))
    env["STOMPY_NO_EXTENSIONS"] = "1"
    return env


def _run(tree: Path, args: list[str], prefix: list[str] | None = None) -> dict[str, float]:
    command = [*(prefix or []), sys.executable, *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tree, env=_env(tree))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {tree}:\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    result: dict[str, float] = json.loads(lines[-1]) if lines else {}
    return result


def _instructions(tree: Path, flavour: str, path: str, count: int, work: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        _run(tree, _command(flavour, path, count, work), prefix)
        text = Path(out).read_text()
    match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no instruction total in the callgrind output of {flavour} {path}")
    return int(match.group(1))


def _ratio(before: float, after: float, tolerance: float) -> str:
    ratio = after / before
    mark = "  SLOWER" if ratio > 1 + tolerance else ""
    return f"{ratio:6.3f}{mark}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare")
    parser.add_argument("before", nargs="?", help="a git revision")
    parser.add_argument("after", nargs="?", help="a git revision (default: this checkout)")
    parser.add_argument("--count", type=int, default=3000, help="messages per callgrind run")
    parser.add_argument("--wall-count", type=int, default=20_000, help="messages per timed run")
    parser.add_argument("--rounds", type=int, default=0, help="timed rounds (0: none)")
    parser.add_argument("--flavours", default=",".join(FLAVOURS))
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--no-instructions", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        flavour, path = args.child.split(":")
        print(json.dumps(_child(flavour, path, args.count, bool(args.work), args.warm)))
        return 0
    if args.before is None:
        parser.error("name the revision to compare with")
    flavours = [f for f in args.flavours.split(",") if f]
    paths = [p for p in args.paths.split(",") if p]
    for name in flavours:
        if name not in FLAVOURS:
            parser.error(f"unknown flavour {name!r}")
    for name in paths:
        if name not in PATHS:
            parser.error(f"unknown path {name!r}")
    cases = [(f, p) for f in flavours for p in paths]
    with _tree(args.before) as before, _tree(args.after) as after:
        trees = {"before": before, "after": after}
        print(f"before: {args.before}  after: {args.after or 'working tree'}", flush=True)
        if not args.no_instructions:
            if shutil.which("valgrind") is None:
                print("valgrind is not installed", file=sys.stderr)
                return 1
            print(f"\ninstructions per message (callgrind, {args.count:,} messages)", flush=True)
            print(f"{'':20} {'before':>12} {'after':>12} {'after/before':>14}")
            for flavour, path in cases:
                per: dict[str, float] = {}
                for which, tree in trees.items():
                    full = _instructions(tree, flavour, path, args.count, True)
                    empty = _instructions(tree, flavour, path, args.count, False)
                    per[which] = (full - empty) / args.count
                name = f"{flavour} {path}"
                ratio = _ratio(per["before"], per["after"], args.tolerance)
                print(f"{name:20} {per['before']:12,.0f} {per['after']:12,.0f} {ratio:>14}")
                sys.stdout.flush()
        if args.rounds > 0:
            _timed(trees, cases, args.rounds, args.wall_count, args.tolerance)
    return 0


def _timed(
    trees: dict[str, Path],
    cases: list[tuple[str, str]],
    rounds: int,
    count: int,
    tolerance: float,
) -> None:
    got: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    order = list(trees)
    for round_ in range(rounds):
        for flavour, path in cases:
            for which in order if round_ % 2 == 0 else order[::-1]:
                result = _run(trees[which], _command(flavour, path, count, True, warm=True))
                got.setdefault((which, flavour, path), []).append(result)
        print(f"  round {round_ + 1}/{rounds} done", file=sys.stderr, flush=True)
    print(f"\nmedians of {rounds} alternating rounds, {count:,} messages each")
    header = f"{'':20} {'before':>9} {'after':>9} {'ratio':>7}"
    print(f"{'':20} {'wall us/msg':^27}   {'cpu us/msg':^27}")
    print(f"{header}   {header[21:]}")
    for flavour, path in cases:
        cells = []
        for measure in ("wall", "cpu"):
            b, a = (
                statistics.median(r[measure] for r in got[(which, flavour, path)]) / count * 1e6
                for which in ("before", "after")
            )
            cells.append(f"{b:9.2f} {a:9.2f} {_ratio(b, a, tolerance):>7}")
        print(f"{flavour + ' ' + path:20} {cells[0]}   {cells[1]}")


if __name__ == "__main__":
    sys.exit(main())

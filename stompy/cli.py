"""The ``stompy`` command.

``stompy broker`` runs the in-process test broker standalone, logging each
connection to stderr; its first line on stdout is ``listening on stomp://host:port``
so scripts started with ``--port 0`` can read the real port.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ("build_parser", "main", "run_broker_command")


def _user(text: str) -> tuple[str, str]:
    login, sep, passcode = text.partition(":")
    if not sep or not login:
        raise argparse.ArgumentTypeError(f"want LOGIN:PASSCODE, got {text!r}")
    return login, passcode


def _heartbeat(text: str) -> tuple[int, int]:
    send, sep, receive = text.partition(",")
    try:
        beats = (int(send), int(receive))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want two numbers like 1000,1000, got {text!r}") from None
    if not sep or beats[0] < 0 or beats[1] < 0:
        raise argparse.ArgumentTypeError(f"want two numbers like 1000,1000, got {text!r}")
    return beats


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stompy`` and its subcommands."""
    parser = argparse.ArgumentParser(prog="stompy", description="STOMP tools.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    broker = commands.add_parser(
        "broker",
        help="run a STOMP broker for tests",
        description="Run stompy's in-process STOMP broker standalone (memory only).",
    )
    broker.add_argument("--host", default="127.0.0.1", help="address to listen on")
    broker.add_argument(
        "--port", type=int, default=61613, help="port to listen on; 0 picks a free one"
    )
    broker.add_argument(
        "--users",
        nargs="+",
        type=_user,
        metavar="LOGIN:PASSCODE",
        help="accept only these logins (default: anyone)",
    )
    broker.add_argument(
        "--vhost", action="append", metavar="HOST", help="accepted virtual host (repeatable)"
    )
    broker.add_argument(
        "--heartbeat",
        type=_heartbeat,
        default=(1000, 1000),
        metavar="SEND,RECEIVE",
        help="the broker's heart-beat header in ms (default 1000,1000)",
    )
    broker.add_argument("--prefetch", type=int, default=100, help="client-ack prefetch")
    broker.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    broker.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    broker.set_defaults(handler=_broker_main)
    return parser


def _broker_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"heartbeats": args.heartbeat, "prefetch": args.prefetch}
    if args.users:
        options["users"] = dict(args.users)
    if args.vhost:
        options["virtual_hosts"] = list(args.vhost)
    return options


async def run_broker_command(args: argparse.Namespace, out: TextIO) -> None:
    """Serve until cancelled (or, in the main thread, until SIGINT / SIGTERM)."""
    import anyio

    from stompy.testing import serve

    async with serve(args.host, args.port, **_broker_options(args)) as broker:
        print(f"listening on {broker.url}", file=out, flush=True)
        if threading.current_thread() is not threading.main_thread():
            await anyio.sleep_forever()
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                logging.getLogger("stompy.testing").info(
                    "stopping on %s", signal.Signals(signum).name
                )
                return


def _broker_main(args: argparse.Namespace) -> int:
    import anyio

    from stompy.testing import BrokerConfig

    try:
        BrokerConfig(**_broker_options(args))
    except ValueError as exc:
        print(f"stompy broker: {exc}", file=sys.stderr)
        return 2

    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        anyio.run(run_broker_command, args, sys.stdout, backend=args.backend)
    except OSError as exc:
        print(f"stompy broker: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover - the signal receiver handles SIGINT
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stompy``; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    status: int = args.handler(args)
    return status

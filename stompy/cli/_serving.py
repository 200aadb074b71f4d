"""What the serving commands (``broker``, ``proxy``) share: run until stopped, with
their log on stderr."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TextIO

import anyio

from stompy.cli._status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from stompy.errors import ListenFailed

__all__ = ("serve_until_stopped", "until_stopped")


async def until_stopped() -> None:
    """Wait for SIGINT or SIGTERM (forever when not in the main thread: tests run the
    commands in a thread, where signals cannot be received)."""
    if threading.current_thread() is not threading.main_thread():
        await anyio.sleep_forever()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logging.getLogger("stompy.testing").info("stopping on %s", signal.Signals(signum).name)
            return


def serve_until_stopped(
    name: str,
    command: Callable[[argparse.Namespace, TextIO], Awaitable[None]],
    args: argparse.Namespace,
    usage: tuple[type[Exception], ...],
) -> int:
    """Run a serving command (broker, proxy) with its log on stderr until it is stopped;
    its exit status. ``usage`` are the errors that mean the arguments were wrong."""
    if args.backend == "trio":
        try:
            importlib.import_module("trio")
        except ImportError:
            print(
                f"stompy {name}: --backend trio needs trio: pip install 'stompy-client[trio]'",
                file=sys.stderr,
            )
            return EXIT_USAGE
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        anyio.run(command, args, sys.stdout, backend=args.backend)
    except usage as exc:
        print(f"stompy {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ListenFailed as exc:  # it names the address: --port's, or --websocket's
        print(f"stompy {name}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:
        print(f"stompy {name}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:  # pragma: no cover - the signal receiver handles SIGINT
        pass
    return EXIT_OK

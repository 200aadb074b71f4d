"""``main``: parse the arguments, run the command, turn what went wrong into one line on
stderr and an exit status."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from stompy.cli._masking import MaskingFormatter, mask_passcodes
from stompy.cli._parser import build_parser
from stompy.cli._signals import SIGNALS, Interrupted
from stompy.cli._status import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CommandError,
)
from stompy.errors import ConnectFailed, ServerError, StompError, StompTimeout

__all__ = ("main",)


def _describe(exc: BaseException) -> str:
    """One line saying what went wrong, in the user's terms."""
    if isinstance(exc, ServerError):
        return f"the broker refused: {exc}"
    if isinstance(exc, ConnectFailed) and "cannot connect" not in str(exc):
        return f"cannot connect: {exc}"
    if isinstance(exc, StompTimeout):
        return f"timed out: {exc}"
    return str(exc) or type(exc).__name__


def _errors_and_failed_attempts(record: logging.LogRecord) -> bool:
    """What the CLI logs by default with ``--reconnect``: the errors, and each failed
    attempt to connect (retried without end, the first connection too: without a line
    per attempt, a mistyped address would wait without a word)."""
    return record.levelno >= logging.ERROR or record.msg == "could not connect to %s: %s"


def _run_client_command(args: argparse.Namespace) -> int:
    name = f"stompy {args.command}"
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.ERROR
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(MaskingFormatter(f"{name}: %(message)s"))
    logger = logging.getLogger("stompy")
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    if level > logging.INFO and args.reconnect:
        handler.addFilter(_errors_and_failed_attempts)
        logger.setLevel(logging.INFO)
    logger.propagate = False  # one line per event on stderr, whatever the root logger does
    try:
        with SIGNALS.installed():
            status: int = args.handler(args)
            return status
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Interrupted:
        print(f"{name}: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:
        # Whoever read stdout is gone (``| head -1``); say nothing more on it.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (StompError, CommandError, OSError, ValueError) as exc:
        if args.debug:
            sys.stderr.write(mask_passcodes(traceback.format_exc()))
        status = exc.status if isinstance(exc, CommandError) else EXIT_FAILURE
        print(f"{name}: {mask_passcodes(_describe(exc))}", file=sys.stderr)
        return status
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stompy``; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command in ("broker", "proxy"):
        status: int = args.handler(args)
        return status
    return _run_client_command(args)

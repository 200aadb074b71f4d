"""``stompy broker``: the in-process test broker, standalone."""

from __future__ import annotations

import argparse
import re
import ssl
import sys
from typing import Any, Final, TextIO

from stompy import testing
from stompy.cli._serving import serve_until_stopped, until_stopped
from stompy.cli._status import EXIT_USAGE, CommandError

__all__ = ("broker_options", "broker_tls", "run_broker", "run_broker_command")

#: The option of each keyword of :func:`stompy.testing.serve` that the command sets:
#: the broker's errors name the keyword, the command's user typed the option.
FLAGS: Final = {
    "heartbeats": "--heartbeat",
    "prefetch": "--prefetch",
    "max_queue": "--max-queue",
    "max_stored_bytes": "--max-stored-bytes",
    "max_backlog_bytes": "--max-backlog-bytes",
    "max_subscriptions": "--max-subscriptions",
    "max_partial_bytes": "--max-partial-bytes",
    "frame_timeout": "--frame-timeout",
    "users": "--users",
    "virtual_hosts": "--vhost",
    "max_redeliveries": "--max-redeliveries",
    "dead_letter_queue": "--dead-letter-queue",
}
_KEYWORD: Final = re.compile(r"\b(" + "|".join(FLAGS) + r")\b")


def in_flags(error: str) -> str:
    """``error``, a broker option's, with each keyword named as its option."""
    return _KEYWORD.sub(lambda found: FLAGS[found.group(1)], error)


def broker_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`stompy.testing.serve` the options give (an option
    not given leaves the broker's default)."""
    options: dict[str, Any] = {"heartbeats": args.heartbeat, "prefetch": args.prefetch}
    if args.max_queue is not None:
        options["max_queue"] = args.max_queue
    if args.max_stored_bytes is not None:
        options["max_stored_bytes"] = args.max_stored_bytes
    for name in ("max_backlog_bytes", "max_subscriptions", "max_partial_bytes", "frame_timeout"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.users:
        options["users"] = dict(args.users)
    if args.vhost:
        options["virtual_hosts"] = list(args.vhost)
    if args.max_redeliveries is not None:
        options["max_redeliveries"] = args.max_redeliveries
    if args.dead_letter_queue is not None:
        options["dead_letter_queue"] = args.dead_letter_queue
    return options


def broker_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The server context of ``--tls-cert`` / ``--tls-key`` (``None`` without them).

    Raises :class:`CommandError` (a usage error) when they cannot be loaded.
    """
    if args.tls_cert is None:
        if args.tls_key is not None:
            raise CommandError("--tls-key needs --tls-cert", EXIT_USAGE)
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(
            f"cannot load the TLS certificate {args.tls_cert}"
            f"{f' and key {args.tls_key}' if args.tls_key else ''}: {exc}",
            EXIT_USAGE,
        ) from None
    return context


async def run_broker_command(args: argparse.Namespace, out: TextIO) -> None:
    """Serve until cancelled (or, in the main thread, until SIGINT / SIGTERM)."""
    ws_port: int | None = args.websocket
    async with testing.serve(
        args.host,
        args.port,
        ssl=broker_tls(args),
        websocket=ws_port is not None,
        websocket_port=ws_port or 0,
        **broker_options(args),
    ) as broker:
        print(f"listening on {broker.url}", file=out, flush=True)
        if broker.ws_url is not None:
            print(f"listening on {broker.ws_url}", file=out, flush=True)
        await until_stopped()


def run_broker(args: argparse.Namespace) -> int:
    """Check the options, then serve until stopped; the exit status."""
    try:
        if args.dead_letter_queue is not None and args.max_redeliveries is None:
            raise CommandError("--dead-letter-queue needs --max-redeliveries (the limit)")
        testing.BrokerConfig(**broker_options(args))
        broker_tls(args)
    except (ValueError, CommandError) as exc:
        print(f"stompy broker: {in_flags(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    # An ImportError: --websocket without wsproto.
    return serve_until_stopped("broker", run_broker_command, args, usage=(ImportError,))

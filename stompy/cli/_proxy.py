"""``stompy proxy``: the fault-injection proxy in front of a broker."""

from __future__ import annotations

import argparse
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

from stompy import testing
from stompy.cli._serving import serve_until_stopped, until_stopped
from stompy.errors import ConfigurationError

__all__ = ("run_proxy", "run_proxy_command")


def _without_passcode(url: str) -> str:
    """``url`` with the passcode taken out of it (the login stays)."""
    parts = urlsplit(url)
    userinfo, at, place = parts.netloc.rpartition("@")
    login = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{login}{at}{place}"))


async def run_proxy_command(args: argparse.Namespace, out: TextIO) -> None:
    """Proxy until cancelled (or, in the main thread, until SIGINT / SIGTERM).

    The first line on ``out`` is ``listening on URL``, the passcode left out of it.
    """
    async with testing.fault_proxy(args.target, args.host, args.port) as proxy:
        if args.delay:
            proxy.delay(args.delay)
        if args.throttle is not None:
            proxy.throttle(args.throttle)
        print(f"listening on {_without_passcode(proxy.url)}", file=out, flush=True)
        await until_stopped()


def run_proxy(args: argparse.Namespace) -> int:
    """Proxy until stopped; the exit status (2 for a bad target URL)."""
    return serve_until_stopped("proxy", run_proxy_command, args, usage=(ConfigurationError,))

"""The connection that ``send`` and ``subscribe`` open, from their arguments."""

from __future__ import annotations

import argparse
import getpass
import os
import ssl
import sys
from collections.abc import Callable
from typing import Final

from stompy import Connection, Reconnect

# The one name the CLI takes from below the public surface: a comma-separated list of
# URLs (stompy.Connection's first argument) parsed as the connection will parse it, so
# that the credentials of the first one and the schemes decide the defaults below.
# stompy.parse_url parses one URL only.
from stompy._engine.urls import parse_urls
from stompy.cli._status import EXIT_USAGE, CommandError
from stompy.errors import ServerError

__all__ = ("LOGIN_VARIABLE", "PASSCODE_VARIABLE", "connection")

#: Environment variables read when neither the URL nor an option gives a credential.
LOGIN_VARIABLE: Final = "STOMP_LOGIN"
PASSCODE_VARIABLE: Final = "STOMP_PASSCODE"


def connection(
    args: argparse.Namespace, on_error: Callable[[ServerError], object] | None = None
) -> Connection:
    """The connection the arguments describe (not connected yet); ``on_error`` is its
    hook for the broker's ERROR frames.

    Raises :class:`CommandError`: a usage error for a bad URL or option value, a
    failure for CA certificates that cannot be loaded.
    """
    try:
        endpoints = parse_urls(args.url)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    login: str | None = args.login
    passcode: str | None = args.passcode
    if args.ask_passcode and passcode is None:
        try:
            passcode = getpass.getpass(f"passcode for {login or endpoints[0].login or 'stompy'}: ")
        except EOFError:
            print(file=sys.stderr)  # end the prompt's line
            raise CommandError("no passcode given", EXIT_USAGE) from None
    # Precedence: options, then the URL, then the environment.
    first = endpoints[0]
    if login is None and first.login is None:
        login = os.environ.get(LOGIN_VARIABLE) or None
    if passcode is None and first.passcode is None:
        passcode = os.environ.get(PASSCODE_VARIABLE) or None
    context: ssl.SSLContext | None = None
    if args.cafile is not None:
        try:
            context = ssl.create_default_context(cafile=str(args.cafile))
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load CA certificates from {args.cafile}: {exc}") from None
    if args.ws_headers and not any(endpoint.websocket for endpoint in endpoints):
        raise CommandError("--ws-header is for ws:// and wss:// URLs", EXIT_USAGE)
    try:
        return Connection(
            endpoints,
            login=login,
            passcode=passcode,
            host=args.vhost,
            heartbeats=args.heartbeat,
            ssl=context,
            connect_timeout=args.connect_timeout,
            reconnect=Reconnect(max_delay=5.0) if args.reconnect else None,
            ws_headers=dict(args.ws_headers),
            versions=args.stomp_version,
            on_error=on_error,
        )
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None

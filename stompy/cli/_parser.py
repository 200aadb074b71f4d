"""The argument parser of ``stompy`` and its commands.

argparse (the standard library's) parses the arguments: stompy's only runtime
dependencies are anyio and typing-extensions. A usage error is one line on stderr
that names the argument, and exit status 2.

Options are taken only by their whole names (``allow_abbrev=False``): with argparse's
prefix matching, ``--time 5`` meant ``--timeout 5`` until an option that also starts
so came along, and a script that relied on it would change its meaning, or break,
with a new release. An unknown option is told with the option it most likely meant.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

from stompy import VERSIONS, __version__
from stompy.cli import _values as values
from stompy.cli._broker import run_broker
from stompy.cli._connecting import LOGIN_VARIABLE, PASSCODE_VARIABLE
from stompy.cli._masking import MASK
from stompy.cli._proxy import run_proxy
from stompy.cli._send import DEFAULT_MAX_BODY, run_send
from stompy.cli._status import EXIT_USAGE
from stompy.cli._subscribe import run_subscribe

__all__ = ("build_parser",)


class _OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr, naming the argument, and exit status 2.
    Options are not abbreviated (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # What looks like a negative number is an option's value, not an option: also
        # "-1,0" (argparse before Python 3.13 took only "-1" or "-1.5" so, and said
        # "--heartbeat: expected one argument" of "--heartbeat -1,0"), so that the
        # option's own check says what is wrong with it. 3.13's rule.
        self._negative_number_matcher = re.compile(r"-\.?\d")

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument COMMAND: invalid choice: "):
            given = message.partition("invalid choice: ")[2].partition(" ")[0].strip("'")
            meant = _COMMAND_MEANT.get(given.lower()) or "".join(
                difflib.get_close_matches(given, _COMMANDS, n=1, cutoff=0.6)
            )
            if meant:
                message += f"; did you mean {meant}?"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


#: The commands, and the words a newcomer may try for them (as other tools name theirs).
_COMMANDS: Final = ("send", "subscribe", "broker", "proxy")
_COMMAND_MEANT: Final = {
    **dict.fromkeys(("receive", "recv", "consume", "listen", "sub", "get", "read"), "subscribe"),
    **dict.fromkeys(("publish", "pub", "put", "produce", "post"), "send"),
    **dict.fromkeys(("server", "serve", "run"), "broker"),
}


class _Parser(_OneLineParser):
    """Lets options come after the optional BODY too: ``send URL DEST -H a:b BODY``.

    Plain argparse matches an optional positional as soon as it sees the positionals
    before it, so a BODY after options would be "unrecognized"; intermixed parsing
    (standard since Python 3.7) assigns positionals after all options are taken.
    """

    _nested = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._nested:
            return super().parse_known_args(args, namespace)
        self._nested = True
        try:
            parsed, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._nested = False
        if extras:
            # Said here, by the command's own parser, not by the top one's: "stompy send:
            # ... (see 'stompy send --help')" names the command whose options to read.
            hints = [
                f"did you mean {meant}?"
                for meant in (_meant(extra, self._option_string_actions) for extra in extras)
                if meant
            ]
            said = "".join(f"; {hint}" for hint in hints)
            self.error(f"unrecognized arguments: {' '.join(_masked(extras))}{said}")
        set_here = _SET_BY_STOMPY.get(self.prog.rsplit(" ", 1)[-1], {})
        for name, value in getattr(parsed, "extra_headers", None) or ():
            if value[:1].isspace() and value.strip():
                # curl's habit, -H "name: value": STOMP keeps a value's white space, and
                # a receiver (a selector) compares ' value' with what it wants.
                print(
                    f"{self.prog}: warning: -H {name}:{value!r}: the value starts with white "
                    f"space, which STOMP keeps; write {name}:{value.strip()} for "
                    f"{value.strip()!r}",
                    file=sys.stderr,
                )
            hint = set_here.get(name.lower())
            if hint is not None:
                self.error(f"argument -H/--header: {name!r} is set by stompy: {hint}")
            if name.lower() == "content-type" and getattr(parsed, "content_type", None):
                # One of the two would be dropped without a word.
                self.error(f"argument -H/--header: {name!r} is given by --content-type too")
            if name.lower() == "content-type" and name != "content-type":
                # Sent as written, beside the content-type of a text body: STOMP header
                # names are case-sensitive, and receivers read 'content-type' only.
                self.error(
                    f"argument -H/--header: {name!r}: STOMP header names are case-sensitive "
                    "and receivers read 'content-type'; write it so, or use --content-type"
                )
        return parsed, extras


#: Options of other tools (curl, other STOMP clients) and the one of stompy's meant,
#: told where the command has it: no spelling alike finds them.
_OPTION_MEANT: Final = {
    "--user": "--login",
    "--username": "--login",
    "-u": "--login",
    "--password": "--passcode",
    "--pass": "--passcode",
    "-p": "--passcode",
    "--timeout": "--connect-timeout",
    "-n": "--count",
    "--max": "--count",
    "--limit": "--count",
    "--ack-mode": "--ack",
}


def _masked(extras: Sequence[str]) -> list[str]:
    """``extras`` as a usage error shows them, the value of an unknown option that reads
    as a secret (``--password=...``, ``--token X``) masked: passcodes are never printed."""
    shown: list[str] = []
    secret_next = False
    for extra in extras:
        name, equals, _ = extra.partition("=")
        if secret_next and not extra.startswith("-"):
            shown.append(MASK)
        elif name.startswith("-") and any(w in name.lower() for w in ("pass", "secret", "token")):
            shown.append(f"{name}={MASK}" if equals else name)
            secret_next = not equals
            continue
        else:
            shown.append(extra)
        secret_next = False
    return shown


def _meant(given: str, options: Collection[str]) -> str:
    """The option(s) an unknown ``--option`` (perhaps ``--option=value``) most likely
    meant: another tool's name for one (:data:`_OPTION_MEANT`), those it begins (an
    abbreviation, which is not taken), else one spelled nearly the same; ``""`` when
    none (or when ``given`` is no option)."""
    other = _OPTION_MEANT.get(given.split("=", 1)[0], "")
    if other in options:
        return other
    if not given.startswith("--"):
        return ""
    name = given.split("=", 1)[0]
    longs = sorted(option for option in options if option.startswith("--"))
    begun = [option for option in longs if option.startswith(name)]
    if begun:
        return " or ".join(begun)
    return "".join(difflib.get_close_matches(name, longs, n=1, cutoff=0.85))


#: Per command, the headers stompy writes itself, and what to use instead of -H.
_SET_BY_STOMPY: Final[dict[str, dict[str, str]]] = {
    "send": {
        "destination": "give it as DESTINATION",
        "receipt": "stompy send asks for one itself (--receipt, the default; --no-receipt: none)",
        "transaction": "stompy send sends outside transactions",
        "content-length": "stompy writes the body's length itself",
    },
    "subscribe": {
        "destination": "give it as DESTINATION",
        "ack": "use --ack",
        "id": "stompy names its subscription",
        "receipt": "stompy subscribe waits for the broker's receipt itself",
    },
}


def _add_header_option(
    parser: argparse._ActionsContainer,
    *flags: str,
    dest: str,
    help: str,
    type: Callable[[str], tuple[str, str]] = values.header,
) -> None:
    """A repeatable ``NAME:VALUE`` option, collected in a list of pairs at ``dest``."""
    parser.add_argument(
        *flags, dest=dest, action="append", type=type, default=[], metavar="NAME:VALUE", help=help
    )


def _add_heartbeat_option(
    parser: argparse._ActionsContainer, default: tuple[int, int], help: str
) -> None:
    """``--heartbeat SEND,RECEIVE``, in ms."""
    parser.add_argument(
        "--heartbeat", type=values.heartbeat, default=default, metavar="SEND,RECEIVE", help=help
    )


def _client_options(frame: str, header_example: str) -> _Parser:
    """The arguments of ``send`` and ``subscribe``: URL, destination, the headers of the
    ``frame`` it sends, and where and how to connect."""
    common = _Parser(add_help=False)
    common.add_argument(
        "url",
        metavar="URL",
        help="broker address, stomp://[login[:passcode]@]host[:port][/vhost], or "
        "stomp+ssl://, ws:// or wss://...; several separated by commas are tried in turn",
    )
    common.add_argument(
        "destination", metavar="DESTINATION", type=values.destination, help="e.g. /queue/orders"
    )
    _add_header_option(
        common,
        "-H",
        "--header",
        dest="extra_headers",
        help=f"a {frame} header, e.g. {header_example} (repeatable)",
    )
    group = common.add_argument_group("connection")
    group.add_argument("--login", help=f"login (default: from the URL, else ${LOGIN_VARIABLE})")
    group.add_argument(
        "--passcode",
        help=f"passcode (default: from the URL, else ${PASSCODE_VARIABLE}); prefer the "
        "variable or --ask-passcode, since other users can see command lines",
    )
    group.add_argument(
        "--ask-passcode", action="store_true", help="read the passcode from the terminal"
    )
    group.add_argument(
        "--vhost",
        type=values.vhost,
        metavar="HOST",
        help="the CONNECT host header (default: the URL path, else /)",
    )
    _add_heartbeat_option(
        group, (10_000, 10_000), "heart-beats to offer, in ms (default 10000,10000; 0,0 for none)"
    )
    group.add_argument(
        "--stomp-version",
        type=values.stomp_versions,
        default=VERSIONS,
        metavar="VERSIONS",
        help="the STOMP versions to offer, separated by commas, the broker choosing the "
        "highest it speaks: 1.0 for a broker that speaks only that (default 1.0,1.1,1.2)",
    )
    group.add_argument(
        "--cafile", type=Path, metavar="PEM", help="trust these CA certificates for TLS"
    )
    _add_header_option(
        group,
        "--ws-header",
        dest="ws_headers",
        type=values.ws_header,
        help="an HTTP header for the WebSocket handshake of ws:// and wss:// URLs, e.g. "
        "'Authorization: Bearer ...', a Cookie or an Origin (repeatable)",
    )
    group.add_argument(
        "--connect-timeout",
        type=values.positive(float),
        default=10.0,
        metavar="S",
        help="seconds to wait for the broker to accept the connection (default 10)",
    )
    group.add_argument(
        "--reconnect",
        action="store_true",
        help="reconnect (and fail over) when the connection is lost",
    )
    group.add_argument("-v", "--verbose", action="store_true", help="log connections to stderr")
    group.add_argument(
        "--debug", action="store_true", help="log everything and show tracebacks on errors"
    )
    return common


#: The broker command's limits, WebSocket and TLS options: (flag, type, metavar, help);
#: each is None unless given (the broker's own default then).
_BROKER_LIMITS: Final[tuple[tuple[str, Callable[[str], Any], str, str], ...]] = (
    (
        "--max-queue",
        values.positive(int),
        "N",
        "messages one queue (or topic backlog) holds at most (default 1,000,000)",
    ),
    (
        "--max-stored-bytes",
        values.positive(int),
        "N",
        "bytes the broker holds at most: messages (bodies, headers, 256 each) in "
        "queues, backlogs, unacked and in transactions, and subscriptions "
        "(default 256 MiB)",
    ),
    (
        "--max-backlog-bytes",
        values.positive(int),
        "N",
        "body bytes one topic subscription holds for a slow consumer; over it, its oldest "
        "are dropped, with a warning (default 64 MiB)",
    ),
    (
        "--max-subscriptions",
        values.positive(int),
        "N",
        "subscriptions one connection holds at most (default 1000)",
    ),
    (
        "--max-partial-bytes",
        values.positive(int),
        "N",
        "bytes of unfinished frames all connections hold at most (default 128 MiB)",
    ),
    (
        "--frame-timeout",
        values.positive(float),
        "S",
        "seconds a client has to finish a frame it started (default 60)",
    ),
    (
        "--websocket",
        values.port,
        "PORT",
        "also serve STOMP over WebSocket on PORT, 0 picking a free one (needs wsproto)",
    ),
    (
        "--tls-cert",
        Path,
        "PEM",
        "speak TLS only (stomp+ssl://, wss://), with this certificate chain",
    ),
    ("--tls-key", Path, "PEM", "the certificate's private key (default: in the --tls-cert file)"),
    (
        "--max-redeliveries",
        values.at_least_zero,
        "N",
        "move a message redelivered N times to a dead-letter queue (default: no limit)",
    ),
    (
        "--dead-letter-queue",
        str,
        "DESTINATION",
        "where those go (default: /queue/DLQ.<name> per destination)",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stompy`` and its subcommands."""
    parser = _OneLineParser(
        prog="stompy",
        description="Send and receive STOMP messages, or run a broker for tests.",
        epilog="Data goes to stdout, diagnostics to stderr. See 'stompy COMMAND --help'.",
    )
    parser.add_argument("--version", action="version", version=f"stompy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    send = commands.add_parser(
        "send",
        parents=[_client_options("SEND", "priority:9")],
        help="send a message",
        description="Send a message and wait until the broker confirms it (a receipt).",
        epilog="BODY is the text itself, '-' for standard input, or @FILE for a file's "
        "bytes (a body starting with @ can be sent from standard input). "
        "With --lines, each line is its own message.",
    )
    send.add_argument(
        "body",
        metavar="BODY",
        nargs="?",
        default="-",
        help="the body: text, - for stdin (the default), or @FILE",
    )
    send.add_argument("--content-type", metavar="TYPE", help="e.g. application/json")
    send.add_argument(
        "--receipt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for the broker to confirm each message (default: on)",
    )
    send.add_argument(
        "--lines", action="store_true", help="send each line of the body as its own message"
    )
    send.add_argument(
        "--max-body",
        type=values.byte_size,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="the largest body (or line, with --lines) to read and send, e.g. 1000000, "
        "64K, 16M or 1G (default 64M): more is an error, and nothing of it is sent",
    )
    send.set_defaults(handler=run_send)

    subscribe = commands.add_parser(
        "subscribe",
        parents=[_client_options("SUBSCRIBE", "selector or prefetch-count")],
        help="print messages as they arrive",
        description="Subscribe and print each message's body (one per line) until "
        "interrupted, --count messages arrived, or --timeout seconds passed without one. "
        "Each message is acknowledged once printed (read from stdout, when that is a "
        "pipe); what was not printed stays on the destination, however the command ends.",
    )
    shown = subscribe.add_mutually_exclusive_group()
    shown.add_argument(
        "--headers", action="store_true", help="print the headers, a blank line, then the body"
    )
    shown.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per message (the body in base64 when it is not text)",
    )
    subscribe.add_argument(
        "--ack",
        choices=("auto", "client", "client-individual"),
        help="ack mode (default client-individual, or client with STOMP 1.0, which has "
        "no client-individual): each message is acknowledged once "
        "printed, and what was not printed stays on the destination; with auto the "
        "broker forgets each message as it sends it, so messages received and not "
        "printed (past --count, or when stopped) are lost",
    )
    subscribe.add_argument(
        "--count",
        type=values.positive(int),
        metavar="N",
        help="exit after N messages, taking no more than N from the destination",
    )
    subscribe.add_argument(
        "--timeout",
        type=values.positive(float),
        metavar="S",
        help="exit when no message arrives for S seconds (an error if --count is unmet)",
    )
    subscribe.set_defaults(handler=run_subscribe)

    broker = _serving_command(
        commands,
        "broker",
        run_broker,
        port=61613,
        help="run a STOMP broker for tests",
        description="Run stompy's in-process STOMP broker standalone (memory only).",
    )
    broker.add_argument(
        "--users",
        nargs="+",
        type=values.user,
        metavar="LOGIN:PASSCODE",
        help="accept only these logins (default: anyone)",
    )
    broker.add_argument(
        "--vhost",
        action="append",
        type=values.accepted_vhost,
        metavar="HOST",
        help="accepted virtual host (repeatable)",
    )
    _add_heartbeat_option(
        broker, (1000, 1000), "the broker's heart-beat header in ms (default 1000,1000)"
    )
    broker.add_argument(
        "--prefetch", type=values.positive(int), default=100, help="client-ack prefetch"
    )
    for flag, kind, metavar, text in _BROKER_LIMITS:
        broker.add_argument(flag, type=kind, metavar=metavar, help=text)

    proxy = _serving_command(
        commands,
        "proxy",
        run_proxy,
        port=0,
        help="run a fault-injection proxy in front of a broker",
        description="Forward connections to a broker through stompy's fault proxy, "
        "optionally delayed or throttled, to try a client on a slow or narrow link.",
    )
    proxy.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="the broker to forward to, stomp://[login[:passcode]@]host[:port][/vhost]",
    )
    proxy.add_argument(
        "--delay", type=values.seconds, metavar="S", help="delay everything S seconds, both ways"
    )
    proxy.add_argument(
        "--throttle",
        type=values.positive(int),
        metavar="BPS",
        help="forward at most BPS bytes per second each way, per connection",
    )
    return parser


def _serving_command(
    commands: argparse._SubParsersAction[_Parser],
    name: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    port: int,
    help: str,
    description: str,
) -> _Parser:
    """A command that serves until stopped (``broker``, ``proxy``), with the options
    :func:`~stompy.cli._serving.serve_until_stopped` reads: where to listen, the
    backend, how much to log."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.add_argument(
        "--host",
        type=values.listen_host,
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0: every IPv4 interface)",
    )
    parser.add_argument(
        "--port",
        type=values.port,
        default=port,
        help=f"port to listen on (default {port}; 0: a free one)",
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    parser.set_defaults(handler=handler)
    return parser

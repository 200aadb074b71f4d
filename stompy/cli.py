"""The ``stompy`` command (also ``python -m stompy``): send, subscribe, run a broker.

* ``stompy send URL DESTINATION [BODY]`` sends one message (or, with ``--lines``, one
  per line) and exits 0 only once the broker confirmed it with a receipt.
* ``stompy subscribe URL DESTINATION`` prints messages as they arrive: bodies, or
  headers and bodies, or one JSON object per line. It takes from the destination only
  what it printed, however it stops (``--count``, ``--timeout``, a signal, its reader
  gone): each message is acknowledged once printed, and what was received and not
  printed goes back (see :func:`_subscribe_main`).
* ``stompy broker`` runs the in-process test broker standalone, logging each
  connection to stderr; its first line on stdout is ``listening on stomp://host:port``
  so scripts started with ``--port 0`` can read the real port.
* ``stompy proxy --target URL`` runs the fault-injection proxy in front of a broker
  (optionally delaying or throttling what passes); its first line on stdout is
  ``listening on URL``, the address to connect to instead of the broker's.

Data goes to stdout and diagnostics to stderr, so the commands compose in pipelines.
A failure is one line on stderr and a non-zero exit status (1: it did not work,
2: a usage error, 130: ``send`` interrupted); ``--debug`` adds the traceback and the
client's log. Ctrl-C (or SIGTERM) is how ``subscribe`` is meant to stop: it
unsubscribes, disconnects gracefully and exits 0. Passcodes come from the URL,
``--passcode``, ``--ask-passcode`` or ``STOMP_PASSCODE`` and are never printed: where
one stands as a value in an error or log line (a URL, a CONNECT frame, a ``repr``) it
is masked, and nothing else is.

argparse (the standard library's) parses the arguments: stompy's only runtime
dependencies are anyio and typing-extensions.
"""

from __future__ import annotations

import argparse
import array
import base64
import contextlib
import errno
import functools
import getpass
import importlib
import io
import json
import logging
import os
import re
import select
import shutil
import signal
import ssl
import stat
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Final, NoReturn, TextIO

from stompy._version import __version__

if TYPE_CHECKING:
    from stompy._client.blocking import Connection
    from stompy._engine.message import MessageBase

__all__ = (
    "Progress",
    "build_parser",
    "main",
    "message_json",
    "run_broker_command",
    "run_proxy_command",
)

#: Exit statuses.
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED: Final = 143  # 128 + SIGTERM
EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE: the reader of stdout went away

#: Environment variables read when neither the URL nor an option gives a credential.
LOGIN_VARIABLE: Final = "STOMP_LOGIN"
PASSCODE_VARIABLE: Final = "STOMP_PASSCODE"


class CommandError(Exception):
    """A failure reported as one line on stderr with ``status`` as the exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class _Interrupted(BaseException):
    """SIGTERM, turned into an exception so that ``with`` blocks disconnect gracefully."""


# -- argument types ----------------------------------------------------------------------


def _user(text: str) -> tuple[str, str]:
    login, sep, passcode = text.partition(":")
    if not sep or not login:
        raise argparse.ArgumentTypeError(f"want LOGIN:PASSCODE, got {text!r}")
    return login, passcode


#: The longest heart-beat interval, in ms: what a poll() timeout can hold (2**31 - 1).
MAX_HEARTBEAT: Final = 2**31 - 1
#: The most seconds a timeout may be (about 31 years): longer ones overflow a wait.
MAX_SECONDS: Final = 1e9


def _heartbeat(text: str) -> tuple[int, int]:
    want = f"want two numbers of ms from 0 to {MAX_HEARTBEAT} like 1000,1000, got {text!r}"
    send, sep, receive = text.partition(",")
    try:
        beats = (int(send), int(receive))
    except ValueError:
        raise argparse.ArgumentTypeError(want) from None
    if not sep or not all(0 <= beat <= MAX_HEARTBEAT for beat in beats):
        raise argparse.ArgumentTypeError(want)
    return beats


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"want NAME:VALUE, got {text!r}")
    return name.strip(), value


def _ws_header(text: str) -> tuple[str, str]:
    # HTTP ignores the white space around a field value: "Cookie: a=b" means "a=b".
    name, value = _header(text)
    return name, value.strip()


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """A whole number (``int``) or a number of seconds (``float``, finite and at most
    :data:`MAX_SECONDS`) above 0."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"want a number, got {text!r}") from None
        if not value > 0:  # also NaN
            raise argparse.ArgumentTypeError(f"want a number above 0, got {text!r}")
        if kind is float and not value <= MAX_SECONDS:
            raise argparse.ArgumentTypeError(
                f"want a number of seconds up to {MAX_SECONDS:g}, got {text!r}"
            )
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its messages
    return convert


def _at_least_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"want a whole number >= 0, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"want a port from 0 to 65535, got {text!r}")
    return value


def _destination(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"want a destination like /queue/orders, got {text!r}")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a number of seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"want a number of seconds >= 0, got {text!r}")
    return value


# -- the parser --------------------------------------------------------------------------


class _OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr, naming the argument, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


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
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        set_here = _SET_BY_STOMPY.get(self.prog.rsplit(" ", 1)[-1], {})
        for name, _ in getattr(parsed, "extra_headers", None) or ():
            hint = set_here.get(name.lower())
            if hint is not None:
                self.error(f"argument -H/--header: {name!r} is set by stompy: {hint}")
        return parsed, extras


#: Per command, the headers stompy writes itself, and what to use instead of -H.
_SET_BY_STOMPY: Final[dict[str, dict[str, str]]] = {
    "send": {
        "destination": "give it as DESTINATION",
        "receipt": "stompy send always waits for the broker's receipt",
        "transaction": "stompy send sends outside transactions",
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
    type: Callable[[str], tuple[str, str]] = _header,
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
        "--heartbeat", type=_heartbeat, default=default, metavar="SEND,RECEIVE", help=help
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
        "destination", metavar="DESTINATION", type=_destination, help="e.g. /queue/orders"
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
        "--vhost", metavar="HOST", help="the CONNECT host header (default: the URL path, else /)"
    )
    _add_heartbeat_option(
        group, (10_000, 10_000), "heart-beats to offer, in ms (default 10000,10000; 0,0 for none)"
    )
    group.add_argument(
        "--cafile", type=Path, metavar="PEM", help="trust these CA certificates for TLS"
    )
    _add_header_option(
        group,
        "--ws-header",
        dest="ws_headers",
        type=_ws_header,
        help="an HTTP header for the WebSocket handshake of ws:// and wss:// URLs, e.g. "
        "'Authorization: Bearer ...', a Cookie or an Origin (repeatable)",
    )
    group.add_argument(
        "--connect-timeout",
        type=_positive(float),
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
        _positive(int),
        "N",
        "messages one queue (or topic backlog) holds at most (default 1,000,000)",
    ),
    (
        "--max-stored-bytes",
        _positive(int),
        "N",
        "body bytes all queues hold at most (default 256 MiB)",
    ),
    (
        "--websocket",
        _port,
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
        _at_least_zero,
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
    send.set_defaults(handler=_send_main)

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
        default="client-individual",
        help="ack mode (default client-individual): each message is acknowledged once "
        "printed, and what was not printed stays on the destination; with auto the "
        "broker forgets each message as it sends it, so messages received and not "
        "printed (past --count, or when stopped) are lost",
    )
    subscribe.add_argument(
        "--count",
        type=_positive(int),
        metavar="N",
        help="exit after N messages, taking no more than N from the destination",
    )
    subscribe.add_argument(
        "--timeout",
        type=_positive(float),
        metavar="S",
        help="exit when no message arrives for S seconds (an error if --count is unmet)",
    )
    subscribe.set_defaults(handler=_subscribe_main)

    broker = _serving_command(
        commands,
        "broker",
        _broker_main,
        port=61613,
        help="run a STOMP broker for tests",
        description="Run stompy's in-process STOMP broker standalone (memory only).",
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
    _add_heartbeat_option(
        broker, (1000, 1000), "the broker's heart-beat header in ms (default 1000,1000)"
    )
    broker.add_argument("--prefetch", type=_positive(int), default=100, help="client-ack prefetch")
    for flag, kind, metavar, text in _BROKER_LIMITS:
        broker.add_argument(flag, type=kind, metavar=metavar, help=text)

    proxy = _serving_command(
        commands,
        "proxy",
        _proxy_main,
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
        "--delay", type=_seconds, metavar="S", help="delay everything S seconds, both ways"
    )
    proxy.add_argument(
        "--throttle",
        type=_positive(int),
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
    :func:`_serve_until_stopped` reads: where to listen, the backend, how much to log."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port",
        type=_port,
        default=port,
        help=f"port to listen on (default {port}; 0: a free one)",
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    parser.set_defaults(handler=handler)
    return parser


# -- connecting --------------------------------------------------------------------------


#: Where a passcode stands as a value in text stompy may print, each a pattern whose
#: ``value`` group is the passcode: a URL's userinfo (``stomp://app:VALUE@host``), a
#: CONNECT frame's header line, raw or in a ``repr`` of its bytes (``\\npasscode:VALUE``),
#: and a keyword, dict or pair in a ``repr`` (``passcode='VALUE'``, ``'passcode': 'VALUE'``,
#: ``('passcode', 'VALUE')``).
_PASSCODE_VALUES: Final = (
    re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:(?P<value>[^\s/?#]*)@"),
    re.compile(r"(?:^|\\n)passcode:(?P<value>(?:\\[^nr]|\\(?![nr])|[^\\\r\n])*)", re.MULTILINE),
    re.compile(
        r"\bpasscode['\"]?\s*[=:,]\s*(?P<quote>['\"])(?P<value>(?:\\.|(?!(?P=quote)).)*)(?P=quote)"
    ),
)
MASK: Final = "********"


def mask_passcodes(text: str) -> str:
    """``text`` with every passcode that stands in it as a value replaced by ``MASK``.

    Only the value is masked, where it stands (see :data:`_PASSCODE_VALUES`): the same
    characters elsewhere (a passcode ``a`` in "authentication failed") are left alone,
    which both keeps the text readable and does not show where the passcode's letters
    are.
    """
    for pattern in _PASSCODE_VALUES:
        text = pattern.sub(_masked, text)
    return text


def _masked(match: re.Match[str]) -> str:
    start, end = match.span("value")
    whole = match.group(0)
    offset = match.start()
    return whole[: start - offset] + MASK + whole[end - offset :]


class _MaskingFormatter(logging.Formatter):
    """A log line with :func:`mask_passcodes` applied (the library masks its own; this
    also covers what a broker sends back, such as an ERROR quoting the CONNECT)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_passcodes(super().format(record))


def _errors_and_failed_attempts(record: logging.LogRecord) -> bool:
    """What the CLI logs by default with ``--reconnect``: the errors, and each failed
    attempt to connect (retried without end, the first connection too: without a line
    per attempt, a mistyped address would wait without a word)."""
    return record.levelno >= logging.ERROR or record.msg == "could not connect to %s: %s"


def _connection(args: argparse.Namespace) -> Connection:
    """The connection the arguments describe (not connected yet)."""
    from stompy._client.blocking import Connection
    from stompy._engine.options import Reconnect
    from stompy._engine.urls import parse_urls

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
        )
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


# -- send --------------------------------------------------------------------------------


class Progress:
    """A one-line progress report on a terminal: ``[=====>    ]  52%  1,024 sent``.

    Draws at most ten times a second, and only when ``stream`` is a terminal; with a
    ``total`` (bytes) it shows a bar, without one a running count.
    """

    def __init__(self, stream: TextIO, total: int | None = None) -> None:
        self.stream = stream
        self.total = total
        self.enabled = _isatty(stream)
        self._last = 0.0
        self._drawn = False

    def update(self, count: int, done: int = 0, *, force: bool = False) -> None:
        """Show ``count`` messages sent, ``done`` bytes of ``total`` consumed."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        width = shutil.get_terminal_size((80, 24)).columns
        label = f"{count:,} sent"
        if self.total:
            fraction = min(1.0, done / self.total)
            bar_width = max(10, min(40, width - len(label) - 10))
            filled = int(fraction * bar_width)
            arrow = ">" if filled < bar_width else ""
            bar = ("=" * filled + arrow).ljust(bar_width)
            line = f"[{bar}] {fraction:4.0%}  {label}"
        else:
            line = label
        self.stream.write("\r" + line[: width - 1] + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line, so the final summary starts on a clean one."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _binary(stream: IO[Any]) -> BinaryIO:
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else stream  # type: ignore[return-value]


def _open_body(body: str) -> tuple[BinaryIO | None, bytes | str, int | None]:
    """``(stream, literal, size)``: a stream for ``-`` and ``@FILE``, else the literal text."""
    if body == "-":
        return _binary(sys.stdin), b"", None
    if body.startswith("@") and len(body) > 1:
        path = Path(body[1:])
        try:
            stream = path.open("rb")
            return stream, b"", os.fstat(stream.fileno()).st_size
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    return None, body, None


def _lines(stream: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """Each line without its line ending, with the bytes it took."""
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line, len(raw)


def _send_main(args: argparse.Namespace) -> int:
    headers = dict(args.extra_headers)
    conn = _connection(args)
    stream, literal, size = _open_body(args.body)
    send = functools.partial(
        conn.send,
        args.destination,
        headers=headers,
        content_type=args.content_type,
        receipt=args.receipt,
    )
    stdin = _binary(sys.stdin)
    if stream is stdin and _isatty(sys.stdin):
        print("stompy send: reading from the terminal; end with Ctrl-D", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        if stream is not None and stream is not stdin:
            stack.enter_context(stream)
        if not args.lines:
            body = stream.read() if stream is not None else literal
            with conn:
                send(body)
            return EXIT_OK
        if stream is None:
            text = literal.encode() if isinstance(literal, str) else literal
            stream, size = io.BytesIO(text), len(text)
        lines = _lines(stream)
        progress = Progress(sys.stderr, size)
        sent = 0
        try:
            with conn:
                done = 0
                for line, taken in lines:
                    send(line)
                    sent += 1
                    done += taken
                    progress.update(sent, done)
                progress.update(sent, done, force=True)
        finally:
            progress.close()
            noun = "message" if sent == 1 else "messages"
            confirmed = "confirmed" if args.receipt else "sent"
            print(f"{sent:,} {noun} {confirmed}", file=sys.stderr)
    return EXIT_OK


# -- subscribe ---------------------------------------------------------------------------

_TEXT_TYPES: Final = ("json", "xml", "javascript", "yaml", "csv", "charset=")


def _is_text(message: MessageBase) -> str | None:
    """The body as text when it is text (by content-type and by decoding), else ``None``."""
    content_type = (message.content_type or "").lower()
    if content_type and not (
        content_type.startswith("text/") or any(t in content_type for t in _TEXT_TYPES)
    ):
        return None
    try:
        return message.text
    except (UnicodeDecodeError, LookupError):
        return None


def message_json(message: MessageBase) -> dict[str, Any]:
    """What ``stompy subscribe --json`` prints for a message.

    ``body`` is the text when the body is text (``"encoding": "text"``), else its
    base64 (``"encoding": "base64"``). ``headers`` keeps the first of repeated ones.
    """
    text = _is_text(message)
    return {
        "destination": message.destination,
        "message_id": message.message_id,
        "subscription": message.subscription,
        "headers": dict(message.headers),
        "encoding": "text" if text is not None else "base64",
        "body": text if text is not None else base64.b64encode(message.body).decode("ascii"),
    }


def _render(message: MessageBase, args: argparse.Namespace) -> bytes:
    from stompy._core.frames import escape

    if args.json:
        return json.dumps(message_json(message), ensure_ascii=False).encode() + b"\n"
    if args.headers:
        # Escaped as STOMP 1.2 does, so a newline or colon in a value keeps one per line.
        head = "".join(
            f"{escape(name, '1.2')}:{escape(value, '1.2')}\n"
            for name, value in message.frame.headers
        )
        return head.encode() + b"\n" + message.body + b"\n"
    return message.body + b"\n"


#: The most messages ``subscribe`` lets the broker hand over before it acknowledged
#: them (the prefetch, and the subscription's ``max_pending``).
PREFETCH: Final = 100


class _Stdout:
    """Standard output as ``subscribe`` writes it: a message counts as printed once it
    was written, flushed and, when stdout is a pipe, taken by the reader.

    The last part is what ``| head -3`` needs: a reader that reads a block of lines,
    prints three and exits would otherwise take (and drop) messages that were acked
    as "printed" because they sat in the pipe. So a message goes into the pipe only
    once the one before it was read (the pipe's unread byte count, ``FIONREAD``, is
    0); a reader that left (the pipe's write end polls as an error) is a
    :class:`BrokenPipeError`, as a write would be.
    """

    def __init__(self, stream: IO[Any]) -> None:
        self._out = _binary(stream)
        self._fd = -1
        try:
            fd = stream.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and _unread(fd) >= 0:
                self._fd = fd
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation too
            pass  # not a file (tests), or a system without FIONREAD on pipes

    def write(self, data: bytes) -> None:
        """Write ``data`` and return once the reader has it (see the class)."""
        self._out.write(data)
        self._out.flush()
        if self._fd < 0:
            return
        poller = select.poll()
        poller.register(self._fd, 0)  # POLLERR and POLLHUP are always reported
        turns = 0
        while _unread(self._fd) > 0:
            if poller.poll(0):
                raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away")
            # A reader that keeps up has it within a few scheduler turns; one that
            # does not is waited for in sleeps growing to 20 ms.
            turns += 1
            if turns <= 20:
                os.sched_yield()
            else:
                time.sleep(min(0.00005 * 2 ** min(turns - 20, 9), 0.02))


def _unread(fd: int) -> int:
    """Bytes written to pipe ``fd`` and not read yet (-1 where that cannot be known)."""
    try:
        import fcntl
        import termios

        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except (ImportError, OSError):
        return -1
    return count[0]


class _Signals:
    """SIGINT and SIGTERM as exceptions (``KeyboardInterrupt``, :class:`_Interrupted`)
    raised where the main thread is, except inside :meth:`held`: there they wait until
    the block ends, so that acknowledging what was printed is never cut in half."""

    def __init__(self) -> None:
        self._holding = 0
        self._pending: BaseException | None = None

    def handle(self, signum: int, frame: object) -> None:
        stop = KeyboardInterrupt() if signum == signal.SIGINT else _Interrupted()
        if self._holding:
            self._pending = stop
            return
        raise stop

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            stop, self._pending = self._pending, None
            if stop is not None and not self._holding:
                raise stop

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle both signals while the block runs (main thread only: tests run the
        commands in other threads too, where signals cannot be received)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = [(s, signal.signal(s, self.handle)) for s in (signal.SIGINT, signal.SIGTERM)]
        try:
            yield
        finally:
            for signum, handler in previous:
                signal.signal(signum, handler)


_SIGNALS: Final = _Signals()


def _subscribe_main(args: argparse.Namespace) -> int:
    """Print messages, acknowledging each once it was printed, and no other.

    The prefetch (the subscription's ``max_pending``: :data:`PREFETCH`, or
    ``--count`` when that is less) bounds how many unacknowledged messages the broker
    hands over. Whatever was received and not printed (past ``--count``, or when
    Ctrl-C, SIGTERM, ``--timeout`` or a reader gone ends the command) is never
    acknowledged, and the broker delivers it again after the disconnect. With
    ``--ack auto`` the broker forgets each message as it sends it: nothing of that
    holds.
    """
    headers = dict(args.extra_headers)
    count: int | None = args.count
    acking = args.ack != "auto"
    if not acking and count is not None:
        print(
            "stompy subscribe: warning: with --ack auto the broker may send more than "
            f"--count {count} messages, and those not printed are lost",
            file=sys.stderr,
        )
    prefetch = min(PREFETCH, count) if count is not None else PREFETCH
    conn = _connection(args)
    out = _Stdout(sys.stdout)
    received = 0
    try:
        with (
            conn,
            conn.subscribe(
                args.destination, ack=args.ack, headers=headers, max_pending=prefetch
            ) as sub,
        ):
            while count is None or received < count:
                message = sub.get(timeout=args.timeout)
                if message is None:
                    if count is not None:
                        raise CommandError(
                            f"no message for {args.timeout:g} s (received {received} of {count})"
                        )
                    break
                out.write(_render(message, args))
                received += 1
                if acking:
                    with _SIGNALS.held():  # a signal now would leave it printed, not acked
                        message.ack()
    except (KeyboardInterrupt, _Interrupted):
        # Ctrl-C is how a subscriber is meant to stop: by now the ``with`` blocks
        # above have unsubscribed and disconnected gracefully.
        return EXIT_OK
    return EXIT_OK


# -- the broker --------------------------------------------------------------------------


def _broker_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"heartbeats": args.heartbeat, "prefetch": args.prefetch}
    if args.max_queue is not None:
        options["max_queue"] = args.max_queue
    if args.max_stored_bytes is not None:
        options["max_stored_bytes"] = args.max_stored_bytes
    if args.users:
        options["users"] = dict(args.users)
    if args.vhost:
        options["virtual_hosts"] = list(args.vhost)
    if args.max_redeliveries is not None:
        options["max_redeliveries"] = args.max_redeliveries
    if args.dead_letter_queue is not None:
        options["dead_letter_queue"] = args.dead_letter_queue
    return options


def _broker_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
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


async def _until_stopped() -> None:
    """Wait for SIGINT or SIGTERM (forever when not in the main thread: tests run the
    commands in a thread, where signals cannot be received)."""
    import anyio

    if threading.current_thread() is not threading.main_thread():
        await anyio.sleep_forever()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logging.getLogger("stompy.testing").info("stopping on %s", signal.Signals(signum).name)
            return


async def run_broker_command(args: argparse.Namespace, out: TextIO) -> None:
    """Serve until cancelled (or, in the main thread, until SIGINT / SIGTERM)."""

    from stompy.testing import serve

    ws_port: int | None = args.websocket
    async with serve(
        args.host,
        args.port,
        ssl=_broker_tls(args),
        websocket=ws_port is not None,
        websocket_port=ws_port or 0,
        **_broker_options(args),
    ) as broker:
        print(f"listening on {broker.url}", file=out, flush=True)
        if broker.ws_url is not None:
            print(f"listening on {broker.ws_url}", file=out, flush=True)
        await _until_stopped()


def _broker_main(args: argparse.Namespace) -> int:
    from stompy.testing import BrokerConfig

    try:
        BrokerConfig(**_broker_options(args))
        _broker_tls(args)
    except (ValueError, CommandError) as exc:
        print(f"stompy broker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _serve_until_stopped("broker", run_broker_command, args, usage=(ImportError,))


def _serve_until_stopped(
    name: str,
    command: Callable[[argparse.Namespace, TextIO], Awaitable[None]],
    args: argparse.Namespace,
    usage: tuple[type[Exception], ...],
) -> int:
    """Run a serving command (broker, proxy) with its log on stderr until it is stopped;
    its exit status. ``usage`` are the errors that mean the arguments were wrong."""
    import anyio

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
    except OSError as exc:
        print(f"stompy {name}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:  # pragma: no cover - the signal receiver handles SIGINT
        pass
    return EXIT_OK


# -- the proxy ---------------------------------------------------------------------------


def _without_passcode(url: str) -> str:
    """``url`` with the passcode taken out of it (the login stays)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    userinfo, at, place = parts.netloc.rpartition("@")
    login = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{login}{at}{place}"))


async def run_proxy_command(args: argparse.Namespace, out: TextIO) -> None:
    """Proxy until cancelled (or, in the main thread, until SIGINT / SIGTERM).

    The first line on ``out`` is ``listening on URL``, the passcode left out of it.
    """

    from stompy.testing import fault_proxy

    async with fault_proxy(args.target, args.host, args.port) as proxy:
        if args.delay:
            proxy.delay(args.delay)
        if args.throttle is not None:
            proxy.throttle(args.throttle)
        print(f"listening on {_without_passcode(proxy.url)}", file=out, flush=True)
        await _until_stopped()


def _proxy_main(args: argparse.Namespace) -> int:
    from stompy.errors import ConfigurationError

    return _serve_until_stopped("proxy", run_proxy_command, args, usage=(ConfigurationError,))


# -- main --------------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    """One line saying what went wrong, in the user's terms."""
    from stompy.errors import ConnectFailed, ServerError, StompTimeout

    if isinstance(exc, ServerError):
        return f"the broker refused: {exc}"
    if isinstance(exc, ConnectFailed) and "cannot connect" not in str(exc):
        return f"cannot connect: {exc}"
    if isinstance(exc, StompTimeout):
        return f"timed out: {exc}"
    return str(exc) or type(exc).__name__


def _run_client_command(args: argparse.Namespace) -> int:
    from stompy.errors import StompError

    name = f"stompy {args.command}"
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.ERROR
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_MaskingFormatter(f"{name}: %(message)s"))
    logger = logging.getLogger("stompy")
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    if level > logging.INFO and args.reconnect:
        handler.addFilter(_errors_and_failed_attempts)
        logger.setLevel(logging.INFO)
    logger.propagate = False  # one line per event on stderr, whatever the root logger does
    try:
        with _SIGNALS.installed():
            status: int = args.handler(args)
            return status
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Interrupted:
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
        return 2
    if args.command in ("broker", "proxy"):
        status: int = args.handler(args)
        return status
    return _run_client_command(args)

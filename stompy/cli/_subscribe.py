"""``stompy subscribe``: print messages, acknowledging each once it was printed, and
no other."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any, Final

from stompy import AckMode, Connection, Message

# The other name the CLI takes from below the public surface: ``--headers`` shows header
# lines escaped exactly as a STOMP 1.2 frame holds them, and the public API escapes only
# whole frames (stompy.encode, which also rewrites content-length).
from stompy._core.frames import escape
from stompy.cli._connecting import connection
from stompy.cli._output import Stdout
from stompy.cli._signals import SIGNALS, Interrupted
from stompy.cli._status import EXIT_OK, EXIT_USAGE, CommandError

__all__ = ("PREFETCH", "message_json", "run_subscribe")

#: The most messages ``subscribe`` lets the broker hand over before it acknowledged
#: them (the prefetch, and the subscription's ``max_pending``).
PREFETCH: Final = 100

_TEXT_TYPES: Final = ("json", "xml", "javascript", "yaml", "csv", "charset=")


def _is_text(message: Message) -> str | None:
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


def message_json(message: Message) -> dict[str, Any]:
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


def _render(message: Message, args: argparse.Namespace) -> bytes:
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


#: Why ``--ack client-individual`` cannot be on STOMP 1.0, and what to use.
_NO_INDIVIDUAL_ACKS: Final = (
    "--ack client-individual needs STOMP 1.1 or later{}: use --ack client, which "
    "acknowledges each printed message as well"
)


def _ack_mode(args: argparse.Namespace, conn: Connection) -> AckMode:
    """``--ack``, else ``client-individual``, or ``client`` where the connection speaks
    STOMP 1.0: the command acknowledges each message once printed, in the order
    received, which a cumulative ``client`` ACK counts alike.

    Raises :class:`CommandError` for ``--ack client-individual`` on STOMP 1.0.
    """
    if conn.version != "1.0":
        return args.ack or "client-individual"
    if args.ack == "client-individual":
        raise CommandError(_NO_INDIVIDUAL_ACKS.format(" and the broker chose 1.0"))
    return args.ack or "client"


def run_subscribe(args: argparse.Namespace) -> int:
    """Print messages, acknowledging each once it was printed, and no other.

    The prefetch (the subscription's ``max_pending``: :data:`PREFETCH`, or
    ``--count`` when that is less) bounds how many unacknowledged messages the broker
    hands over. Whatever was received and not printed (past ``--count``, or when
    Ctrl-C, SIGTERM, ``--timeout`` or a reader gone ends the command) is never
    acknowledged, and the broker delivers it again after the disconnect. With
    ``--ack auto`` the broker forgets each message as it sends it: nothing of that
    holds.
    """
    if args.ack == "client-individual" and args.stomp_version == ("1.0",):
        raise CommandError(_NO_INDIVIDUAL_ACKS.format(""), EXIT_USAGE)
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
    conn = connection(args)
    out = Stdout(sys.stdout)
    received = 0
    try:
        with (
            conn,
            conn.subscribe(
                args.destination, ack=_ack_mode(args, conn), headers=headers, max_pending=prefetch
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
                    with SIGNALS.held():  # a signal now would leave it printed, not acked
                        message.ack()
    except (KeyboardInterrupt, Interrupted):
        # Ctrl-C is how a subscriber is meant to stop: by now the ``with`` blocks
        # above have unsubscribed and disconnected gracefully.
        return EXIT_OK
    return EXIT_OK

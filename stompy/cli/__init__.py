"""The ``stompy`` command (also ``python -m stompy``): send, subscribe, run a broker.

* ``stompy send URL DESTINATION [BODY]`` sends one message (or, with ``--lines``, one
  per line) and exits 0 only once the broker confirmed it with a receipt.
* ``stompy subscribe URL DESTINATION`` prints messages as they arrive: bodies, or
  headers and bodies, or one JSON object per line. It takes from the destination only
  what it printed, however it stops (``--count``, ``--timeout``, a signal, its reader
  gone): each message is acknowledged once printed, and what was received and not
  printed goes back.
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
"""

from __future__ import annotations

from stompy.cli._broker import run_broker_command
from stompy.cli._main import main
from stompy.cli._masking import MASK, mask_passcodes
from stompy.cli._parser import build_parser
from stompy.cli._proxy import run_proxy_command
from stompy.cli._send import Progress
from stompy.cli._status import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from stompy.cli._subscribe import message_json

__all__ = (
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "MASK",
    "Progress",
    "build_parser",
    "main",
    "mask_passcodes",
    "message_json",
    "run_broker_command",
    "run_proxy_command",
)

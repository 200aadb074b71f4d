"""Passcodes are never printed: where one stands as a value in a line stompy writes to
stderr (an error, a log line), it is replaced by :data:`MASK`, and nothing else is."""

from __future__ import annotations

import logging
import re
from typing import Final

__all__ = ("MASK", "MaskingFormatter", "mask_passcodes")

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


class MaskingFormatter(logging.Formatter):
    """A log line with :func:`mask_passcodes` applied (the library masks its own; this
    also covers what a broker sends back, such as an ERROR quoting the CONNECT)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_passcodes(super().format(record))

"""What CoilMQ 1.1.0 (PyPI) gets wrong, as observed by the interop and conformance suites:
the reasons of its ``quirk`` marks, one each (docs/brokers.md lists them)."""

from __future__ import annotations

from typing import Final

#: The broker kind, as its CONNECTED ``server`` header starts (``coilmq/1.1.0``).
COILMQ: Final = "coilmq"

NO_ACK_HEADER: Final = (
    "its 1.2 MESSAGEs have no ack header (stompy answers them the 1.1 way: id and "
    "subscription the subscription's id, message-id the message's, which it reads)"
)

ONE_AT_A_TIME: Final = (
    "ack='client' delivers one message at a time, the next only after the last one's ACK"
)

INDIVIDUAL_IS_AUTO: Final = (
    "ack='client-individual' is taken as 'auto': no message waits for an ACK, none comes back"
)

NO_NACK: Final = "NACK is not implemented (ERROR 'Nack implementation incomplete')"

NO_REDELIVERED: Final = (
    "a message delivered again after its connection ended has no redelivered header"
)

HEART_BEATS: Final = (
    "with heart-beats negotiated, it stops answering (receipts and beats do not come)"
)

COLON_IN_10: Final = (
    "its parser splits a header line at every ':', so a 1.0 value holding one ends the connection"
)

BURST: Final = (
    "many frames in one write break its parser ('need more than 1 value to unpack') "
    "and end the connection"
)

UNKNOWN_COMMAND: Final = "an unknown command ends the connection without an ERROR"

BARE_NAME: Final = "a destination not under /queue/ is a topic: a bare name is no queue"

OPEN_AFTER_DISCONNECT: Final = "it leaves the connection open after the DISCONNECT's RECEIPT"

ACK_10: Final = (
    "a 1.0 ACK acknowledges nothing of a subscription with an id (it looks the "
    "subscription up by an id header, which a 1.0 ACK does not have)"
)

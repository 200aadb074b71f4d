"""The messages every benchmark uses, built without any contender's code.

A MESSAGE carries the ten headers a broker such as ActiveMQ really sends (its
``message-id`` holds colons, which STOMP 1.1/1.2 escape as ``\\c``, so unescaping is
exercised) and a 100-byte JSON body. The wire bytes come from a template here, not from
stompy's encoder, so a codec bug cannot make the input easier for stompy.
"""

from __future__ import annotations

from typing import Final

DESTINATION: Final = "/queue/bench.orders"
SUBSCRIPTION: Final = "sub-0"
CONTENT_TYPE: Final = "application/json"
BODY_SIZE: Final = 100
_MESSAGE_ID_PREFIX: Final = "ID:bench-host-40123-1700000000000-1:1:1:1:"
_TIMESTAMP_BASE: Final = 1_700_000_000_000


def body(i: int) -> bytes:
    """A 100-byte JSON body, different for every message."""
    text = f'{{"id":{i},"sku":"SKU-{i % 1000:04d}","qty":{i % 7 + 1},"price":"19.99"}}'
    return text.ljust(BODY_SIZE).encode("ascii")


def message_headers(i: int, subscription: str = SUBSCRIPTION) -> tuple[tuple[str, str], ...]:
    """The (unescaped) headers of MESSAGE number ``i``, in wire order."""
    return (
        ("destination", DESTINATION),
        ("message-id", f"{_MESSAGE_ID_PREFIX}{i + 1}"),
        ("subscription", subscription),
        ("content-type", CONTENT_TYPE),
        ("content-length", str(BODY_SIZE)),
        ("timestamp", str(_TIMESTAMP_BASE + i)),
        ("priority", "4"),
        ("expires", "0"),
        ("persistent", "true"),
        ("x-trace-id", f"{i * 2654435761 % 2**32:08x}-bench"),
    )


def send_headers(i: int, *, persistent: bool = True) -> dict[str, str]:
    """The headers a publisher adds to SEND number ``i`` besides destination,
    content-type and content-length (ten headers in all, nine when not persistent).

    Not persistent means no ``persistent`` header at all: RabbitMQ answers
    ``persistent:false`` with an ERROR.
    """
    headers = {
        "timestamp": str(_TIMESTAMP_BASE + i),
        "priority": "4",
        "expires": "0",
        "persistent": "true",
        "correlation-id": f"order-{i}",
        "reply-to": "/queue/bench.replies",
        "x-trace-id": f"{i * 2654435761 % 2**32:08x}-bench",
    }
    if not persistent:
        del headers["persistent"]
    return headers


def _escape12(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


def message_pieces(count: int) -> list[bytes]:
    """MESSAGE frames 0..count-1 as STOMP 1.2 bytes, cut where the subscription id goes.

    ``subscription.join(pieces)`` yields the whole stream for any subscription id in
    one C-level join, which lets the blast server answer a SUBSCRIBE without delay.
    """
    pieces: list[bytes] = []
    tail = b""
    for i in range(count):
        before: list[str] = ["MESSAGE"]
        after: list[str] = []
        target = before
        for name, value in message_headers(i, subscription=""):
            if name == "subscription":
                before.append("subscription:")
                target = after
                continue
            target.append(f"{_escape12(name)}:{_escape12(value)}")
        pieces.append(tail + "\n".join(before).encode())
        tail = ("\n" + "\n".join(after) + "\n\n").encode() + body(i) + b"\x00"
    pieces.append(tail)
    return pieces


def message_stream(count: int, subscription: str = SUBSCRIPTION) -> bytes:
    """``count`` MESSAGE frames back to back, as a STOMP 1.2 broker sends them."""
    return _escape12(subscription).encode().join(message_pieces(count))


def send_stream(
    count: int,
    receipt: str | None = "bench-end",
    *,
    destination: str = DESTINATION,
    persistent: bool = True,
) -> bytes:
    """``count`` SEND frames (ten headers each); the last asks for ``receipt``."""
    frames: list[bytes] = []
    for i in range(count):
        lines = [
            "SEND",
            f"destination:{_escape12(destination)}",
            f"content-type:{CONTENT_TYPE}",
            f"content-length:{BODY_SIZE}",
        ]
        headers = send_headers(i, persistent=persistent)
        lines += [f"{_escape12(k)}:{_escape12(v)}" for k, v in headers.items()]
        if receipt is not None and i == count - 1:
            lines.append(f"receipt:{receipt}")
        frames.append(("\n".join(lines) + "\n\n").encode() + body(i) + b"\x00")
    return b"".join(frames)


def chunks(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into ``size``-byte pieces, as successive ``recv`` calls return it."""
    return [data[i : i + size] for i in range(0, len(data), size)]

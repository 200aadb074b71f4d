"""The SEND the client writes most, each way it can be made: a destination, maybe a
content-type, maybe a receipt, maybe headers of the caller's (the encoder's layouts by
shape, ``encode_send``), written as the general encoder writes it; and the receipt ids
the core makes for it, which never take an id a frame awaits already."""

from __future__ import annotations

import pytest

from stompy._core.accelerator import LOADED
from stompy._core.encoder import encode_frame, encode_send
from stompy._core.frames import Frame
from stompy._core.parser import FrameParser
from tests.test_protocol import connected, sent


@pytest.mark.parametrize("content_type", [None, "application/json"])
@pytest.mark.parametrize("receipt", [None, "r-7"])
@pytest.mark.parametrize("more", [{}, {"reply-to": "/queue/r", "correlation-id": "1"}, {"x": "y"}])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_each_shape_writes_what_the_general_way_writes(
    content_type: str | None, receipt: str | None, more: dict[str, str], version: str
) -> None:
    pairs = [("destination", "/queue/a")]
    if content_type is not None:
        pairs.append(("content-type", content_type))
    if receipt is not None:
        pairs.append(("receipt", receipt))
    for body in (b"", b"x" * 100, b"\x00"):
        want = encode_frame("SEND", pairs, body, version, more)
        for _ in range(2):  # the second time from the layout kept
            assert encode_send("/queue/a", content_type, more, body, version, receipt) == want
    # A shape's layout is not another's: the same names after other pairs.
    (frame,) = FrameParser(version).parse(
        encode_send("/queue/a", content_type, more, b"", version, receipt) or b""
    )
    assert frame.headers == (*pairs, *more.items())


def test_a_value_to_escape_is_escaped_or_left_to_the_general_way() -> None:
    """The Python layouts leave it (None); the accelerator escapes it as the general
    way does. A name the SEND writes itself, in any case, is left either way."""
    cases = [
        ("/queue/a", None, {"a": "b:c"}, None),
        ("/queue/a", None, {"a": "b\nc"}, None),
        ("/queue/a", None, {"a": "b\\c"}, None),
        ("/queue/a", "t\r", {}, "r-1"),
        ("/queue/a", None, {}, "r:1"),
    ]
    for destination, content_type, more, receipt in cases:
        pairs = [("destination", destination)]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        if receipt is not None:
            pairs.append(("receipt", receipt))
        got = encode_send(destination, content_type, more, b"", "1.2", receipt)
        if LOADED:
            assert got == encode_frame("SEND", pairs, b"", "1.2", more)
        else:
            assert got is None
    assert encode_send("/queue/a", None, {"Receipt": "x"}, b"", "1.2") is None


def test_the_receipt_id_made_skips_one_the_caller_asked_for() -> None:
    proto = connected()
    mark = proto.last_id
    # The caller's own id is the one the core would make next: the core makes the next.
    assert proto.send("/queue/a", b"", receipt=f"r-{mark + 1}") == f"r-{mark + 1}"
    made = proto.send("/queue/a", b"", receipt=True)
    assert made == f"r-{mark + 2}"
    assert proto.send("/queue/a", b"", receipt=True) == f"r-{mark + 3}"
    frames: list[Frame] = sent(proto)
    assert [f.get("receipt") for f in frames] == [f"r-{mark + n}" for n in (1, 2, 3)]
    assert set(proto.pending_receipts) == {f"r-{mark + n}" for n in (1, 2, 3)}

"""A ``str`` body is sent as UTF-8: labelled with a content type that names another
charset, every receiver decoded it wrongly ("é" sent under ``charset=latin-1`` read as
"Ã©"). It is a ConfigurationError naming what to do, before anything is sent, from
every send (blocking, asyncio, trio, ``Outgoing``, the sans-IO core); a bytes body in
that charset, or a str body labelled UTF-8 or with no charset, goes as before."""

from __future__ import annotations

import uuid

import anyio
import pytest

import stompy
from stompy import ClientProtocol
from stompy.errors import ConfigurationError
from stompy.testing import run_broker

#: Seconds any wait of these tests may take.
TIMEOUT = 10.0

#: How a content type is given to a send: as content_type=, or as a header.
LATIN = [
    {"content_type": "text/plain;charset=latin-1"},
    {"headers": {"content-type": 'text/plain; charset="ISO-8859-1"'}},
    {"headers": (("content-type", "text/html;charset=windows-1252"),)},
]
FINE = [
    {"content_type": "text/plain;charset=UTF8"},
    {"content_type": "application/json"},
    {"headers": {"content-type": "text/plain; charset=utf-8"}},
]
SAID = "a str body is sent as UTF-8, but the content type names the charset"


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


@pytest.mark.parametrize("given", LATIN)
def test_a_str_body_under_another_charset_is_refused_blocking(given: dict[str, object]) -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        for receipt in (False, True):
            with pytest.raises(ConfigurationError, match=SAID):
                conn.send(dest, "é", receipt=receipt, **given)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match=SAID):
            stompy.Outgoing(dest, "é", **given)  # type: ignore[arg-type]
        conn.send(dest, "é".encode("latin-1"), receipt=True, **given)  # type: ignore[arg-type]
        sub = conn.subscribe(dest)
        got = sub.get(TIMEOUT)
        assert got is not None
        assert got.text == "é"  # read in its charset
        assert broker.queue_depth(dest) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("given", LATIN)
async def test_a_str_body_under_another_charset_is_refused_async(given: dict[str, object]) -> None:
    dest = queue()
    with run_broker() as broker, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=TIMEOUT) as conn:
            for receipt in (False, True):
                with pytest.raises(ConfigurationError, match=SAID):
                    await conn.send(dest, "é", receipt=receipt, **given)  # type: ignore[arg-type]
            assert broker.queue_depth(dest) == 0


@pytest.mark.parametrize("given", FINE)
def test_a_str_body_labelled_utf8_or_without_a_charset_goes(given: dict[str, object]) -> None:
    dest = queue()
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=TIMEOUT) as conn:
        sub = conn.subscribe(dest)
        conn.send(dest, "é", receipt=True, **given)  # type: ignore[arg-type]
        got = sub.get(TIMEOUT)
        assert got is not None
        assert got.body == "é".encode()


def test_the_core_refuses_it_too() -> None:
    proto = ClientProtocol()
    proto.connect(host="/")
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00", 0.0)
    assert proto.next_event() is not None
    proto.data_to_send()
    with pytest.raises(ConfigurationError, match=SAID + " 'latin-1'"):
        proto.send("/queue/a", "é", content_type="text/plain;charset=latin-1")
    assert proto.data_to_send() == b""
    # The value of a header is not shown: only a charset that looks like one.
    with pytest.raises(ConfigurationError, match=SAID + ": pass"):
        proto.send("/queue/a", "é", content_type="text/plain;charset=sécret value")

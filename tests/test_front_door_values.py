"""Values a newcomer writes that were taken without a word, or refused in one place and
not in its twin: an empty virtual host, a capitalised Content-Type, a batch of sends
that stops partway."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any, Final

import anyio
import pytest

import stompy
from stompy.testing import run_broker

URL = "stomp://127.0.0.1:1"  # nobody listens: each is refused before connecting


def test_an_empty_virtual_host_is_refused_by_every_client() -> None:
    # It was sent as "host:" with no value, which names no virtual host.
    said = r"host: must name a virtual host \(None: the URL's path, else /\), got ''"
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.Connection(URL, host="")
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.AsyncConnection(URL, host="")
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.send(URL, "/queue/x", "x", host="")


#: A ``Content-Type`` (not in lower case) where stompy writes ``content-type`` itself:
#: beside ``content_type=``, or with a ``str`` body (labelled text/plain). Both were
#: sent, and receivers read the one the user did not mean.
_CAPITALISED: Final[list[dict[str, Any]]] = [
    {"body": b"{}", "headers": {"Content-Type": "application/json"}, "content_type": "text/x"},
    {"body": b"{}", "headers": {"CONTENT-TYPE": "a/b"}, "content_type": "a/b"},
    {"body": "{}", "headers": {"Content-Type": "application/json"}},
    {"body": "{}", "headers": {"Content-type": "application/json"}},
]
_SAID: Final = r"headers: 'Content-[Tt]ype' would be sent beside the content-type stompy writes"


def _sends(conn: Any, kwargs: dict[str, Any]) -> list[Any]:
    """Each way to send ``kwargs``'s message on ``conn`` (a call to make, or await)."""
    body = kwargs["body"]
    options = {k: v for k, v in kwargs.items() if k != "body"}
    return [
        lambda: conn.send("/queue/ct", body, **options),
        lambda: conn.send("/queue/ct", body, **options, receipt=True),
        lambda: conn.send(
            "/queue/ct", body, **{**options, "headers": [*options["headers"].items()]}
        ),
        lambda: conn.request("/queue/ct", body, **options, timeout=1),
        lambda: conn.send_many([stompy.Outgoing("/queue/ct", body, **options)]),
    ]


@pytest.mark.parametrize("kwargs", _CAPITALISED)
def test_a_capitalised_content_type_where_stompy_writes_one_is_refused(
    kwargs: dict[str, Any],
) -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        for call in _sends(conn, kwargs):
            with pytest.raises(
                stompy.ConfigurationError, match=_SAID.replace("[Tt]ype", "[Tt]ype|CONTENT-TYPE")
            ):
                call()
        with pytest.raises(stompy.ConfigurationError, match="STOMP header names are case"):
            stompy.send(broker.url, "/queue/ct", **kwargs)
        # Nothing went out; the connection goes on; a bytes body alone keeps the header
        # as written (a header of its own), where stompy writes no content-type.
        conn.send("/queue/ct", b"raw", headers={"Content-Type": "a/b"}, receipt=True)
        with conn.subscribe("/queue/ct") as sub:
            message = sub.get(timeout=10)
        assert message is not None
        assert message.body == b"raw"
        assert (message.content_type, message.headers["Content-Type"]) == (None, "a/b")
        assert broker.queue_depth("/queue/ct") == 0


@pytest.mark.anyio
@pytest.mark.parametrize("kwargs", _CAPITALISED)
async def test_a_capitalised_content_type_where_stompy_writes_one_is_refused_async(
    kwargs: dict[str, Any],
) -> None:
    with run_broker() as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn:
            for call in _sends(conn, kwargs):
                with pytest.raises(stompy.ConfigurationError, match="STOMP header names"):
                    await call()
            await conn.send("/queue/ct", b"raw", headers={"Content-Type": "a/b"}, receipt=True)
            assert broker.queue_depth("/queue/ct") == 1
        with pytest.raises(stompy.ConfigurationError, match="STOMP header names are case"):
            await stompy.send_async(broker.url, "/queue/ct", **kwargs)
        assert broker.queue_depth("/queue/ct") == 1


#: A header stompy writes itself on a SEND, given in another case, or a content-length
#: that is not the body's: each was sent (beside the one stompy wrote, or alone, where
#: a receiver reads the lower case only) or replaced without a word. ``(headers, said)``.
_WRITTEN: Final[list[tuple[dict[str, str], str]]] = [
    ({"Destination": "/queue/other"}, "'Destination' is the 'destination' header"),
    ({"RECEIPT": "r-1"}, "ask for one with receipt=True"),
    ({"Transaction": "tx-1"}, r"send\(\.\.\., transaction=\)"),
    ({"Content-Length": "2"}, "'Content-Length' is the 'content-length' header"),
    ({"content-length": "99"}, "'content-length' is '99' and the body is 2 bytes"),
]
#: The same of a SUBSCRIBE's headers.
_SUBSCRIBE_WRITTEN: Final = [
    ({"Destination": "/queue/other"}, "'Destination' is the 'destination' header"),
    ({"Id": "mine"}, "give the id argument"),
    ({"ACK": "client"}, "give the ack argument"),
    ({"Receipt": "r-1"}, "ask for one with receipt=True"),
]


def _each_send(conn: Any, tx: Any, headers: dict[str, str]) -> list[Any]:
    """Each way to send a two-byte body with ``headers`` on ``conn`` (to make, or await)."""
    return [
        lambda: conn.send("/queue/own", b"{}", headers=headers),
        lambda: conn.send("/queue/own", "{}", headers=headers, receipt=True),
        lambda: conn.send("/queue/own", b"{}", headers=[*headers.items()], content_type="a/b"),
        lambda: tx.send("/queue/own", b"{}", headers=headers),
        lambda: conn.request("/queue/own", b"{}", headers=headers, timeout=1),
        lambda: conn.send_many([stompy.Outgoing("/queue/own", b"{}", headers)]),
    ]


def test_a_header_stompy_writes_in_another_case_is_refused() -> None:
    """``Destination``, ``Receipt``, ``Transaction``, ``Content-Length`` (any case but
    the lower) and a content-length that is not the body's are a ConfigurationError
    saying what to give instead, from every send; nothing goes out. A content-length of
    the body's length is taken (written once)."""
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        tx = conn.transaction()
        for headers, said in _WRITTEN:
            for call in _each_send(conn, tx, headers):
                with pytest.raises(stompy.ConfigurationError, match=said):
                    call()
            with pytest.raises(stompy.ConfigurationError, match=said):
                stompy.send(broker.url, "/queue/own", b"{}", headers=headers)
        for headers, said in _SUBSCRIBE_WRITTEN:
            with pytest.raises(stompy.ConfigurationError, match=said):
                conn.subscribe("/queue/own", headers=headers)
        tx.commit(receipt=True)
        assert (broker.queue_depth("/queue/own"), broker.queue_depth("/queue/other")) == (0, 0)
        conn.send("/queue/own", "é", headers={"content-length": "2"}, receipt=True)
        with conn.subscribe("/queue/own") as sub:
            message = sub.get(timeout=10)
        assert message is not None
        assert (message.text, message.headers["content-length"]) == ("é", "2")


@pytest.mark.anyio
async def test_a_header_stompy_writes_in_another_case_is_refused_async() -> None:
    with run_broker() as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn:
            tx = await conn.transaction()
            for headers, said in _WRITTEN:
                for call in _each_send(conn, tx, headers):
                    with pytest.raises(stompy.ConfigurationError, match=said):
                        await call()
                with pytest.raises(stompy.ConfigurationError, match=said):
                    await stompy.send_async(broker.url, "/queue/own", b"{}", headers=headers)
            for headers, said in _SUBSCRIBE_WRITTEN:
                with pytest.raises(stompy.ConfigurationError, match=said):
                    await conn.subscribe("/queue/own", headers=headers)
            await tx.commit(receipt=True)
            assert broker.queue_depth("/queue/own") == 0
            await conn.send("/queue/own", b"{}", headers={"content-length": "2"}, receipt=True)
            assert broker.queue_depth("/queue/own") == 1


#: send_many() stopped partway: by a body over the broker's limit (known only on the
#: connection) in the second chunk, or by the iterable itself, making the 701st message.
#: Each went out in part, and nothing said how much; the too-large body's error said
#: "nothing was sent".
_LIMIT: Final = 64
_SENT_FIRST: Final = "send_many(): the first {} messages of the batch went out"


def _too_large_at(n: int) -> list[stompy.Outgoing]:
    ok = [stompy.Outgoing("/queue/many", b"ok") for _ in range(n)]
    return [*ok, stompy.Outgoing("/queue/many", b"x" * (_LIMIT + 1)), *ok[:3]]


def _failing_at(n: int) -> Iterator[stompy.Outgoing]:
    for i in range(n + 10):
        if i == n:
            raise ValueError("the application's own")
        yield stompy.Outgoing("/queue/many", b"ok")


def _notes(error: BaseException) -> list[str]:
    return list(getattr(error, "__notes__", []))


def test_a_str_body_that_is_not_text_is_refused_where_the_outgoing_is_made() -> None:
    # It was refused by the send, with the messages before it in the batch sent.
    for body in ("a\udc80b", "\ud800"):
        with pytest.raises(stompy.errors.LocalProtocolError, match="body is not valid text"):
            stompy.Outgoing("/queue/many", body)
    for fine in ("grüße ✓", "ascii", "", b"\xff"):
        assert stompy.Outgoing("/queue/many", fine).body == fine


def test_send_many_stopped_partway_says_how_many_went_out() -> None:
    with run_broker(limits=stompy.FrameLimits(max_body=_LIMIT)) as broker:
        with stompy.Connection(broker.url) as conn:
            with pytest.raises(stompy.errors.MessageTooLarge) as raised:
                conn.send_many(_too_large_at(600), receipt=True)
            assert _notes(raised.value) == [
                _SENT_FIRST.format(600)
                + " (unconfirmed: the receipt was to come with the last), none after them"
            ]
            conn.send("/queue/other", "the connection goes on", receipt=True)
            assert broker.queue_depth("/queue/many") == 600
            with pytest.raises(stompy.errors.MessageTooLarge) as raised:
                conn.send_many(_too_large_at(5)[:6])  # the last, alone
            assert _notes(raised.value) == [
                "send_many(): the 5 messages of the batch before the last went out; the "
                "last is the one this error is about"
            ]
            with pytest.raises(ValueError, match="the application's own") as failed:
                conn.send_many(_failing_at(700))
            assert _notes(failed.value) == [_SENT_FIRST.format(512) + ", none after them"]
            with pytest.raises(stompy.errors.MessageTooLarge) as raised:
                conn.send_many(_too_large_at(0))
            assert _notes(raised.value) == []  # nothing went out: the error says so
            conn.send("/queue/other", "still", receipt=True)
            assert broker.queue_depth("/queue/many") == 600 + 5 + 512


@pytest.mark.anyio
async def test_send_many_stopped_partway_says_how_many_went_out_async() -> None:
    with run_broker(limits=stompy.FrameLimits(max_body=_LIMIT)) as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(stompy.errors.MessageTooLarge) as raised:
                await conn.send_many(_too_large_at(600), receipt=True)
            assert _notes(raised.value) == [
                _SENT_FIRST.format(600)
                + " (unconfirmed: the receipt was to come with the last), none after them"
            ]
            await conn.send("/queue/other", "the connection goes on", receipt=True)
            assert broker.queue_depth("/queue/many") == 600
            with pytest.raises(stompy.errors.MessageTooLarge) as raised:
                await conn.send_many(_too_large_at(5)[:6])
            assert _notes(raised.value) == [
                "send_many(): the 5 messages of the batch before the last went out; the "
                "last is the one this error is about"
            ]
            with pytest.raises(ValueError, match="the application's own") as failed:
                await conn.send_many(_failing_at(700))
            assert _notes(failed.value) == [_SENT_FIRST.format(512) + ", none after them"]
            await conn.send("/queue/other", "still", receipt=True)
            assert broker.queue_depth("/queue/many") == 600 + 5 + 512


#: As a newcomer's untyped code has it.
_PAIRS: Any = [("a", "b")]


def test_request_headers_as_pairs_are_named() -> None:
    # send() takes pairs; request() merges its headers with reply-to and correlation-id,
    # and said "'list' object is not a mapping".
    said = r"headers: expected a mapping of str to str, got \[\('a', 'b'\)\] \(list\)"
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises(TypeError, match=said):
            conn.request("/queue/asked", "x", headers=_PAIRS, timeout=1)
        conn.send("/queue/other", "the connection goes on", receipt=True)
        assert broker.queue_depth("/queue/asked") == 0


@pytest.mark.anyio
async def test_request_headers_as_pairs_are_named_async() -> None:
    said = r"headers: expected a mapping of str to str, got \[\('a', 'b'\)\] \(list\)"
    with run_broker() as broker, anyio.fail_after(10):
        async with stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(TypeError, match=said):
                await conn.request("/queue/asked", "x", headers=_PAIRS, timeout=1)
            await conn.send("/queue/other", "the connection goes on", receipt=True)
        assert broker.queue_depth("/queue/asked") == 0


_NOT_TEXT: Final = r"SEND header 'a': its value is not valid text \(surrogates not allowed"


def test_a_header_that_is_not_text_is_named() -> None:
    # It said "'utf-8' codec can't encode character '\udcff' in position 66".
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises(stompy.errors.LocalProtocolError, match=_NOT_TEXT):
            conn.send("/queue/t", "x", headers={"a": "\udcff"})
        with pytest.raises(stompy.errors.LocalProtocolError, match="'destination': its value"):
            conn.subscribe("/queue/\udcff")
        conn.send("/queue/t", "the connection goes on", receipt=True)
        assert broker.queue_depth("/queue/t") == 1


@pytest.mark.anyio
async def test_a_header_that_is_not_text_is_named_async() -> None:
    with run_broker() as broker, anyio.fail_after(10):
        async with stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(stompy.errors.LocalProtocolError, match=_NOT_TEXT):
                await conn.send("/queue/t", "x", headers={"a": "\udcff"}, receipt=True)
            await conn.send("/queue/t", "the connection goes on", receipt=True)
        assert broker.queue_depth("/queue/t") == 1


class _AsyncCall:
    """A handler object whose ``__call__`` is ``async def``: subscribe() cannot tell."""

    def __init__(self) -> None:
        self.ran = False

    async def __call__(self, message: Any) -> None:
        self.ran = True  # pragma: no cover - a Connection does not await it


def test_a_callback_returning_a_coroutine_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # It was closed with a WARNING on the stompy logger, which a program without logging
    # never sees: the callback never ran, and with ack="auto" its message was gone.
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    handler = _AsyncCall()
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with conn.subscribe("/queue/cb", on_message=handler):
            conn.send("/queue/cb", "x", receipt=True)
            broker.wait_until(lambda: bool(unraisable), timeout=10)
    (report,) = unraisable
    assert report.exc_type is TypeError
    assert "which a Connection does not await: it did not run" in str(report.exc_value)
    assert report.err_msg.startswith("Exception ignored in the on_message callback of <")
    assert report.object.text == "x"
    assert not handler.ran


def test_a_request_or_reply_header_in_another_case_is_refused() -> None:
    """request()'s Reply-To or Correlation-Id and reply()'s Correlation-Id (any case but
    the lower) were sent beside the reply-to / correlation-id stompy writes: the replier,
    or the requester, read the one not meant. Refused, as their lower case is (request)."""
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        for name in ("Reply-To", "CORRELATION-ID"):
            with pytest.raises(stompy.ConfigurationError, match=rf"\(as '{name}'\) itself"):
                conn.request("/queue/rq", "x", headers={name: "mine"}, timeout=1)
        assert broker.queue_depth("/queue/rq") == 0
        conn.send("/queue/rq", "x", headers={"reply-to": "/queue/rp", "correlation-id": "c-1"})
        with conn.subscribe("/queue/rq") as sub:
            request = sub.get(timeout=10)
        assert request is not None
        with pytest.raises(stompy.ConfigurationError, match="'Correlation-Id' would be sent"):
            request.reply("answer", headers={"Correlation-Id": "mine"})
        request.reply("answer", headers={"correlation-id": "mine"}, receipt=True)
        with conn.subscribe("/queue/rp") as sub:
            reply = sub.get(timeout=10)
        assert reply is not None
        assert reply.headers.get("correlation-id") == "mine"
        assert broker.queue_depth("/queue/rp") == 0


@pytest.mark.anyio
async def test_a_request_or_reply_header_in_another_case_is_refused_async() -> None:
    with run_broker() as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn:
            for name in ("Reply-To", "CORRELATION-ID"):
                with pytest.raises(stompy.ConfigurationError, match=rf"\(as '{name}'\) itself"):
                    await conn.request("/queue/rq", "x", headers={name: "mine"}, timeout=1)
            await conn.send("/queue/rq", "x", headers={"reply-to": "/queue/rp"}, receipt=True)
            await conn.send(
                "/queue/rq", "x", headers={"reply-to": "/queue/rp", "correlation-id": "c-1"}
            )
            async with conn.subscribe("/queue/rq") as sub:
                first, second = await sub.get(timeout=10), await sub.get(timeout=10)
            assert first is not None
            assert second is not None
            # No correlation-id to copy: the header is the user's alone, sent as written.
            await first.reply("answer", headers={"Correlation-Id": "mine"}, receipt=True)
            with pytest.raises(stompy.ConfigurationError, match="'Correlation-Id' would be"):
                await second.reply("answer", headers={"Correlation-Id": "mine"})
            assert broker.queue_depth("/queue/rp") == 1


def test_an_infinite_timeout_says_none_waits_without_a_limit() -> None:
    """``get(timeout=math.inf)`` ("forever", as some waits take it) is refused saying
    that None is how: it said only that the timeout must be at most 1000000."""
    said = r"<= 1000000 \(None: no limit\), got inf"
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with conn.subscribe("/queue/inf") as sub:
            with pytest.raises(stompy.ConfigurationError, match=said):
                sub.get(timeout=math.inf)
            with pytest.raises(stompy.ConfigurationError, match=said):
                sub.get_batch(1, timeout=math.inf)


@pytest.mark.anyio
async def test_an_infinite_timeout_says_none_waits_without_a_limit_async() -> None:
    said = r"<= 1000000 \(None: no limit\), got inf"
    with run_broker() as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn, conn.subscribe("/queue/i") as sub:
            with pytest.raises(stompy.ConfigurationError, match=said):
                await sub.get(timeout=math.inf)
            with pytest.raises(stompy.ConfigurationError, match=said):
                await sub.get_batch(1, timeout=math.inf)


def test_a_header_stompy_sets_is_refused_naming_what_takes_it() -> None:
    """The refusal of a header stompy sets said "use the receipt argument" to a one-shot
    send (which has none: it always asks), "use the transaction argument" to a
    transaction's send (which has none: it is in one) and "use the heart_beat argument"
    of CONNECT's heart-beat (the option is heartbeats)."""
    with run_broker() as broker:
        with pytest.raises(stompy.LocalProtocolError, match=r"a one-shot send always does\)$"):
            stompy.send(broker.url, "/queue/own", "x", headers={"receipt": "r-1"})
        with stompy.Connection(broker.url) as conn:
            tx = conn.transaction()
            with pytest.raises(stompy.LocalProtocolError, match=r"its send\(\), or send\("):
                tx.send("/queue/own", "x", headers={"transaction": "tx-9"})
            tx.abort()
        with pytest.raises(stompy.LocalProtocolError, match=r"give the heartbeats option$"):
            with stompy.Connection(broker.url, headers={"heart-beat": "0,0"}):
                pass  # pragma: no cover
        assert broker.queue_depth("/queue/own") == 0

"""Misuses a newcomer makes that Python would answer vaguely: each says what to do.

The blocking client in ``async with``, the async one in ``with``; a reconnect policy
whose longest delay is shorter than its first (issue 34, found by trying the docs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import pytest

import stompy
import stompy._core.protocol
from stompy.testing import run_broker, serve


def test_the_async_client_in_a_plain_with_says_async_with() -> None:
    conn: Any = stompy.AsyncConnection("stomp://127.0.0.1:1")
    with pytest.raises(TypeError, match="async with AsyncConnection"):
        with conn:
            pass


def test_the_blocking_client_in_async_with_says_with() -> None:
    async def main() -> None:
        with run_broker() as broker:
            conn = stompy.Connection(broker.url)
            opened: Any = conn  # as a newcomer's untyped code has it
            with pytest.raises(TypeError, match=r"`with Connection\(\.\.\.\) as conn:`"):
                async with opened:
                    pass
            assert not conn.connected  # nothing was opened

    anyio.run(main)


def test_a_reconnect_whose_longest_delay_is_shorter_than_its_first_is_refused() -> None:
    with pytest.raises(stompy.ConfigurationError, match="max_delay") as raised:
        stompy.Reconnect(initial_delay=10, max_delay=1)
    assert "initial_delay" in str(raised.value)
    stompy.Reconnect(initial_delay=1, max_delay=1)  # equal is fine


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda conn: conn.send("/queue/m", "x", headers=["ab"]), "headers"),
        (lambda conn: conn.send("/queue/m", "x", receipt=1), "receipt"),
        (lambda conn: conn.send("/queue/m", "x", receipt="yes"), "receipt"),
        (lambda conn: conn.send("/queue/m", "x", receipt=None), "receipt"),
        (lambda conn: conn.send_many([stompy.Outgoing("/queue/m", "x")], receipt=1), "receipt"),
        (lambda conn: conn.subscribe("/queue/n", id=5), "id"),
        (lambda conn: conn.subscribe("/queue/n", receipt="yes"), "receipt"),
    ],
)
def test_a_flag_or_header_of_the_wrong_type_is_refused_with_nothing_sent(
    call: Any, match: str
) -> None:
    # A two-letter str unpacked as a header pair ("ab" -> a:b), receipt="yes" became
    # the receipt's id, receipt=1 or id=5 named a header the user never wrote.
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises(TypeError, match=match):
            call(conn)
        conn.send("/queue/after", "ok", receipt=True)  # the connection lives on
        assert broker.queue_depth("/queue/m") == 0  # no SEND went out
        conn.send("/queue/n", "kept", receipt=True)  # no SUBSCRIBE went out: it stays
        assert broker.queue_depth("/queue/n") == 1


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_port_out_of_range_is_a_configuration_error(port: int) -> None:
    with pytest.raises(stompy.ConfigurationError, match="port"), run_broker(port=port):
        pass


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_commit_or_abort_of_the_wrong_type_leaves_the_transaction_open(end: str) -> None:
    # receipt="yes" was refused only after the transaction counted as finished: no
    # COMMIT went out, and the commit the user tried next said "already finished", so
    # what was sent in it was lost (aborted with the connection).
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        tx = conn.transaction()
        tx.send("/queue/tx", "in the transaction")
        with pytest.raises(TypeError, match="receipt"):
            getattr(tx, end)(receipt="yes")
        tx.send("/queue/tx", "still open")
        getattr(tx, end)(receipt=True)
        assert broker.queue_depth("/queue/tx") == (2 if end == "commit" else 0)


@pytest.mark.anyio
@pytest.mark.parametrize("end", ["commit", "abort"])
async def test_a_commit_or_abort_of_the_wrong_type_leaves_the_transaction_open_async(
    end: str,
) -> None:
    with run_broker() as broker, anyio.fail_after(10):
        async with stompy.AsyncConnection(broker.url) as conn:
            tx = await conn.transaction()
            await tx.send("/queue/tx", "in the transaction")
            with pytest.raises(TypeError, match="receipt"):
                await getattr(tx, end)(receipt="yes")
            await tx.send("/queue/tx", "still open")
            await getattr(tx, end)(receipt=True)
            assert broker.queue_depth("/queue/tx") == (2 if end == "commit" else 0)


#: A ``content-type`` header and a ``content_type=`` that differ: one of the two was
#: dropped without a word (``content_type`` won). Each call is given a connection and
#: the message that a reply answers, and sends to ``/queue/ct`` (the reply: to its
#: ``reply-to``, the same queue), or ``/queue/ct-request`` (a request).
_TWO_CONTENT_TYPES: Final[dict[str, Any]] = {
    "headers": {"content-type": "text/x"},
    "content_type": "text/y",
}
_SENDS_GIVEN_TWO_CONTENT_TYPES: Final[list[Any]] = [
    lambda conn, message: conn.send("/queue/ct", "x", **_TWO_CONTENT_TYPES),
    lambda conn, message: conn.send("/queue/ct", b"x", **_TWO_CONTENT_TYPES, receipt=True),
    lambda conn, message: conn.send(
        "/queue/ct", "x", headers=[("content-type", "text/x")], content_type="text/y"
    ),
    lambda conn, message: message.reply("x", **_TWO_CONTENT_TYPES),
    lambda conn, message: conn.request("/queue/ct-request", "x", **_TWO_CONTENT_TYPES, timeout=1),
    lambda conn, message: conn.send_many(
        [stompy.Outgoing("/queue/ct", "x", _TWO_CONTENT_TYPES["headers"], "text/y")]
    ),
]
_SEND_NAMES: Final = ["send", "send-receipt", "send-pairs", "reply", "request", "send_many"]


@pytest.mark.parametrize("call", _SENDS_GIVEN_TWO_CONTENT_TYPES, ids=_SEND_NAMES)
def test_a_content_type_given_twice_with_two_values_is_refused(call: Any) -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with conn.subscribe("/queue/asked") as sub:
            conn.send("/queue/asked", "?", headers={"reply-to": "/queue/ct"})
            message = sub.get(timeout=10)
        with pytest.raises(stompy.ConfigurationError, match=r"content_type.*content-type"):
            call(conn, message)
        with conn.transaction() as tx, pytest.raises(stompy.ConfigurationError):
            tx.send("/queue/ct", "x", **_TWO_CONTENT_TYPES)
        # Nothing went out; the connection is still usable; one value said twice is
        # no conflict.
        conn.send("/queue/ct", "x", headers={"content-type": "text/x"}, content_type="text/x")
        conn.send("/queue/ct", "x", headers={"content-type": "text/z"}, receipt=True)
        assert broker.queue_depth("/queue/ct-request") == 0
        assert broker.queue_depth("/queue/ct") == 2
        with conn.subscribe("/queue/ct") as sub:
            sent = [sub.get(timeout=10) for _ in range(2)]
        assert [m.content_type if m else None for m in sent] == ["text/x", "text/z"]


@pytest.mark.anyio
@pytest.mark.parametrize("call", _SENDS_GIVEN_TWO_CONTENT_TYPES, ids=_SEND_NAMES)
async def test_a_content_type_given_twice_with_two_values_is_refused_async(call: Any) -> None:
    with run_broker() as broker, anyio.fail_after(10):
        async with stompy.AsyncConnection(broker.url) as conn:
            async with conn.subscribe("/queue/asked") as sub:
                await conn.send("/queue/asked", "?", headers={"reply-to": "/queue/ct"})
                message = await sub.get(timeout=10)
            with pytest.raises(stompy.ConfigurationError, match=r"content_type.*content-type"):
                await call(conn, message)
            async with await conn.transaction() as tx:
                with pytest.raises(stompy.ConfigurationError):
                    await tx.send("/queue/ct", "x", **_TWO_CONTENT_TYPES)
            await conn.send(
                "/queue/ct", "x", headers={"content-type": "text/x"}, content_type="text/x"
            )
            await conn.send("/queue/ct", "x", headers={"content-type": "text/z"}, receipt=True)
            assert broker.queue_depth("/queue/ct-request") == 0
            assert broker.queue_depth("/queue/ct") == 2
            async with conn.subscribe("/queue/ct") as sub:
                sent = [await sub.get(timeout=10) for _ in range(2)]
            assert [m.content_type if m else None for m in sent] == ["text/x", "text/z"]


def test_a_one_shot_send_given_two_content_types_is_refused() -> None:
    with run_broker() as broker:
        with pytest.raises(stompy.ConfigurationError, match="content_type"):
            stompy.send(broker.url, "/queue/ct", "x", **_TWO_CONTENT_TYPES)

        async def main() -> None:
            with pytest.raises(stompy.ConfigurationError, match="content_type"):
                await stompy.send_async(broker.url, "/queue/ct", "x", **_TWO_CONTENT_TYPES)

        anyio.run(main)
        assert broker.queue_depth("/queue/ct") == 0


#: ``Outgoing(...)`` arguments that ``send()`` refuses (as ``send(destination, body,
#: headers=..., content_type=...)``). Outgoing took them, and ``send_many()`` failed at
#: the message, with the messages before it sent.
_NOT_SENDABLE: Final[list[tuple[Any, ...]]] = [
    (5, "x"),
    ("", "x"),
    ("/queue/o", 5),
    ("/queue/o", bytearray(b"x")),
    ("/queue/o", "x", {"a": 2}),
    ("/queue/o", "x", {1: "a"}),
    ("/queue/o", "x", "ab"),
    ("/queue/o", "x", 5),
    ("/queue/o", "x", [("a", 1)]),
    ("/queue/o", "x", {"receipt": "r"}),
    ("/queue/o", "x", {"destination": "/queue/p"}),
    ("/queue/o", "x", {"a": "b", "transaction": "t"}),
    ("/queue/o", "x", [("transaction", "t")]),
    ("/queue/o", "x", None, 5),
    ("/queue/o", "x", {"content-type": "a/b"}, "c/d"),
]


def _as_send(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    destination, body, *rest = args
    return (destination, body), dict(zip(("headers", "content_type"), rest, strict=False))


def _same_error(made: BaseException, sent: BaseException) -> None:
    assert type(made) is type(sent)
    if stompy._core.protocol.__file__.endswith(".py"):  # compiled, its own words
        assert str(made) == str(sent)


@pytest.mark.parametrize("args", _NOT_SENDABLE, ids=repr)
def test_an_outgoing_send_would_refuse_is_refused_where_it_is_made(args: tuple[Any, ...]) -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises((TypeError, stompy.StompError)) as made:
            stompy.Outgoing(*args)
        positional, keywords = _as_send(args)
        with pytest.raises((TypeError, stompy.StompError)) as sent:
            conn.send(*positional, **keywords)
        _same_error(made.value, sent.value)
        with pytest.raises(type(made.value)):
            conn.send_many([stompy.Outgoing("/queue/o", "before"), stompy.Outgoing(*args)])
        conn.send("/queue/after", "x", receipt=True)
        assert broker.queue_depth("/queue/o") == 0  # no message of the batch went out


@pytest.mark.anyio
@pytest.mark.parametrize("args", _NOT_SENDABLE, ids=repr)
async def test_an_outgoing_send_would_refuse_is_refused_where_it_is_made_async(
    args: tuple[Any, ...],
) -> None:
    with run_broker() as broker, anyio.fail_after(10):
        async with stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises((TypeError, stompy.StompError)) as made:
                stompy.Outgoing(*args)
            positional, keywords = _as_send(args)
            with pytest.raises((TypeError, stompy.StompError)) as sent:
                await conn.send(*positional, **keywords)
            _same_error(made.value, sent.value)
            await conn.send("/queue/after", "x", receipt=True)
            assert broker.queue_depth("/queue/o") == 0


@pytest.mark.parametrize("backend", ["curio", "Trio", ""])
def test_a_broker_thread_of_an_unknown_backend_is_a_configuration_error(backend: str) -> None:
    # It was anyio's LookupError ("No such backend: curio"), from inside.
    with pytest.raises(stompy.ConfigurationError, match="backend must be 'asyncio' or 'trio'"):
        with run_broker(backend=backend):
            pass  # pragma: no cover


@pytest.mark.parametrize("flag", ["yes", "no", 1, None])
def test_a_websocket_flag_that_is_no_bool_is_refused(flag: Any) -> None:
    # "no" was taken as true: a WebSocket listener nobody asked for (or wsproto missing).
    with pytest.raises(TypeError, match="run_broker\\(\\): websocket must be a bool"):
        with run_broker(websocket=flag):
            pass  # pragma: no cover


@pytest.mark.anyio
async def test_a_websocket_flag_that_is_no_bool_is_refused_by_serve() -> None:
    with pytest.raises(TypeError, match="serve\\(\\): websocket must be a bool, not str"):
        flag: Any = "no"  # as a newcomer's untyped code has it
        async with serve(websocket=flag):
            pass  # pragma: no cover


SEND_MANY_MISUSES: Final = (
    (None, "got NoneType"),
    (stompy.Outgoing("/queue/one", "alone"), "got one Outgoing: pass \\[message\\]"),
)


@pytest.mark.parametrize(("messages", "said"), SEND_MANY_MISUSES)
def test_send_many_of_no_iterable_names_send_many(messages: Any, said: str) -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        with pytest.raises(TypeError, match=f"send_many\\(\\) takes an iterable.*{said}"):
            conn.send_many(messages)
        conn.send("/queue/after", "still open", receipt=True)
        assert broker.queue_depth("/queue/one") == 0


@pytest.mark.anyio
@pytest.mark.parametrize(("messages", "said"), SEND_MANY_MISUSES)
async def test_send_many_of_no_iterable_names_send_many_async(messages: Any, said: str) -> None:
    with run_broker() as broker:
        async with stompy.AsyncConnection(broker.url) as conn:
            with pytest.raises(TypeError, match=f"send_many\\(\\) takes an iterable.*{said}"):
                await conn.send_many(messages)
            await conn.send("/queue/after", "still open", receipt=True)
        assert broker.queue_depth("/queue/one") == 0


#: Keywords newcomers bring from other STOMP clients (stomp.py's ``username``, ``vhost``,
#: ``use_ssl``...), and what the answer must say: no spelling alike found them, and
#: ``transaction`` was answered "did you mean 'tracing'?".
_OTHER_CLIENTS: Final = [
    ("username", ". Did you mean 'login'?"),
    ("user", ". Did you mean 'login'?"),
    ("virtual_host", ". Did you mean 'host'?"),
    ("tls", ". Did you mean 'ssl'?"),
    ("ssl_context", ". Did you mean 'ssl'?"),
    ("keepalive", ". Did you mean 'heartbeats'?"),
    ("prefetch", ". Did you mean 'max_pending'?"),
    ("transaction", ": a transaction is begun with the connection's transaction()"),
]


@pytest.mark.parametrize(("name", "said"), _OTHER_CLIENTS)
def test_another_clients_keyword_is_told_stompys(name: str, said: str) -> None:
    """Connection(), AsyncConnection(), stompy.send() and send_async() alike: refused
    before anything is opened, the message naming the keyword and what stompy calls it."""
    loose: Any = {"blocking": stompy.Connection, "async": stompy.AsyncConnection}
    for kind, make in loose.items():
        with pytest.raises(TypeError) as raised:
            make("stomp://127.0.0.1:1", **{name: None})
        assert f"unexpected keyword argument {name!r}{said}" in str(raised.value), kind
    send: Any = stompy.send
    send_async: Any = stompy.send_async
    with pytest.raises(TypeError) as raised:
        send("stomp://127.0.0.1:1", "/queue/x", "x", **{name: None})
    assert f"send() got an unexpected keyword argument {name!r}" in str(raised.value)
    assert said.lstrip(".:") in str(raised.value)
    assert "tracing" not in str(raised.value)
    with pytest.raises(TypeError) as raised:
        anyio.run(lambda: send_async("stomp://127.0.0.1:1", "/queue/x", "x", **{name: None}))
    assert said.lstrip(".:") in str(raised.value)


def test_a_subscription_given_a_transaction_is_told_where_transactions_are() -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        loose: Any = conn
        with pytest.raises(TypeError, match="transaction is begun with the connection's"):
            loose.subscribe("/queue/x", transaction="tx-1")


def test_a_destination_where_the_url_goes_is_told_so() -> None:
    """``stompy.send("/queue/x", "hello")`` (the URL forgotten) said only that the scheme
    must be one of stomp, ...: the answer now names the destination it was given, from
    Connection(), AsyncConnection() and both one-shot sends."""
    said = "'/queue/x' looks like a destination: the broker's URL comes first"
    loose: Any = stompy
    calls: list[Callable[[], object]] = [
        lambda: loose.Connection("/queue/x"),
        lambda: loose.AsyncConnection("/queue/x"),
        lambda: loose.send("/queue/x", "hello"),
        lambda: anyio.run(lambda: loose.send_async("/queue/x", "hello")),
    ]
    for call in calls:
        with pytest.raises(stompy.ConfigurationError, match=said):
            call()
    # A text that may hold a passcode is not shown.
    with pytest.raises(stompy.ConfigurationError) as raised:
        loose.Connection("/app:secret@host")
    assert "secret" not in str(raised.value)

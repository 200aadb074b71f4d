"""An unknown keyword is a ``TypeError`` naming it, in every client, before anything is
done: a misspelled ``receipt`` must not send without one, a misspelled ``ack`` must not
subscribe with ``ack=auto``, a misspelled ``timeout`` must not wait the default 30 s.

The sends name their keywords as parameters, the other calls check ``**options``
against the ``TypedDict`` in ``stompy/_engine/keywords.py``: the signatures are kept equal to
those lists here, in both clients.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import stompy
from stompy._engine import keywords as kw
from stompy._engine.options import ClientOptions
from stompy.testing import AsyncBroker, Broker, BrokerConfig, ProxyStats, run_broker, serve


def refused(call: Callable[[], object], name: str, who: str) -> TypeError:
    """``call()`` raises a TypeError that names the keyword ``name`` and the call ``who``."""
    with pytest.raises(TypeError) as info:
        call()
    message = str(info.value)
    assert f"{who}() got an unexpected keyword argument {name!r}" in message
    return info.value


# -- the blocking client -------------------------------------------------------------------
#
# Each object is called through ``Any``, as by a user without a type checker (mypy
# catches every one of these misspellings).


def test_blocking_calls_refuse_a_misspelled_keyword_and_do_nothing(stomp_broker: Broker) -> None:
    with stompy.Connection(stomp_broker.url) as typed:
        conn: Any = typed
        refused(lambda: conn.send("/queue/kw-x", "x", recipt=True), "recipt", "Connection.send")
        refused(
            lambda: conn.send_many([stompy.Outgoing("/queue/kw-x")], recipt=True),
            "recipt",
            "Connection.send_many",
        )
        with conn.transaction() as tx:
            refused(lambda: tx.send("/queue/kw-x", "x", recipt=True), "recipt", "Transaction.send")
        error = refused(
            lambda: conn.subscribe("/queue/kw-y", ak="client"), "ak", "Connection.subscribe"
        )
        assert "Did you mean 'ack'?" in str(error)
        started = time.monotonic()
        refused(
            lambda: conn.request("/queue/kw-z", "x", timout=0.1), "timout", "Connection.request"
        )
        assert time.monotonic() - started < 5
        conn.send("/queue/kw-r", "question", headers={"reply-to": "/queue/kw-answers"})
        with conn.subscribe("/queue/kw-r") as sub:
            message = sub.get(timeout=5)
            assert message is not None
            refused(lambda: message.reply("x", recipt=True), "recipt", "Message.reply")
        # The connection lives on; nobody subscribed to /queue/kw-y: what is sent there stays.
        conn.send("/queue/kw-y", "stays", receipt=True)
    assert stomp_broker.queue_depth("/queue/kw-x") == 0
    assert stomp_broker.queue_depth("/queue/kw-z") == 0
    assert stomp_broker.queue_depth("/queue/kw-answers") == 0
    assert stomp_broker.queue_depth("/queue/kw-y") == 1


@pytest.mark.parametrize("cls", [stompy.Connection, stompy.AsyncConnection])
def test_a_connection_names_itself_for_an_unknown_keyword(cls: Any) -> None:
    error = refused(lambda: cls("stomp://localhost:1", hots="a"), "hots", cls.__name__)
    assert "Did you mean 'host'?" in str(error)
    assert "ClientOptions" not in str(error)


def test_the_one_shot_sends_refuse_an_unknown_keyword(stomp_broker: Broker) -> None:
    send: Any = stompy.send
    send_async: Any = stompy.send_async
    refused(lambda: send(stomp_broker.url, "/queue/kw-one", "x", recipt=True), "recipt", "send")
    refused(
        lambda: anyio.run(lambda: send_async(stomp_broker.url, "/queue/kw-one", "x", hedaers={})),
        "hedaers",
        "send_async",
    )
    assert stomp_broker.queue_depth("/queue/kw-one") == 0


@pytest.mark.parametrize("receipt", [True, False])
def test_a_one_shot_sends_receipt_keyword_says_it_always_waits(
    stomp_broker: Broker, receipt: bool
) -> None:
    """``stompy.send(..., receipt=True)``, as ``conn.send`` takes it, was answered "Did
    you mean 'receipt_timeout'?"; the one-shot sends always wait for the receipt."""
    send: Any = stompy.send
    send_async: Any = stompy.send_async
    said = "a one-shot send always waits for the broker's receipt"
    error = refused(
        lambda: send(stomp_broker.url, "/queue/kw-r1", "x", receipt=receipt), "receipt", "send"
    )
    assert str(error).endswith(said)
    error = refused(
        lambda: anyio.run(
            lambda: send_async(stomp_broker.url, "/queue/kw-r1", "x", receipt=receipt)
        ),
        "receipt",
        "send_async",
    )
    assert str(error).endswith(said)
    assert "receipt_timeout" not in str(error)
    assert stomp_broker.queue_depth("/queue/kw-r1") == 0


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("heartbeat", "Did you mean 'heartbeats'? (heartbeats is an option of Connection"),
        ("hearbeats", "Did you mean 'heartbeats'? (heartbeats is an option of Connection"),
        ("reconnect", "(reconnect is an option of Connection that a one-shot send does not"),
        ("reciept", "Did you mean 'receipt'? (a one-shot send always waits for the broker's"),
        ("conect_timeout", "Did you mean 'connect_timeout'?"),
    ],
)
def test_a_one_shot_send_tells_a_connections_keyword_as_connection_does(
    stomp_broker: Broker, name: str, said: str
) -> None:
    """``Connection(heartbeat=...)`` is answered "Did you mean 'heartbeats'?"; the one-shot
    sends said only that the keyword was unexpected (they take a few of a connection's
    keywords: the others, and their near misses, are told so)."""
    send: Any = stompy.send
    send_async: Any = stompy.send_async
    error = refused(lambda: send(stomp_broker.url, "/queue/kw-c", "x", **{name: 1}), name, "send")
    assert said in str(error)
    error = refused(
        lambda: anyio.run(lambda: send_async(stomp_broker.url, "/queue/kw-c", "x", **{name: 1})),
        name,
        "send_async",
    )
    assert said in str(error)
    assert stomp_broker.queue_depth("/queue/kw-c") == 0


def test_the_test_brokers_name_their_call_for_an_unknown_keyword() -> None:
    loose_run: Any = run_broker
    loose_serve: Any = serve
    error = refused(lambda: loose_run(prefech=1).__enter__(), "prefech", "run_broker")
    assert "Did you mean 'prefetch'?" in str(error)

    async def main() -> None:
        async with loose_serve(max_que=1):
            pass  # pragma: no cover

    refused(lambda: anyio.run(main), "max_que", "serve")
    stats: Any = ProxyStats()
    refused(lambda: stats.snapshot(bytes_upstrem=1), "bytes_upstrem", "ProxyStats.snapshot")


# -- the async client, on asyncio and trio ------------------------------------------------


@pytest.mark.anyio
async def test_async_calls_refuse_a_misspelled_keyword_and_do_nothing() -> None:
    broker: AsyncBroker
    with anyio.fail_after(20):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as typed:
            conn: Any = typed

            async def fails(call: Callable[[], Any], name: str, who: str) -> TypeError:
                with pytest.raises(TypeError) as info:
                    result = call()
                    if inspect.isawaitable(result):
                        await result
                assert f"{who}() got an unexpected keyword argument {name!r}" in str(info.value)
                return info.value

            await fails(
                lambda: conn.send("/queue/kw-x", "x", recipt=True), "recipt", "AsyncConnection.send"
            )
            await fails(
                lambda: conn.send_many([stompy.Outgoing("/queue/kw-x")], recipt=True),
                "recipt",
                "AsyncConnection.send_many",
            )
            async with conn.transaction() as tx:
                await fails(
                    lambda: tx.send("/queue/kw-x", "x", recipt=True),
                    "recipt",
                    "AsyncTransaction.send",
                )
            await fails(
                lambda: conn.subscribe("/queue/kw-y", ak="client"),
                "ak",
                "AsyncConnection.subscribe",
            )
            with anyio.fail_after(5):
                await fails(
                    lambda: conn.request("/queue/kw-z", "x", timout=0.1),
                    "timout",
                    "AsyncConnection.request",
                )
            await conn.send("/queue/kw-r", "question", headers={"reply-to": "/queue/kw-answers"})
            async with conn.subscribe("/queue/kw-r") as sub:
                message = await sub.get(timeout=5)
                assert message is not None
                await fails(lambda: message.reply("x", recipt=True), "recipt", "AsyncMessage.reply")
            await conn.send("/queue/kw-y", "stays", receipt=True)
            assert broker.queue_depth("/queue/kw-x") == 0
            assert broker.queue_depth("/queue/kw-z") == 0
            assert broker.queue_depth("/queue/kw-answers") == 0
            assert broker.queue_depth("/queue/kw-y") == 1


# -- the lists and the signatures ------------------------------------------------------------


def keyword_only(function: Callable[..., object]) -> dict[str, inspect.Parameter]:
    parameters = inspect.signature(function).parameters.values()
    return {p.name: p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize(
    ("blocking", "asynchronous", "options"),
    [
        (stompy.Connection.send, stompy.AsyncConnection.send, kw.SendOptions),
        (stompy.Connection.send_many, stompy.AsyncConnection.send_many, kw.BatchOptions),
        (stompy.Transaction.send, stompy.AsyncTransaction.send, kw.MessageOptions),
    ],
    ids=["send", "send_many", "Transaction.send"],
)
def test_the_sends_name_the_keywords_of_their_list(
    blocking: Callable[..., object], asynchronous: Callable[..., object], options: type[Any]
) -> None:
    """The sends take their keywords as parameters (no ``**options`` dict to build per
    message): the same names, defaults and types in both clients as their ``TypedDict``."""
    mine, theirs = keyword_only(blocking), keyword_only(asynchronous)
    assert list(mine) == list(theirs)
    assert set(mine) == kw.keys(options)
    for name, parameter in mine.items():
        twin = theirs[name]
        assert parameter.default == twin.default
        assert parameter.annotation == twin.annotation.replace("AsyncTransaction", "Transaction")


@pytest.mark.parametrize(
    ("calls", "known"),
    [
        ((stompy.Connection.subscribe, stompy.AsyncConnection.subscribe), kw.SUBSCRIBE),
        ((stompy.Connection.request, stompy.AsyncConnection.request), kw.REQUEST),
        ((stompy.Message.reply, stompy.AsyncMessage.reply), kw.MESSAGE),
        ((stompy.send, stompy.send_async), kw.ONE_SHOT),
    ],
    ids=["subscribe", "request", "reply", "one-shot"],
)
def test_the_checked_calls_take_their_list(
    calls: tuple[Callable[..., object], ...], known: frozenset[str]
) -> None:
    for call in calls:
        parameters = inspect.signature(call).parameters.values()
        assert [p.kind for p in parameters][-1] is inspect.Parameter.VAR_KEYWORD
        # No keyword is both a parameter and in the list: the check would refuse it.
        assert not known & {p.name for p in parameters if p.kind is not p.VAR_KEYWORD}


def test_the_connection_list_is_client_options() -> None:
    fields = {f.name for f in dataclasses.fields(ClientOptions) if f.init}
    assert fields == kw.CONNECTION
    # and the one-shot sends take a part of it, and the message's own keywords
    assert kw.ONE_SHOT - {"headers", "content_type"} <= kw.CONNECTION


def test_the_broker_list_is_broker_config() -> None:
    from stompy.testing._server import BROKER_OPTIONS

    fields = {f.name for f in dataclasses.fields(BrokerConfig)} | {"max_queue_depth"}
    assert fields == BROKER_OPTIONS


def test_the_message_of_an_unknown_keyword() -> None:
    assert str(kw.unexpected("Connection.subscribe", "ak", kw.SUBSCRIBE)) == (
        "Connection.subscribe() got an unexpected keyword argument 'ak'. Did you mean 'ack'?"
    )
    assert str(kw.unexpected("send", "zzzz", kw.ONE_SHOT)) == (
        "send() got an unexpected keyword argument 'zzzz'"
    )
    kw.check({}, kw.SUBSCRIBE, "x")
    kw.check({"ack": "client", "id": "1"}, kw.SUBSCRIBE, "x")
    with pytest.raises(TypeError, match="'bogus'"):
        kw.check({"ack": "client", "bogus": 1}, kw.SUBSCRIBE, "x")

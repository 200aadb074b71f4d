"""Every argument of the calls that take a user's values, given a wrong type, as a user
without a type checker passes it: a ``TypeError`` (a ``ConfigurationError`` for a
flag's or option's value) naming the argument, with nothing sent and the connection
going on; blocking, asyncio and trio alike.

Compiled (the wheel), the engine's functions assert their annotated parameter types as
they are called: a narrower annotation there made mypyc's own ``TypeError`` ("str
object expected; got int") come first, naming nothing. These tests run against the
wheel too (noxfile.py's ``wheel`` session), so both builds must say the same.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import anyio
import pytest

import stompy
from stompy.testing import run_broker, serve

#: Every wait of these tests is bounded by this many seconds.
LIMIT: Final = 10.0

#: Where the refused sends would have gone: it must stay empty.
Q: Final = "/queue/types"
#: The queue of the received message the cases answer, and of the requests.
INBOX: Final = "/queue/types-in"


@dataclass
class Surface:
    """What the cases call: a connection, an open transaction, a received message with
    a ``reply-to`` (``ack="client-individual"``) and its subscription. Blocking or
    async: a case's call is awaited when it returns an awaitable."""

    conn: Any
    tx: Any
    message: Any
    sub: Any


#: ``(argument named, the call)``: each a wrong type for that argument alone.
Case = tuple[str, Callable[[Surface], object]]


def _send(send: str, args: tuple[Any, ...], kwargs: dict[str, Any], s: Surface) -> object:
    """``s.conn.send(*args, **kwargs)`` (``send="conn"``) or ``s.tx.send(...)``."""
    return getattr(s, send).send(*args, **kwargs)


def _send_cases(send: str) -> list[Case]:
    """The wrong types of ``send`` (a connection's or a transaction's), each also with
    ``receipt=True``."""
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("destination", (5, "x"), {}),
        ("destination", (None, "x"), {}),
        ("destination", (b"/queue/types", "x"), {}),
        ("body", (Q, 5), {}),
        ("body", (Q, None), {}),
        ("body", (Q, bytearray(b"x")), {}),
        ("header", (Q, "x"), {"headers": {"a": 5}}),
        ("header", (Q, "x"), {"headers": {5: "a"}}),
        ("headers", (Q, "x"), {"headers": 5}),
        ("headers", (Q, "x"), {"headers": "a:b"}),
        ("header", (Q, "x"), {"headers": [(5, "a")]}),
        ("header", (Q, b"x"), {"headers": [("a", None)]}),
        ("content_type", (Q, "x"), {"content_type": 5}),
        ("content_type", (Q, b"x"), {"content_type": b"text/plain"}),
    ]
    out: list[Case] = []
    for name, args, kwargs in cases:
        out.append((name, partial(_send, send, args, kwargs)))
        out.append((name, partial(_send, send, args, {**kwargs, "receipt": True})))
    for flag in (1, "yes", None):
        out.append(("receipt", partial(_send, send, (Q, "x"), {"receipt": flag})))
    return out


def _reply_cases() -> list[Case]:
    cases: list[Case] = [
        ("body", lambda s: s.message.reply(5)),
        ("body", lambda s: s.message.reply(None, receipt=True)),
        ("header", lambda s: s.message.reply("x", headers={"a": 5})),
        ("header", lambda s: s.message.reply("x", headers={"a": 5}, receipt=True)),
        ("header", lambda s: s.message.reply(b"x", headers={5: "a"})),
        ("headers", lambda s: s.message.reply("x", headers=5)),
        ("content_type", lambda s: s.message.reply("x", content_type=5)),
        ("content_type", lambda s: s.message.reply("x", content_type=5, receipt=True)),
        ("receipt", lambda s: s.message.reply("x", receipt=1)),
    ]
    return cases


def _request_cases() -> list[Case]:
    return [
        ("destination", lambda s: s.conn.request(5, "x", timeout=1)),
        ("destination", lambda s: s.conn.request(None, timeout=1)),
        ("body", lambda s: s.conn.request(Q, 5, timeout=1)),
        ("body", lambda s: s.conn.request(Q, bytearray(b"x"), timeout=1)),
        ("header", lambda s: s.conn.request(Q, "x", headers={"a": 5}, timeout=1)),
        ("header", lambda s: s.conn.request(Q, b"x", headers={5: "a"}, timeout=1)),
        ("headers", lambda s: s.conn.request(Q, "x", headers=[("a", "b")], timeout=1)),
        ("headers", lambda s: s.conn.request(Q, "x", headers=5, timeout=1)),
        ("content_type", lambda s: s.conn.request(Q, "x", content_type=5, timeout=1)),
        ("timeout", lambda s: s.conn.request(Q, "x", timeout="1")),
        ("timeout", lambda s: s.conn.request(Q, "x", timeout=True)),
        ("reply_subscription", lambda s: s.conn.request(Q, "x", reply_subscription=5, timeout=1)),
    ]


def _subscribe_cases() -> list[Case]:
    return [
        ("destination", lambda s: s.conn.subscribe(5)),
        ("destination", lambda s: s.conn.subscribe(None, receipt=True)),
        ("ack", lambda s: s.conn.subscribe(Q, ack=5)),
        ("id", lambda s: s.conn.subscribe(Q, id=5)),
        ("id", lambda s: s.conn.subscribe(Q, id=5, receipt=True)),
        ("header", lambda s: s.conn.subscribe(Q, headers={"a": 5})),
        ("header", lambda s: s.conn.subscribe(Q, headers={5: "a"}, ack="client")),
        ("headers", lambda s: s.conn.subscribe(Q, headers=[("a", "b")])),
        ("headers", lambda s: s.conn.subscribe(Q, headers=5, receipt=True)),
        ("max_pending", lambda s: s.conn.subscribe(Q, max_pending="5")),
        ("max_pending", lambda s: s.conn.subscribe(Q, max_pending=2.5)),
        ("overflow", lambda s: s.conn.subscribe(Q, overflow=5)),
        ("receipt", lambda s: s.conn.subscribe(Q, receipt=1)),
        ("on_message", lambda s: s.conn.subscribe(Q, on_message=5)),
    ]


def _answer_cases() -> list[Case]:
    """ack/nack of a message, of a transaction, and the transaction's end; the
    subscription's calls."""
    return [
        ("transaction", lambda s: s.message.ack(5)),
        ("transaction", lambda s: s.message.ack(5, receipt=True)),
        ("transaction", lambda s: s.message.nack(object())),
        ("receipt", lambda s: s.message.ack(receipt=1)),
        ("receipt", lambda s: s.message.nack(receipt="yes")),
        ("message", lambda s: s.tx.ack(5)),
        ("message", lambda s: s.tx.nack("m-1")),
        ("receipt", lambda s: s.tx.commit(receipt=1)),
        ("receipt", lambda s: s.tx.abort(receipt="no")),
        ("timeout", lambda s: s.sub.get(timeout="1")),
        ("max_messages", lambda s: s.sub.get_batch("1", timeout=0)),
        ("timeout", lambda s: s.sub.get_batch(1, timeout="0")),
        ("receipt", lambda s: s.sub.unsubscribe(receipt=1)),
    ]


def _batch_cases() -> list[Case]:
    out = stompy.Outgoing
    loose: Any = out
    return [
        ("send_many", lambda s: s.conn.send_many(5)),
        ("Outgoing", lambda s: s.conn.send_many([out(Q, "x"), (Q, "x")])),
        ("receipt", lambda s: s.conn.send_many([out(Q, "x")], receipt=1)),
        ("transaction", lambda s: s.conn.send_many([out(Q, "x")], transaction=5)),
        ("transaction", lambda s: s.conn.send(Q, "x", transaction=5)),
        ("transaction", lambda s: s.conn.send(Q, "x", transaction=5, receipt=True)),
        ("destination", lambda s: loose(5, "x")),
        ("body", lambda s: loose(Q, 5)),
        ("header", lambda s: loose(Q, "x", {"a": 5})),
        ("headers", lambda s: loose(Q, "x", 5)),
        ("content_type", lambda s: loose(Q, "x", None, 5)),
    ]


class _Text(str):
    """A subclass of str, as a user's own type or an enum's."""


class _Queues(str, enum.Enum):
    TYPES = Q


def _subclass_cases() -> list[Case]:
    """A destination that is a subclass of str (a StrEnum's member, compared and hashed
    as its text): a TypeError saying so and what to pass, not "needs a destination"."""
    text: Any = _Text(Q)
    member: Any = _Queues.TYPES
    empty: Any = _Text("")
    return [
        ("subclass of str): pass str(...)", lambda s: s.conn.send(text, "x")),
        ("subclass of str): pass str(...)", lambda s: s.conn.send(empty, "x", receipt=True)),
        ("subclass of str): pass _Queues.TYPES.value", lambda s: s.tx.send(member, "x")),
        ("subclass of str): pass _Queues", lambda s: s.conn.request(member, "x", timeout=1)),
        ("subclass of str): pass str(...)", lambda s: s.conn.subscribe(text)),
        ("subclass of str): pass _Queues", lambda s: s.conn.subscribe(member, receipt=True)),
        ("subclass of str): pass str(...)", lambda s: stompy.Outgoing(text, "x")),
    ]


CASES: Final[list[Case]] = [
    *_subclass_cases(),
    *_send_cases("conn"),
    *_send_cases("tx"),
    *_reply_cases(),
    *_request_cases(),
    *_subscribe_cases(),
    *_answer_cases(),
    *_batch_cases(),
]


def _wrong(error: BaseException, name: str) -> str | None:
    """What is wrong with ``error``, if it is not stompy's own for a wrong ``name``: a
    TypeError (or a ConfigurationError, a ValueError) whose message names it."""
    said = str(error)
    if not isinstance(error, (TypeError, stompy.ConfigurationError)):
        return f"{type(error).__name__}: {said}"
    if name not in said or "object expected; got" in said:  # mypyc's words name nothing
        return f"{type(error).__name__} naming no {name!r}: {said}"
    return None


def _check(error: BaseException, name: str) -> None:
    wrong = _wrong(error, name)
    assert wrong is None, wrong


def _refused(case: int, call: Callable[[], object]) -> str | None:
    """What is wrong with how ``CASES[case]`` was refused (None: as it should be)."""
    name = CASES[case][0]
    try:
        result = call()
    except Exception as exc:
        return _wrong(exc, name)
    return f"taken, giving {result!r}"


async def _refused_async(case: int, call: Callable[[], object]) -> str | None:
    name = CASES[case][0]
    try:
        result = call()
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        return _wrong(exc, name)
    return f"taken, giving {result!r}"


def _report(wrong: dict[int, str]) -> str:
    return "\n".join(f"case {case} ({CASES[case][0]}): {said}" for case, said in wrong.items())


def test_each_wrong_type_is_refused_naming_the_argument() -> None:
    with run_broker() as broker, stompy.Connection(broker.url, receipt_timeout=LIMIT) as conn:
        conn.send(INBOX, "request", headers={"reply-to": "/queue/types-replies"}, receipt=True)
        with conn.subscribe(INBOX, ack="client-individual") as sub:
            message = sub.get(timeout=LIMIT)
            assert message is not None
            tx = conn.transaction()
            surface = Surface(conn, tx, message, sub)
            wrong = {
                case: said
                for case, (_, call) in enumerate(CASES)
                if (said := _refused(case, lambda c=call: c(surface))) is not None  # type: ignore[misc]
            }
            assert not wrong, _report(wrong)
            # Nothing went out; the connection, the message and the transaction go on.
            message.reply("answer", receipt=True)
            tx.send(Q, "in the transaction")
            message.ack(tx, receipt=True)
            tx.abort(receipt=True)
        conn.send(Q + "-done", "x", receipt=True)
        assert conn.connected
        assert broker.queue_depth(Q) == 0
        assert broker.queue_depth("/queue/types-replies") == 1


@pytest.mark.anyio
async def test_each_wrong_type_is_refused_naming_the_argument_async() -> None:
    with anyio.fail_after(LIMIT * 2):
        async with (
            serve() as broker,
            stompy.AsyncConnection(broker.url, receipt_timeout=LIMIT) as conn,
        ):
            await conn.send(
                INBOX, "request", headers={"reply-to": "/queue/types-replies"}, receipt=True
            )
            async with conn.subscribe(INBOX, ack="client-individual") as sub:
                message = await sub.get(timeout=LIMIT)
                assert message is not None
                tx = await conn.transaction()
                surface = Surface(conn, tx, message, sub)
                wrong = {}
                for case, (_, call) in enumerate(CASES):
                    said = await _refused_async(case, lambda c=call: c(surface))  # type: ignore[misc]
                    if said is not None:
                        wrong[case] = said
                assert not wrong, _report(wrong)
                await message.reply("answer", receipt=True)
                await tx.send(Q, "in the transaction")
                await message.ack(tx, receipt=True)
                await tx.abort(receipt=True)
            await conn.send(Q + "-done", "x", receipt=True)
            assert conn.connected
            assert broker.queue_depth(Q) == 0
            assert broker.queue_depth("/queue/types-replies") == 1


def test_headers_as_pairs_are_taken_by_send_as_a_dict_is() -> None:
    """What send() takes of the pure core, the compiled one takes too: pairs."""
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        loose: Any = conn  # pairs: not in send()'s annotations, taken all the same
        loose.send(Q + "-pairs", "x", headers=[("a", "1")])
        loose.send(Q + "-pairs", "x", headers=(("a", "2"),), receipt=True)
        with conn.subscribe(Q + "-pairs") as sub:
            got = [sub.get(timeout=LIMIT) for _ in range(2)]
        assert [m.headers["a"] if m else None for m in got] == ["1", "2"]
        assert broker.queue_depth(Q + "-pairs") == 0


def test_headers_of_str_subclasses_are_taken_by_every_send() -> None:
    """A header name or value of a subclass of str is written as its text by send()
    with or without a receipt, the one-shot send and send_many() alike: a send with a
    receipt and Outgoing refused them, saying "a header must be a (name, value) pair of
    str, got ('a', 'v')" of what looked like one."""
    headers: dict[str, str] = {_Text("a"): _Text("v")}
    where = Q + "-subclass"
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        conn.send(where, b"1", headers=headers)
        conn.send(where, b"2", headers=headers, receipt=True)
        conn.send_many([stompy.Outgoing(where, b"3", headers)], receipt=True)
        stompy.send(broker.url, where, b"4", headers=headers)
        with conn.subscribe(where) as sub:
            got = [sub.get(timeout=LIMIT) for _ in range(4)]
        assert [(m.body, m.headers["a"]) if m else None for m in got] == [
            (b"1", "v"),
            (b"2", "v"),
            (b"3", "v"),
            (b"4", "v"),
        ]


def test_the_one_shot_send_names_the_argument() -> None:
    with run_broker() as broker:
        loose: Any = stompy.send
        calls: list[tuple[str, Callable[[], object]]] = [
            ("destination", lambda: loose(broker.url, 5, "x")),
            (
                "subclass of str): pass _Queues.TYPES.value",
                lambda: loose(broker.url, _Queues.TYPES),
            ),
            ("body", lambda: loose(broker.url, Q, 5)),
            ("content_type", lambda: loose(broker.url, Q, "x", content_type=5)),
            ("header", lambda: loose(broker.url, Q, "x", headers={"a": 5})),
        ]
        for name, call in calls:
            with pytest.raises((TypeError, stompy.ConfigurationError)) as caught:
                call()
            _check(caught.value, name)
        assert broker.queue_depth(Q) == 0

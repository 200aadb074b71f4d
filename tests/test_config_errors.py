"""Bad options and arguments, as a user mistypes them: each is refused where the object
is made or the call begins, as a ``ConfigurationError`` (a ``ValueError`` and a
``StompError``) for a value and a ``TypeError`` for a type, naming the option and
showing the value; the same in both clients, ``Reconnect``, ``FrameLimits``,
``subscribe``, ``get``/``get_batch`` and ``request`` (blocking, asyncio and trio).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import anyio
import pytest

import stompy
import stompy._core.parser
from stompy import ConfigurationError, FrameLimits, Reconnect, StompError
from stompy._compiled import is_compiled
from stompy._core.heartbeat import MAX_INTERVAL
from stompy.testing import Broker, run_broker, serve

#: Every wait of these tests is bounded by this many seconds.
LIMIT = 10.0

CLIENTS = (stompy.Connection, stompy.AsyncConnection)
URL = "stomp://127.0.0.1:1"


def refused(
    make: Callable[[], object], kind: type[Exception], name: str, shown: str | None
) -> Exception:
    """The error ``make()`` raises: a ``kind`` whose message starts with ``name: `` and
    shows ``shown`` (the value's repr)."""
    with pytest.raises(kind) as caught:
        make()
    message = str(caught.value)
    assert message.startswith(f"{name}: "), message
    if shown is not None:
        assert shown in message, message
    return caught.value


# -- the constructors --------------------------------------------------------------------

BAD_VALUES: list[tuple[str, object]] = [
    ("heartbeats", (-1, 0)),
    ("heartbeats", (0, 1.5)),
    ("heartbeats", (1, 2, 3)),
    ("heartbeats", (0, MAX_INTERVAL + 1)),
    ("heartbeat_tolerance", 0.5),
    ("heartbeat_tolerance", math.nan),
    ("connect_timeout", -1),
    ("connect_timeout", 0),
    ("connect_timeout", math.nan),
    ("connect_timeout", math.inf),
    ("connect_timeout", 1e12),
    ("receipt_timeout", 0.0),
    ("versions", "1.2"),
    ("versions", ("2.0",)),
    ("versions", ()),
    ("max_pending", 0),
    ("overflow", "drop"),
]


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_a_bad_value_is_a_configuration_error_naming_the_option(
    make: Callable[..., object], name: str, value: object
) -> None:
    error = refused(lambda: make(URL, **{name: value}), ConfigurationError, name, repr(value))
    assert isinstance(error, StompError)
    assert isinstance(error, ValueError)


BAD_TYPES: list[tuple[str, object]] = [
    ("login", 5),
    ("passcode", b"secret"),
    ("host", 1),
    ("versions", None),
    ("heartbeats", "ab"),
    ("heartbeats", 1000),
    ("heartbeats", (True, 0)),
    ("heartbeat_tolerance", "2"),
    ("ssl", "yes"),
    ("connect_timeout", "10"),
    ("receipt_timeout", None),
    ("reconnect", True),
    ("headers", [("a", "b")]),
    ("limits", {"max_body": 10}),
    ("max_pending", "5"),
    ("max_pending", 1.5),
    ("overflow", 1),
    ("strict", "no"),
    ("tracing", 0),
    ("ws_headers", "a: b"),
    ("on_error", "print"),
    ("on_connected", 5),
]


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(("name", "value"), BAD_TYPES)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_option(
    make: Callable[..., object], name: str, value: object
) -> None:
    refused(lambda: make(URL, **{name: value}), TypeError, name, repr(value))


def test_the_largest_heartbeats_and_tolerance_the_constructor_takes_work() -> None:
    """The blocking client's I/O thread waited for a deadline weeks away (the longest
    heart-beat, or any times a huge tolerance) in one select(), which overflowed: "the
    I/O thread failed" right after CONNECTED."""
    huge: list[dict[str, Any]] = [
        {"heartbeats": (0, MAX_INTERVAL)},
        {"heartbeats": (0, 1000), "heartbeat_tolerance": 1e300},
    ]
    with run_broker(heartbeats=(1000, 0)) as broker:
        for options in huge:
            with stompy.Connection(broker.url, **options) as conn:
                conn.send("/queue/config-beats", "x", receipt=True)
                time.sleep(0.1)
                conn.send("/queue/config-beats", "y", receipt=True)
                assert conn.failure is None


@pytest.mark.parametrize("make", CLIENTS)
def test_the_url_argument(make: Callable[..., object]) -> None:
    refused(lambda: make(None), TypeError, "url_or_urls", "None")
    refused(lambda: make(61613), TypeError, "url_or_urls", "61613")
    with pytest.raises(TypeError, match="a broker URL must be a str, got NoneType"):
        make([URL, None])
    bad: object
    for bad in ("", [], "http://h", "stomp://"):
        with pytest.raises(ConfigurationError):
            make(bad)


@pytest.mark.parametrize("make", CLIENTS)
def test_ssl_false_with_a_url_that_needs_tls_is_refused_by_the_constructor(
    make: Callable[..., object],
) -> None:
    refused(lambda: make("stomp+ssl://h", ssl=False), ConfigurationError, "ssl", "needs TLS")
    refused(lambda: make(["stomp://h", "wss://h"], ssl=False), ConfigurationError, "ssl", None)


@pytest.mark.parametrize("make", CLIENTS)
def test_a_bad_websocket_header_names_the_option_and_never_shows_its_value(
    make: Callable[..., object],
) -> None:
    refused(
        lambda: make("ws://h", ws_headers={"a b": "x"}), ConfigurationError, "ws_headers", "'a b'"
    )
    error = refused(
        lambda: make("ws://h", ws_headers={"Authorization": "s3cret\n"}),
        ConfigurationError,
        "ws_headers",
        "'Authorization'",
    )
    assert "s3cret" not in str(error)
    refused(lambda: make("ws://h", ws_headers={"X-N": 5}), TypeError, "ws_headers", "'X-N'")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_attempts", 0),
        ("initial_delay", -1),
        ("initial_delay", math.nan),
        ("max_delay", -0.5),
        ("max_delay", math.inf),
        ("max_delay", 1e12),
        ("multiplier", 0.5),
        ("jitter", 2.0),
        ("jitter", -0.1),
        ("send_timeout", -1),
    ],
)
def test_reconnect_refuses_a_bad_value_naming_it(name: str, value: object) -> None:
    kwargs: dict[str, Any] = {name: value}
    refused(lambda: Reconnect(**kwargs), ConfigurationError, name, repr(value))


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_attempts", 1.5), ("initial_delay", "0.1"), ("jitter", None), ("multiplier", True)],
)
def test_reconnect_refuses_a_wrong_type_naming_it(name: str, value: object) -> None:
    kwargs: dict[str, Any] = {name: value}
    refused(lambda: Reconnect(**kwargs), TypeError, name, repr(value))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_header_line": 15}, "max_header_line"),
        ({"max_headers": 0}, "max_headers"),
        ({"max_body": -1}, "max_body"),
        ({"max_header_line": 1024, "max_header_block": 512}, "max_header_block"),
    ],
)
def test_frame_limits_name_the_limit_and_its_value(kwargs: dict[str, int], name: str) -> None:
    refused(lambda: FrameLimits(**kwargs), ConfigurationError, name, repr(kwargs[name]))


def test_frame_limits_of_the_wrong_type_are_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        FrameLimits(max_body="1")  # type: ignore[arg-type]
    if not is_compiled(stompy._core.parser):  # compiled, mypyc's own TypeError comes first
        assert str(caught.value).startswith("max_body: expected an int, got '1'")


# -- the calls: subscribe, get, get_batch, request ----------------------------------------

#: Timeouts every call that takes one refuses alike: (value, error).
BAD_TIMEOUTS: list[tuple[object, type[Exception]]] = [
    (-1, ConfigurationError),
    (-0.001, ConfigurationError),
    (math.nan, ConfigurationError),
    (math.inf, ConfigurationError),
    (1e12, ConfigurationError),
    ("a", TypeError),
    (b"1", TypeError),
    (True, TypeError),
]


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


def bounded(call: Callable[[], object]) -> object:
    """What ``call()`` returns or raises, in a thread of its own so that a call that
    does not return fails the test instead of hanging it."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    assert outcome, "the call did not return"
    return outcome[0]


def check_refused(outcome: object, kind: type[Exception], name: str, value: object) -> None:
    assert isinstance(outcome, kind), outcome
    assert str(outcome).startswith(f"{name}: "), outcome
    assert repr(value) in str(outcome), outcome


@pytest.mark.parametrize(("timeout", "kind"), BAD_TIMEOUTS)
def test_blocking_calls_refuse_a_bad_timeout_alike(
    broker: Broker, timeout: Any, kind: type[Exception]
) -> None:
    with stompy.Connection(broker.url) as conn, conn.subscribe("/queue/config-get") as sub:
        started = time.monotonic()
        check_refused(bounded(lambda: sub.get(timeout=timeout)), kind, "timeout", timeout)
        check_refused(bounded(lambda: sub.get_batch(5, timeout)), kind, "timeout", timeout)
        request = bounded(lambda: conn.request("/queue/config-rpc", "x", timeout=timeout))
        check_refused(request, kind, "timeout", timeout)
        assert time.monotonic() - started < LIMIT / 2  # refused, not waited for
        conn.send(sub.destination, "still fine", receipt=True)
        message = sub.get(timeout=0)
        assert message is not None
        assert message.text == "still fine"


#: Arguments of subscribe() it refuses: (keywords, error, the one named).
BAD_SUBSCRIBE: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"ack": "Client"}, ConfigurationError, "ack"),
    ({"ack": None}, TypeError, "ack"),
    ({"max_pending": 0}, ConfigurationError, "max_pending"),
    ({"max_pending": "9"}, TypeError, "max_pending"),
    ({"overflow": "drop"}, ConfigurationError, "overflow"),
    ({"headers": [1]}, TypeError, "headers"),
]


def test_blocking_subscribe_and_get_batch_refuse_bad_arguments(broker: Broker) -> None:
    with stompy.Connection(broker.url) as conn:
        for kwargs, kind, name in BAD_SUBSCRIBE:
            outcome = bounded(partial(conn.subscribe, "/queue/config-sub", **kwargs))
            check_refused(outcome, kind, name, kwargs[name])
        with conn.subscribe("/queue/config-batch") as sub:
            check_refused(bounded(lambda: sub.get_batch(0)), ConfigurationError, "max_messages", 0)
            not_int: Any = 2.5
            outcome = bounded(lambda: sub.get_batch(not_int, 0))
            check_refused(outcome, TypeError, "max_messages", not_int)
            assert sub.get(timeout=0) is None  # a good timeout still works
        assert conn.connected


async def async_outcome(call: Callable[[], Any]) -> object:
    try:
        with anyio.fail_after(LIMIT):
            return await call()
    except TimeoutError:
        raise AssertionError("the call did not return") from None
    except Exception as exc:
        return exc


@pytest.mark.anyio
@pytest.mark.parametrize(("timeout", "kind"), BAD_TIMEOUTS)
async def test_async_calls_refuse_a_bad_timeout_alike(timeout: Any, kind: type[Exception]) -> None:
    async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
        async with conn.subscribe("/queue/config-get") as sub:
            outcome = await async_outcome(lambda: sub.get(timeout=timeout))
            check_refused(outcome, kind, "timeout", timeout)
            outcome = await async_outcome(lambda: sub.get_batch(5, timeout))
            check_refused(outcome, kind, "timeout", timeout)
            outcome = await async_outcome(lambda: conn.request("/q/rpc", "x", timeout=timeout))
            check_refused(outcome, kind, "timeout", timeout)
            await conn.send(sub.destination, "still fine", receipt=True)
            message = await sub.get(timeout=0)
            assert message is not None
            assert message.text == "still fine"


@pytest.mark.anyio
async def test_async_subscribe_refuses_bad_arguments() -> None:
    async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
        for kwargs, kind, name in BAD_SUBSCRIBE:
            outcome = await async_outcome(partial(conn.subscribe, "/queue/config-sub", **kwargs))
            check_refused(outcome, kind, name, kwargs[name])
        async with conn.subscribe("/queue/config-batch") as sub:
            outcome = await async_outcome(lambda: sub.get_batch(0))
            check_refused(outcome, ConfigurationError, "max_messages", 0)
        assert conn.connected

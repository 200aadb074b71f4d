"""stompy's real clients, ``Connection`` and ``AsyncConnection``, against real brokers.

The promise of the README: ``stompy.Connection("stomp://guest:guest@localhost:61613")``
works with RabbitMQ, ActiveMQ and the in-process broker alike, because the ``host``
header is the ``host=`` argument, else the URL path (percent-decoded), else ``/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote

import anyio
import pytest

import stompy
from stompy.errors import ServerError
from stompy.testing import run_broker
from tests.interop._support import TIMEOUT, BrokerTarget

FLAVOURS = ("sync", "asyncio", "trio")


@dataclass(frozen=True)
class RoundTrip:
    version: str | None
    server: str | None
    text: str
    headers: dict[str, str]


def round_trip(flavour: str, url: str, destination: str, host: str | None = None) -> RoundTrip:
    """Connect with ``flavour``, send one message to ourselves with receipts, read it."""
    header = {"x-stompy": "a:b\nc ✓"}
    if flavour == "sync":
        with stompy.Connection(url, host=host, connect_timeout=TIMEOUT) as conn:
            sub = conn.subscribe(destination, receipt=True)
            conn.send(destination, "héllo", headers=header, receipt=True)
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            return RoundTrip(conn.version, conn.server, message.text, dict(message.headers))

    async def main() -> RoundTrip:
        async with stompy.AsyncConnection(url, host=host, connect_timeout=TIMEOUT) as conn:
            sub = await conn.subscribe(destination, receipt=True)
            await conn.send(destination, "héllo", headers=header, receipt=True)
            message = await sub.get(timeout=TIMEOUT)
            assert message is not None
            return RoundTrip(conn.version, conn.server, message.text, dict(message.headers))

    result: RoundTrip = anyio.run(main, backend=flavour)
    return result


def plain_url(target: BrokerTarget, port: int | None = None, path: str = "") -> str:
    """``stomp://login:passcode@localhost:port`` plus ``path``, as a user writes it."""
    login = f"{quote(target.login, safe='')}:{quote(target.passcode, safe='')}"
    return f"stomp://{login}@localhost:{port or target.port}{path}"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_plain_url_works(broker: BrokerTarget, unique: str, flavour: str) -> None:
    if broker.vhost != "/":
        pytest.skip(f"{broker} needs the vhost {broker.vhost!r} in the URL")
    got = round_trip(flavour, plain_url(broker), f"/queue/stompy-plain-{flavour}-{unique}")
    assert got.version == "1.2"
    assert got.server == broker.server
    assert got.text == "héllo"
    assert got.headers["x-stompy"] == "a:b\nc ✓"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_plain_url_works_with_the_inprocess_broker(flavour: str) -> None:
    with run_broker(users={"guest": "guest"}) as inprocess:
        target = BrokerTarget("in-process", "localhost", inprocess.port, "guest", "guest", "/")
        got = round_trip(flavour, plain_url(target), "/queue/plain")
    assert got.version == "1.2"
    assert got.text == "héllo"


#: (URL path, host argument, the host header that must reach the broker).
HOST_RULES = [
    ("", None, "/"),
    ("/", None, "/"),
    ("/%2F", None, "/"),
    ("/stompy-nope", None, "stompy-nope"),
    ("/stompy%2Fnope", None, "stompy/nope"),
    ("", "127.0.0.1", "127.0.0.1"),
    ("/stompy-nope", "/", "/"),
]


@pytest.mark.parametrize(("path", "host", "sent"), HOST_RULES)
def test_the_host_header_rule(
    broker: BrokerTarget, unique: str, path: str, host: str | None, sent: str
) -> None:
    """RabbitMQ names the vhost it was sent when it refuses: that shows the rule at work.

    ActiveMQ ignores the header, so every variant connects there.
    """
    if broker.kind not in ("rabbitmq", "activemq"):
        pytest.skip(f"no host-header expectation for {broker.kind}")
    url = plain_url(broker, path=path)
    destination = f"/queue/stompy-host-{unique}"
    if broker.kind == "rabbitmq" and sent != "/":
        with pytest.raises(ServerError) as info:
            round_trip("sync", url, destination, host=host)
        assert info.value.message == "Bad CONNECT"
        frame = info.value.frame
        assert frame is not None
        assert f"Virtual host '{sent}' access denied".encode() in frame.body
    else:
        assert round_trip("sync", url, destination, host=host).text == "héllo"


def test_async_close_is_prompt_when_the_broker_answers_at_once(broker: BrokerTarget) -> None:
    """ActiveMQ answers DISCONNECT and closes within microseconds.

    A regression test: ``close()`` used to register the DISCONNECT receipt only after
    writing the frame, so on trio a receipt read meanwhile was missed and about one
    close in four waited the whole ``receipt_timeout``. Up to 20 connections, each
    closed after some traffic; it stops at the first close that takes half of
    ``receipt_timeout`` (a prompt one takes milliseconds).
    """
    if broker.kind != "activemq":
        pytest.skip("seen against ActiveMQ, which answers DISCONNECT fastest")
    receipt_timeout = 3.0
    slow: list[float] = []

    async def main() -> None:
        for n in range(20):
            async with stompy.AsyncConnection(broker.url, receipt_timeout=receipt_timeout) as conn:
                try:
                    destination = f"/queue/stompy-close-{n}-{time.time_ns()}"
                    sub = await conn.subscribe(destination, receipt=True)
                    await conn.send(destination, "x", receipt=True)
                    assert await sub.get(timeout=TIMEOUT) is not None
                finally:
                    started = time.monotonic()
                    await conn.close()
                    took = time.monotonic() - started
            if took > receipt_timeout / 2:
                slow.append(took)
                return

    anyio.run(main, backend="trio")
    assert not slow, f"close() took {slow[0]:.2f} s (receipt_timeout {receipt_timeout} s)"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_request_reply(broker: BrokerTarget, unique: str, flavour: str) -> None:
    """``request()`` / ``reply()`` through the broker's temporary queues: RabbitMQ's
    implicit subscription, ActiveMQ's SUBSCRIBE to the temp queue (the session's own)."""
    service = f"/queue/stompy-rpc-{flavour}-{unique}"
    with stompy.Connection(broker.url, connect_timeout=TIMEOUT) as server:
        server.subscribe(service, on_message=lambda msg: msg.reply(msg.text.upper()), receipt=True)
        if flavour == "sync":
            with stompy.Connection(broker.url, connect_timeout=TIMEOUT) as conn:
                texts = [conn.request(service, f"ping {i}", timeout=TIMEOUT).text for i in range(3)]
        else:

            async def main() -> list[str]:
                async with stompy.AsyncConnection(broker.url, connect_timeout=TIMEOUT) as conn:
                    got: dict[int, str] = {}

                    async def ask(i: int) -> None:
                        got[i] = (await conn.request(service, f"ping {i}", timeout=TIMEOUT)).text

                    async with anyio.create_task_group() as tg:
                        for i in range(3):
                            tg.start_soon(ask, i)
                    return [got[i] for i in range(3)]

            texts = anyio.run(main, backend=flavour)
    assert texts == ["PING 0", "PING 1", "PING 2"]

"""TLS end to end: the clients against the in-process broker with a certificate made here."""

from __future__ import annotations

import logging
import re
import ssl
import threading
from collections.abc import Iterator

import anyio
import pytest
import trustme
from anyio.streams.tls import TLSStream

import stompy
from stompy.errors import ConnectFailed
from stompy.testing import run_broker, serve


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture(scope="module")
def tls_url(server_context: ssl.SSLContext) -> Iterator[str]:
    with run_broker(ssl=server_context) as broker:
        assert broker.url.startswith("stomp+ssl://")
        yield broker.url


def test_sync_client_over_tls(tls_url: str, client_context: ssl.SSLContext) -> None:
    with stompy.Connection(tls_url, ssl=client_context) as conn:
        with conn.subscribe("/queue/tls") as sub:
            conn.send("/queue/tls", b"\x00secret" * 1000, receipt=True)
            msg = sub.get(timeout=5)
            assert msg is not None
            assert msg.body == b"\x00secret" * 1000


def test_certificate_is_verified_by_default(tls_url: str) -> None:
    # The default context does not trust the test CA: the handshake must fail.
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        stompy.Connection(tls_url, connect_timeout=5).connect()


def test_plain_client_against_tls_broker_fails_cleanly(tls_url: str) -> None:
    plain = tls_url.replace("stomp+ssl://", "stomp://")
    with pytest.raises(ConnectFailed):
        stompy.Connection(plain, connect_timeout=1, ssl=False).connect()


def test_a_failed_handshake_is_one_line_of_log(
    tls_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stompy.testing")
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        stompy.Connection(tls_url, connect_timeout=5).connect()
    with pytest.raises(ConnectFailed):
        stompy.Connection(tls_url.replace("+ssl", ""), connect_timeout=5, ssl=False).connect()

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]

    for _ in range(500):  # the broker logs it in its own thread: up to 5 s
        if len(told()) == 2:
            break
        threading.Event().wait(0.01)
    assert len(told()) == 2, told()
    # The peer's address, or "?" when the client's socket was gone before it was asked.
    assert all(re.match(r"TLS handshake from (127\.0\.0\.1:\d+|\?) failed: ", t) for t in told())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_one_call_send_over_tls(tls_url: str, client_context: ssl.SSLContext) -> None:
    stompy.send(tls_url, "/queue/tls-one", "hi", ssl=client_context)


@pytest.mark.anyio
async def test_async_client_over_tls(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    with anyio.fail_after(10):
        async with serve(ssl=server_context) as broker:
            async with stompy.AsyncConnection(broker.url, ssl=client_context) as conn:
                async with conn.subscribe("/queue/tls") as sub:
                    await conn.send("/queue/tls", "über", receipt=True)
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    assert msg.text == "über"
            with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                async with stompy.AsyncConnection(broker.url, connect_timeout=5):
                    pass


@pytest.mark.anyio
async def test_the_async_client_leaves_tls_to_anyios_stream(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    # A plain TCP connection is read and written through its socket (RawSocketStream);
    # over TLS the SSL object must do both, so the stream stays anyio's.
    with anyio.fail_after(10):
        async with serve(ssl=server_context) as broker:
            async with stompy.AsyncConnection(broker.url, ssl=client_context) as conn:
                assert isinstance(conn._io.stream, TLSStream)
                async with conn.subscribe("/queue/tls-stream") as sub:
                    await conn.send("/queue/tls-stream", b"\x00" * 300_000, receipt=True)
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    assert msg.body == b"\x00" * 300_000


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("websocket", [False, True], ids=["stomp+ssl", "wss"])
def test_a_clean_disconnect_over_tls_is_no_internal_error(
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
    backend: str,
    websocket: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A TLS stream cannot half-close (anyio's send_eof is not implemented there): the
    # broker must end such a connection without counting or logging a bug of its own.
    with run_broker(ssl=server_context, backend=backend, websocket=websocket) as broker:
        url = broker.ws_url if websocket else broker.url
        assert url is not None
        for _ in range(3):
            with stompy.Connection(url, ssl=client_context) as conn:
                conn.send("/queue/tls-bye", "x", receipt=True)
        broker.wait_until(lambda: not broker.connections, timeout=10)
        assert broker.stats.internal_errors == 0
    assert "internal error" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_threaded_broker_says_it_speaks_tls(server_context: ssl.SSLContext) -> None:
    with run_broker(ssl=server_context) as broker:
        assert broker.tls
        assert broker.url.startswith("stomp+ssl://")
    with run_broker() as plain:
        assert not plain.tls


@pytest.mark.anyio
async def test_ssl_takes_a_server_context_only() -> None:
    with pytest.raises(TypeError, match=r"ssl\.SSLContext"):
        async with serve(ssl=True):  # type: ignore[arg-type]
            pass  # pragma: no cover
    not_a_context: object = "cert.pem"
    with pytest.raises(TypeError, match=r"ssl\.SSLContext"):
        with run_broker(ssl=not_a_context):  # type: ignore[arg-type]
            pass  # pragma: no cover


def test_ssl_context_is_the_former_name(server_context: ssl.SSLContext) -> None:
    with pytest.warns(DeprecationWarning, match="now called ssl="):
        with run_broker(ssl_context=server_context) as broker:
            assert broker.tls
    both = run_broker(ssl=server_context, ssl_context=server_context)
    with pytest.warns(DeprecationWarning, match="now called ssl="):
        with pytest.raises(TypeError, match="ssl= only"), both:
            pass  # pragma: no cover

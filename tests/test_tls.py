"""TLS end to end: the clients against the in-process broker with a certificate made here."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import anyio
import pytest
import trustme

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
    with run_broker(ssl_context=server_context) as broker:
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


def test_one_call_send_over_tls(tls_url: str, client_context: ssl.SSLContext) -> None:
    stompy.send(tls_url, "/queue/tls-one", "hi", ssl=client_context)


@pytest.mark.anyio
async def test_async_client_over_tls(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    with anyio.fail_after(10):
        async with serve(ssl_context=server_context) as broker:
            async with stompy.AsyncConnection(broker.url, ssl=client_context) as conn:
                async with conn.subscribe("/queue/tls") as sub:
                    await conn.send("/queue/tls", "über", receipt=True)
                    msg = await sub.get(timeout=5)
                    assert msg is not None
                    assert msg.text == "über"
            with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                await stompy.AsyncConnection(broker.url, connect_timeout=5).connect()


def test_a_clean_disconnect_over_tls_is_no_internal_error(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    # A TLS stream cannot half-close (anyio's send_eof is not implemented there): the
    # broker must end such a connection without counting a bug of its own.
    with run_broker(ssl_context=server_context) as broker:
        for _ in range(3):
            with stompy.Connection(broker.url, ssl=client_context) as conn:
                conn.send("/queue/tls-bye", "x", receipt=True)
        broker.wait_until(lambda: not broker.connections, timeout=10)
        assert broker.stats.internal_errors == 0

"""The broker in a background thread, for synchronous code and tests."""

from __future__ import annotations

import ssl as _ssl
from collections.abc import Iterator
from contextlib import contextmanager

from anyio.from_thread import BlockingPortal, start_blocking_portal
from typing_extensions import Unpack

from stompy._engine.keywords import check
from stompy.testing._core.records import BrokerConfig, BrokerOptions, BrokerStats, ConnectionInfo
from stompy.testing._server import BROKER_OPTIONS, AsyncBroker, serve, tls_context
from stompy.testing._shared import InThread, check_listener

__all__ = ("Broker", "run_broker")


class Broker(InThread[BrokerStats, ConnectionInfo]):
    """A broker running in a background thread, as yielded by :func:`run_broker`.

    The same inspection and fault methods as :class:`AsyncBroker`, callable from any
    thread (each runs in the broker's event loop and waits for it), except from the
    broker's own event loop.
    """

    def __init__(self, portal: BlockingPortal, broker: AsyncBroker) -> None:
        super().__init__(portal, broker)  # host, port, url (stomp+ssl:// with TLS)
        self._broker = broker
        #: Whether clients must speak TLS (``run_broker(ssl=...)``).
        self.tls = broker.tls
        #: The WebSocket listener's real port, and ``ws://host:port/ws`` (``wss://``
        #: with TLS; ``None`` without ``websocket=True``).
        self.ws_port = broker.ws_port
        self.ws_url = broker.ws_url
        self.config: BrokerConfig = broker.config

    def queue_depth(self, destination: str) -> int:
        """Messages waiting in a queue (not counting delivered, unacked ones)."""
        return self._call(self._broker.queue_depth, destination)

    def unacked_count(self, destination: str | None = None) -> int:
        """Messages delivered and not yet acknowledged, for one destination or all."""
        return self._call(self._broker.unacked_count, destination)

    def destinations(self) -> tuple[str, ...]:
        """Destinations that currently hold messages or subscriptions."""
        return self._call(self._broker.destinations)

    def drop_all_connections(self) -> int:
        """Cut every connection at once, without ERROR; return how many there were."""
        return self._call(self._broker.drop_all_connections)

    def reset(self) -> None:
        """Make the broker as a new one, for the next test: see :meth:`AsyncBroker.reset`."""
        self._call(self._broker.reset)

    def pause(self, session: str | None = None) -> None:
        """Stop reading from and writing to one connection (``None``: all of them)."""
        self._call(self._broker.pause, session)

    def resume(self, session: str | None = None) -> None:
        """Undo :meth:`pause`."""
        self._call(self._broker.resume, session)

    def send_raw(self, session: str, data: bytes) -> None:
        """Write ``data`` to a client exactly as given."""
        self._call(self._broker.send_raw, session, data)

    def __repr__(self) -> str:
        return f"<stompy.testing.Broker {self.url}>"


@contextmanager
def run_broker(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    backend: str = "asyncio",
    ssl: _ssl.SSLContext | None = None,
    websocket: bool = False,
    websocket_port: int = 0,
    ssl_context: _ssl.SSLContext | None = None,
    **options: Unpack[BrokerOptions],
) -> Iterator[Broker]:
    """Run :func:`~stompy.testing.serve` in a background thread for a ``with`` block.

    ``backend`` is the anyio backend of that thread (``"asyncio"`` or ``"trio"``).
    ``ssl`` makes it speak TLS (see :func:`~stompy.testing.serve`; ``ssl_context`` is
    its former name), ``websocket`` adds a WebSocket listener (see ``broker.ws_url``).
    Returns once the broker listens; on exit every connection is cut and the thread
    is joined. Raises what :func:`~stompy.testing.serve` raises.
    """
    # Fail here, before a thread starts.
    check(options, BROKER_OPTIONS, "run_broker")
    check_listener("run_broker", host, backend, websocket, port=port, websocket_port=websocket_port)
    context = tls_context(ssl, ssl_context)
    with (
        start_blocking_portal(backend) as portal,
        portal.wrap_async_context_manager(
            serve(
                host,
                port,
                ssl=context,
                websocket=websocket,
                websocket_port=websocket_port,
                **options,
            )
        ) as broker,
    ):
        yield Broker(portal, broker)

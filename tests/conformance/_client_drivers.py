"""The real clients as conformance flavours: ``Connection`` (sync) and ``AsyncConnection``.

The async client runs in an event loop of its own thread (asyncio or trio) behind a
blocking portal, so the same synchronous tests drive it. Each flavour also runs over
WebSocket (``sync-ws``, ``asyncio-ws``, ``trio-ws``) against the broker's ``ws_url``:
the in-process broker serves both transports over one core, so every test sees the
same queues whichever way its clients came in.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

import stompy
from stompy._core.frames import VERSIONS
from stompy.errors import ConnectionLost, StompError
from tests.conformance._drivers import (
    DEFAULT_TIMEOUT,
    AckMode,
    CoreDriver,
    Driver,
    Received,
    Target,
)

T = TypeVar("T")

_POLL_STEP = 0.002


def _received(message: stompy.Message | stompy.AsyncMessage) -> Received:
    return Received(
        message.destination,
        message.body,
        message.frame.headers,
        message.subscription,
        message.message_id,
        message.event.ack_id,
        message,
    )


class SyncDriver(Driver):
    """``stompy.Connection``: the blocking client."""

    flavour = "sync"

    @classmethod
    def url(cls, target: Target) -> str:
        return target.url

    def __init__(self, conn: stompy.Connection) -> None:
        self._conn = conn
        self._subs: dict[str, stompy.Subscription] = {}
        self._txs: dict[str, stompy.Transaction] = {}
        self._left: collections.deque[stompy.Message] = collections.deque()
        self._closed = False
        self.version = conn.version or ""
        self.session = conn.session
        self.server = conn.server
        self.heartbeats = conn.heartbeats

    @classmethod
    def open(
        cls,
        target: Target,
        *,
        versions: tuple[str, ...] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        login: str | None = None,
        passcode: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> SyncDriver:
        conn = stompy.Connection(
            cls.url(target),
            login=login if login is not None else target.login,
            passcode=passcode if passcode is not None else target.passcode,
            host=target.connect_host,
            versions=versions,
            heartbeats=heartbeats,
            connect_timeout=timeout,
            receipt_timeout=DEFAULT_TIMEOUT,
        )
        conn.connect()
        return cls(conn)

    def _check(self) -> None:
        if self._conn.failure is not None:
            raise self._conn.failure

    def send(
        self,
        destination: str,
        body: bytes | str,
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> None:
        self._conn.send(
            destination,
            body,
            headers=headers,
            content_type=content_type,
            transaction=transaction,
            receipt=receipt,
        )

    def send_many(
        self,
        messages: Sequence[stompy.Outgoing],
        *,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> int:
        return self._conn.send_many(messages, transaction=transaction, receipt=receipt)

    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        receipt: bool = True,
    ) -> str:
        sub = self._conn.subscribe(destination, ack=ack, id=id, headers=headers, receipt=receipt)
        self._subs[sub.id] = sub
        return sub.id

    def unsubscribe(self, id: str, *, receipt: bool = True) -> None:
        sub = self._subs.pop(id)
        sub.unsubscribe(receipt=receipt)
        while (message := sub.get(timeout=0)) is not None:
            self._left.append(message)

    def poll(self, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        while True:
            if self._left:
                return _received(self._left.popleft())
            for sub in list(self._subs.values()):
                message = sub.get(timeout=0)
                if message is not None:
                    return _received(message)
            self._check()
            if self._closed or time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_STEP)

    def ack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        native = message.native
        assert isinstance(native, stompy.Message)
        native.ack(transaction, receipt=receipt)

    def nack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        native = message.native
        assert isinstance(native, stompy.Message)
        native.nack(transaction, receipt=receipt)

    def begin(self, transaction: str | None = None, *, receipt: bool = True) -> str:
        tx = self._conn.transaction()
        self._txs[tx.id] = tx
        return tx.id

    def commit(self, transaction: str, *, receipt: bool = True) -> None:
        self._txs.pop(transaction).commit(receipt=receipt)

    def abort(self, transaction: str, *, receipt: bool = True) -> None:
        self._txs.pop(transaction).abort(receipt=receipt)

    def idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check()
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        self._check()

    def disconnect(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._check()
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # Never raises: the broker's ERROR that close() raises when no call did
            # (_check() raised the stored failure itself, not a call) was told.
            with contextlib.suppress(StompError):
                self._conn.close()

    @property
    def closed(self) -> bool:
        return self._closed or not self._conn.connected


async def _take_first(subs: list[stompy.AsyncSubscription]) -> stompy.AsyncMessage | None:
    for sub in subs:
        message = await sub.get(timeout=0)
        if message is not None:
            return message
    return None


class _AsyncDriver(Driver):
    """``stompy.AsyncConnection`` in an event loop of its own thread."""

    backend = "asyncio"

    @classmethod
    def url(cls, target: Target) -> str:
        return target.url

    def __init__(
        self,
        portal_cm: AbstractContextManager[BlockingPortal],
        portal: BlockingPortal,
        conn: stompy.AsyncConnection,
    ) -> None:
        self._portal_cm = portal_cm
        self._portal = portal
        self._conn = conn
        self._subs: dict[str, stompy.AsyncSubscription] = {}
        self._txs: dict[str, stompy.AsyncTransaction] = {}
        self._left: collections.deque[stompy.AsyncMessage] = collections.deque()
        self._closed = False
        self._conn_cm: AbstractContextManager[stompy.AsyncConnection] | None = None
        self.version = conn.version or ""
        self.session = conn.session
        self.server = conn.server
        self.heartbeats = conn.heartbeats

    @classmethod
    def open(
        cls,
        target: Target,
        *,
        versions: tuple[str, ...] = VERSIONS,
        heartbeats: tuple[int, int] = (0, 0),
        login: str | None = None,
        passcode: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> _AsyncDriver:
        portal_cm = start_blocking_portal(cls.backend)
        portal = portal_cm.__enter__()
        try:
            conn = stompy.AsyncConnection(
                cls.url(target),
                login=login if login is not None else target.login,
                passcode=passcode if passcode is not None else target.passcode,
                host=target.connect_host,
                versions=versions,
                heartbeats=heartbeats,
                connect_timeout=timeout,
                receipt_timeout=DEFAULT_TIMEOUT,
            )
            # One task of the portal owns the connection from enter to exit, as
            # structured concurrency wants: connect and close run in that task.
            conn_cm = portal.wrap_async_context_manager(conn)
            conn_cm.__enter__()
        except BaseException:
            portal_cm.__exit__(None, None, None)
            raise
        driver = cls(portal_cm, portal, conn)
        driver._conn_cm = conn_cm
        return driver

    def _call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        result: T = self._portal.call(fn)
        return result

    def _check(self) -> None:
        if self._conn.failure is not None:
            raise self._conn.failure

    def send(
        self,
        destination: str,
        body: bytes | str,
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> None:
        async def run() -> None:
            await self._conn.send(
                destination,
                body,
                headers=headers,
                content_type=content_type,
                transaction=transaction,
                receipt=receipt,
            )

        self._call(run)

    def send_many(
        self,
        messages: Sequence[stompy.Outgoing],
        *,
        transaction: str | None = None,
        receipt: bool = True,
    ) -> int:
        async def run() -> int:
            return await self._conn.send_many(messages, transaction=transaction, receipt=receipt)

        return self._call(run)

    def subscribe(
        self,
        destination: str,
        *,
        ack: AckMode = "auto",
        id: str | None = None,
        headers: Mapping[str, str] | None = None,
        receipt: bool = True,
    ) -> str:
        async def run() -> stompy.AsyncSubscription:
            return await self._conn.subscribe(
                destination, ack=ack, id=id, headers=headers, receipt=receipt
            )

        sub = self._call(run)
        self._subs[sub.id] = sub
        return sub.id

    def unsubscribe(self, id: str, *, receipt: bool = True) -> None:
        sub = self._subs.pop(id)

        async def run() -> None:
            await sub.unsubscribe(receipt=receipt)
            while (message := await sub.get(timeout=0)) is not None:
                self._left.append(message)

        self._call(run)

    def poll(self, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        while True:
            if self._left:
                return _received(self._left.popleft())

            message = self._portal.call(_take_first, list(self._subs.values()))
            if message is not None:
                return _received(message)
            self._check()
            if self._closed or time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_STEP)

    def _native(self, message: Received) -> stompy.AsyncMessage:
        native = message.native
        assert isinstance(native, stompy.AsyncMessage)
        return native

    def ack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        native = self._native(message)

        async def run() -> None:
            await native.ack(transaction, receipt=receipt)

        self._call(run)

    def nack(
        self, message: Received, *, transaction: str | None = None, receipt: bool = True
    ) -> None:
        native = self._native(message)

        async def run() -> None:
            await native.nack(transaction, receipt=receipt)

        self._call(run)

    def begin(self, transaction: str | None = None, *, receipt: bool = True) -> str:
        async def run() -> stompy.AsyncTransaction:
            return await self._conn.transaction()

        tx = self._call(run)
        self._txs[tx.id] = tx
        return tx.id

    def commit(self, transaction: str, *, receipt: bool = True) -> None:
        tx = self._txs.pop(transaction)

        async def run() -> None:
            await tx.commit(receipt=receipt)

        self._call(run)

    def abort(self, transaction: str, *, receipt: bool = True) -> None:
        tx = self._txs.pop(transaction)

        async def run() -> None:
            await tx.abort(receipt=receipt)

        self._call(run)

    def idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check()
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        self._check()

    def disconnect(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._check()
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._conn_cm is not None:
                self._conn_cm.__exit__(None, None, None)
        except (StompError, ConnectionLost):
            pass
        finally:
            self._portal_cm.__exit__(None, None, None)

    @property
    def closed(self) -> bool:
        return self._closed or not self._conn.connected


class AsyncioDriver(_AsyncDriver):
    flavour = "asyncio"
    backend = "asyncio"


class TrioDriver(_AsyncDriver):
    flavour = "trio"
    backend = "trio"


class WebSocketFlavour:
    """Marks a flavour that connects to ``Target.ws_url`` (skipped when there is none)."""

    @classmethod
    def url(cls, target: Target) -> str:
        assert target.ws_url is not None
        return target.ws_url


class SyncWsDriver(WebSocketFlavour, SyncDriver):
    flavour = "sync-ws"


class AsyncioWsDriver(WebSocketFlavour, AsyncioDriver):
    flavour = "asyncio-ws"


class TrioWsDriver(WebSocketFlavour, TrioDriver):
    flavour = "trio-ws"


#: Every client flavour the suite runs, by name.
FLAVOURS: dict[str, type[Driver]] = {
    "core": CoreDriver,
    "sync": SyncDriver,
    "asyncio": AsyncioDriver,
    "trio": TrioDriver,
    "sync-ws": SyncWsDriver,
    "asyncio-ws": AsyncioWsDriver,
    "trio-ws": TrioWsDriver,
}

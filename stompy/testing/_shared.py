"""What the broker and the fault proxy share: their anyio plumbing and their thread side.

Both read sockets in chunks of the same size, serve connections in a task group that
lives as long as an ``async with`` block, name peers the same way, hand out snapshots
of their counters, offer ``wait_until`` to tests, and have a twin for synchronous code
that runs them in a background thread behind a blocking portal.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from typing import Any, Concatenate, Final, Generic, ParamSpec, Protocol, TypeVar, overload

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.from_thread import BlockingPortal
from anyio.streams.stapled import MultiListener
from typing_extensions import Self

from stompy._checks import check_seconds
from stompy._engine.keywords import check
from stompy.errors import ConfigurationError, ListenFailed

__all__ = (
    "CHUNK",
    "WRITE_CHUNK",
    "STREAM_ERRORS",
    "Counters",
    "InThread",
    "Inspected",
    "Listening",
    "check_listener",
    "in_loop",
    "listen",
    "peer_name",
    "serving_task_group",
    "wait_until",
    "write_chunks",
)

T = TypeVar("T")
P = ParamSpec("P")
#: A server's counters and what it says about one connection.
S = TypeVar("S", covariant=True)
C = TypeVar("C", covariant=True)

#: Bytes read from a socket at once, by the broker and by the fault proxy (for the
#: proxy, a chunk is also the unit every fault applies to).
CHUNK: Final = 65536

#: Bytes the broker hands a stream or transport at once when its output is longer: a
#: transport copies what the socket does not take into a buffer of its own, so a
#: subscriber that never reads holds a copy of this much at most, not of each body
#: (see ClientConnection.buffers_to_send).
WRITE_CHUNK: Final = 262144


def write_chunks(pieces: list[bytes], limit: int = WRITE_CHUNK) -> list[bytes | memoryview]:
    """``pieces`` as writes of about ``limit`` bytes at most: runs of short pieces
    joined, a long piece in slices of it that copy nothing."""
    chunks: list[bytes | memoryview] = []
    run: list[bytes] = []
    size = 0
    for piece in pieces:
        if len(piece) <= limit:
            if size + len(piece) > limit:
                chunks.append(b"".join(run))
                run, size = [], 0
            run.append(piece)
            size += len(piece)
            continue
        if run:
            chunks.append(b"".join(run))
            run, size = [], 0
        view = memoryview(piece)
        chunks.extend(view[at : at + limit] for at in range(0, len(piece), limit))
    if run:
        chunks.append(b"".join(run))
    return chunks


#: What a broken, reset or closed stream raises: the end of that connection, no bug.
STREAM_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


def check_listener(
    call: str, host: object, backend: object = "asyncio", websocket: object = False, **ports: object
) -> None:
    """The types of what a server listens on (``host``, its ports, whether it speaks
    WebSocket too) and of the thread's ``backend``, checked as ``call`` starts: a
    :class:`TypeError` naming the argument, not the resolver's error (or anyio's) from
    inside, nor a ``"no"`` taken for true."""
    if not isinstance(websocket, bool):
        raise TypeError(f"{call}(): websocket must be a bool, not {type(websocket).__name__}")
    if not isinstance(host, str):
        raise TypeError(f"{call}(): host must be a str, not {type(host).__name__}")
    if not host:
        # The resolver's "Name or service not known" would not say that it is the
        # empty name (which socket.bind() takes for every interface).
        raise ConfigurationError(
            f"{call}(): host must name the address to listen on, got '' (every "
            "interface: '0.0.0.0' for IPv4, '::' for IPv6; this machine only: '127.0.0.1')"
        )
    if not isinstance(backend, str):
        raise TypeError(f"{call}(): backend must be a str, not {type(backend).__name__}")
    if backend not in ("asyncio", "trio"):  # anyio's own: "LookupError: No such backend"
        raise ConfigurationError(f"{call}(): backend must be 'asyncio' or 'trio', got {backend!r}")
    for name, port in ports.items():
        if not isinstance(port, int) or isinstance(port, bool):
            raise TypeError(f"{call}(): {name} must be an int, not {type(port).__name__}")
        if not 0 <= port <= 65535:
            raise ConfigurationError(
                f"{call}(): {name} must be a TCP port from 0 (any free one) to 65535, got {port}"
            )


async def listen(host: str, port: int) -> MultiListener[anyio.abc.SocketStream]:
    """A TCP listener on ``host:port`` (0: a free port).

    Raises :class:`~stompy.errors.ListenFailed` (an :class:`OSError`) naming the
    address and the cause when it cannot be made: a port taken, a host that does not
    resolve. The resolver's or the socket's own error would name neither.
    """
    try:
        return await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:
        shown = f"[{host}]" if ":" in host else host
        cause = exc.strerror or str(exc) or type(exc).__name__
        if isinstance(exc, socket.gaierror):
            cause = f"the host does not resolve ({cause})"
        raise ListenFailed(
            f"cannot listen on {shown}:{port}: {cause}",
            host=host,
            port=port,
            errno=exc.errno,
            strerror=exc.strerror,
        ) from exc


def peer_name(stream: anyio.TypedAttributeProvider) -> str:
    """The other end of ``stream`` as ``host:port`` (``[host]:port`` for IPv6), else ``?``."""
    try:
        address = stream.extra(SocketAttribute.remote_address)
    except (anyio.TypedAttributeLookupError, OSError):
        return "?"
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    """Poll ``predicate`` until it is true; raise :class:`TimeoutError` after ``timeout``.

    A ``timeout`` that is no number of seconds >= 0 is a :class:`TypeError` or a
    :class:`~stompy.errors.ConfigurationError` (``None`` too: trio's would wait forever).
    """
    timeout = check_seconds("timeout", timeout)
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


@asynccontextmanager
async def serving_task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group for the serving tasks of an ``async with`` block, cancelled at its end.

    The block's own exceptions must reach the caller unwrapped (not in an
    ExceptionGroup), so the group is exited by hand without them: its tasks never raise.
    """
    tg = anyio.create_task_group()
    await tg.__aenter__()
    try:
        yield tg
    finally:
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)


@dataclass(slots=True)
class Counters:
    """The base of a server's counters (its fields), which it counts as things happen.

    What the server's ``stats`` returns is a :meth:`snapshot`: a copy, which the server
    does not change afterwards (nor changing it the server).
    """

    def snapshot(self, **changes: int) -> Self:
        """A copy, with the fields named in ``changes`` set to their values.

        Raises :class:`TypeError` for a name that is not a field."""
        check(changes, frozenset(f.name for f in fields(self)), f"{type(self).__name__}.snapshot")
        return replace(self, **changes)


class Listening(Protocol):
    """What a running server (the broker, the fault proxy) says about where it listens."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def url(self) -> str: ...


class Inspected(Listening, Protocol[S, C]):
    """A running server that counts what it does and lists its connections."""

    @property
    def stats(self) -> S: ...

    @property
    def connections(self) -> tuple[C, ...]: ...


class InThread(Generic[S, C]):
    """The base of a server's twin for synchronous code: each call runs in the server's
    event loop, in its background thread, and waits for it. Not callable from that loop.
    """

    def __init__(self, portal: BlockingPortal, server: Inspected[S, C]) -> None:
        self._portal = portal
        self._server = server
        #: The address it listens on.
        self.host = server.host
        #: The real port (never 0).
        self.port = server.port
        #: Its URL, with the real port: connect there.
        self.url = server.url

    @overload
    def _call(self, function: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T: ...

    @overload
    def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in the server's event loop (awaited if async)."""
        return self._portal.call(functools.partial(function, *args, **kwargs))

    @property
    def connections(self) -> tuple[C, ...]:
        """A snapshot of every open connection, oldest first."""
        return self._call(lambda: self._server.connections)

    @property
    def stats(self) -> S:
        """A snapshot of the server's counters."""
        return self._call(lambda: self._server.stats)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` (in this thread) until it is true.

        Raises :class:`TimeoutError` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + check_seconds("timeout", timeout)
        while not predicate():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(0.005)


@overload
def in_loop(
    method: Callable[Concatenate[Any, P], Awaitable[T]],
) -> Callable[Concatenate[InThread[Any, Any], P], T]: ...


@overload
def in_loop(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[InThread[Any, Any], P], T]: ...


def in_loop(method: Callable[..., Any]) -> Callable[..., Any]:
    """An :class:`InThread` method that runs the server's ``method`` in its event loop
    (``method`` as its class has it: the twin passes its server as ``self``), with the
    same parameters; its docstring points to ``method``'s."""

    @functools.wraps(method)
    def call(self: InThread[Any, Any], *args: Any, **kwargs: Any) -> Any:
        return self._call(method, self._server, *args, **kwargs)

    call.__doc__ = f"See :meth:`{method.__qualname__}`."
    return call

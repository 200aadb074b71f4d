"""A connection's life, written once for both transports: steps of I/O to run.

Theory of operation. :class:`Lifecycle` holds a generator that goes through the life
of a client connection: the attempts to connect (the delays between them, each
address of each round), establishing each (TCP and TLS, the WebSocket upgrade if any,
CONNECT until CONNECTED, all within ``connect_timeout``), serving the connection made,
and, when it is lost, the verdict (reconnect or fail) and the attempts again. Where it
needs I/O it yields a step (:class:`Open`, :class:`Write`, :class:`Read`,
:class:`Pause`, :data:`DROP`, :class:`Serve`, :data:`HANG_UP`, :data:`CHANGED`); the
transport runs the step in its own way (a blocking socket, an anyio stream) and
resumes the lifecycle with the time and the step's result, or with the
:class:`LinkError` its I/O failed with. The lifecycle reads no clock and opens no
socket, so the rules below hold for both transports alike and are tested with a fake
clock (``tests/test_lifecycle.py``).

The rules:

* An attempt is made only while the engine still wants one (its status ``NEW`` or
  ``RECONNECTING``); it is checked after each delay, and again once a connection was
  established, so a close that came meanwhile is never undone by installing a new
  connection: a closed engine stays closed. A connection made for nothing is dropped
  (:data:`DROP`).
* A delay waits out its whole time (:class:`Pause` is asked again after an early
  wake-up) unless the status changed: only a close cuts it short.
* Any step of establishing that runs out of ``connect_timeout`` fails the attempt with
  "no CONNECTED ... within the connect timeout"; any other I/O failure with "cannot
  connect to ...: why".
* After each pump (bytes read, a heart-beat deadline), :func:`why_ended` says whether
  the connection ended: the failure the pump found (the end of the stream, an ERROR,
  a WebSocket close already folded in by the transport), or the core closed with
  nothing left to write (after the DISCONNECT's receipt: nothing more can come that
  matters). A :class:`ConnectionLost` with many bytes unwritten names the likely cause
  (:func:`while_writing`), whichever of the transport's loops found it.
* A lost connection is closed (:data:`HANG_UP`, with the WebSocket's goodbye when the
  link was one: :func:`farewell`) before the engine's verdict; every wait is woken
  once the status changed (:data:`CHANGED`).
"""

from __future__ import annotations

import enum
import ssl as _ssl
from collections.abc import Generator
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from stompy._engine.connecting import Attempts, Handshake
from stompy._engine.failures import failure_reason, while_writing
from stompy._engine.message import MessageBase
from stompy._engine.state import NEW, PROTOCOL_CLOSED, RECONNECTING, Status
from stompy._engine.urls import Endpoint
from stompy.errors import ConnectFailed, ConnectionLost, StompError

if TYPE_CHECKING:
    from stompy._engine.engine import Engine

__all__ = (
    "CHANGED",
    "DROP",
    "HANG_UP",
    "Lifecycle",
    "LinkError",
    "Open",
    "Pause",
    "Read",
    "Serve",
    "Step",
    "Write",
    "farewell",
    "link_error",
    "why_ended",
)

M = TypeVar("M", bound=MessageBase)


class LinkError(Exception):
    """An I/O step failed: the transport's own exception (``OSError``, anyio's) is its
    ``__cause__``, its words the reason. ``timed_out``: the step's deadline passed."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


def link_error(exc: BaseException, reason: str | None = None) -> LinkError:
    """``exc``, an I/O error of the transport's, as the lifecycle takes it: in
    ``reason``'s words (default: its own), timed out for a :class:`TimeoutError`."""
    error = LinkError(failure_reason(exc) if reason is None else reason)
    error.timed_out = isinstance(exc, TimeoutError)
    error.__cause__ = exc
    return error


class Open:
    """Connect to ``endpoint`` by ``deadline``: TCP, and TLS over it with ``tls`` (the
    server's name checked against ``endpoint.host``). The result: nothing; the link is
    the transport's, for the steps that follow."""

    __slots__ = ("deadline", "endpoint", "tls")

    def __init__(self, endpoint: Endpoint, tls: _ssl.SSLContext | None, deadline: float) -> None:
        self.endpoint = endpoint
        self.tls = tls
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"<Open {self.endpoint} tls={self.tls is not None} until {self.deadline}>"


class Write:
    """Write all of ``data`` to the link being established, by ``deadline``."""

    __slots__ = ("data", "deadline")

    def __init__(self, data: bytes, deadline: float) -> None:
        self.data = data
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"<Write {len(self.data)} bytes until {self.deadline}>"


class _Until:
    """A step that ends by ``deadline`` at the latest."""

    __slots__ = ("deadline",)

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"<{type(self).__name__} until {self.deadline}>"


class Read(_Until):
    """Read what comes from the link being established, by ``deadline``; the result:
    the bytes (``b""`` at the end of the stream)."""

    __slots__ = ()


class Pause(_Until):
    """Wait until ``deadline``, or until the engine's status changes (a close), or
    sooner: the lifecycle asks again if it must."""

    __slots__ = ()


class Serve:
    """The connection was established and installed in the engine
    (:meth:`Engine.install`): make the link the transport's current one, write what
    the engine queued, and serve it until it ends. The result: why it ended, or
    ``None`` when it was closed by the user."""

    __slots__ = ("handshake",)

    def __init__(self, handshake: Handshake) -> None:
        self.handshake = handshake

    def __repr__(self) -> str:
        return f"<Serve {self.handshake.endpoint}>"


class Signal(enum.Enum):
    """The steps that carry nothing."""

    #: Close the link being established, unused (none: nothing to do).
    DROP = "drop"
    #: Close the current link, after writing :func:`farewell` if it says anything.
    HANG_UP = "hang up"
    #: The engine's status changed: wake every wait, each checks its own cause.
    CHANGED = "changed"


DROP: Final = Signal.DROP
HANG_UP: Final = Signal.HANG_UP
CHANGED: Final = Signal.CHANGED

#: What a lifecycle asks its transport to do.
Step = Open | Write | Read | Pause | Serve | Signal
#: The generator inside a :class:`Lifecycle`: sent what each step gave.
Steps = Generator[Step, object, None]

_WANTING: Final = (NEW, RECONNECTING)


def why_ended(engine: Engine[M], failure: StompError | None, unsent: int) -> StompError | None:
    """After a pump that gave ``failure`` (``None``: none), with ``unsent`` bytes not
    yet written: why the connection ended, or ``None`` when it goes on. The transport
    ends the connection when this is not ``None`` (a failure while the engine is
    closing is the user's close, not a loss)."""
    if failure is None:
        proto = engine.proto
        if proto is None or proto.state is not PROTOCOL_CLOSED or engine.outgoing:
            return None
        failure = ConnectionLost("closed")
    if isinstance(failure, ConnectionLost):
        return while_writing(failure, unsent)
    return failure


def farewell(engine: Engine[M]) -> bytes:
    """The bytes to write as the current link closes: the WebSocket close frame when it
    is a WebSocket with nothing left unwritten (a goodbye behind a half-written frame
    would corrupt it), else nothing. Best effort: the link is closing either way."""
    ws = engine.ws
    if ws is None or engine.outgoing:
        return b""
    return ws.close()


class Lifecycle(Generic[M]):
    """The life of ``engine``'s connections, for a transport to run step by step.

    :meth:`resume` with the time gives the first step; after running a step, the
    transport calls :meth:`resume` with the time and the step's result (or
    :meth:`failed` with why its I/O failed), which gives the next step, or ``None``
    once the life is over. Raises why the first connection could not be made
    (:class:`ConnectFailed`, :class:`ServerError`): the transport hands it to the user.
    """

    __slots__ = ("_steps", "engine", "now")

    def __init__(self, engine: Engine[M]) -> None:
        self.engine = engine
        #: The time, as the transport last said.
        self.now = 0.0
        self._steps: Steps = self._life()

    def resume(self, now: float, result: object = None) -> Step | None:
        """The step ran and gave ``result``, at ``now``: the next step."""
        self.now = now
        return self._next(result, None)

    def failed(self, now: float, error: LinkError) -> Step | None:
        """The step's I/O failed with ``error``, at ``now``: the next step."""
        self.now = now
        return self._next(None, error)

    def close(self) -> None:
        """The transport stopped running the steps (its task was cancelled)."""
        self._steps.close()

    def _next(self, result: object, error: LinkError | None) -> Step | None:
        try:
            if error is not None:
                return self._steps.throw(error)
            return self._steps.send(result)
        except StopIteration:
            return None

    # -- the steps ---------------------------------------------------------------------

    def _life(self) -> Steps:
        engine = self.engine
        attempts = engine.connect_attempts()
        handshake = yield from self._attempt(attempts)
        if handshake is None:
            if engine.status is NEW:
                raise attempts.error()
            raise ConnectFailed("the connection was closed before it was made")
        while True:
            engine.install(handshake, self.now)
            lost = yield Serve(handshake)
            yield HANG_UP
            if lost is None:
                return
            assert isinstance(lost, StompError)
            attempts_again = engine.lost(lost)
            yield CHANGED
            if attempts_again is None:
                return
            handshake = yield from self._attempt(attempts_again)
            if handshake is None:
                status: Status = engine.status  # the steps ran meanwhile
                if status is RECONNECTING:
                    engine.give_up(attempts_again)
                    yield CHANGED
                return

    def _attempt(self, attempts: Attempts) -> Generator[Step, object, Handshake | None]:
        """Go through ``attempts``: the first connection established, or ``None`` when
        none was (or the engine stopped wanting one)."""
        engine = self.engine
        for delay, endpoint in attempts:
            until = self.now + delay
            while self.now < until and engine.status in _WANTING:
                yield Pause(until)
            if engine.status not in _WANTING:
                return None
            try:
                handshake = yield from self._establish(endpoint)
            except StompError as exc:
                attempts.failed(endpoint, exc)
                continue
            status: Status = engine.status  # again: a close may have come meanwhile
            if status not in _WANTING:
                yield DROP
                return None
            return handshake
        return None

    def _establish(self, endpoint: Endpoint) -> Generator[Step, object, Handshake]:
        """One connection to ``endpoint``, up to CONNECTED; raises why not (the link is
        dropped first)."""
        options = self.engine.options
        deadline = self.now + options.connect_timeout
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        handshake = self.engine.handshake(endpoint)
        late = f"no CONNECTED from {endpoint} within the connect timeout"
        try:
            yield Open(endpoint, context, deadline)
            data = handshake.first
            while handshake.connected is None:
                if self.now >= deadline:
                    raise ConnectFailed(late)
                if data:
                    yield Write(data, deadline)
                received = yield Read(deadline)
                assert isinstance(received, bytes)
                data = handshake.receive(received, self.now)
            if data:  # an answer that came with CONNECTED (a WebSocket pong, say)
                yield Write(data, deadline)
        except LinkError as exc:
            yield DROP
            if exc.timed_out:
                raise ConnectFailed(late) from None
            raise ConnectFailed(f"cannot connect to {endpoint}: {exc}") from exc.__cause__
        except StompError:
            yield DROP
            raise
        return handshake

"""The anyio transport's I/O: the stream, the connection's tasks, and the events that
wake the user's waits (asyncio and trio alike).

The connection owns a task group, entered by ``async with AsyncConnection(...)`` and
exited where it was entered, at the end of that block (:meth:`TaskIO.open`,
:meth:`TaskIO.leave`): anyio and trio allow a task group to be left only by the task
that entered it, in the cancel scope it was entered in. :meth:`TaskIO.close` may come
from any task, inside any cancel scope: it only stops the connection's work (each task
runs in a cancel scope of its own, which close cancels, then it waits for the tasks to
end), and leaves the task group, empty, to the end of the block.

For each established connection (an *epoch*; a reconnect starts a new one) it runs
three tasks: a reader that feeds received bytes to the engine, a writer that
sends what the engine has to send, and a timer that wakes at the core's heart-beat
deadline and at the deadlines of the waits for receipts and replies. User calls run
their steps on the engine synchronously (:meth:`TaskIO.run`), which queues their
frames in the engine's one outgoing buffer, so nothing can interleave. A call that
waits next (a receipt, a reply), or a send on a connection at rest, writes that buffer
from its own task when the stream is free (:meth:`TaskIO.push`), saving the hand-off
to the writer; otherwise it wakes the writer. Every
write takes the whole buffer under the write lock and is shielded: cancelling a call
never leaves half a frame on the wire. A plain TCP connection is read and written
through its socket (:mod:`stompy._transports.rawsocket`): there the write-through
writes what the socket takes at once, without awaiting anything (so nothing can come
between), and leaves the rest, first in the buffer, to the writer.

While the engine keeps a backlog (a subscription's inbox is full) the reader stops
reading: TCP pushes back on the broker and memory stays flat. It reads again once a
consumer has taken half an inbox. The timer looks into the socket before the engine
judges the broker silent (:meth:`~stompy._engine.engine.Engine.tick`): bytes waiting there
are a sign of life, so neither a slow consumer nor user code that blocked the event
loop for a while is mistaken for a dead broker.
The tasks catch their own errors and hand them to the engine, so no ExceptionGroup
reaches the user (were one to come, :meth:`TaskIO.leave` would unwrap it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import sys
import threading
import types
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from stompy._engine import lifecycle
from stompy._engine.calls import Call, Running, Steps, Wait, Waiting
from stompy._engine.engine import Engine
from stompy._engine.failures import failure_reason, transport_failed
from stompy._engine.message import MessageBase
from stompy._engine.state import CLOSED, PROTOCOL_CLOSED
from stompy._transports.blocking import bytes_waiting
from stompy._transports.rawsocket import (
    RawSocketStream,
    ReadTurn,
    SocketTurn,
    direct,
    loop_clock,
    running_backend,
)
from stompy._transports.signal import Signal
from stompy.errors import ConnectionLost, LocalProtocolError, StompError

if sys.version_info < (3, 11):  # the backport, which anyio requires there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__ = ("NETWORK_ERRORS", "Getter", "TaskIO", "Wake", "thread_id")

M = TypeVar("M", bound=MessageBase)
T = TypeVar("T")

#: The calling thread's id: an :class:`~stompy.AsyncConnection` serves only the thread
#: and the event loop that opened it (:meth:`TaskIO.check_thread`).
thread_id: Final = threading.get_ident
#: The thread's running asyncio loop (``None`` under trio): another one in the thread is
#: another event loop (a connection made in one loop, used from ``asyncio.run()`` or
#: from ``asyncio.run()`` inside a trio task).
running_loop: Final = asyncio.events._get_running_loop


def _sniffio_thread_local() -> Any:
    try:
        from sniffio import thread_local
    except ImportError:  # pragma: no cover - without sniffio no trio runs (trio needs it)
        return types.SimpleNamespace(name=None)
    return thread_local


#: What sniffio says runs in the thread (its ``name``): ``"trio"`` while trio runs
#: (trio sets it), ``None`` under asyncio: another library's loop is another event loop
#: (a ``trio.run()`` inside an asyncio task).
sniffed: Final = _sniffio_thread_local()

#: Under glibc's mmap threshold: see :data:`stompy._transports.rawsocket.RECV_SIZE`.
_RECV_SIZE: Final = 64 * 1024
#: How long a failed write waits for the reader to read what the broker said before
#: it closed (its ERROR) and end the connection with that.
_LAST_WORDS_WAIT: Final = 0.5

NETWORK_ERRORS: Final = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


def _unwrapped(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a user is shown of a task group's ExceptionGroup: its first StompError, else
    its first exception that is not a cancellation, else its first (never the group)."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending and len(leaves) < 64:  # a bounded walk down nested groups
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = exc.exceptions
        else:
            leaves.append(exc)
    cancelled = anyio.get_cancelled_exc_class()
    for wanted in (StompError, Exception):
        for exc in leaves:
            if isinstance(exc, wanted) and not isinstance(exc, cancelled):
                return exc
    return leaves[0] if leaves else group


def _connect_reason(exc: BaseException) -> str:
    """Why a connection could not be made, in the blocking client's words.

    anyio's ``connect_tcp`` says only "All connection attempts failed", an OSError
    without errno whose cause is the attempt's error (an ExceptionGroup of them, one per
    address tried): those are told instead, each once, by errno as the socket module
    does ("[Errno 111] Connection refused"), not by the event loop's own phrasing.
    """
    cause = exc.__cause__
    if not isinstance(exc, OSError) or exc.errno is not None or cause is None:
        return failure_reason(exc)
    causes = cause.exceptions if isinstance(cause, BaseExceptionGroup) else (cause,)
    reasons = dict.fromkeys(
        f"[Errno {each.errno}] {os.strerror(each.errno)}"
        if isinstance(each, OSError) and each.errno is not None
        else failure_reason(each)
        for each in causes
    )
    return "; ".join(reasons)


class Wake(Protocol):
    """What wakes a wait for a receipt, a reply or a ``get()``: an :class:`anyio.Event`,
    or the turn of the call reading through (:class:`ReadTurn` on asyncio, its future;
    :class:`SocketTurn` on trio), which only that call registers, and forgets before it
    gives the turn up: setting it wakes that call."""

    def set(self) -> None:
        """Wake the wait (again: nothing)."""


class Getter(Protocol):
    """A subscription with a ``get()`` waiting: woken when its inbox fills."""

    def wake(self, *, ended: bool) -> bool:
        """Wake its waiters if it has something (or ``ended``); whether it did."""


class TaskIO(Generic[M]):
    """Serves one engine: establishes its connections and runs the tasks."""

    def __init__(self, engine: Engine[M]) -> None:
        self.engine = engine
        #: The event loop's clock and a maker of its events: ``anyio.current_time`` and
        #: ``anyio.Event``, found once as the connection opens (:func:`loop_clock`,
        #: :func:`running_backend`).
        self.clock: Callable[[], float] = anyio.current_time
        self.new_event: Callable[[], anyio.Event] = anyio.Event
        #: A new future of the running asyncio loop (for :meth:`read_from`), made
        #: without the loop's ``create_future()`` in between once the connection opens.
        self.loop_future: Callable[[], asyncio.Future[None]] = _running_loop_future
        self.stream: anyio.abc.ByteStream | None = None
        #: The stream being established (made by the lifecycle's ``Open`` step).
        self._pending: anyio.abc.ByteStream | None = None
        self._out_ready = Signal()  # the writer has something to write
        #: :attr:`_out_ready` was set by :meth:`kick` and the writer has not taken it:
        #: the writer will write what is queued meanwhile, so a send need not set it.
        self.write_due = False
        self._drained = Signal()  # pulsed when the writer wrote
        #: A call or a get() waited, or bytes came, since a send last wrote through:
        #: the next send may write through (as the blocking transport's at_rest).
        self.at_rest = True
        self._changed = Signal()  # pulsed whenever the status changes
        self._receipts: dict[str, Wake] = {}  # receipt id -> its waiter's wake-up
        self._replies: dict[str, Wake] = {}  # correlation-id -> its waiter's wake-up
        #: On asyncio, the current plain TCP stream's socket reader (``None``: none), which
        #: a call waiting for an answer may take (:meth:`read_from`).
        self.turn: ReadTurn | None = None
        #: On trio, the current plain TCP stream's socket wait, which the reader task
        #: lends to the calls it answered (:meth:`read_in_turn`).
        self.lending: SocketTurn | None = None
        #: What a call that read through found the reader task must judge (a failure, a
        #: full inbox, the broker's goodbye): handed to it with :meth:`ReadTurn.poke`.
        self._handed: StompError | None = None
        #: Subscriptions with a ``get()`` waiting.
        self.getting: set[Getter] = set()
        #: A consumer made room (:meth:`make_room`): kept until the paused reader takes
        #: it, so room made before the reader task saw the pause is not lost (on trio a
        #: call reading through hands the pause on, and its task may empty the inbox
        #: before the reader task runs).
        self._room = Signal()
        self._rearm = anyio.Event()  # the timer's deadline may have come nearer
        #: While the timer task runs, the deadline of each wait for a receipt or a
        #: reply, by the event that wakes it: the timer wakes it at its deadline (see
        #: :meth:`_await_answer`).
        self._deadlines: dict[Wake, float] | None = None
        self._timer_at = math.inf  # when the timer wakes next, at the latest
        self.yield_at = 0.0  # when a get() with a message at hand next lets tasks run
        self._write_lock = anyio.Lock()
        #: The size of the write under way (what a failure leaves unsent, at most).
        self._writing = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        #: The cancel scope of each task spawned, with the id of the task running in it
        #: (``None`` until it started); a task's entry goes as it ends.
        self._working: dict[anyio.CancelScope, int | None] = {}
        self._work_ended = Signal()  # pulsed when a spawned task ended
        self._closing: anyio.Event | None = None  # set once close() finished
        self._epoch_scope: anyio.CancelScope | None = None
        #: The cancel scope of the establishing step under way (:meth:`_step`).
        self._cut: anyio.CancelScope | None = None
        #: Set when the engine has hook calls to make (:attr:`Engine.notices`).
        self.noticed = Signal()
        #: Set by the hooks task once it made the last call (``None``: no such task).
        self.hooks_done: anyio.Event | None = None
        #: The id of the task that runs the lifecycle hooks (``None``: none yet).
        self.hooks_task: int | None = None
        #: The thread whose event loop opened the connection (``None``: not yet), the
        #: only one its calls may come from (:meth:`check_thread`), and its name; the
        #: loop's :func:`running_loop` and :data:`sniffed` name there.
        self.thread: int | None = None
        self._thread_name = ""
        self.loop: object = None
        self.library: str | None = None
        #: asyncio (``None`` under trio): what says, as ``_thread_id``, the thread that
        #: runs the connection's loop now (``None`` while it does not run): asyncio's own
        #: loop itself (``BaseEventLoop``), else a :class:`_AskedLoop`. Asking for the
        #: running loop costs a ``getpid()`` system call on CPython 3.11 and later, once
        #: per call's check.
        self.host: Any = None

    def check_thread(self) -> None:
        """Raise :class:`LocalProtocolError` when called from another thread than the
        one whose event loop opened the connection (nothing happens, nothing is sent).

        The connection's tasks, events and stream belong to that loop. A call from
        another loop would wait on an event that the connection's tasks set without
        waking it (a receipt waited out ``receipt_timeout``, a ``get()`` with no
        timeout waited forever), and its writes would race theirs.

        On asyncio a loop runs in one thread at a time, and a thread runs one loop at a
        time: the loop running in this thread (:attr:`host`) is the connection's. Under
        trio, no asyncio loop may run (one started inside a trio task is another event
        loop). sniffio's name tells a trio run inside an asyncio task."""
        host = self.host
        if host is None:
            if (
                thread_id() != self.thread
                or sniffed.name != self.library
                or running_loop() is not None
            ):
                self.elsewhere()
        elif host._thread_id != thread_id() or sniffed.name != self.library:
            self.elsewhere()

    def at_home(self) -> bool:
        """Whether this is the thread and event loop that opened the connection (see
        :meth:`check_thread`, which raises where this says ``False``)."""
        host = self.host
        if host is None:
            return (
                thread_id() == self.thread
                and sniffed.name == self.library
                and running_loop() is None
            )
        home: bool = host._thread_id == thread_id() and sniffed.name == self.library
        return home

    def elsewhere(self) -> None:
        """:meth:`check_thread` after it found another thread or event loop: raise,
        unless the connection was never opened (the call raises why it cannot run)."""
        if self.thread is None:
            return
        if thread_id() == self.thread:
            if running_loop() is self.loop and sniffed.name == self.library:
                return
            raise LocalProtocolError(
                "this AsyncConnection was opened (`async with`) in another event loop "
                f"of this thread ({self._thread_name!r}) than this call's, and is used "
                "only in that one: one event loop and thread per connection. Open a "
                "connection in each event loop, or make the call in the connection's"
            )
        raise LocalProtocolError(
            f"this AsyncConnection was opened (`async with`) in thread "
            f"{self._thread_name!r}, and is used only there, in that event loop; this call "
            f"came from thread {threading.current_thread().name!r}: one event loop and "
            "thread per connection. From another thread, run the call in the "
            "connection's loop (anyio.from_thread.run(), asyncio.run_coroutine_threadsafe()"
            ", trio.from_thread.run()), or use a stompy.Connection, which any number of "
            "threads may share"
        )

    # -- waking waits ----------------------------------------------------------------------

    def status_changed(self) -> None:
        """The engine's status changed: wake every wait, each checks its own cause."""
        self.noticed.set()
        self._changed.pulse()
        self._drained.pulse()
        self._wake_answers()
        self._wake_getters(ended=True)

    def _wake_receipts(self) -> None:
        for waiter in self._receipts.values():
            waiter.set()

    def _wake_answers(self) -> None:
        """Wake every wait for a receipt or a reply (the connection changed)."""
        self._wake_receipts()
        for waiter in self._replies.values():
            waiter.set()

    def _wake_getters(self, *, ended: bool = False) -> bool:
        """Wake the ``get()`` calls with a message (or all, ``ended``); whether any."""
        getting = self.getting
        woken: list[Getter] = []
        for sub in getting:  # (no list comprehension: its own frame, once per answer)
            if sub.wake(ended=ended):
                woken.append(sub)
        if not woken:
            return False
        getting.difference_update(woken)
        return True

    def make_room(self) -> None:
        """A consumer took messages: let a paused reader move the backlog (now, or as
        soon as it sees the pause)."""
        self._room.set()

    def kick(self) -> None:
        """Start the writer if there is something to write."""
        if self.engine.outgoing and not self.write_due:
            self.write_due = True
            self._out_ready.set()

    async def push(self) -> bool:
        """Before a call waits: write what is queued from the calling task when the
        stream is free (the write-through), else start the writer; whether it wrote
        (it then let the other tasks run).

        Free: the writer was not started for it (it would write it next) and nobody
        holds the write lock, so the frames keep their order. The write is shielded,
        as the writer's is (a cancelled call never leaves half a frame on the wire),
        and bounded by ``receipt_timeout``; a failure ends the connection as the
        writer's would, for the reader and the supervisor to judge. It saves the
        hand-off to the writer task, one task switch per round trip."""
        if self.push_now():
            return False
        engine = self.engine
        out = engine.outgoing
        stream = self.stream
        scope = self._epoch_scope
        assert stream is not None
        assert scope is not None
        lock = self._write_lock
        lock.acquire_nowait()
        failure: StompError | None = None
        try:
            data = bytes(out)
            out.clear()
            now = self.clock()
            engine.wrote(now)
            timeout = engine.options.receipt_timeout
            with anyio.CancelScope(shield=True, deadline=now + timeout) as writing:
                try:
                    await stream.send(data)
                except NETWORK_ERRORS as exc:
                    failure = self._failed(exc)
            if writing.cancelled_caught:
                failure = engine.stopped_reading()
        finally:
            lock.release()
        if failure is not None:
            self._end_epoch(scope, failure)
        self.kick()  # what was queued while it wrote
        return True

    def push_now(self) -> bool:
        """:meth:`push` as far as it goes without awaiting: whether that was all (nothing
        queued, the writer started, or a plain TCP socket written through what it took at
        once); ``False``: the write-through must await the stream (:meth:`push`)."""
        out = self.engine.outgoing
        if not out:
            return True
        stream = self.stream
        scope = self._epoch_scope
        if stream is None or scope is None or self.write_due or self._write_lock.locked():
            self.kick()
            return True
        if not isinstance(stream, RawSocketStream):
            return False
        # A plain TCP socket: what it takes at once, without waiting (no other task runs
        # meanwhile, so neither a cancellation nor another write can come between); the
        # writer gets the rest, first in the buffer.
        try:
            # stream.send_now() written out (this stream is not closed: _close_stream()
            # takes it from here first).
            sent = stream.sock.send(out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except NETWORK_ERRORS as exc:
            self._end_epoch(scope, self._failed(exc))  # all of it unsent
            return True
        if sent:
            del out[:sent]
            if out:
                self.engine.wrote(self.clock())
                self.kick()
            else:
                # All of it went: the write deadline ends, with no time to count from,
                # so the clock (on trio a Python call) is not read.
                self.engine.wrote_all()
        elif out:
            self.kick()
        return True

    # -- running calls ---------------------------------------------------------------------

    def run(self, steps: Steps[T] | Running[T]) -> Coroutine[Any, Any, T]:
        """Run a call's steps, waiting as they ask (``await io.run(steps)``); raises
        :class:`LocalProtocolError` from another thread or event loop than the
        connection's (:meth:`check_thread`).

        Not a coroutine itself: it checks (:meth:`check_thread` written out), starts
        the steps and gives :meth:`_drive`'s coroutine to await, one coroutine level per
        call fewer."""
        host = self.host
        if host is None:
            if (
                thread_id() != self.thread
                or sniffed.name != self.library
                or running_loop() is not None
            ):
                self.elsewhere()
        elif host._thread_id != thread_id() or sniffed.name != self.library:
            self.elsewhere()
        running = steps if isinstance(steps, Running) else Running(steps)
        return self._drive(running, running.resume())

    async def _drive(self, running: Running[T], wait: Wait | None) -> T:
        """Drive ``running`` from ``wait`` (``None``: it ended) and return its result.

        Its steps are closed only if they did not end (a wait was interrupted, or they
        raised): the call forgets its receipt or request. Once per call, the asyncio
        read-through is written out here (no coroutine of its own)."""
        receipts, replies = self._receipts, self._replies
        try:
            while wait is not None:
                self.at_rest = True
                if not self.push_now() and await self.push():
                    # It wrote from here, and let the other tasks run meanwhile: what
                    # the call waits for may have come. It checks again before waiting.
                    wait = running.resume(self.clock())
                    continue
                rid, cid = wait.receipt, wait.correlation_id
                deadlines = self._deadlines
                lending = self.lending
                if lending is not None:
                    if (
                        (rid is not None or cid is not None)
                        and deadlines is not None
                        and lending.free
                        and not self.engine.delivery.backlog  # (engine.paused)
                    ):
                        # Read through: the answer's bytes wake this task, not the reader.
                        lending.woken = False  # the turn is this wait's wake-up
                        if rid is not None:
                            receipts[rid] = lending
                        elif cid is not None:
                            replies[cid] = lending
                        self._set_deadline(lending, wait.deadline, deadlines)
                        try:
                            await self.read_in_turn(lending)
                        finally:
                            deadlines.pop(lending, None)
                        if rid is not None:  # _unwait() written out
                            receipts.pop(rid, None)
                        elif cid is not None:
                            replies.pop(cid, None)
                        wait = running.resume(self.clock())
                        continue
                    lending.hand_back()  # someone must read while this waits
                turn = self.turn
                if (
                    (rid is not None or cid is not None)
                    and turn is not None
                    and deadlines is not None
                    and turn.caller is None  # (turn.free)
                    and turn.end is None
                    and not self.engine.delivery.backlog  # (engine.paused)
                ):
                    # Read through: the answer's bytes wake this task, not the reader
                    # (read_from() written out, await, read_done()).
                    future = self.loop_future()
                    turn.caller = future  # the turn is this wait's wake-up (its set())
                    if rid is not None:
                        receipts[rid] = turn
                    elif cid is not None:
                        replies[cid] = turn
                    deadline = deadlines[turn] = wait.deadline  # _set_deadline()
                    if deadline < self._timer_at:
                        self._timer_at = deadline
                        self._rearm.set()
                    turn.arm()
                    try:
                        await future
                    finally:
                        self.read_done(turn, future)
                        deadlines.pop(turn, None)
                    if rid is not None:  # _unwait() written out
                        receipts.pop(rid, None)
                    elif cid is not None:
                        replies.pop(cid, None)
                    wait = running.resume(self.clock())
                    continue
                event: anyio.Event | Signal
                if rid is not None:
                    event = receipts[rid] = self.new_event()
                elif cid is not None:
                    event = replies[cid] = self.new_event()
                elif wait.what is Waiting.CHANGE:
                    event = self._changed
                else:
                    event = self._drained
                if deadlines is not None and isinstance(event, anyio.Event):
                    await self._await_answer(event, wait.deadline, deadlines)
                else:
                    with anyio.CancelScope(deadline=wait.deadline):
                        await event.wait()
                self._unwait(wait)
                wait = running.resume(self.clock())
        finally:
            if wait is not None:  # a cancelled wait, or the call raised
                self._unwait(wait)
                # The call forgets its receipt or request. Not once it returned: closing
                # steps that ended costs a compiled generator a GeneratorExit thrown in.
                running.close()
            if self.engine.outgoing and not self.write_due:
                self.kick()  # what was queued before an error goes out too
            lending = self.lending
            if lending is not None:
                lending.hand_back()
        return running.result

    async def _await_answer(
        self, event: anyio.Event, deadline: float, deadlines: dict[Wake, float]
    ) -> None:
        """Wait for a receipt or a reply until ``event`` is set: by its answer, or by the
        timer at ``deadline``. A cancel scope with a deadline costs a wait as much again
        as the rest of it; the timer, which runs anyway, re-arms only for a deadline
        nearer than its own (rarely: a new wait's is mostly later than the last's)."""
        self._set_deadline(event, deadline, deadlines)
        try:
            await event.wait()
        finally:
            deadlines.pop(event, None)

    @property
    def timing(self) -> bool:
        """Whether the timer task runs, to end waits at their deadlines (:meth:`time_out`)."""
        return self._deadlines is not None

    def time_out(self, wake: Wake, deadline: float) -> bool:
        """Have the timer task set ``wake`` at ``deadline`` (the loop's clock), until
        :meth:`untime`; whether it will (``False``: no timer runs, between connections).
        A timer that ends (the connection does) sets every ``wake`` it holds."""
        deadlines = self._deadlines
        if deadlines is None:
            return False
        deadlines[wake] = deadline  # _set_deadline() written out: once per get(timeout)
        if deadline < self._timer_at:
            self._timer_at = deadline
            self._rearm.set()
        return True

    def untime(self, wake: Wake) -> None:
        """The wait ``wake`` ends has ended: the timer forgets it."""
        deadlines = self._deadlines
        if deadlines is not None:
            deadlines.pop(wake, None)

    def _set_deadline(self, wake: Wake, deadline: float, deadlines: dict[Wake, float]) -> None:
        """The timer sets ``wake`` at ``deadline`` (re-armed if that is nearer)."""
        deadlines[wake] = deadline
        if deadline < self._timer_at:
            self._timer_at = deadline
            self._rearm.set()

    @staticmethod
    def read_from(turn: ReadTurn, future: asyncio.Future[None]) -> None:
        """Start a read-through on asyncio: until ``future`` is set, the socket's bytes
        are read for it and set it (:class:`ReadTurn`); ``await future``, then
        :meth:`read_done` in a ``finally``. The wait's own wake-ups set ``future`` too
        (its answer, read by another, the timer at its deadline, a change of the
        connection), through the turn, which the wait registers as its :class:`Wake`
        once ``future`` is its caller. The turn must be free (:attr:`ReadTurn.free`).

        The reader task stays waiting, unwoken, and reads again once it is done.
        Written out, with no coroutine of its own, where a coroutine level counts (a
        call's wait in :meth:`_drive`, a ``get()``'s)."""
        turn.caller = future
        turn.arm()

    def read_done(self, turn: ReadTurn, future: asyncio.Future[None]) -> None:
        """A read-through's end, in a ``finally``: feed what was read for it to the
        engine, which routes it as the reader task would (and wakes the wait it answers:
        this one or another). Cancelled, the wait still feeds what was read for it: no
        byte is lost. What the reader task must judge (a failure, a full inbox, the end)
        is handed to it."""
        if turn.caller is future:
            turn.caller = None
        inbound = turn.inbound
        if inbound:  # turn.take() written out: once per answer
            data = inbound[0] if len(inbound) == 1 else b"".join(inbound)
            inbound.clear()
            engine = self.engine  # _feed() written out (no socket lent on asyncio)
            now = self.clock()
            engine.receive(data, now)
            self.at_rest = True  # an answer came: the next send may write through
            pumped = engine.pump(now)
            self._pumped(pumped.woke, pumped.replied)
            failure = pumped.failure
            proto = engine.proto
            if (
                failure is not None
                or engine.delivery.backlog  # (engine.paused)
                or (proto is not None and proto.state is PROTOCOL_CLOSED)
            ):
                if self._handed is None:
                    self._handed = failure
                turn.poke()

    async def read_in_turn(self, turn: SocketTurn) -> None:
        """trio: wait until ``turn`` is set (:meth:`SocketTurn.set`, its ``woken``
        cleared by the caller before it registered the turn as its wait's wake-up),
        reading the socket the reader task lent meanwhile (:class:`SocketTurn`): what
        comes is fed to the engine here, which routes it as the reader task would
        (setting ``turn``, or waking another wait). ``turn`` is set by the wait's own
        wake-ups too (the timer at its deadline, a change of the connection), which
        interrupt the socket's wait. The turn must be free (:attr:`SocketTurn.free`); the
        caller hands it back when its call is done.

        Each read is fed at once, without awaiting: cancelled, nothing read is lost. What
        the reader task must judge (the end of the stream, a failure, a full inbox, the
        broker's goodbye) is handed to it."""
        engine = self.engine
        fd = turn.fd
        wait_readable = turn.wait_readable
        turn.lent = turn.reading = True
        failure: StompError | None = None
        handing = False
        try:
            while not turn.woken:
                # turn.read() written out: one coroutine level less for each wait.
                if turn.end is not None:
                    handing = True  # the reader task judges the end
                    break
                turn.waiting = True
                try:
                    await wait_readable(fd)  # (turn.end was looked at just now)
                except turn.closed_error:
                    if turn.interrupted and turn.end is None:
                        continue  # interrupted: woken, or the stream closes
                    handing = True  # closed: the reader task judges it
                    break
                finally:
                    turn.waiting = turn.interrupted = False
                try:
                    data = turn.read_now()
                except NETWORK_ERRORS:
                    handing = True  # the reader task judges the end (turn.end)
                    break
                if data is None:
                    continue  # woken for nothing: wait again
                failure = self._feed(data)
                proto = engine.proto
                if (
                    failure is not None
                    or engine.delivery.backlog  # (engine.paused)
                    or (proto is not None and proto.state is PROTOCOL_CLOSED)
                ):
                    handing = True
                    break
        finally:
            turn.reading = False
            if handing:
                if self._handed is None:
                    self._handed = failure
                turn.poke()

    def _unwait(self, wait: Wait) -> None:
        if wait.receipt is not None:
            self._receipts.pop(wait.receipt, None)
        if wait.correlation_id is not None:
            self._replies.pop(wait.correlation_id, None)

    # -- the connection's life -----------------------------------------------------------

    async def open(self) -> None:
        """Establish the first connection (raises why not), enter the task group and
        start the tasks. Only for ``__aenter__``: :meth:`leave` exits the group."""
        self.thread = thread_id()
        self._thread_name = threading.current_thread().name
        self.loop = loop = running_loop()
        self.library = sniffed.name
        if isinstance(loop, asyncio.BaseEventLoop) and hasattr(loop, "_thread_id"):
            # asyncio's own record (private, there since 3.4): asked, not assumed.
            self.host = loop
        elif loop is not None:
            self.host = _AskedLoop(loop)
        backend = running_backend()
        self.clock = loop_clock(backend)
        self.new_event = getattr(backend, "create_event", anyio.Event)
        self.loop_future = _future_maker(self.loop)
        life = lifecycle.Lifecycle(self.engine)
        await self._run_steps(life)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            self.spawn(functools.partial(self._supervise, life))
        except BaseException:  # closed meanwhile, by another task
            await self.leave(None)
            raise

    def spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``task()`` in the connection's task group, in a cancel scope of its own
        that :meth:`close` cancels. Raises :class:`LocalProtocolError` once closed."""
        task_group = self._task_group
        if task_group is None or self._closing is not None:
            raise LocalProtocolError("the connection is closed")
        scope = anyio.CancelScope()
        self._working[scope] = None  # counted from now: close() waits for it to end
        task_group.start_soon(self._work, task, scope)

    async def _work(
        self, task: Callable[[], Coroutine[Any, Any, None]], scope: anyio.CancelScope
    ) -> None:
        self._working[scope] = anyio.get_current_task().id
        try:
            with scope:
                await task()
        finally:
            del self._working[scope]
            self._work_ended.pulse()

    async def close(self) -> bool:
        """Say goodbye (shielded, bounded by ``receipt_timeout``) and stop every task;
        whether the broker confirmed the goodbye. From any task, in any cancel scope:
        the task group stays open, empty, for :meth:`leave`. A close while another is
        under way waits for it and says what it did."""
        self.check_thread()
        closing = self._closing
        if closing is not None:
            with anyio.CancelScope(shield=True):
                await closing.wait()  # bounded: each wait of the first close is
            return self.engine.goodbye_confirmed is True
        closing = self._closing = anyio.Event()
        try:
            await self._goodbye()
            await self._stop_work()
        finally:
            closing.set()
        return self.engine.goodbye_confirmed is True

    async def _goodbye(self) -> None:
        engine = self.engine
        running = Running(Call(engine, self.clock()).goodbye())
        driven = False  # _drive() closes the steps if they did not end
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(engine.options.receipt_timeout),
            contextlib.suppress(StompError, *NETWORK_ERRORS),
        ):
            wait = running.resume()  # DISCONNECT queued; its receipt expected
            if wait is not None:
                self.status_changed()
                # Written here, not by the writer task: when the block of ``async with``
                # is cancelled, the connection's own tasks are cancelled with it.
                stream = self.stream
                if stream is not None:
                    async with self._write_lock:
                        data = bytes(engine.outgoing)
                        engine.outgoing.clear()
                        await stream.send(data)
                # Look again before waiting: the write let the tasks run.
                wait = running.resume(self.clock())
            driven = True
            await self._drive(running, wait)
        if not driven:  # the write failed, or the steps raised (closing those is nothing)
            running.close()
        engine.closed()
        self.status_changed()
        if self.hooks_done is not None and anyio.get_current_task().id != self.hooks_task:
            # on_disconnected, and what came before it; not when close() came from a
            # hook, whose task would wait for itself.
            with anyio.move_on_after(engine.options.receipt_timeout, shield=True):
                await self.hooks_done.wait()

    async def _stop_work(self) -> None:
        """Cancel the tasks and wait (bounded) until they ended: all but the caller, when
        close() came from one of them (its own scope ends it once close() returned)."""
        for cut in (self._epoch_scope, self._cut):
            if cut is not None:
                cut.cancel()
        for scope in self._working:
            scope.cancel()
        self._out_ready.set()
        with anyio.CancelScope(shield=True):
            await self._close_stream()
            me = anyio.get_current_task().id
            with anyio.move_on_after(self.engine.options.receipt_timeout):
                while any(task != me for task in self._working.values()):
                    await self._work_ended.wait()

    async def leave(self, exc: BaseException | None) -> None:
        """Exit the task group where :meth:`open` entered it (``__aexit__``, after
        :meth:`close`, so no task is left in it). ``exc`` ends the block: only a
        cancellation is handed on, as ``async with`` would (anything else would come
        back wrapped in an ExceptionGroup). Raises a task's error unwrapped."""
        task_group = self._task_group
        if task_group is None:
            return
        self._task_group = None
        cancelled = exc if isinstance(exc, anyio.get_cancelled_exc_class()) else None
        try:
            if cancelled is None:
                await task_group.__aexit__(None, None, None)
            else:
                await task_group.__aexit__(type(cancelled), cancelled, cancelled.__traceback__)
        except BaseExceptionGroup as group:
            raise _unwrapped(group) from None

    async def _close_stream(self) -> None:
        """Close the current stream, saying the engine's farewell first (best effort,
        bounded)."""
        stream = self.stream
        self.stream = None
        if stream is not None:
            with anyio.move_on_after(1.0), contextlib.suppress(Exception):
                bye = lifecycle.farewell(self.engine)
                if bye:
                    async with self._write_lock:
                        await stream.send(bye)
            with contextlib.suppress(Exception):
                await stream.aclose()

    # -- the lifecycle's steps -----------------------------------------------------------

    async def _run_steps(
        self, life: lifecycle.Lifecycle[M], result: object = None
    ) -> lifecycle.Serve | None:
        """Resume ``life`` with ``result`` and run its steps until it asks to serve a
        connection (returned, installed) or is over (``None``). Cancelled, it closes
        the stream it was establishing."""
        step = life.resume(self.clock(), result)
        try:
            while step is not None and not isinstance(step, lifecycle.Serve):
                try:
                    result = await self._step(step)
                except NETWORK_ERRORS as exc:  # TimeoutError is an OSError
                    failure = lifecycle.link_error(exc, _connect_reason(exc))
                    step = life.failed(self.clock(), failure)
                else:
                    step = life.resume(self.clock(), result)
        except BaseException:
            life.close()
            await self._abandon(self._pending)
            self._pending = None
            raise
        if step is not None:
            self.stream = self._pending
            self._pending = None
            self.kick()
            self.status_changed()
        return step

    async def _step(self, step: lifecycle.Step) -> object:
        """Run one of the lifecycle's I/O steps; what it gave."""
        if isinstance(step, (lifecycle.Open, lifecycle.Write, lifecycle.Read)):
            # close() cancels ``cut`` (:meth:`_stop_work`): the step fails as the blocking
            # transport's does when close() shuts its socket, and the lifecycle, seeing
            # the engine closed, says the connection was closed before it was made.
            cut = self._cut = anyio.CancelScope()
            try:
                with anyio.fail_after(step.deadline - self.clock()), cut:
                    return await self._on_link(step)
            finally:
                self._cut = None
            raise anyio.ClosedResourceError("closed while connecting")
        if isinstance(step, lifecycle.Pause):
            with anyio.CancelScope(deadline=step.deadline):
                await self._changed.wait()  # a close() pulses it
        elif step is lifecycle.DROP:
            await self._abandon(self._pending)
            self._pending = None
        elif step is lifecycle.HANG_UP:
            with anyio.CancelScope(shield=True):
                await self._close_stream()
        else:
            self.status_changed()
        return None

    async def _on_link(
        self, step: lifecycle.Open | lifecycle.Write | lifecycle.Read
    ) -> bytes | None:
        """Open the stream being established, or write or read on it."""
        if isinstance(step, lifecycle.Open):
            host, port, tls = step.endpoint.host, step.endpoint.port, step.tls
            if tls is None:
                plain = await anyio.connect_tcp(host, port)
                try:
                    self._pending = direct(plain)  # read and written through its socket
                except BaseException:
                    await self._abandon(plain)
                    raise
            else:
                self._pending = await anyio.connect_tcp(
                    host, port, ssl_context=tls, tls_hostname=host, tls_standard_compatible=False
                )
            return None
        stream = self._pending
        assert stream is not None
        if isinstance(step, lifecycle.Write):
            await stream.send(step.data)
            return None
        try:
            return await stream.receive(_RECV_SIZE)
        except anyio.EndOfStream:
            return b""

    @staticmethod
    async def _abandon(stream: anyio.abc.ByteStream | None) -> None:
        if stream is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()

    # -- the tasks -----------------------------------------------------------------------

    async def _supervise(self, life: lifecycle.Lifecycle[M]) -> None:
        """Serve each connection the lifecycle makes, until it is over."""
        engine = self.engine
        try:
            while await self._run_steps(life, await self._run_epoch()) is not None:
                pass
        finally:
            engine.serving = False
            self._wake_answers()

    async def _run_epoch(self) -> StompError | None:
        stream = self.stream
        assert stream is not None
        self._handed = None
        # Read through on plain STOMP only: WebSocket frames end the connection in ways
        # of their own (a close frame), which the reader task judges.
        plain = stream if isinstance(stream, RawSocketStream) else None
        turn = plain.turn if plain is not None and self.engine.ws is None else None
        self.turn = turn if isinstance(turn, ReadTurn) else None
        self.lending = turn if isinstance(turn, SocketTurn) else None
        async with anyio.create_task_group() as tg:
            self._epoch_scope = tg.cancel_scope
            tg.start_soon(self._reader, stream, tg.cancel_scope)
            tg.start_soon(self._writer, stream, tg.cancel_scope)
            tg.start_soon(self._timer, stream, tg.cancel_scope)
        self._epoch_scope = None
        self._room = Signal()  # the next connection starts unpaused
        self.turn = None
        self.lending = None
        return self.engine.ending

    def _end_epoch(self, scope: anyio.CancelScope, failure: StompError | None) -> None:
        if failure is not None:
            self.engine.saw_end(failure)
        scope.cancel()

    def _pumped(self, woke: bool, replied: Sequence[str] = ()) -> bool:
        """After a pump: start the writer, wake whom the routed events concern (of the
        requests, only those whose reply came); whether it woke a call's wait for a
        receipt or a reply, or a ``get()``. (Once per answer: the calls it would make
        are written out.)"""
        engine = self.engine
        if engine.outgoing and not self.write_due:  # kick()
            self.write_due = True
            self._out_ready.set()
        if engine.notices:
            self.noticed.set()
        answered = False
        if woke:
            getting = self.getting
            if getting:  # _wake_getters() written out
                woken: list[Getter] = []
                for sub in getting:
                    if sub.wake(ended=False):
                        woken.append(sub)
                if woken:
                    getting.difference_update(woken)
                    answered = True
            receipts = self._receipts
            if receipts:
                for wake in receipts.values():  # _wake_receipts()
                    wake.set()
                answered = True
        replies = self._replies
        for cid in replied:
            waiter = replies.get(cid)
            if waiter is not None:
                waiter.set()
                answered = True
        return answered

    def _feed(self, data: bytes) -> StompError | None:
        """Feed bytes read from a plain TCP socket to the engine (``b""``: the end of
        the stream) and route what they hold; the pump's failure. Read by the reader
        task on trio, it lends the socket to the calls (and ``get()`` calls) it woke
        (:class:`SocketTurn`), which hand it back as they return."""
        engine = self.engine
        now = self.clock()
        engine.receive(data, now)
        self.at_rest = True  # an answer came: the next send may write through
        pumped = engine.pump(now)
        if self._pumped(pumped.woke, pumped.replied):
            lending = self.lending
            if lending is not None and not lending.reading and not engine.delivery.backlog:
                lending.lend()
        return pumped.failure

    async def _reader(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        engine = self.engine
        turn: ReadTurn | SocketTurn | None = self.turn or self.lending
        try:
            while True:
                ended: StompError | None = None
                if turn is not None:
                    try:
                        got = await turn.receive()
                    except anyio.EndOfStream:
                        got = b""
                    if got is None:  # a call that read through handed this on
                        data = b"-"  # (not the end of the stream)
                        failure = self._handed
                        self._handed = None
                    else:
                        data = got
                        failure = self._feed(data)  # b"": the engine's end of stream
                else:
                    try:
                        data = await stream.receive(_RECV_SIZE)
                    except anyio.EndOfStream:
                        data = b""  # the engine's end of stream
                    now = self.clock()
                    ended = engine.receive(data, now)
                    self.at_rest = True  # an answer came: the next send may write through
                    pumped = engine.pump(now)
                    self._pumped(pumped.woke, pumped.replied)
                    failure = pumped.failure
                if failure is None:
                    while engine.paused:
                        # An inbox is full: read no more until a consumer made room
                        # (maybe already, while a call that read through had the pause).
                        self._rearm.set()  # the engine has a stall to watch
                        await self._room.take()
                        self._pumped(engine.drain_backlog(self.clock()))
                    if ended is not None:
                        # Frames that came before the close were handled; the writer
                        # gets a moment to answer the close before the epoch ends.
                        with anyio.move_on_after(0.5):
                            while engine.outgoing:
                                await self._drained.wait()
                        failure = ended
                proto = engine.proto
                if failure is not None or (proto is not None and proto.state is PROTOCOL_CLOSED):
                    unsent = self._writing + len(engine.outgoing)
                    failure = lifecycle.why_ended(engine, failure, unsent)
                if failure is not None or not data:
                    # After EOF there is nothing more to read: end here rather than
                    # spin on EndOfStream.
                    self._end_epoch(scope, failure)
                    return
        except NETWORK_ERRORS as exc:
            self._end_epoch(scope, self._failed(exc))

    def _failed(self, exc: BaseException) -> ConnectionLost:
        engine = self.engine
        return transport_failed(engine.endpoint, exc, self._writing + len(engine.outgoing))

    async def _writer(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        engine = self.engine
        try:
            while True:
                await self._out_ready.take()
                self.write_due = False  # from here on, what is queued needs a kick again
                while engine.outgoing:
                    # Shielded: a cancelled write must not leave half a frame behind.
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.fail_after(engine.options.receipt_timeout),
                    ):
                        async with self._write_lock:
                            # Taken under the lock: close() writes its DISCONNECT
                            # under it too, and must not overtake these frames.
                            out = engine.outgoing
                            data = bytes(out)
                            out.clear()
                            if data:
                                engine.wrote(self.clock())
                                self._writing = len(data)
                                await stream.send(data)
                                self._writing = 0
                    self._drained.pulse()
                if engine.status is CLOSED:
                    return
        except TimeoutError:
            self._end_epoch(scope, engine.stopped_reading())
        except NETWORK_ERRORS as exc:
            # A broker that refuses a frame (one too large, say) sends an ERROR and
            # closes while the frame is still being written: the write fails first. The
            # reader gets a moment to read the ERROR, which says why, and end the epoch
            # with it (cancelling this wait); else the failure is the write's.
            with anyio.move_on_after(_LAST_WORDS_WAIT):
                await anyio.sleep_forever()
            self._end_epoch(scope, self._failed(exc))

    async def _timer(self, stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        waiting = functools.partial(bytes_waiting, raw)
        turn = self.turn
        if turn is not None:
            # Bytes read by the loop's callback and not yet fed are a sign of life too.
            waiting = functools.partial(_read_or_waiting, turn, waiting)
        deadlines = self._deadlines = {}
        try:
            await self._tick(scope, waiting, deadlines)
        finally:
            self._deadlines = None
            self._timer_at = math.inf
            for event in deadlines:  # their waits go on in cancel scopes of their own
                event.set()

    async def _tick(
        self,
        scope: anyio.CancelScope,
        waiting: Callable[[], bool | None],
        deadlines: dict[Wake, float],
    ) -> None:
        """The timer's loop: wake at the core's next deadline and at the answers'."""
        engine = self.engine
        while True:
            deadline = engine.next_deadline(self.clock())
            answers = min(deadlines.values(), default=math.inf)
            wake_at = self._timer_at = min(answers, math.inf if deadline is None else deadline)
            rearm = self._rearm = anyio.Event()
            with anyio.CancelScope(deadline=wake_at):
                await rearm.wait()
            now = self.clock()
            if answers <= now:
                for event, at in list(deadlines.items()):
                    if at <= now:
                        event.set()  # its call times out
            if deadline is None or now < deadline:
                continue  # re-armed: the deadline may be nearer now
            # The reader goes first: after the event loop was held up (by a consumer, say),
            # the bytes it was woken for may already be out of the socket, in the stream.
            await anyio.lowlevel.checkpoint()
            now = self.clock()
            pumped = engine.tick(now, waiting)
            self._pumped(pumped.woke, pumped.replied)
            self.make_room()  # the pump may have moved the backlog the reader waits on
            unsent = self._writing + len(engine.outgoing)
            failure = lifecycle.why_ended(engine, pumped.failure, unsent)
            if failure is not None:
                self._end_epoch(scope, failure)
                return


class _AskedLoop:
    """:attr:`TaskIO.host` for an asyncio loop that does not say which thread runs it
    (not asyncio's own; uvloop's, say): the calling thread, while the loop is the one
    running there."""

    __slots__ = ("_loop",)

    def __init__(self, loop: object) -> None:
        self._loop = loop

    @property
    def _thread_id(self) -> int | None:
        return thread_id() if running_loop() is self._loop else None


def _running_loop_future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


def _future_maker(loop: object) -> Callable[[], asyncio.Future[None]]:
    """What makes a future of ``loop`` (the running asyncio loop, ``None`` under trio):
    ``asyncio.Future(loop=loop)`` where the loop's ``create_future()`` is asyncio's own,
    which says just that, in a Python call of its own."""
    if isinstance(loop, asyncio.BaseEventLoop) and (
        type(loop).create_future is asyncio.BaseEventLoop.create_future
    ):
        return functools.partial(asyncio.Future, loop=loop)
    return _running_loop_future


def _read_or_waiting(turn: ReadTurn, waiting: Callable[[], bool | None]) -> bool | None:
    return True if turn.inbound else waiting()

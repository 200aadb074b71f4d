"""The anyio client: ``AsyncConnection`` and its objects, for asyncio and trio.

The twin of :mod:`stompy._client.blocking`: every call that may wait is one of the engine
engine's calls (:mod:`stompy._engine.calls`), run by the tasks' driver
(:class:`~stompy._transports.asynchronous.TaskIO`); only the common cases are written out here, for
speed. Leaving ``async with`` disconnects gracefully and stops every task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from typing import Any, Final, Generic, NoReturn, TypeVar

import anyio
import anyio.lowlevel
from typing_extensions import Unpack

from stompy._checks import check_flag, check_timeout, wrong_type
from stompy._client.base import (
    ConnectionBase,
    LinkBase,
    SubscriptionBase,
    TransactionBase,
    check_message,
    traced,
    transaction_id,
)
from stompy._engine import keywords as kw
from stompy._engine.callbacks import UNTRACED, call_awaiting, call_hook, handle_message, hooks_over
from stompy._engine.calls import Asking, Call, Steps
from stompy._engine.engine import MAX_OUTGOING
from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.outgoing import Outgoing, log, note_sent, split_for_sending
from stompy._engine.state import CLOSED, CONNECTED, NEW, RECONNECTING
from stompy._transports.asynchronous import TaskIO
from stompy._transports.rawsocket import ReadTurn, SocketTurn
from stompy.errors import LocalProtocolError, StompError

__all__ = ("AsyncConnection", "AsyncMessage", "AsyncSubscription", "AsyncTransaction", "send_async")

_T = TypeVar("_T", bound="AsyncSubscription | AsyncTransaction")

#: Seconds a consumer may take message after message before ``get()`` lets the
#: connection's tasks run.
YIELD_EVERY: Final = 0.005


class _Opening(Generic[_T]):
    """What ``subscribe()`` and ``transaction()`` return: await it, or ``async with`` it."""

    __slots__ = ("_coro", "_value")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self._coro = coro
        self._value: _T | None = None

    def __await__(self) -> Generator[Any, None, _T]:
        return self._coro.__await__()

    async def __aenter__(self) -> _T:
        self._value = await self._coro
        return self._value

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._value is not None
        await self._value.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> NoReturn:
        # Called only for a name it lacks: the caller forgot the `await` (sub.get(),
        # tx.send()); say so rather than name this private class.
        raise AttributeError(
            f"no attribute {name!r} before it is awaited: "
            "`sub = await conn.subscribe(...)`, `tx = await conn.transaction()` "
            "(or `async with` either)"
        )


class AsyncMessage(MessageBase):
    """A received message; ``await msg.ack()`` / ``await msg.nack()`` answer it.

    Like :class:`stompy.Message`, the core's :class:`~stompy.events.MessageReceived`
    itself, compared by identity.
    """

    __slots__ = ()

    opening = "open it with `async with AsyncConnection(...) as conn:`"

    _owner: AsyncLink

    async def ack(
        self, transaction: AsyncTransaction | str | None = None, *, receipt: bool = False
    ) -> None:
        """Acknowledge the message; for one from before a reconnect, nothing is sent
        and ``receipt=True`` raises :class:`~stompy.errors.AckLost`; one answered
        already is a :class:`~stompy.errors.LocalProtocolError` (see
        :meth:`stompy.Message.ack`)."""
        await self._owner.answer("ACK", self, transaction, receipt)

    async def nack(
        self, transaction: AsyncTransaction | str | None = None, *, receipt: bool = False
    ) -> None:
        """Tell the broker the message was not consumed (STOMP 1.1 and later); as
        :meth:`ack` otherwise."""
        await self._owner.answer("NACK", self, transaction, receipt)

    async def reply(self, body: bytes | str, **options: Unpack[kw.MessageOptions]) -> None:
        """Answer a request; see :meth:`stompy.Message.reply`."""
        kw.check(options, kw.MESSAGE, "AsyncMessage.reply")
        link = self._owner
        await link.io.run(traced(link.call(), link.telemetry).reply(self, body, options))


class AsyncLink(LinkBase[AsyncMessage]):
    """What an :class:`AsyncConnection`'s messages and subscriptions hold of it (see
    :class:`~stompy._client.base.LinkBase`): also the tasks' driver that runs its calls."""

    __slots__ = ("io",)

    def __init__(self, io: TaskIO[AsyncMessage]) -> None:
        super().__init__(io.engine)
        self.io = io

    def call(self) -> Call[AsyncMessage]:
        """A call on the connection, starting now."""
        return Call(self.engine, self.io.clock())

    async def answer(
        self,
        command: str,
        message: AsyncMessage,
        transaction: AsyncTransaction | str | None,
        receipt: bool,
    ) -> None:
        """ACK or NACK ``message`` (see :meth:`AsyncMessage.ack`)."""
        tx = transaction_id(transaction, self.engine)
        await self.io.run(self.call().acknowledge(command, message, message._epoch, tx, receipt))


class _Deadline:
    """What the timer task sets at a ``get(timeout=...)``'s deadline when it waits on
    its subscription's event (shared by the ``get()`` calls waiting there): the event is
    set and forgotten, so every waiter looks again and the others wait on a new one."""

    __slots__ = ("_event", "_sub")

    def __init__(self, sub: AsyncSubscription, event: anyio.Event) -> None:
        self._sub = sub
        self._event = event

    def set(self) -> None:
        event = self._event
        sub = self._sub
        if sub._wakeup is event:
            sub._wakeup = None
        event.set()


class AsyncSubscription(SubscriptionBase[AsyncMessage]):
    """A subscription: ``async for`` over it, or ``await get(timeout)``."""

    def __init__(self, link: AsyncLink, inbox: Inbox[AsyncMessage]) -> None:
        super().__init__(link.engine, inbox, link.telemetry)
        self._link = link
        self._io = link.io
        #: Set when a message arrives or the subscription may have ended.
        self._wakeup: anyio.Event | None = None
        #: The turn of the socket that the ``get()`` reading through holds, set with the
        #: event to wake it (:meth:`ReadTurn.set`, :meth:`SocketTurn.set`).
        self._reading: ReadTurn | SocketTurn | None = None

    async def get(self, timeout: float | None = None) -> AsyncMessage | None:
        """The next message, or ``None`` on timeout or once the subscription ended.

        Cancelling it loses no message. Raises the connection's error once it is lost
        and every message received before was handed out, and what
        :meth:`Subscription.get() <stompy.Subscription.get>` raises for a bad ``timeout``.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._telemetry is not None:
            started = time.time_ns()
            return self._received(await self._take(timeout), started)
        # _take() written out: a consumer awaits this once per message, and awaiting
        # _take() would make a coroutine per message besides.
        io = self._io
        now = time.monotonic()
        if now >= io.yield_at:
            io.yield_at = now + YIELD_EVERY
            io.check_thread()  # the checkpoint would be another loop's
            await anyio.lowlevel.checkpoint()
        inbox = self._inbox
        message = inbox.take()
        if message is None:  # _wait() written out
            io.check_thread()  # before the timeout's cancel scope: of another loop?
            if timeout is None:
                return await self._arrival(io, None)
            if timeout > 0:
                return await self._arrival(io, io.clock() + timeout)
            return await self._briefly(io)
        delivery = self._delivery
        if delivery.backlog and delivery.wants_resume(inbox):
            io.make_room()
        return message

    async def _take(self, timeout: float | None) -> AsyncMessage | None:
        """:meth:`get`, untraced."""
        # A consumer that takes message after message without waiting would hold the
        # event loop: no heart-beat would go out or come in. Let the connection's tasks
        # run now and then (before taking: a cancel loses nothing).
        io = self._io
        now = time.monotonic()  # a local throttle: far cheaper than the loop's clock
        if now >= io.yield_at:
            io.yield_at = now + YIELD_EVERY
            io.check_thread()
            await anyio.lowlevel.checkpoint()
        inbox = self._inbox
        message = inbox.take()  # (one already waiting is handed out even with timeout=0)
        if message is None:
            return await self._wait(timeout)
        if self._delivery.wants_resume(inbox):
            io.make_room()
        return message

    def _wait(self, timeout: float | None) -> Coroutine[Any, Any, AsyncMessage | None]:
        """:meth:`_take` with the inbox empty: wait up to ``timeout`` for a message
        (``await self._wait(timeout)``).

        While the connection's timer task runs, it ends the wait at its deadline (as it
        does a call's wait for a receipt): a cancel scope with a deadline would cost
        each ``get(timeout=...)`` as much again as the rest of its wait. A timeout of 0
        takes a cancel scope, and so does a wait while no timer runs (between
        connections, or before the timer task of a new one started).

        Not a coroutine itself (as :meth:`TaskIO.run`): it checks the thread and gives
        the wait's coroutine to await, one coroutine level per wait fewer."""
        io = self._io
        io.check_thread()  # before the timeout's cancel scope: of another loop?
        if timeout is None:
            return self._arrival(io, None)
        if timeout > 0:
            return self._arrival(io, io.clock() + timeout)
        return self._briefly(io)

    async def _briefly(self, io: TaskIO[AsyncMessage]) -> AsyncMessage | None:
        """:meth:`_wait` with a timeout of 0: in a cancel scope, which ends it at its
        first wait."""
        with anyio.move_on_after(0):
            return await self._arrival(io, None)
        return self._taken()

    def _taken(self) -> AsyncMessage | None:
        """After a wait: the message it waited for, ``None`` if none came (raises the
        subscription's or the connection's failure, as :meth:`_ended` says)."""
        inbox = self._inbox
        message = inbox.take()
        if message is None:
            self._ended()
            return None
        delivery = self._delivery
        if delivery.backlog and delivery.wants_resume(inbox):  # (mostly no backlog)
            self._io.make_room()
        return message

    async def _arrival(
        self, io: TaskIO[AsyncMessage], deadline: float | None
    ) -> AsyncMessage | None:
        """Wait until a message is in the inbox (which the caller found empty), the
        subscription ended or ``deadline`` (the loop's clock; ``None``: none) came, then
        take it; the caller checked the thread (:meth:`TaskIO.check_thread`). Each
        wake-up takes at once: the inbox is looked at once per wait, not twice."""
        inbox = self._inbox
        getting = io.getting
        engine = self._engine
        delivery = self._delivery
        message: AsyncMessage | None = None
        try:
            while not self._ended() and engine.status is not CLOSED:
                if deadline is not None and io.clock() >= deadline:
                    if self._wakeup is None and self._reading is None:
                        getting.discard(self)
                    break
                # Idle: no other get() waits here, and the reader is not paused
                # (engine.paused, read without its call).
                idle = self._wakeup is None and self._reading is None and not delivery.backlog
                # The socket is read only by a wait that ends without a cancel scope:
                # one with a deadline waits on the event while no timer runs.
                if deadline is not None and not io.timing:
                    idle = False
                lending = io.lending
                if lending is not None and not (idle and lending.free):
                    lending.hand_back()  # someone must read while this waits
                    lending = None
                turn = io.turn
                if lending is not None:
                    # trio: wait on the socket the reader task lent, as a call does.
                    lending.woken = False  # the turn is this wait's wake-up
                    self._reading = lending
                    getting.add(self)
                    io.at_rest = True
                    timed = deadline is not None and io.time_out(lending, deadline)
                    try:
                        await io.read_in_turn(lending)
                    finally:
                        if timed:
                            io.untime(lending)
                        if self._reading is lending:
                            self._reading = None
                            if self._wakeup is None:
                                getting.discard(self)
                elif idle and turn is not None and turn.caller is None and turn.end is None:
                    # (turn.free) Read through: the message's bytes wake this task, not
                    # the reader. The turn is this wait's wake-up (it sets the future).
                    future: asyncio.Future[None] = io.loop_future()
                    turn.caller = future  # io.read_from() written out
                    self._reading = turn
                    getting.add(self)
                    io.at_rest = True
                    if deadline is not None:
                        io.time_out(turn, deadline)  # (a timer runs: idle says so)
                    turn.arm()
                    try:
                        await future
                    finally:
                        io.read_done(turn, future)
                        if deadline is not None:
                            io.untime(turn)
                        if self._reading is turn:
                            self._reading = None
                            if self._wakeup is None:
                                getting.discard(self)
                else:
                    event = self._wakeup
                    if event is None:
                        event = self._wakeup = io.new_event()
                        getting.add(self)
                    io.at_rest = True
                    ending_at: _Deadline | None = None
                    if deadline is not None:
                        ending_at = _Deadline(self, event)
                        if not io.time_out(ending_at, deadline):
                            ending_at = None  # no timer runs: a cancel scope ends the wait
                    try:
                        if deadline is not None and ending_at is None:
                            with anyio.CancelScope(deadline=deadline):
                                await event.wait()
                        else:
                            await event.wait()
                    finally:
                        if ending_at is not None:
                            io.untime(ending_at)
                        if self._wakeup is event and event.statistics().tasks_waiting == 0:
                            # Cancelled, and no other task waits here: nothing to wake.
                            self._wakeup = None
                            if self._reading is None:
                                getting.discard(self)
                message = inbox.take()
                if message is not None:
                    break
        finally:
            lending = io.lending
            if lending is not None:
                lending.hand_back()  # trio: the socket goes back to the reader task
        if message is None:
            return self._taken()  # (raises the failure that ended the wait)
        if delivery.backlog and delivery.wants_resume(inbox):  # (mostly no backlog)
            io.make_room()
        return message

    def wake(self, *, ended: bool) -> bool:
        """Wake the waiting ``get()`` calls if a message came (or ``ended``)."""
        inbox = self._inbox
        if not (ended or inbox.pending or not inbox.active):
            return False
        event = self._wakeup
        self._wakeup = None
        if event is not None:
            event.set()
        reading = self._reading
        self._reading = None
        if reading is not None:
            reading.set()
        return True

    async def get_batch(
        self, max_messages: int, timeout: float | None = None
    ) -> list[AsyncMessage]:
        """Up to ``max_messages`` messages, oldest first: waits up to ``timeout`` seconds
        for the first (``None``: no limit), then takes what has already arrived.

        Returns an empty list where :meth:`get` returns ``None``, and raises what it
        raises. :class:`~stompy.errors.ConfigurationError` if ``max_messages < 1``.
        """
        timeout = self._check_batch(max_messages, timeout)
        started = time.time_ns()
        first = await self._take(timeout)
        if first is None:
            return []
        batch = [first]
        if self._take_more(batch, max_messages):
            self._io.make_room()
        return self._received_batch(batch, started)

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> AsyncMessage:
        # Not an async generator: one suspended inside get()'s cancel scope would
        # break the caller's scope nesting when the loop is left with break.
        message = await self.get()
        if message is None:
            raise StopAsyncIteration
        return message

    async def unsubscribe(self, *, receipt: bool = False) -> None:
        """Stop the subscription; messages already received can still be read."""
        if not self._inbox.active:
            return
        io = self._io
        io.check_thread()
        steps = self._link.call().unsubscribe(self._inbox, receipt)
        self.wake(ended=True)
        io.make_room()  # what waited in the backlog for this inbox is dropped
        await io.run(steps)

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._engine.status in (CONNECTED, RECONNECTING):
            with anyio.CancelScope(shield=exc_info[0] is not None):
                await self.unsubscribe()
        else:
            self._inbox.end()
            self.wake(ended=True)


class AsyncTransaction(TransactionBase):
    """A transaction; ``async with`` commits at the end and aborts if the block raises."""

    def __init__(self, conn: AsyncConnection, id: str, epoch: int) -> None:
        super().__init__(conn._engine, id, epoch)
        self._conn = conn

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        """Send in the transaction (see :meth:`AsyncConnection.send`)."""
        self._check()
        await self._conn.send(
            destination,
            body,
            headers=headers,
            content_type=content_type,
            receipt=receipt,
            transaction=self.id,
        )

    async def ack(self, message: AsyncMessage) -> None:
        """Acknowledge ``message`` in the transaction (see :meth:`AsyncMessage.ack`); a
        ``message`` that is no :class:`AsyncMessage` is a :class:`TypeError`."""
        check_message(message, AsyncMessage, "AsyncTransaction.ack")
        self._check()
        await message.ack(self)

    async def nack(self, message: AsyncMessage) -> None:
        """NACK ``message`` in the transaction (see :meth:`AsyncMessage.nack`)."""
        check_message(message, AsyncMessage, "AsyncTransaction.nack")
        self._check()
        await message.nack(self)

    async def commit(self, *, receipt: bool = True) -> None:
        """Commit; with ``receipt`` (the default) wait until the broker confirmed."""
        check_flag("receipt", receipt)  # before the transaction counts as finished
        self._check()
        self._conn._io.check_thread()  # before the transaction counts as finished
        self._done = True
        await self._conn._end(self, "COMMIT", receipt)
        self._committed = True

    async def abort(self, *, receipt: bool = False) -> None:
        """Roll back everything sent or acked in the transaction."""
        check_flag("receipt", receipt)
        self._conn._io.check_thread()
        if self._finish():
            await self._conn._end(self, "ABORT", receipt)

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            if not self._done:
                await self.commit()
        else:
            with anyio.CancelScope(shield=True), contextlib.suppress(StompError):
                await self.abort()


class AsyncConnection(ConnectionBase[AsyncMessage]):
    """An async STOMP connection, the twin of :class:`stompy.Connection`.

    ``async with AsyncConnection(url) as conn:`` connects and starts the reader, writer
    and heart-beat tasks in a task group that the block owns; leaving the block
    disconnects gracefully, stops them and exits the task group. ``ws://`` and
    ``wss://`` URLs speak STOMP over WebSocket.

    ``async with`` is the only way to open it (``connect()`` raises
    :class:`~stompy.errors.LocalProtocolError`): anyio and trio let a task group be
    exited only by the task that entered it, in the cancel scope it was entered in,
    which two calls made by hand cannot promise. ``await conn.close()`` may come
    earlier, inside the block, from any task and inside any cancel scope.

    Any number of tasks of the event loop that opened it may share it; a call from
    another thread (another event loop) raises :class:`~stompy.errors.LocalProtocolError`
    where it would send or wait, and nothing is sent: its tasks could never wake it.
    """

    _link: AsyncLink

    def _message_class(self) -> type[AsyncMessage]:
        return AsyncMessage

    def _setup(self) -> None:
        self._io = io = TaskIO(self._engine)
        self._engine.owner = self._link = AsyncLink(io)  # what answers its messages

    async def __aenter__(self) -> AsyncConnection:
        """Connect (retrying per ``reconnect``), enter the task group and start the
        connection's tasks. Raises :class:`~stompy.errors.ConnectFailed` or
        :class:`~stompy.errors.ServerError` when no connection was made, and
        :class:`~stompy.errors.LocalProtocolError` on a connection opened before."""
        status = self._engine.status
        if status is not NEW:
            raise LocalProtocolError(
                f"`async with` on a connection that is {status}: "
                "an AsyncConnection is opened once; make a new one"
            )
        self._instrument()
        io = self._io
        await io.open()
        try:
            if self._options.hooked:
                io.hooks_done = anyio.Event()
                io.spawn(functools.partial(_run_hooks, io))
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Disconnect gracefully (as :meth:`close`), then exit the task group. The
        block's own exception goes on unchanged."""
        exc = exc_info[1]
        try:
            await self._io.close()
        finally:
            await self._io.leave(exc if isinstance(exc, BaseException) else None)
        if exc is None:
            self._raise_refusal()  # as close() does; never over the block's own

    def __enter__(self) -> NoReturn:
        # Only for the message: without it, `with` says the class does not support the
        # context manager protocol, with no word of `async with`.
        raise TypeError(
            "an AsyncConnection is opened with `async with AsyncConnection(...) as conn:`, "
            "not `with` (the blocking client is stompy.Connection)"
        )

    def __exit__(self, *exc_info: object) -> None:  # pragma: no cover - never entered
        pass

    def connect(self) -> NoReturn:
        """Refused: open the connection with ``async with AsyncConnection(...) as conn:``.

        Always raises :class:`~stompy.errors.LocalProtocolError`: a task group opened by
        one call and closed by another cannot be kept in step with the caller's cancel
        scopes (see the class's docstring).
        """
        raise LocalProtocolError(
            "AsyncConnection has no connect(): open it with "
            "`async with AsyncConnection(...) as conn:`, which connects, runs the "
            "connection's tasks in a task group of the block and disconnects at its end"
        )

    async def close(self) -> bool:
        """Disconnect gracefully and stop every task; safe to call more than once, from
        any task and inside any cancel scope. The block of ``async with`` goes on (and
        exits the connection's task group at its end); calls on the closed connection
        raise :class:`~stompy.errors.LocalProtocolError`.

        Returns whether the close was clean, as :meth:`stompy.Connection.close` says. Its
        waits are bounded by ``receipt_timeout``; a close while another is under way
        waits for that one and returns what it does. Raises the broker's ERROR that no
        call raised, as :meth:`stompy.Connection.close` says.
        """
        clean = await self._io.close()
        self._raise_refusal()
        return clean

    # -- calls -------------------------------------------------------------------------

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
        transaction: AsyncTransaction | str | None = None,
    ) -> None:
        """Send a message; see :meth:`stompy.Connection.send`."""
        engine = self._engine
        telemetry = self._link.telemetry
        io = self._io
        if (
            transaction is None
            and receipt is False
            and telemetry is None
            # From another thread or event loop, the long way raises (TaskIO.run).
            # Looked at when this send would start the writer, not all through a burst,
            # which started it already: a cost a send feels.
            and (io.write_due or io.at_home())
            and engine.send_now(destination, body, headers, content_type, io.clock)
        ):
            # The common case, kept short: the clock is read only if heart-beats need it,
            # and the writer is kicked only if it was not yet (mostly it was). On a
            # connection at rest the frame goes from here: the first of a burst at once,
            # the writer takes the rest in one write.
            if not io.write_due:
                if io.at_rest:
                    io.at_rest = False
                    if not io.push_now():
                        await io.push()
                else:
                    io.kick()
            if len(engine.outgoing) > MAX_OUTGOING:
                await io.run(Call(engine, io.clock()).flush())
            return
        tx = transaction_id(transaction, engine)
        call = traced(Call(engine, io.clock()), telemetry)
        await io.run(call.send(destination, body, headers, content_type, tx, receipt))

    async def send_many(
        self,
        messages: Iterable[Outgoing],
        *,
        receipt: bool = False,
        transaction: AsyncTransaction | str | None = None,
    ) -> int:
        """Send ``messages`` in order; see :meth:`stompy.Connection.send_many`."""
        tx = transaction_id(transaction, self._engine)
        count = 0
        work: list[Outgoing] | Outgoing = []
        try:
            for work in split_for_sending(messages):
                call = traced(Call(self._engine, self._io.clock()), self._link.telemetry)
                count += await self._io.run(call.send_some(work, receipt, tx, count))
        except Exception as exc:
            note_sent(exc, count, receipt, isinstance(work, Outgoing))  # what went out
            raise
        return count

    async def request(
        self, destination: str, body: bytes | str = b"", **options: Unpack[kw.RequestOptions]
    ) -> AsyncMessage:
        """Send a request and return the reply; see :meth:`stompy.Connection.request`.

        Many tasks may wait for replies on one connection at once; cancelling one
        forgets its request (a later reply is dropped).
        """
        if not kw.REQUEST.issuperset(options):  # (kw.check()'s own test, written out)
            kw.check(options, kw.REQUEST, "AsyncConnection.request")
        io = self._io
        telemetry = self._link.telemetry
        if telemetry is None:  # straight when nothing is in its way (see Asking)
            return await io.run(Asking(self._engine, io.clock(), destination, body, options))
        call = traced(Call(self._engine, io.clock()), telemetry)
        return await io.run(call.request(destination, body, options))

    def subscribe(
        self,
        destination: str,
        *,
        on_message: Callable[[AsyncMessage], object] | None = None,
        **options: Unpack[kw.SubscribeOptions],
    ) -> _Opening[AsyncSubscription]:
        """Subscribe to ``destination``.

        ``sub = await conn.subscribe(...)``, or ``async with conn.subscribe(...) as sub:``
        to unsubscribe when the block ends. With ``on_message``, that function (or
        coroutine function, awaited) is called for each message, one at a time, in a
        task of the connection's task group, until the subscription ends; what it
        raises goes to the ``on_callback_error`` hook, or is printed to stderr (see
        ``docs/acks.md``), and the next message comes. An ``on_message`` that is not
        callable is a :class:`TypeError`, and nothing is subscribed.
        """
        kw.check(options, kw.SUBSCRIBE, "AsyncConnection.subscribe")
        if on_message is not None and not callable(on_message):
            raise wrong_type("on_message", "a callable or None", on_message)
        return _Opening(self._open(lambda call: call.subscribe(destination, options), on_message))

    async def _open(
        self,
        steps: Callable[[Call[AsyncMessage]], Steps[Inbox[AsyncMessage]]],
        on_message: Callable[[AsyncMessage], object] | None,
    ) -> AsyncSubscription:
        inbox = await self._io.run(steps(Call(self._engine, self._io.clock())))
        sub = AsyncSubscription(self._link, inbox)
        if on_message is not None:
            sub._until_closed = True
            self._io.spawn(functools.partial(_dispatch, sub, on_message))
        return sub

    def transaction(self) -> _Opening[AsyncTransaction]:
        """Begin a transaction: ``tx = await conn.transaction()``, or
        ``async with conn.transaction() as tx:`` to commit at the end (abort on error)."""
        return _Opening(self._begin())

    async def _begin(self) -> AsyncTransaction:
        tx = await self._io.run(Call(self._engine, self._io.clock()).begin())
        return AsyncTransaction(self, tx, self._engine.epoch)

    async def _end(self, tx: AsyncTransaction, command: str, receipt: bool) -> None:
        call = Call(self._engine, self._io.clock())
        await self._io.run(call.end_transaction(command, tx.id, tx._epoch, receipt))


async def _dispatch(sub: AsyncSubscription, callback: Callable[[AsyncMessage], object]) -> None:
    """``on_message``: the callback for each message of ``sub``, until it ends, as
    :func:`~stompy._engine.callbacks.handle_message` says (a coroutine function's
    result, and the ``on_callback_error`` hook's, awaited)."""
    telemetry = sub._telemetry
    on_error = sub._engine.options.on_callback_error
    try:
        while (message := await sub._take(None)) is not None:
            around = UNTRACED if telemetry is None else telemetry.processing(message)
            await call_awaiting(handle_message(callback, message, sub, on_error, around))
    except StompError as exc:
        log.debug("%r ended: %s", sub, exc)


async def _run_hooks(io: TaskIO[AsyncMessage]) -> None:
    """The lifecycle hooks' task: the engine's hook calls in order, until it is over."""
    engine = io.engine
    io.hooks_task = anyio.get_current_task().id
    try:
        while not hooks_over(engine):
            await io.noticed.take()
            while engine.notices:
                await call_awaiting(call_hook(engine.notices.popleft()))
    finally:
        if io.hooks_done is not None:
            io.hooks_done.set()


async def send_async(
    url: str | Sequence[str],
    destination: str,
    body: bytes | str = b"",
    **options: Unpack[kw.OneShotOptions],
) -> None:
    """Connect, send one message with a receipt, disconnect; the twin of :func:`stompy.send`."""
    connection, message = kw.one_shot(options, "send_async")
    async with AsyncConnection(url, **connection) as conn:
        await conn.send(destination, body, **message)

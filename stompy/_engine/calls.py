"""The user's calls that may wait, written once for both transports.

A call such as a send with a receipt is a few steps on the engine with waits between
them: for the connection to come back, for room in the outgoing buffer, for the
RECEIPT. Each call here is a generator. It runs its steps on the engine, and where
it must wait it yields a :class:`Wait` (what would end the wait, and until when); the
transport waits in its own way (a condition variable, an anyio event) and sends the
time back. Every rule (how long to wait, which error ends a wait, when a send is
repeated after an outage) is decided here, so the blocking and the async client
cannot disagree, and the rules are tested with a fake clock.

A transport that drives a call writes what :attr:`Engine.outgoing` holds before each
wait and after the last step; a wait may end early (the call checks again and waits
once more), and on the deadline at the latest. Closing the generator (a cancelled
wait) forgets the receipt it waited for.
"""

from __future__ import annotations

import enum
from collections.abc import Generator, Mapping
from typing import Any, Final, Generic, TypeVar, cast, get_args

from stompy._checks import (
    MAX_SECONDS,
    check_choice,
    check_flag,
    check_integer,
    check_seconds,
    check_type,
)
from stompy._core.events import AckMode, MessageReceived
from stompy._core.frames import Frame
from stompy._core.protocol import ClientProtocol
from stompy._engine.engine import MAX_OUTGOING, Engine, log
from stompy._engine.inbox import Inbox
from stompy._engine.keywords import MessageOptions, RequestOptions, SubscribeOptions
from stompy._engine.message import MessageBase
from stompy._engine.options import check_overflow
from stompy._engine.outgoing import Outgoing, note_sent
from stompy._engine.requests import REPLY_SUBSCRIPTIONS, Request, reply_address, timed_out
from stompy._engine.state import (
    CLOSED,
    CLOSING,
    CONNECTED,
    PROTOCOL_CLOSED,
    RECONNECTING,
    ReceiptState,
)
from stompy._mypyc import mypyc_attr
from stompy.errors import (
    AckLost,
    ClosedBeforeReceipt,
    CommitOutcomeUnknown,
    ConnectionLost,
    MessageTooLarge,
    ReceiptTimeout,
    StompError,
    StompTimeout,
    TransactionLost,
    _again,
)

__all__ = (
    "REQUEST_TIMEOUT",
    "RESENT_HEADER",
    "Asking",
    "Call",
    "Running",
    "Sends",
    "Steps",
    "Wait",
    "Waiting",
)

#: Seconds ``request()`` waits for its reply unless told otherwise.
REQUEST_TIMEOUT: Final = 30.0
#: The header that marks a SEND repeated after a reconnect (its value: the repeat's
#: number, from 1). The first attempt may have reached the broker: a consumer that
#: must not handle a message twice checks its own id on the messages marked so.
RESENT_HEADER: Final = "stompy-resent"

M = TypeVar("M", bound=MessageBase)
T = TypeVar("T")


class Waiting(enum.Enum):
    """What a :class:`Wait` is for: the transport wakes it when this happens."""

    #: The engine's status or connection changes (a reconnect, a failure, a close).
    CHANGE = "change"
    #: The transport wrote some of the outgoing buffer.
    ROOM = "room"
    #: A RECEIPT came (or anything else the pump routed).
    RECEIPT = "receipt"
    #: The reply to a request came (:attr:`Pumped.replied` names it).
    REPLY = "reply"


class Wait:
    """One wait a call asks for: until ``what`` happens, or ``deadline`` at the latest.

    A plain class rather than a dataclass: a round trip makes one, and mypyc compiles
    the ``__init__`` written here, where a dataclass's generated one stays interpreted.
    """

    __slots__ = ("correlation_id", "deadline", "receipt", "what")

    def __init__(
        self,
        what: Waiting,
        deadline: float,
        receipt: str | None = None,
        correlation_id: str | None = None,
    ) -> None:
        self.what = what
        self.deadline = deadline
        #: The receipt id, for a :attr:`Waiting.RECEIPT` wait.
        self.receipt = receipt
        #: The request's ``correlation-id``, for a :attr:`Waiting.REPLY` wait.
        self.correlation_id = correlation_id

    def __repr__(self) -> str:
        key = self.receipt or self.correlation_id or ""
        return f"<Wait {self.what.value} until {self.deadline} {key}>"


#: A call's steps: it yields waits, is sent the time after each, and returns ``T``.
Steps = Generator[Wait, float, T]

_CLOSING: Final = (CLOSING, CLOSED)
# Module constants for the steps that run per call: an Enum's member looked up on its
# class costs more (see docs/performance.md, "Figures behind the core's comments").
_RECEIPT: Final = Waiting.RECEIPT
_REPLY: Final = Waiting.REPLY
_ARRIVED: Final = ReceiptState.ARRIVED
_PENDING: Final = ReceiptState.PENDING
#: What a lost send's error says is unknown.
_UNKNOWN: Final = "whether the frame took effect"


def _lost_transaction(transaction: str, command: str) -> TransactionLost:
    """The error of a ``command`` frame in ``transaction``, which was begun on an earlier
    connection (see :meth:`Engine.transaction_lost`): nothing was sent."""
    return TransactionLost(
        f"transaction {transaction!r} was lost with its connection (the broker aborted it): "
        f"nothing in it took effect, and this {command} was not sent"
    )


class Running(Generic[T]):
    """A call a transport drives: :meth:`resume` gives its next wait, or ``None`` once
    it returned (:attr:`result`)."""

    __slots__ = ("_steps", "result")

    result: T

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = _outcome(steps)

    def resume(self, now: float | None = None) -> Wait | None:
        """Start the call (``now`` is ``None``) or go on after a wait that ended at ``now``."""
        steps = self._steps
        step = next(steps) if now is None else steps.send(now)
        if type(step) is Wait:
            return step
        self.result = cast(T, step)
        next(steps, None)  # ended, without a StopIteration (see _outcome)
        return None

    def close(self) -> None:
        """Stop the call where it waits (it forgets its receipt)."""
        self._steps.close()


def _outcome(steps: Steps[T]) -> Generator[Wait | T, float, None]:
    """The waits of ``steps``, then what they returned, yielded: steps that return end
    their driver's ``send()`` with a StopIteration, made, raised and caught (compiled, a
    traceback's frame and code object made too: about 3,500 instructions a call),
    where ``yield from`` takes the value without one. A last ``next()`` ends this
    generator the same way (no value, no exception)."""
    yield (yield from steps)


def _unanswered(
    engine: Engine[Any],
    state: ReceiptState,
    lost: type[StompError],
    what: str,
    epoch: int,
    unknown: str = "",
) -> None:
    """Raise why the wait on ``engine`` for ``what`` (a receipt, a reply, asked in
    ``epoch``) ended unanswered, if it did: the engine's failure, ``lost`` when its connection
    ended first (saying that ``unknown``, if given, is unknown; :class:`MessageTooLarge`
    itself, when that is why it ended) or
    ``close()`` ended a wait for a reply, or :class:`ClosedBeforeReceipt` when
    ``close()`` ended a wait for a receipt unconfirmed."""
    if state is ReceiptState.FAILED:
        failure = engine.failure
        assert failure is not None
        raise _again(failure) from failure
    if state is ReceiptState.UNCONFIRMED:
        cause = engine.end_of(epoch)
        why = f" ({cause})" if cause is not None else ""
        raise ClosedBeforeReceipt(
            f"the connection was closed before {what} arrived, and the broker did not "
            f"confirm the DISCONNECT{why}: whether the frame took effect is unknown"
        )
    if state is ReceiptState.CLOSED:
        raise lost(
            f"the connection was closed by the caller (close()) before {what} arrived: "
            "no reply is awaited once it closes"
        )
    if state is ReceiptState.LOST:
        cause = engine.end_of(epoch)
        if isinstance(cause, MessageTooLarge):
            # The broker ended the connection for a frame too large: sending it again
            # on the next one would fail the same way.
            raise _again(cause) from cause
        why = f": {cause}" if cause is not None else ""
        unknown = f"; {unknown} is unknown" if unknown else ""
        raise lost(f"the connection was lost before {what} arrived{why}{unknown}")


def request_options(options: RequestOptions) -> tuple[float, str, Mapping[str, str] | None]:
    """A request's ``timeout``, ``reply_subscription`` and ``headers`` (see
    :meth:`Call.request`), checked.

    Raises :class:`ConfigurationError` for a ``timeout`` below 0, NaN or too long, or a
    ``reply_subscription`` it does not know; :class:`TypeError` for a ``timeout`` not a
    number, or ``headers`` not a mapping."""
    given: Mapping[str, Any] = options  # checked here (see Sends)
    timeout = given.get("timeout", REQUEST_TIMEOUT)
    if type(timeout) is not float or not 0.0 <= timeout <= MAX_SECONDS:  # else it is fine
        timeout = check_seconds("timeout", timeout)
    asked: object = given.get("reply_subscription", "auto")
    route = (
        asked
        if type(asked) is str and asked in REPLY_SUBSCRIPTIONS
        else check_choice("reply_subscription", asked, REPLY_SUBSCRIPTIONS)  # raises
    )
    # Merged with reply-to and correlation-id: pairs were "'list' object is not a mapping".
    headers = given.get("headers")
    if headers is not None and type(headers) is not dict:
        check_type("headers", headers, Mapping, "a mapping of str to str")
    return timeout, route, headers


def _unreplied(
    engine: Engine[Any], request: Request[Any], now: float, deadline: float, timeout: float
) -> None:
    """Raise why the wait for ``request``'s reply, which has not come, is over at ``now``,
    if it is: the connection's end or failure (:func:`_unanswered`), or its ``deadline``
    (:class:`RequestTimeout`, after ``timeout`` seconds)."""
    state = engine.reply_state(request)
    if state is not _PENDING:
        what = f"the reply to the request to {request.destination!r} ({request.correlation_id!r})"
        _unanswered(engine, state, ConnectionLost, what, request.epoch)
    if now >= deadline:
        raise timed_out(request, timeout)


class Asking(Running[M]):
    """A ``request()`` as a client runs it, driven as :class:`Running` is: straight, when
    the request can go out at once.

    Connected (:meth:`Engine.usable`) with room in the outgoing buffer, the SEND is queued
    and its bytes moved there as it starts, then it waits for the reply, which the pump
    puts on the :class:`Request`; each wake-up looks there first. No generator, no
    :class:`Call`, one :class:`Wait` per request. Anything in the way (not
    connected yet, a reconnect, an end not yet judged, a full buffer) hands the rest to
    :meth:`Call.request` or :meth:`Call.answer`, the general way: the outcomes and errors
    are theirs, the same either way.
    """

    __slots__ = (
        "_body",
        "_deadline",
        "_destination",
        "_engine",
        "_general",
        "_now",
        "_options",
        "_request",
        "_timeout",
        "_wait",
    )

    # Set as the request is sent straight (see resume()).
    _deadline: float
    _timeout: float
    _wait: Wait

    def __init__(
        self,
        engine: Engine[M],
        now: float,
        destination: object,
        body: object,
        options: RequestOptions,
    ) -> None:
        # Nothing is looked at before it starts (resume()): a transport runs it under its
        # lock, after its own checks.
        self._engine = engine
        self._now = now
        self._destination = destination
        self._body = body
        self._options = options
        #: The request sent straight (``None``: not, or not yet).
        self._request: Request[M] | None = None
        #: The general way runs it (in ``_steps``).
        self._general = False

    def resume(self, now: float | None = None) -> Wait | None:
        """Start the request (``now`` is ``None``): queue it and move its bytes out, then
        its wait; or go on after a wait that ended at ``now``: the reply, once it came."""
        engine = self._engine
        request = self._request
        if request is not None:
            reply = request.reply
            if reply is not None:
                self.result = reply
                engine.requests.forget(request)
                return None
            assert now is not None
            try:
                _unreplied(engine, request, now, self._deadline, self._timeout)
            except BaseException:
                engine.requests.forget(request)
                raise
            return self._wait  # woken early: the same wait again
        if now is not None:  # the general way's, from its start
            return Running.resume(self, now)
        now = self._now
        proto = engine.proto
        if (  # (Engine.usable(), written out)
            engine.status is not CONNECTED
            or engine.ending is not None
            or proto is None
            or proto.state is PROTOCOL_CLOSED
        ):
            call = Call(engine, now)  # a wait may come first: the general way
            return self._hand_over(call.request(self._destination, self._body, self._options))
        # request_options(), written out: a call and a tuple less per request.
        given: Mapping[str, Any] = self._options  # checked here (see Sends)
        timeout = given.get("timeout", REQUEST_TIMEOUT)
        if type(timeout) is not float or not 0.0 <= timeout <= MAX_SECONDS:
            timeout = check_seconds("timeout", timeout)
        route = given.get("reply_subscription", "auto")
        if type(route) is not str or route not in REPLY_SUBSCRIPTIONS:
            check_choice("reply_subscription", route, REPLY_SUBSCRIPTIONS)  # raises
        headers = given.get("headers")
        if headers is not None and type(headers) is not dict:
            check_type("headers", headers, Mapping, "a mapping of str to str")
        content_type = given.get("content_type")
        request = engine.request(self._destination, self._body, headers, content_type, route, now)
        deadline = now + timeout
        if len(engine.outgoing) > MAX_OUTGOING:  # back-pressure: wait for room
            return self._hand_over(Call(engine, now).answer(request, deadline, timeout))
        self._request = request
        self._deadline = deadline
        self._timeout = timeout
        wait = self._wait = Wait(_REPLY, deadline, None, request.correlation_id)
        return wait

    def _hand_over(self, steps: Steps[M]) -> Wait | None:
        """Run ``steps``, the general way, from here on."""
        self._steps = _outcome(steps)
        self._general = True
        return Running.resume(self)

    def close(self) -> None:
        """Stop the call where it waits: it forgets its request."""
        if self._general:
            self._steps.close()
            return
        request = self._request
        if request is not None:
            self._engine.requests.forget(request)


@mypyc_attr(allow_interpreted_subclasses=True)  # TracedCall, not compiled
class Sends(Generic[M]):
    """The sends a client makes of one call, written once for :class:`Call` and for
    its traced twin (:class:`stompy._engine.tracing.TracedCall`): :meth:`send` and
    :meth:`reply` each come down to one :meth:`send_one`.

    A flag or an option these calls check themselves is taken as ``object`` (or read
    as ``Any``): compiled (mypyc), a narrower type would be asserted as the call is
    made, and a wrong one refused by mypyc's own TypeError, which names no argument."""

    __slots__ = ()

    def send(
        self,
        destination: Any,  # Any: Outgoing checks them (see the class)
        body: Any,
        headers: Mapping[str, str] | None,
        content_type: Any,
        transaction: str | None,
        receipt: object,
    ) -> Steps[None]:
        """SEND; with ``receipt``, until the broker confirmed.

        With a reconnect policy, a send with a receipt whose connection is lost first
        is sent again on the next connection, until ``send_timeout`` has passed since
        the call began (never inside a transaction, which is lost). The first attempt
        may have reached the broker, so the repeat carries :data:`RESENT_HEADER` (the
        repeat's number): consumers can tell which messages may be duplicates. Each
        attempt gets ``receipt_timeout`` for buffer room and receipt together, so the
        call ends within ``send_timeout + receipt_timeout``. In a ``transaction`` begun
        on an earlier connection (one this call may have waited out the end of), it
        raises :class:`TransactionLost` and sends nothing.
        """
        receipt = check_flag("receipt", receipt)
        # The steps of send_one() themselves, not a generator around them: a call
        # resumes them at each wait.
        return self.send_one(
            Outgoing(destination, body, headers, content_type), transaction, receipt
        )

    def reply(self, event: MessageReceived, body: Any, options: MessageOptions) -> Steps[None]:
        """SEND ``body`` to the ``reply-to`` of the received message ``event``, with its
        ``correlation-id``; as :meth:`send` otherwise (with ``receipt``, until confirmed).

        Raises :class:`NoReplyTo` (nothing sent) when the message has no ``reply-to``.
        """
        given: Mapping[str, Any] = options  # checked here (see the class)
        receipt = check_flag("receipt", given.get("receipt", False))
        destination, headers = reply_address(event.frame, given.get("headers"))
        message = Outgoing(destination, body, headers, given.get("content_type"))
        return self.send_one(message, None, receipt, event.frame)

    def send_one(
        self, message: Outgoing, transaction: str | None, receipt: bool, parent: Frame | None = None
    ) -> Steps[None]:
        """SEND ``message``, as :meth:`send` says; ``parent``: the received message it
        answers (a reply), whose trace a traced call continues."""
        raise NotImplementedError


class Call(Sends[M]):
    """The calls on one engine, each started at ``now`` (the transport's clock)."""

    __slots__ = ("engine", "now")

    def __init__(self, engine: Engine[M], now: float) -> None:
        self.engine = engine
        #: The time, as the transport last said.
        self.now = now

    def _wait(self, what: Waiting, deadline: float, receipt: str | None = None) -> Steps[None]:
        self.now = yield Wait(what, deadline, receipt)

    # -- the steps every call is made of ---------------------------------------------

    def ready(self, give_up: float | None = None, sent: bool = False) -> Steps[ClientProtocol]:
        """The core, once connected: waits out a reconnect until ``send_timeout`` has
        passed, or until ``give_up`` (a repeated send's time left; ``sent`` when an
        earlier attempt of it went out, which the error then says may have arrived)."""
        engine = self.engine
        proto = engine.usable()
        if proto is not None:
            return proto
        options = engine.options
        if engine.settling:
            # The connection ended and the transport is about to reconnect or fail:
            # wait for its verdict rather than misuse a dead core.
            proto = engine.proto
            deadline = self.now + options.receipt_timeout
            while engine.status is CONNECTED and engine.proto is proto:
                if self.now >= deadline or not engine.serving:
                    break
                yield from self._wait(Waiting.CHANGE, deadline)
        if engine.status is RECONNECTING:
            policy = options.reconnect
            timeout = policy.send_timeout if policy is not None else 0.0
            deadline = self.now + timeout if give_up is None else give_up
            while engine.status is RECONNECTING:
                if self.now >= deadline:
                    why = f"not reconnected within {timeout} s"
                    if sent:  # its receipt was lost with the connection, not the SEND
                        why += ": the message may have reached the broker before it was lost"
                    raise ConnectionLost(why)
                yield from self._wait(Waiting.CHANGE, deadline)
        return engine.ready()

    def flush(self, until: float | None = None) -> Steps[None]:
        """Move the core's frames to the outgoing buffer; when it is over
        :data:`MAX_OUTGOING`, wait for room until ``until`` (default: ``receipt_timeout``).

        Raises :class:`ConnectionLost` when the connection ends first (what was queued
        may not have gone out); at ``until``, the broker's verdict
        (:meth:`Engine.stopped_reading`, which ends the connection) if it took nothing
        for ``receipt_timeout``, else :class:`StompTimeout` (it reads, too slowly).
        """
        engine = self.engine
        engine.flush(self.now)
        if len(engine.outgoing) > MAX_OUTGOING:
            yield from self.room(until)

    def room(self, until: float | None = None) -> Steps[None]:
        """The wait of :meth:`flush` once :attr:`Engine.outgoing` is over
        :data:`MAX_OUTGOING`, which it raises as :meth:`flush` says."""
        engine = self.engine
        engine.expect_pending()  # receipts may arrive meanwhile: keep them
        epoch = engine.epoch
        deadline = self.now + engine.options.receipt_timeout if until is None else until
        while len(engine.outgoing) > MAX_OUTGOING:
            if engine.failure is not None:
                raise _again(engine.failure) from engine.failure
            if engine.epoch != epoch or engine.ending is not None:
                cause = engine.ending
                if isinstance(cause, MessageTooLarge):
                    # The broker refused what was being written: say that, not "lost".
                    raise _again(cause) from cause
                why = f": {cause}" if cause is not None else ""
                raise ConnectionLost(f"the connection was lost before the frames went out{why}")
            if self.now >= deadline:
                stuck = engine.write_deadline(self.now)
                if stuck is not None and self.now >= stuck:
                    lost = engine.stopped_reading()
                    engine.saw_end(lost)  # the transport ends the connection with it
                    raise lost
                raise StompTimeout("the broker reads too slowly: the outgoing buffer stays full")
            yield from self._wait(Waiting.ROOM, deadline)

    def receipt(
        self,
        rid: str,
        epoch: int,
        *,
        until: float | None = None,
        lost: type[StompError] = ConnectionLost,
        unknown: str = "whether the frame took effect",
    ) -> Steps[None]:
        """Wait for the RECEIPT ``rid`` asked in ``epoch``, until ``until`` (default:
        ``receipt_timeout``). ``lost`` is raised when its connection ends first, saying
        that ``unknown`` is unknown; :class:`ClosedBeforeReceipt` when ``close()`` ended
        it without the broker's confirmation (with it, every wait ends as confirmed:
        see :mod:`stompy._engine.receipts`)."""
        engine = self.engine
        timeout = engine.options.receipt_timeout
        deadline = self.now + timeout if until is None else until
        engine.receipts.expect(rid)
        try:
            while True:
                state = engine.receipt_state(rid, epoch)
                if state is _ARRIVED:
                    return
                if state is not _PENDING:
                    _unanswered(engine, state, lost, f"the receipt {rid!r}", epoch, unknown)
                if self.now >= deadline:
                    raise ReceiptTimeout(f"no RECEIPT {rid!r} within {timeout} s")
                self.now = yield Wait(_RECEIPT, deadline, rid)  # _wait(), inlined
        finally:
            engine.receipts.forget(rid)

    # -- the calls ---------------------------------------------------------------------

    def send_one(
        self, message: Outgoing, transaction: str | None, receipt: bool, parent: Frame | None = None
    ) -> Steps[None]:
        """SEND ``message``; with ``receipt``, until the broker confirmed (see
        :meth:`Sends.send`; ``parent`` only matters to a traced call)."""
        engine = self.engine
        policy = engine.options.reconnect
        give_up = self.now + (policy.send_timeout if policy is not None else 0.0)
        repeat = 0
        while True:
            proto = engine.usable()  # connected, mostly: no generator for a wait then
            if proto is None:
                proto = yield from self.ready(give_up, repeat > 0)
            if transaction is not None and engine.transaction_lost(transaction):
                # Also when it was begun on the connection this call waited out the end of.
                raise _lost_transaction(transaction, "SEND")
            epoch = engine.epoch
            until = self.now + engine.options.receipt_timeout
            headers = message.headers
            if repeat:
                headers = {**(headers or {}), RESENT_HEADER: str(repeat)}
            rid = proto.send(
                message.destination,
                message.body,
                headers=headers,
                content_type=message.content_type,
                transaction=transaction,
                receipt=receipt,
            )
            if rid is None:
                engine.flush(self.now)
                if len(engine.outgoing) > MAX_OUTGOING:
                    yield from self.room(until)
                return
            receipts = engine.receipts
            # Before the flush, which may wait: it may come meanwhile.
            receipts.expect(rid)
            try:
                engine.flush(self.now)
                if len(engine.outgoing) > MAX_OUTGOING:
                    yield from self.room(until)
                try:
                    # The wait of receipt(), written out: one generator less to resume.
                    while True:
                        state = engine.receipt_state(rid, epoch)
                        if state is _ARRIVED:
                            return
                        if state is not _PENDING:
                            what = f"the receipt {rid!r}"
                            _unanswered(engine, state, ConnectionLost, what, epoch, _UNKNOWN)
                        if self.now >= until:
                            timeout = engine.options.receipt_timeout
                            raise ReceiptTimeout(f"no RECEIPT {rid!r} within {timeout} s")
                        self.now = yield Wait(_RECEIPT, until, rid)
                except ConnectionLost:
                    if (
                        policy is None
                        or transaction is not None
                        or self.now >= give_up
                        or engine.failure is not None
                        or engine.status in _CLOSING
                    ):
                        raise
                    repeat += 1
                    log.info(
                        "sending again to %s after the connection was lost", message.destination
                    )
            finally:
                receipts.forget(rid)

    def request(self, destination: object, body: object, options: RequestOptions) -> Steps[M]:
        """SEND a request (see :meth:`Engine.request`) and wait for its reply, which it
        returns; the whole call takes at most ``timeout`` once connected.

        Raises :class:`RequestTimeout` when no reply came in time (one that comes later
        is dropped), :class:`ConnectionLost` when the connection is lost first (the reply
        cannot come on another: a new request must be made) or ``close()`` came first
        (which it says), the engine's failure, and
        :class:`ConfigurationError` for a ``timeout`` below 0, NaN or too long
        (:class:`TypeError` for one not a number), or a header it writes.

        The general way, which waits out what is in a request's way (a reconnect, a
        connection not yet settled, a full outgoing buffer); :class:`Asking` runs the
        same call straight when nothing is.
        """
        timeout, route, headers = request_options(options)
        engine = self.engine
        if engine.usable() is None:  # connected, mostly: no generator for a wait then
            yield from self.ready()
        deadline = self.now + timeout
        content_type = options.get("content_type")
        request = engine.request(destination, body, headers, content_type, route, self.now)
        return (yield from self.answer(request, deadline, timeout))

    def answer(self, request: Request[M], deadline: float, timeout: float) -> Steps[M]:
        """The rest of :meth:`request` once ``request`` is queued (:meth:`Engine.request`):
        a wait for room in the outgoing buffer if it is full, until ``deadline``, then the
        wait for its reply, which it returns, until ``deadline`` (its ``timeout`` after the
        call began). The request is forgotten as it ends: a reply that comes later is
        dropped."""
        engine = self.engine
        try:
            if len(engine.outgoing) > MAX_OUTGOING:
                yield from self.room(deadline)
            while True:
                reply = request.reply  # (Engine.reply_state's first look, without the call)
                if reply is not None:
                    return reply
                _unreplied(engine, request, self.now, deadline, timeout)  # raises, if over
                self.now = yield Wait(_REPLY, deadline, None, request.correlation_id)
        finally:
            engine.requests.forget(request)

    def send_some(
        self, work: list[Outgoing] | Outgoing, receipt: object, transaction: str | None, before: int
    ) -> Steps[int]:
        """One piece of ``send_many``'s work (see :func:`split_for_sending`): a chunk of
        messages queued at once, or the last message alone, which carries the receipt.
        How many were sent; what was queued before an error goes out too, and the error
        says how many of the batch did (``before`` this piece, and of it)."""
        receipt = check_flag("receipt", receipt)
        if isinstance(work, Outgoing):
            yield from self.send_one(work, transaction, receipt)
            return 1
        proto = yield from self.ready()
        if transaction is not None and self.engine.transaction_lost(transaction):
            raise _lost_transaction(transaction, "SEND")
        try:
            for m in work:
                proto.send(
                    m.destination,
                    m.body,
                    headers=m.headers,
                    content_type=m.content_type,
                    transaction=transaction,
                )
        except Exception as exc:
            note_sent(exc, before + next(i for i, sent in enumerate(work) if sent is m), receipt)
            raise
        finally:
            self.engine.flush(self.now)
        yield from self.flush()
        return len(work)

    def subscribe(self, destination: object, options: SubscribeOptions) -> Steps[Inbox[M]]:
        """SUBSCRIBE; the new inbox (with ``receipt``, once the broker confirmed).

        Raises :class:`ConfigurationError` (:class:`TypeError` for a wrong type) for an
        ``ack`` mode, ``max_pending``, ``overflow`` or ``headers`` it cannot use, before
        any wait."""
        given: Mapping[str, Any] = options  # checked here (see Sends)
        ack = check_choice("ack", given.get("ack", "auto"), get_args(AckMode))
        receipt = check_flag("receipt", given.get("receipt", False))
        sub_id = given.get("id")
        check_type("id", sub_id, (str, type(None)), "a str or None")
        max_pending = given.get("max_pending")
        if max_pending is not None:
            max_pending = check_integer("max_pending", max_pending, 1)
        overflow = given.get("overflow")
        if overflow is not None:
            check_overflow(overflow)
        headers = given.get("headers")
        check_type("headers", headers, (Mapping, type(None)), "a mapping of str to str")
        engine = self.engine
        yield from self.ready()
        epoch = engine.epoch
        made = engine.subscribe(
            destination,
            cast(AckMode, ack),
            sub_id,
            headers,
            max_pending,
            receipt,
            overflow,
        )
        yield from self.flush()
        if made.receipt is not None:
            yield from self.receipt(made.receipt, epoch)
        return made.inbox

    def unsubscribe(self, inbox: Inbox[M], receipt: object) -> Steps[None]:
        """UNSUBSCRIBE if the connection is up; messages already received stay. A
        connection that ends before the receipt came ended the subscription with it
        (it is not made again): that is no failure of the unsubscription."""
        receipt = check_flag("receipt", receipt)
        engine = self.engine
        epoch = engine.epoch
        rid = engine.unsubscribe(inbox, receipt)
        yield from self.flush()
        if rid is not None:
            try:
                yield from self.receipt(rid, epoch)
            except ConnectionLost:
                return  # the subscription ended with its connection

    def begin(self) -> Steps[str]:
        """BEGIN; the transaction's id (its epoch is :attr:`Engine.epoch` right after)."""
        yield from self.ready()
        tx = self.engine.begin()
        yield from self.flush()
        return tx

    def end_transaction(self, command: str, tx: str, epoch: int, receipt: object) -> Steps[None]:
        """COMMIT or ABORT the transaction ``tx`` begun in ``epoch``.

        One from an earlier connection is gone with it: its COMMIT raises
        :class:`TransactionLost` (the broker aborted it), its ABORT does nothing. A
        COMMIT whose connection ends before its receipt came raises
        :class:`CommitOutcomeUnknown`: the broker may have committed it first.
        """
        receipt = check_flag("receipt", receipt)
        engine = self.engine
        if not engine.is_stale(epoch):
            yield from self.ready()  # as in acknowledge(): then it may be stale
        if engine.is_stale(epoch):
            if command == "COMMIT":
                raise TransactionLost(f"transaction {tx!r} was lost with its connection")
            return
        rid = engine.end_transaction(command, tx, receipt)
        yield from self.flush()
        if rid is None:
            return
        if command == "COMMIT":
            # "Any transaction which has not been committed is implicitly aborted if
            # [...] the TCP connection fails for any reason" (STOMP 1.2, BEGIN): it fails
            # after the COMMIT went, before its receipt, so either may have come first.
            unknown = f"whether the broker committed transaction {tx!r} before it ended"
            yield from self.receipt(rid, epoch, lost=CommitOutcomeUnknown, unknown=unknown)
        else:
            yield from self.receipt(rid, epoch, lost=TransactionLost)

    def acknowledge(
        self,
        command: str,
        event: MessageReceived,
        epoch: int,
        transaction: str | None,
        receipt: object,
    ) -> Steps[None]:
        """ACK or NACK a message received in ``epoch``.

        One from an earlier connection cannot be answered any more: the broker has put
        it back and will deliver it again. Nothing is sent; with ``receipt``, which asks
        for a confirmation that cannot be true, this raises :class:`AckLost` (a
        :class:`ConnectionLost`), else it does nothing. In a ``transaction`` begun on
        an earlier connection, it raises :class:`TransactionLost` and sends nothing.
        """
        receipt = check_flag("receipt", receipt)
        engine = self.engine
        if not engine.is_stale(epoch):
            # Waits out the verdict on a connection seen ending: then the message is of
            # an earlier one, and its ack id unknown on the next (an ERROR there).
            yield from self.ready()
        if transaction is not None and engine.transaction_lost(transaction):
            raise _lost_transaction(transaction, command)
        if engine.is_stale(epoch):
            if receipt:
                raise AckLost(
                    f"cannot {command} message {event.message_id!r}: it was received on an "
                    "earlier connection, and the broker delivers it again"
                )
            log.debug("not answering %s from an earlier connection: it is redelivered", event)
            return
        epoch = engine.epoch
        rid = engine.acknowledge(command, event, transaction, receipt)
        yield from self.flush()
        if rid is not None:
            yield from self.receipt(rid, epoch)

    def goodbye(self) -> Steps[bool]:
        """The graceful end: DISCONNECT if connected, and its receipt (bounded; an error
        on the way only ends it sooner). The engine is closed afterwards.

        Returns whether the broker confirmed it (:attr:`Engine.goodbye_confirmed`):
        ``False`` when the receipt did not come in time, the connection was lost or
        failed first, or there was none; a second goodbye says what the first did.
        """
        engine = self.engine
        if engine.status is CLOSED and engine.goodbye_confirmed is not None:
            return engine.goodbye_confirmed
        try:
            if engine.status in (CONNECTED, RECONNECTING) and (engine.failure is None):
                epoch = engine.epoch
                rid = engine.begin_close()
                engine.flush(self.now)
                if rid is not None:
                    yield from self.receipt(rid, epoch)
                    engine.goodbye_confirmed = True
        except StompError as exc:
            log.info("the broker did not confirm the DISCONNECT: %s", exc)
        finally:
            if engine.goodbye_confirmed is None:
                engine.goodbye_confirmed = False
            engine.closed()
        return engine.goodbye_confirmed

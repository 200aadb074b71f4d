"""What the objects users hold are, apart from how they wait.

``Connection`` and ``AsyncConnection``, their subscriptions and their transactions
differ only in how a call waits (a thread's condition variable, an anyio event).
Their state and everything read from it without waiting live here, once; so does
the choice of what a connection records for OpenTelemetry (:func:`instrument`) and of
the steps a call that sends runs, traced or not (:func:`traced`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from typing_extensions import Unpack

from stompy._checks import check_integer, check_timeout
from stompy._engine.callbacks import in_hook
from stompy._engine.calls import Call
from stompy._engine.engine import Engine
from stompy._engine.inbox import Inbox
from stompy._engine.keywords import CONNECTION, ConnectionOptions, check
from stompy._engine.message import MessageBase
from stompy._engine.options import ClientOptions
from stompy._engine.state import CLOSING, CONNECTED
from stompy._engine.urls import Endpoint
from stompy.errors import (
    LocalProtocolError,
    StompError,
    TransactionLost,
    _again,
    _untold,
)

if TYPE_CHECKING:
    from stompy._engine.tracing import Telemetry, TracedCall

__all__ = (
    "ConnectionBase",
    "LinkBase",
    "SubscriptionBase",
    "TransactionBase",
    "check_message",
    "instrument",
    "telemetry_possible",
    "traced",
    "transaction_id",
)

#: The transport's message class.
M = TypeVar("M", bound=MessageBase)

# Whether opentelemetry-api could be imported: None until a connection asked.
_otel: bool | None = None


def telemetry_possible() -> bool:
    """Whether an OpenTelemetry SDK can be installed in this process: the application
    imported the API (installing an SDK means calling it; ``opentelemetry-instrument``
    does so before the application starts), or names a provider for the API to load
    (``OTEL_PYTHON_TRACER_PROVIDER``, ``OTEL_PYTHON_METER_PROVIDER``). Asked as each
    connection connects (an application may set up its SDK after a first connection):
    otherwise a connection would import the API only to find no SDK, about 0.05-0.15 s
    of a process's first connection, for nothing."""
    return (
        "opentelemetry" in sys.modules
        or "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
        or "OTEL_PYTHON_METER_PROVIDER" in os.environ
    )


def instrument(engine: Engine[Any]) -> Telemetry | None:
    """What ``engine``'s connection records for OpenTelemetry, decided as it connects:
    nothing with ``tracing=False``, without opentelemetry-api, where no SDK can be
    installed (:func:`telemetry_possible`), or while the application installed none.
    Only when one can be is the API imported."""
    global _otel
    if not engine.options.tracing or _otel is False or not telemetry_possible():
        return None
    try:
        from stompy._engine.tracing import instrument as decide
    except ImportError:
        _otel = False
        return None
    _otel = True
    return decide(engine)


def traced(call: Call[M], telemetry: Telemetry | None) -> Call[M] | TracedCall[M]:
    """``call`` as a client runs a send, a request or a reply: as it is, or on a
    connection that records ``telemetry``, with each message in a PRODUCER span."""
    return call if telemetry is None else telemetry.traced(call)


class LinkBase(Generic[M]):
    """What a connection's messages and subscriptions hold of it, rather than the
    connection itself: its engine, and what it records for OpenTelemetry
    (decided as it connects). Each client adds the driver that runs its calls.

    Not the connection, because the driver holds this (each message refers to it): a
    connection its user dropped unclosed must still be collectable (see
    ``Connection.__del__``).
    """

    __slots__ = ("engine", "telemetry")

    def __init__(self, engine: Engine[M]) -> None:
        self.engine = engine
        #: What the connection records for OpenTelemetry (``None``: nothing), decided by
        #: ``connect()``.
        self.telemetry: Telemetry | None = None


class ConnectionBase(Generic[M]):
    """A client connection's options, engine and read-only properties."""

    #: What its messages and subscriptions hold of it (made by :meth:`_setup`).
    _link: LinkBase[M]

    def __init__(
        self,
        url_or_urls: str | Endpoint | Sequence[str | Endpoint],
        **options: Unpack[ConnectionOptions],
    ) -> None:
        # Named as the user wrote the call: ClientOptions would name itself.
        check(options, CONNECTION, type(self).__name__)
        self._options = ClientOptions(url_or_urls, **options)
        self._engine: Engine[M] = Engine(self._options, self._message_class())
        self._setup()

    def _instrument(self) -> Telemetry | None:
        """Decide, as the connection connects, what it records for OpenTelemetry
        (:func:`instrument`); the link's from then on."""
        self._link.telemetry = telemetry = instrument(self._engine)
        return telemetry

    def _setup(self) -> None:
        """Make the transport's own parts and :attr:`_link` (the engine exists by then)."""
        raise NotImplementedError

    def _message_class(self) -> type[M]:
        """The class of the transport's messages, which the core makes of each MESSAGE."""
        raise NotImplementedError

    def __repr__(self) -> str:
        engine = self._engine
        where = engine.endpoint or self._options.endpoints[0]
        return f"<{type(self).__name__} {where} {engine.status}>"

    def _raise_refusal(self) -> None:
        """After the goodbye: raise the broker's ERROR that ended the connection if no
        call raised it (:attr:`Engine.refusal`), once. It came after the last call
        returned: a message sent without a receipt that the broker refused (a full
        queue, a destination not allowed) is lost, and ``close()`` says so."""
        refusal = _untold(self._engine.refusal)
        if refusal is not None and not in_hook():  # a hook was handed it
            raise _again(refusal) from refusal

    @property
    def connected(self) -> bool:
        return self._engine.status is CONNECTED

    @property
    def failure(self) -> StompError | None:
        """The error that ended the connection, or ``None`` while it is fine or closed by us."""
        return self._engine.failure

    @property
    def version(self) -> str | None:
        """The negotiated STOMP version (``None`` before connecting)."""
        connected = self._engine.connected
        return connected.version if connected else None

    @property
    def server(self) -> str | None:
        connected = self._engine.connected
        return connected.server if connected else None

    @property
    def session(self) -> str | None:
        """The broker's session id (the CONNECTED frame's ``session`` header)."""
        connected = self._engine.connected
        return connected.session if connected else None

    @property
    def heartbeats(self) -> tuple[int, int]:
        """The negotiated ``(outgoing, incoming)`` heart-beat intervals in ms."""
        connected = self._engine.connected
        return connected.heartbeats if connected else (0, 0)


class SubscriptionBase(Generic[M]):
    """A subscription's settings and its inbox of received messages.

    It is :attr:`active` until unsubscribed or until its connection is closed (by
    ``close()`` or the end of the ``with`` block); a subscription whose connection
    failed stays active, and taking from it raises the failure once it is empty.
    """

    def __init__(
        self, engine: Engine[M], inbox: Inbox[M], telemetry: Telemetry | None = None
    ) -> None:
        self.id = inbox.id
        self.destination = inbox.destination
        self.ack = inbox.ack
        self.headers = dict(inbox.headers)
        self.max_pending = inbox.max_pending
        self.overflow = inbox.overflow
        self._engine = engine
        self._delivery = engine.delivery
        self._inbox = inbox
        self._telemetry = telemetry
        #: Whether waiting for a message goes on while the connection closes, until
        #: the goodbye ended: for the ``on_message`` dispatcher, which hands out what
        #: arrives before the DISCONNECT's receipt (with ``ack="auto"``, the broker
        #: counts it delivered). A ``get()`` returns as soon as the close begins.
        self._until_closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    @property
    def active(self) -> bool:
        return self._inbox.active

    @property
    def pending(self) -> int:
        """How many received messages wait to be taken."""
        return self._inbox.pending

    def _ended(self) -> bool:
        """With the inbox empty: ``True`` when the subscription is over (take returns
        nothing), or its connection is closing, unless :attr:`_until_closed`; raises the
        subscription's failure (:class:`SubscriptionOverflow`) or the connection's;
        ``False`` while more may come."""
        inbox = self._inbox
        if inbox.failure is not None:
            raise _again(inbox.failure) from inbox.failure
        if not inbox.active:
            return True
        engine = self._engine
        failure = engine.failure
        if failure is not None:
            raise _again(failure) from failure
        # A close() began: a get() waiting returns now rather than wait out the goodbye
        # (up to receipt_timeout on a broker that stopped answering). What still comes
        # before the DISCONNECT's receipt stays in the inbox for the next get().
        return engine.status is CLOSING and not self._until_closed

    def _received(self, message: M | None, started: int) -> M | None:
        """``message`` (if any), taken by a traced ``get()`` that began at ``started``
        (``time.time_ns()``), recorded: its ``receive`` span."""
        if message is not None:
            assert self._telemetry is not None
            self._telemetry.received(message, started)
        return message

    def _received_batch(self, batch: list[M], started: int) -> list[M]:
        """``batch``, taken by a ``get_batch()`` that began at ``started``, recorded
        when traced."""
        if self._telemetry is not None:
            self._telemetry.received_batch(batch, started)
        return batch

    def _take_more(self, batch: list[M], max_messages: int) -> bool:
        """Add to ``batch`` what has arrived, up to ``max_messages`` in all; whether the
        transport should now move the backlog."""
        inbox = self._inbox
        inbox.take_many(batch, max_messages)
        return self._delivery.wants_resume(inbox)

    @staticmethod
    def _check_batch(max_messages: int, timeout: float | None) -> float | None:
        """``get_batch()``'s arguments checked (see :mod:`stompy._checks`); the timeout."""
        check_integer("max_messages", max_messages, 1)
        return check_timeout(timeout)


class TransactionBase:
    """A transaction's id, the connection (epoch) it was begun on, and whether it ended."""

    def __init__(self, engine: Engine[Any], id: str, epoch: int) -> None:
        self.id = id
        self._epoch = epoch
        self._done = False
        #: Whether its COMMIT went and did not fail: then there is nothing to abort.
        self._committed = False
        self._engine = engine
        self._stale = engine.is_stale

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r}>"

    def _check(self) -> None:
        if self._done:
            raise LocalProtocolError(f"transaction {self.id!r} is already finished")
        if self._stale(self._epoch):
            raise TransactionLost(
                f"transaction {self.id!r} was lost with its connection; nothing in it took effect"
            )

    def _finish(self) -> bool:
        """Mark the transaction ended for an ABORT; whether one should be sent (not for
        one already ended, nor one its connection took with it). Raises
        :class:`LocalProtocolError` for one committed: an ABORT cannot undo that, and
        doing nothing would say it did (after a commit that raised, the broker may or
        may not have committed, and aborting is the caller's best guess: nothing is
        sent, nothing raised)."""
        if self._done:
            if self._committed:
                raise LocalProtocolError(
                    f"transaction {self.id!r} is already committed: abort() cannot undo it"
                )
            return False
        self._done = True
        return not self._stale(self._epoch)


def transaction_id(transaction: TransactionBase | str | None, engine: Engine[Any]) -> str | None:
    """The id to send for ``transaction`` on ``engine``'s connection; raises if that
    transaction cannot take more, :class:`LocalProtocolError` for a transaction of
    another connection (its id may name one of this connection's: the frame would go
    into that one), and :class:`TypeError` for a value neither a transaction, an id
    nor ``None``."""
    if transaction is None or type(transaction) is str:
        return transaction
    if isinstance(transaction, TransactionBase):
        if transaction._engine is not engine:
            raise LocalProtocolError(
                f"transaction {transaction.id!r} belongs to another connection: use it "
                "on the connection that began it"
            )
        transaction._check()
        return transaction.id
    if isinstance(transaction, str):
        return str(transaction)
    raise TypeError(
        "argument 'transaction' must be a transaction (conn.transaction()), its id (a "
        f"str) or None, not {type(transaction).__name__}"
    )


def check_message(message: object, cls: type[MessageBase], call: str) -> None:
    """Raise :class:`TypeError` naming ``call``'s argument unless ``message`` is a
    received message of ``cls`` (the client's own: ``Message`` or ``AsyncMessage``)."""
    if not isinstance(message, cls):
        raise TypeError(
            f"{call}() argument 'message' must be a {cls.__name__} (a received message), "
            f"not {type(message).__name__}"
        )

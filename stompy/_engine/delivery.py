"""Where a received MESSAGE goes: its subscription's inbox, the backlog, a request, or
the ``on_unrouted`` hook; and when the transport must stop reading.

Flow control: a subscription keeps at most ``max_pending`` received messages. In the
client ack modes the engine asks the broker to hold back more than that
(:func:`~stompy._engine.inbox.subscribe_headers`: a prefetch of ``max_pending``), so one
slow consumer never stops the connection. Where only the socket can pace (``auto``,
or a broker that ignores the prefetch), the inbox's ``overflow`` decides: ``"pause"``
keeps what does not fit in the :attr:`Delivery.backlog` and the transport stops
reading until the consumer catches up (a WARNING names the subscription after
:data:`STALL_WARNING` seconds); ``"fail"`` ends that subscription with
:class:`~stompy.errors.SubscriptionOverflow`.

A MESSAGE that no inbox takes is a request's reply (:mod:`stompy._engine.requests`),
one still in flight for a subscription that ended (DEBUG), or else handed to the
``on_unrouted`` hook, or logged as a WARNING: never dropped silently.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.notices import Notice, queue_notice
from stompy._engine.options import ClientOptions
from stompy._engine.requests import REPLY_QUEUE, Requests
from stompy.errors import SubscriptionOverflow

__all__ = ("STALL_WARNING", "Delivery")

log: Final = logging.getLogger("stompy")

#: Seconds a subscription may hold the connection still (its inbox full, the transport
#: not reading) before a WARNING names it.
STALL_WARNING: Final = 5.0

#: How many ended subscription ids are remembered, so that messages still in flight
#: for them are expected (DEBUG), not a surprise (WARNING).
_ENDED_IDS: Final = 256

#: A transport's message class (see :class:`~stompy._engine.engine.Engine`).
M = TypeVar("M", bound=MessageBase)


class Delivery(Generic[M]):
    """The engine's subscriptions by id, and the messages that wait for room in them.

    ``requests`` takes the replies, ``notices`` the ``on_unrouted`` hook's calls, and
    ``end_subscription(inbox)`` ends a subscription whose consumer fell too far behind
    (``overflow="fail"``): an UNSUBSCRIBE, which is the engine's to send.
    """

    __slots__ = (
        "_end_subscription",
        "_ended",
        "_notices",
        "_options",
        "_requests",
        "_stall_warned",
        "backlog",
        "delivered",
        "inboxes",
        "paused_since",
    )

    def __init__(
        self,
        options: ClientOptions,
        requests: Requests[M],
        notices: deque[Notice],
        end_subscription: Callable[[Inbox[M]], object],
    ) -> None:
        self._options = options
        self._requests = requests
        self._notices = notices
        self._end_subscription = end_subscription
        #: The open subscriptions, by id.
        self.inboxes: dict[str, Inbox[M]] = {}
        #: Messages routed so far: the last one's delivery number (``_seq``).
        self.delivered = 0
        #: Messages that arrived while their inbox (or an earlier message's) was full.
        #: While any wait here the transport stops reading: TCP pushes back on the broker.
        self.backlog: deque[M] = deque()
        #: Since when the backlog holds the connection still (``None``: it does not).
        self.paused_since: float | None = None
        self._stall_warned = False  # ... and whether the WARNING about it was logged
        #: Ids of subscriptions ended lately (oldest first): their MESSAGEs still in
        #: flight are expected.
        self._ended: dict[str, None] = {}

    # -- subscriptions ---------------------------------------------------------------------

    def add(self, inbox: Inbox[M]) -> None:
        """A subscription was made: its messages go to ``inbox``."""
        self.inboxes[inbox.id] = inbox
        self._ended.pop(inbox.id, None)

    def remove(self, inbox: Inbox[M]) -> bool:
        """The subscription of ``inbox`` ended (the inbox itself is ended by then);
        whether it was open. Its messages still in flight are dropped at DEBUG."""
        if self.inboxes.pop(inbox.id, None) is None:
            return False
        ended = self._ended
        ended[inbox.id] = None
        if len(ended) > _ENDED_IDS:
            del ended[next(iter(ended))]
        return True

    def end_all(self) -> None:
        """The engine is over: every subscription ends."""
        for inbox in self.inboxes.values():
            inbox.end()

    # -- messages --------------------------------------------------------------------------

    def route(self, message: M, epoch: int, owner: object) -> None:
        """Hand ``message`` to its inbox, or keep it in the backlog behind what waits
        there already (the order of a subscription's messages is the broker's).

        First it gets what the core's event lacks: the connection it came on
        (``epoch``: the backlog is emptied with its connection, so this stays true),
        what answers it (``owner``) and its delivery number. Here, once per message
        and not in the engine's pump: a function called this often runs specialised
        by the interpreter, while a pump called a few times for thousands of
        messages may not.
        """
        message._epoch = epoch
        message._owner = owner
        self.delivered = seq = self.delivered + 1
        message._seq = seq
        message._headers = None
        inbox = self.inboxes.get(message.subscription)
        if inbox is None:
            if message.subscription == REPLY_QUEUE:  # (_unrouted's first case, without the call)
                self._requests.reply(message)
            else:
                self._unrouted(message)
        elif self.backlog:
            self.backlog.append(message)
        elif not inbox.offer(message):
            if inbox.overflow == "fail":
                self._overflow(inbox, message)
            else:
                self.backlog.append(message)

    def _overflow(self, inbox: Inbox[M], message: M) -> None:
        """``message`` does not fit in ``inbox``, whose ``overflow`` is ``"fail"``: end
        the subscription rather than stop reading; ``message`` is dropped."""
        inbox.failure = SubscriptionOverflow(
            f"subscription {inbox.id!r} to {inbox.destination!r} was ended: its consumer "
            f"fell {inbox.max_pending} messages behind (overflow='fail'); messages after "
            "those were not kept"
        )
        log.warning("%s", inbox.failure)
        self._end_subscription(inbox)
        self._unrouted(message)

    def _unrouted(self, message: M) -> None:
        """A MESSAGE that no inbox takes: a request's reply, or else logged and dropped."""
        if message.subscription == REPLY_QUEUE:
            self._requests.reply(message)
            return
        if message.subscription in self._ended:
            # Sent before the broker had our UNSUBSCRIBE: expected, not worth a WARNING.
            log.debug(
                "dropping a MESSAGE (message-id %r) for subscription %r, which ended",
                message.message_id,
                message.subscription,
            )
            return
        hook = self._options.on_unrouted
        if hook is not None:
            log.debug("handing %s to on_unrouted: no subscription takes it", message)
            queue_notice(self._notices, "on_unrouted", hook, message)
            return
        log.warning(
            "dropping a MESSAGE (message-id %r, destination %r) for subscription %r, "
            "which this client has no open subscription for",
            message.message_id,
            message.destination,
            message.subscription,
        )

    # -- the backlog -----------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Whether the transport should stop reading until a consumer makes room."""
        return bool(self.backlog)

    def wants_resume(self, inbox: Inbox[M]) -> bool:
        """After a consumer took from ``inbox``: is it time to move the backlog?"""
        return bool(self.backlog) and inbox.resume_due()

    def drain(self, now: float, where: object) -> bool:
        """Move what now fits from the backlog to the inboxes; whether any moved.
        ``where`` is the connection's address, for the log (see :meth:`watch`)."""
        backlog = self.backlog
        if not backlog:
            return False
        moved = False
        while backlog:
            message = backlog[0]
            inbox = self.inboxes.get(message.subscription)
            if inbox is None:  # unsubscribed since it arrived
                self._unrouted(message)
            elif inbox.offer(message):
                moved = True
            elif inbox.overflow == "fail":
                self._overflow(inbox, message)
                moved = True  # its consumer must hear of it
            else:
                break
            backlog.popleft()
        if not backlog:
            self.watch(now, where)
        return moved

    def release(self, now: float, where: object) -> None:
        """The connection ended: what waits in the backlog goes to the inboxes, room or
        not. The broker redelivers the unacked messages, but auto-acked ones must not
        be dropped."""
        backlog = self.backlog
        while backlog:
            message = backlog.popleft()
            inbox = self.inboxes.get(message.subscription)
            if inbox is not None:
                inbox.keep(message)
            else:
                self._unrouted(message)
        self.watch(now, where)

    def watch(self, now: float, where: object) -> None:
        """Keep :attr:`paused_since` in step with the backlog, at ``now``; say when
        reading from ``where`` resumes after a stall that was warned about."""
        if self.backlog:
            if self.paused_since is None:
                self.paused_since = now
                self._stall_warned = False
        elif self.paused_since is not None:
            if self._stall_warned:
                log.info("reading from %s again after %.1f s", where, now - self.paused_since)
            self.paused_since = None

    def stall_deadline(self) -> float | None:
        """When a stall is to be warned about (``None``: no stall, or warned already)."""
        since = self.paused_since
        if since is None or self._stall_warned:
            return None
        return since + STALL_WARNING

    def warn_stall(self, now: float, where: object) -> None:
        """At ``now``: if the backlog has held the connection to ``where`` still for
        :data:`STALL_WARNING` seconds, name the subscription it waits for (once per
        stall)."""
        since = self.paused_since
        if since is None or self._stall_warned or now < since + STALL_WARNING:
            return
        self._stall_warned = True
        backlog = self.backlog
        inbox = self.inboxes.get(backlog[0].subscription) if backlog else None
        who = f"subscription {inbox.id!r} to {inbox.destination!r}" if inbox else "a subscription"
        log.warning(
            "%s has held the connection to %s still for %.1f s: its consumer is slower "
            "than its messages come, and every other subscription, receipt and ERROR "
            "waits behind it (see max_pending, overflow='fail' and client acks)",
            who,
            where,
            now - since,
        )

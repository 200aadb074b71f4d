"""The test broker's store: destinations and their messages, routing, redelivery and
dead letters, the counters, and the register of open client connections.

A :class:`~stompy.testing._core.connection.ClientConnection` turns frames into calls
of this store's methods (``accept``, ``subscribe``, ``acknowledged``, ...) and the
store hands messages back to connections through ``ClientConnection.deliver``; neither
reads the other's private state.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

from stompy._checks import check_type, refuse_time
from stompy._core.events import AckMode
from stompy.testing._core.connection import ClientConnection
from stompy.testing._core.destinations import (
    DESTINATION_OVERHEAD,
    Destination,
    StoredMessage,
    Subscription,
    subscription_size,
)
from stompy.testing._core.records import (
    DLQ_PREFIX,
    QUEUE_PREFIX,
    READING,
    REPLY_QUEUE_PREFIX,
    TOPIC_PREFIX,
    BrokerConfig,
    BrokerStats,
    ConnectionInfo,
    Reject,
    logger,
)

__all__ = ("MessageStore",)


class MessageStore:
    """What the connections of one broker share, and the factory of those connections."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        if config is not None:
            check_type("config", config, BrokerConfig, "a BrokerConfig or None")
        self.config = config if config is not None else BrokerConfig()
        #: Open connections by id, CLOSING ones included.
        self.connections: dict[str, ClientConnection] = {}
        self._destinations: dict[str, Destination] = {}
        #: Connections that got output since the last :meth:`pop_ready`, by id (a
        #: transport looks before it pops: most wake-ups find none); a connection
        #: whose output is taken leaves it.
        self.ready: dict[str, ClientConnection] = {}
        #: Counted as they happen; ``connections_open`` is filled in by :attr:`stats`.
        self._counters = BrokerStats()
        #: Body bytes of the queues' messages and of the topic subscriptions' backlogs.
        self._stored_bytes = 0
        #: Bytes of unfinished frames, all connections together.
        self._partial_bytes = 0
        self._token = secrets.token_hex(3)
        #: Message ids are this and a number (one f-string part less per SEND).
        self._message_prefix = f"message-{self._token}-"
        self._next_connection = 0
        self._next_message = 0
        self._next_ack = 0
        self._next_temp = 0

    # -- connections -------------------------------------------------------------------

    def open_connection(self, now: float, peer: str = "") -> ClientConnection:
        """Start serving a new client connection; ``peer`` only labels it."""
        refuse_time("now", now)
        check_type("peer", peer, str, "a str")
        self._next_connection += 1
        # The id is the CONNECTED frame's ``session`` header, as STOMP calls it.
        connection_id = f"session-{self._token}-{self._next_connection}"
        connection = ClientConnection(self, connection_id, now, peer)
        self.connections[connection_id] = connection
        self._counters.connections_opened += 1
        return connection

    def pop_ready(self) -> list[ClientConnection]:
        """Connections that got output since the last call (their writers need waking)."""
        if not self.ready:
            return []
        ready = list(self.ready.values())
        self.ready.clear()
        return ready

    def output_queued(self, connection: ClientConnection) -> None:
        """``connection`` has new output: :meth:`pop_ready` names it next."""
        self.ready[connection.id] = connection

    def forget(self, connection: ClientConnection) -> None:
        """``connection`` closed and released what it held."""
        self.connections.pop(connection.id, None)

    def record_internal_error(self) -> None:
        """Count a bug the transport caught (shown in :attr:`stats`)."""
        self._counters.internal_errors += 1

    def count_error_sent(self) -> None:
        self._counters.errors_sent += 1

    def count_heartbeat_timeout(self) -> None:
        self._counters.heartbeat_timeouts += 1

    def hold_partial(self, change: int) -> int:
        """A connection holds ``change`` more bytes of unfinished frames (fewer when
        negative); return what all of them hold now."""
        self._partial_bytes += change
        return self._partial_bytes

    def next_ack_id(self) -> str:
        """A new ack id, unique in this broker."""
        self._next_ack += 1
        return str(self._next_ack)

    def reset(self) -> None:
        """Start afresh, as a new broker would, for the next test: close every
        connection still open, then drop every stored message (what those connections
        held unacknowledged, NACKed and dead-lettered ones too) and zero the counters.

        The configuration stays; message ids go on from where they were, so an ACK
        from before cannot match a message from after.
        """
        for connection in list(self.connections.values()):
            connection.close("the broker was reset")
        self._destinations.clear()
        self._stored_bytes = 0
        self._counters = BrokerStats()

    # -- inspection --------------------------------------------------------------------

    def queue_depth(self, destination: str) -> int:
        """Messages waiting in a queue; for a topic, in its subscriptions' backlogs."""
        check_type("destination", destination, str, "a str")
        dest = self._destinations.get(destination)
        if dest is None:
            return 0
        if dest.is_topic:
            return sum(len(sub.backlog) for sub in dest.subscriptions)
        return len(dest.messages)

    def unacked_count(self, destination: str | None = None) -> int:
        """Messages delivered and not acknowledged, for one destination or all."""
        if destination is not None:
            check_type("destination", destination, str, "a str or None")
        total = 0
        for dest in self._destinations.values():
            if destination is None or dest.name == destination:
                for sub in dest.subscriptions:
                    total += len(sub.by_message_id)
        return total

    def destinations(self) -> tuple[str, ...]:
        """Names of the destinations that hold messages or subscriptions."""
        return tuple(self._destinations)

    def connection_infos(self) -> tuple[ConnectionInfo, ...]:
        return tuple(connection.info() for connection in self.connections.values())

    @property
    def stats(self) -> BrokerStats:
        """A snapshot of the counters."""
        # Those closing (their last frame queued) are over for the broker already.
        open_now = 0
        for connection in self.connections.values():
            if connection.state in READING:
                open_now += 1
        return replace(
            self._counters,
            connections_open=open_now,
            bytes_stored=self._stored_bytes,
            bytes_partial=self._partial_bytes,
        )

    # -- what a connection asks of the store -------------------------------------------

    def accept(self, message: StoredMessage) -> None:
        """Take a SEND outside a transaction: check the room it needs, then publish it.

        Raises :class:`Reject` naming the limit when it does not fit. The busiest path
        of a broker, for a queue that exists, in one function: the same checks and the
        same outcome as ``check_capacity`` then ``publish``.
        """
        destination = message.destination
        dest = self._destinations.get(destination)
        if dest is None and destination.startswith(TOPIC_PREFIX):
            # A topic nobody subscribes to: numbered and dropped, as publish() does,
            # without making its destination to forget it at once.
            if self._stored_bytes > self.config.max_stored_bytes:
                self._check_room(None, 1, 0)  # raises, naming the limit
            self._counters.messages_received += 1
            self._counters.messages_dropped += 1
            self._next_message += 1
            return
        if dest is None or dest.is_topic:
            topic = destination.startswith(TOPIC_PREFIX)
            # A new queue: the message and the destination.
            size = 0 if topic else message.size + DESTINATION_OVERHEAD
            self._check_room(None if topic else destination, 1, size)
            self.publish(message)
            return
        size = message.size
        config = self.config
        stored = self._stored_bytes + size
        if len(dest.messages) >= config.max_queue or stored > config.max_stored_bytes:
            self._check_room(destination, 1, size)  # raises, naming the limit
        self._counters.messages_received += 1
        self._next_message += 1
        message.message_id = f"{self._message_prefix}{self._next_message}"
        subs = dest.subscriptions
        if len(subs) == 1 and not dest.messages and subs[0].can_accept():
            # Straight to the one consumer, where deliver_waiting would hand it at once.
            dest.next_index = 0
            self._deliver(subs[0], message)
            return
        dest.messages.append(message)
        dest.bytes += size
        self._stored_bytes = stored
        if subs:
            self.deliver_waiting(dest)

    def check_capacity(self, sends: list[StoredMessage]) -> None:
        """Raise :class:`Reject` unless every send fits the storage bounds (a
        transaction's, before its COMMIT publishes any)."""
        counts: dict[str, int] = {}
        size = 0
        for send in sends:
            if not send.destination.startswith(TOPIC_PREFIX):
                counts[send.destination] = counts.get(send.destination, 0) + 1
                size += send.size
        for name, count in counts.items():
            self._check_room(name, count, 0)
        self._check_room(None, 0, size)

    def publish(self, message: StoredMessage) -> None:
        """Number a message that a SEND made (its transaction's COMMIT, if it had one)
        and route it."""
        self._counters.messages_received += 1
        if message.destination.startswith(REPLY_QUEUE_PREFIX) and (
            message.destination not in self._destinations
        ):
            # A temporary queue whose connection is gone: RabbitMQ drops the message.
            self._counters.messages_dropped += 1
            return
        self._next_message += 1
        message.message_id = f"{self._message_prefix}{self._next_message}"
        self._route(message)

    def subscribe(
        self,
        connection: ClientConnection,
        sub_id: str,
        destination: str,
        ack: AckMode,
        prefetch: int,
    ) -> Subscription:
        """A new subscription of ``connection`` to ``destination``. Nothing is delivered
        to it before :meth:`deliver_waiting`. Raises :class:`Reject` naming
        ``max_stored_bytes`` when the broker is full (see :func:`subscription_size`)."""
        size = subscription_size(sub_id, destination)
        if destination not in self._destinations:
            size += DESTINATION_OVERHEAD
        self._check_room(None, 0, size)
        dest = self._destination(destination)
        sub = Subscription(connection, sub_id, dest, ack, prefetch)
        dest.subscriptions.append(sub)
        self._stored_bytes += sub.size
        return sub

    def open_temp_queue(self, connection: ClientConnection, name: str) -> Subscription:
        """A new temporary queue, private to ``connection``, and its implicit ``auto``
        subscription, whose id is ``name`` (the ``/temp-queue/NAME`` it stands for)."""
        private = f"{REPLY_QUEUE_PREFIX}amq.gen-{self._token}-{self._next_temp + 1}"
        self._check_room(None, 0, subscription_size(name, private) + DESTINATION_OVERHEAD)
        self._next_temp += 1
        dest = self._destination(private)
        sub = Subscription(connection, name, dest, "auto", self.config.prefetch, temporary=True)
        dest.subscriptions.append(sub)
        self._stored_bytes += sub.size
        return sub

    def unsubscribe(self, sub: Subscription, unacked: list[StoredMessage]) -> None:
        """End ``sub``, whose connection gave back ``unacked`` (delivered, never
        acknowledged): queue messages go back to their queue, topic messages and its
        backlog are dropped; a temporary queue goes with its subscription."""
        dest = sub.destination
        index = dest.subscriptions.index(sub)
        del dest.subscriptions[index]
        # Keep the round-robin position on the subscription that was next.
        if index < dest.next_index:
            dest.next_index -= 1
        if dest.subscriptions:
            dest.next_index %= len(dest.subscriptions)
        else:
            dest.next_index = 0
        if sub.temporary:
            self._discard(dest)  # private to its connection: nobody else can read it
        self._counters.messages_dropped += len(sub.backlog)
        self._stored_bytes -= sub.backlog_bytes + sub.size
        self._unhold(unacked)  # counted again where they go
        sub.backlog.clear()
        sub.backlog_bytes = 0
        if unacked and not dest.is_topic:
            # Delivered but never acked: the client may not have processed them.
            self._requeue(dest, unacked)
            self.deliver_waiting(dest)
        else:
            self._counters.messages_dropped += len(unacked)
        self._forget_if_unused(dest)

    def acknowledged(self, sub: Subscription, messages: list[StoredMessage]) -> None:
        """``messages`` delivered to ``sub`` were acknowledged: make room."""
        self._counters.messages_acked += len(messages)
        self._unhold(messages)
        self.deliver_waiting(sub.destination)

    def _unhold(self, unacked: list[StoredMessage]) -> None:
        """Delivered and no longer held as unacknowledged (acked, or given back to be
        counted where they go)."""
        for message in unacked:
            self._stored_bytes -= message.size

    def hold(self, size: int) -> None:
        """Count ``size`` bytes a connection holds outside the store: a frame of an open
        transaction, until its COMMIT or ABORT (see :meth:`unhold`). Raises
        :class:`Reject` naming ``max_stored_bytes`` when they do not fit, as a SEND to a
        queue would."""
        self._check_room(None, 0, size)
        self._stored_bytes += size

    def unhold(self, size: int) -> None:
        """``size`` bytes counted by :meth:`hold` are no longer held."""
        self._stored_bytes -= size

    def given_back(self, sub: Subscription, messages: list[StoredMessage]) -> None:
        """``messages`` delivered to ``sub`` were NACKed: redeliver them, a queue's to
        any subscriber, a topic's to the same subscription (those that used up
        ``max_redeliveries`` go to the dead-letter queue)."""
        self._counters.messages_nacked += len(messages)
        self._unhold(messages)  # counted again where they go
        if sub.destination.is_topic:
            again = self._given_back(messages)
            size = sum(m.size for m in again)
            sub.backlog.extendleft(reversed(again))
            sub.backlog_bytes += size
            self._stored_bytes += size
        else:
            self._requeue(sub.destination, messages)
        self.deliver_waiting(sub.destination)

    def deliver_waiting(self, dest: Destination) -> None:
        """Hand waiting messages to subscriptions that can take them."""
        if dest.is_topic:
            for sub in dest.subscriptions:
                while sub.backlog and sub.can_accept():
                    message = sub.backlog.popleft()
                    sub.backlog_bytes -= message.size
                    self._stored_bytes -= message.size
                    self._deliver(sub, message)
            return
        subs = dest.subscriptions
        if len(subs) == 1:
            # One consumer, as a request queue or a reply queue mostly has: no turns.
            sub = subs[0]
            messages = dest.messages
            while messages and sub.can_accept():
                message = messages.popleft()
                dest.bytes -= message.size
                self._stored_bytes -= message.size
                dest.next_index = 0
                self._deliver(sub, message)
            return
        while dest.messages and subs:
            count = len(subs)
            chosen: Subscription | None = None
            for step in range(count):
                candidate = subs[(dest.next_index + step) % count]
                if candidate.can_accept():
                    chosen = candidate
                    dest.next_index = (dest.next_index + step + 1) % count
                    break
            if chosen is None:
                return
            message = dest.messages.popleft()
            dest.bytes -= message.size
            self._stored_bytes -= message.size
            self._deliver(chosen, message)

    # -- routing -----------------------------------------------------------------------

    def _deliver(self, sub: Subscription, message: StoredMessage) -> None:
        if message.redeliveries:
            self._counters.messages_redelivered += 1
        self._counters.messages_delivered += 1
        if sub.ack != "auto":
            # Held until acknowledged (to deliver again): counted until then.
            self._stored_bytes += message.size
        sub.connection.deliver(sub, message)

    def _destination(self, name: str) -> Destination:
        dest = self._destinations.get(name)
        if dest is None:
            dest = self._destinations[name] = Destination(name)
            self._stored_bytes += DESTINATION_OVERHEAD
        return dest

    def _forget_if_unused(self, dest: Destination) -> None:
        # Destinations are made on demand; an empty one with no subscriber is garbage,
        # so a client cycling through names cannot grow this dict.
        if (
            not dest.messages
            and not dest.subscriptions
            and self._destinations.pop(dest.name, None) is not None
        ):
            self._stored_bytes -= DESTINATION_OVERHEAD

    def _check_room(self, name: str | None, count: int, size: int) -> None:
        """Raise :class:`Reject` unless queue ``name`` takes ``count`` more messages
        and the broker ``size`` more bytes of messages (:attr:`StoredMessage.size`)."""
        config = self.config
        if name is not None:
            dest = self._destinations.get(name)
            depth = len(dest.messages) if dest is not None else 0
            if depth + count > config.max_queue:
                raise Reject(
                    f"destination {name!r} is full: it holds {depth} messages, the "
                    f"broker's max_queue limit is {config.max_queue} (raise it with "
                    "serve(max_queue=...) or stompy broker --max-queue)"
                )
        if self._stored_bytes + size > config.max_stored_bytes:
            raise Reject(
                f"the broker is full: it holds {self._stored_bytes} bytes of messages and "
                "subscriptions, "
                f"its max_stored_bytes limit is {config.max_stored_bytes} (raise it with "
                "serve(max_stored_bytes=...) or stompy broker --max-stored-bytes)"
            )

    def _route(self, message: StoredMessage) -> None:
        """Deliver ``message`` to its topic's subscribers, or store it in its queue."""
        dest = self._destination(message.destination)
        if dest.is_topic:
            if not dest.subscriptions:
                self._counters.messages_dropped += 1
                self._forget_if_unused(dest)
                return
            limit = self.config.max_stored_bytes - message.size
            for sub in dest.subscriptions:
                # Delivered to a client-ack subscription, it stays held until acked:
                # not past max_stored_bytes, however large its prefetch.
                if (
                    not sub.backlog
                    and sub.can_accept()
                    and (sub.ack == "auto" or self._stored_bytes <= limit)
                ):
                    self._deliver(sub, message)
                else:
                    self._add_backlog(sub, message)
            return
        dest.messages.append(message)
        dest.bytes += message.size
        self._stored_bytes += message.size
        self.deliver_waiting(dest)

    def _add_backlog(self, sub: Subscription, message: StoredMessage) -> None:
        """Keep a topic message for a subscription that cannot take it now; over its
        bounds, drop the oldest (this one, when the broker is full without it)."""
        size = message.size
        sub.backlog.append(message)
        sub.backlog_bytes += size
        self._stored_bytes += size
        config = self.config
        while sub.backlog:
            if len(sub.backlog) > config.max_queue:
                limit, value, flag = "max_queue", config.max_queue, "max-queue"
            elif sub.backlog_bytes > config.max_backlog_bytes:
                limit, value = "max_backlog_bytes", config.max_backlog_bytes
                flag = "max-backlog-bytes"
            elif self._stored_bytes > config.max_stored_bytes:
                limit, value = "max_stored_bytes", config.max_stored_bytes
                flag = "max-stored-bytes"
            else:
                return
            dropped = sub.backlog.popleft()
            sub.backlog_bytes -= dropped.size
            self._stored_bytes -= dropped.size
            self._counters.messages_dropped += 1
            if not sub.dropped:
                sub.dropped = True
                logger.warning(
                    "%s: the backlog of subscription %r to %r reached %s (%d): its oldest "
                    "messages are dropped for this subscriber, slower than its topic "
                    "(raise the limit with serve(%s=...) or stompy broker --%s, or consume "
                    "faster)",
                    sub.connection.id,
                    sub.id,
                    sub.destination.name,
                    limit,
                    value,
                    limit,
                    flag,
                )

    def _discard(self, dest: Destination) -> None:
        """Drop every message waiting in ``dest`` (a temporary queue going away)."""
        self._counters.messages_dropped += len(dest.messages)
        self._stored_bytes -= dest.bytes
        dest.messages.clear()
        dest.bytes = 0

    def _requeue(self, dest: Destination, messages: list[StoredMessage]) -> None:
        """Put delivered messages back at the front, in their order, for redelivery
        (those over ``max_redeliveries`` go to the dead-letter queue instead)."""
        again = self._given_back(messages)
        size = sum(m.size for m in again)
        dest.messages.extendleft(reversed(again))
        dest.bytes += size
        self._stored_bytes += size

    def _given_back(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """``messages``, delivered and given back, marked for redelivery, in order;
        those that used up ``max_redeliveries`` are dead-lettered and left out."""
        limit = self.config.max_redeliveries
        again = []
        for m in messages:
            if limit is not None and m.redeliveries >= limit:
                self._dead_letter(m)
            else:
                again.append(m.again())
        return again

    def _dead_letter_queue(self, destination: str) -> str:
        configured = self.config.dead_letter_queue
        if configured is not None:
            return configured
        if destination.startswith(DLQ_PREFIX):
            return destination  # a dead-letter queue has none of its own
        if destination.startswith(QUEUE_PREFIX):
            return DLQ_PREFIX + destination[len(QUEUE_PREFIX) :]
        return DLQ_PREFIX + destination.strip("/").replace("/", ".")

    def _dead_letter(self, message: StoredMessage) -> None:
        """Move ``message``, redelivered ``max_redeliveries`` times, to its dead-letter
        queue, with an ``original-destination`` header (as ActiveMQ marks it)."""
        name = self._dead_letter_queue(message.destination)
        dest = self._destinations.get(name)
        if name == message.destination or (
            dest is not None and not dest.is_topic and len(dest.messages) >= self.config.max_queue
        ):
            self._counters.messages_dropped += 1
            logger.warning(
                "message %s of %r used up its %d redeliveries and is dropped (%s)",
                message.message_id,
                message.destination,
                message.redeliveries,
                "it is in its dead-letter queue"
                if name == message.destination
                else f"{name!r} is full",
            )
            return
        self._counters.messages_dead_lettered += 1
        logger.info(
            "message %s of %r used up its %d redeliveries: moved to %r",
            message.message_id,
            message.destination,
            message.redeliveries,
            name,
        )
        headers = tuple(h for h in message.headers if h[0] != "original-destination")
        headers += (("original-destination", message.destination),)
        moved = StoredMessage(name, headers, message.body)
        moved.message_id = message.message_id
        self._route(moved)

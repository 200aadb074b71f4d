"""What a connection already acknowledged, so that nothing is answered twice.

A second ACK or NACK of one message is an error to every broker: ours and ActiveMQ
answer it with an ERROR, RabbitMQ with an ERROR too (an unknown delivery tag), and the
ERROR ends the connection. The client knows what it answered, so it refuses the second
answer itself (:class:`LocalProtocolError`, nothing sent) and the connection lives on.

What counts as answered, per the spec's ack modes:

* ``client-individual``: the message itself, once ACKed or NACKed.
* ``client``: "the acknowledgment operates on the message specified in the ACK frame
  and all messages sent to the subscription before the ACK'ed message", and a NACK
  "to all messages sent before and not yet ACK'ed or NACK'ed" (1.2): every message
  delivered to the subscription up to the one answered.
* In a transaction: the same, until the transaction ends. Its ABORT undoes its ACKs
  and NACKs, so the messages may be answered again; its COMMIT makes them final.

Each message carries its delivery number on its connection (``MessageBase._seq``,
set by the engine as it routes it) and, once answered, how (``_answered``). The
book holds what is not on the messages: per subscription the number up to which a
``client`` answer covered it, and what each open transaction answered. All of it is
of one connection (*epoch*): a message from an earlier one is never sent an answer.
"""

from __future__ import annotations

from stompy._core.events import MessageReceived
from stompy._engine.message import MessageBase
from stompy.errors import LocalProtocolError

__all__ = ("AckBook",)


class AckBook:
    """The answers (ACK, NACK) given on one connection: see the module docstring."""

    __slots__ = ("_through", "_transactions")

    def __init__(self) -> None:
        #: Per ``client`` subscription id: the delivery number up to which an answer
        #: outside a transaction (or a committed one) covered every message.
        self._through: dict[str, int] = {}
        #: Per open transaction: the messages it answered, in order.
        self._transactions: dict[str, list[MessageBase]] = {}

    def clear(self) -> None:
        """A new connection: nothing of the old one can be answered any more."""
        self._through.clear()
        self._transactions.clear()

    def check(self, command: str, message: MessageReceived) -> None:
        """Raise :class:`LocalProtocolError`, naming the message id, if ``message`` was
        answered already (by itself, or by a later message's cumulative answer)."""
        if not isinstance(message, MessageBase):
            return  # a bare core event (tests of the engine): nothing is known of it
        how = getattr(message, "_answered", None)
        if how is None and message.ack_mode == "client":
            how = self._covered(message)
        if how is not None:
            raise LocalProtocolError(
                f"cannot {command} message {message.message_id!r}: it was already "
                f"acknowledged ({how}), and a broker ends the connection for a second answer"
            )

    def _covered(self, message: MessageBase) -> str | None:
        """How a ``client`` message was answered by a later one's cumulative answer."""
        seq = message._seq
        sub = message.subscription
        if seq <= self._through.get(sub, 0):
            return "by an answer to a later message of its subscription, which is cumulative"
        for tx, answered in self._transactions.items():
            for other in answered:
                if other.subscription == sub and other.ack_mode == "client" and seq <= other._seq:
                    return (
                        f"in transaction {tx!r}, by an answer to a later message of its "
                        "subscription, which is cumulative"
                    )
        return None

    def answered(self, command: str, message: MessageReceived, transaction: str | None) -> None:
        """``message`` was answered with ``command`` (its frame is queued)."""
        if not isinstance(message, MessageBase):
            return
        if transaction is None:
            message._answered = command
            if message.ack_mode == "client":
                self._cover(message)
        else:
            message._answered = f"{command} in transaction {transaction!r}"
            self._transactions.setdefault(transaction, []).append(message)

    def _cover(self, message: MessageBase) -> None:
        sub = message.subscription
        if message._seq > self._through.get(sub, 0):
            self._through[sub] = message._seq

    def ended(self, command: str, transaction: str) -> None:
        """``transaction`` ended with ``command``: COMMIT makes its answers final, ABORT
        undoes them (its messages may be answered again)."""
        answered = self._transactions.pop(transaction, ())
        for message in answered:
            if command == "COMMIT":
                if message.ack_mode == "client":
                    self._cover(message)
            else:
                message._answered = None

    def forget_subscription(self, sub_id: str) -> None:
        """The subscription ended: its messages cannot be answered any more anyway."""
        self._through.pop(sub_id, None)

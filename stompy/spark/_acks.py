"""Acknowledging what a read took: one cumulative ACK per subscription."""

from __future__ import annotations

from collections.abc import Sequence

from stompy._client.blocking import Message

__all__ = ("ack_each_subscription",)


def ack_each_subscription(
    messages: Sequence[Message], *, receipt: bool = True, among: int | None = None
) -> None:
    """Acknowledge ``messages`` (oldest first) with one cumulative ACK per subscription,
    oldest subscription first, each with a receipt if ``receipt``.

    ``among``: how many subscriptions the messages can come from at most; the search
    for each one's last message, from the newest back, stops once it found that many
    (a streaming read's batch of one subscription costs one look, not one per message).

    The order matters on RabbitMQ, where a ``client`` ACK covers every earlier
    delivery of the connection: acknowledging a message already covered is an error
    there that closes the connection.
    """
    last: dict[str, int] = {}
    for position in range(len(messages) - 1, -1, -1):
        subscription = messages[position].subscription
        if subscription not in last:
            last[subscription] = position
            if len(last) == among:
                break
    for position in sorted(last.values()):
        messages[position].ack(receipt=receipt)

"""Acknowledging what a read took: one cumulative ACK per subscription."""

from __future__ import annotations

from collections.abc import Sequence

from stompy._client.blocking import Message

__all__ = ("ack_each_subscription",)


def ack_each_subscription(messages: Sequence[Message], *, receipt: bool = True) -> None:
    """Acknowledge ``messages`` (oldest first) with one cumulative ACK per subscription,
    oldest subscription first, each with a receipt if ``receipt``.

    The order matters on RabbitMQ, where a ``client`` ACK covers every earlier
    delivery of the connection: acknowledging a message already covered is an error
    there that closes the connection.
    """
    last: dict[str, tuple[int, Message]] = {}
    for position, message in enumerate(messages):
        last[message.subscription] = (position, message)
    for _, message in sorted(last.values(), key=lambda item: item[0]):
        message.ack(receipt=receipt)

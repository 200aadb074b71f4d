"""The in-process broker's temporary queues, the way RabbitMQ has them (sans-IO).

A SEND with ``reply-to:/temp-queue/NAME`` makes a queue private to the connection; the
delivered request names it as ``/reply-queue/...``; replies sent there arrive at the
requester on the implicit subscription ``/temp-queue/NAME``; it goes with the connection.
"""

from __future__ import annotations

from stompy._core.frames import Frame
from stompy.testing._core.store import MessageStore
from tests.test_broker_core import Peer, connected, make


def request(store: MessageStore, reply_to: str = "/temp-queue/r") -> tuple[Peer, Peer, Frame]:
    """A responder subscribed to /queue/svc and a requester that sent it one request."""
    responder = connected(store)
    responder.subscribe("/queue/svc", id="svc")
    requester = connected(store)
    requester.send("SEND", {"destination": "/queue/svc", "reply-to": reply_to}, b"q")
    (delivered,) = responder.frames()
    return requester, responder, delivered


def test_a_temp_queue_reply_to_is_rewritten_and_replies_arrive_on_an_implicit_subscription() -> (
    None
):
    store = make()
    requester, responder, delivered = request(store)
    reply_to = delivered.get("reply-to")
    assert reply_to is not None
    assert reply_to.startswith("/reply-queue/amq.gen-")
    responder.send("SEND", {"destination": reply_to, "correlation-id": "c1"}, b"answer")
    (reply,) = requester.frames()
    assert reply.command == "MESSAGE"
    assert reply.body == b"answer"
    assert reply.get("subscription") == "/temp-queue/r"
    assert reply.get("correlation-id") == "c1"
    assert reply.get("ack") is None  # an auto-ack subscription
    (info,) = [c for c in store.connection_infos() if c.session == requester.client.id]
    assert [(s.id, s.destination, s.ack) for s in info.subscriptions] == [
        ("/temp-queue/r", reply_to, "auto")
    ]


def test_one_temp_queue_per_connection_and_name() -> None:
    store = make()
    requester, responder, first = request(store)
    requester.send("SEND", {"destination": "/queue/svc", "reply-to": "/temp-queue/r"}, b"q2")
    requester.send("SEND", {"destination": "/queue/svc", "reply-to": "/temp-queue/s"}, b"q3")
    other = connected(store)
    other.send("SEND", {"destination": "/queue/svc", "reply-to": "/temp-queue/r"}, b"q4")
    names = [f.get("reply-to") for f in [first, *responder.frames()]]
    assert names[0] == names[1]  # the same name on the same connection: the same queue
    assert len(set(names)) == 3  # another name, another connection: another queue


def test_a_reply_to_that_names_no_temp_queue_passes_through() -> None:
    _, _, delivered = request(make(), reply_to="/queue/replies")
    assert delivered.get("reply-to") == "/queue/replies"


def test_subscribing_to_a_temporary_queue_is_refused() -> None:
    store = make()
    for destination in ("/temp-queue/r", "/reply-queue/amq.gen-1"):
        peer = connected(store)
        peer.subscribe(destination)
        assert "temporary queue" in (peer.error().get("message") or "")


def test_a_temp_queue_goes_with_its_connection() -> None:
    store = make()
    requester, responder, delivered = request(store)
    reply_to = delivered.get("reply-to")
    assert reply_to in store.destinations()
    requester.client.pause()  # a reply waits in the queue, undelivered
    responder.send("SEND", {"destination": reply_to or ""}, b"waiting")
    assert store.queue_depth(reply_to or "") == 1
    dropped = store.stats.messages_dropped
    requester.client.close()
    assert reply_to not in store.destinations()
    assert store.stats.messages_dropped == dropped + 1
    responder.send("SEND", {"destination": reply_to or "", "receipt": "r"}, b"late")
    assert [f.command for f in responder.frames()] == ["RECEIPT"]
    assert reply_to not in store.destinations()  # not made again as a plain queue
    assert store.stats.messages_dropped == dropped + 2


def test_unsubscribing_the_implicit_subscription_removes_the_temp_queue() -> None:
    store = make()
    requester, _, delivered = request(store)
    requester.send("UNSUBSCRIBE", {"id": "/temp-queue/r", "receipt": "u"})
    assert [f.command for f in requester.frames()] == ["RECEIPT"]
    assert delivered.get("reply-to") not in store.destinations()

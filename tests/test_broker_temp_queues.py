"""The in-process broker's temporary queues, the way RabbitMQ has them (sans-IO).

A SEND with ``reply-to:/temp-queue/NAME`` makes a queue private to the connection; the
delivered request names it as ``/reply-queue/...``; replies sent there arrive at the
requester on the implicit subscription ``/temp-queue/NAME``; it goes with the connection.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import VERSIONS, Frame
from stompy._core.parser import FrameParser
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


_REPLY_TOS = st.sampled_from(
    ["/temp-queue/r", "/temp-queue/s", "/temp-queue/", "/temp-queue/a:b", "/queue/plain"]
)


@given(
    sender=st.sampled_from(VERSIONS),
    receiver=st.sampled_from(VERSIONS),
    reply_tos=st.lists(_REPLY_TOS, min_size=1, max_size=2),
    before=st.lists(st.sampled_from([("x", "1"), ("correlation-id", "c:1")]), max_size=2),
    after=st.lists(st.sampled_from([("y", "2"), ("content-type", "text/plain")]), max_size=2),
    receipt=st.booleans(),
    body=st.sampled_from([b"", b"q"]),
)
def test_a_temp_queue_request_is_delivered_as_encode_writes_it_rewritten(
    sender: str,
    receiver: str,
    reply_tos: list[str],
    before: list[tuple[str, str]],
    after: list[tuple[str, str]],
    receipt: bool,
    body: bytes,
) -> None:
    """However a request names its temporary queues (one reply-to line or two, a name
    to escape, among other headers, with a receipt), the responder's MESSAGE is the
    bytes encode() makes of the SEND's user headers, each ``reply-to`` that names a
    temporary queue rewritten to its private queue when the first one names one (as
    RabbitMQ reads the header), and the requester subscribes to those alone."""
    store = make()
    responder = connected(store, receiver)
    responder.subscribe("/queue/svc", id="svc")
    responder.frames()
    requester = connected(store, sender)
    user = [*before, *(("reply-to", name) for name in reply_tos), *after]
    headers = [("destination", "/queue/svc"), *user]
    if receipt:
        headers.append(("receipt", "rq"))
    try:
        data = encode(Frame("SEND", tuple(headers), body), sender)
    except ValueError:
        return  # not a SEND this version can carry
    requester.raw(data)
    if receipt:
        assert [f.command for f in requester.frames()] == ["RECEIPT"]
    sent = [(k, v) for k, v in FrameParser(sender).parse(data)[0].headers if k in dict(user)]
    (info,) = [c for c in store.connection_infos() if c.session == requester.client.id]
    private = {s.id: s.destination for s in info.subscriptions}
    first = next(v for k, v in sent if k == "reply-to")
    named = {v for k, v in sent if k == "reply-to" and v.startswith("/temp-queue/")}
    assert set(private) == (named if first.startswith("/temp-queue/") else set())
    passed = [(k, private.get(v, v) if k == "reply-to" else v) for k, v in sent]
    output = responder.output()
    message = FrameParser(receiver).parse(output)[0]
    control = [("destination", "/queue/svc"), ("message-id", message.get("message-id") or "")]
    expected = Frame("MESSAGE", (*control, ("subscription", "svc"), *passed), body)
    assert output == responder.client._encode(expected)


def test_a_temp_queue_over_max_subscriptions_refuses_the_request() -> None:
    """The request that would open a temporary queue past ``max_subscriptions`` gets an
    ERROR naming the limit, no RECEIPT, and is not queued; the first one was."""
    store = make(max_subscriptions=1)
    requester = connected(store)
    requester.send("SEND", {"destination": "/queue/svc", "reply-to": "/temp-queue/a"}, b"1")
    requester.send(
        "SEND", {"destination": "/queue/svc", "reply-to": "/temp-queue/b", "receipt": "r"}, b"2"
    )
    error = requester.error()
    assert "max_subscriptions" in (error.get("message") or "")
    assert error.get("receipt-id") == "r"
    assert [f.command for f in requester.frames()] == []
    assert store.queue_depth("/queue/svc") == 1

"""Liberal in what is accepted from a server, where the spec allows it (issue 19).

A RECEIPT nobody asked for is logged and dropped, not a protocol error that ends the
connection: CoilMQ answers a SEND in a transaction with a RECEIPT when it arrives and
again when the transaction commits. Tested on the state machine and through the
blocking client against a raw server on the loopback interface that answers as CoilMQ
does. The raw server (``scripted``) serves the other client tests of this directory too.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import pytest

import stompy
from stompy._core.encoder import encode
from stompy._core.events import AckMode
from stompy._core.frames import Frame
from stompy._core.parser import FrameParser
from stompy.events import Connected, MessageReceived, Receipt
from stompy.testing import run_broker

#: Seconds any one step of a raw server or a client may take.
TIMEOUT = 10.0


class Peer:
    """The server's side of one connection: reads the client's frames, writes its own."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.settimeout(TIMEOUT)
        self.version = "1.2"
        self._parser = FrameParser(self.version)

    def frame(self) -> Frame:
        """The client's next frame; EOFError when it closed the connection."""
        for _ in range(10_000):  # bounded: a frame cannot take more reads than that
            frame = self._parser.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the client closed the connection")
            self._parser.feed(data)
        raise AssertionError("no whole frame in 10,000 reads")

    def send(self, command: str, *headers: tuple[str, str], body: bytes = b"") -> None:
        self.sock.sendall(encode(Frame(command, headers, body), self.version))

    def connected(self, version: str = "1.2") -> Frame:
        """Read the CONNECT, answer CONNECTED; the CONNECT frame."""
        connect = self.frame()
        assert connect.command in ("CONNECT", "STOMP"), connect
        self.send("CONNECTED", ("version", version), ("server", "raw/1.0"))
        self.version = self._parser.version = version
        return connect


@contextmanager
def serve_one(handle: Callable[[socket.socket], None], timeout: float = TIMEOUT) -> Iterator[int]:
    """Serve one connection on the loopback interface: ``handle(sock)`` runs in a thread
    for the one connection a client makes, which must come within ``timeout``. Yields
    the port; raises at the end what ``handle`` raised."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(timeout)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            sock, _ = listener.accept()
            with sock:
                handle(sock)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(timeout * 2)
        listener.close()
    assert not thread.is_alive()
    if failures:
        raise failures[0]


@contextmanager
def scripted(script: Callable[[Peer], None]) -> Iterator[str]:
    """Run ``script`` for the one connection a client makes; yield the URL to use."""
    with serve_one(lambda sock: script(Peer(sock))) as port:
        yield f"stomp://127.0.0.1:{port}/"


def coilmq(peer: Peer, log: list[tuple[str, str | None]]) -> None:
    """Answer as CoilMQ does, until DISCONNECT: a frame's receipt when it arrives, and
    for a SEND in a transaction its receipt again when the transaction commits."""
    peer.connected()
    held: dict[str, list[str]] = {}  # transaction -> receipts of its SENDs
    for _ in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        receipt = frame.get("receipt")
        log.append((frame.command, receipt))
        transaction = frame.get("transaction")
        if frame.command == "SEND" and transaction is not None and receipt is not None:
            held.setdefault(transaction, []).append(receipt)
        if frame.command == "COMMIT" and transaction is not None:
            # CoilMQ replays the transaction's frames, receipts included.
            for again in held.pop(transaction, []):
                peer.send("RECEIPT", ("receipt-id", again))
        if receipt is not None:
            peer.send("RECEIPT", ("receipt-id", receipt))
        if frame.command == "DISCONNECT":
            return
    raise AssertionError("more than 1,000 frames")


def test_a_second_receipt_for_a_transacted_send_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[str, str | None]] = []
    with (
        caplog.at_level(logging.INFO, logger="stompy"),
        scripted(lambda peer: coilmq(peer, seen)) as url,
        stompy.Connection(url, receipt_timeout=TIMEOUT) as conn,
    ):
        with conn.transaction() as tx:
            tx.send("/queue/a", "in the transaction", receipt=True)
        # The connection survived the second RECEIPT: it still confirms a send.
        conn.send("/queue/a", "after the commit", receipt=True)
        assert conn.connected
        assert conn.failure is None
    commands = [command for command, _ in seen]
    assert commands == ["BEGIN", "SEND", "COMMIT", "SEND", "DISCONNECT"]
    transacted = seen[1][1]
    assert transacted is not None
    ignored = [r for r in caplog.records if "no frame asked for" in r.getMessage()]
    assert len(ignored) == 1
    assert repr(transacted) in ignored[0].getMessage()
    assert ignored[0].levelno == logging.INFO


# -- the state machine ---------------------------------------------------------------------


def connected_protocol() -> stompy.ClientProtocol:
    proto = stompy.ClientProtocol()
    proto.connect("/")
    proto.receive_data(b"CONNECTED\nversion:1.2\n\n\x00", 0.0)
    assert isinstance(proto.next_event(), Connected)
    proto.data_to_send()
    return proto


def receipt(receipt_id: str) -> bytes:
    return encode(Frame("RECEIPT", (("receipt-id", receipt_id),)))


def test_an_unknown_receipt_is_dropped_and_the_next_frame_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proto = connected_protocol()
    sub = proto.subscribe("/queue/a")
    mine = proto.send("/queue/a", "x", receipt=True)
    assert mine is not None
    message = encode(
        Frame(
            "MESSAGE",
            (("subscription", sub), ("message-id", "m1"), ("destination", "/queue/a")),
            b"x",
        )
    )
    with caplog.at_level(logging.INFO, logger="stompy"):
        proto.receive_data(receipt("never") + receipt(mine) + receipt(mine) + message, 0.1)
        got = proto.next_event()
        assert isinstance(got, Receipt)
        assert got.receipt_id == mine
        # The second one for the same id is as unknown as one never asked for.
        assert isinstance(proto.next_event(), MessageReceived)
        assert proto.next_event() is None
    assert proto.state is stompy.State.CONNECTED
    assert proto.pending_receipts == frozenset()
    ignored = [r.getMessage() for r in caplog.records]
    assert len(ignored) == 2
    assert all("RECEIPT" in text and "no frame asked for" in text for text in ignored)
    assert "'never'" in ignored[0]


def test_an_unknown_receipt_at_the_end_is_no_event() -> None:
    proto = connected_protocol()
    proto.receive_data(receipt("r-99"), 0.1)
    assert proto.next_event() is None
    proto.receive_eof()
    closed = proto.next_event()
    assert isinstance(closed, stompy.events.ConnectionClosed)
    assert not closed.expected


def test_an_unknown_receipt_while_disconnecting_does_not_close() -> None:
    proto = connected_protocol()
    goodbye = proto.disconnect()
    assert goodbye is not None
    proto.receive_data(receipt("stray") + receipt(goodbye), 0.1)
    got = proto.next_event()
    assert isinstance(got, Receipt)
    assert got.receipt_id == goodbye
    assert proto.state is stompy.State.CLOSED


@pytest.mark.parametrize(
    ("frames", "what"),
    [
        (b"RECEIPT\n\n\x00", "without a receipt-id"),  # malformed: still refused
        (b"CONNECTED\nversion:1.2\n\n\x00", "unexpected CONNECTED"),
    ],
)
def test_what_the_spec_forbids_is_still_refused(frames: bytes, what: str) -> None:
    proto = connected_protocol()
    proto.receive_data(frames, 0.1)
    with pytest.raises(stompy.RemoteProtocolError, match=what):
        proto.next_event()
    assert proto.state is stompy.State.CLOSED


def test_a_receipt_before_connected_is_still_refused() -> None:
    proto = stompy.ClientProtocol()
    proto.connect("/")
    proto.receive_data(receipt("early"), 0.0)
    with pytest.raises(stompy.RemoteProtocolError, match="RECEIPT frame in state CONNECTING"):
        proto.next_event()


def test_the_in_process_broker_never_sends_an_unasked_receipt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The leniency is for other servers: ours answers each receipt once.
    with (
        caplog.at_level(logging.INFO, logger="stompy"),
        run_broker() as broker,
        stompy.Connection(broker.url) as conn,
    ):
        with conn.transaction() as tx:
            tx.send("/queue/once", "x", receipt=True)
        conn.send("/queue/once", "y", receipt=True)
        assert broker.queue_depth("/queue/once") == 2
    assert not [r for r in caplog.records if "no frame asked for" in r.getMessage()]


# -- issue 38: what three more brokers taught us ----------------------------------------


def connected_at(version: str) -> stompy.ClientProtocol:
    proto = stompy.ClientProtocol()
    proto.connect("/")
    proto.receive_data(f"CONNECTED\nversion:{version}\n\n\x00".encode(), 0.0)
    assert isinstance(proto.next_event(), Connected)
    proto.data_to_send()
    return proto


def message_bytes(version: str, *headers: tuple[str, str]) -> bytes:
    return encode(Frame("MESSAGE", (("destination", "/queue/a"), *headers), b"x"), version)


def without_id_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "without the message-id" in r.getMessage()]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_message_without_message_id_on_an_auto_subscription_is_delivered(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    # stompserver sends such MESSAGEs on live queues, stomp-broker-js on everything.
    proto = connected_at(version)
    sub = proto.subscribe("/queue/a")
    with caplog.at_level(logging.INFO, logger="stompy"):
        proto.receive_data(message_bytes(version, ("subscription", sub)) * 2, 0.1)
        first, second = proto.next_event(), proto.next_event()
    assert isinstance(first, MessageReceived)
    assert isinstance(second, MessageReceived)
    assert (first.subscription, first.ack_mode, first.message_id) == (sub, "auto", "")
    assert second.frame.body == b"x"
    assert proto.state is stompy.State.CONNECTED
    # Said once per connection, at WARNING, naming what was done.
    (warning,) = without_id_warnings(caplog)
    assert warning.levelno == logging.WARNING
    assert "delivered" in warning.getMessage()


@pytest.mark.parametrize(("version", "ack"), [("1.0", "client"), ("1.2", "client-individual")])
def test_a_message_without_message_id_that_an_ack_must_name_is_refused(
    version: str, ack: AckMode
) -> None:
    proto = connected_at(version)
    sub = proto.subscribe("/queue/a", ack=ack)
    proto.receive_data(message_bytes(version, ("subscription", sub), ("ack", "a-1")), 0.1)
    with pytest.raises(stompy.RemoteProtocolError) as info:
        proto.next_event()
    text = str(info.value)
    assert "without the message-id header" in text
    assert f"ack={ack!r}" in text
    assert "an ACK could not name it" in text
    assert proto.state is stompy.State.CLOSED


def test_stomp_10_two_subscriptions_to_one_destination_the_first_takes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proto = connected_at("1.0")
    first = proto.subscribe("/queue/a", ack="client")
    proto.subscribe("/queue/b")
    second = proto.subscribe("/queue/a")
    with caplog.at_level(logging.INFO, logger="stompy"):
        proto.receive_data(message_bytes("1.0", ("message-id", "m-1")) * 2, 0.1)
        routed = [proto.next_event(), proto.next_event()]
    assert all(isinstance(e, MessageReceived) and e.subscription == first for e in routed)
    (warning,) = [r for r in caplog.records if "no subscription header" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    text = warning.getMessage()
    assert repr(first) in text
    assert repr(second) in text
    assert "first made" in text


def test_stomp_10_one_subscription_to_a_destination_is_no_ambiguity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proto = connected_at("1.0")
    sub = proto.subscribe("/queue/a")
    proto.subscribe("/queue/b")
    with caplog.at_level(logging.INFO, logger="stompy"):
        proto.receive_data(message_bytes("1.0", ("message-id", "m-1")), 0.1)
        event = proto.next_event()
    assert isinstance(event, MessageReceived)
    assert event.subscription == sub
    assert not caplog.records


def stompserver(peer: Peer, version: str, seen: list[Frame]) -> None:
    """Answer as stompserver does on a live queue: MESSAGEs without message-id; record
    the client's frames until DISCONNECT (answered with its receipt)."""
    peer.connected(version)
    for _ in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        seen.append(frame)
        if frame.command == "SUBSCRIBE":
            for n in range(2):
                headers = [("destination", frame.get("destination") or "")]
                if version != "1.0":
                    headers.append(("subscription", frame.get("id") or ""))
                peer.send("MESSAGE", *headers, body=f"m{n}".encode())
        receipt = frame.get("receipt")
        if receipt is not None:
            peer.send("RECEIPT", ("receipt-id", receipt))
        if frame.command == "DISCONNECT":
            return
    raise AssertionError("more than 1,000 frames")


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_the_blocking_client_consumes_messages_without_message_id(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Frame] = []
    with (
        caplog.at_level(logging.WARNING, logger="stompy"),
        scripted(lambda peer: stompserver(peer, version, seen)) as url,
        stompy.Connection(url, versions=(version,), receipt_timeout=TIMEOUT) as conn,
    ):
        sub = conn.subscribe("/queue/live")
        texts = []
        for _ in range(2):
            msg = sub.get(TIMEOUT)
            assert msg is not None
            texts.append(msg.text)
        assert texts == ["m0", "m1"]
        sub.unsubscribe(receipt=True)
        assert conn.failure is None
    assert len(without_id_warnings(caplog)) == 1
    # The UNSUBSCRIBE named the destination as well as the id.
    (unsubscribe,) = [f for f in seen if f.command == "UNSUBSCRIBE"]
    assert unsubscribe.get("destination") == "/queue/live"
    assert unsubscribe.get("id") == sub.id


@pytest.mark.anyio
async def test_the_async_client_consumes_messages_without_message_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Frame] = []
    with (
        caplog.at_level(logging.WARNING, logger="stompy"),
        scripted(lambda peer: stompserver(peer, "1.2", seen)) as url,
    ):
        with anyio.fail_after(TIMEOUT):
            async with stompy.AsyncConnection(url, receipt_timeout=TIMEOUT) as conn:
                sub = await conn.subscribe("/queue/live")
                texts = []
                for _ in range(2):
                    msg = await sub.get(TIMEOUT)
                    assert msg is not None
                    texts.append(msg.text)
                assert texts == ["m0", "m1"]
                await sub.unsubscribe(receipt=True)
                assert conn.failure is None
    assert len(without_id_warnings(caplog)) == 1
    (unsubscribe,) = [f for f in seen if f.command == "UNSUBSCRIBE"]
    assert unsubscribe.get("destination") == "/queue/live"


def refuses_late(peer: Peer) -> None:
    """Answer a SEND's refusal late, as the DISCONNECT arrives: an ERROR, then the end."""
    peer.connected()
    for _ in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        if frame.command == "DISCONNECT":
            peer.send(
                "ERROR",
                ("message", "See below"),
                body=b"write access to /queue/locked refused\nbacktrace...\n",
            )
            return
    raise AssertionError("more than 1,000 frames")


def said_at_close(caplog: pytest.LogCaptureFixture) -> None:
    """The broker's ERROR during the close was said at INFO or above, as such."""
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    errors = [r for r in said if "write access to /queue/locked refused" in r.getMessage()]
    assert errors, [r.getMessage() for r in said]
    assert any(r.levelno == logging.WARNING and "ERROR" in r.getMessage() for r in errors)
    # Nothing blames a lost connection without naming the ERROR.
    for record in said:
        if "lost" in record.getMessage():
            assert "See below" in record.getMessage()


def test_an_error_during_close_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Logged, and raised by the end of the block (the message sent is lost)."""
    with (
        caplog.at_level(logging.DEBUG, logger="stompy"),
        scripted(refuses_late) as url,
        pytest.raises(stompy.ServerError, match="write access to /queue/locked refused"),
        stompy.Connection(url, receipt_timeout=TIMEOUT) as conn,
    ):
        conn.send("/queue/locked", "x")
    said_at_close(caplog)


@pytest.mark.anyio
async def test_an_error_during_close_is_reported_async(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="stompy"), scripted(refuses_late) as url:
        with (
            anyio.fail_after(TIMEOUT),
            pytest.raises(stompy.ServerError, match="write access to /queue/locked refused"),
        ):
            async with stompy.AsyncConnection(url, receipt_timeout=TIMEOUT) as conn:
                await conn.send("/queue/locked", "x")
    said_at_close(caplog)


def refused_connect_names_the_host(error: stompy.ServerError, host: str) -> None:
    text = str(error)
    assert error.message.startswith("CONNECT frame with unknown virtual host")
    assert f"sent host:{host!r}" in text
    assert "the host option sets it" in text


@pytest.mark.parametrize(("path", "host"), [("", "/"), ("/other", "other")])
def test_a_refused_connect_names_the_host_it_sent(path: str, host: str) -> None:
    # CoilMQ refuses STOMP 1.2's CONNECT unless host is its machine's name.
    with run_broker(virtual_hosts={"vh"}) as broker:
        conn = stompy.Connection(broker.url + path, connect_timeout=TIMEOUT)
        with pytest.raises(stompy.ServerError) as info:
            conn.connect()
        refused_connect_names_the_host(info.value, host)
        # The option it names works.
        with stompy.Connection(broker.url, host="vh", connect_timeout=TIMEOUT) as ok:
            assert ok.connected


@pytest.mark.anyio
async def test_a_refused_connect_names_the_host_it_sent_async() -> None:
    with run_broker(virtual_hosts={"vh"}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(stompy.ServerError) as info:
            async with stompy.AsyncConnection(broker.url, host="elsewhere"):
                pass
    refused_connect_names_the_host(info.value, "elsewhere")


def echoes_to_subscribers(peer: Peer) -> None:
    """Answer each SEND with a ``reply-to`` with a MESSAGE to that destination, as a
    broker without temporary queues does (CoilMQ, stompserver): only to a subscription
    to it (the reply is the request's body upper-cased); nothing without one."""
    peer.connected()
    subscriptions: dict[str, str] = {}  # destination -> id
    for n in range(1000):  # bounded: the test sends a handful of frames
        frame = peer.frame()
        if frame.command == "SUBSCRIBE":
            subscriptions[frame.get("destination") or ""] = frame.get("id") or ""
        reply_to = frame.get("reply-to")
        if frame.command == "SEND" and reply_to in subscriptions:
            peer.send(
                "MESSAGE",
                ("destination", reply_to),
                ("subscription", subscriptions[reply_to]),
                ("message-id", f"m-{n}"),
                ("correlation-id", frame.get("correlation-id") or ""),
                body=frame.body.upper(),
            )
        receipt = frame.get("receipt")
        if receipt is not None:
            peer.send("RECEIPT", ("receipt-id", receipt))
        if frame.command == "DISCONNECT":
            return
    raise AssertionError("more than 1,000 frames")


def test_request_subscribes_to_its_replies_on_a_broker_not_known_to_do_it() -> None:
    # The CONNECTED of the raw server says server:raw/1.0: no RabbitMQ.
    with (
        scripted(echoes_to_subscribers) as url,
        stompy.Connection(url, receipt_timeout=TIMEOUT) as conn,
    ):
        assert conn.request("/queue/rpc", "ping", timeout=TIMEOUT).text == "PING"
        assert conn.request("/queue/rpc", "again", timeout=TIMEOUT).text == "AGAIN"


@pytest.mark.anyio
async def test_request_subscribes_to_its_replies_on_a_broker_not_known_to_do_it_async() -> None:
    with scripted(echoes_to_subscribers) as url, anyio.fail_after(TIMEOUT):
        async with stompy.AsyncConnection(url, receipt_timeout=TIMEOUT) as conn:
            reply = await conn.request("/queue/rpc", "ping", timeout=TIMEOUT)
            assert reply.text == "PING"


def test_request_implicit_on_such_a_broker_times_out_saying_so() -> None:
    with (
        scripted(echoes_to_subscribers) as url,
        stompy.Connection(url, receipt_timeout=TIMEOUT) as conn,
        pytest.raises(stompy.RequestTimeout) as info,
    ):
        conn.request("/queue/rpc", "ping", timeout=0.2, reply_subscription="implicit")
    assert "reply_subscription='explicit'" in str(info.value)

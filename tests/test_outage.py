"""Outages give no false confirmations, the same in the blocking, asyncio and trio clients.

* ``ack(receipt=True)`` of a message from before a reconnect raises ``AckLost``: the
  broker delivers it again.
* A send with a receipt whose connection died first is sent again, marked
  ``stompy-resent``, on the next connection (seen by a raw-socket server).
* A broker that stops reading ends the connection with ``ConnectionLost`` after
  ``receipt_timeout`` (not a timeout that leaves a dead connection looking alive).
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator

import anyio
import pytest

import stompy
from stompy import Frame, FrameParser, encode
from stompy._engine.engine import MAX_OUTGOING
from stompy.errors import AckLost, ConnectionLost, StompError
from stompy.testing import Broker, run_broker
from tests.test_session import T0, establish, make_session

POLICY = stompy.Reconnect(initial_delay=0.01, max_delay=0.1, send_timeout=10.0)


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


@pytest.fixture
def broker() -> Iterator[Broker]:
    with run_broker() as running:
        yield running


# -- the engine ------------------------------------------------------------------------


def test_a_broker_that_takes_nothing_for_receipt_timeout_stopped_reading() -> None:
    session = make_session(receipt_timeout=2.0)
    establish(session)
    session.outgoing.clear()
    assert session.next_deadline(T0) is None
    session.outgoing += b"SEND\n\n\x00"
    assert session.next_deadline(T0 + 1) == T0 + 3  # counted from when it was seen
    session.wrote(T0 + 2)  # some went out: the clock starts again
    assert session.next_deadline(T0 + 2) == T0 + 4

    def nothing_waits() -> bool:
        return False

    assert session.tick(T0 + 3.9, nothing_waits).failure is None
    failure = session.tick(T0 + 4, nothing_waits).failure
    assert isinstance(failure, ConnectionLost)
    assert "stopped reading" in str(failure)
    session.outgoing.clear()
    session.wrote(T0 + 5)
    assert session.next_deadline(T0 + 5) is None


# -- acks of messages from before an outage --------------------------------------------


def test_blocking_ack_with_receipt_of_a_message_from_before_an_outage(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(broker.url, reconnect=POLICY) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        conn.send(dest, "once", receipt=True)
        before = sub.get(timeout=5)
        assert before is not None
        broker.drop_all_connections()
        conn.send(queue(), "after", receipt=True)  # waits for the reconnect
        with pytest.raises(AckLost, match="delivers it again"):
            before.ack(receipt=True)
        before.ack()  # asks for no confirmation: nothing to say
        again = sub.get(timeout=5)
        assert again is not None
        assert again.text == "once"
        assert again.redelivered
        again.ack(receipt=True)


@pytest.mark.anyio
async def test_async_ack_with_receipt_of_a_message_from_before_an_outage(broker: Broker) -> None:
    dest = queue()
    with anyio.fail_after(30):
        async with stompy.AsyncConnection(broker.url, reconnect=POLICY) as conn:
            sub = await conn.subscribe(dest, ack="client-individual")
            await conn.send(dest, "once", receipt=True)
            before = await sub.get(timeout=5)
            assert before is not None
            await anyio.to_thread.run_sync(broker.drop_all_connections)
            await conn.send(queue(), "after", receipt=True)
            with pytest.raises(AckLost, match="delivers it again"):
                await before.nack(receipt=True)
            await before.ack()
            again = await sub.get(timeout=5)
            assert again is not None
            assert again.text == "once"
            assert again.redelivered
            await again.ack(receipt=True)


# -- a send with a receipt, repeated and marked -------------------------------------------


class Peer:
    """One connection of :class:`FakeServer`, seen from the server's side."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = FrameParser("1.2")
        self.frames: list[Frame] = []

    def read(self) -> Frame:
        while True:
            frame = self.parser.next_frame()
            if frame is not None:
                self.frames.append(frame)
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the client closed the connection")
            self.parser.feed(data)

    def write(self, command: str, **headers: str) -> None:
        self.sock.sendall(encode(Frame(command, tuple(headers.items()))))

    def connected(self) -> None:
        assert self.read().command in ("CONNECT", "STOMP")
        self.write("CONNECTED", version="1.2")


Script = Callable[[Peer], None]


class FakeServer:
    """A raw STOMP server on loopback: connection ``n`` is served by ``scripts[n]``."""

    def __init__(self, scripts: list[Script]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(20)
        self.url = f"stomp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.peers: list[Peer] = []
        self.errors: list[BaseException] = []
        self._scripts = scripts
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            for script in self._scripts:
                sock, _ = self.listener.accept()
                with sock:
                    sock.settimeout(20)
                    peer = Peer(sock)
                    self.peers.append(peer)
                    script(peer)
        except BaseException as exc:  # reported by close()
            self.errors.append(exc)

    def close(self) -> None:
        self._thread.join(30)
        self.listener.close()
        assert not self._thread.is_alive()
        assert not self.errors, self.errors


def cut_before_the_receipt(peer: Peer) -> None:
    peer.connected()
    assert peer.read().command == "SEND"  # and the connection ends, without RECEIPT


def confirm_then_goodbye(peer: Peer) -> None:
    peer.connected()
    send = peer.read()
    assert send.command == "SEND"
    peer.write("RECEIPT", **{"receipt-id": send.get("receipt") or ""})
    bye = peer.read()
    assert bye.command == "DISCONNECT"
    peer.write("RECEIPT", **{"receipt-id": bye.get("receipt") or ""})


def check_the_repeat(server: FakeServer) -> None:
    first, second = (peer.frames[1] for peer in server.peers)
    assert first.body == second.body == b"important"
    assert first.get("order-id") == second.get("order-id") == "A-1"
    assert first.get("stompy-resent") is None
    assert second.get("stompy-resent") == "1"  # the consumer can tell: maybe a duplicate


def test_blocking_send_with_receipt_is_repeated_and_marked() -> None:
    server = FakeServer([cut_before_the_receipt, confirm_then_goodbye])
    try:
        with stompy.Connection(server.url, reconnect=POLICY, receipt_timeout=5) as conn:
            conn.send("/queue/orders", "important", headers={"order-id": "A-1"}, receipt=True)
    finally:
        server.close()
    check_the_repeat(server)


@pytest.mark.anyio
async def test_async_send_with_receipt_is_repeated_and_marked() -> None:
    server = FakeServer([cut_before_the_receipt, confirm_then_goodbye])
    try:
        with anyio.fail_after(30):
            async with stompy.AsyncConnection(
                server.url, reconnect=POLICY, receipt_timeout=5
            ) as conn:
                await conn.send(
                    "/queue/orders", "important", headers={"order-id": "A-1"}, receipt=True
                )
    finally:
        await anyio.to_thread.run_sync(server.close)
    check_the_repeat(server)


# -- a broker that stops reading --------------------------------------------------------

#: Enough to fill the outgoing buffer and both sockets' buffers (bounded: 64 MiB).
CHUNK = b"x" * (1024 * 1024)
CHUNKS = 64


def test_blocking_a_broker_that_stops_reading_ends_the_connection(broker: Broker) -> None:
    with stompy.Connection(broker.url, receipt_timeout=1.0) as conn:
        broker.pause()
        try:
            with pytest.raises(ConnectionLost, match="stopped reading"):
                for _ in range(CHUNKS):
                    conn.send("/queue/stuck", CHUNK)
            # The call's verdict comes first; the I/O thread ends the connection on its
            # next turn (bounded: 5 s).
            for _ in range(500):
                if not conn.connected:
                    break
                threading.Event().wait(0.01)
            assert not conn.connected
            assert isinstance(conn.failure, ConnectionLost)
            with pytest.raises(ConnectionLost):
                conn.send("/queue/stuck", "later")  # at once, not another timeout
        finally:
            broker.resume()


def test_blocking_sends_wait_for_room_even_while_a_wake_up_is_pending(broker: Broker) -> None:
    """A send that finds the I/O thread already woken still waits once the outgoing
    buffer is past its bound. Holding the connection's lock (what the I/O thread
    takes at the top of each turn) keeps the first wake-up pending; the waiting
    send lets go of it, and with the broker not reading the send fails. (The first
    send, on a connection at rest, may write through to the socket itself: then
    nothing of it is left to wake the I/O thread for.)"""
    with stompy.Connection(broker.url, receipt_timeout=1.0) as conn:
        broker.pause()
        io = conn._io
        try:
            with io.lock, pytest.raises(ConnectionLost, match="stopped reading"):
                for _ in range(CHUNKS):
                    conn.send("/queue/stuck", CHUNK)
                    assert io.wake_sent or not conn._engine.outgoing
                    assert len(conn._engine.outgoing) <= MAX_OUTGOING + 2 * len(CHUNK)
        finally:
            broker.resume()


@pytest.mark.anyio
async def test_async_a_broker_that_stops_reading_ends_the_connection(broker: Broker) -> None:
    with anyio.fail_after(30):
        async with stompy.AsyncConnection(broker.url, receipt_timeout=1.0) as conn:
            await anyio.to_thread.run_sync(broker.pause)
            try:
                with pytest.raises(ConnectionLost, match="stopped reading"):
                    for _ in range(CHUNKS):
                        await conn.send("/queue/stuck", CHUNK)
                assert not conn.connected
                assert isinstance(conn.failure, ConnectionLost)
                with pytest.raises(StompError):
                    await conn.send("/queue/stuck", "later")
            finally:
                await anyio.to_thread.run_sync(broker.resume)

"""The broker's anyio transport, over real loopback sockets, under asyncio and trio."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from stompy._core.encoder import encode
from stompy._core.frames import V10, Frame
from stompy._core.parser import FrameParser
from stompy.testing import AsyncBroker, serve
from stompy.testing import _server as server_module

pytestmark = pytest.mark.anyio


class RawClient:
    """A STOMP client written by hand: frames out, frames in, nothing checked."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.parser = FrameParser(V10)
        self.heartbeats = 0

    async def send(
        self, command: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> None:
        frame = Frame(command, tuple((headers or {}).items()), body)
        await self.stream.send(encode(frame, self.parser.version))

    async def frame(self, timeout: float = 3.0) -> Frame:
        """The next frame; fails the test after ``timeout``."""
        with anyio.fail_after(timeout):
            while True:
                frame = self.parser.next_frame()
                self.heartbeats = self.parser.heartbeats
                if frame is not None:
                    if frame.command == "CONNECTED":
                        self.parser.version = frame.get("version") or V10
                    return frame
                self.parser.feed(await self.stream.receive())

    async def eof(self, timeout: float = 3.0) -> bytes:
        """Read until the broker closes; return what came before."""
        data = b""
        with anyio.fail_after(timeout):
            while True:
                try:
                    data += await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return data

    async def connect(self, **headers: str) -> Frame:
        await self.send("CONNECT", {"accept-version": "1.2", "host": "h", **headers})
        frame = await self.frame()
        assert frame.command == "CONNECTED", frame
        return frame


@asynccontextmanager
async def client(broker: AsyncBroker, **headers: str) -> AsyncIterator[RawClient]:
    async with await anyio.connect_tcp(broker.host, broker.port) as stream:
        raw = RawClient(stream)
        if headers.pop("_raw", None) is None:
            await raw.connect(**headers)
        yield raw


async def test_serve_binds_a_real_port() -> None:
    async with serve(port=0) as broker:
        assert broker.port > 0
        assert broker.url == f"stomp://127.0.0.1:{broker.port}"
        async with client(broker, login="me") as raw:
            (info,) = broker.connections
            assert info.login == "me"
            assert info.state == "CONNECTED"
            assert info.peer.startswith("127.0.0.1:")
            await raw.send("SUBSCRIBE", {"destination": "/queue/a", "id": "1"})
            await raw.send("SEND", {"destination": "/queue/a", "receipt": "r"}, b"hi")
            frames = [await raw.frame(), await raw.frame()]
            assert {f.command for f in frames} == {"RECEIPT", "MESSAGE"}
            assert broker.stats.messages_delivered == 1
            assert broker.destinations() == ("/queue/a",)


async def test_serve_on_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        async with serve("::1", 0) as broker:
            assert broker.url == f"stomp://[::1]:{broker.port}"
            async with client(broker):
                assert broker.connections[0].peer.startswith("[::1]:")
    except OSError:
        pytest.skip("IPv6 loopback unavailable")


async def test_exceptions_in_the_block_come_out_unwrapped() -> None:
    async def body() -> None:
        async with serve() as broker, client(broker):
            raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        await body()


async def test_bad_options_are_refused_before_binding() -> None:
    with pytest.raises(ValueError, match="prefetch"):
        async with serve(prefetch=0):
            pass  # pragma: no cover


async def test_garbage_gets_error_then_close() -> None:
    async with serve() as broker, client(broker) as raw:
        await raw.stream.send(b"SEND\ndestination:/q\nreceipt:r-1\n\n\x00" + b"\x01\x02 junk\n\n")
        assert (await raw.frame()).command == "RECEIPT"
        error = await raw.frame()
        assert error.command == "ERROR"
        assert error.get("message") == "malformed frame received"
        assert await raw.eof() == b""
        await raw.stream.aclose()
        await broker.wait_until(lambda: not broker.connections)
        assert broker.stats.errors_sent == 1


async def test_error_names_the_receipt_of_the_bad_frame() -> None:
    async with serve() as broker, client(broker) as raw:
        await raw.send("UNSUBSCRIBE", {"id": "ghost", "receipt": "r-9"})
        error = await raw.frame()
        assert error.command == "ERROR"
        assert error.get("receipt-id") == "r-9"
        await raw.eof()


async def test_error_reaches_a_client_that_keeps_sending() -> None:
    # The broker half-closes and reads on, so unread input does not turn into a
    # reset that would destroy the ERROR on its way.
    async with serve() as broker, client(broker) as raw:
        await raw.stream.send(b"BOGUS\n\n\x00" + b"SEND\ndestination:/q\n\n\x00" * 2000)
        assert (await raw.frame()).command == "ERROR"
        await raw.eof()


async def test_one_bad_client_does_not_disturb_the_others() -> None:
    async with serve() as broker, client(broker) as good, client(broker) as bad:
        await good.send("SUBSCRIBE", {"destination": "/queue/a", "id": "1", "receipt": "s"})
        assert (await good.frame()).command == "RECEIPT"
        await bad.stream.send(b"\x00\xff\xfe garbage\n\n\x00")
        assert (await bad.frame()).command == "ERROR"
        async with client(broker) as producer:
            await producer.send("SEND", {"destination": "/queue/a"}, b"still fine")
            message = await good.frame()
            assert message.body == b"still fine"


async def test_silent_client_is_dropped() -> None:
    async with (
        serve(heartbeats=(50, 50)) as broker,
        client(broker, **{"heart-beat": "50,50"}) as raw,
    ):
        error = await raw.frame()
        assert error.command == "ERROR"
        assert "heart-beat timeout" in (error.get("message") or "")
        await raw.eof()
        assert broker.stats.heartbeat_timeouts == 1


async def test_heart_beats_flow_both_ways() -> None:
    async with (
        serve(heartbeats=(50, 50), heartbeat_tolerance=3.0) as broker,
        client(broker, **{"heart-beat": "50,50"}) as raw,
    ):
        with anyio.move_on_after(0.5):
            while True:  # beat every 10 ms; read whatever the broker sends
                await raw.stream.send(b"\n")
                with anyio.move_on_after(0.01):
                    raw.parser.feed(await raw.stream.receive())
        assert raw.parser.next_frame() is None
        assert raw.parser.heartbeats >= 3
        assert broker.connections[0].state == "CONNECTED"


async def test_connect_timeout() -> None:
    async with serve(connect_timeout=0.05) as broker, client(broker, _raw="1") as raw:
        error = await raw.frame()
        assert "no CONNECT frame" in (error.get("message") or "")
        await raw.eof()


async def test_disconnect_receipt_then_close() -> None:
    async with serve() as broker, client(broker) as raw:
        await raw.send("DISCONNECT", {"receipt": "bye"})
        receipt = await raw.frame()
        assert (receipt.command, receipt.get("receipt-id")) == ("RECEIPT", "bye")
        assert await raw.eof() == b""
        await raw.stream.aclose()
        await broker.wait_until(lambda: not broker.connections)


async def test_client_closing_first_ends_the_session() -> None:
    async with serve() as broker:
        async with client(broker) as raw:
            await raw.send("SUBSCRIBE", {"destination": "/queue/a", "id": "1", "ack": "client"})
            await raw.send("SEND", {"destination": "/queue/a"}, b"x")
            assert (await raw.frame()).command == "MESSAGE"
            assert broker.unacked_count("/queue/a") == 1
        await broker.wait_until(lambda: not broker.connections)
        assert broker.unacked_count() == 0
        assert broker.queue_depth("/queue/a") == 1


async def test_lingering_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "LINGER", 0.1)
    async with serve() as broker, client(broker) as raw:
        await raw.send("BEGIN", {})
        assert (await raw.frame()).command == "ERROR"
        # The client neither reads on nor closes: the broker gives up on its own.
        await broker.wait_until(lambda: not broker.connections, timeout=2.0)


async def test_pause_and_resume() -> None:
    async with (
        serve(heartbeats=(20, 20)) as broker,
        client(broker, **{"heart-beat": "0,20"}) as raw,
    ):
        session = broker.connections[0].session
        broker.pause(session)
        assert broker.connections[0].paused
        await raw.send("SUBSCRIBE", {"destination": "/queue/a", "id": "1", "receipt": "r"})
        with anyio.move_on_after(0.2):
            raw.parser.feed(await raw.stream.receive())
        assert raw.parser.heartbeats == 0  # no beats, no RECEIPT while paused
        assert raw.parser.next_frame() is None
        broker.resume()
        receipt = await raw.frame()
        assert receipt.get("receipt-id") == "r"
        with anyio.move_on_after(0.2):
            while True:
                raw.parser.feed(await raw.stream.receive())
        assert raw.parser.next_frame() is None  # counts the EOLs
        assert raw.parser.heartbeats > 0
        with pytest.raises(KeyError):
            broker.pause("no-such-session")


async def test_send_raw_reaches_the_client_as_is() -> None:
    async with serve() as broker, client(broker) as raw:
        broker.send_raw(broker.connections[0].session, b"MESSAGE\n\n\x00")
        frame = await raw.frame()
        assert frame == Frame("MESSAGE")


async def test_drop_all_connections() -> None:
    async with serve() as broker, client(broker) as first, client(broker) as second:
        await first.send("SUBSCRIBE", {"destination": "/queue/a", "id": "1", "ack": "client"})
        await second.send("SEND", {"destination": "/queue/a"}, b"x")
        assert (await first.frame()).command == "MESSAGE"
        assert await broker.drop_all_connections() == 2
        assert broker.connections == ()
        assert broker.queue_depth("/queue/a") == 1
        assert await first.eof() == b""
        assert await second.eof() == b""
        assert await broker.drop_all_connections() == 0


async def test_slow_consumer_does_not_grow_the_broker() -> None:
    count, size = 400, 64 * 1024
    async with serve(write_buffer=64 * 1024) as broker, client(broker) as slow:
        await slow.send("SUBSCRIBE", {"destination": "/queue/big", "id": "1"})
        async with client(broker) as producer:
            for _ in range(count):
                await producer.send("SEND", {"destination": "/queue/big"}, b"x" * size)
            await producer.send("DISCONNECT", {"receipt": "done"})
            assert (await producer.frame()).command == "RECEIPT"
        # The socket buffers hold a few MB; the rest waits in the queue, not in RAM
        # meant for the slow connection.
        assert broker.queue_depth("/queue/big") > 0
        received = 0
        with anyio.fail_after(20):
            while received < count:
                frame = await slow.frame()
                assert len(frame.body) == size
                received += 1
        assert broker.queue_depth("/queue/big") == 0


async def test_client_that_does_not_read_gets_backpressure() -> None:
    receipt = "r" * 2000
    frame = encode(Frame("SEND", (("destination", "/topic/none"), ("receipt", receipt))))
    chunk = frame * 20

    async def progress(broker: AsyncBroker) -> int:
        """Wait until the broker stops processing; return how many SENDs it took."""
        previous = -1
        with anyio.fail_after(20):
            while True:
                await anyio.sleep(0.15)
                current = broker.stats.messages_received
                if current == previous:
                    return current
                previous = current

    async with serve(write_buffer=4096) as broker, client(broker) as raw:

        async def flood() -> None:
            while True:
                await raw.stream.send(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(flood)
            stalled = await progress(broker)
            # The client reads nothing: the broker stopped reading from it once its
            # output for it crossed the bound, so the flood is stuck in TCP buffers.
            assert stalled > 0
            assert broker.connections[0].buffered < 4096 + len(frame)
            # Reading the receipts lets it go on.
            with anyio.move_on_after(0.3):
                while True:
                    await raw.stream.receive()
            assert broker.stats.messages_received > stalled
            tg.cancel_scope.cancel()


async def test_a_bug_ends_only_its_own_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from stompy.testing._core.connection import ClientConnection

    original = ClientConnection.receive_data

    def flaky(self: ClientConnection, data: bytes, now: float) -> None:
        if b"BUG" in data:
            raise RuntimeError("simulated bug")
        original(self, data, now)

    monkeypatch.setattr(ClientConnection, "receive_data", flaky)
    async with serve() as broker, client(broker) as good, client(broker) as victim:
        await victim.stream.send(b"BUG")
        assert await victim.eof() == b""
        await broker.wait_until(lambda: len(broker.connections) == 1)
        assert broker.stats.internal_errors == 1
        await good.send("DISCONNECT", {"receipt": "ok"})
        assert (await good.frame()).get("receipt-id") == "ok"

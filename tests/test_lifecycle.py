"""A connection's life (attempts, establishing, reconnecting, the WebSocket goodbye),
written once in :mod:`stompy._engine.lifecycle`, tested once for both drivers.

The same scenarios run twice: first sans-IO, the lifecycle driven step by step by a
scripted network with a fake clock (what each step asked for, in order); then through
the blocking and the anyio transports (asyncio and trio) against raw socket servers
of this file, where the outcome a user sees must be the same for every flavour.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

import anyio
import anyio.to_thread
import pytest

import stompy
from stompy._engine import lifecycle
from stompy._engine.engine import Engine
from stompy._engine.lifecycle import (
    DROP,
    Lifecycle,
    LinkError,
    Open,
    Pause,
    Read,
    Serve,
    Step,
    Write,
    farewell,
    why_ended,
)
from stompy._engine.options import ClientOptions
from stompy._engine.state import Status
from stompy.errors import ConnectFailed, ConnectionLost, ServerError, StompError
from stompy.protocol import Frame, FrameParser, encode
from tests.test_session import T0, Delivered, connected, establish, make_session, receipt

TIMEOUT = 10.0
QUICK = stompy.Reconnect(max_attempts=3, initial_delay=0.05, jitter=0.0)

# -- sans-IO: a scripted network and a fake clock --------------------------------------


class Net:
    """The network a lifecycle's steps meet: each connection made takes the next of
    ``plan`` ("refuse", "silent": accepted, never answers, "connected"); each
    connection served ends with the next of ``losses``. ``now`` is the fake clock."""

    def __init__(self, plan: list[str], losses: list[StompError | None] | None = None) -> None:
        self.plan = plan
        self.losses = list(losses or [])
        self.now = T0
        self.current = ""
        self.steps: list[str] = []
        #: Called with each step before it runs (a test closes the session there).
        self.before: Callable[[Step], None] = lambda step: None

    def run(self, step: Step) -> object:
        """Run ``step``: its result, or raise the :class:`LinkError` it failed with."""
        self.steps.append(self.describe(step))
        self.before(step)
        if isinstance(step, Open):
            self.current = self.plan.pop(0)
            if self.current == "refuse":
                raise LinkError("[Errno 111] Connection refused")
        elif isinstance(step, Read):
            if self.current == "silent":
                self.now = step.deadline
                raise LinkError("timed out", timed_out=True)
            self.current = "served"
            return connected()
        elif isinstance(step, Pause):
            self.now = step.deadline
        elif isinstance(step, Serve):
            self.now += 1.0
            return self.losses.pop(0)
        return None

    def describe(self, step: Step) -> str:
        if isinstance(step, (Open, Read, Pause)):
            return f"{type(step).__name__.lower()} +{step.deadline - self.now:g}"
        if isinstance(step, Write):
            command = step.data.split(b"\n", 1)[0]
            return f"write {command.decode()}"
        if isinstance(step, Serve):
            return "serve"
        return step.value


def drive(life: Lifecycle[Delivered], net: Net) -> None:
    """Run ``life``'s steps on ``net`` until it is over (a bounded number of them)."""
    step = life.resume(net.now)
    for _ in range(200):
        if step is None:
            return
        try:
            result = net.run(step)
        except LinkError as exc:
            step = life.failed(net.now, exc)
        else:
            step = life.resume(net.now, result)
    raise AssertionError(f"no end after 200 steps: {net.steps[-5:]}")


def test_refused_tries_each_round_and_says_why() -> None:
    session = make_session(reconnect=stompy.Reconnect(max_attempts=2, initial_delay=1.0, jitter=0))
    net = Net(["refuse", "refuse"])
    with pytest.raises(ConnectFailed, match=r"cannot connect to .*Connection refused"):
        drive(Lifecycle(session), net)
    # The first round at once, the second after its delay; nothing is left open.
    assert net.steps == ["open +10", "drop", "pause +1", "open +10", "drop"]
    assert session.status is Status.NEW


def test_no_connected_within_the_connect_timeout() -> None:
    session = make_session(connect_timeout=2.0)
    net = Net(["silent"])
    with pytest.raises(ConnectFailed, match="within the connect timeout"):
        drive(Lifecycle(session), net)
    assert net.steps == ["open +2", "write CONNECT", "read +2", "drop"]
    assert net.now == T0 + 2.0


def test_reconnect_after_a_drop_hangs_up_first_and_serves_again() -> None:
    session = make_session(reconnect=stompy.Reconnect(initial_delay=0.5, jitter=0.0))
    net = Net(["connected", "refuse", "connected"], [ConnectionLost("dropped"), None])
    drive(Lifecycle(session), net)
    assert net.steps == [
        "open +10",
        "write CONNECT",
        "read +10",
        "serve",
        "hang up",  # before the verdict: the lost link is closed first
        "changed",  # reconnecting: every wait wakes
        "open +10",  # the first attempt at once
        "drop",
        "pause +0.5",  # the next round, after its delay
        "open +10",
        "write CONNECT",
        "read +10",
        "serve",
        "hang up",  # closed by the user (serve gave None): the life is over
    ]
    assert session.epoch == 3  # two connections installed, one lost in between


def test_a_lost_connection_without_reconnect_fails_the_session() -> None:
    session = make_session()
    net = Net(["connected"], [ConnectionLost("dropped")])
    drive(Lifecycle(session), net)
    assert net.steps[-3:] == ["serve", "hang up", "changed"]
    assert session.status is Status.CLOSED
    assert isinstance(session.failure, ConnectionLost)


def test_close_during_a_delay_ends_the_attempts_without_a_verdict() -> None:
    policy = stompy.Reconnect(initial_delay=30.0, max_delay=30.0, jitter=0.0)
    session = make_session(reconnect=policy)
    net = Net(["connected", "refuse"], [ConnectionLost("dropped")])

    def close_at_the_pause(step: Step) -> None:
        if isinstance(step, Pause):
            session.begin_close()
            session.closed()

    net.before = close_at_the_pause
    drive(Lifecycle(session), net)
    assert net.steps[-2:] == ["drop", "pause +30"]  # no attempt after it
    assert session.failure is None  # closed by the user: not given up


def test_an_early_wake_up_does_not_cut_a_delay_short() -> None:
    """Only a status change ends a delay: another wake-up asks for the rest of it."""
    session = make_session(reconnect=stompy.Reconnect(initial_delay=1.0, jitter=0.0))
    life = Lifecycle(session)
    net = Net(["refuse"])
    step = life.resume(net.now)
    assert isinstance(step, Open)
    step = life.failed(net.now, LinkError("refused"))
    assert step is DROP
    step = life.resume(net.now)
    assert isinstance(step, Pause)
    until = step.deadline
    step = life.resume(net.now + 0.4)  # woken early (another thread's notify)
    assert isinstance(step, Pause)
    assert step.deadline == until
    assert isinstance(life.resume(until), Open)


@pytest.mark.parametrize("first", [True, False], ids=["connect", "reconnect"])
def test_close_during_establish_drops_the_new_connection(first: bool) -> None:
    session = make_session(reconnect=stompy.Reconnect(initial_delay=0.1, jitter=0.0))
    plan = ["connected"] if first else ["connected", "connected"]
    net = Net(list(plan), [ConnectionLost("dropped")])
    reads = 0

    def close_at_the_last_read(step: Step) -> None:
        nonlocal reads
        if isinstance(step, Read):
            reads += 1
            if reads == len(plan):
                session.begin_close()
                session.closed()

    net.before = close_at_the_last_read
    if first:
        with pytest.raises(ConnectFailed, match="closed before it was made"):
            drive(Lifecycle(session), net)
    else:
        drive(Lifecycle(session), net)
    # CONNECTED came, but the session no longer wants it: dropped, never served.
    assert net.steps[-2:] == ["read +10", "drop"]
    assert net.steps.count("serve") == (0 if first else 1)
    assert session.status is Status.CLOSED


def test_the_websocket_goodbye_is_a_close_frame_unless_bytes_are_unwritten() -> None:
    session = make_session()
    assert farewell(session) == b""  # plain STOMP: nothing to say
    wsproto = pytest.importorskip("wsproto")
    from wsproto.events import AcceptConnection

    ws_session = Engine(ClientOptions("ws://127.0.0.1:61614/stomp"), Delivered)
    handshake = ws_session.handshake(ws_session.options.endpoints[0])
    server = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    server.receive_data(handshake.first)
    next(server.events())
    handshake.receive(server.send(AcceptConnection(subprotocol="v12.stomp")), T0)
    assert handshake.ws is not None
    assert handshake.ws.open
    ws_session.ws = handshake.ws
    ws_session.outgoing += b"half a frame"
    assert farewell(ws_session) == b""  # it would corrupt the frame being written
    ws_session.outgoing.clear()
    assert farewell(ws_session)[:1] == b"\x88"  # a WebSocket close frame


def test_why_a_connection_ended_after_a_pump() -> None:
    """One rule for both transports' pumps (and the anyio timer's, which did not name
    the unwritten bytes, and its reader, which waited for the end of the stream after
    the DISCONNECT's receipt)."""
    session = make_session()
    establish(session)
    assert why_ended(session, None, 0) is None  # nothing happened: it goes on
    server_error = ServerError("refused", None)
    assert why_ended(session, server_error, 0) is server_error
    lost = why_ended(session, ConnectionLost("reset"), 2 * 1024 * 1024)
    assert isinstance(lost, ConnectionLost)
    assert "2097152 bytes were still to be written" in str(lost)
    rid = session.begin_close()  # DISCONNECT, and its receipt: the core is closed
    assert rid is not None
    session.flush(T0)
    session.outgoing.clear()
    session.receive(receipt(rid), T0)
    assert session.pump(T0).failure is None
    closed = why_ended(session, None, 0)
    assert isinstance(closed, ConnectionLost)
    assert str(closed) == "closed"


def test_an_io_error_is_taken_in_the_transports_words() -> None:
    cause = ConnectionRefusedError(111, "Connection refused")
    error = lifecycle.link_error(cause)
    assert (str(error), error.timed_out, error.__cause__) == (str(cause), False, cause)
    assert lifecycle.link_error(TimeoutError("timed out"), "slow").timed_out


# -- the same through the transports ----------------------------------------------------

FLAVOURS = ["blocking", "asyncio", "trio"]


def read_frame(sock: socket.socket, buffer: bytearray) -> Frame | None:
    """The next frame the client sent (``None`` at its end of stream)."""
    parser = FrameParser("1.2")
    while True:
        frames = parser.parse(bytes(buffer))
        buffer.clear()
        if frames:
            return frames[0]
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data


def answer_connect(sock: socket.socket, buffer: bytearray, delay: float = 0.0) -> None:
    frame = read_frame(sock, buffer)
    assert frame is not None
    assert frame.command in ("CONNECT", "STOMP")
    time.sleep(delay)
    sock.sendall(encode(Frame("CONNECTED", (("version", "1.2"), ("heart-beat", "0,0")))))


def serve_until_goodbye(sock: socket.socket, buffer: bytearray) -> None:
    """Answer the client's DISCONNECT, read until it closes."""
    while (frame := read_frame(sock, buffer)) is not None:
        receipt = frame.get("receipt")
        if frame.command == "DISCONNECT" and receipt is not None:
            sock.sendall(encode(Frame("RECEIPT", (("receipt-id", receipt),))))


def drop(sock: socket.socket, buffer: bytearray) -> None:
    answer_connect(sock, buffer)


def hold(sock: socket.socket, buffer: bytearray) -> None:
    """Take the CONNECT, never answer; until the client goes."""
    while read_frame(sock, buffer) is not None:
        pass


def stay(sock: socket.socket, buffer: bytearray) -> None:
    answer_connect(sock, buffer)
    serve_until_goodbye(sock, buffer)


@contextlib.contextmanager
def raw_server(*scripts: Callable[[socket.socket, bytearray], None]) -> Iterator[str]:
    """A STOMP server that runs the next of ``scripts`` for each connection; yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    handlers: list[threading.Thread] = []

    def handle(sock: socket.socket, script: Callable[[socket.socket, bytearray], None]) -> None:
        with sock, contextlib.suppress(OSError, AssertionError):
            sock.settimeout(TIMEOUT)
            script(sock, bytearray())

    def accept() -> None:
        pending = list(scripts)
        while not stop.is_set() and pending:
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=handle, args=(sock, pending.pop(0)), daemon=True)
            handlers.append(thread)
            thread.start()
        listener.close()  # every script ran: connections from now on are refused

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"stomp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join(TIMEOUT)
        for thread in handlers:
            thread.join(TIMEOUT)
        listener.close()


def run(flavour: str, url: str, scenario: str, **options: object) -> object:
    """Connect to ``url`` with ``flavour``'s client and play ``scenario``; what came of it
    (the error the connect raised, or what the scenario returns)."""
    lost = threading.Event()
    options.setdefault("on_disconnected", lambda error: lost.set())
    if flavour == "blocking":
        return _run_blocking(url, scenario, lost, options)

    async def main() -> object:
        with anyio.fail_after(TIMEOUT * 2):
            return await _run_async(url, scenario, lost, options)

    return anyio.run(main, backend=flavour)


def _run_blocking(url: str, scenario: str, lost: threading.Event, options: dict) -> object:  # type: ignore[type-arg]
    conn = stompy.Connection(url, **options)
    if scenario == "close while connecting":
        closer = threading.Timer(0.3, conn.close)
        closer.start()
        try:
            conn.connect()
        except StompError as exc:
            return exc
        finally:
            closer.join(TIMEOUT)
        conn.close()
        return "connected"
    try:
        conn.connect()
    except StompError as exc:
        return exc
    try:
        if scenario == "reconnect":
            assert lost.wait(TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            while not conn.connected and time.monotonic() < deadline:
                time.sleep(0.01)
            return conn.connected
        assert lost.wait(TIMEOUT)
        time.sleep(0.2)  # the reconnect's delay, or its establishing, is under way
        started = time.monotonic()
        conn.close()
        return time.monotonic() - started
    except StompError as exc:  # close() raises the broker's ERROR no call raised
        return exc
    finally:
        conn.close()


async def _run_async(url: str, scenario: str, lost: threading.Event, options: dict) -> object:  # type: ignore[type-arg]
    conn = stompy.AsyncConnection(url, **options)
    if scenario == "close while connecting":
        async with anyio.create_task_group() as tg:

            async def closer() -> None:
                await anyio.sleep(0.3)
                await conn.close()

            tg.start_soon(closer)
            try:
                async with conn:
                    return "connected"
            except StompError as exc:
                return exc
    try:
        async with conn:
            await anyio.to_thread.run_sync(lost.wait, TIMEOUT)
            if scenario == "reconnect":
                with anyio.move_on_after(TIMEOUT):
                    while not conn.connected:
                        await anyio.sleep(0.01)
                return conn.connected
            await anyio.sleep(0.2)
            started = time.monotonic()
            await conn.close()
            return time.monotonic() - started
    except StompError as exc:
        return exc


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_refused(flavour: str) -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"stomp://127.0.0.1:{bound.getsockname()[1]}"
        outcome = run(flavour, url, "connect", connect_timeout=5)
    assert isinstance(outcome, ConnectFailed)
    assert "Connection refused" in str(outcome)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_no_connected_within_the_connect_timeout(flavour: str) -> None:
    with raw_server(hold) as url:
        started = time.monotonic()
        outcome = run(flavour, url, "connect", connect_timeout=0.3)
    assert isinstance(outcome, ConnectFailed)
    assert "no CONNECTED from stomp://127.0.0.1" in str(outcome)
    assert "within the connect timeout" in str(outcome)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_reconnect_after_a_drop(flavour: str) -> None:
    with raw_server(drop, stay) as url:
        assert run(flavour, url, "reconnect", reconnect=QUICK) is True


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_close_during_a_delay(flavour: str) -> None:
    slow = stompy.Reconnect(initial_delay=30.0, max_delay=30.0, jitter=0.0)
    with raw_server(drop) as url:
        took = run(flavour, url, "close after the loss", reconnect=slow)
    assert isinstance(took, float)
    assert took < 3.0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_close_during_a_reconnects_establish(flavour: str) -> None:
    """close() ends an establishing under way at once, not at the connect timeout."""
    with raw_server(drop, hold) as url:
        took = run(flavour, url, "close after the loss", reconnect=QUICK, connect_timeout=20)
    assert isinstance(took, float)
    assert took < 3.0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_close_during_the_first_establish(flavour: str) -> None:
    """A close that came while connecting is not undone by the CONNECTED that follows."""

    def late(sock: socket.socket, buffer: bytearray) -> None:
        answer_connect(sock, buffer, delay=1.0)
        serve_until_goodbye(sock, buffer)

    with raw_server(late) as url:
        outcome = run(flavour, url, "close while connecting", connect_timeout=5)
    assert isinstance(outcome, ConnectFailed)
    assert "closed before it was made" in str(outcome)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_close_cuts_the_first_establish_short(flavour: str) -> None:
    """A close while the first connection waits for CONNECTED ends the wait at once, in
    every flavour: the connect raises why, not at the connect timeout."""
    with raw_server(hold) as url:
        started = time.monotonic()
        outcome = run(flavour, url, "close while connecting", connect_timeout=20)
        took = time.monotonic() - started
    assert isinstance(outcome, ConnectFailed)
    assert "closed before it was made" in str(outcome)
    assert took < 3.0


@contextlib.contextmanager
def unanswered_syn() -> Iterator[str]:
    """A URL whose TCP connect hangs, as behind a firewall that drops SYNs: a listener
    on the loopback interface whose accept queue is full (Linux then drops the SYNs of
    new connections). Yields the URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)  # the handshakes the queue takes are done
        with socket.socket() as probe:
            probe.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                probe.connect(("127.0.0.1", port))
                pytest.skip("the accept queue takes more connections here: no SYN is dropped")
        yield f"stomp://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a full accept queue drops SYNs")
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_close_cuts_a_hanging_tcp_connect_short(flavour: str) -> None:
    """A close while the first connection's TCP connect hangs ends it at once too."""
    with unanswered_syn() as url:
        started = time.monotonic()
        outcome = run(flavour, url, "close while connecting", connect_timeout=20)
        took = time.monotonic() - started
    assert isinstance(outcome, ConnectFailed)
    assert "closed before it was made" in str(outcome)
    assert took < 3.0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_transport_websocket_goodbye_after_a_loss(flavour: str) -> None:
    """The broker's ERROR ends the connection: the client closes its WebSocket with a
    close frame, not by dropping the socket."""
    wsproto = pytest.importorskip("wsproto")
    from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request

    heard: list[object] = []

    def ws_error(sock: socket.socket, buffer: bytearray) -> None:
        ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        sent_error = False
        while True:
            data = sock.recv(65536)
            if not data:
                return
            ws.receive_data(data)
            for event in ws.events():
                heard.append(type(event).__name__)
                if isinstance(event, Request):
                    sock.sendall(ws.send(AcceptConnection(subprotocol="v12.stomp")))
                elif isinstance(event, BytesMessage) and not sent_error:
                    sent_error = True
                    connected = encode(Frame("CONNECTED", (("version", "1.2"),)))
                    error = encode(Frame("ERROR", (("message", "go away"),)))
                    sock.sendall(ws.send(BytesMessage(data=connected)))
                    sock.sendall(ws.send(BytesMessage(data=error)))
                elif isinstance(event, CloseConnection):
                    return

    with raw_server(ws_error) as url:
        ws_url = url.replace("stomp://", "ws://") + "/stomp"
        outcome = run(flavour, ws_url, "close after the loss")
    # close() says why the connection ended, which no call had raised.
    assert isinstance(outcome, ServerError), outcome
    assert str(outcome) == "go away"
    assert heard[-1] == "CloseConnection"

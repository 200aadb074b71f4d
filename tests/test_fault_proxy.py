"""``stompy.testing.FaultProxy``: each fault, shown with a real client and the in-process broker.

Timing is asserted only as generous lower bounds ("a 0.3 s stall delayed delivery by at
least 0.25 s"): the proxy may be late on a busy machine, never early.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from importlib.metadata import entry_points
from pathlib import Path

import anyio
import pytest

import stompy
from stompy.errors import (
    ConfigurationError,
    ConnectFailed,
    ConnectionLost,
    HeartbeatTimeout,
    ProtocolError,
    ServerError,
)
from stompy.testing import (
    AsyncFaultProxy,
    Broker,
    FaultProxy,
    ProxyStats,
    fault_proxy,
    run_broker,
    run_fault_proxy,
    serve,
)
from stompy.testing._proxy import CHUNK, QUEUED_CHUNKS

#: Reconnect quickly: the tests cut connections on purpose.
QUICK = stompy.Reconnect(initial_delay=0.05, max_delay=0.2, send_timeout=10)


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def proxy(stomp_fault_proxy: FaultProxy) -> FaultProxy:
    return stomp_fault_proxy


# -- plumbing -------------------------------------------------------------------------------


def test_relays_a_session_and_counts(proxy: FaultProxy, stomp_broker: Broker) -> None:
    dest = queue()
    assert proxy.port != 0
    assert proxy.url == f"stomp://127.0.0.1:{proxy.port}"
    assert (
        repr(proxy) == f"<stompy.testing.FaultProxy 127.0.0.1:{proxy.port} -> {stomp_broker.url}>"
    )
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        conn.send(dest, "through the proxy", receipt=True)
        message = sub.get(timeout=5)
        assert message is not None
        assert message.text == "through the proxy"
        (info,) = proxy.connections
        assert info.id == 1
        assert info.client.startswith("127.0.0.1:")
        assert info.bytes_upstream > 0
        assert info.bytes_downstream > 0
    # The DISCONNECT and its receipt passed, then both half-closes: nobody is left.
    proxy.wait_until(lambda: not proxy.connections)
    stomp_broker.wait_until(lambda: not stomp_broker.connections)
    stats = proxy.stats
    assert stats.connections_accepted == 1
    assert stats.bytes_upstream > info.bytes_upstream  # UNSUBSCRIBE, DISCONNECT came after
    assert stats.bytes_downstream > info.bytes_downstream  # the DISCONNECT receipt
    assert (stats.connections_cut, stats.faults_injected, stats.target_failures) == (0, 0, 0)


def test_url_keeps_login_passcode_and_vhost() -> None:
    target = "stomp://app:p%40ss@127.0.0.1:1/my%2Fvhost"
    with run_fault_proxy(target) as proxy:
        assert proxy.url == f"stomp://app:p%40ss@127.0.0.1:{proxy.port}/my%2Fvhost"
        assert "p%40ss" not in repr(proxy)
    with run_fault_proxy("ws://127.0.0.1:1/ws?x=1") as proxy:
        assert proxy.url == f"ws://127.0.0.1:{proxy.port}/ws?x=1"


@pytest.mark.parametrize(
    "target",
    ["http://127.0.0.1:1", "stomp://127.0.0.1:1,stomp://127.0.0.1:2", "stomp://:1", "", 61613],
)
def test_bad_targets_are_configuration_errors(target: object) -> None:
    with pytest.raises(ConfigurationError):
        with run_fault_proxy(target):  # type: ignore[arg-type]
            pass  # pragma: no cover


def test_bad_fault_arguments_are_configuration_errors(proxy: FaultProxy) -> None:
    bad: list[Callable[[], None]] = [
        lambda: proxy.stall(-1),
        lambda: proxy.stall(float("nan")),
        lambda: proxy.stall(1, "sideways"),  # type: ignore[arg-type]
        lambda: proxy.delay(True),
        lambda: proxy.delay(0.1, after=-1),
        lambda: proxy.throttle(0),
        lambda: proxy.throttle(1.5),  # type: ignore[arg-type]
        lambda: proxy.refuse(mode="slam"),  # type: ignore[arg-type]
        lambda: proxy.corrupt(offset=-1),
        lambda: proxy.cut_mid_frame("up"),  # type: ignore[arg-type]
        lambda: proxy.cut(0),
        lambda: proxy.cut(99),  # no such connection open
    ]
    for call in bad:
        with pytest.raises(ConfigurationError):
            call()
    assert proxy.stats == ProxyStats()  # nothing took effect
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        with run_fault_proxy(proxy.url, connect_timeout=0):
            pass  # pragma: no cover


def test_unreachable_target_fails_the_connect() -> None:
    with run_fault_proxy(f"stomp://127.0.0.1:{free_port()}") as proxy:
        with pytest.raises(ConnectFailed):
            stompy.Connection(proxy.url, connect_timeout=5).connect()
        assert proxy.stats.target_failures == 1
        assert proxy.connections == ()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_runs_in_a_thread_and_leaves_nothing(backend: str) -> None:
    before = set(threading.enumerate())
    with run_broker() as broker:
        with run_fault_proxy(broker.url, backend=backend) as proxy:
            conn = stompy.Connection(proxy.url)
            conn.connect()
            proxy.wait_until(lambda: len(proxy.connections) == 1)
            proxy.stall()
        # Closing the proxy closed the stalled connection: the client learns of it.
        with pytest.raises(ConnectionLost):
            conn.send("/queue/x", "y", receipt=True)
        conn.close()
        broker.wait_until(lambda: not broker.connections)
    assert set(threading.enumerate()) <= before  # every thread it started ended


def test_wait_until_times_out(proxy: FaultProxy) -> None:
    with pytest.raises(TimeoutError):
        proxy.wait_until(lambda: False, timeout=0.05)


# -- cut --------------------------------------------------------------------------------------


def test_cut_without_reconnect_is_connection_lost(proxy: FaultProxy) -> None:
    with stompy.Connection(proxy.url) as conn:
        sub = conn.subscribe(queue())
        proxy.cut()
        with pytest.raises(ConnectionLost):
            sub.get(timeout=5)
    stats = proxy.stats
    assert (stats.connections_cut, stats.faults_injected) == (1, 1)
    assert proxy.connections == ()


def test_cut_with_reconnect_goes_on(proxy: FaultProxy, stomp_broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(proxy.url, reconnect=QUICK) as conn:
        sub = conn.subscribe(dest)
        proxy.cut()
        conn.send(dest, "after the cut", receipt=True)  # waits for the reconnect
        message = sub.get(timeout=5)
        assert message is not None
        assert message.text == "after the cut"
    assert proxy.stats.connections_accepted == 2
    assert proxy.stats.connections_cut == 1


def test_cut_one_connection_by_id(proxy: FaultProxy) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as first, stompy.Connection(proxy.url) as second:
        proxy.wait_until(lambda: len(proxy.connections) == 2)
        victim, survivor = proxy.connections
        proxy.cut(victim.id)
        assert [c.id for c in proxy.connections] == [survivor.id]
        with pytest.raises(ConnectionLost):
            first.send(dest, "x", receipt=True)
        second.send(dest, "still here", receipt=True)


def test_cut_mid_frame_then_the_message_is_redelivered_whole(
    proxy: FaultProxy, stomp_broker: Broker
) -> None:
    dest = queue()
    body = "x" * 5000
    with stompy.Connection(proxy.url, reconnect=QUICK) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        proxy.cut_mid_frame("downstream", keep=20)
        stompy.send(stomp_broker.url, dest, body)  # straight to the broker
        # The first 20 bytes of the MESSAGE went through, then the connection ended;
        # the broker takes the unacked message back and delivers it again, whole.
        message = sub.get(timeout=10)
        assert message is not None
        assert message.text == body
        assert message.redelivered
        message.ack(receipt=True)
    stats = proxy.stats
    assert (stats.connections_cut, stats.faults_injected, stats.connections_accepted) == (1, 1, 2)


def test_cut_mid_frame_upstream_without_reconnect(proxy: FaultProxy) -> None:
    with stompy.Connection(proxy.url) as conn:
        proxy.cut_mid_frame("upstream", keep=3)
        with pytest.raises(ConnectionLost):
            conn.send(queue(), "never arrives", receipt=True)


def test_scheduled_cut_fires_later(proxy: FaultProxy) -> None:
    with stompy.Connection(proxy.url) as conn:
        sub = conn.subscribe(queue())
        started = time.monotonic()
        proxy.cut(after=0.3)
        assert proxy.stats.connections_cut == 0
        with pytest.raises(ConnectionLost):
            sub.get(timeout=10)
        assert time.monotonic() - started >= 0.25
    assert proxy.stats.connections_cut == 1


def test_reset_cancels_scheduled_faults(proxy: FaultProxy) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        proxy.cut(after=0.2)
        proxy.cut(1, after=0.2)
        proxy.stall(after=0.2)
        proxy.refuse(after=0.2)
        proxy.reset()
        time.sleep(0.4)  # past the moment they would have fired
        conn.send(dest, "unharmed", receipt=True)
        message = sub.get(timeout=5)
        assert message is not None
    stats = proxy.stats
    assert (stats.connections_cut, stats.faults_injected) == (0, 0)


# -- corrupt ------------------------------------------------------------------------------


def test_corrupt_downstream_is_a_protocol_error(proxy: FaultProxy, stomp_broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as conn:
        sub = conn.subscribe(dest)
        proxy.corrupt("downstream", offset=1)  # "MESSAGE" loses its second letter
        stompy.send(stomp_broker.url, dest, "x")
        with pytest.raises(ProtocolError):
            sub.get(timeout=5)
    assert proxy.stats.faults_injected == 1


def test_corrupt_upstream_the_broker_answers_with_an_error(proxy: FaultProxy) -> None:
    with stompy.Connection(proxy.url) as conn:
        proxy.corrupt("upstream", offset=10**6)  # past the end: the frame's last byte, NUL
        with pytest.raises(ServerError, match="malformed frame"):
            conn.send(queue(), "x", receipt=True)
    assert proxy.stats.faults_injected == 1


# -- stall, delay, throttle ---------------------------------------------------------------


def test_stalled_heartbeats_are_a_heartbeat_timeout() -> None:
    with run_broker(heartbeats=(100, 100)) as broker, run_fault_proxy(broker.url) as proxy:
        conn = stompy.Connection(proxy.url, heartbeats=(100, 100))
        conn.connect()
        try:
            sub = conn.subscribe(queue())
            time.sleep(0.3)  # beats pass both ways
            assert conn.connected
            proxy.stall(direction="downstream")  # the socket stays open, silent
            with pytest.raises(HeartbeatTimeout):
                sub.get(timeout=10)
        finally:
            conn.close()


def test_a_stall_delays_delivery_and_keeps_it_whole(
    proxy: FaultProxy, stomp_broker: Broker
) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        proxy.stall(0.3, "downstream")
        started = time.monotonic()
        stompy.send(stomp_broker.url, dest, "late")
        message = sub.get(timeout=10)
        assert time.monotonic() - started >= 0.25
        assert message is not None
        assert message.text == "late"


def test_resume_ends_a_stall(proxy: FaultProxy) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        proxy.stall(direction="upstream")
        conn.send(dest, "held")
        assert sub.get(timeout=0.3) is None
        proxy.resume()
        message = sub.get(timeout=5)
        assert message is not None
        assert message.text == "held"


def test_delay_keeps_the_order(proxy: FaultProxy) -> None:
    dest = queue()
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        proxy.delay(0.1)
        started = time.monotonic()
        conn.send(dest, "0", receipt=True)  # up and back down: two delays
        assert time.monotonic() - started >= 0.18
        for i in range(1, 30):
            conn.send(dest, str(i))
        received = []
        for _ in range(30):
            message = sub.get(timeout=10)
            assert message is not None
            received.append(message.text)
        assert received == [str(i) for i in range(30)]
        proxy.delay(0)
        started = time.monotonic()
        conn.send(dest, "fast again", receipt=True)
    assert proxy.stats.faults_injected == 2


def test_throttle_delivers_every_byte(proxy: FaultProxy, stomp_broker: Broker) -> None:
    dest = queue()
    body = bytes(range(256)) * 40  # 10,240 bytes
    with stompy.Connection(proxy.url) as conn, conn.subscribe(dest) as sub:
        proxy.throttle(20_000, "downstream")
        before = proxy.stats.bytes_downstream
        started = time.monotonic()
        stompy.send(stomp_broker.url, dest, body)
        message = sub.get(timeout=10)
        assert time.monotonic() - started >= 0.4  # 10 KB at 20 KB/s
        assert message is not None
        assert message.body == body
        assert proxy.stats.bytes_downstream - before > len(body)
        proxy.throttle(None)


# -- refuse -------------------------------------------------------------------------------


def test_refuse_then_heal(proxy: FaultProxy) -> None:
    proxy.refuse()
    with pytest.raises(ConnectFailed):
        stompy.Connection(proxy.url, connect_timeout=5).connect()
    assert proxy.stats.connections_refused == 1
    proxy.reset()
    with stompy.Connection(proxy.url) as conn:
        assert conn.connected


def test_refuse_for_a_while_then_reconnect_gets_in(proxy: FaultProxy) -> None:
    proxy.refuse(0.3)
    with stompy.Connection(proxy.url, reconnect=QUICK) as conn:
        assert conn.connected
    assert proxy.stats.connections_refused >= 1


def test_refuse_hold_leaves_the_client_waiting(proxy: FaultProxy) -> None:
    proxy.refuse(mode="hold")
    started = time.monotonic()
    with pytest.raises(ConnectFailed):
        stompy.Connection(proxy.url, connect_timeout=0.3).connect()
    assert time.monotonic() - started >= 0.25
    assert proxy.stats.connections_refused == 0  # held, not refused
    proxy.reset()
    with stompy.Connection(proxy.url) as conn:
        assert conn.connected


def test_a_held_client_is_served_once_the_refusal_ends(proxy: FaultProxy) -> None:
    proxy.refuse(0.3, mode="hold")
    started = time.monotonic()
    with stompy.Connection(proxy.url, connect_timeout=10) as conn:
        assert time.monotonic() - started >= 0.25
        assert conn.connected
    assert proxy.stats.connections_accepted == 1


def test_a_client_reset_ends_the_broker_side_too(proxy: FaultProxy, stomp_broker: Broker) -> None:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=5)
    with sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
        assert sock.recv(65536).startswith(b"CONNECTED\n")
        stomp_broker.wait_until(lambda: len(stomp_broker.connections) == 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    proxy.wait_until(lambda: not proxy.connections)
    stomp_broker.wait_until(lambda: not stomp_broker.connections)
    assert proxy.stats.connections_cut == 0  # ended by the client, not by a fault


# -- async: asyncio and trio ---------------------------------------------------------------


@pytest.mark.anyio
async def test_async_delay_then_cut() -> None:
    dest = queue()
    with anyio.fail_after(15):
        async with serve() as broker, fault_proxy(broker.url) as proxy:
            assert isinstance(proxy, AsyncFaultProxy)
            assert repr(proxy).startswith("<stompy.testing.AsyncFaultProxy 127.0.0.1:")
            async with stompy.AsyncConnection(proxy.url) as conn:
                sub = await conn.subscribe(dest)
                proxy.delay(0.1, "downstream")
                started = anyio.current_time()
                await conn.send(dest, "slow", receipt=True)
                assert anyio.current_time() - started >= 0.08
                message = await sub.get(timeout=5)
                assert message is not None
                assert message.text == "slow"
                await proxy.cut()
                assert proxy.connections == ()
                with pytest.raises(ConnectionLost):
                    await sub.get(timeout=5)
            assert proxy.stats.connections_cut == 1


@pytest.mark.anyio
async def test_async_reconnects_after_a_scheduled_cut_and_a_refusal() -> None:
    dest = queue()
    with anyio.fail_after(15):
        async with serve() as broker, fault_proxy(broker.url) as proxy:
            async with stompy.AsyncConnection(proxy.url, reconnect=QUICK) as conn:
                sub = await conn.subscribe(dest)
                proxy.refuse(0.3, after=0.1)
                await proxy.cut(after=0.1)
                await proxy.wait_until(lambda: proxy.stats.connections_cut == 1)
                await conn.send(dest, "back", receipt=True)
                message = await sub.get(timeout=5)
                assert message is not None
                assert message.text == "back"
            stats = proxy.stats
            assert stats.connections_refused >= 1
            assert stats.connections_accepted >= 3


# -- bounds: a send with a receipt ends within send_timeout + receipt_timeout -------------

#: A first outage of 1 s, then a second one that starts while the repeated send waits for
#: its receipt and lasts past send_timeout. The repeat must wait for the connection only
#: until send_timeout has passed since the call began, not send_timeout again.
BOUND_POLICY = stompy.Reconnect(initial_delay=0.05, max_delay=0.05, jitter=0.0, send_timeout=2.0)
BOUND_RECEIPT = 1.0
BOUND = BOUND_POLICY.send_timeout + BOUND_RECEIPT


def _two_outages(proxy: FaultProxy) -> None:
    proxy.delay(0.5, "downstream")  # the receipt of the repeated send is still due at the cut
    proxy.refuse(1.0)
    proxy.refuse(3.0, after=1.8)
    proxy.cut(after=1.8)


def test_send_with_receipt_ends_within_its_bound(proxy: FaultProxy) -> None:
    with stompy.Connection(
        proxy.url, reconnect=BOUND_POLICY, receipt_timeout=BOUND_RECEIPT
    ) as conn:
        _two_outages(proxy)
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            conn.send(queue(), "x", receipt=True)
        took = time.monotonic() - started
    # Before the fix the repeat waited send_timeout afresh: about 3.8 s here.
    assert took < BOUND + 0.5, f"send blocked {took:.2f} s, past its {BOUND} s bound"


@pytest.mark.anyio
async def test_async_send_with_receipt_ends_within_its_bound() -> None:
    with anyio.fail_after(20):
        async with serve() as broker, fault_proxy(broker.url) as proxy:
            async with stompy.AsyncConnection(
                proxy.url, reconnect=BOUND_POLICY, receipt_timeout=BOUND_RECEIPT
            ) as conn:
                proxy.delay(0.5, "downstream")
                proxy.refuse(1.0)
                proxy.refuse(3.0, after=1.8)
                await proxy.cut(after=1.8)
                await proxy.cut()
                started = anyio.current_time()
                with pytest.raises(ConnectionLost):
                    await conn.send(queue(), "x", receipt=True)
                took = anyio.current_time() - started
    assert took < BOUND + 0.5, f"send blocked {took:.2f} s, past its {BOUND} s bound"


@pytest.mark.anyio
async def test_async_stall_is_a_heartbeat_timeout() -> None:
    with anyio.fail_after(15):
        async with serve(heartbeats=(100, 100)) as broker, fault_proxy(broker.url) as proxy:
            async with stompy.AsyncConnection(proxy.url, heartbeats=(100, 100)) as conn:
                sub = await conn.subscribe(queue())
                proxy.stall(direction="downstream")
                with pytest.raises(HeartbeatTimeout):
                    await sub.get(timeout=10)


@pytest.mark.anyio
async def test_a_stalled_pipe_stops_reading() -> None:
    """The proxy buffers at most QUEUED_CHUNKS chunks; then TCP pushes back on the sender."""
    sent = 0
    accepted = anyio.Event()

    async def flood(stream: anyio.abc.SocketStream) -> None:
        nonlocal sent
        accepted.set()
        # Until the proxy closes its end (unread bytes make that a reset).
        async with stream:
            with suppress(anyio.BrokenResourceError):
                for _ in range(10_000):
                    await stream.send(b"x" * CHUNK)
                    sent += CHUNK

    with anyio.fail_after(20):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, flood)
            async with fault_proxy(f"stomp://127.0.0.1:{port}") as proxy:
                proxy.stall(direction="downstream")
                client = await anyio.connect_tcp("127.0.0.1", proxy.port)
                async with client:
                    await accepted.wait()
                    previous = -1
                    while sent != previous:  # until the flood is blocked
                        previous = sent
                        await anyio.sleep(0.2)
                    # The kernel's buffers on both sockets, plus the proxy's queue.
                    assert sent < QUEUED_CHUNKS * CHUNK + 64 * 2**20
                    assert proxy.stats.bytes_downstream == 0
                    proxy.resume()
                    received = 0
                    while received < 2 * CHUNK:
                        received += len(await client.receive())
            tg.cancel_scope.cancel()


def test_fixture_options_point_at_another_target(tmp_path: Path) -> None:
    with run_broker() as broker:
        (tmp_path / "test_elsewhere.py").write_text(
            textwrap.dedent(
                f"""
                import pytest
                import stompy

                @pytest.fixture
                def stomp_fault_proxy_options():
                    return {{"target": "{broker.url}", "connect_timeout": 5}}

                def test_through(stomp_fault_proxy):
                    stompy.send(stomp_fault_proxy.url, "/queue/elsewhere", "x")
                    assert stomp_fault_proxy.stats.connections_accepted == 1
                """
            )
        )
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["-p", "no:hypothesispytest", "-W", "error", str(tmp_path)]
        if not entry_points(group="pytest11", name="stompy"):
            argv += ["-p", "stompy.testing.pytest_plugin"]  # pragma: no cover
        result = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 passed" in result.stdout
        assert broker.queue_depth("/queue/elsewhere") == 1

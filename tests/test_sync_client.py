"""The blocking client against the in-process broker: behaviour and faults."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import stompy
from stompy.engine import MessageBase
from stompy.errors import (
    ConnectFailed,
    ConnectionLost,
    FrameTooLarge,
    HeartbeatTimeout,
    LocalProtocolError,
    ProtocolError,
    ReceiptTimeout,
    ServerError,
    TransactionLost,
)
from stompy.testing import Broker, run_broker


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with run_broker(users={"guest": "guest"}) as running:
        yield running


@pytest.fixture
def fresh_broker() -> Iterator[Broker]:
    """A broker of the test's own, for tests that break connections."""
    with run_broker() as running:
        yield running


def url(broker: Broker) -> str:
    return f"stomp://guest:guest@{broker.host}:{broker.port}"


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def session_of(broker: Broker, conn: stompy.Connection) -> str:
    return next(c.session for c in broker.connections if c.session == conn.session)


def test_send_and_receive_with_every_accessor(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(url(broker), receipt_timeout=5) as conn:
        assert conn.connected
        assert conn.version == "1.2"
        assert conn.session
        with conn.subscribe(dest, ack="client-individual") as sub:
            conn.send(dest, b"\x00binary", headers={"priority": "9"}, receipt=True)
            msg = sub.get(timeout=5)
            assert msg is not None
            assert msg.body == b"\x00binary"
            assert msg.headers["priority"] == "9"
            assert msg.destination == dest
            assert msg.subscription == sub.id
            assert msg.message_id
            msg.ack()
            conn.send(dest, "héllo")
            text = sub.get(timeout=5)
            assert text is not None
            assert text.text == "héllo"
            assert text.content_type == "text/plain;charset=utf-8"
            text.ack(receipt=True)
        assert broker.unacked_count(dest) == 0
    assert not conn.connected


def check_one_object_per_message(
    first: MessageBase, second: MessageBase, cls: type[MessageBase], dest: str, sub_id: str
) -> None:
    """Two messages with the same body, as a client of class ``cls`` received them:
    each is the core's event itself, and they compare by identity."""
    assert type(first) is cls
    assert isinstance(first, stompy.events.MessageReceived)
    assert first.event is first
    assert first.frame.command == "MESSAGE"
    assert repr(first) == (
        f"<{cls.__name__} {first.message_id!r} from {dest!r} sub={sub_id!r} body=b'same'>"
    )
    assert first != second
    assert first == first
    assert len({first, second}) == 2


def test_a_received_message_is_the_cores_event_and_compares_by_identity(
    broker: Broker,
) -> None:
    dest = queue()
    with (
        stompy.Connection(url(broker), receipt_timeout=5) as conn,
        conn.subscribe(dest, ack="client-individual") as sub,
    ):
        conn.send(dest, b"same")
        conn.send(dest, b"same", receipt=True)
        first, second = sub.get(timeout=5), sub.get(timeout=5)
        assert first is not None
        assert second is not None
        check_one_object_per_message(first, second, stompy.Message, dest, sub.id)
        first.ack()
        second.ack(receipt=True)
    assert broker.unacked_count(dest) == 0


@pytest.mark.parametrize("body", [5, None, bytearray(b"x")])
def test_a_body_neither_bytes_nor_str_is_refused_and_nothing_is_sent(
    broker: Broker, body: object
) -> None:
    """With the core compiled or not: an int was once sent as that many NUL bytes."""
    dest = queue()
    with stompy.Connection(url(broker), receipt_timeout=5) as conn:
        with pytest.raises(TypeError):
            conn.send(dest, body)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            conn.send_many([stompy.Outgoing(dest, body)])  # type: ignore[arg-type]
        conn.send(dest, b"after", receipt=True)  # the connection goes on
        with conn.subscribe(dest) as sub:
            msg = sub.get(timeout=5)
            assert msg is not None
            assert msg.body == b"after"
            assert sub.get(timeout=0.2) is None


@pytest.mark.parametrize("messages", [["a body"], [("/queue/a", "a body")], [b"x", b"y"]])
def test_send_many_refuses_what_is_not_an_outgoing(broker: Broker, messages: list[Any]) -> None:
    """A str was iterated as characters, a tuple as its items: an AttributeError ("'str'
    object has no attribute 'destination'") from inside, which did not say what to pass."""
    dest = queue()
    with stompy.Connection(url(broker), receipt_timeout=5) as conn:
        with pytest.raises(
            TypeError, match=r"^send_many\(\): each message must be a stompy\.Outgoing\("
        ):
            conn.send_many([stompy.Outgoing(dest, "before"), *messages], receipt=True)
        conn.send(dest, "after", receipt=True)  # the connection goes on
    assert broker.queue_depth(dest) == 1  # the chunk with the bad message was not sent


def test_a_transaction_of_another_connection_is_refused(broker: Broker) -> None:
    """Both connections' first transaction is 'tx-1': a send or an ack given the other
    connection's transaction went, by that id, into this connection's own, committed or
    aborted with it, whatever became of the one the caller named."""
    dest = queue()
    with stompy.Connection(url(broker)) as a, stompy.Connection(url(broker)) as c:
        mine, theirs = a.transaction(), c.transaction()
        assert mine.id == theirs.id
        sub = a.subscribe(dest, ack="client-individual")
        said = r"^transaction 'tx-\d+' belongs to another connection: use it on the connection"
        with pytest.raises(LocalProtocolError, match=said):
            a.send(dest, "in whose transaction?", transaction=theirs)
        with pytest.raises(LocalProtocolError, match=said):
            a.send_many([stompy.Outgoing(dest, "x")], transaction=theirs)
        a.send(dest, "to ack", receipt=True)
        message = sub.get(timeout=5)
        assert message is not None
        with pytest.raises(LocalProtocolError, match=said):
            message.ack(theirs)
        with pytest.raises(LocalProtocolError, match=said):
            theirs.ack(message)
        mine.commit()
        theirs.commit()
        assert broker.queue_depth(dest) == 0  # nothing went in with either
        assert broker.unacked_count(dest) == 1
        message.ack(receipt=True)  # the message is still the caller's to answer


def test_unicode_headers_with_colons_and_newlines(broker: Broker) -> None:
    dest = queue()
    weird = {"key:with:colons": "value:\nwith\\newline\r", "ünï": "cødé"}
    with stompy.Connection(url(broker)) as conn, conn.subscribe(dest) as sub:
        conn.send(dest, b"x", headers=weird, receipt=True)
        msg = sub.get(timeout=5)
        assert msg is not None
        for key, value in weird.items():
            assert msg.headers[key] == value


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_each_version_acks_correctly(broker: Broker, version: str) -> None:
    dest = queue()
    with stompy.Connection(url(broker), versions=(version,)) as conn:
        assert conn.version == version
        with conn.subscribe(dest, ack="client") as sub:
            conn.send(dest, "one", receipt=True)
            msg = sub.get(timeout=5)
            assert msg is not None
            msg.ack(receipt=True)
            assert broker.unacked_count(dest) == 0
            if version == "1.0":
                with pytest.raises(LocalProtocolError, match="NACK"):
                    msg.nack()


def test_iteration_ends_when_subscription_ends(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(url(broker)) as conn:
        sub = conn.subscribe(dest)
        for i in range(3):
            conn.send(dest, str(i))
        got = []
        for msg in sub:
            got.append(msg.text)
            if len(got) == 3:
                sub.unsubscribe()
        assert got == ["0", "1", "2"]
        assert sub.get(timeout=0.01) is None
        assert not sub.active


def test_get_times_out_with_none(broker: Broker) -> None:
    with stompy.Connection(url(broker)) as conn, conn.subscribe(queue()) as sub:
        started = time.monotonic()
        assert sub.get(timeout=0.05) is None
        assert time.monotonic() - started >= 0.04


def test_get_batch_takes_what_arrived_up_to_its_limit(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(url(broker)) as conn:
        with conn.subscribe(dest, ack="client-individual", max_pending=10) as sub:
            with pytest.raises(stompy.ConfigurationError, match="max_messages"):
                sub.get_batch(0)
            assert sub.get_batch(5, timeout=0.05) == []
            # 25 messages against room for 10: the I/O thread pauses, and resumes as
            # batches make room, so nothing is lost or reordered.
            conn.send_many(stompy.Outgoing(dest, str(i)) for i in range(25))
            got: list[str] = []
            for _ in range(50):
                batch = sub.get_batch(4, timeout=5)
                assert 1 <= len(batch) <= 4
                got += [m.text for m in batch]
                for m in batch:
                    m.ack()
                if len(got) == 25:
                    break
            assert got == [str(i) for i in range(25)]
        assert sub.get_batch(3, timeout=0) == []  # ended: nothing left, no wait


def test_waiting_threads_read_the_socket_in_turn_and_lose_no_order(broker: Broker) -> None:
    # A waiting caller reads the socket itself while the I/O thread may read it too
    # (IOThread.wait): with two consumers waiting and a third thread waiting for
    # receipts, every byte is routed once and in order, whoever read it.
    dests = [queue(), queue()]
    count = 300
    got: dict[str, list[str]] = {dest: [] for dest in dests}
    with stompy.Connection(url(broker)) as conn, stompy.Connection(url(broker)) as sender:
        subs = [conn.subscribe(dest) for dest in dests]

        def consume(sub: stompy.Subscription, into: list[str]) -> None:
            for _ in range(count):
                message = sub.get(timeout=10)
                if message is None:
                    return
                into.append(message.text)

        threads = [
            threading.Thread(target=consume, args=(sub, got[dest]))
            for sub, dest in zip(subs, dests, strict=True)
        ]
        for thread in threads:
            thread.start()
        for i in range(count):
            for dest in dests:
                sender.send(dest, str(i))
            conn.send(queue(), "x", receipt=True)  # this thread waits on the socket too
        for thread in threads:
            thread.join(timeout=30)
    assert got == {dest: [str(i) for i in range(count)] for dest in dests}


def taken_without_reading(sub: stompy.Subscription) -> stompy.Message | None:
    """The next message, once the I/O thread has read it: ``get(timeout=0)`` takes
    what is in the inbox and never reads the socket itself."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = sub.get(timeout=0)
        if message is not None:
            return message
        time.sleep(0.005)
    return None


def test_the_io_thread_reads_again_once_a_reading_caller_returns(broker: Broker) -> None:
    # While a caller waits for a receipt it reads the socket itself and the I/O thread
    # stands aside (IOThread.wait): once the caller returned, what comes is the I/O
    # thread's to read again, with nobody waiting.
    with stompy.Connection(url(broker)) as conn, stompy.Connection(url(broker)) as sender:
        dest = queue()
        sub = conn.subscribe(dest, receipt=True)
        for i in range(5):
            conn.send(queue(), "x", receipt=True)  # read through, the I/O thread aside
            sender.send(dest, str(i), receipt=True)
            message = taken_without_reading(sub)
            assert message is not None
            assert message.text == str(i)


def test_the_io_thread_reads_again_after_a_wait_that_timed_out(broker: Broker) -> None:
    # A caller whose wait ended unanswered (a request nobody replies to) gives the
    # reading back to the I/O thread as one that was answered does.
    with stompy.Connection(url(broker)) as conn, stompy.Connection(url(broker)) as sender:
        dest = queue()
        sub = conn.subscribe(dest, receipt=True)
        with pytest.raises(stompy.RequestTimeout):
            conn.request(queue(), "nobody answers", timeout=0.2)
        sender.send(dest, "after", receipt=True)
        message = taken_without_reading(sub)
        assert message is not None
        assert message.text == "after"


def test_a_broker_gone_while_a_caller_reads_is_seen(fresh_broker: Broker) -> None:
    # The caller reads the socket while the I/O thread stands aside: the end of the
    # stream it reads is handed to the I/O thread, whose verdict ends the wait.
    failed: list[BaseException] = []
    with stompy.Connection(fresh_broker.url) as conn:

        def request() -> None:
            try:
                conn.request(queue(), "nobody answers", timeout=10)
            except ConnectionLost as exc:
                failed.append(exc)

        waiter = threading.Thread(target=request)
        waiter.start()
        time.sleep(0.2)  # most likely waiting by now; if not, it is lost all the same
        fresh_broker.drop_all_connections()
        waiter.join(timeout=10)
        assert not waiter.is_alive()
    assert len(failed) == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_on_message_callback_runs_in_its_own_thread(broker: Broker) -> None:
    dest = queue()
    got: list[str] = []
    done = threading.Event()

    def handle(msg: stompy.Message) -> None:
        if msg.text == "boom":
            raise RuntimeError("callback failure is logged, not fatal")
        got.append(msg.text)
        if len(got) == 2:
            done.set()

    with stompy.Connection(url(broker)) as conn:
        conn.subscribe(dest, on_message=handle)
        for body in ("a", "boom", "b"):
            conn.send(dest, body)
        assert done.wait(5)
    assert got == ["a", "b"]


def test_transaction_commits_and_aborts(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(url(broker)) as conn:
        with conn.transaction() as tx:
            tx.send(dest, "committed")
            assert broker.queue_depth(dest) == 0
        assert broker.queue_depth(dest) == 1
        with pytest.raises(ValueError, match="rolled back"), conn.transaction() as tx:
            tx.send(dest, "aborted")
            raise ValueError("rolled back")
        conn.send(dest, "after", receipt=True)
        assert broker.queue_depth(dest) == 2
        with conn.subscribe(dest, ack="client-individual") as sub:
            first = sub.get(timeout=5)
            second = sub.get(timeout=5)
            assert first is not None
            assert second is not None
            assert [first.text, second.text] == ["committed", "after"]
            with conn.transaction() as tx:
                tx.ack(first)
                tx.nack(second)
            tx2 = conn.transaction()
            tx2.abort()
            with pytest.raises(LocalProtocolError, match="finished"):
                tx2.send(dest, "x")


def test_receipt_timeout_when_broker_stalls(fresh_broker: Broker) -> None:
    with stompy.Connection(fresh_broker.url, receipt_timeout=0.3) as conn:
        fresh_broker.pause()
        with pytest.raises(ReceiptTimeout):
            conn.send(queue(), "x", receipt=True)
        fresh_broker.resume()


def test_heartbeat_loss_is_detected_and_wakes_blocked_calls(fresh_broker: Broker) -> None:
    with run_broker(heartbeats=(100, 100)) as beating:
        conn = stompy.Connection(beating.url, heartbeats=(100, 100), heartbeat_tolerance=2.0)
        conn.connect()
        try:
            assert conn.heartbeats == (100, 100)
            sub = conn.subscribe(queue())
            time.sleep(0.5)  # several intervals: beats keep it alive both ways
            assert conn.connected
            beating.pause()
            started = time.monotonic()
            with pytest.raises(HeartbeatTimeout):
                sub.get(timeout=10)
            assert time.monotonic() - started < 5
            with pytest.raises(HeartbeatTimeout):
                conn.send("/queue/x", "y")
        finally:
            conn.close()


def test_dropped_connection_without_reconnect_raises(fresh_broker: Broker) -> None:
    with stompy.Connection(fresh_broker.url) as conn:
        sub = conn.subscribe(queue())
        fresh_broker.drop_all_connections()
        with pytest.raises(ConnectionLost):
            sub.get(timeout=5)
        with pytest.raises(ConnectionLost):
            conn.send("/queue/x", "y")


def test_reconnect_resubscribes_and_goes_on(fresh_broker: Broker) -> None:
    dest = queue()
    policy = stompy.Reconnect(initial_delay=0.05, max_delay=0.2, send_timeout=5)
    with stompy.Connection(fresh_broker.url, reconnect=policy) as conn:
        sub = conn.subscribe(dest, ack="client-individual")
        conn.send(dest, "before", receipt=True)
        before = sub.get(timeout=5)
        assert before is not None
        tx = conn.transaction()
        fresh_broker.drop_all_connections()
        # The message was never acked: the broker gives it back, redelivered.
        again = sub.get(timeout=5)
        assert again is not None
        assert again.text == "before"
        assert again.redelivered
        before.ack()  # from the old connection: a no-op, not an error
        again.ack(receipt=True)
        with pytest.raises(TransactionLost):
            tx.commit()
        conn.send(dest, "after", receipt=True)
        after = sub.get(timeout=5)
        assert after is not None
        assert after.text == "after"
        after.ack()


def test_reconnect_gives_up_after_max_attempts() -> None:
    policy = stompy.Reconnect(max_attempts=2, initial_delay=0.01, send_timeout=5)
    with run_broker() as doomed:
        conn = stompy.Connection(doomed.url, reconnect=policy)
        conn.connect()
        sub = conn.subscribe(queue())
    # The broker is gone for good: two attempts, then the failure surfaces.
    with pytest.raises(ConnectionLost, match="could not reconnect"):
        sub.get(timeout=10)
    conn.close()


def test_concurrent_senders_never_interleave_frames(broker: Broker) -> None:
    dest = queue()
    per_thread = 200
    with stompy.Connection(url(broker)) as conn, conn.subscribe(dest) as sub:

        def produce(n: int) -> None:
            for i in range(per_thread):
                body = (f"{n}:{i}:" + "x" * (i % 50)).encode() + b"\x00" * (i % 3)
                conn.send(dest, body, headers={"thread": str(n), "seq": str(i)})

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        seen: dict[str, list[int]] = {}
        for _ in range(8 * per_thread):
            msg = sub.get(timeout=10)
            assert msg is not None
            n, i = msg.headers["thread"], int(msg.headers["seq"])
            expected = (f"{n}:{i}:" + "x" * (i % 50)).encode() + b"\x00" * (i % 3)
            assert msg.body == expected
            seen.setdefault(n, []).append(i)
        assert all(v == list(range(per_thread)) for v in seen.values())
        assert len(seen) == 8


def test_slow_consumer_backpressure_bounds_memory(fresh_broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(fresh_broker.url, max_pending=5) as conn:
        with stompy.Connection(fresh_broker.url) as producer:
            for _ in range(3000):
                producer.send(dest, b"y" * 4096)
            producer.send(dest, b"end", receipt=True)
        sub = conn.subscribe(dest)
        time.sleep(0.3)
        # The client holds at most max_pending; the rest waits in TCP and the broker.
        assert sub.pending <= 5
        assert fresh_broker.queue_depth(dest) > 0
        count = 0
        for msg in sub:
            count += 1
            if msg.body == b"end":
                break
        assert count == 3001


def test_malformed_frame_from_server_is_a_protocol_error(fresh_broker: Broker) -> None:
    with stompy.Connection(fresh_broker.url) as conn:
        sub = conn.subscribe(queue())
        fresh_broker.send_raw(session_of(fresh_broker, conn), b"MESSAGE\nno colon here\n\n\x00")
        with pytest.raises(ProtocolError, match="colon"):
            sub.get(timeout=5)


def test_oversized_frame_from_server_is_frame_too_large(fresh_broker: Broker) -> None:
    limits = stompy.FrameLimits(max_body=1000)
    with stompy.Connection(fresh_broker.url, limits=limits) as conn:
        sub = conn.subscribe(queue())
        fresh_broker.send_raw(
            session_of(fresh_broker, conn),
            b"MESSAGE\ndestination:/q\nmessage-id:1\nsubscription:0\n\n" + b"z" * 5000,
        )
        with pytest.raises(FrameTooLarge):
            sub.get(timeout=5)


def test_wrong_passcode_is_a_server_error_without_the_passcode(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stompy")
    conn = stompy.Connection(broker.url, login="guest", passcode="hunter2")
    assert "hunter2" not in repr(conn)
    with pytest.raises(ServerError) as info:
        conn.connect()
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in caplog.text
    assert info.value.frame is not None
    assert info.value.frame.command == "ERROR"


def test_connect_failures() -> None:
    with run_broker() as gone:
        dead_url = gone.url
    with pytest.raises(ConnectFailed):
        stompy.Connection(dead_url, connect_timeout=2).connect()
    with pytest.raises(ConnectFailed, match=r"ws://127\.0\.0\.1:1/ws"):
        stompy.Connection("ws://127.0.0.1:1/ws").connect()


def test_failover_uses_the_next_address(broker: Broker) -> None:
    with run_broker() as gone:
        dead_url = gone.url
    with stompy.Connection([dead_url, url(broker)], connect_timeout=2) as conn:
        assert conn.connected


def test_one_call_send(broker: Broker) -> None:
    dest = queue()
    stompy.send(url(broker), dest, "hello")
    assert broker.queue_depth(dest) == 1


def test_misuse_raises_local_errors(broker: Broker) -> None:
    conn = stompy.Connection(url(broker))
    with pytest.raises(LocalProtocolError):
        conn.send("/queue/a", "x")
    conn.connect()
    with pytest.raises(LocalProtocolError, match=r"is connected: .* opened once; make a new one"):
        conn.connect()
    sub = conn.subscribe(queue())
    with pytest.raises(LocalProtocolError, match="in use"):
        conn.subscribe(queue(), id=sub.id)
    conn.close()
    conn.close()  # twice is fine
    with pytest.raises(LocalProtocolError):
        conn.send("/queue/a", "x")
    # It said only "connect() on a connection that is closed", not what to do.
    with pytest.raises(LocalProtocolError, match=r"is closed: .* opened once; make a new one"):
        conn.connect()


def test_no_thread_outlives_its_connection(broker: Broker) -> None:
    before = {t.name for t in threading.enumerate()}
    with stompy.Connection(url(broker)) as conn:
        conn.subscribe(queue(), on_message=lambda m: None)
    time.sleep(0.05)
    leftover = {t.name for t in threading.enumerate()} - before
    assert not [name for name in leftover if name.startswith("stompy")]


def test_frames_are_logged_at_debug_with_the_passcode_masked(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stompy")
    dest = queue()
    with stompy.Connection(broker.url, login="guest", passcode="guest") as conn:
        conn.send(dest, "logged", receipt=True)
    text = caplog.text
    assert "CONNECT" in text
    assert "passcode:********" in text
    assert "passcode:guest" not in text
    assert "SEND" in text
    assert "RECEIPT" in text


def test_send_with_receipt_is_repeated_after_a_reconnect(fresh_broker: Broker) -> None:
    # Dropped right before the send: whether the frame left on the dead socket or
    # waited for the new one, with reconnect on it reaches the broker (at least once).
    policy = stompy.Reconnect(initial_delay=0.01, send_timeout=10)
    for _ in range(10):
        dest = queue()
        with stompy.Connection(fresh_broker.url, reconnect=policy) as conn:
            fresh_broker.drop_all_connections()
            conn.send(dest, "x", receipt=True)
        assert fresh_broker.queue_depth(dest) >= 1


def test_text_of_a_body_that_is_not_text_names_the_content_type(broker: Broker) -> None:
    dest = queue()
    with stompy.Connection(url(broker)) as conn, conn.subscribe(dest) as sub:
        conn.send(dest, b"\xff\xfe", content_type="text/plain;charset=utf-8", receipt=True)
        conn.send(dest, b"x", content_type="text/plain;charset=nonesuch", receipt=True)
        for charset in ("utf-8", "nonesuch"):
            message = sub.get(timeout=5)
            assert message is not None
            with pytest.raises(
                stompy.BodyNotText, match=f"content-type: text/plain;charset={charset}"
            ):
                _ = message.text
            assert isinstance(message.body, bytes)  # the bytes are still there


def test_a_failed_subscription_raises_until_closed_then_ends(fresh_broker: Broker) -> None:
    """The rule of docs/api.md, the same in every client: a failure raises from get()
    while the subscription stays active; close() ends it (None, not active)."""
    conn = stompy.Connection(fresh_broker.url)
    conn.connect()
    sub = conn.subscribe(queue())
    fresh_broker.drop_all_connections()
    with pytest.raises(ConnectionLost):
        sub.get(timeout=5)
    still_active = sub.active  # (read into a name: mypy would keep the narrowing)
    assert still_active
    with pytest.raises(ConnectionLost):
        sub.get_batch(10, timeout=0)
    conn.close()
    assert not sub.active
    assert sub.get(timeout=0) is None
    assert sub.get_batch(10, timeout=0) == []


def io_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(("stompy-io-", "stompy-sub-"))}


def test_an_unclosed_connection_warns_and_the_collector_ends_it(broker: Broker) -> None:
    before = io_threads()
    dest = queue()
    conn = stompy.Connection(url(broker))
    conn.connect()
    conn.subscribe(dest, on_message=lambda message: None)  # a dispatcher thread too
    sub = conn.subscribe(dest, ack="client-individual")
    conn.send(dest, "held", receipt=True)
    collected = weakref.ref(conn)
    session = conn.session
    with pytest.warns(ResourceWarning, match="unclosed <Connection"):
        del conn
    gc.collect()
    assert collected() is None
    for _ in range(200):  # bounded: 10 s
        if io_threads() <= before and all(c.session != session for c in broker.connections):
            break
        time.sleep(0.05)
    assert io_threads() <= before  # its threads ended...
    assert all(c.session != session for c in broker.connections)  # ... its socket closed
    assert not sub.active  # what is still held of it ended with it


@contextlib.contextmanager
def many_descriptors(count: int = 1100) -> Iterator[None]:
    """``count`` descriptors open (raising the soft limit, within the hard one), so that
    the next ones are numbered above 1024; skips the test if the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 100
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the hard limit on open files is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fillers: list[int] = []
    try:
        while len(fillers) < count:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        assert max(fillers) >= 1024
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_descriptors_above_1024_are_served(broker: Broker) -> None:
    # select() cannot watch a descriptor numbered 1024 or more; the I/O thread must.
    with many_descriptors():
        dest = queue()
        with stompy.Connection(url(broker), heartbeats=(100, 100)) as conn:
            sub = conn.subscribe(dest)
            conn.send(dest, "high", receipt=True)
            message = sub.get(timeout=5)
            assert message is not None
            assert message.text == "high"
        stompy.send(url(broker), dest, "one shot")


def test_close_says_whether_the_broker_confirmed_it(fresh_broker: Broker) -> None:
    conn = stompy.Connection(fresh_broker.url, receipt_timeout=0.5)
    conn.connect()
    assert conn.close() is True
    assert conn.close() is True  # says the same again

    conn = stompy.Connection(fresh_broker.url, receipt_timeout=0.5)
    conn.connect()
    fresh_broker.pause()  # the DISCONNECT receipt will not come
    try:
        started = time.monotonic()
        assert conn.close() is False
        assert time.monotonic() - started < 5
    finally:
        fresh_broker.resume()
    assert not conn.connected
    assert stompy.Connection(fresh_broker.url).close() is False  # never connected

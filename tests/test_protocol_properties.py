"""Hypothesis: random intents and server replies against a model of the protocol.

A small fake server inside the test answers what the client sends with valid frames
(CONNECTED, MESSAGE, RECEIPT, ERROR, heart-beats, EOF) and now and then with invalid
ones. After every step the client must agree with the model: its state, its
subscriptions, its open transactions and its pending receipts; every frame it wrote
must be allowed in the state it wrote it in; every receipt asked for is matched
exactly once; a refused intent changes nothing.

Time is a fake clock in multiples of 1/8 s, so that every sum is exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

from hypothesis import event as statistic
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from stompy._core.encoder import encode
from stompy._core.events import (
    AckMode,
    Connected,
    ConnectionClosed,
    Error,
    Event,
    HeartbeatTimedOut,
    MessageReceived,
    Receipt,
)
from stompy._core.frames import VERSIONS, Frame
from stompy._core.parser import FrameParser
from stompy._core.protocol import ClientProtocol, State
from stompy.errors import LocalProtocolError, RemoteProtocolError
from tests.test_protocol import snapshot

T = TypeVar("T")

#: The client frames each state allows (a DISCONNECT moves on to DISCONNECTING).
ALLOWED: dict[State, frozenset[str]] = {
    State.IDLE: frozenset({"CONNECT", "STOMP"}),
    State.CONNECTING: frozenset(),
    State.CONNECTED: frozenset(
        {
            "SEND",
            "SUBSCRIBE",
            "UNSUBSCRIBE",
            "ACK",
            "NACK",
            "BEGIN",
            "COMMIT",
            "ABORT",
            "DISCONNECT",
        }
    ),
    State.DISCONNECTING: frozenset(),
    State.CLOSED: frozenset(),
}
CLIENT_BEATS = (1000, 1000)
TOLERANCE = 2.0
ACKS: tuple[AckMode, ...] = ("auto", "client", "client-individual")

receipts = st.one_of(st.just(False), st.just(True), st.sampled_from(["x", "y"]))
values_10 = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=8)
values_any = st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["a:b", "x\ny", "\\", "\r", "\\t"]
)
cuts = st.lists(st.integers(0, 400), max_size=3)


class ClientMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.offered: list[str] = list(VERSIONS)
        self.strict = True
        self.connect_command = "CONNECT"
        self.fresh()

    def fresh(self) -> None:
        """A new connection: a new protocol and a model in IDLE."""
        self.proto = ClientProtocol(
            versions=self.offered,
            heartbeats=CLIENT_BEATS,
            heartbeat_tolerance=TOLERANCE,
            strict=self.strict,
        )
        self.wire = FrameParser()  # the server's view of what the client wrote
        self.model = State.IDLE
        self.version = "1.0"
        self.subs: dict[str, AckMode] = {}
        self.closed: set[str] = set()
        self.txs: set[str] = set()
        self.pending: set[str] = set()
        self.answered: set[str] = set()
        self.to_answer: list[str] = []  # receipts the server owes
        self.disconnect_receipt: str | None = None
        self.ackable: list[MessageReceived] = []
        self.error_seen = False
        self.now = 0.0
        self.started = False
        self.beats = (0, 0)
        self.last_sent = 0.0
        self.last_received = 0.0
        self.seq = getattr(self, "seq", 0)

    @initialize(
        versions=st.sets(st.sampled_from(VERSIONS), min_size=1),
        strict=st.booleans(),
        command=st.sampled_from(["CONNECT", "STOMP"]),
        handshake=st.integers(0, 3),
        version=st.integers(0, 2),
        ack=st.sampled_from(ACKS),
    )
    def start(
        self,
        versions: set[str],
        strict: bool,
        command: str,
        handshake: int,
        version: int,
        ack: AckMode,
    ) -> None:
        self.offered = sorted(versions)
        self.strict = strict
        self.connect_command = command
        self.fresh()
        if handshake:  # mostly start subscribed: that is where most rules do something
            self.handshake(version, None, ack)

    def handshake(self, version: int, beats: str | None, ack: AckMode) -> None:
        self.connect()
        self.server_connected(version, beats, [])
        self.subscribe(ack, False)

    @precondition(lambda self: self.model is State.CLOSED)
    @rule(
        version=st.integers(0, 2),
        beats=st.sampled_from([None, "1000,1000"]),
        ack=st.sampled_from(ACKS),
    )
    def reconnect(self, version: int, beats: str | None, ack: AckMode) -> None:
        self.fresh()
        self.handshake(version, beats, ack)

    # -- the client side ---------------------------------------------------------------

    def attempt(self, intent: Callable[[], T], command: str, valid: bool) -> T | None:
        """Run an intent; check that it did exactly what the model predicts."""
        before = snapshot(self.proto)
        state = self.model
        try:
            result = intent()
        except LocalProtocolError:
            statistic(f"LocalProtocolError for {command}")
            assert not valid, f"{command} refused in {state}"
            assert snapshot(self.proto) == before
            assert self.proto.data_to_send(self.now) == b""
            return None
        assert valid, f"{command} accepted in {state}"
        data = self.proto.data_to_send(self.now)
        self.last_sent = self.now
        frames = self.wire.parse(data)
        assert [f.command for f in frames] == [command]
        assert command in ALLOWED[state]
        receipt = frames[0].get("receipt")
        if receipt is not None:
            assert receipt not in self.pending
            assert receipt not in self.to_answer
            self.pending.add(receipt)
            self.to_answer.append(receipt)
        return result

    def receipt_ok(self, receipt: bool | str) -> bool:
        return not isinstance(receipt, str) or receipt not in self.pending

    @rule()
    def connect(self) -> None:
        valid = self.model is State.IDLE
        self.attempt(
            lambda: self.proto.connect("/", login="u", command=self.connect_command),
            self.connect_command,
            valid,
        )
        if valid:
            self.model = State.CONNECTING

    @rule(body=st.binary(max_size=20) | st.text(max_size=5), tx=st.booleans(), receipt=receipts)
    def send(self, body: bytes | str, tx: bool, receipt: bool | str) -> None:
        transaction = sorted(self.txs)[0] if tx and self.txs else ("none" if tx else None)
        valid = (
            self.model is State.CONNECTED
            and (transaction is None or transaction in self.txs)
            and self.receipt_ok(receipt)
        )
        self.attempt(
            lambda: self.proto.send("/q", body, transaction=transaction, receipt=receipt),
            "SEND",
            valid,
        )

    @rule(ack=st.sampled_from(ACKS), receipt=receipts)
    def subscribe(self, ack: AckMode, receipt: bool | str) -> None:
        valid = (
            self.model is State.CONNECTED
            and not (ack == "client-individual" and self.version == "1.0")
            and self.receipt_ok(receipt)
        )
        sub = self.attempt(
            lambda: self.proto.subscribe("/q", ack=ack, receipt=receipt), "SUBSCRIBE", valid
        )
        if sub is not None:
            assert sub not in self.subs
            self.subs[sub] = ack
            self.closed.discard(sub)

    @rule(pick=st.integers(0, 5), receipt=receipts)
    def unsubscribe(self, pick: int, receipt: bool | str) -> None:
        known = [*sorted(self.subs), "unknown"]
        sub = known[pick % len(known)]
        valid = self.model is State.CONNECTED and sub in self.subs and self.receipt_ok(receipt)
        self.attempt(lambda: self.proto.unsubscribe(sub, receipt=receipt), "UNSUBSCRIBE", valid)
        if valid:
            del self.subs[sub]
            self.closed.add(sub)

    @precondition(lambda self: bool(self.ackable))
    @rule(pick=st.integers(0, 50), nack=st.booleans(), tx=st.booleans(), receipt=receipts)
    def acknowledge(self, pick: int, nack: bool, tx: bool, receipt: bool | str) -> None:
        event = self.ackable[pick % len(self.ackable)]
        transaction = sorted(self.txs)[0] if tx and self.txs else None
        valid = (
            self.model is State.CONNECTED
            and self.subs.get(event.subscription, "auto") != "auto"
            and not (nack and self.version == "1.0")
            and self.receipt_ok(receipt)
        )
        intent = self.proto.nack if nack else self.proto.ack
        self.attempt(
            lambda: intent(event, transaction=transaction, receipt=receipt),
            "NACK" if nack else "ACK",
            valid,
        )

    @rule(receipt=receipts)
    def begin(self, receipt: bool | str) -> None:
        valid = self.model is State.CONNECTED and self.receipt_ok(receipt)
        tx = self.attempt(lambda: self.proto.begin(receipt=receipt), "BEGIN", valid)
        if tx is not None:
            assert tx not in self.txs
            self.txs.add(tx)

    @rule(pick=st.integers(0, 5), commit=st.booleans(), receipt=receipts)
    def finish(self, pick: int, commit: bool, receipt: bool | str) -> None:
        known = [*sorted(self.txs), "unknown"]
        tx = known[pick % len(known)]
        valid = self.model is State.CONNECTED and tx in self.txs and self.receipt_ok(receipt)
        intent = self.proto.commit if commit else self.proto.abort
        self.attempt(lambda: intent(tx, receipt=receipt), "COMMIT" if commit else "ABORT", valid)
        if valid:
            self.txs.discard(tx)

    @rule(receipt=receipts)
    def disconnect(self, receipt: bool | str) -> None:
        valid = self.model is State.CONNECTED and self.receipt_ok(receipt)
        result = self.attempt(lambda: self.proto.disconnect(receipt=receipt), "DISCONNECT", valid)
        if valid:
            self.txs.clear()
            if result is None:
                self.model = State.CLOSED
            else:
                self.disconnect_receipt = result
                self.model = State.DISCONNECTING

    def close(self) -> None:
        self.proto.close()
        self.model = State.CLOSED
        self.txs.clear()
        self.error_seen = False

    @rule(steps=st.integers(1, 24))
    def tick(self, steps: int) -> None:
        self.now += steps / 8
        self.proto.handle_timer(self.now)
        self.drain(expect_error=False)
        data = self.proto.data_to_send(self.now)
        out_ms = self.beats[0]
        live = self.started and self.model in (State.CONNECTED, State.DISCONNECTING)
        if data:
            assert data == b"\n"
            assert live
            assert out_ms
            assert self.now >= self.last_sent + out_ms / 1000
            self.last_sent = self.now
        else:
            assert not (live and out_ms and self.now >= self.last_sent + out_ms / 1000)
        deadline = self.proto.next_deadline()
        if deadline is not None:
            assert deadline > self.now

    # -- the server side ---------------------------------------------------------------

    def push(self, data: bytes, split: list[int], *, expect_error: bool) -> None:
        """Hand the client ``data`` in pieces, draining events after each."""
        points = sorted({0, len(data), *(min(c, len(data)) for c in split)})
        errors = 0
        for a, b in itertools.pairwise(points):
            if self.model is not State.CLOSED:
                self.last_received = self.now
            self.proto.receive_data(data[a:b], self.now)
            errors += self.drain(expect_error=expect_error)
        if expect_error:
            assert errors == 1
            assert self.model is State.CLOSED

    def drain(self, *, expect_error: bool) -> int:
        for _ in range(100):
            try:
                event = self.proto.next_event()
            except RemoteProtocolError:
                statistic(f"RemoteProtocolError in {self.model.name}")
                assert expect_error
                self.model = State.CLOSED
                self.txs.clear()
                return 1
            if event is None:
                return 0
            self.check(event)
        raise AssertionError("next_event() never ran dry")

    def check(self, event: Event) -> None:
        statistic(f"{type(event).__name__} in {self.model.name}")
        if isinstance(event, Connected):
            assert self.model is State.CONNECTING
            self.model = State.CONNECTED
            self.version = event.version
            self.wire.version = event.version
            self.proto.start_heartbeats(self.now)
            self.started = True
            self.last_sent = self.last_received = self.now
            self.beats = event.heartbeats
        elif isinstance(event, MessageReceived):
            assert self.model in (State.CONNECTED, State.DISCONNECTING)
            if event.subscription in self.subs:
                assert event.ack_mode == self.subs[event.subscription]
                if event.ack_mode != "auto":
                    self.ackable.append(event)
            else:
                assert event.subscription in self.closed
                assert event.ack_mode == "auto"
        elif isinstance(event, Receipt):
            # Matched exactly once: it leaves the pending set (a second RECEIPT for
            # it is a protocol error, see server_breaks_protocol).
            assert event.receipt_id in self.pending
            self.pending.discard(event.receipt_id)
            self.answered.add(event.receipt_id)
            if event.receipt_id == self.disconnect_receipt:
                assert self.model is State.DISCONNECTING
                self.model = State.CLOSED
        elif isinstance(event, Error):
            assert self.model is not State.CLOSED
            if event.receipt_id is not None:
                self.pending.discard(event.receipt_id)
            self.model = State.CLOSED
            self.txs.clear()
            self.error_seen = True
        elif isinstance(event, ConnectionClosed):
            assert event.expected == (self.error_seen or self.model is State.DISCONNECTING)
            assert self.model is not State.CLOSED or self.error_seen
            self.model = State.CLOSED
            self.txs.clear()
            self.error_seen = False
        else:
            assert isinstance(event, HeartbeatTimedOut)
            assert self.started
            assert self.beats[1]
            assert self.now >= self.last_received + self.beats[1] / 1000 * TOLERANCE
            assert event.silence == self.now - self.last_received
            self.model = State.CLOSED
            self.txs.clear()

    def server(self, command: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
        version = self.version if command != "CONNECTED" else "1.2"
        return encode(Frame(command, tuple(headers), body), version)

    @precondition(lambda self: self.model is State.CONNECTING)
    @rule(
        pick=st.integers(0, 2),
        beats=st.sampled_from([None, "0,0", "1000,1000", "500,2000"]),
        split=cuts,
    )
    def server_connected(self, pick: int, beats: str | None, split: list[int]) -> None:
        version = self.offered[pick % len(self.offered)]
        headers = [("server", "fake/1"), ("session", "s")]
        if version != "1.0" or pick == 0:
            headers.insert(0, ("version", version))
        if beats is not None:
            headers.append(("heart-beat", beats))
        self.push(self.server("CONNECTED", headers), split, expect_error=False)
        assert self.model is State.CONNECTED
        assert self.proto.version == version

    @precondition(
        lambda self: (
            self.model in (State.CONNECTED, State.DISCONNECTING) and bool(self.subs or self.closed)
        )
    )
    @rule(
        pick=st.integers(0, 50),
        body=st.binary(max_size=30),
        value=st.data(),
        omit=st.booleans(),
        split=cuts,
    )
    def server_message(
        self, pick: int, body: bytes, value: st.DataObject, omit: bool, split: list[int]
    ) -> None:
        candidates = sorted(self.subs) + sorted(self.closed)
        sub = candidates[pick % len(candidates)]
        self.seq += 1
        custom = value.draw(values_10 if self.version == "1.0" else values_any)
        headers = [("destination", "/q"), ("message-id", f"m{self.seq}")]
        # STOMP 1.0 servers may leave the subscription out when it is the only one.
        if not (omit and self.version == "1.0" and len(self.subs) == 1 and sub in self.subs):
            headers.append(("subscription", sub))
        if self.version == "1.2":
            headers.append(("ack", f"a{self.seq}"))
        headers.append(("x-custom", custom))
        before = len(self.ackable)
        self.push(self.server("MESSAGE", headers, body), split, expect_error=False)
        if len(self.ackable) > before:
            assert self.ackable[-1].frame.get("x-custom") == custom
            assert self.ackable[-1].body == body

    @precondition(lambda self: self.model is not State.CLOSED and bool(self.to_answer))
    @rule(count=st.integers(1, 3), split=cuts)
    def server_receipts(self, count: int, split: list[int]) -> None:
        data = b""
        for receipt in self.to_answer[:count]:
            data += self.server("RECEIPT", [("receipt-id", receipt)]) + b"\n"
        del self.to_answer[:count]
        self.push(data, split, expect_error=False)

    def server_error(self, with_receipt: bool, split: list[int]) -> None:
        headers = [("message", "nope")]
        if with_receipt and self.to_answer:
            headers.append(("receipt-id", self.to_answer.pop(0)))
        alive = self.model is not State.CLOSED
        self.push(self.server("ERROR", headers, b"why"), split, expect_error=False)
        assert self.model is State.CLOSED
        if alive:
            assert self.error_seen

    @rule(count=st.integers(1, 3), split=cuts)
    def server_heartbeat(self, count: int, split: list[int]) -> None:
        self.push(b"\r\n" * count, split, expect_error=False)

    def server_eof(self) -> None:
        self.proto.receive_eof()
        self.drain(expect_error=False)
        assert self.model is State.CLOSED

    @rule(again=st.booleans(), split=cuts)
    def server_sends_a_stray_receipt(self, again: bool, split: list[int]) -> None:
        """A RECEIPT that answers nothing (never asked for, or a second one for an id):
        dropped once connected (issue 19); before CONNECTED still a protocol error."""
        receipt_id = "never-asked"
        if again:
            answered = sorted(self.answered - self.pending - set(self.to_answer))
            if not answered:
                return
            receipt_id = answered[0]
        data = self.server("RECEIPT", [("receipt-id", receipt_id)])
        live = (State.CONNECTED, State.DISCONNECTING, State.CLOSED)
        self.push(data, split, expect_error=self.model not in live)

    @rule(
        kind=st.sampled_from(
            [
                "close",
                "error",
                "eof",
                "garbage",
                "message",
                "connected",
                "escape",
            ]
        ),
        with_receipt=st.booleans(),
        split=cuts,
    )
    def the_end(self, kind: str, with_receipt: bool, split: list[int]) -> None:
        """Something that ends the connection (one rule, so that it does not come too often)."""
        if kind == "close":
            self.close()
        elif kind == "error":
            self.server_error(with_receipt, split)
        elif kind == "eof":
            self.server_eof()
        else:
            self.server_breaks_protocol(kind, split)

    def server_breaks_protocol(self, kind: str, split: list[int]) -> None:
        if kind == "garbage":
            data = b"BOGUS\nx:y\n\n\x00"
        elif kind == "message":
            data = self.server("MESSAGE", [("subscription", "never-made"), ("message-id", "1")])
        elif kind == "connected":
            if self.model is State.CONNECTING:
                return  # a valid reply then
            data = self.server("CONNECTED", [("version", "1.2")])
        else:
            if self.version == "1.0" or self.model is not State.CONNECTED:
                return
            data = b"ERROR\nmessage:a\\tb\n\n\x00"
            if not self.proto.strict:
                self.push(data, split, expect_error=False)
                return
        self.push(data, split, expect_error=self.model is not State.CLOSED)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        proto = self.proto
        assert proto.state is self.model
        assert proto.transactions == self.txs
        assert {k: v.ack for k, v in proto.subscriptions.items()} == self.subs
        assert proto.pending_receipts == self.pending
        assert proto._out == []
        if self.model in (State.CLOSED, State.IDLE):
            assert proto.next_deadline() is None


TestClientMachine = ClientMachine.TestCase


# -- whatever the server sends -------------------------------------------------------

generic_values = st.text(st.sampled_from("0123456789,.-x \\:"), max_size=12) | st.text(max_size=6)
VALUES: dict[str, st.SearchStrategy[str]] = {
    "version": st.sampled_from(["1.0", "1.1", "1.2", "", "1.3", "1.1,1.2"]),
    "heart-beat": st.sampled_from(["0,0", "10,10", "x,0", "-1,0", " 5 , 5 ", "9" * 5000 + ",1"])
    | st.text(st.sampled_from("0123456789, "), max_size=8),
    "content-length": st.sampled_from(["0", "3", "-1", "9" * 30, "0" * 5000, "x"]),
    "subscription": st.sampled_from(["1", "2", ""]),
    "receipt-id": st.sampled_from(["r-1", "x", ""]),
}
header_names = st.sampled_from(["message", "message-id", "ack", "destination", "session", *VALUES])
headers = st.lists(
    header_names.flatmap(lambda name: st.tuples(st.just(name), VALUES.get(name, generic_values))),
    max_size=5,
)


def raw_frame(
    command: str, headers: list[tuple[str, str]], body: bytes, raw: bytes | None
) -> bytes:
    """A frame written by hand: no escaping and no checks, as a broken server would."""
    if raw is not None:
        return raw
    lines = [command, *(f"{k}:{v}" for k, v in headers), "", ""]
    return "\n".join(lines).encode("utf-8", "surrogatepass") + body + b"\x00"


connected_frames = st.builds(raw_frame, st.just("CONNECTED"), headers, st.just(b""), st.none())
server_frames = st.builds(
    raw_frame,
    st.sampled_from(["CONNECTED", "MESSAGE", "RECEIPT", "ERROR", "SEND", "ACK"]),
    headers,
    st.binary(max_size=10),
    st.none() | st.binary(max_size=40),
)


@given(
    versions=st.sets(st.sampled_from(VERSIONS), min_size=1),
    strict=st.booleans(),
    stream=st.tuples(connected_frames, st.lists(server_frames, max_size=5)),
    cut=st.integers(0, 300),
)
def test_the_receive_path_raises_only_protocol_error(
    versions: set[str], strict: bool, stream: tuple[bytes, list[bytes]], cut: int
) -> None:
    proto = ClientProtocol(versions=versions, heartbeats=(1000, 1000), strict=strict)
    proto.connect("/")
    data = stream[0] + b"".join(stream[1])
    try:
        for chunk in (data[:cut], data[cut:]):
            proto.receive_data(chunk, 1.0)
            for _ in range(len(data) + 2):
                event = proto.next_event()
                if event is None:
                    break
                if isinstance(event, Connected) and proto.state is State.CONNECTED:
                    proto.start_heartbeats(1.0)
                    proto.subscribe("/q", id="1", ack="client")
                    proto.data_to_send()
            else:
                raise AssertionError("next_event() never ran dry")
        proto.receive_eof()
        proto.handle_timer(100.0)
        while proto.next_event() is not None:
            pass
    except RemoteProtocolError:
        assert proto.state is State.CLOSED

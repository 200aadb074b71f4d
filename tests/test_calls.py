"""The user's calls (stompy._engine.calls) driven by hand with a fake clock, as a transport
would drive them: every wait they ask for, how each ends, and when a send is repeated.

Both clients run these same generators; what is shown here holds for the blocking,
asyncio and trio clients alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

import stompy
from stompy._engine.calls import RESENT_HEADER, Call, Steps, Wait, Waiting
from stompy._engine.engine import MAX_OUTGOING, Engine
from stompy._engine.outgoing import Outgoing
from stompy._engine.state import Status
from stompy.errors import (
    AckLost,
    CommitOutcomeUnknown,
    ConnectionLost,
    LocalProtocolError,
    ReceiptTimeout,
    StompTimeout,
    TransactionLost,
)
from tests.test_session import T0, Delivered, establish, make_session, message, receipt, taken

T = TypeVar("T")

#: What the "transport" does at a wait: change the session and say what time it is then.
Reaction = Callable[[Wait], float]


def drive(steps: Steps[T], react: Reaction, limit: int = 20) -> tuple[T, list[Wait]]:
    """Run ``steps`` to the end; ``react`` plays the transport at each wait."""
    waits: list[Wait] = []
    try:
        wait = next(steps)
        while True:
            waits.append(wait)
            assert len(waits) <= limit, "the call keeps waiting"
            wait = steps.send(react(wait))
    except StopIteration as done:
        return done.value, waits


def time_passes(wait: Wait) -> float:
    """Nothing happens: the wait ends at its deadline."""
    return wait.deadline


def sends(session: Engine[Delivered]) -> int:
    return bytes(session.outgoing).count(b"SEND\n")


def receipt_ids(session: Engine[Delivered]) -> list[str]:
    """The receipt ids the SEND frames in the outgoing buffer ask for."""
    ids = []
    for line in bytes(session.outgoing).split(b"\n"):
        if line.startswith(b"receipt:"):
            ids.append(line.split(b":", 1)[1].decode())
    return ids


def answer(session: Engine[Delivered], rid: str, now: float) -> None:
    session.receive(receipt(rid), now)
    session.pump(now)


def verdict_then_reconnect(session: Engine[Delivered]) -> Reaction:
    """The transport saw the connection end (now); at the call's waits, its verdict
    (reconnecting), then the new connection (whose replayed SUBSCRIBEs are cleared)."""
    session.saw_end(ConnectionLost("cut"))
    steps = iter((lambda: session.lost(ConnectionLost("cut")), lambda: establish(session)))

    def react(wait: Wait) -> float:
        assert wait.what is Waiting.CHANGE
        next(steps)()
        session.outgoing.clear()
        return T0 + 1

    return react


def test_a_send_without_receipt_on_a_connected_session_never_waits() -> None:
    session = make_session()
    establish(session)
    session.outgoing.clear()
    result, waits = drive(
        Call(session, T0).send("/queue/a", b"x", None, None, None, False), time_passes
    )
    assert result is None
    assert waits == []
    assert sends(session) == 1


def test_a_send_with_receipt_waits_for_it_until_receipt_timeout() -> None:
    session = make_session(receipt_timeout=3.0)
    establish(session)
    session.outgoing.clear()

    def confirm(wait: Wait) -> float:
        assert wait.what is Waiting.RECEIPT
        assert wait.receipt is not None
        answer(session, wait.receipt, T0 + 1)
        return T0 + 1

    _, waits = drive(Call(session, T0).send("/queue/a", b"x", None, None, None, True), confirm)
    assert [w.deadline for w in waits] == [T0 + 3.0]
    assert not session.receipts  # the wait is over: nothing kept

    steps = Call(session, T0).send("/queue/a", b"x", None, None, None, True)
    with pytest.raises(ReceiptTimeout, match=r"within 3\.0 s"):
        drive(steps, time_passes)


def test_a_send_with_receipt_is_repeated_on_the_next_connection() -> None:
    session = make_session(reconnect=stompy.Reconnect(send_timeout=10.0), receipt_timeout=3.0)
    establish(session)
    session.outgoing.clear()
    seen: list[bytes] = []

    def cut_then_confirm(wait: Wait) -> float:
        if session.epoch == 1:  # the first connection is cut before the receipt
            seen.append(bytes(session.outgoing))
            session.lost(ConnectionLost("cut"))
            return T0 + 1
        if session.status is Status.RECONNECTING:
            assert wait.what is Waiting.CHANGE
            assert wait.deadline == T0 + 10.0  # send_timeout from the start of the call
            establish(session, T0 + 2)
            return T0 + 2
        seen.append(bytes(session.outgoing))
        assert wait.receipt is not None
        answer(session, wait.receipt, T0 + 2.5)
        return T0 + 2.5

    headers = {"order-id": "A-1"}
    drive(Call(session, T0).send("/queue/a", b"x", headers, None, None, True), cut_then_confirm)
    assert [frames.count(b"SEND\n") for frames in seen] == [1, 1]  # once per connection
    # The repeat says so (the first may have arrived), and keeps the caller's headers.
    assert RESENT_HEADER.encode() not in seen[0]
    assert b"\nstompy-resent:1\n" in seen[1]
    assert b"\norder-id:A-1\n" in seen[1]
    assert headers == {"order-id": "A-1"}


def test_a_repeated_send_gives_up_at_send_timeout() -> None:
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0), receipt_timeout=3.0)
    establish(session)

    def cut(wait: Wait) -> float:
        if session.status is Status.CONNECTED:
            session.lost(ConnectionLost("cut"))
            return T0 + 1
        return wait.deadline  # never reconnected

    with pytest.raises(ConnectionLost, match=r"not reconnected within 5\.0 s") as lost:
        drive(Call(session, T0).send("/queue/a", b"x", None, None, None, True), cut)
    # Its SEND went out before the cut: only its receipt is known lost.
    assert "may have reached the broker" in str(lost.value)


def test_a_send_that_never_went_out_does_not_say_it_may_have_arrived() -> None:
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0), receipt_timeout=3.0)
    establish(session)
    session.lost(ConnectionLost("cut"))  # before the call: nothing of it went out
    with pytest.raises(ConnectionLost, match=r"not reconnected within 5\.0 s") as lost:
        drive(Call(session, T0).send("/queue/a", b"x", None, None, None, True), time_passes)
    assert "may have reached" not in str(lost.value)


def test_a_send_in_a_transaction_is_not_repeated() -> None:
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)

    def cut(wait: Wait) -> float:
        session.lost(ConnectionLost("cut"))
        return T0 + 1

    with pytest.raises(ConnectionLost, match="lost before the receipt"):
        drive(Call(session, T0).send("/queue/a", b"x", None, None, tx, True), cut)


def test_a_call_waits_for_the_verdict_after_the_transport_saw_the_end() -> None:
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    session.saw_end(ConnectionLost("cut"))
    steps: list[Callable[[], object]] = [
        lambda: session.lost(ConnectionLost("cut")),
        lambda: establish(session),
    ]
    verdicts = iter(steps)

    def verdict(wait: Wait) -> float:
        assert wait.what is Waiting.CHANGE
        next(verdicts)()
        return T0 + 1

    session.outgoing.clear()
    _, waits = drive(Call(session, T0).send("/queue/a", b"x", None, None, None, False), verdict)
    assert len(waits) == 2  # the verdict (reconnecting), then the reconnect
    assert session.epoch == 3
    assert sends(session) == 1


def test_a_full_outgoing_buffer_is_waited_out_or_times_out() -> None:
    session = make_session(receipt_timeout=2.0)
    establish(session)
    session.outgoing += b"x" * (MAX_OUTGOING + 1)

    def drain(wait: Wait) -> float:
        assert wait.what is Waiting.ROOM
        del session.outgoing[: MAX_OUTGOING // 2]
        return T0 + 0.5

    _, waits = drive(Call(session, T0).flush(), drain)
    assert len(waits) == 1
    session.wrote(T0 + 0.5)  # what the transport says when it writes

    # The broker takes some, too slowly: the call times out, the connection stays.
    session.outgoing += b"x" * (MAX_OUTGOING + 1)

    def trickle(wait: Wait) -> float:
        del session.outgoing[:10]
        session.wrote(wait.deadline - 0.1)
        return wait.deadline

    with pytest.raises(StompTimeout, match="too slowly"):
        drive(Call(session, T0 + 1).flush(), trickle)
    assert session.ending is None
    # It takes nothing for receipt_timeout: it stopped reading, and the connection
    # ends (the transport's verdict follows), the same in both clients.
    with pytest.raises(ConnectionLost, match="stopped reading") as lost:
        drive(Call(session, T0 + 5).flush(), time_passes)
    assert session.ending is lost.value


def test_a_flush_whose_connection_ends_first_is_connection_lost() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    session.outgoing += b"x" * (MAX_OUTGOING + 1)

    def cut(wait: Wait) -> float:
        session.lost(ConnectionLost("cut"))
        return T0 + 1

    with pytest.raises(ConnectionLost, match="before the frames went out: cut"):
        drive(Call(session, T0).flush(), cut)


def test_a_transaction_of_an_earlier_connection_is_lost() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)
    epoch = session.epoch
    session.lost(ConnectionLost("cut"))
    establish(session, T0 + 1)
    session.outgoing.clear()
    with pytest.raises(TransactionLost) as lost:
        drive(Call(session, T0).end_transaction("COMMIT", tx, epoch, True), time_passes)
    # Its COMMIT never went out: the broker aborted it, which is known.
    assert not isinstance(lost.value, CommitOutcomeUnknown)
    drive(Call(session, T0).end_transaction("ABORT", tx, epoch, False), time_passes)
    assert not session.outgoing  # the broker aborted it already: nothing to send


@pytest.mark.parametrize("command", ["COMMIT", "ABORT"])
def test_a_transaction_end_that_waited_for_the_verdict_on_its_connection_sends_nothing(
    command: str,
) -> None:
    """As an answer (below): a COMMIT or ABORT asked for between the transport seeing
    the connection end and its verdict waits for it, and the transaction is then of an
    earlier connection, aborted by the broker: the COMMIT raises TransactionLost (not
    CommitOutcomeUnknown), the ABORT does nothing, as for one found stale at once (the
    core of the next connection refused them with "transaction 'tx-1' is not open")."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)
    epoch = session.epoch
    steps = Call(session, T0).end_transaction(command, tx, epoch, True)
    if command == "COMMIT":
        with pytest.raises(TransactionLost) as lost:
            drive(steps, verdict_then_reconnect(session))
        assert not isinstance(lost.value, CommitOutcomeUnknown)
    else:
        drive(steps, verdict_then_reconnect(session))
    assert session.epoch == epoch + 2  # it waited out the verdict and the reconnect
    assert not session.outgoing


def test_a_commit_whose_connection_ends_before_its_receipt_has_an_unknown_outcome() -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)

    def cut(wait: Wait) -> float:
        session.lost(ConnectionLost("cut"))
        return T0 + 1

    steps = Call(session, T0).end_transaction("COMMIT", tx, session.epoch, True)
    with pytest.raises(CommitOutcomeUnknown, match="cut; whether the broker committed") as info:
        drive(steps, cut)
    assert isinstance(info.value, TransactionLost)  # as it was caught before
    assert isinstance(info.value, ConnectionLost)


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_answering_a_message_of_an_earlier_connection_sends_nothing(command: str) -> None:
    session = make_session(reconnect=stompy.Reconnect())
    establish(session)
    inbox = session.subscribe("/queue/a", "client", "s", None, None, False).inbox
    session.receive(message("s", 1), T0)
    session.pump(T0)
    old = taken(inbox)
    session.lost(ConnectionLost("cut"))
    establish(session, T0 + 1)
    session.outgoing.clear()
    # Without a receipt: nothing asked, nothing to say.
    drive(Call(session, T0).acknowledge(command, old.event, old.epoch, None, False), time_passes)
    assert not session.outgoing
    # With one: a confirmation that cannot be true is an error that says what happens.
    with pytest.raises(AckLost, match=r"'m-1'.*delivers it again") as lost:
        drive(Call(session, T0).acknowledge(command, old.event, old.epoch, None, True), time_passes)
    assert isinstance(lost.value, ConnectionLost)
    assert not session.outgoing


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_an_answer_that_waited_for_the_verdict_on_its_connection_sends_nothing(
    command: str,
) -> None:
    """An answer asked for after the transport saw the connection end, before its
    verdict, waits for it (as every intent does), and the message is then of an
    earlier connection: its ack id must not go to the next one, where the broker never
    gave it (ours and ActiveMQ answer an ERROR, which ends that connection too; in the
    soak, each reconnect was ended so by the consumer's next ack, a storm)."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    inbox = session.subscribe("/queue/a", "client-individual", "s", None, None, False).inbox
    session.receive(message("s", 1), T0)
    session.pump(T0)
    held = taken(inbox)
    react = verdict_then_reconnect(session)
    drive(Call(session, T0).acknowledge(command, held.event, held.epoch, None, False), react)
    assert session.epoch == 3  # it waited out the verdict and the reconnect
    assert not session.outgoing
    session.receive(message("s", 2), T0 + 2)
    session.pump(T0 + 2)
    held = taken(inbox)
    with pytest.raises(AckLost, match=r"'m-2'.*delivers it again"):
        drive(
            Call(session, T0).acknowledge(command, held.event, held.epoch, None, True),
            verdict_then_reconnect(session),
        )
    assert not session.outgoing


@pytest.mark.parametrize("receipt", [False, True])
def test_a_send_in_a_transaction_that_waited_for_the_verdict_on_its_connection_sends_nothing(
    receipt: bool,
) -> None:
    """As a COMMIT (above): a send in a transaction, asked for between the transport
    seeing the connection end and its verdict, passed the transaction's check, waited,
    and went out on the next connection, whose core refused it ("transaction 'tx-1' is
    not open", a LocalProtocolError). The transaction is lost: TransactionLost, and
    nothing is sent."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)
    steps = Call(session, T0).send("/queue/a", b"x", None, None, tx, receipt)
    with pytest.raises(TransactionLost, match=rf"^transaction '{tx}' was lost .* SEND was not"):
        drive(steps, verdict_then_reconnect(session))
    assert session.epoch == 3  # it waited out the verdict and the reconnect
    assert not session.outgoing
    assert not session.receipts  # nothing left waiting


def test_a_send_many_in_a_transaction_of_an_earlier_connection_sends_nothing() -> None:
    """send_many() names its transaction once, for all of its chunks: one sent after a
    reconnect (waited out in the window, or come between two chunks) went to the next
    connection's core, which refused it."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    tx, _ = drive(Call(session, T0).begin(), time_passes)
    chunk = [Outgoing("/queue/a", "x"), Outgoing("/queue/a", "y")]
    steps = Call(session, T0).send_some(chunk, False, tx, 0)
    with pytest.raises(TransactionLost, match=rf"^transaction '{tx}' was lost"):
        drive(steps, verdict_then_reconnect(session))
    assert not session.outgoing
    with pytest.raises(TransactionLost):  # a chunk begun once it reconnected
        drive(Call(session, T0).send_some(chunk, False, tx, 2), time_passes)
    assert not session.outgoing


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_an_answer_in_a_transaction_that_waited_for_the_verdict_raises_transaction_lost(
    command: str,
) -> None:
    """An ack in a transaction asked for in the window sent nothing (the message is of
    the earlier connection), and said nothing either: the caller went on as if it were
    in the transaction, which the broker had aborted. It raises TransactionLost, as the
    transaction's own check does once the verdict is in."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    inbox = session.subscribe("/queue/a", "client-individual", "s", None, None, False).inbox
    session.receive(message("s", 1), T0)
    session.pump(T0)
    held = taken(inbox)
    tx, _ = drive(Call(session, T0).begin(), time_passes)
    steps = Call(session, T0).acknowledge(command, held.event, held.epoch, tx, False)
    with pytest.raises(TransactionLost, match=rf"'{tx}' was lost .* this {command} was not"):
        drive(steps, verdict_then_reconnect(session))
    assert session.epoch == 3
    assert not session.outgoing
    # A message of the next connection, in that transaction: lost too, nothing sent
    # (the core refused it as not open).
    session.receive(message("s", 2), T0 + 2)
    session.pump(T0 + 2)
    fresh = taken(inbox)
    with pytest.raises(TransactionLost):
        drive(
            Call(session, T0).acknowledge(command, fresh.event, fresh.epoch, tx, True), time_passes
        )
    assert not session.outgoing
    drive(
        Call(session, T0).acknowledge(command, fresh.event, fresh.epoch, None, False), time_passes
    )
    assert bytes(session.outgoing).startswith(command.encode())  # still the caller's to answer


def test_transaction_ids_are_unique_across_connections() -> None:
    """Each connection's core numbered its transactions from tx-1: a frame naming the
    lost tx-1 (a send waited out in the window, a send_many's later chunk, an id kept as
    a str) went into another task's new tx-1 on the next connection, and was committed
    with it. The engine numbers them across connections, and refuses the lost one's."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0))
    establish(session)
    lost, _ = drive(Call(session, T0).begin(), time_passes)
    session.lost(ConnectionLost("cut"))
    establish(session, T0 + 1)
    new, _ = drive(Call(session, T0).begin(), time_passes)
    assert (lost, new) == ("tx-1", "tx-2")
    session.outgoing.clear()
    with pytest.raises(TransactionLost):
        drive(Call(session, T0).send("/queue/a", b"x", None, None, lost, False), time_passes)
    assert not session.outgoing  # not in tx-2, nor anywhere
    drive(Call(session, T0).send("/queue/a", b"x", None, None, new, False), time_passes)
    assert b"transaction:tx-2" in bytes(session.outgoing)
    # An id the engine never made is the core's to refuse, as before.
    for other in ("tx-01", "tx-\u0661", "tx-", "mine"):
        with pytest.raises(LocalProtocolError, match="is not open"):
            drive(Call(session, T0).send("/queue/a", b"x", None, None, other, False), time_passes)


def test_a_receipt_of_the_next_connection_confirms_no_wait_of_an_earlier_one() -> None:
    """Each connection's core numbered its receipts from r-1. A send still waiting for
    r-1 of a lost connection (its thread or task not yet run when the next connection
    was made) took the next connection's r-1, another send's, for its own: it returned
    as confirmed, never repeated, though its SEND was lost; and its end forgot the
    other's receipt, which then waited until receipt_timeout. Ids now go on from the
    previous connection's."""
    session = make_session(reconnect=stompy.Reconnect(send_timeout=5.0), receipt_timeout=2.0)
    establish(session)
    lost = Call(session, T0).send("/queue/a", b"lost", None, None, None, True)
    first = next(lost)
    session.lost(ConnectionLost("cut"))
    establish(session, T0 + 1)
    session.outgoing.clear()
    other = Call(session, T0 + 1).send("/queue/a", b"other", None, None, None, True)
    theirs = next(other)
    answer(session, theirs.receipt or "", T0 + 1)
    try:
        again = lost.send(T0 + 1)  # woken at last: lost, so sent again, and waiting
    except StopIteration:
        pytest.fail(f"confirmed by the next connection's {theirs.receipt}, not its {first.receipt}")
    assert again.receipt not in (first.receipt, theirs.receipt)
    assert sends(session) == 2
    assert bytes(session.outgoing).count(f"{RESENT_HEADER}:1".encode()) == 1
    with pytest.raises(StopIteration):
        other.send(T0 + 1)  # confirmed by its own receipt
    answer(session, again.receipt or "", T0 + 1.5)
    with pytest.raises(StopIteration):
        lost.send(T0 + 1.5)


def test_goodbye_waits_for_the_disconnect_receipt_and_closes_either_way() -> None:
    session = make_session(receipt_timeout=2.0)
    establish(session)
    session.outgoing.clear()

    def confirm(wait: Wait) -> float:
        assert bytes(session.outgoing).startswith(b"DISCONNECT\n")
        assert wait.receipt is not None
        answer(session, wait.receipt, T0 + 0.1)
        return T0 + 0.1

    clean, waits = drive(Call(session, T0).goodbye(), confirm)
    assert clean is True  # the broker confirmed: a clean close
    assert len(waits) == 1
    assert session.status is Status.CLOSED
    assert session.failure is None
    again, waits = drive(Call(session, T0).goodbye(), time_passes)
    assert again is True  # a second goodbye says what the first did
    assert not waits

    silent = make_session(receipt_timeout=2.0)
    establish(silent)
    clean, _ = drive(Call(silent, T0).goodbye(), time_passes)  # no receipt: the timeout ends it
    assert clean is False  # ... and says so
    assert silent.status is Status.CLOSED
    assert drive(Call(silent, T0).goodbye(), time_passes)[0] is False

    lost = make_session()
    establish(lost)
    lost.lost(ConnectionLost("cut"))  # failed (no reconnect): nothing to confirm
    assert drive(Call(lost, T0).goodbye(), time_passes)[0] is False

    cancelled = make_session()
    establish(cancelled)
    steps = Call(cancelled, T0).goodbye()
    next(steps)
    steps.close()  # a close cut short (the async client's bound on it, say)
    assert cancelled.goodbye_confirmed is False
    assert cancelled.status is Status.CLOSED


def finish(steps: Steps[T], now: float) -> T:
    """Wake ``steps`` at ``now``, expecting it to end: its result (or what it raises)."""
    with pytest.raises(StopIteration) as done:
        steps.send(now)
    result: T = done.value.value
    return result


@pytest.mark.parametrize("confirmed", [True, False])
def test_a_receipt_awaited_while_closing_is_settled_by_the_goodbye(confirmed: bool) -> None:
    session = make_session(receipt_timeout=5.0)
    establish(session)
    session.outgoing.clear()
    send = Call(session, T0).send("/queue/a", b"x", None, None, None, True)
    rid = next(send).receipt
    assert rid is not None
    bye = Call(session, T0 + 0.1).goodbye()
    goodbye = next(bye).receipt  # DISCONNECT queued after the SEND
    assert goodbye is not None
    assert bytes(session.outgoing).index(b"DISCONNECT\n") > bytes(session.outgoing).index(b"SEND\n")
    # Woken while the connection closes (another receipt came, say): the send goes on
    # waiting, for its receipt or the DISCONNECT's.
    wait = send.send(T0 + 0.2)
    assert wait.receipt == rid
    if confirmed:
        # The DISCONNECT's receipt alone: the broker received every frame before it.
        answer(session, goodbye, T0 + 0.3)
        assert finish(bye, T0 + 0.3) is True
        assert finish(send, T0 + 0.3) is None  # confirmed, not lost
    else:
        # The broker closed the connection without a receipt; the transport is done.
        session.serving = False
        assert finish(bye, T0 + 0.3) is False
        with pytest.raises(stompy.errors.ClosedBeforeReceipt, match="unknown") as unknown:
            send.send(T0 + 0.3)
        assert isinstance(unknown.value, ConnectionLost)  # what such code caught before
    assert not session.receipts


def test_a_request_waiting_while_closing_ends_at_once() -> None:
    session = make_session()
    establish(session)
    request = Call(session, T0).request("/queue/service", b"?", {"timeout": 5.0})
    next(request)
    bye = Call(session, T0).goodbye()
    next(bye)  # the close begins, and waits
    with pytest.raises(ConnectionLost, match=r"closed by the caller \(close\(\)\)"):
        request.send(T0 + 0.1)  # no reply comes after the DISCONNECT: none is awaited


def test_a_cancelled_wait_forgets_its_receipt() -> None:
    session = make_session()
    establish(session)
    steps = Call(session, T0).send("/queue/a", b"x", None, None, None, True)
    wait = next(steps)
    assert wait.receipt in session.receipts
    steps.close()  # what a transport does when the waiting call is cancelled
    assert not session.receipts

"""What a received message, its frame and the core's objects do when pickled or copied,
blocking, asyncio and trio, pure and compiled alike: a frame travels to another process
as a frame; a message, which is answered on its connection, says so rather than failing
inside pickle (or, compiled, inside the core's constructor)."""

from __future__ import annotations

import copy
import pickle
import uuid

import anyio
import pytest

import stompy
from stompy.testing import run_broker, serve

TIMEOUT = 10.0


def queue() -> str:
    return f"/queue/{uuid.uuid4().hex}"


def check_message(message: stompy.Message | stompy.AsyncMessage) -> None:
    frame = pickle.loads(pickle.dumps(message.frame))
    assert type(frame) is stompy.Frame
    assert frame == message.frame
    assert (frame.body, frame.get("a"), frame.get("destination")) == (
        b"hello",
        "b",
        message.destination,
    )
    with pytest.raises(TypeError, match=r"cannot be pickled: pickle its frame \(message\.frame"):
        pickle.dumps(message)
    # One delivery, one handle: a copy is the message itself, answered once.
    assert copy.copy(message) is message
    assert copy.deepcopy(message) is message


def test_a_message_pickles_its_frame_not_itself_blocking() -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        destination = queue()
        with conn.subscribe(destination, ack="client") as sub:
            conn.send(destination, b"hello", headers={"a": "b"})
            message = sub.get(timeout=TIMEOUT)
            assert message is not None
            check_message(message)
            copy.copy(message).ack(receipt=True)
            with pytest.raises(stompy.errors.LocalProtocolError):
                message.ack()  # answered already, through its "copy"


@pytest.mark.anyio
async def test_a_message_pickles_its_frame_not_itself_async() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serve() as broker, stompy.AsyncConnection(broker.url) as conn:
            destination = queue()
            async with conn.subscribe(destination, ack="client") as sub:
                await conn.send(destination, b"hello", headers={"a": "b"})
                message = await sub.get()
                assert message is not None
                check_message(message)
                await copy.copy(message).ack(receipt=True)
                with pytest.raises(stompy.errors.LocalProtocolError):
                    await message.ack()


def test_the_core_s_received_objects_come_back_equal() -> None:
    protocol = stompy.ClientProtocol()
    protocol.connect(host="h")
    protocol.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    connected = protocol.next_event()
    protocol.subscribe("/q", id="s")
    protocol.receive_data(
        b"MESSAGE\nsubscription:s\nmessage-id:1\ndestination:/q\nx:a\\cb\n\nhi\x00"
    )
    received = protocol.next_event()
    assert isinstance(connected, stompy.events.Connected)
    assert isinstance(received, stompy.events.MessageReceived)
    for event in (connected, received):
        back = pickle.loads(pickle.dumps(event))
        assert type(back) is type(event)
        assert back == event
    frame = pickle.loads(pickle.dumps(received.frame))
    assert frame.headers == (
        ("subscription", "s"),
        ("message-id", "1"),
        ("destination", "/q"),
        ("x", "a:b"),
    )
    assert frame.body == b"hi"

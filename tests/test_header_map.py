"""``Frame.header_map()`` of a received frame is made from its header block at once,
without the pairs (a reply's handler reads ``message.headers``, and the pairs cost as
much again): the same map, in the same order, first entries winning, whether the pairs
were made before, after or never."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import Frame, received_block
from stompy._core.parser import FrameParser
from tests.test_codec_lazy import first_entries, parse_all
from tests.test_codec_properties import frames, versions


@given(versions, st.data())
def test_the_map_of_a_received_block_is_the_map_of_its_pairs(
    version: str, data: st.DataObject
) -> None:
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    stream = b"".join(encode(f, version) for f in sent)
    lazy = parse_all(stream, version)
    maps = [frame.header_map() for frame in lazy]  # while the frames hold their blocks
    for frame, mapped in zip(lazy, maps, strict=True):
        expected = first_entries(frame.headers)  # the pairs, made afterwards
        assert list(mapped.items()) == list(expected.items())  # order too
        assert frame.header_map() == expected  # and from the pairs


def test_a_received_frame_makes_its_map_without_its_pairs() -> None:
    (frame,) = FrameParser("1.2").parse(b"MESSAGE\nb:1\na:x\\cy\nb:2\nsubscription:s\n\n\x00")
    block = received_block(frame)
    assert block  # kept as it came
    mapped = frame.header_map()
    assert mapped == {"b": "1", "a": "x:y", "subscription": "s"}
    assert list(mapped) == ["b", "a", "subscription"]
    assert received_block(frame) == block  # the pairs are not made
    mapped["b"] = "changed"  # a new dict each time: the frame is not touched
    assert frame.header_map()["b"] == "1"
    assert frame.headers == (
        ("b", "1"),
        ("a", "x:y"),
        ("b", "2"),
        ("subscription", "s"),
    )
    (bare,) = FrameParser("1.2").parse(b"RECEIPT\n\n\x00")
    assert bare.header_map() == {}


def test_a_frame_made_by_hand_maps_its_first_entries() -> None:
    frame = Frame("SEND", (("x", "1"), ("y", "2"), ("x", "3")))
    assert list(frame.header_map().items()) == [("x", "1"), ("y", "2")]
    assert Frame("SEND", (("x", "1"), ("y", "2"))).header_map() == {"x": "1", "y": "2"}
    assert Frame("SEND").header_map() == {}

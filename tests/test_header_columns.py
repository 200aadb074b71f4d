"""``header_columns``: many frames' header entries as columns, equal to their pairs.

The fast path splits the received header blocks of many frames at once; these tests
hold it to the pairs each frame makes on its own, for every version's escaping, with
frames whose pairs were already made (or never came from the parser) in between.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import Frame, header_columns
from stompy._core.parser import FrameParser
from tests.test_codec_properties import frames, run, versions


def received(sent: list[Frame], version: str) -> list[Frame]:
    out, _, error = run([b"".join(encode(f, version) for f in sent)], version)
    assert error is None
    return out


def columns_of(frames_: list[Frame]) -> list[tuple[tuple[str, str], ...]]:
    starts, names, values = header_columns(frames_)
    assert len(starts) == len(frames_) + 1
    assert len(names) == len(values) == starts[-1]
    return [tuple(zip(names[a:b], values[a:b], strict=True)) for a, b in pairwise(starts)]


@given(versions, st.data())
def test_columns_equal_each_frames_pairs(version: str, data: st.DataObject) -> None:
    sent = data.draw(st.lists(frames(version), max_size=6))
    lazy = received(sent, version)
    # Some frames have made their pairs already: they take the other path.
    made = data.draw(st.lists(st.booleans(), min_size=len(lazy), max_size=len(lazy)))
    for frame, make in zip(lazy, made, strict=True):
        if make:
            _ = frame.headers
    expected = [f.headers for f in received(sent, version)]
    assert columns_of(lazy) == expected
    # Splitting left every frame as it was.
    assert [f.headers for f in lazy] == expected


@given(st.data())
def test_frames_of_several_versions_and_built_frames(data: st.DataObject) -> None:
    mixed: list[Frame] = []
    for version in data.draw(st.lists(versions, min_size=1, max_size=4)):
        mixed += received(data.draw(st.lists(frames(version), max_size=3)), version)
    mixed.insert(data.draw(st.integers(0, len(mixed))), Frame("MESSAGE", (("a:b", "c\nd"),)))
    expected = [f.headers for f in mixed]
    assert columns_of(mixed) == expected


def test_escaped_entries_and_repeats() -> None:
    data = b"MESSAGE\nmessage-id:ID\\cx\\c1\nk:a\\\\b\\nc\nk:second\n\nbody\x00MESSAGE\n\n\x00"
    parsed = FrameParser("1.2").parse(data * 2)
    entries = (("message-id", "ID:x:1"), ("k", "a\\b\nc"), ("k", "second"))
    assert columns_of(parsed) == [entries, (), entries, ()]


def test_no_frames() -> None:
    assert header_columns([]) == ([0], [], [])

"""Received messages as Arrow columns: every header column agrees with the message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import Frame
from stompy._core.parser import FrameParser
from stompy._engine.message import MessageBase
from stompy.spark._arrow import READ_ARROW_SCHEMA, READ_SCHEMA, _split_in_arrow, message_batch

names = st.sampled_from(["destination", "message-id", "redelivered", "content-type", "k", "a:b"])
values = st.sampled_from(["", "true", "false", "/queue/x", "ID:host:1", "a\\b", "line\nbreak"])


def message(frame: Frame) -> MessageBase:
    return MessageBase.made(frame, "sub-1", "client")


@given(
    st.sampled_from(["1.0", "1.1", "1.2"]),
    st.lists(st.lists(st.tuples(names, values), max_size=6), max_size=5),
    st.booleans(),
)
def test_columns_agree_with_each_message(
    version: str, header_lists: list[list[tuple[str, str]]], made: bool
) -> None:
    sent = [Frame("MESSAGE", tuple(h), b"body") for h in header_lists]
    if version == "1.0":  # no escaping: only what 1.0 can carry
        sent = [
            Frame(
                "MESSAGE",
                tuple((k, v) for k, v in f.headers if ":" not in k + v and "\n" not in k + v),
            )
            for f in sent
        ]
    frames = FrameParser(version).parse(b"".join(encode(f, version) for f in sent))
    if made:
        for frame in frames[::2]:
            _ = frame.headers
    messages = [message(f) for f in frames]
    batch = message_batch(messages, [1] * len(messages), range(len(messages)))
    assert batch.schema.equals(READ_ARROW_SCHEMA)
    for row, msg in zip(batch.to_pylist(), messages, strict=True):
        first = dict(msg.headers)
        assert row["headers"] == list(first.items())  # the first entry of a name wins
        assert row["destination"] == first.get("destination", "")
        assert row["message_id"] == first.get("message-id", "")
        assert row["redelivered"] == (first.get("redelivered") == "true")
        assert row["content_type"] == first.get("content-type")
        assert row["subscription"] == "sub-1"
        assert row["body"] == msg.body


@given(
    st.sampled_from(["1.0", "1.1", "1.2"]),
    st.lists(names, min_size=1, max_size=6),
    st.lists(st.lists(values, min_size=6, max_size=6), min_size=1, max_size=5),
)
def test_frames_of_the_same_names_are_split_by_arrow(
    version: str, header_names: list[str], value_lists: list[list[str]]
) -> None:
    # A stream's messages mostly carry the same names: Arrow splits their header
    # blocks (a string per frame crosses into it, not two per header), and the
    # columns say what each message says. Escapes, a repeated name and frames of
    # other names go the general way.
    if version == "1.0":
        header_names = [n for n in header_names if ":" not in n] or ["k"]
        value_lists = [
            [v for v in vs if ":" not in v and "\n" not in v] + [""] * 6 for vs in value_lists
        ]
    sent = [Frame("MESSAGE", tuple(zip(header_names, vs, strict=False))) for vs in value_lists]
    wire = b"".join(encode(f, version) for f in sent)
    frames = FrameParser(version).parse(wire)
    alike = len(set(header_names)) == len(header_names) and b"\\" not in wire
    assert (_split_in_arrow(frames) is not None) == alike
    messages = [message(f) for f in FrameParser(version).parse(wire)]
    batch = message_batch(messages, [1] * len(messages), range(3, 3 + len(messages)))
    for row, msg in zip(batch.to_pylist(), messages, strict=True):
        assert row["headers"] == list(dict(msg.headers).items())
        assert row["destination"] == msg.destination
        assert row["message_id"] == msg.message_id
        assert row["redelivered"] == msg.redelivered
        assert row["content_type"] == msg.content_type
        assert row["subscription"] == "sub-1"
    assert batch.column("offset").to_pylist() == list(range(3, 3 + len(messages)))


def test_a_repeated_header_keeps_its_first_entry() -> None:
    (frame,) = FrameParser("1.2").parse(
        b"MESSAGE\ndestination:/queue/a\nk:1\nk:2\ndestination:/queue/b\n\nx\x00"
    )
    (row,) = message_batch([message(frame)], [0], [7]).to_pylist()
    assert row["headers"] == [("destination", "/queue/a"), ("k", "1")]
    assert row["destination"] == "/queue/a"
    assert row["offset"] == 7


def test_a_repeat_is_found_where_the_names_line_up_with_a_pattern() -> None:
    # The names of the three frames, run together, repeat the first frame's: a, b, a, b,
    # a, b. Only the frames' sizes (2, 1, 3) show that the third holds "b" twice.
    frames = FrameParser("1.2").parse(
        b"MESSAGE\na:1\nb:2\n\n\x00MESSAGE\na:3\n\n\x00MESSAGE\nb:4\na:5\nb:6\n\n\x00"
    )
    rows = message_batch([message(f) for f in frames], [0] * 3, range(3)).to_pylist()
    assert [row["headers"] for row in rows] == [
        [("a", "1"), ("b", "2")],
        [("a", "3")],
        [("b", "4"), ("a", "5")],
    ]


def test_a_header_in_some_frames_only_is_null_in_the_others() -> None:
    frames = FrameParser("1.2").parse(
        b"MESSAGE\ncontent-type:text/plain\n\n\x00MESSAGE\nk:v\n\n\x00"
        b"MESSAGE\nk:w\ncontent-type:a/b\nredelivered:true\n\n\x00"
    )
    rows = message_batch([message(f) for f in frames], [0] * 3, range(3)).to_pylist()
    assert [row["content_type"] for row in rows] == ["text/plain", None, "a/b"]
    assert [row["redelivered"] for row in rows] == [False, False, True]
    assert [row["destination"] for row in rows] == ["", "", ""]


def test_read_schema_lists_the_row_fields() -> None:
    names = [part.split()[0] for part in READ_SCHEMA.split(", ")]
    assert names == [
        "destination",
        "subscription",
        "message_id",
        "redelivered",
        "content_type",
        "headers",
        "body",
        "received_at",
        "offset",
    ]

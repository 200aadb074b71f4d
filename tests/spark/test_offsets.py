"""The offset book of the streaming read: numbering, planning, releasing."""

from __future__ import annotations

from typing import Any

import pytest

from stompy.spark._offsets import OffsetBook, offset_dict, offset_value


def test_offsets_round_trip_and_reject_strangers() -> None:
    assert offset_value(offset_dict(42)) == 42
    bad: Any
    for bad in ({}, {"seq": -1}, {"seq": "1"}, {"seq": True}, []):
        with pytest.raises(ValueError, match="not an offset"):
            offset_value(bad)


def test_book_numbers_messages_and_plans_batches() -> None:
    book: OffsetBook[str] = OffsetBook(100)
    for name in "abcde":
        book.add(name, 7)
    assert len(book) == 5
    end = book.latest(100, 3)
    assert end == 103
    batch = book.plan(100, end)
    assert (batch.first, batch.handles, batch.received_us) == (100, ["a", "b", "c"], [7, 7, 7])
    assert book.unplanned() == 2
    assert book.latest(None, None) == 105  # PySpark 4.0: from where the last one ended
    assert book.latest(105, None) == 105  # nothing new


def test_book_releases_only_what_spark_was_handed() -> None:
    book: OffsetBook[str] = OffsetBook(0)
    for name in "abcd":
        book.add(name, 0)
    end = book.latest(0, 2)
    assert book.release(end) == []  # not planned yet: nothing to let go
    book.plan(0, end)
    assert book.release(end) == ["a", "b"]
    assert book.release(end) == []
    assert book.release(77) == []  # never issued
    later = book.latest(end, None)
    assert book.plan(end, later).handles == ["c", "d"]
    assert book.release(later) == ["c", "d"]
    assert len(book) == 0


def test_offsets_of_an_earlier_run() -> None:
    book: OffsetBook[str] = OffsetBook(1000)
    book.add("x", 0)
    # Spark starts from a checkpointed offset this run never issued.
    assert book.latest(500, None) == 1001
    assert book.plan(400, 500).handles == []  # a batch of the earlier run: empty
    assert book.plan(500, 1001).handles == ["x"]
    assert book.release(500) == []

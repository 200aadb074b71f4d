"""Frame, header lookup and the escaping rules of each STOMP version."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stompy._core.frames import (
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    COMMANDS,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    VERSIONS,
    Frame,
    escape,
    make_headers,
    unescape,
)
from stompy.errors import RemoteProtocolError

# -- Frame ---------------------------------------------------------------------------


def test_headers_keep_order_and_repeats() -> None:
    frame = Frame("MESSAGE", (("b", "1"), ("a", "2"), ("b", "3")))
    assert frame.headers == (("b", "1"), ("a", "2"), ("b", "3"))


def test_get_returns_the_first_entry() -> None:
    # "only the first header entry SHOULD be used as the value of header entry" (1.2)
    frame = Frame("MESSAGE", (("foo", "World"), ("foo", "Hello")))
    assert frame.get("foo") == "World"
    assert frame.get("missing") is None
    assert frame.get("missing", "dflt") == "dflt"
    assert frame.get("foo", "dflt") == "World"


def test_get_distinguishes_empty_value_from_missing() -> None:
    frame = Frame("MESSAGE", (("empty", ""),))
    assert frame.get("empty") == ""
    assert frame.get("empty", "dflt") == ""


def test_contains_and_header_map() -> None:
    frame = Frame("MESSAGE", (("x", "1"), ("y", "2"), ("x", "3")))
    assert "x" in frame
    assert "z" not in frame
    assert 42 not in frame
    assert frame.header_map() == {"x": "1", "y": "2"}


def test_header_names_are_case_sensitive() -> None:
    frame = Frame("MESSAGE", (("Foo", "1"),))
    assert frame.get("foo") is None
    assert frame.get("Foo") == "1"


def test_frame_compares_by_value_and_has_no_other_attributes() -> None:
    frame = Frame("SEND", (("a", "b"),), b"x")
    assert frame == Frame("SEND", (("a", "b"),), b"x")
    assert frame != Frame("SEND", (("a", "b"),), b"y")
    with pytest.raises(AttributeError):
        frame.extra = 1  # type: ignore[attr-defined]


def test_repr_hides_the_passcode_and_shortens_the_body() -> None:
    frame = Frame("CONNECT", (("login", "me"), ("passcode", "s3cret")), b"")
    text = repr(frame)
    assert "s3cret" not in text
    assert "'me'" in text
    long = Frame("SEND", (), b"x" * 100)
    text = repr(long)
    assert "x" * 64 + "..." in text
    assert "x" * 65 not in text
    short = Frame("SEND", (), b"abc")
    assert "b'abc'" in repr(short)


def test_make_headers_accepts_mappings_pairs_and_none() -> None:
    assert make_headers(None) == ()
    assert make_headers({"a": "1", "b": "2"}) == (("a", "1"), ("b", "2"))
    assert make_headers([("a", "1"), ("a", "2")]) == (("a", "1"), ("a", "2"))


@pytest.mark.parametrize("bad", [[("a", 1)], [(1, "a")], {"a": None}])
def test_make_headers_rejects_non_strings(bad: object) -> None:
    with pytest.raises(TypeError):
        make_headers(bad)  # type: ignore[arg-type]


def test_command_sets() -> None:
    assert CLIENT_COMMANDS.isdisjoint(SERVER_COMMANDS)
    assert COMMANDS == CLIENT_COMMANDS | SERVER_COMMANDS
    assert frozenset({"SEND", "MESSAGE", "ERROR"}) == BODY_COMMANDS
    assert frozenset({"CONNECT", "STOMP", "CONNECTED"}) == UNESCAPED_COMMANDS
    assert VERSIONS == ("1.0", "1.1", "1.2")


# -- escaping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "text", "escaped"),
    [
        ("1.0", "a:b\nc\\d\re", "a:b\nc\\d\re"),
        ("1.1", "a:b\nc\\d\re", "a\\cb\\nc\\\\d\re"),
        ("1.2", "a:b\nc\\d\re", "a\\cb\\nc\\\\d\\re"),
        ("1.2", "plain", "plain"),
        ("1.2", "", ""),
    ],
)
def test_escape_per_version(version: str, text: str, escaped: str) -> None:
    assert escape(text, version) == escaped
    assert unescape(escaped, version) == text


@pytest.mark.parametrize(
    ("version", "escaped", "text"),
    [
        ("1.1", "\\\\n", "\\n"),  # an escaped backslash followed by a plain n
        ("1.2", "\\\\\\n", "\\\n"),
        ("1.2", "\\c\\c", "::"),
        ("1.0", "\\t\\c", "\\t\\c"),  # 1.0 has no escaping at all
    ],
)
def test_unescape_reads_left_to_right(version: str, escaped: str, text: str) -> None:
    assert unescape(escaped, version) == text


@pytest.mark.parametrize(
    ("version", "escaped"),
    [
        ("1.1", "a\\tb"),
        ("1.1", "a\\rb"),  # \r is undefined in 1.1 (only 1.2 added it)
        ("1.2", "a\\tb"),
        ("1.2", "trailing\\"),
        ("1.2", "\\C"),
    ],
)
def test_undefined_escapes_are_fatal_when_strict(version: str, escaped: str) -> None:
    # "Undefined escape sequences such as \t ... MUST be treated as a fatal protocol error"
    with pytest.raises(RemoteProtocolError, match="undefined escape"):
        unescape(escaped, version)


@pytest.mark.parametrize(
    ("version", "escaped", "text"),
    [
        ("1.1", "a\\tb\\nc", "a\\tb\nc"),
        ("1.1", "a\\r", "a\\r"),
        ("1.2", "x\\", "x\\"),
        ("1.2", "\\t\\r", "\\t\r"),
    ],
)
def test_undefined_escapes_are_kept_literally_when_lenient(
    version: str, escaped: str, text: str
) -> None:
    assert unescape(escaped, version, strict=False) == text


@pytest.mark.parametrize(
    ("escaped", "sequence"),
    [
        ("a\\\\b\\tc", "\\t"),  # after an escaped backslash
        ("\\c\\n\\q", "\\q"),  # after defined sequences
        ("ok\\\\\\", "\\"),  # a backslash alone at the end
    ],
)
def test_the_undefined_sequence_is_named(escaped: str, sequence: str) -> None:
    with pytest.raises(RemoteProtocolError, match=f"sequence {re.escape(repr(sequence))} in"):
        unescape(escaped, "1.2")


def plain_unescape(text: str, version: str, strict: bool) -> str:
    """Unescaping one sequence at a time, left to right, as the specs describe it."""
    table = {"\\": "\\", "n": "\n", "c": ":"}
    if version == "1.2":
        table["r"] = "\r"
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or version == "1.0":
            out.append(char)
            i += 1
            continue
        follower = text[i + 1 : i + 2]
        if follower in table and follower:
            out.append(table[follower])
        elif strict:
            raise RemoteProtocolError(f"undefined {text[i : i + 2]!r}")
        else:
            out.append(text[i : i + 2])
        i += 2
    return "".join(out)


# Backslashes, the letters of escape sequences (and one of none), and EOL characters.
escapy_text = st.text(st.sampled_from("\\ncrt:x\n\r"), max_size=16)


@given(escapy_text, st.sampled_from(VERSIONS), st.booleans())
def test_unescape_reads_like_a_plain_scanner(text: str, version: str, strict: bool) -> None:
    try:
        expected = plain_unescape(text, version, strict)
    except RemoteProtocolError as exc:
        sequence = re.escape(str(exc).removeprefix("undefined "))
        with pytest.raises(RemoteProtocolError, match=f"undefined escape sequence {sequence} "):
            unescape(text, version, strict=strict)
    else:
        assert unescape(text, version, strict=strict) == expected


@given(st.text(max_size=20) | escapy_text, st.sampled_from(VERSIONS))
def test_unescape_undoes_escape(text: str, version: str) -> None:
    assert unescape(escape(text, version), version) == text

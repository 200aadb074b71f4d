from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import stompy
from stompy import cli
from stompy._engine.urls import Endpoint, parse_url, parse_urls


def test_full_stomp_url() -> None:
    ep = parse_url("stomp://guest:s%40cret@broker.example:61000/prod")
    assert ep == Endpoint("stomp", "broker.example", 61000, "guest", "s@cret", "prod")
    assert not ep.tls
    assert not ep.websocket


def test_defaults_and_tls() -> None:
    assert parse_url("stomp://localhost").port == 61613
    ep = parse_url("stomp+ssl://localhost")
    assert ep.port == 61614
    assert ep.tls
    assert ep.vhost is None


def test_encoded_slash_vhost_and_ipv6() -> None:
    ep = parse_url("stomp://[::1]:1234/%2F")
    assert ep.host == "::1"
    assert ep.port == 1234
    assert ep.vhost == "/"
    assert str(ep) == "stomp://[::1]:1234//"


def test_websocket_keeps_path_and_query() -> None:
    ep = parse_url("wss://h/ws?x=1")
    assert ep.websocket
    assert ep.tls
    assert ep.port == 443
    assert ep.path == "/ws?x=1"


def test_str_and_repr_hide_the_passcode() -> None:
    ep = parse_url("stomp://user:hunter2@h:1/v")
    assert "hunter2" not in str(ep)
    assert "hunter2" not in repr(ep)
    assert str(ep) == "stomp://user@h:1/v"


@pytest.mark.parametrize(
    "url",
    ["http://h", "stomp://", "stomp://:12", "stomp://h:notaport", "h:61613"],
)
def test_bad_urls_raise_value_error(url: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is checked below
        parse_url(url)


def test_bad_url_message_never_echoes_passcode() -> None:
    with pytest.raises(ValueError, match="scheme") as info:
        parse_url("amqp://user:hunter2@h")
    assert "hunter2" not in str(info.value)


def test_failover_lists() -> None:
    eps = parse_urls("stomp://a:1, stomp://b:2")
    assert [(e.host, e.port) for e in eps] == [("a", 1), ("b", 2)]
    assert parse_urls(["stomp://a", eps[1]])[1] is eps[1]
    assert parse_urls(eps[0]) == (eps[0],)
    with pytest.raises(ValueError, match="no broker URL"):
        parse_urls([])


def test_a_passcode_may_hold_commas() -> None:
    # Legal in a URL's userinfo: only a comma before the next scheme separates URLs.
    (one,) = parse_urls("stomp://app:Hunter2,Tail@host:1/")
    assert (one.login, one.passcode, one.host, one.port) == ("app", "Hunter2,Tail", "host", 1)
    first, second = parse_urls("stomp://app:a,b@h1:1,stomp+ssl://app:c,d@h2:2,")
    assert (first.passcode, first.host, second.passcode, second.host) == ("a,b", "h1", "c,d", "h2")
    assert second.tls


def test_a_bad_list_never_echoes_a_passcode_with_a_comma() -> None:
    with pytest.raises(ValueError, match="invalid port") as info:
        parse_urls("stomp://app:Hunter2,Tail@host:notaport/")
    assert "Hunter2" not in str(info.value)
    assert "Tail" not in str(info.value)


# -- a passcode never shows in an error --------------------------------------------------

#: Passcodes made of characters that appear nowhere else in the URLs or the messages,
#: mixed with what a URL gives a meaning to, raw (as a user types them, not encoded).
secrets = st.text(st.sampled_from("ΩßΩß,:/?#@%[]!;= "), min_size=1, max_size=12).filter(
    lambda p: "Ω" in p or "ß" in p
)
#: What can go wrong around the passcode: a missing host, a bad port, a bad scheme...
shapes = st.sampled_from(
    [
        "stomp://app:{p}@h1.example:61613/vh",
        "stomp://app:{p}@h1.example:notaport/",
        "stomp://app:{p}",
        "stomp://app:{p}/vh",
        "stomp://:{p}",
        "stomp://:{p}@",
        "amqp://app:{p}@h1.example",
        "app:{p}@h1.example",
        "stomp//app:{p}@h1.example",
        "stomp://app:{p}@[::1]:bad",
        "ws://app:{p}@h1.example:bad/stomp",
        "stomp://h2.example:1,stomp://app:{p}@h1.example:x",
        "stomp://app:{p}@h1.example:1, stomp+ssl://app:{p}@h2.example",
        "stomp://h2.example:1, stomp+ssl://app:{p}",
    ]
)


@given(shapes, secrets)
# A raw "@" in the passcode: what follows it looks like a host and a port.
@example("stomp://h2.example:1, stomp+ssl://app:{p}", "@:Ω")
@example("stomp://app:{p}", "@ß:Ω")
def test_no_error_shows_any_part_of_a_passcode(shape: str, passcode: str) -> None:
    url = shape.format(p=passcode)
    try:
        endpoints = parse_urls(url)
    except ValueError as exc:
        message = str(exc)
    else:
        message = ""
    assert "Ω" not in message
    assert "ß" not in message
    if message or "{p}@" not in shape:
        # Without its "@host", "stomp://app:/ß" is a valid URL (vhost ß), and
        # "stomp://app:@ß" another (host ß): nothing can tell them from a mistake.
        return
    for endpoint in endpoints:
        # Parsed: what a passcode with a raw "/", "?", "#" or "@" made of the URL is
        # refused above, so no part of one can hide in a host or a virtual host.
        assert "Ω" not in str(endpoint)
        assert "Ω" not in repr(endpoint)
        assert "ß" not in str(endpoint)
        assert "ß" not in repr(endpoint)


@given(st.text(st.sampled_from("Ωß,:!;= "), min_size=1, max_size=12))
def test_a_passcode_without_url_delimiters_is_taken_whole(passcode: str) -> None:
    url = f"stomp://app:{passcode}@h1.example:1,stomp://other:{passcode}@h2.example:2/v"
    first, second = parse_urls(url)
    assert (first.passcode, first.host, first.port) == (passcode, "h1.example", 1)
    assert (second.login, second.passcode, second.vhost) == ("other", passcode, "v")


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("stomp://guest:Secret9", "'stomp://guest:...' has an invalid port"),
        ("stomp://:Secret9", "'stomp://:...' has no host"),
        ("stomp://app:Sec/ret9@h1.example/", "must percent-encode"),
        ("stomp://app:Sec#ret9@h1.example/", "must percent-encode"),
        ("amqp://app:Secret9@h1.example", "unsupported URL 'amqp://h1.example'"),
        ("app:Secret9@h1.example", "the scheme must be one of"),
        ("stomp://app:Secret9@h1.example:bad", "'stomp://h1.example:bad' has an invalid port"),
    ],
)
def test_the_error_says_what_is_wrong_and_where(url: str, what: str) -> None:
    with pytest.raises(ValueError, match=re.escape(what)) as info:
        parse_url(url)
    assert "Secret9" not in str(info.value)
    assert "ret9" not in str(info.value)


@pytest.mark.parametrize("url", ["stomp://localhost:6161x", "stomp://localhost:70000"])
def test_an_invalid_port_says_what_a_port_is(url: str) -> None:
    # It said "URL 'stomp://localhost:...' has an invalid port", and no more.
    with pytest.raises(stompy.ConfigurationError) as info:
        stompy.Connection(url)
    assert str(info.value) == (
        "URL 'stomp://localhost:...' has an invalid port: want a number from 1 to 65535 "
        "after the host, as in stomp://login:passcode@host:61613"
    )


def test_an_encoded_delimiter_in_a_passcode_is_fine() -> None:
    ep = parse_url("stomp://app:Sec%2Fr%23e%3Ft%40@h1.example/%2F")
    assert (ep.passcode, ep.host, ep.vhost) == ("Sec/r#e?t@", "h1.example", "/")


def test_the_cli_shows_no_passcode_of_a_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    # cli.py reports the library's message: nothing to mask, since none holds a passcode.
    for url in ("stomp://app:Hunter2,Tail@host:notaport/", "stomp://guest:Hunter2"):
        assert cli.main(["send", url, "/queue/a", "x"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert "invalid port" in err
        assert "Hunter2" not in err
        assert "Tail" not in err


@pytest.mark.parametrize("url", ["stomp://localhost:0", "stomp://guest:guest@localhost:0/vh"])
def test_port_0_is_refused_not_taken_for_the_default(url: str) -> None:
    # It connected to 61613: another broker, perhaps, than the one meant (0 picks a
    # free port only where a broker listens: `stompy broker --port 0`).
    with pytest.raises(stompy.ConfigurationError, match="port 0") as info:
        stompy.Connection(url)
    assert "guest" not in str(info.value)
    assert parse_url("stomp://localhost").port == 61613  # no port: the default


@pytest.mark.parametrize("urls", [b"stomp://localhost:61613", bytearray(b"stomp://h")])
def test_a_url_in_bytes_is_named_as_bytes(urls: bytes) -> None:
    # bytes are a sequence too: it said "a broker URL must be a str, got int".
    with pytest.raises(TypeError, match=f"got {type(urls).__name__}$"):
        stompy.Connection(urls)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=f"got {type(urls).__name__}$"):
        parse_urls(urls)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url", ["stomp://h:61613?heart-beat=1000,1000", "stomp+ssl://h/vh?x=1", "stomp://h/#frag"]
)
def test_a_query_on_a_stomp_url_is_refused_not_ignored(url: str) -> None:
    # Options in the query (as other clients' URLs take them) were dropped without a word.
    with pytest.raises(stompy.ConfigurationError, match="keyword"):
        parse_url(url)
    assert parse_url("ws://h:15674/ws?x=1").path == "/ws?x=1"  # a WebSocket's is its own

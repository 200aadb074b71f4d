from __future__ import annotations

import pytest

from stompy._urls import Endpoint, parse_url, parse_urls


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

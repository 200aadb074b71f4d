"""Values a newcomer writes that were taken without a word, or refused in one place and
not in its twin: an empty virtual host, a capitalised Content-Type, a batch of sends
that stops partway."""

from __future__ import annotations

import pytest

import stompy

URL = "stomp://127.0.0.1:1"  # nobody listens: each is refused before connecting


def test_an_empty_virtual_host_is_refused_by_every_client() -> None:
    # It was sent as "host:" with no value, which names no virtual host.
    said = r"host: must name a virtual host \(None: the URL's path, else /\), got ''"
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.Connection(URL, host="")
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.AsyncConnection(URL, host="")
    with pytest.raises(stompy.ConfigurationError, match=said):
        stompy.send(URL, "/queue/x", "x", host="")

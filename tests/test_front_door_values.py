"""Values a newcomer writes that were taken without a word, or refused in one place and
not in its twin: an empty virtual host, a capitalised Content-Type, a batch of sends
that stops partway."""

from __future__ import annotations

from typing import Any, Final

import anyio
import pytest

import stompy
from stompy.testing import run_broker

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


#: A ``Content-Type`` (not in lower case) where stompy writes ``content-type`` itself:
#: beside ``content_type=``, or with a ``str`` body (labelled text/plain). Both were
#: sent, and receivers read the one the user did not mean.
_CAPITALISED: Final[list[dict[str, Any]]] = [
    {"body": b"{}", "headers": {"Content-Type": "application/json"}, "content_type": "text/x"},
    {"body": b"{}", "headers": {"CONTENT-TYPE": "a/b"}, "content_type": "a/b"},
    {"body": "{}", "headers": {"Content-Type": "application/json"}},
    {"body": "{}", "headers": {"Content-type": "application/json"}},
]
_SAID: Final = r"headers: 'Content-[Tt]ype' would be sent beside the content-type stompy writes"


def _sends(conn: Any, kwargs: dict[str, Any]) -> list[Any]:
    """Each way to send ``kwargs``'s message on ``conn`` (a call to make, or await)."""
    body = kwargs["body"]
    options = {k: v for k, v in kwargs.items() if k != "body"}
    return [
        lambda: conn.send("/queue/ct", body, **options),
        lambda: conn.send("/queue/ct", body, **options, receipt=True),
        lambda: conn.send(
            "/queue/ct", body, **{**options, "headers": [*options["headers"].items()]}
        ),
        lambda: conn.request("/queue/ct", body, **options, timeout=1),
        lambda: conn.send_many([stompy.Outgoing("/queue/ct", body, **options)]),
    ]


@pytest.mark.parametrize("kwargs", _CAPITALISED)
def test_a_capitalised_content_type_where_stompy_writes_one_is_refused(
    kwargs: dict[str, Any],
) -> None:
    with run_broker() as broker, stompy.Connection(broker.url) as conn:
        for call in _sends(conn, kwargs):
            with pytest.raises(
                stompy.ConfigurationError, match=_SAID.replace("[Tt]ype", "[Tt]ype|CONTENT-TYPE")
            ):
                call()
        with pytest.raises(stompy.ConfigurationError, match="STOMP header names are case"):
            stompy.send(broker.url, "/queue/ct", **kwargs)
        # Nothing went out; the connection goes on; a bytes body alone keeps the header
        # as written (a header of its own), where stompy writes no content-type.
        conn.send("/queue/ct", b"raw", headers={"Content-Type": "a/b"}, receipt=True)
        with conn.subscribe("/queue/ct") as sub:
            message = sub.get(timeout=10)
        assert message is not None
        assert message.body == b"raw"
        assert (message.content_type, message.headers["Content-Type"]) == (None, "a/b")
        assert broker.queue_depth("/queue/ct") == 0


@pytest.mark.anyio
@pytest.mark.parametrize("kwargs", _CAPITALISED)
async def test_a_capitalised_content_type_where_stompy_writes_one_is_refused_async(
    kwargs: dict[str, Any],
) -> None:
    with run_broker() as broker, anyio.fail_after(20):
        async with stompy.AsyncConnection(broker.url) as conn:
            for call in _sends(conn, kwargs):
                with pytest.raises(stompy.ConfigurationError, match="STOMP header names"):
                    await call()
            await conn.send("/queue/ct", b"raw", headers={"Content-Type": "a/b"}, receipt=True)
            assert broker.queue_depth("/queue/ct") == 1
        with pytest.raises(stompy.ConfigurationError, match="STOMP header names are case"):
            await stompy.send_async(broker.url, "/queue/ct", **kwargs)
        assert broker.queue_depth("/queue/ct") == 1

"""Where the test servers (the broker, the fault proxy) cannot listen: the error names
the address and the cause, from stompy.errors, and is still the OSError it was."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

import stompy
from stompy.errors import ListenFailed
from stompy.testing import fault_proxy, run_broker, run_fault_proxy, serve


@pytest.fixture
def taken() -> Iterator[int]:
    """A port of 127.0.0.1 that something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_port_in_use_names_the_address(taken: int, backend: str) -> None:
    # It was a bare "OSError: [Errno 98] Address already in use": which address?
    with pytest.raises(ListenFailed) as raised, run_broker(port=taken, backend=backend):
        pass  # pragma: no cover
    error = raised.value
    assert str(error).startswith(f"cannot listen on 127.0.0.1:{taken}: ")
    assert "in use" in str(error)
    assert isinstance(error, OSError)
    assert isinstance(error, stompy.errors.NetworkError)
    assert (error.host, error.port) == ("127.0.0.1", taken)
    cause = error.__cause__
    assert isinstance(cause, OSError)
    assert error.errno is not None
    assert error.errno == cause.errno


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_host_that_does_not_resolve_says_so(backend: str) -> None:
    with pytest.raises(
        ListenFailed, match=r"cannot listen on no\.such\.host\.invalid:0: the host does not resolve"
    ):
        with run_broker(host="no.such.host.invalid", backend=backend):
            pass  # pragma: no cover


def test_an_empty_host_says_how_to_name_every_interface() -> None:
    # It was the resolver's "Name or service not known", of an empty name.
    with pytest.raises(stompy.ConfigurationError, match=r"host must name.*'0\.0\.0\.0'"):
        with run_broker(host=""):
            pass  # pragma: no cover
    with pytest.raises(stompy.ConfigurationError, match="run_fault_proxy\\(\\): host must"):
        with run_fault_proxy("stomp://127.0.0.1:1", host=""):
            pass  # pragma: no cover


def test_the_websocket_port_in_use_is_the_one_named(taken: int) -> None:
    with pytest.raises(ListenFailed, match=f"cannot listen on 127.0.0.1:{taken}: "):
        with run_broker(websocket=True, websocket_port=taken):
            pass  # pragma: no cover


@pytest.mark.anyio
async def test_serve_and_the_fault_proxy_name_the_address(taken: int) -> None:
    with pytest.raises(ListenFailed, match=f"cannot listen on 127.0.0.1:{taken}: "):
        async with serve(port=taken):
            pass  # pragma: no cover
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{taken}: "):
        async with fault_proxy("stomp://127.0.0.1:1", port=taken):
            pass  # pragma: no cover

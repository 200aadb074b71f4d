"""The pytest plugin of stompy: ``stomp_broker`` and ``stomp_fault_proxy``, registered on install.

pytest loads this module in every run once the package is installed, so it imports
nothing but pytest up front; the broker and the proxy are imported when a test asks
for them.

``stomp_broker`` is a fresh broker for each test unless the ``stomp_broker_scope`` ini
option says otherwise (``session``, ``package``, ``module`` or ``class``): then one
broker serves that many tests, and it is reset before each of them (connections cut,
messages and counters dropped), so that nothing one test left behind reaches the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Literal

import pytest

if TYPE_CHECKING:
    from stompy.testing import Broker, FaultProxy

__all__ = (
    "stomp_broker",
    "stomp_broker_options",
    "stomp_fault_proxy",
    "stomp_fault_proxy_options",
)

_Scope = Literal["session", "package", "module", "class", "function"]
_SCOPES: Final[tuple[_Scope, ...]] = ("session", "package", "module", "class", "function")
SCOPE_OPTION: Final = "stomp_broker_scope"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        SCOPE_OPTION,
        "how long one stomp_broker lives: function (the default: a broker per test), "
        "class, module, package or session (one broker, reset before each test)",
        default="function",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Check ``stomp_broker_scope`` before any test is collected: a bad value is then
    one usage error. Found later, while pytest reads the fixtures' scopes, pytest
    reports it as an internal error of its own, sixty lines of traceback."""
    broker_scope("stomp_broker", config)


def broker_scope(fixture_name: str, config: pytest.Config) -> _Scope:
    """The scope of the broker behind ``stomp_broker``, from the ``stomp_broker_scope``
    ini option. Raises :class:`pytest.UsageError` for a value that is no scope, naming
    the option, the value and the scopes there are."""
    value = str(config.getini(SCOPE_OPTION)).strip() or "function"
    for scope in _SCOPES:
        if value == scope:
            return scope
    import difflib

    close = difflib.get_close_matches(value, _SCOPES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise pytest.UsageError(
        f"{SCOPE_OPTION} = {value!r} is not a fixture scope{hint}: use one of {', '.join(_SCOPES)}"
    )


@pytest.fixture(scope=broker_scope)
def stomp_broker_options() -> dict[str, Any]:
    """Keyword arguments for the ``stomp_broker`` fixture's :func:`run_broker`.

    Override it in a ``conftest.py`` (or a test module) to configure the broker, e.g.
    ``return {"users": {"app": "secret"}}``; ``{"websocket": True}`` adds a WebSocket
    listener (``stomp_broker.ws_url``). With a ``stomp_broker_scope`` wider than
    ``function``, the override needs that scope too.
    """
    return {}


@pytest.fixture(scope=broker_scope)
def _stomp_broker_server(stomp_broker_options: dict[str, Any]) -> Iterator[Broker]:
    """The running broker behind ``stomp_broker``, as long as ``stomp_broker_scope`` says,
    without the reset between tests."""
    from stompy.testing import run_broker

    with run_broker(**stomp_broker_options) as broker:
        yield broker


@pytest.fixture
def stomp_broker(_stomp_broker_server: Broker, request: pytest.FixtureRequest) -> Broker:
    """A STOMP broker for this test; connect to ``stomp_broker.url``.

    A new one for each test by default; with ``stomp_broker_scope`` set wider, a shared
    one, reset before the test (see :meth:`~stompy.testing.Broker.reset`).
    """
    if broker_scope("_stomp_broker_server", request.config) != "function":
        _stomp_broker_server.reset()
    return _stomp_broker_server


@pytest.fixture
def stomp_fault_proxy_options() -> dict[str, Any]:
    """Keyword arguments for the ``stomp_fault_proxy`` fixture's :func:`run_fault_proxy`.

    ``"target"`` is the URL to put the proxy in front of; without it, the proxy goes
    in front of the ``stomp_broker`` fixture. Override it to use another broker, e.g.
    ``return {"target": "stomp://guest:guest@localhost:61613/%2F"}``.
    """
    return {}


@pytest.fixture
def stomp_fault_proxy(
    request: pytest.FixtureRequest, stomp_fault_proxy_options: dict[str, Any]
) -> Iterator[FaultProxy]:
    """A fault proxy running for one test; connect to ``stomp_fault_proxy.url``.

    In front of ``stomp_broker`` unless ``stomp_fault_proxy_options`` names a target.
    """
    from stompy.testing import run_fault_proxy

    options = dict(stomp_fault_proxy_options)
    target = options.pop("target", None)
    if target is None:
        broker: Broker = request.getfixturevalue("stomp_broker")
        target = broker.url
    with run_fault_proxy(target, **options) as proxy:
        yield proxy

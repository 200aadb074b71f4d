"""Interop tests against real brokers (RabbitMQ, ActiveMQ and CoilMQ from ci/brokers).

Which brokers: STOMPY_BROKER_URL (with STOMPY_BROKER_LOGIN / _PASSCODE / _VHOST /
_NAME) when set, else RabbitMQ on 127.0.0.1:61613 and ActiveMQ on 127.0.0.1:61614.
A broker that does not answer a STOMP CONNECT is skipped with the reason, so
these tests cost nothing in a plain ``pytest`` run; ``nox -s interop`` starts the
brokers and runs them. A test marked ``quirk(kind, reason, effect=...)`` meets a known
fault of that broker (told by its CONNECTED ``server`` header), as in the conformance
suite: an expected failure there, or skipped; docs/brokers.md lists them.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from tests.interop._support import RESULTS, BrokerTarget, probe, targets_from_env

_TARGETS = targets_from_env()
_ANSWERS: dict[BrokerTarget, tuple[str | None, str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "reliability: long runs against a real broker (STOMPY_INTEROP_RELIABILITY=1)",
    )
    config.addinivalue_line(
        "markers",
        "quirk(kind, reason, versions=None, effect='xfail'): the broker of this kind "
        "differs here (xfail: a strict expected failure; flaky: a loose one; skip: not run)",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if RESULTS:
        terminalreporter.section("interop reliability")
        for line in RESULTS:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/interop/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.interop)


@pytest.fixture(params=_TARGETS, ids=[t.name for t in _TARGETS])
def broker(request: pytest.FixtureRequest) -> BrokerTarget:
    """A reachable broker (the test is skipped, with the reason, when it is not)."""
    target: BrokerTarget = request.param
    if target not in _ANSWERS:
        _ANSWERS[target] = probe(target)
    server, why = _ANSWERS[target]
    if server is None:
        pytest.skip(
            f"no STOMP broker for {target}: {why}. Start one with "
            "`ci/brokers/start.sh all`, or run `nox -s interop`"
        )
    found = dataclasses.replace(target, server=server)
    for mark in request.node.iter_markers("quirk"):
        kind, reason = mark.args
        if kind != found.kind:
            continue
        effect = mark.kwargs.get("effect", "xfail")
        why = f"{kind}: {reason} (docs/brokers.md)"
        if effect == "skip":
            pytest.skip(why)
        request.applymarker(pytest.mark.xfail(reason=why, strict=effect == "xfail"))
    return found


@pytest.fixture
def unique() -> str:
    """A fresh suffix for destination names: brokers keep state between tests."""
    return uuid.uuid4().hex[:10]

"""The test broker's core compiled (mypyc, in a wheel) and as Python behave the same.

A wheel compiles the modules of ``stompy/testing/_core/``; their ``.py`` files are
installed beside them. Here those sources are loaded a second time, as Python, and both
brokers are driven with the same frames from the same clients: every byte each client
connection writes, the counters and what the broker says about its connections must
agree. Run on the editable install both are Python (the test still drives the pure
broker through every scenario); under ``nox -s wheel`` the first is the compiled one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stompy._core.encoder import encode
from stompy._core.frames import VERSIONS, Frame
from stompy.testing._core import records as _records
from stompy.testing._core import store as _store

#: The modules of ``stompy/testing/_core/``, each after those it imports.
MODULES = ("records", "destinations", "connection", "store")


def _load_pure() -> SimpleNamespace:
    """The broker's modules loaded again from their ``.py`` files, whatever the
    imported ones are, each importing the Python copies of the others.

    They are loaded under their own names (they import each other by those), and the
    imported modules are put back afterwards."""
    package = "stompy.testing._core"
    folder = Path(_store.__file__).parent
    saved = {name: sys.modules.pop(f"{package}.{name}") for name in MODULES}
    loaded: dict[str, ModuleType] = {}
    try:
        for name in MODULES:
            spec = importlib.util.spec_from_file_location(
                f"{package}.{name}", folder / f"{name}.py"
            )
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            # dataclasses and the imports of the next modules look it up there.
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            loaded[name] = module
    finally:
        for name, module in saved.items():
            sys.modules[f"{package}.{name}"] = module
    return SimpleNamespace(
        BrokerConfig=loaded["records"].BrokerConfig,
        MessageStore=loaded["store"].MessageStore,
        records=loaded["records"],
        modules=loaded,
    )


PURE = _load_pure()

DESTINATIONS = ("/queue/a", "/queue/b", "/topic/t", "/queue/c:d")
TEXT = st.text(alphabet=st.sampled_from("ab:\\\né"), max_size=4)


@st.composite
def actions(draw: st.DrawFn) -> tuple[int, str, Any]:
    """One step of one of three clients: a frame to send, or a read of its output."""
    who = draw(st.integers(0, 2))
    # Mostly what keeps a session open (a frame the broker refuses closes it).
    kind = draw(
        st.sampled_from(
            ["SEND"] * 12
            + ["SUBSCRIBE"] * 3
            + ["read"] * 6
            + ["ACK"] * 2
            + ["NACK", "UNSUBSCRIBE", "BEGIN", "COMMIT", "ABORT", "DISCONNECT", "close", "raw"]
        )
    )
    if kind in ("read", "close"):
        return who, kind, None
    if kind == "raw":
        return who, kind, draw(st.sampled_from([b"\n", b"SEND\n\n\x00", b"BOGUS\n\n\x00"]))
    headers: list[tuple[str, str]] = []
    body = b""
    if kind == "SEND":
        headers.append(("destination", draw(st.sampled_from(DESTINATIONS))))
        headers += draw(st.lists(st.tuples(TEXT.filter(bool), TEXT), max_size=3))
        body = draw(st.sampled_from([b"", b"x", b"\x00y"]))
        if draw(st.booleans()):
            headers.append(("reply-to", draw(st.sampled_from(["/temp-queue/r", "/queue/r"]))))
    elif kind == "SUBSCRIBE":
        headers.append(("destination", draw(st.sampled_from(DESTINATIONS))))
        headers.append(("id", draw(st.sampled_from(["s1", "s2", "s:3"]))))
        headers.append(("ack", draw(st.sampled_from(["auto", "client", "client-individual"]))))
        if draw(st.booleans()):
            headers.append(("prefetch-count", draw(st.sampled_from(["1", "2"]))))
    elif kind == "UNSUBSCRIBE":
        headers.append(("id", draw(st.sampled_from(["s1", "s2", "s:3"]))))
    elif kind in ("ACK", "NACK"):
        ack = str(draw(st.integers(1, 6)))
        headers += [("id", ack), ("message-id", f"message-t0ken-{ack}"), ("subscription", "s1")]
    if kind in ("BEGIN", "COMMIT", "ABORT") or (
        kind in ("SEND", "ACK", "NACK") and not draw(st.integers(0, 4))
    ):
        headers.append(("transaction", draw(st.sampled_from(["t1", "t2"]))))
    if not draw(st.integers(0, 3)):
        headers.append(("receipt", "r"))
    return who, kind, (headers, body)


def _run(module: Any, versions: list[str], steps: list[tuple[int, str, Any]]) -> list[object]:
    """What one broker does with ``steps``: everything it wrote and said."""
    store = module.MessageStore(module.BrokerConfig(prefetch=2, max_queue=5))
    store._token = "t0ken"  # random in each store: the same here, so ids compare
    store._message_prefix = "message-t0ken-"
    seen: list[object] = []
    sessions = []
    for version in versions:
        session = store.open_connection(0.0, "peer")
        connect = Frame("CONNECT", (("accept-version", version), ("host", "h")))
        session.receive_data(encode(connect, "1.0"), 0.0)
        sessions.append(session)
        seen.append(session.data_to_send(0.0))
    for now, (who, kind, what) in enumerate(steps, start=1):
        session = sessions[who]
        if kind == "read":
            seen.append(session.data_to_send(float(now)))
        elif kind == "close":
            session.close("gone")
        elif kind == "raw":
            session.receive_data(what, float(now))
        else:
            headers, body = what
            try:
                data = encode(Frame(kind, tuple(headers), body), session.version)
            except ValueError:
                continue  # not a frame this version can carry
            session.receive_data(data, float(now))
        seen.append((session.state.value, session.buffered, session.close_reason))
    for session in sessions:
        seen.append(session.data_to_send(99.0))
    seen.append(dataclasses.astuple(store.stats))
    seen.append([dataclasses.astuple(info) for info in store.connection_infos()])
    seen.append([(d, store.queue_depth(d), store.unacked_count(d)) for d in store.destinations()])
    return seen


@settings(max_examples=150, deadline=None)
@given(
    versions=st.lists(st.sampled_from(VERSIONS), min_size=3, max_size=3),
    steps=st.lists(actions(), min_size=10, max_size=40),
)
def test_the_compiled_and_the_python_broker_agree(
    versions: list[str], steps: list[tuple[int, str, Any]]
) -> None:
    imported = SimpleNamespace(BrokerConfig=_records.BrokerConfig, MessageStore=_store.MessageStore)
    assert _run(imported, versions, steps) == _run(PURE, versions, steps)


def test_the_python_copy_is_python() -> None:
    for module in PURE.modules.values():
        assert str(module.__file__).endswith(".py")
    assert not PURE.records._COMPILED
    assert PURE.MessageStore is not _store.MessageStore
    # The copies use each other, not the imported modules.
    connection = PURE.MessageStore().open_connection(0.0)
    assert type(connection) is PURE.modules["connection"].ClientConnection

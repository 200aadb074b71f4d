"""Public names say where users import them from, not where they are defined.

The classes and functions of each public ``__all__`` are defined in private packages
(``stompy._core``, ``_engine``, ``_client``, ``stompy.testing._core``...); the public
module that re-exports one sets its ``__module__`` (stompy/_public.py, as anyio does),
so that reprs, the API reference and pickle show ``stompy.Connection``, never
``stompy._client.blocking.Connection``. The compiled core's classes (mypyc) take the
new ``__module__`` too: ``nox -s wheel`` runs this file against the wheel.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import sys
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import stompy
import stompy.engine
import stompy.protocol
import stompy.testing
from stompy import errors, events

#: The public modules whose ``__all__`` is published (stompy.spark is left out: see
#: its own tests; it needs PySpark).
PUBLIC_MODULES = (
    "stompy",
    "stompy.errors",
    "stompy.events",
    "stompy.protocol",
    "stompy.engine",
    "stompy.testing",
)


def public_values() -> Iterator[tuple[str, Any]]:
    """(public path, value) of every class and function of the public ``__all__``."""
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isroutine(value):
                yield f"{module_name}.{name}", value


PUBLIC_VALUES = dict(public_values())


@pytest.mark.parametrize("path", sorted(PUBLIC_VALUES))
def test_a_public_name_says_it_is_public(path: str) -> None:
    value = PUBLIC_VALUES[path]
    assert value.__module__ in PUBLIC_MODULES, f"{path} says it is {value.__module__}"
    # What pickle and the API reference do: the name found where __module__ says.
    assert getattr(sys.modules[value.__module__], value.__qualname__) is value


def test_the_engine_says_engine() -> None:
    """The session engine is published, shown and pickled by its class's own name; its
    old public name, ``ClientSession``, is the same class ("session" is STOMP's)."""
    assert repr(stompy.engine.Engine) == "<class 'stompy.engine.Engine'>"
    assert stompy.engine.ClientSession is stompy.engine.Engine
    assert "ClientSession" not in stompy.engine.__all__


@pytest.mark.parametrize("path", sorted(p for p, v in PUBLIC_VALUES.items() if inspect.isclass(v)))
def test_a_public_class_hints_still_resolve(path: str) -> None:
    """Its string annotations are read in its (new) module's namespace unless bound to
    the module that defines them."""
    typing.get_type_hints(PUBLIC_VALUES[path])


def test_the_reprs_name_the_public_module() -> None:
    assert repr(stompy.Connection) == "<class 'stompy.Connection'>"
    assert repr(stompy.protocol.Frame) == "<class 'stompy.protocol.Frame'>"
    assert repr(events.Receipt) == "<class 'stompy.events.Receipt'>"
    assert repr(stompy.engine.Inbox) == "<class 'stompy.engine.Inbox'>"
    assert repr(stompy.testing.BrokerConfig) == "<class 'stompy.testing.BrokerConfig'>"
    assert stompy.protocol.encode.__module__ == "stompy.protocol"


def round_trip(value: object) -> Any:
    """``value`` pickled and unpickled, found by its public path. The compiled core's
    classes come back too: each says how it is made again (``__reduce__``), since
    mypyc's ``__new__`` runs ``__init__`` and its frozen dataclasses refuse the
    setattr pickle would rebuild them with."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    assert b"stompy._" not in data, "pickled by a private path"
    return pickle.loads(data)


#: The errors whose constructor takes more than a message, made as stompy makes them.
MADE: dict[str, Callable[[], errors.StompError]] = {
    "BodyNotText": lambda: errors.BodyNotText("m", "utf-8", b"\xff", 0, 1, "invalid"),
    "ListenFailed": lambda: errors.ListenFailed("m", host="h", port=1, errno=98, strerror="s"),
    "MessageTooLarge": lambda: errors.MessageTooLarge("m", limit=1, size=2, option="o"),
    "ServerError": lambda: errors.ServerError("m", stompy.Frame("ERROR")),
    "TooLargeForServer": lambda: errors.TooLargeForServer("m", None, limit=1, size=2),
    "WebSocketClosed": lambda: errors.WebSocketClosed(1000, "bye"),
}


@pytest.mark.parametrize("name", errors.__all__)
def test_an_error_pickles(name: str) -> None:
    cls: type[errors.StompError] = getattr(errors, name)
    error = MADE[name]() if name in MADE else cls("boom")
    copy = round_trip(error)
    assert type(copy) is cls
    assert (copy.args, vars(copy)) == (error.args, vars(error))


def test_every_error_with_a_constructor_of_its_own_is_made_above() -> None:
    assert {n for n in errors.__all__ if "__init__" in vars(getattr(errors, n))} == set(MADE)


FRAME = stompy.Frame("RECEIPT", (("receipt-id", "r-1"),))
EVENTS = [
    events.Connected("1.2", "broker/1", "s-1", (0, 0), stompy.Frame("CONNECTED")),
    events.MessageReceived(stompy.Frame("MESSAGE", (("a", "b"),), b"x"), "sub-1", "auto"),
    events.Receipt("r-1", FRAME),
    events.Error("bad", None, stompy.Frame("ERROR", (("message", "bad"),))),
    events.ConnectionClosed(expected=True),
    events.HeartbeatTimedOut(silence=1.5),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: type(event).__name__)
def test_an_event_pickles(event: object) -> None:
    copy = round_trip(event)
    assert type(copy) is type(event)
    assert copy == event


def test_a_frame_pickles() -> None:
    copy = round_trip(FRAME)
    assert (copy.command, copy.headers, copy.body) == (FRAME.command, FRAME.headers, FRAME.body)

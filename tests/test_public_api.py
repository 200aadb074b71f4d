"""The public surface: ``__all__`` is honest, ordered and complete."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from types import ModuleType

import pytest

import stompy
from stompy import errors

#: Public modules whose ``__all__`` is checked; those not written yet are skipped.
PUBLIC_MODULES = [
    "stompy",
    "stompy.engine",
    "stompy.errors",
    "stompy.events",
    "stompy.protocol",
    "stompy.testing",
]


def public_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:  # pragma: no cover - depends on what exists
        pytest.skip(f"{name} does not exist")


def isort_key(name: str) -> tuple[int, str]:
    """The order ``__all__`` is kept in: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_name_exists(name: str) -> None:
    module = public_module(name)
    missing = [attr for attr in module.__all__ if not hasattr(module, attr)]
    assert missing == []


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_a_sorted_tuple_without_repeats(name: str) -> None:
    names = public_module(name).__all__
    assert isinstance(names, tuple)
    assert len(set(names)) == len(names)
    assert list(names) == sorted(names, key=isort_key)


def test_errors_all_names_every_exception_class() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }
    assert set(errors.__all__) == classes
    assert list(errors.__all__) == sorted(errors.__all__)
    assert len(set(errors.__all__)) == len(errors.__all__)


def test_the_client_surface_holds_no_core_and_no_error() -> None:
    """``stompy`` is the client; the sans-IO core is :mod:`stompy.protocol` and the
    errors are :mod:`stompy.errors`: each name is listed in one ``__all__`` only."""
    from stompy import protocol

    homes = [stompy.__all__, protocol.__all__, errors.__all__]
    listed = [name for names in homes for name in names]
    assert len(listed) == len(set(listed))
    for name in ("ClientProtocol", "Frame", "FrameParser", "State", "encode", "VERSIONS"):
        assert name in protocol.__all__
    assert "errors" in stompy.__all__


def test_the_old_paths_still_import() -> None:
    """Code written when the core and the errors were listed in ``stompy`` keeps
    working: the same objects, importable from the top."""
    from stompy import protocol

    for module in (protocol, errors):
        for name in module.__all__:
            assert getattr(stompy, name) is getattr(module, name), name


def test_one_message_class_per_name() -> None:
    """``stompy.Message`` is what a subscription hands out; the core's event is
    ``stompy.events.MessageReceived``. The event's old name still works, with a warning."""
    import warnings

    from stompy import events

    assert "Message" not in events.__all__
    assert "MessageReceived" in events.__all__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert events.Message is events.MessageReceived
    assert [w.category for w in caught] == [DeprecationWarning]
    with pytest.raises(AttributeError):
        _ = events.Nothing


def test_the_reference_documents_each_public_name_once() -> None:
    """docs/reference.md, as its hook expands it, has one entry per name of each public
    module's ``__all__`` (the submodules have theirs), and none for a private path."""
    import importlib.util
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    spec = importlib.util.spec_from_file_location("reference", docs / "hooks" / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    page = reference.expand((docs / "reference.md").read_text(encoding="utf-8"))
    entries = re.findall(r"^::: ([\w.]+)$", page, re.MULTILINE)
    assert len(entries) == len(set(entries))
    assert not [entry for entry in entries if "._" in entry]
    for name in ("stompy", "stompy.protocol", "stompy.testing", "stompy.spark"):
        module = importlib.import_module(name)
        for attr in module.__all__:
            path = f"{name}.{attr}"
            assert path in entries, f"{path} is public but not in the reference"
    for module_name in ("stompy.errors", "stompy.events", "stompy.engine"):
        assert module_name in entries


def test_the_testing_surface_is_what_a_test_of_an_application_needs() -> None:
    """A broker (in a thread or an event loop), its options and what it reports, and
    the fault proxy; the broker's insides stay in ``stompy.testing._core``."""
    import stompy.testing

    assert set(stompy.testing.__all__) == {
        "AsyncBroker",
        "AsyncFaultProxy",
        "Broker",
        "BrokerConfig",
        "BrokerOptions",
        "BrokerStats",
        "ConnectionInfo",
        "FaultProxy",
        "ProxyConnectionInfo",
        "ProxyStats",
        "SubscriberInfo",
        "fault_proxy",
        "run_broker",
        "run_fault_proxy",
        "serve",
    }
    for internal in ("BrokerCore", "ServerSession", "SessionState", "StoredMessage"):
        with pytest.raises(AttributeError):
            getattr(stompy.testing, internal)


def test_import_stompy_leaves_the_async_client_until_it_is_used() -> None:
    """A script or a Spark worker that uses only the blocking client does not pay for
    anyio and the task transport; the async names still import, published as stompy's."""
    code = (
        "import sys, stompy\n"
        "loaded = sorted(m for m in ('anyio', 'stompy._client.asynchronous') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
        "from stompy import AsyncConnection, send_async\n"
        "assert 'anyio' in sys.modules\n"
        "assert AsyncConnection.__module__ == send_async.__module__ == 'stompy'\n"
        "assert stompy.AsyncConnection is AsyncConnection\n"
        "assert 'AsyncTransaction' in dir(stompy)\n"
        "try:\n"
        "    stompy.AsyncConection\n"
        "except AttributeError as exc:\n"
        "    assert 'AsyncConection' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('a misspelled name imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

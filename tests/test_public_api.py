"""The public surface: ``__all__`` is honest, ordered and complete."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

import stompy
from stompy import errors

#: Public modules whose ``__all__`` is checked; those not written yet are skipped.
PUBLIC_MODULES = ["stompy", "stompy.engine", "stompy.errors", "stompy.events"]


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


def test_the_core_is_public() -> None:
    for name in (
        "ClientProtocol",
        "Frame",
        "FrameLimits",
        "FrameParser",
        "State",
        "encode",
        "errors",
        "ProtocolError",
        "LocalProtocolError",
        "FrameTooLarge",
        "StompError",
    ):
        assert name in stompy.__all__


def test_every_error_is_exported_at_the_top() -> None:
    for name in errors.__all__:
        assert name in stompy.__all__
        assert getattr(stompy, name) is getattr(errors, name)
    assert stompy.errors is errors


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

"""The events :class:`stompy.protocol.ClientProtocol` reports (for writing your own transport)."""

from __future__ import annotations

# The events are defined, and listed in __all__, once: in stompy._core.events.
from stompy._core import events as _events
from stompy._core.events import *  # noqa: F403
from stompy._core.events import __all__ as __all__
from stompy._public import publish

# Documented, shown and pickled as this module's (stompy/_public.py).
publish(globals(), __all__, __name__)


def __getattr__(name: str) -> object:
    # ``stompy.events.Message`` was this event's name until it was told apart from
    # ``stompy.Message``, the message a subscription hands out.
    if name == "Message":
        import warnings

        warnings.warn(
            "stompy.events.Message is now stompy.events.MessageReceived",
            DeprecationWarning,
            stacklevel=2,
        )
        return _events.MessageReceived
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

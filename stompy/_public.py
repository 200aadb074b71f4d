"""Names defined in private modules, published by a public one.

The public modules (:mod:`stompy`, :mod:`stompy.events`, :mod:`stompy.engine`,
:mod:`stompy.testing`) re-export what the private packages define, and :func:`publish`
makes each name say so, as anyio does: its ``__module__`` becomes the public module,
so that reprs, the documentation and pickle name the path users import it from.

A class's string annotations (``from __future__ import annotations``) are read by
:func:`typing.get_type_hints` in the namespace of the class's ``__module__``: they
become forward references bound to the module that defines them, as :mod:`typing`
binds a ``TypedDict``'s, so that the hints still resolve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ForwardRef

__all__ = ("publish",)


def publish(namespace: Mapping[str, Any], names: Iterable[str], module: str) -> None:
    """Give each of ``names`` in ``namespace`` defined in a private module of stompy
    the ``__module__`` ``module``; leave the others (public modules' names, values
    that have no module) as they are."""
    for name in names:
        value = namespace[name]
        defined_in = getattr(value, "__module__", None)
        if not isinstance(defined_in, str) or not defined_in.startswith("stompy."):
            continue
        if "._" not in defined_in:
            continue  # a public module's own
        if isinstance(value, type):
            annotations = vars(value).get("__annotations__")
            if isinstance(annotations, dict):
                for key, hint in annotations.items():
                    if isinstance(hint, str):
                        annotations[key] = ForwardRef(
                            hint, is_argument=False, module=defined_in, is_class=True
                        )
        value.__module__ = module
